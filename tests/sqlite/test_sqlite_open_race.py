"""Processes that open one file at once all succeed.

Every step of ``runstore.open`` that reads or writes the file (the read-only
look at an existing file, the first read, the switch to WAL, the migration)
waits out another process holding the file's lock, under the store's write
retry policy, so no opener fails with ``SQLITE_BUSY``. Real processes race
on new files, and the test process itself holds the lock each step meets for
300 ms (six times SQLite's own busy wait in runstore), as a descheduled
opener would.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import sqlite3
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runstore.sqlite import _migrations

pytestmark = [
    pytest.mark.processes,
    pytest.mark.skipif(sys.platform == "win32", reason="POSIX file locks"),
    pytest.mark.timeout(180),
]

OPENERS = 8
HOLD_S = 0.3
ANSWER_S = 60.0  # an opener silent this long is hung: the test fails

_OPENER = """
import json, sys, time
import runstore
print("ready", flush=True)
for line in sys.stdin:
    started = time.monotonic()
    try:
        runstore.open(line.rstrip("\\n")).close()
    except Exception as error:
        answer = {"ok": False, "error": repr(error), "cause": getattr(error, "cause", None)}
    else:
        answer = {"ok": True}
    answer["ms"] = round((time.monotonic() - started) * 1000)
    print(json.dumps(answer), flush=True)
"""


class Openers:
    """A pool of opener processes; each opens every path it is sent, once."""

    def __init__(self, count: int, cwd: Path) -> None:
        self.children = [
            subprocess.Popen(
                [sys.executable, "-c", _OPENER],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                cwd=cwd,
            )
            for _ in range(count)
        ]
        for child in self.children:
            assert self._line(child) == "ready"

    def _line(self, child: subprocess.Popen[str]) -> str:
        assert child.stdout is not None
        ready, _, _ = select.select([child.stdout], [], [], ANSWER_S)
        if not ready:
            raise AssertionError(f"an opener gave no answer within {ANSWER_S} s")
        line = child.stdout.readline()
        if not line:
            raise AssertionError("an opener process died")
        return line.rstrip("\n")

    def release(self, path: Path) -> None:
        """Send ``path`` to every opener at once."""
        for child in self.children:
            assert child.stdin is not None
            child.stdin.write(f"{path}\n")
            child.stdin.flush()

    def answers(self) -> list[dict[str, Any]]:
        return [json.loads(self._line(child)) for child in self.children]

    def open_all(self, path: Path) -> list[dict[str, Any]]:
        self.release(path)
        return self.answers()

    def close(self) -> None:
        for child in self.children:
            if child.stdin is not None:
                with contextlib.suppress(OSError):
                    child.stdin.close()
        for child in self.children:
            try:
                child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
            if child.stdout is not None:
                child.stdout.close()


@pytest.fixture(scope="module")
def openers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Openers]:
    pool = Openers(OPENERS, tmp_path_factory.mktemp("openers"))
    try:
        yield pool
    finally:
        pool.close()


def _failures(answers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [answer for answer in answers if not answer["ok"]]


def _migrated_once(path: Path) -> None:
    connection = sqlite3.connect(path)
    try:
        ids = sorted(row[0] for row in connection.execute("SELECT id FROM flows_migrations"))
    finally:
        connection.close()
    assert ids == sorted(m.id for m in _migrations.MIGRATIONS)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_openers_racing_on_new_files_all_succeed(openers: Openers, tmp_path: Path) -> None:
    """Twenty plain races of eight processes on a file that does not exist yet."""
    for number in range(20):
        path = tmp_path / f"race-{number}.db"
        answers = openers.open_all(path)
        assert _failures(answers) == [], f"round {number}"
        _migrated_once(path)
        assert _mode(path) == 0o600


@contextlib.contextmanager
def _hold(path: Path, *statements: str) -> Iterator[None]:
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        for statement in statements:
            holder.execute(statement)
        yield
        holder.execute("COMMIT")
    finally:
        holder.close()


def _held_round(openers: Openers, path: Path, *statements: str) -> list[dict[str, Any]]:
    """Open ``path`` from every opener while the test holds its lock for HOLD_S."""
    with _hold(path, *statements):
        openers.release(path)
        time.sleep(HOLD_S)  # the lock's holder is descheduled: no clock to advance here
    return openers.answers()


def test_openers_wait_out_a_lock_on_a_new_file(openers: Openers, tmp_path: Path) -> None:
    """The first read waits while another process holds a new, empty file
    exclusively (as an opener switching it to WAL does); the empty file the
    holder created 0644 becomes a 0600 database."""
    previous = os.umask(0o022)  # the holder's sqlite3 creates the file 0644
    try:
        for number in range(3):
            path = tmp_path / f"held-{number}.db"
            answers = _held_round(openers, path, "BEGIN EXCLUSIVE")
            assert _failures(answers) == [], f"round {number}"
            _migrated_once(path)
            assert _mode(path) == 0o600
    finally:
        os.umask(previous)


def test_openers_wait_out_a_writer_during_the_read_only_look(
    openers: Openers, tmp_path: Path
) -> None:
    """An existing empty SQLite file mid-write (its rollback journal beside
    it): the read-only look waits for the writer, then the file is set up."""
    for number in range(3):
        path = tmp_path / f"empty-{number}.db"
        connection = sqlite3.connect(path)
        connection.execute("PRAGMA user_version = 1")  # a header, no tables
        connection.close()
        answers = _held_round(openers, path, "BEGIN EXCLUSIVE", "PRAGMA user_version = 2")
        assert _failures(answers) == [], f"round {number}"
        _migrated_once(path)


def test_openers_wait_out_a_migration_in_progress(openers: Openers, tmp_path: Path) -> None:
    """A database of an earlier version whose write lock another process holds
    (as an opener migrating it does): the migration waits, then runs once."""
    for number in range(3):
        path = tmp_path / f"old-{number}.db"
        connection = sqlite3.connect(path, isolation_level=None)
        connection.execute("PRAGMA journal_mode = WAL")
        _migrations.apply(connection, 3)
        connection.close()
        answers = _held_round(openers, path, "BEGIN IMMEDIATE")
        assert _failures(answers) == [], f"round {number}"
        _migrated_once(path)
