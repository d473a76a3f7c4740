"""``PostgresRunStore``: the shared SQL store over one PostgreSQL connection."""

from __future__ import annotations

from types import ModuleType
from typing import Any, ClassVar, Literal

from .._clock import Clock
from .._sql._store import SqlRunStore
from . import _attempt_queries as _postgres_attempt_queries
from . import _queries as _postgres_queries
from ._tx import TransactionManager


class PostgresRunStore(SqlRunStore):
    """The PostgreSQL ``RunStore``. Build it with ``runstore.open(url)``.

    One store object holds one connection and may be shared by threads, which
    it serializes; any number of stores, in any number of processes and on any
    number of hosts, may work on the same schema: each operation locks the
    run it changes, and the lease table lives in the same database. A lost
    connection is replaced by the next operation. It is a context manager,
    and closing it twice does nothing. Its repr never shows a password.

    Every ``RunStore`` operation is there, as the protocol documents it (its
    methods are inherited from the SQL store both backends share, so this page
    does not repeat them). Beyond the protocol: ``dialect``; ``clock`` and
    ``consensus``, what it was opened with; ``read_only``, whether every write
    is refused; ``fast_path``, whether writes take one round trip (PostgreSQL
    with ``SqlConsensus``); and ``interrupt()``, which aborts the statement
    running now, from any thread (the operation then raises
    ``persistence_failed``). It also has ``schema`` and ``clock_offset_ms``.

    Its constructor is ``runstore.postgres.open``'s: it takes the transaction
    manager ``tm`` that holds the connection, the store ``clock``, the
    ``consensus`` strategy, the ``url`` (kept without its password) and the
    ``schema`` the tables live in.
    """

    _queries: ClassVar[ModuleType] = _postgres_queries
    _attempt_queries: ClassVar[ModuleType] = _postgres_attempt_queries

    def __init__(
        self, tm: TransactionManager, *, clock: Clock, consensus: Any, url: str, schema: str
    ) -> None:
        super().__init__(tm, clock=clock, consensus=consensus)
        self._url = url
        self._schema = schema

    @property
    def dialect(self) -> Literal["postgresql"]:
        """Always ``"postgresql"``: the SQL a strategy's ``tx.connection`` speaks (a
        ``psycopg.Connection``, parameters ``$1``)."""
        return "postgresql"

    @property
    def schema(self) -> str:
        """The schema the store's tables live in."""
        return self._schema

    @property
    def clock_offset_ms(self) -> int | None:
        """The store clock minus the server's ``clock_timestamp()``, in ms, as
        last measured; None when the store does not check its clock (see
        ``runstore.postgres.open``'s ``check_clock``). Lease operations are
        refused while it is more than 5 000 ms either way."""
        check = getattr(self._tm, "clock_check", None)
        return None if check is None else check.offset_ms

    def __repr__(self) -> str:
        mode = ", read_only=True" if self.read_only else ""
        return (
            f"PostgresRunStore(url={self._url!r}, schema={self._schema!r}, "
            f"consensus={self._consensus!r}{mode})"
        )
