"""``PostgresRunStore``: the shared SQL store over one PostgreSQL connection."""

from __future__ import annotations

from types import ModuleType
from typing import Any, ClassVar, Literal

from .._clock import Clock
from .._errors import PersistenceFailedError
from .._outcomes import (
    AbandonClaimOutcome,
    Abandoned,
    CancelRequested,
    RecoverClaimOutcome,
    Recovered,
    RequestCancelOutcome,
    Transitioned,
    TransitionOutcome,
)
from .._sql._store import SqlRunStore
from .._values import LivenessEvidence, OwnerId, RunStatus, TransitionGuard
from . import _attempt_queries as _postgres_attempt_queries
from . import _queries as _postgres_queries
from ._notify import PostgresListener, channel_for
from ._tx import TransactionManager


class _WakesWorkers(SqlRunStore):
    """The writes that may wake a worker: each is the shared store's, followed,
    once it has committed and when its answer says so, by the store's
    notification (``TransactionManager.wake``). A base class of its own, so
    the reference page shows these methods as the protocol's, not again."""

    _pg_tm: TransactionManager

    def create(
        self,
        run_id: str,
        state_json: str,
        *,
        parent_run_id: str | None = None,
        lineage_id: str | None = None,
        round_ordinal: int | None = None,
    ) -> None:
        super().create(
            run_id,
            state_json,
            parent_run_id=parent_run_id,
            lineage_id=lineage_id,
            round_ordinal=round_ordinal,
        )
        self._pg_tm.wake()

    def transition_owned(
        self,
        run_id: str,
        owner: OwnerId,
        to_status: RunStatus,
        state_json: str | None = None,
        guard: TransitionGuard | None = None,
    ) -> TransitionOutcome:
        outcome = super().transition_owned(run_id, owner, to_status, state_json, guard)
        if to_status == "suspended" and type(outcome) is Transitioned:
            self._pg_tm.wake()
        return outcome

    def abandon_claim(
        self, run_id: str, claimant: OwnerId, claimed_at_ms: int
    ) -> AbandonClaimOutcome:
        outcome = super().abandon_claim(run_id, claimant, claimed_at_ms)
        if type(outcome) is Abandoned:
            self._pg_tm.wake()
        return outcome

    def recover_claim(
        self,
        run_id: str,
        stale_claimant: OwnerId,
        claimed_at_ms: int,
        observer: OwnerId,
        now_ms: int,
        evidence: LivenessEvidence,
    ) -> RecoverClaimOutcome:
        outcome = super().recover_claim(
            run_id, stale_claimant, claimed_at_ms, observer, now_ms, evidence
        )
        if type(outcome) is Recovered:
            self._pg_tm.wake()
        return outcome

    def request_cancel(self, run_id: str, now_ms: int) -> RequestCancelOutcome:
        outcome = super().request_cancel(run_id, now_ms)
        if type(outcome) is CancelRequested:
            self._pg_tm.wake()
        return outcome

    def request_cancel_lineage(self, run_id: str, now_ms: int) -> RequestCancelOutcome:
        outcome = super().request_cancel_lineage(run_id, now_ms)
        if type(outcome) is CancelRequested:
            self._pg_tm.wake()
        return outcome


class PostgresRunStore(_WakesWorkers):
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
    ``persistence_failed``). It also has ``schema`` and ``clock_offset_ms``,
    and, for waking workers, ``notify_channel``, ``notifies`` and
    ``open_listener()``: once a write that may have made a run claimable, or
    that recorded a cancellation request, has committed, the store sends a
    ``NOTIFY`` on its schema's channel as a statement of its own
    (``runstore.postgres.open``'s ``notify`` says which writes, and turns it
    off).

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
        self._pg_tm = tm

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

    @property
    def notify_channel(self) -> str:
        """The channel this schema's stores notify and listeners listen on:
        ``runstore:<schema>``, or ``runstore#`` and a digest of the schema's
        name when that would pass PostgreSQL's 63 bytes."""
        return channel_for(self._schema)

    @property
    def notifies(self) -> bool:
        """Whether this store sends notifications (``open``'s ``notify``; never
        when ``read_only``)."""
        return self._pg_tm.notify_channel is not None

    def open_listener(self) -> PostgresListener:
        """A ``PostgresListener`` on this store's channel, on a connection of
        its own (the conninfo this store connects with): its
        ``wait(timeout_s)`` answers True once a notification arrived. It
        works whether or not this store notifies (other stores of the schema
        may). Close it when done; closing the store does not. Raises
        ``PersistenceFailedError`` when the store is closed (``cause["stage"]
        == "closed"``) or the listener cannot connect or listen
        (``cause["stage"] == "listen"``, with the ``reason``)."""
        if self._pg_tm.closed:
            raise PersistenceFailedError(
                "open_listener", "the store is closed", {"stage": "closed", "reason": "closed"}
            )
        return PostgresListener(self._pg_tm.connect_new, self.notify_channel, self._url)

    def __repr__(self) -> str:
        mode = ", read_only=True" if self.read_only else ""
        return (
            f"PostgresRunStore(url={self._url!r}, schema={self._schema!r}, "
            f"consensus={self._consensus!r}{mode})"
        )
