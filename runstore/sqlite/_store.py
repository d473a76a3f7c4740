"""``SqliteRunStore``: the shared SQL store (``runstore._sql``) over one SQLite
connection.

Every decision lives in ``runstore._sql._store.SqlRunStore``; this backend
contributes its queries (``_queries``), its transaction manager (``_tx``:
``BEGIN IMMEDIATE``, busy retries, savepoints) and its ``interrupt``. The
module-level names below are kept for code that patches single operations
(the zoo of planted bugs).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, ClassVar, Literal

from .._clock import Clock
from .._sql import _store as _core
from .._sql._store import SqlRunStore
from .._values import OwnerId
from . import _attempt_queries as _sqlite_attempt_queries
from . import _queries as _sqlite_queries
from ._faults import RetryPolicy
from ._tx import Connection, Reader, Transaction, TransactionManager

_NOT_FOUND = _core._NOT_FOUND
_FENCE_LOST = _core._FENCE_LOST
_write_invariant = _core._write_invariant
_classify_cancellation_miss = _core._classify_cancellation_miss


class SqliteRunStore(SqlRunStore):
    """The SQLite ``RunStore``. Build it with ``runstore.open(path)``.

    One store object may be shared by several threads (a worker and its
    heartbeat thread, say): it owns one connection and serializes its use.
    Several processes may open the same file; SQLite's write lock and
    ``BEGIN IMMEDIATE`` serialize their writes. It is a context manager, and
    closing it twice does nothing.

    Every ``RunStore`` operation is there, as the protocol documents it (its
    methods are inherited from the SQL store both backends share, so this page
    does not repeat them). Beyond the protocol: ``dialect``; ``clock`` and
    ``consensus``, what it was opened with; ``read_only``, whether every write
    is refused; ``fast_path``, whether writes take one round trip (PostgreSQL
    with ``SqlConsensus``); and ``interrupt()``, which aborts the statement
    running now, from any thread (the operation then raises
    ``persistence_failed``).

    Its constructor is ``runstore.open``'s: it takes the open ``connection``,
    the store ``clock``, the ``consensus`` strategy, the file's ``path``, the
    ``retry`` policy for transient failures (a ``RetryPolicy``), ``read_only``
    and the ``reader`` that read-only stores read through.
    """

    _queries: ClassVar[ModuleType] = _sqlite_queries
    _attempt_queries: ClassVar[ModuleType] = _sqlite_attempt_queries

    def __init__(
        self,
        connection: Connection,
        *,
        clock: Clock,
        consensus: Any,
        path: str,
        retry: RetryPolicy | None = None,
        read_only: bool = False,
        reader: Reader | None = None,
    ) -> None:
        tm = TransactionManager(
            connection, consensus, retry or RetryPolicy(), read_only=read_only, reader=reader
        )
        super().__init__(tm, clock=clock, consensus=consensus)
        self._path = path

    @property
    def dialect(self) -> Literal["sqlite"]:
        """Always ``"sqlite"``: the SQL a strategy's ``tx.connection`` speaks (a
        ``sqlite3.Connection``, parameters ``?1``)."""
        return "sqlite"

    def __repr__(self) -> str:
        mode = ", read_only=True" if self.read_only else ""
        return f"SqliteRunStore(path={self._path!r}, consensus={self._consensus!r}{mode})"


def _fact(
    tx: Transaction,
    run_id: str,
    transition: str,
    owner: OwnerId,
    granted_at_ms: int | None,
    position: int | None = None,
) -> None:
    """Append one fact with the SQLite queries (``SqlRunStore._fact``)."""
    params = (run_id, transition, owner.host_id, owner.pid, owner.nonce, granted_at_ms)
    if position is None:
        tx.connection.execute(_sqlite_queries.FACT_APPEND, params)
    else:
        tx.connection.execute(_sqlite_queries.FACT_AT, (*params, position))
