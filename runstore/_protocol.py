"""The ``RunStore`` protocol: every operation a store offers, and its contract.

Implemented by ``runstore.open(...)`` (SQLite), ``runstore.model.ModelRunStore``
(the reference) and ``runstore.NoopRunStore`` (a stub for tests). Every
operation admits its arguments first (``InvalidRunError``, nothing written),
then runs as one all-or-nothing transaction. Lost races are outcome values;
only misuse and infrastructure failures raise ``RunStoreError``.

Time: operations that judge a lease (``claim``, ``claim_and_own``, ``steal``,
``heartbeat``, ``reconfirm``, ``recover_claim``, ``claim_next``,
``heartbeat_many``) take the caller's ``now_ms``
literally but refuse one more than ``HEARTBEAT_SKEW_ALLOWANCE_MS`` ahead of the
store's clock. ``create``, ``activate`` and ``transition_owned`` stamp
lifecycle columns from the store's clock.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from types import TracebackType
from typing import Protocol, Self, runtime_checkable

from ._outcomes import (
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
from ._values import (
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


@runtime_checkable
class RunStore(Protocol):
    """Fenced persistence for durable runs."""

    def create(
        self,
        run_id: str,
        state_json: str,
        *,
        parent_run_id: str | None = None,
        lineage_id: str | None = None,
        round_ordinal: int | None = None,
    ) -> None:
        """Insert a ``pending`` run. A duplicate id, a missing parent or a taken
        ``(lineage_id, round_ordinal)`` raises ``constraint``."""
        ...

    def get(self, run_id: str) -> RunRow:
        """The run, or ``not_found_row``."""
        ...

    def lineage(self, run_id: str) -> list[RunRow]:
        """Every round of the run's lineage in round order; ``[]`` if unknown."""
        ...

    def latest_round(self, run_id: str) -> RunRow:
        """The highest round of the run's lineage, or ``not_found_row``."""
        ...

    def request_cancel(self, run_id: str, now_ms: int) -> RequestCancelOutcome:
        """Record cancellation intent once; a repeat reports the original time."""
        ...

    def request_cancel_lineage(self, run_id: str, now_ms: int) -> RequestCancelOutcome:
        """Record intent on every live, unrequested round of the lineage."""
        ...

    def acknowledge_cancel(self, run_id: str, owner: OwnerId, now_ms: int) -> bool:
        """Record the owner's first observation of intent. Repeats keep the first
        and still answer True; False when intent or ownership is absent."""
        ...

    def claim(
        self, run_id: str, expected: RunSnapshot | RunRow, claimant: OwnerId, now_ms: int
    ) -> ClaimOutcome:
        """Reserve an exact pending or suspended snapshot for a later ``activate``."""
        ...

    def claim_and_own(
        self,
        run_id: str,
        expected: RunSnapshot | RunRow,
        owner: OwnerId,
        now_ms: int,
        evidence: LivenessEvidence | None = None,
    ) -> ClaimAndOwnOutcome:
        """Claim and activate in one step; replacing another running owner
        needs a stale heartbeat and matching evidence."""
        ...

    def activate(
        self,
        run_id: str,
        claimant: OwnerId,
        claimed_at_ms: int,
        expected: RunSnapshot | RunRow,
    ) -> ActivateOutcome:
        """Trade an exact claim for ownership while the snapshot still holds."""
        ...

    def abandon_claim(
        self, run_id: str, claimant: OwnerId, claimed_at_ms: int
    ) -> AbandonClaimOutcome:
        """Drop the caller's exact claim; ownership is untouched."""
        ...

    def recover_claim(
        self,
        run_id: str,
        stale_claimant: OwnerId,
        claimed_at_ms: int,
        observer: OwnerId,
        now_ms: int,
        evidence: LivenessEvidence,
    ) -> RecoverClaimOutcome:
        """Clear a dead claimant's stale claim (it does not hand over the run)."""
        ...

    def heartbeat(self, run_id: str, owner: OwnerId, now_ms: int) -> HeartbeatOutcome:
        """Renew the owner's lease; the stamp never moves backwards."""
        ...

    def reconfirm(self, run_id: str, owner: OwnerId, now_ms: int) -> HeartbeatOutcome:
        """Like ``heartbeat``, but lost while any claim is pending."""
        ...

    def transition_owned(
        self,
        run_id: str,
        owner: OwnerId,
        to_status: RunStatus,
        state_json: str | None = None,
        guard: TransitionGuard | None = None,
    ) -> TransitionOutcome:
        """Move an owned run; anything but ``running`` releases ownership."""
        ...

    def steal(
        self,
        run_id: str,
        expected: RunSnapshot | RunRow,
        claimant: OwnerId,
        now_ms: int,
        evidence: LivenessEvidence,
    ) -> StealOutcome:
        """Claim a stale running run with matching evidence; follow with ``activate``."""
        ...

    def list_runs(
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
        """One page (``limit`` rows, at most 1000) of the runs matching every
        given filter, in ``(created_at_ms, run_id)`` order, from one snapshot;
        ``page.next`` resumes after it (``None`` on the last page). Rows come
        without state unless ``with_state=True``."""
        ...

    def claim_next(
        self,
        owner: OwnerId,
        now_ms: int,
        *,
        status: RunStatus | Collection[RunStatus] = ("pending", "suspended"),
    ) -> RunRow | None:
        """Claim and activate the oldest unclaimed run of ``status`` this caller
        can take (concurrent callers get different runs); its row, or None."""
        ...

    def heartbeat_many(
        self, owner: OwnerId, run_ids: Sequence[str], now_ms: int
    ) -> dict[str, HeartbeatOutcome]:
        """Renew many of the owner's leases in one transaction; each answer is
        what ``heartbeat`` alone would give, keys in ``run_ids`` order."""
        ...

    def purge_settled(self, before_ms: int, *, limit: int = 1000) -> int:
        """Delete up to ``limit`` settled runs finished before ``before_ms``
        (never one with a live lineage round or a child), leaving tombstones
        in the change feed; answers how many."""
        ...

    def purge_candidates(self, before_ms: int, *, limit: int = 1000) -> list[RunRow]:
        """The runs ``purge_settled(before_ms, limit=limit)`` would purge now,
        in the order it takes them, without their state; writes nothing."""
        ...

    def compact_changes(self, through_revision: int, *, limit: int = 1000) -> int:
        """Drop up to ``limit`` tombstones at or below ``through_revision``."""
        ...

    def ownership_facts(self, run_id: str) -> list[OwnershipFact]:
        """The run's ownership transitions in order; ``[]`` for an unknown run."""
        ...

    def revision(self) -> int:
        """The database's execution revision: one per run row written."""
        ...

    def changes(self, after_revision: int) -> list[RunChange]:
        """Latest revision per run id above ``after_revision``, ascending."""
        ...

    def state(self) -> StoreState:
        """Everything the store holds, comparable with ``==``."""
        ...

    def check_invariants(self) -> None:
        """Raise ``AssertionError`` naming the first broken invariant."""
        ...

    def close(self) -> None:
        """Release resources. Closing twice does nothing."""
        ...

    def __enter__(self) -> Self: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...
