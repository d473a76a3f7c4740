"""A read-only SQLite store works on a file its user may only read, in a
folder it may not write, and creates, changes and re-modes nothing there.

The unprivileged cases run in a child process as ``nobody`` when the tests
run as root (which ignores file modes): the database and its folder belong
to root, readable by all. The child reads (``get``, ``state``,
``check_invariants``), is refused a write, and the folder's listing, every
file's bytes and every mode are what they were. The layouts: a file nobody
has open (no ``-wal``: read with ``immutable=1``), a file a live writer holds
(``-wal`` and ``-shm`` read-only to the child: read through SQLite's locks,
seeing the writer's uncheckpointed commits), a file a killed writer left with
its ``-wal``, and a file the child may not read at all.

In-process: a writer that arrives after a read-only open (no ``-wal`` then)
is followed, so its commits are seen; a read the file changed under is
discarded and repeated; a ``-wal`` without its ``-shm`` is refused in words.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import runstore
from runstore import ManualClock, RunStoreError

_CHILD = """
import json, os, sys
import runstore
uid, gid = int(sys.argv[2]), int(sys.argv[3])
if os.geteuid() == 0 and uid >= 0:
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)
found = {}
try:
    store = runstore.open(sys.argv[1], read_only=True)
except runstore.RunStoreError as error:
    print(json.dumps({"open": {"code": error.code, "cause": error.cause,
                               "message": str(error)}}))
    raise SystemExit(0)
with store:
    found["runs"] = [row.run_id for row in store.state().rows]
    found["status"] = store.get("r").status
    store.check_invariants()
    try:
        store.create("more", "{}")
    except runstore.RunStoreError as error:
        found["write"] = {"code": error.code, "stage": error.cause.get("stage")}
    found["immutable"] = getattr(store._tm.reader, "immutable", None)
print(json.dumps(found))
"""

_WRITER = """
import os, sys, time
import runstore
store = runstore.open(sys.argv[1], clock=runstore.ManualClock(0))
store.create("killed-writer", "{}")
print("ready", flush=True)
time.sleep(60)
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


def _read_unprivileged(path: Path) -> dict[str, Any]:
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


def _look(folder: Path) -> object:
    """The folder's listing, and every file's bytes and mode."""
    return [
        (name, (folder / name).read_bytes(), stat.S_IMODE((folder / name).stat().st_mode))
        for name in sorted(os.listdir(folder))
    ]


@pytest.fixture
def shared() -> Iterator[Path]:
    """A folder others can enter and read, but not write."""
    folder = Path(tempfile.mkdtemp(prefix="runstore-ro-"))
    os.chmod(folder, 0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder)


def _database(path: Path, mode: int = 0o644) -> None:
    with runstore.open(path, clock=ManualClock(0)) as store:
        store.create("r", "{}")
    os.chmod(path, mode)


@pytest.mark.processes
@pytest.mark.timeout(60)
def test_a_file_nobody_has_open(shared: Path) -> None:
    path = shared / "runs.db"
    _database(path)
    assert sorted(os.listdir(shared)) == ["runs.db"]
    before = _look(shared)
    found = _read_unprivileged(path)
    assert found == {
        "runs": ["r"],
        "status": "pending",
        "write": {"code": "persistence_failed", "stage": "read-only"},
        "immutable": True,
    }
    assert _look(shared) == before


@pytest.mark.processes
@pytest.mark.timeout(60)
def test_a_file_a_live_writer_holds(shared: Path) -> None:
    """The child reads through SQLite's locks with side files it may not
    write, and sees the writer's commits that are still only in the -wal."""
    path = shared / "runs.db"
    _database(path)
    with runstore.open(path, clock=ManualClock(0)) as writer:
        writer.create("in-the-wal", "{}")
        assert sorted(os.listdir(shared)) == ["runs.db", "runs.db-shm", "runs.db-wal"]
        for suffix in ("-wal", "-shm"):
            assert stat.S_IMODE(os.stat(f"{path}{suffix}").st_mode) == 0o644
        before = _look(shared)
        found = _read_unprivileged(path)
        assert _look(shared) == before
    assert found == {
        "runs": ["in-the-wal", "r"],
        "status": "pending",
        "write": {"code": "persistence_failed", "stage": "read-only"},
        "immutable": None,
    }


@pytest.mark.processes
@pytest.mark.timeout(60)
def test_a_file_a_killed_writer_left(shared: Path) -> None:
    path = shared / "runs.db"
    _database(path)
    with subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(path)], stdout=subprocess.PIPE, text=True
    ) as writer:
        try:
            assert writer.stdout is not None
            assert writer.stdout.readline().strip() == "ready"
        finally:
            writer.send_signal(signal.SIGKILL)
            writer.wait(timeout=30)
    assert os.path.getsize(f"{path}-wal") > 0
    before = _look(shared)
    found = _read_unprivileged(path)
    assert _look(shared) == before
    assert found["runs"] == ["killed-writer", "r"]
    assert found["write"] == {"code": "persistence_failed", "stage": "read-only"}


@pytest.mark.processes
@pytest.mark.timeout(60)
def test_a_file_this_user_may_not_read(shared: Path) -> None:
    path = shared / "runs.db"
    _database(path, mode=0o600)
    before = _look(shared)
    found = _read_unprivileged(path)
    assert found["open"]["code"] == "persistence_failed"
    assert found["open"]["cause"] == {"stage": "permissions", "errno": 13}
    assert "not readable by this process" in found["open"]["message"]
    assert _look(shared) == before


def test_a_writer_that_arrives_later_is_followed(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    _database(path)
    with runstore.open(path, read_only=True) as reader:
        assert reader._tm.reader is not None
        assert reader._tm.reader.immutable
        assert [row.run_id for row in reader.state().rows] == ["r"]
        with runstore.open(path, clock=ManualClock(0)) as writer:
            writer.create("later", "{}")
            assert [row.run_id for row in reader.state().rows] == ["later", "r"]
            assert not reader._tm.reader.immutable
            writer.create("later-still", "{}")
            assert reader.get("later-still").status == "pending"
        reader.check_invariants()


def test_a_read_the_file_changed_under_is_repeated(tmp_path: Path) -> None:
    """The first read sees the file as it was; a writer commits during it, so
    that answer is thrown away and the read runs again, seeing the commit."""
    path = tmp_path / "runs.db"
    _database(path)
    answers: list[int] = []
    with runstore.open(path, read_only=True) as reader:

        def body(connection: Any) -> int:
            count = int(connection.execute("SELECT count(*) FROM flows_runs").fetchone()[0])
            answers.append(count)
            if len(answers) == 1:
                with runstore.open(path, clock=ManualClock(0)) as writer:
                    writer.create("during", "{}")
            return count

        assert reader._tm.read("test", body) == 2
    assert answers == [1, 2]


@pytest.mark.timeout(60)
def test_a_wal_without_its_shm_is_refused_in_words(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    _database(path)
    with runstore.open(path, clock=ManualClock(0)) as writer:
        writer.create("in-the-wal", "{}")
        shutil.copy(path, tmp_path / "copy.db")
        shutil.copy(f"{path}-wal", tmp_path / "copy.db-wal")
    before = _look(tmp_path)
    with pytest.raises(RunStoreError) as caught:
        runstore.open(tmp_path / "copy.db", read_only=True)
    error = caught.value
    assert error.code == "persistence_failed"
    assert "-wal file but no -shm" in str(error)
    assert error.cause["stage"] == "side-files"
    assert _look(tmp_path) == before
