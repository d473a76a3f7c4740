"""``AsyncRunStore``: every ``RunStore`` operation as a coroutine.

Each operation is the synchronous store's own method (``SqlRunStore``: the
same admission, decisions, SQL and one-round-trip path), run on a lane's
thread (``_lanes``). Nothing is decided here: this module only names the
operations, says which ones write (for the cancellation rules) and forwards
their arguments unchanged.

May import: the core modules, the SQL store the backends share and
``runstore.attempts`` (for ``AsyncAttemptStore``).
"""

from __future__ import annotations

from collections.abc import Collection, Coroutine, Sequence
from types import TracebackType
from typing import Any, Final, Self, TypeVar

from .._clock import Clock
from .._outcomes import (
    AbandonClaimOutcome,
    ActivateOutcome,
    ClaimAndOwnOutcome,
    ClaimOutcome,
    HeartbeatOutcome,
    RecoverClaimOutcome,
    RequestCancelOutcome,
    StealOutcome,
    TransitionOutcome,
)
from .._sql._store import SqlRunStore
from .._values import (
    LivenessEvidence,
    OwnerId,
    OwnershipFact,
    RunChange,
    RunPage,
    RunRow,
    RunSnapshot,
    RunStatus,
    StoreState,
    TransitionGuard,
)
from ._lanes import Lane, Lanes

T = TypeVar("T")

WRITES: Final = frozenset(
    {
        "create",
        "request_cancel",
        "request_cancel_lineage",
        "acknowledge_cancel",
        "claim",
        "claim_and_own",
        "activate",
        "abandon_claim",
        "recover_claim",
        "heartbeat",
        "reconfirm",
        "transition_owned",
        "steal",
        "claim_next",
        "claim_next_many",
        "heartbeat_many",
        "purge_settled",
        "compact_changes",
    }
)
"""The operations that write: a cancelled one waits for its answer (see
``AsyncRunStore``); every other ``RunStore`` operation reads."""

_DEFAULT_STATUS: Final[tuple[RunStatus, ...]] = ("pending", "suspended")


def _interrupt(lane: Lane[SqlRunStore]) -> None:
    lane.store.interrupt()


def _renew_each(lane: Lane[SqlRunStore], method: str, renewals: list[tuple[Any, ...]]) -> list[Any]:
    return lane.store._renew_each(method, renewals)


class AsyncRunStore:
    """The asyncio ``RunStore``: build it with ``runstore.aopen(target)``.

    Every ``RunStore`` operation is here as a coroutine, with the same
    arguments, admission, outcomes and errors (each is the synchronous
    store's operation, run on a thread of its own; see the asyncio page of
    the docs). Beyond the protocol: ``dialect``, ``clock``, ``consensus``,
    ``read_only``, ``fast_path`` (as the synchronous store's), ``pool_size``
    (how many connections, each with its thread) and ``cancel_grace_s``.

    Cancellation: a read cancelled is abandoned at once; a write cancelled
    after it started waits, shielded, up to ``cancel_grace_s`` for its
    answer, then interrupts its statement and waits as long again; then
    ``CancelledError`` is re-raised, with a ``PersistenceFailedError``
    whose ``outcome_unknown`` is true as its ``__cause__`` when no answer
    came (the write's own error when it failed).

    ``await store.close()`` (or leaving ``async with``) waits for the calls
    under way and closes every connection; closing twice does nothing.

    ``aopen`` builds it from ``stores`` (the opened synchronous stores, one per
    connection), the ``cancel_grace_s`` and a ``name`` for its threads.
    """

    def __init__(self, stores: list[SqlRunStore], *, cancel_grace_s: float, name: str) -> None:
        # Renewals waiting together go to the server together on the
        # one-round-trip path (``SqlRunStore._renew_each``).
        together = _renew_each if stores[0].fast_path else None
        self._lanes: Lanes[SqlRunStore] = Lanes(
            stores, grace_s=cancel_grace_s, name=name, together=together
        )
        self._first = stores[0]

    # -- what it is -------------------------------------------------------------

    @property
    def dialect(self) -> str:
        """``"sqlite"`` or ``"postgresql"``."""
        return self._first.dialect

    @property
    def clock(self) -> Clock:
        """The store clock."""
        return self._first.clock

    @property
    def consensus(self) -> Any:
        """The strategy this store arbitrates with (every connection shares it)."""
        return self._first.consensus

    @property
    def read_only(self) -> bool:
        """Whether every write is refused (``aopen``'s ``read_only``)."""
        return self._first.read_only

    @property
    def fast_path(self) -> bool:
        """Whether writes take one round trip (PostgreSQL with ``SqlConsensus``)."""
        return self._first.fast_path

    @property
    def pool_size(self) -> int:
        """How many connections the store holds, each on a thread of its own."""
        return len(self._lanes.lanes)

    @property
    def cancel_grace_s(self) -> float:
        """How long a cancelled write waits for its answer, before and after
        interrupting its statement (seconds)."""
        return self._lanes.grace_s

    @property
    def sync_stores(self) -> tuple[SqlRunStore, ...]:
        """The synchronous stores behind this one, one per connection. They
        refuse every call made on an event loop's thread (``persistence_failed``,
        ``cause["stage"] == "event-loop"``)."""
        return tuple(lane.store for lane in self._lanes.lanes)

    # -- the plumbing -----------------------------------------------------------

    def _op(self, method: str, *args: Any, **kwargs: Any) -> Coroutine[Any, Any, Any]:
        """The awaitable of ``method(*args, **kwargs)`` on a lane's store (a
        plain function, so a call costs one coroutine frame less)."""

        def call(lane: Lane[SqlRunStore]) -> Any:
            return getattr(lane.store, method)(*args, **kwargs)

        return self._lanes.call(method, call, write=method in WRITES, interrupt=_interrupt)

    # -- the operations ---------------------------------------------------------

    async def create(
        self,
        run_id: str,
        state_json: str,
        *,
        parent_run_id: str | None = None,
        lineage_id: str | None = None,
        round_ordinal: int | None = None,
    ) -> None:
        """``RunStore.create``, awaited: ``run_id``, ``state_json``, ``parent_run_id``,
        ``lineage_id``, ``round_ordinal`` as there.
        """
        await self._op(
            "create",
            run_id,
            state_json,
            parent_run_id=parent_run_id,
            lineage_id=lineage_id,
            round_ordinal=round_ordinal,
        )

    async def get(self, run_id: str) -> RunRow:
        """``RunStore.get``, awaited: ``run_id`` as there."""
        row: RunRow = await self._op("get", run_id)
        return row

    async def lineage(self, run_id: str) -> list[RunRow]:
        """``RunStore.lineage``, awaited: ``run_id`` as there."""
        rows: list[RunRow] = await self._op("lineage", run_id)
        return rows

    async def latest_round(self, run_id: str) -> RunRow:
        """``RunStore.latest_round``, awaited: ``run_id`` as there."""
        row: RunRow = await self._op("latest_round", run_id)
        return row

    async def request_cancel(self, run_id: str, now_ms: int) -> RequestCancelOutcome:
        """``RunStore.request_cancel``, awaited: ``run_id``, ``now_ms`` as there."""
        outcome: RequestCancelOutcome = await self._op("request_cancel", run_id, now_ms)
        return outcome

    async def request_cancel_lineage(self, run_id: str, now_ms: int) -> RequestCancelOutcome:
        """``RunStore.request_cancel_lineage``, awaited: ``run_id``, ``now_ms`` as there."""
        outcome: RequestCancelOutcome = await self._op("request_cancel_lineage", run_id, now_ms)
        return outcome

    async def acknowledge_cancel(self, run_id: str, owner: OwnerId, now_ms: int) -> bool:
        """``RunStore.acknowledge_cancel``, awaited: ``run_id``, ``owner``, ``now_ms`` as there."""
        seen: bool = await self._op("acknowledge_cancel", run_id, owner, now_ms)
        return seen

    async def claim(
        self, run_id: str, expected: RunSnapshot | RunRow, claimant: OwnerId, now_ms: int
    ) -> ClaimOutcome:
        """``RunStore.claim``, awaited: ``run_id``, ``expected``, ``claimant``,
        ``now_ms`` as there."""
        outcome: ClaimOutcome = await self._op("claim", run_id, expected, claimant, now_ms)
        return outcome

    async def claim_and_own(
        self,
        run_id: str,
        expected: RunSnapshot | RunRow,
        owner: OwnerId,
        now_ms: int,
        evidence: LivenessEvidence | None = None,
    ) -> ClaimAndOwnOutcome:
        """``RunStore.claim_and_own``, awaited: ``run_id``, ``expected``, ``owner``, ``now_ms``,
        ``evidence`` as there.
        """
        outcome: ClaimAndOwnOutcome = await self._op(
            "claim_and_own", run_id, expected, owner, now_ms, evidence
        )
        return outcome

    async def activate(
        self,
        run_id: str,
        claimant: OwnerId,
        claimed_at_ms: int,
        expected: RunSnapshot | RunRow,
    ) -> ActivateOutcome:
        """``RunStore.activate``, awaited: ``run_id``, ``claimant``, ``claimed_at_ms``, ``expected``
        as there.
        """
        outcome: ActivateOutcome = await self._op(
            "activate", run_id, claimant, claimed_at_ms, expected
        )
        return outcome

    async def abandon_claim(
        self, run_id: str, claimant: OwnerId, claimed_at_ms: int
    ) -> AbandonClaimOutcome:
        """``RunStore.abandon_claim``, awaited: ``run_id``, ``claimant``, ``claimed_at_ms`` as
        there.
        """
        outcome: AbandonClaimOutcome = await self._op(
            "abandon_claim", run_id, claimant, claimed_at_ms
        )
        return outcome

    async def recover_claim(
        self,
        run_id: str,
        stale_claimant: OwnerId,
        claimed_at_ms: int,
        observer: OwnerId,
        now_ms: int,
        evidence: LivenessEvidence,
    ) -> RecoverClaimOutcome:
        """``RunStore.recover_claim``, awaited: ``run_id``, ``stale_claimant``, ``claimed_at_ms``,
        ``observer``, ``now_ms``, ``evidence`` as there.
        """
        outcome: RecoverClaimOutcome = await self._op(
            "recover_claim", run_id, stale_claimant, claimed_at_ms, observer, now_ms, evidence
        )
        return outcome

    def _renewal(
        self, method: str, run_id: str, owner: OwnerId, now_ms: int
    ) -> Coroutine[Any, Any, Any]:
        """``_op`` of a renewal, which a lane may send together with others."""
        args = (run_id, owner, now_ms)

        def call(lane: Lane[SqlRunStore]) -> Any:
            return getattr(lane.store, method)(*args)

        return self._lanes.call(method, call, write=True, interrupt=_interrupt, kind=(method, args))

    async def heartbeat(self, run_id: str, owner: OwnerId, now_ms: int) -> HeartbeatOutcome:
        """``RunStore.heartbeat``, awaited: ``run_id``, ``owner``, ``now_ms`` as there."""
        outcome: HeartbeatOutcome = await self._renewal("heartbeat", run_id, owner, now_ms)
        return outcome

    async def reconfirm(self, run_id: str, owner: OwnerId, now_ms: int) -> HeartbeatOutcome:
        """``RunStore.reconfirm``, awaited: ``run_id``, ``owner``, ``now_ms`` as there."""
        outcome: HeartbeatOutcome = await self._renewal("reconfirm", run_id, owner, now_ms)
        return outcome

    async def transition_owned(
        self,
        run_id: str,
        owner: OwnerId,
        to_status: RunStatus,
        state_json: str | None = None,
        guard: TransitionGuard | None = None,
    ) -> TransitionOutcome:
        """``RunStore.transition_owned``, awaited: ``run_id``, ``owner``, ``to_status``,
        ``state_json``, ``guard`` as there.
        """
        outcome: TransitionOutcome = await self._op(
            "transition_owned", run_id, owner, to_status, state_json, guard
        )
        return outcome

    async def steal(
        self,
        run_id: str,
        expected: RunSnapshot | RunRow,
        claimant: OwnerId,
        now_ms: int,
        evidence: LivenessEvidence,
    ) -> StealOutcome:
        """``RunStore.steal``, awaited: ``run_id``, ``expected``, ``claimant``, ``now_ms``,
        ``evidence`` as there.
        """
        outcome: StealOutcome = await self._op(
            "steal", run_id, expected, claimant, now_ms, evidence
        )
        return outcome

    async def list_runs(
        self,
        *,
        status: RunStatus | Collection[RunStatus] | None = None,
        claimable_at: int | None = None,
        stale_at: int | None = None,
        claim_stale_at: int | None = None,
        cancel_requested: bool | None = None,
        lineage_id: str | None = None,
        parent_run_id: str | None = None,
        limit: int = 100,
        after: str | None = None,
        with_state: bool = False,
    ) -> RunPage:
        """``RunStore.list_runs``, awaited: ``status``, ``claimable_at``, ``stale_at``,
        ``claim_stale_at``, ``cancel_requested``, ``lineage_id``, ``parent_run_id``, ``limit``,
        ``after``, ``with_state`` as there.
        """
        page: RunPage = await self._op(
            "list_runs",
            status=status,
            claimable_at=claimable_at,
            stale_at=stale_at,
            claim_stale_at=claim_stale_at,
            cancel_requested=cancel_requested,
            lineage_id=lineage_id,
            parent_run_id=parent_run_id,
            limit=limit,
            after=after,
            with_state=with_state,
        )
        return page

    async def claim_next(
        self,
        owner: OwnerId,
        now_ms: int,
        *,
        status: RunStatus | Collection[RunStatus] = _DEFAULT_STATUS,
    ) -> RunRow | None:
        """``RunStore.claim_next``, awaited: ``owner``, ``now_ms``, ``status`` as there."""
        row: RunRow | None = await self._op("claim_next", owner, now_ms, status=status)
        return row

    async def claim_next_many(
        self,
        owner: OwnerId,
        now_ms: int,
        limit: int,
        *,
        status: RunStatus | Collection[RunStatus] = _DEFAULT_STATUS,
    ) -> list[RunRow]:
        """``RunStore.claim_next_many``, awaited: ``owner``, ``now_ms``, ``limit``, ``status`` as
        there.
        """
        rows: list[RunRow] = await self._op("claim_next_many", owner, now_ms, limit, status=status)
        return rows

    async def heartbeat_many(
        self, owner: OwnerId, run_ids: Sequence[str], now_ms: int
    ) -> dict[str, HeartbeatOutcome]:
        """``RunStore.heartbeat_many``, awaited: ``owner``, ``run_ids``, ``now_ms`` as there."""
        outcomes: dict[str, HeartbeatOutcome] = await self._op(
            "heartbeat_many", owner, run_ids, now_ms
        )
        return outcomes

    async def purge_settled(self, before_ms: int, *, limit: int = 1000) -> int:
        """``RunStore.purge_settled``, awaited: ``before_ms``, ``limit`` as there."""
        purged: int = await self._op("purge_settled", before_ms, limit=limit)
        return purged

    async def compact_changes(self, through_revision: int, *, limit: int = 1000) -> int:
        """``RunStore.compact_changes``, awaited: ``through_revision``, ``limit`` as there."""
        dropped: int = await self._op("compact_changes", through_revision, limit=limit)
        return dropped

    async def ownership_facts(self, run_id: str) -> list[OwnershipFact]:
        """``RunStore.ownership_facts``, awaited: ``run_id`` as there."""
        facts: list[OwnershipFact] = await self._op("ownership_facts", run_id)
        return facts

    async def revision(self) -> int:
        """``RunStore.revision``, awaited."""
        revision: int = await self._op("revision")
        return revision

    async def changes(self, after_revision: int) -> list[RunChange]:
        """``RunStore.changes``, awaited: ``after_revision`` as there."""
        changes: list[RunChange] = await self._op("changes", after_revision)
        return changes

    async def state(self) -> StoreState:
        """``RunStore.state``, awaited."""
        state: StoreState = await self._op("state")
        return state

    async def check_invariants(self) -> None:
        """``RunStore.check_invariants``, awaited."""
        await self._op("check_invariants")

    # -- lifetime ---------------------------------------------------------------

    async def close(self) -> None:
        """Wait for the calls under way, then close every connection and stop
        the threads. Closing twice does nothing."""
        await self._lanes.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"AsyncRunStore({self._first!r}, pool_size={self.pool_size})"
