"""What ``runstore.open`` does to the files at and beside its path.

Open changes nothing until it knows the file is new or ours. A file it refuses
(another application's SQLite database in either journal mode, a text file, a
corrupt file, a newer schema) keeps its bytes, its journal mode and its mode,
and nothing appears beside it. Only a database this open creates (a missing
path or an empty file) is made 0600, together with any ``-wal``/``-shm`` a
killed process left beside it; an existing database keeps its mode. A
``file:`` path, which SQLite may read as a URI naming another file, is refused
with ``invalid_run`` and leaves no file behind.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import runstore
from runstore import ManualClock, RunStoreError, UnsupportedDatabaseError
from runstore.sqlite import _migrations


@pytest.fixture(autouse=True)
def umask_022() -> Iterator[None]:
    """The usual umask: files SQLite creates on its own would be 0644."""
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


def _mode(path: Path | str) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def _snapshot(path: Path) -> dict[str, object]:
    """Everything in the file's folder: names, bytes and modes."""
    folder = path.parent
    return {
        name: (_mode(folder / name), (folder / name).read_bytes())
        for name in sorted(os.listdir(folder))
    }


def _journal_mode(path: Path) -> tuple[int, int]:
    """Header bytes 18 and 19: (1, 1) rollback journal, (2, 2) WAL."""
    header = path.read_bytes()[:20]
    return header[18], header[19]


def _foreign_rollback(path: Path) -> None:
    connection = sqlite3.connect(path)
    connection.execute("CREATE TABLE settings (key TEXT PRIMARY KEY, value TEXT)")
    connection.execute("INSERT INTO settings VALUES ('theme', 'dark')")
    connection.commit()
    connection.close()
    assert _journal_mode(path) == (1, 1)


def _foreign_wal(path: Path) -> None:
    """Another application's WAL database, closed cleanly (no -wal, no -shm)."""
    connection = sqlite3.connect(path)
    connection.execute("PRAGMA journal_mode = WAL")
    connection.execute("CREATE TABLE notes (body TEXT)")
    connection.execute("INSERT INTO notes VALUES ('hello')")
    connection.commit()
    connection.close()
    assert _journal_mode(path) == (2, 2)
    assert sorted(os.listdir(path.parent)) == [path.name]


def _text(path: Path) -> None:
    path.write_text("hello, these are my notes\n" * 20)


def _corrupt(path: Path) -> None:
    # A valid header, then noise where the schema should be.
    _foreign_rollback(path)
    data = bytearray(path.read_bytes())
    data[100:4096] = os.urandom(3996)
    path.write_bytes(bytes(data))


def _newer(path: Path) -> None:
    with runstore.open(path, clock=ManualClock(0)):
        pass
    raw = sqlite3.connect(path, isolation_level=None)
    raw.execute("INSERT INTO flows_migrations VALUES (9001, 'runstore_from_the_future')")
    raw.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    raw.close()


REFUSED: dict[str, Callable[[Path], None]] = {
    "foreign rollback-journal database": _foreign_rollback,
    "foreign WAL database": _foreign_wal,
    "text file": _text,
    "corrupt database": _corrupt,
    "newer runstore schema": _newer,
}


@pytest.mark.parametrize("make", REFUSED.values(), ids=list(REFUSED))
def test_a_refused_file_and_its_folder_are_left_exactly_as_they_were(
    tmp_path: Path, make: Callable[[Path], None]
) -> None:
    """Refused with UnsupportedDatabaseError; bytes, journal mode, mode and
    neighbours unchanged (a 0644 file stays 0644)."""
    path = tmp_path / "app.db"
    make(path)
    os.chmod(path, 0o644)
    before = _snapshot(path)
    with pytest.raises(UnsupportedDatabaseError) as caught:
        runstore.open(path, clock=ManualClock(0))
    assert caught.value.__cause__ is None
    assert caught.value.__context__ is None
    assert _snapshot(path) == before


def test_a_foreign_wal_database_in_use_is_left_as_it_was(tmp_path: Path) -> None:
    """With its owner's connection open (so its -wal holds the newest pages), a
    foreign WAL database is refused and neither it nor its -wal changes."""
    path = tmp_path / "app.db"
    _foreign_wal(path)
    owner = sqlite3.connect(path, isolation_level=None)
    try:
        owner.execute("INSERT INTO notes VALUES ('only in the wal')")
        wal = Path(str(path) + "-wal")
        before = (path.read_bytes(), wal.read_bytes(), _mode(path), _mode(wal))
        with pytest.raises(UnsupportedDatabaseError) as caught:
            runstore.open(path, clock=ManualClock(0))
        assert "not a runstore database" in str(caught.value)
        assert (path.read_bytes(), wal.read_bytes(), _mode(path), _mode(wal)) == before
        assert owner.execute("SELECT count(*) FROM notes").fetchone() == (2,)
    finally:
        owner.close()


def test_an_existing_database_keeps_a_wider_mode(tmp_path: Path) -> None:
    """0644 is the owner's choice for an existing database: open leaves it."""
    path = tmp_path / "runs.db"
    with runstore.open(path, clock=ManualClock(0)) as store:
        store.create("r", "{}")
    os.chmod(path, 0o644)
    with runstore.open(path, clock=ManualClock(0)) as store:
        assert store.get("r").status == "pending"
    assert _mode(path) == 0o644


def _private(path: Path) -> dict[str, int]:
    """The modes of the database and its side files that exist."""
    found = {}
    for suffix in ("", "-wal", "-shm"):
        name = str(path) + suffix
        if os.path.exists(name):
            found[suffix or "db"] = _mode(name)
    return found


def test_an_empty_file_becomes_a_private_database(tmp_path: Path) -> None:
    """An empty file holds nothing yet: this open makes the database, 0600."""
    path = tmp_path / "runs.db"
    path.touch(mode=0o644)
    assert _mode(path) == 0o644
    with runstore.open(path, clock=ManualClock(0)) as store:
        store.create("r", '{"api_key":"k"}')
        assert _private(path) == {"db": 0o600, "-wal": 0o600, "-shm": 0o600}


_KILLED_OWNER = """
import sys, time
import runstore
store = runstore.open(sys.argv[1])
store.create("old", '{"n": 1}')
print("open", flush=True)
time.sleep(60)
"""


def _stale_side_files(path: Path) -> None:
    """Leave -wal and -shm of a killed process beside a deleted database."""
    child = subprocess.Popen(
        [sys.executable, "-c", _KILLED_OWNER, str(path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "open"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
        if child.stdout is not None:
            child.stdout.close()
    for suffix in ("-wal", "-shm"):
        assert os.path.exists(str(path) + suffix)
        os.chmod(str(path) + suffix, 0o644)
    path.unlink()


@pytest.mark.processes
@pytest.mark.timeout(60)
def test_stale_side_files_of_a_killed_process_are_made_private(tmp_path: Path) -> None:
    """A new database created beside world-readable -wal/-shm has only 0600
    files while it is open, and after it is closed."""
    path = tmp_path / "runs.db"
    _stale_side_files(path)
    with runstore.open(path, clock=ManualClock(0)) as store:
        store.create("new", '{"api_key":"k"}')
        assert store.state().rows[0].run_id == "new"
        assert _private(path) == {"db": 0o600, "-wal": 0o600, "-shm": 0o600}
    assert set(_private(path).values()) == {0o600}


def test_side_files_of_an_existing_database_keep_their_mode(tmp_path: Path) -> None:
    """Only a database this open creates gets its side files tightened."""
    path = tmp_path / "runs.db"
    keeper = runstore.open(path, clock=ManualClock(0))
    try:
        keeper.create("r", "{}")
        shm = str(path) + "-shm"
        os.chmod(shm, 0o640)
        with runstore.open(path, clock=ManualClock(0)):
            assert _mode(shm) == 0o640
    finally:
        keeper.close()


def test_a_symlink_is_followed_to_the_file_sqlite_uses(tmp_path: Path) -> None:
    """Through a symlink, the real file and the side files beside it (where
    SQLite puts them) are the ones created private."""
    real = tmp_path / "data" / "runs.db"
    real.parent.mkdir()
    link = tmp_path / "link.db"
    link.symlink_to(real)
    with runstore.open(link, clock=ManualClock(0)) as store:
        store.create("r", '{"api_key":"k"}')
        assert _private(real) == {"db": 0o600, "-wal": 0o600, "-shm": 0o600}
    assert link.is_symlink()
    assert sorted(os.listdir(tmp_path)) == ["data", "link.db"]


@pytest.mark.parametrize(
    "path",
    ["file:runs.db", "file:runs.db?mode=rwc", "file::memory:", "file://{tmp}/runs.db"],
)
def test_a_file_uri_path_is_invalid_run_and_leaves_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    """A ``file:`` name is refused (str or PathLike), naming ``path``; nothing is created."""
    monkeypatch.chdir(tmp_path)
    path = path.format(tmp=tmp_path)
    for given in (path, Path(path)):
        with pytest.raises(RunStoreError) as caught:
            runstore.open(given, clock=ManualClock(0))
        assert caught.value.code == "invalid_run"
        assert caught.value.cause["field"] == "path"
        assert "URI" in str(caught.value)
    assert os.listdir(tmp_path) == []


def test_a_file_literally_named_file_colon_opens_with_a_dot_slash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``./file:runs.db`` is a plain relative path: that file, 0600."""
    monkeypatch.chdir(tmp_path)
    with runstore.open("./file:runs.db", clock=ManualClock(0)) as store:
        store.create("r", '{"api_key":"k"}')
        assert _private(tmp_path / "file:runs.db") == {"db": 0o600, "-wal": 0o600, "-shm": 0o600}
    assert sorted(os.listdir(tmp_path))[0] == "file:runs.db"


def test_a_database_at_an_earlier_version_upgrades_and_keeps_its_mode(tmp_path: Path) -> None:
    """An upgrade is not a creation: the file's mode is untouched."""
    path = tmp_path / "old.db"
    connection = sqlite3.connect(path, isolation_level=None)
    _migrations.apply(connection, 3)
    connection.close()
    os.chmod(path, 0o640)
    with runstore.open(path, clock=ManualClock(0)) as store:
        store.create("r", "{}")
    assert _mode(path) == 0o640
    applied = sqlite3.connect(path).execute("SELECT count(*) FROM flows_migrations").fetchone()
    assert applied == (len(_migrations.MIGRATIONS),)
