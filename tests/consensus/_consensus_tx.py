"""Test-only ``Transaction`` implementations for calling strategies directly.

``FakeTransaction`` stands in for a store's write transaction: it collects
``on_commit`` and ``on_rollback`` callbacks and, used as a context manager,
commits when the block ends normally and rolls back (in reverse registration
order) when it raises. Its ``connection`` raises ``RuntimeError`` unless it was
given one, as the model's transaction does; ``backfill_connection`` builds a
throwaway SQLite connection with just enough of ``flows_runs`` for
``LocalConsensus.on_open``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import Any


class RollBack(Exception):
    """Raised inside a transaction block to make it roll back on purpose."""


class FakeTransaction:
    """A transaction that commits or rolls back only its registered callbacks."""

    def __init__(self, connection: sqlite3.Connection | None = None) -> None:
        self._connection = connection
        self.commit_callbacks: list[Callable[[], None]] = []
        self.rollback_callbacks: list[Callable[[], None]] = []
        self.state = "open"

    @property
    def connection(self) -> sqlite3.Connection:
        if self._connection is None:
            raise RuntimeError("this transaction has no database connection")
        return self._connection

    def on_commit(self, fn: Callable[[], None]) -> None:
        assert self.state == "open", "callback registered on a finished transaction"
        self.commit_callbacks.append(fn)

    def on_rollback(self, fn: Callable[[], None]) -> None:
        assert self.state == "open", "callback registered on a finished transaction"
        self.rollback_callbacks.append(fn)

    def commit(self) -> None:
        self.state = "committed"
        for fn in self.commit_callbacks:
            fn()

    def rollback(self) -> None:
        self.state = "rolled back"
        for fn in reversed(self.rollback_callbacks):
            fn()

    def __enter__(self) -> FakeTransaction:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        if exc_type is None:
            self.commit()
            return False
        self.rollback()
        # Swallow only the deliberate roll-back signal.
        return exc_type is RollBack


_FLOWS_RUNS = """
CREATE TABLE flows_runs (
    run_id TEXT PRIMARY KEY,
    status TEXT NOT NULL,
    owner_host_id TEXT, owner_pid INTEGER, owner_nonce TEXT,
    heartbeat_at_ms INTEGER,
    claim_host_id TEXT, claim_pid INTEGER, claim_nonce TEXT,
    claimed_at_ms INTEGER
)
"""


def backfill_connection(rows: Iterable[tuple[Any, ...]]) -> sqlite3.Connection:
    """An in-memory database with a minimal ``flows_runs`` holding ``rows``:
    (run_id, status, owner host, pid, nonce, heartbeat, claim host, pid, nonce, claimed_at)."""
    connection = sqlite3.connect(":memory:")
    connection.execute(_FLOWS_RUNS)
    connection.executemany("INSERT INTO flows_runs VALUES (?,?,?,?,?,?,?,?,?,?)", list(rows))
    connection.commit()
    return connection
