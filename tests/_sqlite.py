"""Helpers for the SQLite-only tests: raw access behind the store's back and a
logical dump that sees everything a store holds."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import runstore
from runstore import ManualClock, OwnerId, RunSnapshot
from runstore.consensus import LocalConsensus, SqlConsensus
from runstore.sqlite import SqliteRunStore

OWNER = OwnerId("host-a", 101, "nonce-a")
OTHER = OwnerId("host-b", 202, "nonce-b")
THIRD = OwnerId("host-c", 303, "nonce-c")
PENDING = RunSnapshot("pending", None, None)
SECRET = "sk-live-0d1e2a3d4b5e6e7f"

STRATEGIES: dict[str, Callable[[], Any]] = {"sql": SqlConsensus, "local": LocalConsensus}


def open_store(
    where: str, clock: ManualClock, tmp_path: Path, consensus: Any = None
) -> SqliteRunStore:
    """``where`` is ``"memory"`` or ``"file"``."""
    path = ":memory:" if where == "memory" else str(tmp_path / "runs.db")
    return runstore.open(path, clock=clock, consensus=consensus)


def memory_and_file_store() -> Any:
    """A ``store`` fixture for one module (``store = memory_and_file_store()``):
    its tests run on a SQLite store in memory and on one in a file, each
    closed after the test, instead of on every store of ``tests/conftest.py``."""

    @pytest.fixture(name="store", params=["memory", "file"])
    def store(
        request: pytest.FixtureRequest, clock: ManualClock, tmp_path: Path
    ) -> Iterator[SqliteRunStore]:
        opened = open_store(request.param, clock, tmp_path)
        try:
            yield opened
        finally:
            opened.close()

    return store


def raw(store: SqliteRunStore) -> sqlite3.Connection:
    """The store's own connection, for writes behind its back."""
    return store._connection


@contextmanager
def unchecked(connection: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """CHECK constraints off (and foreign keys off), to plant rows they forbid."""
    connection.execute("PRAGMA ignore_check_constraints = ON")
    connection.execute("PRAGMA foreign_keys = OFF")
    try:
        yield connection
    finally:
        connection.execute("PRAGMA ignore_check_constraints = OFF")
        connection.execute("PRAGMA foreign_keys = ON")


def logical_dump(store: SqliteRunStore) -> tuple[Any, ...]:
    """Everything the store holds: the SQL dump of the file plus the whole
    state (so a strategy's leases kept outside the file count too)."""
    dump = "\n".join(raw(store).iterdump())
    return (dump, store.state(), store.revision())


def statements(store: SqliteRunStore, fn: Callable[[], Any]) -> tuple[Any, list[str]]:
    """Run ``fn`` and return its result and the SQL statements it issued
    (transaction control and trigger bodies left out)."""
    seen: list[str] = []
    connection = raw(store)
    connection.set_trace_callback(seen.append)
    try:
        result = fn()
    finally:
        connection.set_trace_callback(None)
    issued: list[str] = []
    for text in seen:
        if text.lstrip().startswith("--"):
            continue
        if text.strip().split()[0].upper() in {"BEGIN", "COMMIT", "ROLLBACK"}:
            continue
        # Each trigger program a statement runs is traced again with the
        # statement's own text; one statement is one entry.
        if issued and issued[-1] == text:
            continue
        issued.append(text)
    return result, issued


def in_memory_store_machine() -> Any:
    """The run-store machine over the in-memory SQLite adapter (fault seam on,
    no reopening)."""
    from runstore.stateful import Capabilities, comparison_for

    def in_memory(clock: Any, _path: Any) -> Any:
        return runstore.open(":memory:", clock=clock)

    return comparison_for(
        in_memory, Capabilities(reopen=False, fault_injection=True), name="sqlite"
    )


def run_in_memory_store_machine() -> None:
    """``in_memory_store_machine()`` under its default budget, without
    shrinking: for tests that plant a bug and expect the suite to report it."""
    from hypothesis.stateful import run_state_machine_as_test

    from runstore.stateful._campaigns._budget import default_settings

    machine = in_memory_store_machine()
    run_state_machine_as_test(machine, settings=default_settings(machine, shrink=False))
