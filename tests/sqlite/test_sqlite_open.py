"""``runstore.open``: the file it creates, the modes it sets, its lifetime.

A new file is created 0600 before SQLite opens it, so the WAL files SQLite
derives from it are 0600 too; an existing database keeps the mode its owner
gave it (``tests/sqlite/test_sqlite_open_files.py`` has the rest of that story). WAL,
foreign keys and secure_delete are on; durability picks SQLite's synchronous
mode. Defaults are ``SystemClock`` and ``SqlConsensus``; a strategy's
``on_open`` runs once inside a write transaction.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import runstore
from runstore import ManualClock, RunStoreError, SystemClock
from runstore.consensus import LocalConsensus, SqlConsensus
from runstore.sqlite import SqliteRunStore

from .._sqlite import OWNER, PENDING, raw


@pytest.fixture
def umask_zero() -> Iterator[None]:
    """Run with an empty umask, so only the store's own choice restricts modes."""
    previous = os.umask(0)
    try:
        yield
    finally:
        os.umask(previous)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.usefixtures("umask_zero")
def test_the_file_and_its_wal_files_are_0600(tmp_path: Path, clock: ManualClock) -> None:
    """Database, -wal and -shm are readable by the owner only."""
    path = tmp_path / "runs.db"
    with runstore.open(path, clock=clock) as store:
        store.create("run", '{"token":"secret"}')
        assert store.claim_and_own("run", PENDING, OWNER, 0) is not None
        wal = Path(str(path) + "-wal")
        shm = Path(str(path) + "-shm")
        assert wal.exists()
        assert shm.exists()
        assert _mode(path) == 0o600
        assert _mode(wal) == 0o600
        assert _mode(shm) == 0o600


@pytest.mark.usefixtures("umask_zero")
def test_an_existing_database_keeps_its_mode(tmp_path: Path, clock: ManualClock) -> None:
    """A deliberate 0640 survives every open; the WAL files SQLite makes follow it."""
    path = tmp_path / "runs.db"
    with runstore.open(path, clock=clock):
        pass
    os.chmod(path, 0o640)
    for number in range(2):
        with runstore.open(path, clock=clock) as store:
            store.create(f"run-{number}", "{}")
            assert _mode(path) == 0o640
            assert _mode(Path(str(path) + "-wal")) == 0o640
            assert _mode(Path(str(path) + "-shm")) == 0o640
    assert _mode(path) == 0o640


@pytest.mark.parametrize(("durability", "synchronous"), [("full", 2), ("normal", 1)])
def test_pragmas_follow_the_contract(
    tmp_path: Path, clock: ManualClock, durability: Any, synchronous: int
) -> None:
    """WAL, foreign keys, secure_delete on; durability sets synchronous."""
    with runstore.open(tmp_path / "runs.db", clock=clock, durability=durability) as store:
        connection = raw(store)
        assert connection.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert connection.execute("PRAGMA foreign_keys").fetchone() == (1,)
        assert connection.execute("PRAGMA secure_delete").fetchone() == (1,)
        assert connection.execute("PRAGMA synchronous").fetchone() == (synchronous,)


@pytest.mark.parametrize(
    ("path", "options", "field"),
    [
        (42, {}, "path"),
        ("", {}, "path"),
        ("a\x00b", {}, "path"),
        (":memory:", {"durability": "off"}, "durability"),
        (":memory:", {"durability": "FULL"}, "durability"),
    ],
)
def test_bad_arguments_are_invalid_run(path: Any, options: dict[str, Any], field: str) -> None:
    """open refuses what it cannot use before touching any file."""
    with pytest.raises(RunStoreError) as caught:
        runstore.open(path, **options)
    assert caught.value.code == "invalid_run"
    assert caught.value.cause["field"] == field


def test_defaults_are_the_system_clock_and_sql_consensus() -> None:
    """clock=None and consensus=None mean SystemClock() and SqlConsensus()."""
    with runstore.open(":memory:") as store:
        assert isinstance(store.clock, SystemClock)
        assert isinstance(store.consensus, SqlConsensus)


def test_closing_twice_is_fine_and_a_closed_store_refuses(clock: ManualClock) -> None:
    """close() is idempotent; an operation after it is persistence_failed."""
    store = runstore.open(":memory:", clock=clock)
    with store as entered:
        assert entered is store
    store.close()
    with pytest.raises(RunStoreError) as caught:
        store.get("run")
    assert caught.value.code == "persistence_failed"
    with pytest.raises(RunStoreError) as caught:
        store.create("run", "{}")
    assert caught.value.code == "persistence_failed"


def test_memory_stores_are_private(clock: ManualClock) -> None:
    """Two ':memory:' stores share nothing."""
    with runstore.open(":memory:", clock=clock) as a, runstore.open(":memory:", clock=clock) as b:
        a.create("run", "{}")
        assert b.state().rows == ()
        assert b.revision() == 0


class _Recording(LocalConsensus):
    def __init__(self) -> None:
        super().__init__()
        self.opened: list[bool] = []

    def on_open(self, tx: Any) -> None:
        self.opened.append(tx.connection.in_transaction)
        super().on_open(tx)


def test_on_open_runs_once_in_a_write_transaction(tmp_path: Path, clock: ManualClock) -> None:
    """A strategy's on_open is called once, inside a transaction, and can read the rows."""
    strategy = _Recording()
    with runstore.open(tmp_path / "runs.db", clock=clock, consensus=strategy):
        assert strategy.opened == [True]


@pytest.mark.parametrize("strategy", [SqlConsensus, LocalConsensus])
def test_reopening_keeps_everything(tmp_path: Path, clock: ManualClock, strategy: Any) -> None:
    """Rows, leases, facts, revisions survive closing and reopening the file."""
    path = tmp_path / "runs.db"
    with runstore.open(path, clock=clock, consensus=strategy()) as store:
        store.create("owned", '{"a":1}')
        store.create("claimed", "{}")
        assert store.claim_and_own("owned", PENDING, OWNER, 0) is not None
        assert store.claim("claimed", PENDING, OWNER, 0) is not None
        before = store.state()
    with runstore.open(path, clock=clock, consensus=strategy()) as store:
        assert store.state() == before
        store.check_invariants()


def test_a_store_is_a_sqlite_run_store_with_a_readable_repr(clock: ManualClock) -> None:
    """The repr names the path and the strategy, nothing else."""
    with runstore.open(":memory:", clock=clock) as store:
        assert isinstance(store, SqliteRunStore)
        assert repr(store) == "SqliteRunStore(path=':memory:', consensus=SqlConsensus())"


def test_a_missing_directory_is_persistence_failed(tmp_path: Path) -> None:
    """A path that cannot be created is an infrastructure failure."""
    with pytest.raises(RunStoreError) as caught:
        runstore.open(tmp_path / "no" / "such" / "dir" / "runs.db")
    assert caught.value.code == "persistence_failed"
