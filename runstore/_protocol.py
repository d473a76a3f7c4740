"""The ``RunStore`` protocol: every operation a store offers, and its contract.

Implemented by ``runstore.open(...)`` (SQLite), ``runstore.model.ModelRunStore``
(the reference) and ``runstore.NoopRunStore`` (a stub for tests). Every
operation admits its arguments first (``InvalidRunError``, nothing written),
then runs as one all-or-nothing transaction. Lost races are outcome values;
only misuse and infrastructure failures raise ``RunStoreError``.

Time: operations that judge a lease (``claim``, ``claim_and_own``, ``steal``,
``heartbeat``, ``reconfirm``, ``recover_claim``, ``claim_next``, ``claim_next_many``,
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
        """Insert the ``pending`` run ``run_id`` with ``state_json`` (strict JSON text, stored byte
        for byte), stamped ``created_at_ms`` by the store clock. ``parent_run_id`` names the run
        it was forked from, which must exist; ``lineage_id`` with ``round_ordinal`` makes it that
        round of a lineage (the lineage's first run has the lineage's id). Returns None.

        Raises ``ConstraintError`` for a duplicate id, a parent that does not exist or a taken
        ``(lineage_id, round_ordinal)``, so creating the same id twice fails the second time;
        ``InvalidRunError`` for an inadmissible argument, a ``lineage_id`` without a
        ``round_ordinal`` or a run id starting with ``flows.companion/``.
        """
        ...

    def get(self, run_id: str) -> RunRow:
        """The run ``run_id`` as a ``RunRow``, with its state. Raises ``RunNotFoundError``
        (``not_found_row``) when there is none and ``DecodeFailedError`` when its stored row is
        broken."""
        ...

    def lineage(self, run_id: str) -> list[RunRow]:
        """Every round of the lineage that contains ``run_id``, in round order: the runs naming that
        lineage, and the run whose id it is. A run outside any lineage is a lineage of one; an
        unknown ``run_id`` gives ``[]``."""
        ...

    def latest_round(self, run_id: str) -> RunRow:
        """The highest round of the lineage that contains ``run_id`` (the run itself when it has no
        lineage). Raises ``RunNotFoundError`` when no run has that id."""
        ...

    def request_cancel(self, run_id: str, now_ms: int) -> RequestCancelOutcome:
        """Record cancellation intent on the live run ``run_id`` at ``now_ms`` (the caller's
        reading). Returns ``CancelRequested(now_ms)``; a repeat answers ``AlreadyRequested`` with
        the original time, a settled run ``Terminal(status)`` and an unknown run ``NotFound()``.
        Only intent is recorded: the owner sees it (``acknowledge_cancel``) and settles the run."""
        ...

    def request_cancel_lineage(self, run_id: str, now_ms: int) -> RequestCancelOutcome:
        """Record cancellation intent at ``now_ms`` on every live, unrequested round of the lineage
        that contains ``run_id``. Returns ``CancelRequested(now_ms)`` when at least one round was
        marked (earlier requests keep their time); otherwise ``AlreadyRequested`` with a live
        round's earlier time, ``Terminal`` with the last round's status when every round has
        settled, or ``NotFound()``."""
        ...

    def acknowledge_cancel(self, run_id: str, owner: OwnerId, now_ms: int) -> bool:
        """Record that ``owner`` has seen the cancellation request on ``run_id``, at ``now_ms``.
        Returns True when the run is running under ``owner`` with a request on it (a repeat keeps
        the first acknowledgement, still writes the row and answers True again); False, writing
        nothing, when there is no request or ``owner`` does not own the run."""
        ...

    def claim(
        self, run_id: str, expected: RunSnapshot | RunRow, claimant: OwnerId, now_ms: int
    ) -> ClaimOutcome:
        """Reserve the run ``run_id`` for ``claimant`` while it still matches ``expected`` (a
        ``RunSnapshot``, or a ``RunRow`` standing for its snapshot) and is pending or suspended
        with no claim; ``now_ms`` becomes the claim's token. Follow with ``activate`` (or
        ``abandon_claim``).

        Returns ``Claimed(now_ms)``; ``NotFound()``; ``AlreadyClaimed()`` while another claim is
        pending (a second claim answers this too); ``HeartbeatFresh()`` when the run is running
        with a fresh heartbeat; ``SnapshotChanged()`` when it no longer matches ``expected``, is
        running with a stale heartbeat (``claim`` never takes a running run: see ``steal``) or
        has settled.
        """
        ...

    def claim_and_own(
        self,
        run_id: str,
        expected: RunSnapshot | RunRow,
        owner: OwnerId,
        now_ms: int,
        evidence: LivenessEvidence | None = None,
    ) -> ClaimAndOwnOutcome:
        """Claim and activate ``run_id`` for ``owner`` in one step while it still matches
        ``expected``, with ``now_ms`` as the heartbeat (and as the start, if the run never
        started). Taking a run from another running owner needs that owner's heartbeat to be
        stale and ``evidence`` (a ``LivenessEvidence`` taken at ``now_ms``) that names it;
        re-owning one's own stale run drops the old grant and takes a fresh one.

        Returns ``Activated()``; ``NotFound()``; ``AlreadyClaimed()``; ``HeartbeatFresh()`` (the
        run is running with a fresh heartbeat, the caller's own included); ``SnapshotChanged()``
        (the run moved or settled; also a repeat once owned); ``EvidenceRequired()`` when the
        snapshot holds and its other owner is stale but no fitting evidence came (a read only:
        nothing was written).
        """
        ...

    def activate(
        self,
        run_id: str,
        claimant: OwnerId,
        claimed_at_ms: int,
        expected: RunSnapshot | RunRow,
    ) -> ActivateOutcome:
        """Trade ``claimant``'s exact claim, the one ``claim`` or ``steal`` answered with
        ``claimed_at_ms``, for ownership of ``run_id`` while the run still matches ``expected``.
        The store clock stamps the heartbeat (and the start, the first time).

        Returns ``Activated()``; ``ClaimLost()`` when that claim is not on the run (abandoned,
        recovered, already activated, or a wrong token), changing nothing; ``SnapshotChanged()``
        when the run moved since ``expected`` (typically the owner that was stolen from
        heartbeated), in which case the claim is released.
        """
        ...

    def abandon_claim(
        self, run_id: str, claimant: OwnerId, claimed_at_ms: int
    ) -> AbandonClaimOutcome:
        """Drop ``claimant``'s exact claim on ``run_id``, the one made at ``claimed_at_ms``;
        ownership is untouched. Returns ``Abandoned()``, or ``ClaimLost()`` when there is no such
        claim (a repeat answers this)."""
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
        """Clear ``stale_claimant``'s claim on ``run_id`` made at ``claimed_at_ms``, once it is
        stale at ``now_ms``, on ``evidence`` that ``observer`` holds about the claimant (taken at
        ``now_ms``). The run is not handed to ``observer``.

        Returns ``Recovered()``; ``NotFound()``; ``ClaimFresh()`` while the claim is at most
        ``HEARTBEAT_STALE_AFTER_MS`` old; ``ClaimChanged()`` when that claim is not the one on
        the run (a repeat answers this); ``LivenessUnconfirmed()`` when the evidence does not
        fit, before the run is looked at.
        """
        ...

    def heartbeat(self, run_id: str, owner: OwnerId, now_ms: int) -> HeartbeatOutcome:
        """Renew ``owner``'s lease on ``run_id`` to the later of its stamp and ``now_ms``; a pending
        claim does not stop it. Returns ``Updated()`` (also for an older ``now_ms``, which does
        not move the stamp back), ``FenceLost()`` when ``owner`` does not own the run, or
        ``NotFound()``. Repeat it freely: every ``HEARTBEAT_INTERVAL_MS`` while the work runs."""
        ...

    def reconfirm(self, run_id: str, owner: OwnerId, now_ms: int) -> HeartbeatOutcome:
        """Like ``heartbeat`` for ``owner`` on ``run_id`` at ``now_ms``, but ``FenceLost()`` while
        any claim is pending on the run: the check a supervisor makes before it trusts a lease it
        could not renew for a while. Returns ``Updated()``, ``FenceLost()`` or ``NotFound()``."""
        ...

    def transition_owned(
        self,
        run_id: str,
        owner: OwnerId,
        to_status: RunStatus,
        state_json: str | None = None,
        guard: TransitionGuard | None = None,
    ) -> TransitionOutcome:
        """Move the run ``run_id`` that ``owner`` owns to ``to_status`` (any status but
        ``pending``), replacing its state with ``state_json`` when that is given, if ``guard`` (a
        ``TransitionGuard``) holds. ``running`` keeps ownership; any other status releases it and
        any pending claim, and a terminal one stamps ``finished_at_ms`` from the store clock.

        Returns ``Transitioned()``; ``FenceLost()`` when ``owner`` does not own the run (also a
        repeat after a release), writing nothing; ``NotFound()``; ``GuardFailed()`` when
        ``owner`` owns the run but ``guard`` does not hold.
        """
        ...

    def steal(
        self,
        run_id: str,
        expected: RunSnapshot | RunRow,
        claimant: OwnerId,
        now_ms: int,
        evidence: LivenessEvidence,
    ) -> StealOutcome:
        """Claim the stale running run ``run_id`` for ``claimant`` while it still matches
        ``expected``, on ``evidence`` (taken at ``now_ms``) that names its owner; ``now_ms``
        becomes the claim's token. The old owner stays on the row until ``activate``.

        Returns ``Claimed(now_ms)``; ``NotFound()``; ``AlreadyClaimed()`` while another claim is
        pending (a repeat answers this); ``HeartbeatFresh()`` while the owner's heartbeat is
        fresh, whatever the evidence; ``SnapshotChanged()`` when the run moved or settled;
        ``LivenessUnconfirmed()`` when ``evidence`` does not fit (wrong owner, another instant, a
        kind that does not fit the host relation), before the run is looked at.
        """
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
        """One page of the runs matching every filter given, oldest first, from one snapshot. Runs
        are listed by ``(created_at_ms, run_id)``, a key no write changes, so walking pages with
        ``after=page.next`` returns every run that matched throughout the walk exactly once.

        - ``status``: one ``RunStatus`` or a collection of them;
        - ``claimable_at``: (any admissible time; only its presence counts) pending or suspended
          and unclaimed, so ``claim`` or ``claim_and_own`` can take it (a pending claim blocks,
          however old: find stale ones with ``claim_stale_at``);
        - ``stale_at``: running with a heartbeat older than ``stale_at -
          HEARTBEAT_STALE_AFTER_MS`` (takeover candidates);
        - ``claim_stale_at``: holding a claim granted before ``claim_stale_at -
          HEARTBEAT_STALE_AFTER_MS`` (``recover_claim`` candidates);
        - ``cancel_requested``: True for runs whose cancellation was requested and not yet
          acknowledged, False for every other run;
        - ``lineage_id``: the rounds of that lineage;
        - ``parent_run_id``: the runs forked from that run.

        ``limit`` (1 to 1000, default 100) caps the page; ``after`` is the cursor of the previous
        page. Returns a ``RunPage`` whose rows carry ``state_json=None`` unless ``with_state`` is
        True, and whose ``next`` is ``None`` on the last page.
        """
        ...

    def claim_next(
        self,
        owner: OwnerId,
        now_ms: int,
        *,
        status: RunStatus | Collection[RunStatus] = ("pending", "suspended"),
    ) -> RunRow | None:
        """Claim and activate, for ``owner`` at ``now_ms``, the oldest run whose status is one of
        ``status`` (pending and suspended by default) and that has no claim, as ``claim_and_own``
        with its current snapshot would; concurrent callers get different runs. Returns its
        ``RunRow`` with state, or None when there is none. A run whose stored state no longer
        decodes raises ``DecodeFailedError`` and nothing is written."""
        ...

    def claim_next_many(
        self,
        owner: OwnerId,
        now_ms: int,
        limit: int,
        *,
        status: RunStatus | Collection[RunStatus] = ("pending", "suspended"),
    ) -> list[RunRow]:
        """Claim and activate, for ``owner`` at ``now_ms``, up to ``limit`` (an int from 1 to
        1 000) of the oldest runs whose status is one of ``status`` (pending and suspended by
        default) and that have no claim, each as ``claim_next`` would take it, all in one
        transaction. Returns their ``RunRow``s with state, oldest first (``[]`` when there is
        none); concurrent callers get different runs. A run whose stored state no longer decodes
        raises ``DecodeFailedError`` and nothing is written."""
        ...

    def heartbeat_many(
        self, owner: OwnerId, run_ids: Sequence[str], now_ms: int
    ) -> dict[str, HeartbeatOutcome]:
        """Renew ``owner``'s leases on all of ``run_ids`` at ``now_ms`` in one transaction. Returns
        a dict keyed in ``run_ids`` order, each value what ``heartbeat(run_id, owner, now_ms)``
        alone would answer (a lost fence or a missing run does not fail the others). A repeated
        or inadmissible id refuses the whole call with ``InvalidRunError``, writing nothing."""
        ...

    def purge_settled(self, before_ms: int, *, limit: int = 1000) -> int:
        """Delete up to ``limit`` (at most 10 000) settled runs that finished before ``before_ms``,
        oldest finished first, each with its state, facts, acknowledgement and attempts. A run is
        kept while a round of its lineage is live or a run names it as parent (children go first;
        a later call takes the parent). Each deletion takes a revision and leaves a tombstone in
        the change feed; the id may be created again. Returns how many runs were purged."""
        ...

    def compact_changes(self, through_revision: int, *, limit: int = 1000) -> int:
        """Drop up to ``limit`` tombstones whose revision is at most ``through_revision``, oldest
        first; live entries are never touched and the revision does not move. A consumer whose
        cursor is below ``through_revision`` may then miss those deletions: compact only below
        every consumer's cursor. Returns how many tombstones were dropped."""
        ...

    def ownership_facts(self, run_id: str) -> list[OwnershipFact]:
        """The ownership transitions of ``run_id`` as ``OwnershipFact``s, in order (positions 1, 2,
        3, ...); ``[]`` for an unknown run. Replaying them rebuilds the run's owner and claim."""
        ...

    def revision(self) -> int:
        """The database's execution revision: how many run rows were ever written (inserted, updated
        or deleted), whatever the operations answered."""
        ...

    def changes(self, after_revision: int) -> list[RunChange]:
        """The latest change of each run id whose revision is above ``after_revision``, as
        ``RunChange``s in ascending revision order; a purged run shows as a tombstone
        (``deleted=True``). Pass the last revision you processed to read what happened since."""
        ...

    def state(self) -> StoreState:
        """Everything the store holds (rows, leases, facts, revision, changes, acknowledgements) as
        a ``StoreState``, sorted so two stores compare with ``==``."""
        ...

    def check_invariants(self) -> None:
        """Return when every invariant holds; raise ``AssertionError`` naming the first broken one
        (a row that breaks its shape, a lease that disagrees with its row, facts that do not
        replay to the row, ...)."""
        ...

    def close(self) -> None:
        """Release the store's resources. Closing twice does nothing; stores are also context
        managers that close on exit."""
        ...

    def __enter__(self) -> Self: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...
