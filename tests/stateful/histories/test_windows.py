"""Widened windows: a transaction of a real store is held open between its
statements, seen from another connection while the store's thread is paused
(a barrier, not a sleep), on SQLite and on PostgreSQL; and the rule of where
a pause may fall."""

from __future__ import annotations

import random
import sqlite3
import threading
from collections.abc import Iterator

import pytest

import runstore
from runstore import ManualClock, OwnerId
from runstore.stateful._histories._windows import Widener, install, statement_kind

from ..._postgres import database_url

WAIT_S = 30.0  # a bound on waiting for the other thread, never a timing assertion


class Stepper:
    """A ``pause`` that holds each paused thread until the test steps it on
    (once ``on``): the test looks at the database while the store's thread
    stands between two statements."""

    def __init__(self) -> None:
        self.on = False
        self.waiting = False
        self.finished = False
        self.cond = threading.Condition()
        self.thread: threading.Thread | None = None

    def __call__(self, _seconds: float) -> None:
        if not self.on or threading.current_thread() is not self.thread:
            return  # only the store's thread stops, not the test's own connections
        with self.cond:
            self.waiting = True
            self.cond.notify_all()
            assert self.cond.wait_for(lambda: not self.waiting or not self.on, WAIT_S)

    def held(self) -> bool:
        """Wait until the thread pauses (True) or its call ends (False)."""
        with self.cond:
            assert self.cond.wait_for(lambda: self.waiting or self.finished, WAIT_S)
            return self.waiting

    def step(self) -> None:
        with self.cond:
            self.waiting = False
            self.cond.notify_all()

    def run(self, call) -> tuple[threading.Thread, list[object]]:
        """``call()`` in a thread of its own; its answer lands in the list."""
        done: list[object] = []

        def target() -> None:
            try:
                done.append(call())
            finally:
                with self.cond:
                    self.finished = True
                    self.on = False
                    self.cond.notify_all()

        self.on = True
        thread = self.thread = threading.Thread(target=target, daemon=True)
        thread.start()
        return thread, done


@pytest.fixture
def stepper() -> Iterator[Stepper]:
    found = Stepper()
    uninstall = install(Widener(random.Random(1), 1.0, pause=found))
    try:
        yield found
    finally:
        with found.cond:
            found.on = False
            found.cond.notify_all()
        uninstall()


def test_where_a_pause_may_fall() -> None:
    """After reads anywhere and after any statement inside a transaction, never
    after the statement that ends one."""
    seen: list[float] = []
    widener = Widener(random.Random(2), 1.0, pause=seen.append)
    widener.after("  -- why\n  SELECT 1", in_transaction=False)
    widener.after("UPDATE t SET a = 1", in_transaction=False)
    widener.after("UPDATE t SET a = 1", in_transaction=True)
    widener.after("COMMIT", in_transaction=False)
    widener.after("ROLLBACK", in_transaction=True)
    assert len(seen) == widener.pauses == 2
    assert statement_kind("/* x */ (with a as (select 1) select * from a)") == "WITH"
    assert statement_kind(b"begin immediate;") == "BEGIN"
    none = Widener(random.Random(2), 0.0, pause=seen.append)
    none.after("SELECT 1", in_transaction=True)
    assert none.pauses == 0


def test_a_sqlite_store_holds_its_write_transaction_open_between_statements(
    tmp_path, stepper: Stepper
) -> None:
    """The shipped SQLite store's claim pauses after a statement of its
    ``BEGIN IMMEDIATE`` transaction: another connection cannot take the write
    lock while it stands there, and then the claim commits."""
    path = str(tmp_path / "runs.db")
    store = runstore.open(path, clock=ManualClock(1_000))
    assert type(store._tm.connection).__name__.startswith("Widened")
    store.create("r1", "{}")
    snapshot = store.get("r1").snapshot
    other = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        thread, done = stepper.run(lambda: store.claim("r1", snapshot, OwnerId("h", 1, "n"), 1_000))
        assert stepper.held()
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            other.execute("BEGIN IMMEDIATE")
        assert done == []
        while stepper.held():
            stepper.step()
        thread.join(WAIT_S)
        assert type(done[0]).__name__ == "Claimed"
        other.execute("BEGIN IMMEDIATE")
        other.execute("ROLLBACK")
    finally:
        other.close()
        store.close()


def test_a_postgres_store_holds_its_transaction_open_between_statements(stepper: Stepper) -> None:
    """On PostgreSQL's general path the claim's transaction pauses between
    statements: once it has locked the run row, the server shows its session
    idle in a transaction that holds the lock (another session's ``FOR UPDATE
    NOWAIT`` fails), and the claim commits once the pauses end."""
    import psycopg

    url = database_url()
    store = runstore.open(url, clock=ManualClock(1_000), fast_path=False)
    store.create("r1", "{}")
    snapshot = store.get("r1").snapshot
    pid = store._tm.live().info.backend_pid
    locked_seen = 0
    try:
        with psycopg.connect(url, autocommit=True) as other:
            thread, done = stepper.run(
                lambda: store.claim("r1", snapshot, OwnerId("h", 1, "n"), 1_000)
            )
            while stepper.held():
                state, query = other.execute(
                    "SELECT state, query FROM pg_stat_activity WHERE pid = %s", (pid,)
                ).fetchone()
                assert state == "idle in transaction"
                if "FOR UPDATE" in query.upper():
                    with pytest.raises(psycopg.errors.LockNotAvailable), other.transaction():
                        other.execute(
                            "SELECT 1 FROM flows_runs WHERE run_id = 'r1' FOR UPDATE NOWAIT"
                        )
                    locked_seen += 1
                assert done == []
                stepper.step()
            thread.join(WAIT_S)
        assert locked_seen >= 1
        assert type(done[0]).__name__ == "Claimed"
        assert store.get("r1").claim is not None
    finally:
        store.close()


def test_torture_refuses_a_chance_outside_zero_to_one(tmp_path, capsys) -> None:
    from runstore.stateful._campaigns._torture import main

    assert main(["--db", str(tmp_path / "db"), "--widen", "1.5", "--quiet"]) == 2
    assert "--widen" in capsys.readouterr().err
    assert not (tmp_path / "db").exists()
