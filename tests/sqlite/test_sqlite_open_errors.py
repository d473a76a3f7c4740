"""Each reason ``runstore.open`` cannot use a path is said in its own words.

A directory, a path that is not a regular file, a file this process may not
read or write, a folder it may not write, a corrupt file, a file that is not
SQLite, an interrupted write it cannot judge, a tampered migration record and
a failed migration each have their own message and ``cause["stage"]``, never
the catch-all "could not open the database file". The permission cases run in
a child process as an unprivileged user (``nobody``) when the tests run as
root, which ignores file modes.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import sqlite3
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import runstore
from runstore import ManualClock, PersistenceFailedError, RunStoreError, UnsupportedDatabaseError
from runstore.sqlite import _migrations

_CHILD = """
import json, os, sys
import runstore
uid = int(sys.argv[2])
if os.geteuid() == 0 and uid >= 0:
    os.setgroups([])
    os.setgid(int(sys.argv[3]))
    os.setuid(uid)
try:
    runstore.open(sys.argv[1]).close()
except runstore.RunStoreError as error:
    print(json.dumps({"class": type(error).__name__, "code": error.code,
                      "message": str(error), "cause": error.cause}))
else:
    print(json.dumps({"class": None}))
"""


def _unprivileged() -> tuple[int, int]:
    """The uid and gid a child drops to: ``nobody`` under root, else ourselves."""
    if os.geteuid() != 0:
        return -1, -1
    try:
        entry = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("running as root without a 'nobody' user to drop to")
    return entry.pw_uid, entry.pw_gid


def _open_unprivileged(path: Path) -> dict[str, Any]:
    """What ``runstore.open(path)`` raises in a child without root's powers."""
    uid, gid = _unprivileged()
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(path), str(uid), str(gid)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


@pytest.fixture
def shared() -> Iterator[Path]:
    """A folder the unprivileged child can enter and read, but not write."""
    folder = Path(tempfile.mkdtemp(prefix="runstore-open-"))
    os.chmod(folder, 0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder)


def _database(path: Path) -> None:
    with runstore.open(path, clock=ManualClock(0)) as store:
        store.create("r", "{}")


def _refusal(path: Path | str) -> RunStoreError:
    with pytest.raises(RunStoreError) as caught:
        runstore.open(path, clock=ManualClock(0))
    error = caught.value
    assert error.method == "open"
    assert error.code == "persistence_failed"
    assert error.__cause__ is None
    assert error.__context__ is None
    assert "could not open the database file" not in str(error)
    return error


def test_a_directory(tmp_path: Path) -> None:
    error = _refusal(tmp_path)
    assert error.cause == {"stage": "directory"}
    assert "the path is a directory" in str(error)


def test_a_path_that_is_not_a_regular_file(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    error = _refusal(fifo)
    assert error.cause == {"stage": "not-a-file"}
    assert "not a regular file" in str(error)


@pytest.mark.processes
@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("mode", "word"), [(0o000, "readable"), (0o200, "readable"), (0o444, "writable")]
)
def test_a_file_this_process_may_not_use(shared: Path, mode: int, word: str) -> None:
    """An existing database the process may not read, or not write."""
    path = shared / "runs.db"
    _database(path)
    os.chmod(path, mode)
    before = (path.read_bytes(), stat.S_IMODE(path.stat().st_mode))
    found = _open_unprivileged(path)
    assert found["class"] == "PersistenceFailedError"
    assert found["cause"] == {"stage": "permissions", "errno": 13}
    assert f"the database file is not {word} by this process" in found["message"]
    assert (path.read_bytes(), stat.S_IMODE(path.stat().st_mode)) == before


@pytest.mark.processes
@pytest.mark.timeout(60)
def test_a_folder_this_process_may_not_write(shared: Path) -> None:
    """A usable file whose folder cannot take its -wal and -shm."""
    path = shared / "runs.db"
    _database(path)
    os.chmod(path, 0o666)
    found = _open_unprivileged(path)
    assert found["cause"] == {"stage": "permissions", "errno": 13}
    assert "folder is not writable" in found["message"]
    assert sorted(os.listdir(shared)) == ["runs.db"]


@pytest.mark.processes
@pytest.mark.timeout(60)
def test_a_new_file_in_a_folder_this_process_may_not_write(shared: Path) -> None:
    found = _open_unprivileged(shared / "runs.db")
    assert found["cause"] == {"stage": "create", "errno": 13}
    assert "could not create the database file" in found["message"]


@pytest.mark.processes
@pytest.mark.timeout(60)
def test_a_folder_this_process_may_not_enter(shared: Path) -> None:
    inner = shared / "private"
    inner.mkdir(mode=0o700)
    _database(inner / "runs.db")
    found = _open_unprivileged(inner / "runs.db")
    assert found["cause"] == {"stage": "permissions", "errno": 13}
    assert "folder cannot be entered" in found["message"]


def test_a_path_through_a_file(tmp_path: Path) -> None:
    """A path whose folder is a file cannot even be looked up."""
    (tmp_path / "notes.txt").write_text("hello")
    error = _refusal(tmp_path / "notes.txt" / "runs.db")
    assert error.cause == {"stage": "stat", "errno": 20}
    assert "could not look up the database file" in str(error)


def test_a_file_that_is_not_sqlite(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("hello\n" * 100)
    error = _refusal(path)
    assert isinstance(error, UnsupportedDatabaseError)
    assert error.cause == {"stage": "header"}
    assert "not a SQLite database" in str(error)


def test_a_corrupt_file(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    _database(path)
    data = bytearray(path.read_bytes())
    data[100:4096] = b"\xff" * 3996  # page 1's b-tree header and cells
    path.write_bytes(bytes(data))
    error = _refusal(path)
    assert isinstance(error, UnsupportedDatabaseError)
    assert error.cause["stage"] == "corrupt"
    assert "the database file is corrupt" in str(error)


def test_an_interrupted_write_of_a_foreign_file(tmp_path: Path) -> None:
    """A hot rollback journal: only a writer may roll it back, and open
    writes nothing before it knows the file; both files are left alone."""
    source = tmp_path / "source.db"
    writer = sqlite3.connect(source, isolation_level=None)
    writer.execute("CREATE TABLE t (x)")
    writer.execute("PRAGMA cache_size = 1")  # spill pages to the file mid-transaction
    writer.execute("BEGIN")
    writer.executemany("INSERT INTO t VALUES (?)", [(b"x" * 1000,) for _ in range(500)])
    path = tmp_path / "app.db"
    shutil.copy(source, path)
    shutil.copy(str(source) + "-journal", str(path) + "-journal")
    writer.execute("ROLLBACK")
    writer.close()
    before = (path.read_bytes(), Path(str(path) + "-journal").read_bytes())
    error = _refusal(path)
    assert error.cause["stage"] == "hot-journal"
    assert "hot journal" in str(error)
    assert (path.read_bytes(), Path(str(path) + "-journal").read_bytes()) == before


def _tamper(path: Path, *statements: str) -> None:
    _database(path)
    raw = sqlite3.connect(path, isolation_level=None)
    for statement in statements:
        raw.execute(statement)
    raw.close()


@pytest.mark.parametrize(
    "statements",
    [
        (  # rebuilt without its name column
            "CREATE TABLE m2 (id INTEGER PRIMARY KEY)",
            "INSERT INTO m2 SELECT id FROM flows_migrations",
            "DROP TABLE flows_migrations",
            "ALTER TABLE m2 RENAME TO flows_migrations",
        ),
        ("ALTER TABLE flows_migrations RENAME COLUMN name TO label",),
        ("UPDATE flows_migrations SET name = CAST(name AS BLOB) WHERE id = 1001",),
    ],
    ids=["column dropped", "column renamed", "name stored as a blob"],
)
def test_a_tampered_migration_record(tmp_path: Path, statements: tuple[str, ...]) -> None:
    """The record is not one this version wrote: refused as it is."""
    path = tmp_path / "runs.db"
    _tamper(path, *statements)
    before = path.read_bytes()
    error = _refusal(path)
    assert isinstance(error, UnsupportedDatabaseError)
    assert error.cause["stage"] == "migration-record"
    assert "the migration record is not one this version wrote" in str(error)
    assert path.read_bytes() == before


def test_a_renamed_migration_is_somebody_elses_bookkeeping(tmp_path: Path) -> None:
    """A known id under another name is not a runstore record at all."""
    path = tmp_path / "runs.db"
    _tamper(path, "UPDATE flows_migrations SET name = 'elsewhere_initial' WHERE id = 1001")
    error = _refusal(path)
    assert error.cause == {"stage": "schema", "foreign_migrations": [1001]}
    assert "not a runstore database" in str(error)


def test_a_migration_that_fails(tmp_path: Path) -> None:
    """A step the rows of the file break: named, rolled back."""
    # Stop just before the step that moves run state into its own table; the
    # bad text planted under the old layout then breaks that step's CHECK.
    count = next(i for i, step in enumerate(_migrations.MIGRATIONS) if step.id == 2002)
    path = tmp_path / "old.db"
    connection = sqlite3.connect(path, isolation_level=None)
    _migrations.apply(connection, count)
    connection.execute(
        "INSERT INTO flows_runs (run_id, status, created_at_ms, state_json) "
        "VALUES ('r', 'pending', 0, '{}')"
    )
    connection.execute("PRAGMA ignore_check_constraints = ON")
    connection.execute("UPDATE flows_runs SET state_json = 'not json'")
    connection.close()
    error = _refusal(path)
    assert type(error) is PersistenceFailedError
    assert error.cause == {"stage": "migrate", "sqlite_error": "SQLITE_CONSTRAINT_CHECK"}
    assert "a schema migration failed" in str(error)
    applied = sqlite3.connect(path).execute("SELECT count(*) FROM flows_migrations").fetchone()
    assert applied == (count,)


def test_every_reason_has_its_own_message(tmp_path: Path) -> None:
    """The refusals a root process can provoke say different things."""
    text = tmp_path / "notes.txt"
    text.write_text("hello\n" * 100)
    foreign = tmp_path / "app.db"
    connection = sqlite3.connect(foreign)
    connection.execute("CREATE TABLE t (x)")
    connection.commit()
    connection.close()
    tampered = tmp_path / "runs.db"
    _tamper(tampered, "ALTER TABLE flows_migrations RENAME COLUMN name TO label")
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    messages = [str(_refusal(where)) for where in (tmp_path, fifo, text, foreign, tampered)]
    assert len(set(messages)) == len(messages)
