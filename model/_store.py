"""``ModelRunStore``: the executable specification of the ``RunStore`` protocol.

The model implements every operation of ``runstore.RunStore`` over plain
immutable values (``runstore.model._state.ModelState``) and is the oracle the
SQLite adapter and every other store are compared with: when they disagree,
the other store is wrong unless the model contradicts contract.md or the seed
code. It does no I/O and reads time only from the clock it is given.

How an operation runs: it admits its arguments with ``runstore._boundary``
(``InvalidRunError``, nothing changed), takes the store's lock, opens a draft
of the current state, decides, and either drops the draft (every loss, every
error) or freezes it into the next state and installs that in one assignment.
So an operation that does not commit leaves no trace by construction: no row
write, no revision, no lease change, no fact.

The model's leases follow ``runstore.model._leases`` (the reference strategy),
with the decisions of contract.md: the release split keeps lease and row in
agreement after every commit, and an operation in which a strategy call loses
after an earlier lease change rolls back whole.

Repetition, in brief: ``create`` of an existing id raises ``constraint``;
``request_cancel`` answers ``AlreadyRequested`` with the original time;
``acknowledge_cancel`` keeps the first acknowledgement and still answers True
(and still writes the row); a spent claim token answers ``ClaimLost``;
``heartbeat`` and ``reconfirm`` never move the stamp backwards but still answer
``Updated``; reads repeat freely. ``close`` does nothing and may be repeated.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Mapping, Sequence
from types import TracebackType
from typing import Literal, Self, TypeAlias

import attrs

from runstore import _boundary
from runstore._boundary import CLAIMABLE_STATUSES, ListQuery, encode_cursor
from runstore._clock import Clock
from runstore._errors import ConstraintError, PersistenceFailedError, RunNotFoundError
from runstore._outcomes import (
    AbandonClaimOutcome,
    Abandoned,
    Activated,
    ActivateOutcome,
    AlreadyRequested,
    CancelRequested,
    ClaimAndOwnOutcome,
    ClaimChanged,
    Claimed,
    ClaimFresh,
    ClaimLost,
    ClaimOutcome,
    EvidenceRequired,
    FenceLost,
    GuardFailed,
    HeartbeatOutcome,
    LivenessUnconfirmed,
    NotFound,
    RecoverClaimOutcome,
    Recovered,
    RequestCancelOutcome,
    SnapshotChanged,
    StealOutcome,
    Terminal,
    Transitioned,
    TransitionOutcome,
    Updated,
)
from runstore._values import (
    TERMINAL_STATUSES,
    CancelAcknowledgement,
    LivenessEvidence,
    OwnerId,
    OwnershipFact,
    RunChange,
    RunPage,
    RunRow,
    RunSnapshot,
    RunStatus,
    StoreState,
    TerminalStatus,
    TransitionGuard,
)
from runstore.consensus._types import Cleared, Granted, Promoted, Renewed

from . import _leases
from ._attempts import forget_attempts
from ._invariants import check_state
from ._rows import (
    claim_free,
    classify_claim_loss,
    decoded,
    evidence_matches,
    latest_round_row,
    lineage_members,
    matches_claim,
    matches_snapshot,
    owned_by,
)
from ._state import Draft, ModelState

_CLAIMABLE = frozenset({"pending", "suspended"})
_OWNABLE = frozenset({"pending", "suspended", "running"})

_GrantTransition: TypeAlias = Literal["claimed", "stolen"]
_RenewMethod: TypeAlias = Literal["heartbeat", "reconfirm"]


def _without_claim(row: RunRow) -> RunRow:
    return attrs.evolve(row, claim=None, claimed_at_ms=None)


class ModelRunStore:
    """The reference ``RunStore``: pure in-memory state behind one lock.

    ``clock`` is the store clock: ``create`` stamps ``created_at_ms``,
    ``activate`` stamps ``started_at_ms`` and the first heartbeat,
    ``transition_owned`` stamps ``finished_at_ms``, and the lease-reading
    operations refuse a ``now_ms`` more than the skew allowance ahead of it.
    Every public method holds the lock for its whole decision, so a worker
    thread and a heartbeat thread may share one model.
    """

    def __init__(self, clock: Clock) -> None:
        self._clock = _boundary.admit_clock("ModelRunStore", clock)
        self._state = ModelState()
        self._lock = threading.RLock()

    # -- plumbing --------------------------------------------------------------

    def _draft(self, method: str) -> Draft:
        return Draft(self._state, method)

    def _commit(self, draft: Draft) -> None:
        self._state = draft.freeze()

    @property
    def model_state(self) -> ModelState:
        """The current committed state (an immutable value)."""
        with self._lock:
            return self._state

    # -- creation and reads ----------------------------------------------------

    def create(
        self,
        run_id: str,
        state_json: str,
        *,
        parent_run_id: str | None = None,
        lineage_id: str | None = None,
        round_ordinal: int | None = None,
    ) -> None:
        """Insert a ``pending`` run stamped with the store clock.

        A duplicate id, a parent that names no run (a run may name itself, as
        SQLite checks the foreign key after the insert) or a taken
        ``(lineage_id, round_ordinal)`` raises ``ConstraintError``; creating
        the same id twice therefore fails the second time.
        """
        rid, state, parent, lineage, ordinal = _boundary.admit_create(
            run_id, state_json, parent_run_id, lineage_id, round_ordinal
        )
        created_at_ms = _boundary.clock_reading("create", self._clock)
        with self._lock:
            draft = self._draft("create")
            if draft.row(rid) is not None:
                raise ConstraintError("create", {"constraint": "run_id"})
            if parent is not None and parent != rid and draft.row(parent) is None:
                raise ConstraintError("create", {"constraint": "parent_run_id"})
            if lineage is not None and any(
                row.lineage_id == lineage and row.round_ordinal == ordinal
                for row in draft.rows.values()
            ):
                raise ConstraintError("create", {"constraint": "lineage_round"})
            draft.write_row(
                RunRow(
                    run_id=rid,
                    status="pending",
                    created_at_ms=created_at_ms,
                    started_at_ms=None,
                    finished_at_ms=None,
                    owner=None,
                    heartbeat_at_ms=None,
                    claim=None,
                    claimed_at_ms=None,
                    parent_run_id=parent,
                    cancel_requested_at_ms=None,
                    lineage_id=lineage,
                    round_ordinal=ordinal,
                    state_json=state,
                )
            )
            self._commit(draft)

    def get(self, run_id: str) -> RunRow:
        """The run, or ``RunNotFoundError``; ``DecodeFailedError`` for a broken row."""
        rid = _boundary.admit_run_id("get", run_id)
        with self._lock:
            row = self._state.rows.get(rid)
        if row is None:
            raise RunNotFoundError("get", rid)
        return decoded("get", row)

    def lineage(self, run_id: str) -> list[RunRow]:
        """Every round of the run's lineage in round order; ``[]`` if unknown."""
        rid = _boundary.admit_run_id("lineage", run_id)
        with self._lock:
            members = lineage_members(self._state.rows, rid)
        return [decoded("lineage", row) for row in members]

    def latest_round(self, run_id: str) -> RunRow:
        """The highest round of the run's lineage (the run itself when it has
        none), or ``RunNotFoundError``."""
        rid = _boundary.admit_run_id("latest_round", run_id)
        with self._lock:
            row = latest_round_row(self._state.rows, rid)
        if row is None:
            raise RunNotFoundError("latest_round", rid)
        return decoded("latest_round", row)

    # -- cancellation ----------------------------------------------------------

    def request_cancel(self, run_id: str, now_ms: int) -> RequestCancelOutcome:
        """Record cancellation intent on a live run that has none.

        A repeat answers ``AlreadyRequested`` with the original time; a settled
        run answers ``Terminal``; an unknown run ``NotFound``.
        """
        rid, now = _boundary.admit_request_cancel("request_cancel", run_id, now_ms)
        with self._lock:
            draft = self._draft("request_cancel")
            row = draft.row(rid)
            if (
                row is not None
                and row.cancel_requested_at_ms is None
                and row.status not in TERMINAL_STATUSES
            ):
                draft.write_row(attrs.evolve(row, cancel_requested_at_ms=now))
                self._commit(draft)
                return CancelRequested(now)
            return _classify_cancellation_miss("request_cancel", rid, [] if row is None else [row])

    def request_cancel_lineage(self, run_id: str, now_ms: int) -> RequestCancelOutcome:
        """Record intent on every live, unrequested round of the lineage.

        Marking at least one round answers ``CancelRequested(now_ms)`` (earlier
        requests are kept). Otherwise a live round's earlier request dominates
        (``AlreadyRequested``), all settled answers ``Terminal`` of the last
        round, an unknown run ``NotFound``.
        """
        rid, now = _boundary.admit_request_cancel("request_cancel_lineage", run_id, now_ms)
        with self._lock:
            draft = self._draft("request_cancel_lineage")
            members = lineage_members(draft.rows, rid)
            marked = [
                row
                for row in members
                if row.cancel_requested_at_ms is None and row.status not in TERMINAL_STATUSES
            ]
            if marked:
                # One revision per round it marks, numbered in run id order
                # (not round order): the contract pins the order a single
                # set-based UPDATE over a table keyed by run id applies.
                for row in sorted(marked, key=lambda member: member.run_id):
                    draft.write_row(attrs.evolve(row, cancel_requested_at_ms=now))
                self._commit(draft)
                return CancelRequested(now)
            return _classify_cancellation_miss("request_cancel_lineage", rid, members)

    def acknowledge_cancel(self, run_id: str, owner: OwnerId, now_ms: int) -> bool:
        """Record the owner's first observation of cancellation intent.

        True when the run is running under ``owner`` with a request on it; a
        repeat keeps the first acknowledgement, still writes the row and still
        answers True. False (nothing written) otherwise.
        """
        rid, who, now = _boundary.admit_acknowledge_cancel(run_id, owner, now_ms)
        with self._lock:
            draft = self._draft("acknowledge_cancel")
            row = draft.row(rid)
            if row is None or not owned_by(row, who) or row.cancel_requested_at_ms is None:
                return False
            draft.acknowledge(CancelAcknowledgement(rid, now, who))
            draft.write_row(row)
            self._commit(draft)
            return True

    # -- claims and ownership --------------------------------------------------

    def claim(
        self, run_id: str, expected: RunSnapshot | RunRow, claimant: OwnerId, now_ms: int
    ) -> ClaimOutcome:
        """Reserve an exact, unclaimed pending or suspended snapshot.

        A second claim on the same run answers ``AlreadyClaimed``.
        """
        rid, snapshot, who, now = _boundary.admit_claim(
            run_id, expected, claimant, now_ms, self._clock
        )
        with self._lock:
            draft = self._draft("claim")
            row = draft.row(rid)
            if not (
                row is not None
                and row.status in _CLAIMABLE
                and matches_snapshot(row, snapshot)
                and claim_free(row)
            ):
                return classify_claim_loss(row, now)
            grant, lease = _leases.claim(draft.lease(rid), rid, who, now)
            if not isinstance(grant, Granted):
                # The strategy is authoritative; the loss is read from the row.
                return classify_claim_loss(row, now)
            draft.set_lease(rid, lease)
            draft.write_row(attrs.evolve(row, claim=who, claimed_at_ms=grant.granted_at_ms))
            draft.record(rid, "claimed", who, grant.granted_at_ms)
            self._commit(draft)
            return Claimed(grant.granted_at_ms)

    def claim_and_own(
        self,
        run_id: str,
        expected: RunSnapshot | RunRow,
        owner: OwnerId,
        now_ms: int,
        evidence: LivenessEvidence | None = None,
    ) -> ClaimAndOwnOutcome:
        """Claim and activate in one step, with the caller's ``now_ms`` as the
        heartbeat (and the start, if the run never started).

        Taking a run from another running owner needs a stale heartbeat and
        matching evidence; without evidence a stale, unchanged snapshot answers
        ``EvidenceRequired`` (a read only). Re-owning one's own stale run drops
        the old grant and takes a fresh one. Once owned, a repeat answers
        ``SnapshotChanged`` or ``HeartbeatFresh``.
        """
        rid, snapshot, who, now, proof = _boundary.admit_claim_and_own(
            run_id, expected, owner, now_ms, evidence, self._clock
        )
        with self._lock:
            if (
                snapshot.status == "running"
                and snapshot.owner != who
                and not (proof is not None and evidence_matches(snapshot, who, now, proof))
            ):
                # The read-only pre-check: evidence cannot displace a fresh
                # heartbeat, so the lease is classified before asking for it.
                current = self._state.rows.get(rid)
                loss = classify_claim_loss(current, now)
                if (
                    isinstance(loss, SnapshotChanged)
                    and current is not None
                    and matches_snapshot(current, snapshot)
                ):
                    return EvidenceRequired()
                return loss

            draft = self._draft("claim_and_own")
            row = draft.row(rid)
            if not (
                row is not None
                and row.status in _OWNABLE
                and matches_snapshot(row, snapshot)
                and claim_free(row)
                and (
                    row.status != "running"
                    or row.heartbeat_at_ms is None
                    or _leases.is_stale(row.heartbeat_at_ms, now)
                )
            ):
                return classify_claim_loss(row, now)

            if snapshot.owner is None:
                grant, lease = _leases.claim(draft.lease(rid), rid, who, now)
                transition: _GrantTransition = "claimed"
            elif snapshot.owner == who:
                # Re-owning one's own stale run: a new generation.
                draft.set_lease(rid, _leases.release_ownership(draft.lease(rid), who))
                draft.record(rid, "released", who, None)
                grant, lease = _leases.claim(draft.lease(rid), rid, who, now)
                transition = "claimed"
            else:
                if proof is None:  # the pre-check admitted only matching evidence
                    raise AssertionError("claim_and_own stole without evidence")
                grant, lease = _leases.steal(draft.lease(rid), rid, who, now, proof)
                transition = "stolen"
            if not isinstance(grant, Granted):
                # Dropping the draft also undoes a re-own's release.
                return classify_claim_loss(row, now)
            draft.set_lease(rid, lease)
            promotion, lease = _leases.activate(draft.lease(rid), who, grant.granted_at_ms, now)
            if not isinstance(promotion, Promoted):
                # Contract.md "Decided here" 1: the whole operation rolls back.
                return classify_claim_loss(row, now)
            draft.set_lease(rid, lease)
            draft.record(rid, transition, who, grant.granted_at_ms)
            draft.record(rid, "activated", who, grant.granted_at_ms)
            draft.write_row(
                attrs.evolve(
                    row,
                    status="running",
                    started_at_ms=row.started_at_ms if row.started_at_ms is not None else now,
                    finished_at_ms=None,
                    owner=who,
                    heartbeat_at_ms=now,
                )
            )
            self._commit(draft)
            return Activated()

    def activate(
        self,
        run_id: str,
        claimant: OwnerId,
        claimed_at_ms: int,
        expected: RunSnapshot | RunRow,
    ) -> ActivateOutcome:
        """Trade the exact claim for ownership while ``expected`` still holds.

        If the snapshot moved, the claim is cleared and released
        (``SnapshotChanged``). A spent or foreign token answers ``ClaimLost``
        and changes nothing.
        """
        rid, who, token, snapshot = _boundary.admit_activate(
            run_id, claimant, claimed_at_ms, expected
        )
        activated_at_ms = _boundary.clock_reading("activate", self._clock)
        with self._lock:
            draft = self._draft("activate")
            row = draft.row(rid)
            if row is None or not matches_claim(row, who, token):
                return ClaimLost()
            if not matches_snapshot(row, snapshot):
                draft.set_lease(rid, _leases.release_claim(draft.lease(rid), who, token))
                draft.record(rid, "released", who, token)
                draft.write_row(_without_claim(row))
                self._commit(draft)
                return SnapshotChanged()
            promotion, lease = _leases.activate(draft.lease(rid), who, token, activated_at_ms)
            if not isinstance(promotion, Promoted):
                # The strategy no longer holds this claim: clear the row's copy.
                draft.write_row(_without_claim(row))
                self._commit(draft)
                return ClaimLost()
            draft.set_lease(rid, lease)
            draft.write_row(
                attrs.evolve(
                    row,
                    status="running",
                    started_at_ms=(
                        row.started_at_ms if row.started_at_ms is not None else activated_at_ms
                    ),
                    finished_at_ms=None,
                    owner=who,
                    heartbeat_at_ms=activated_at_ms,
                    claim=None,
                    claimed_at_ms=None,
                )
            )
            draft.record(rid, "activated", who, token)
            self._commit(draft)
            return Activated()

    def abandon_claim(
        self, run_id: str, claimant: OwnerId, claimed_at_ms: int
    ) -> AbandonClaimOutcome:
        """Drop the caller's exact claim; ownership is untouched.

        A repeat answers ``ClaimLost``.
        """
        rid, who, token = _boundary.admit_abandon_claim(run_id, claimant, claimed_at_ms)
        with self._lock:
            draft = self._draft("abandon_claim")
            row = draft.row(rid)
            if row is None or not matches_claim(row, who, token):
                return ClaimLost()
            draft.write_row(_without_claim(row))
            draft.set_lease(rid, _leases.release_claim(draft.lease(rid), who, token))
            draft.record(rid, "released", who, token)
            self._commit(draft)
            return Abandoned()

    def recover_claim(
        self,
        run_id: str,
        stale_claimant: OwnerId,
        claimed_at_ms: int,
        observer: OwnerId,
        now_ms: int,
        evidence: LivenessEvidence,
    ) -> RecoverClaimOutcome:
        """Clear a dead claimant's stale claim; the run is not handed over.

        Mismatched evidence answers ``LivenessUnconfirmed`` before the run is
        looked at. A repeat answers ``ClaimChanged``.
        """
        rid, stale, token, who, now, proof = _boundary.admit_recover_claim(
            run_id, stale_claimant, claimed_at_ms, observer, now_ms, evidence, self._clock
        )
        if not _leases.matches_evidence(stale, who, now, proof):
            return LivenessUnconfirmed()
        with self._lock:
            draft = self._draft("recover_claim")
            row = draft.row(rid)
            if row is None:
                return NotFound()
            if not matches_claim(row, stale, token):
                return ClaimChanged()
            if not _leases.is_stale(token, now):
                return ClaimFresh()
            cleared, lease = _leases.recover(draft.lease(rid), stale, token, who, now, proof)
            if not isinstance(cleared, Cleared):
                return ClaimChanged()
            draft.set_lease(rid, lease)
            draft.write_row(_without_claim(row))
            draft.record(rid, "expired", stale, token)
            self._commit(draft)
            return Recovered()

    def heartbeat(self, run_id: str, owner: OwnerId, now_ms: int) -> HeartbeatOutcome:
        """Renew the owner's lease to ``max(old, now_ms)``; a pending claim
        does not stop it. An older ``now_ms`` still answers ``Updated``."""
        return self._renew("heartbeat", run_id, owner, now_ms)

    def reconfirm(self, run_id: str, owner: OwnerId, now_ms: int) -> HeartbeatOutcome:
        """``heartbeat``, but ``FenceLost`` while any claim is pending."""
        return self._renew("reconfirm", run_id, owner, now_ms)

    def _renew(
        self, method: _RenewMethod, run_id: str, owner: OwnerId, now_ms: int
    ) -> HeartbeatOutcome:
        rid, who, now = _boundary.admit_renewal(method, run_id, owner, now_ms, self._clock)
        with self._lock:
            draft = self._draft(method)
            outcome = _renew_in(draft, method, rid, who, now)
            if isinstance(outcome, Updated):
                self._commit(draft)
            return outcome

    def transition_owned(
        self,
        run_id: str,
        owner: OwnerId,
        to_status: RunStatus,
        state_json: str | None = None,
        guard: TransitionGuard | None = None,
    ) -> TransitionOutcome:
        """Move an owned run, replacing its state when ``state_json`` is given.

        ``running`` keeps ownership; any other status releases it (and any
        pending claim), and a terminal one stamps ``finished_at_ms`` from the
        store clock. After a release a repeat answers ``FenceLost``.
        """
        rid, who, to, state, requirement = _boundary.admit_transition_owned(
            run_id, owner, to_status, state_json, guard
        )
        transitioned_at_ms = _boundary.clock_reading("transition_owned", self._clock)
        with self._lock:
            draft = self._draft("transition_owned")
            held = _leases.holds(draft.lease(rid), who)
            row = draft.row(rid)
            if row is None:
                return NotFound()
            if not held or not owned_by(row, who):
                return FenceLost()
            wanted = None if requirement is None else requirement.cancel_requested
            requested = row.cancel_requested_at_ms is not None
            if (wanted == "absent" and requested) or (wanted == "present" and not requested):
                return GuardFailed()
            new_state = row.state_json if state is None else state
            if to == "running":
                draft.write_row(
                    attrs.evolve(row, status="running", finished_at_ms=None, state_json=new_state)
                )
                self._commit(draft)
                return Transitioned()
            draft.write_row(
                attrs.evolve(
                    row,
                    status=to,
                    finished_at_ms=transitioned_at_ms if to in TERMINAL_STATUSES else None,
                    owner=None,
                    heartbeat_at_ms=None,
                    claim=None,
                    claimed_at_ms=None,
                    state_json=new_state,
                )
            )
            draft.set_lease(rid, _leases.release_ownership(draft.lease(rid), who))
            draft.record(rid, "released", who, None)
            self._commit(draft)
            return Transitioned()

    def steal(
        self,
        run_id: str,
        expected: RunSnapshot | RunRow,
        claimant: OwnerId,
        now_ms: int,
        evidence: LivenessEvidence,
    ) -> StealOutcome:
        """Claim a stale running run whose owner the evidence names; follow
        with ``activate``. Mismatched evidence answers ``LivenessUnconfirmed``
        before the run is looked at; a repeat answers ``AlreadyClaimed``."""
        rid, snapshot, who, now, proof = _boundary.admit_steal(
            run_id, expected, claimant, now_ms, evidence, self._clock
        )
        if not evidence_matches(snapshot, who, now, proof):
            return LivenessUnconfirmed()
        with self._lock:
            draft = self._draft("steal")
            row = draft.row(rid)
            if not (
                row is not None
                and matches_snapshot(row, snapshot)
                and claim_free(row)
                and row.heartbeat_at_ms is not None
                and _leases.is_stale(row.heartbeat_at_ms, now)
            ):
                return classify_claim_loss(row, now)
            grant, lease = _leases.steal(draft.lease(rid), rid, who, now, proof)
            if not isinstance(grant, Granted):
                return classify_claim_loss(row, now)
            draft.set_lease(rid, lease)
            draft.write_row(attrs.evolve(row, claim=who, claimed_at_ms=grant.granted_at_ms))
            draft.record(rid, "stolen", who, grant.granted_at_ms)
            self._commit(draft)
            return Claimed(grant.granted_at_ms)

    # -- finding work, batch renewal, purging (wave 2) --------------------------

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
        """One page of the runs matching every given filter, oldest first.

        Runs are listed by ``(created_at_ms, run_id)``, a key no write changes,
        so walking pages with ``after=page.next`` returns every run that
        matched throughout the walk exactly once. Filters (all that are given
        must hold):

        - ``status``: one status or a collection of them;
        - ``claimable_at=t``: pending or suspended and unclaimed, so ``claim``
          or ``claim_and_own`` can take it (a claim blocks, however old: find
          stale ones with ``claim_stale_at``);
        - ``stale_at=t``: running with a heartbeat older than
          ``t - HEARTBEAT_STALE_AFTER_MS`` (takeover candidates);
        - ``claim_stale_at=t``: holding a claim granted before
          ``t - HEARTBEAT_STALE_AFTER_MS`` (``recover_claim`` candidates);
        - ``cancel_requested=True``: cancellation requested and not yet
          acknowledged; ``False``: every other run;
        - ``lineage_id=L``: the rounds of lineage ``L`` (as ``lineage(L)``);
        - ``parent_run_id=P``: the runs forked from ``P``.

        ``limit`` (1 to 1000) caps the page; ``next`` is the cursor of the
        page's last row when more rows match, else ``None``. Rows carry
        ``state_json=None`` unless ``with_state=True``; otherwise each is what
        ``get`` returns. One snapshot: the page reflects one committed state.
        """
        query = _boundary.admit_list_runs(
            status,
            claimable_at,
            stale_at,
            claim_stale_at,
            cancel_requested,
            lineage_id,
            parent_run_id,
            limit,
            after,
            with_state,
        )
        with self._lock:
            state = self._state
        keys = state.order.irange(minimum=query.after, inclusive=(False, False))
        found: list[RunRow] = []
        for _created, rid in keys:
            row = state.rows[rid]
            if not _listed(row, query, state):
                continue
            if len(found) == query.limit:
                last = found[-1]
                return RunPage(tuple(found), encode_cursor(last.created_at_ms, last.run_id))
            found.append(decoded("list_runs", row) if query.with_state else _stateless(row))
        return RunPage(tuple(found), None)

    def claim_next_candidates(
        self, *, status: RunStatus | Collection[RunStatus] = CLAIMABLE_STATUSES
    ) -> list[str]:
        """The runs ``claim_next`` may take now, oldest first (a model-only read
        for the machines: a store under contention may take any of them)."""
        statuses = _boundary.claim_statuses("claim_next", status)
        with self._lock:
            state = self._state
        return [rid for _created, rid in state.order if _takeable(state.rows[rid], statuses)]

    def claim_next(
        self,
        owner: OwnerId,
        now_ms: int,
        *,
        status: RunStatus | Collection[RunStatus] = CLAIMABLE_STATUSES,
        choose: str | None = None,
    ) -> RunRow | None:
        """Claim and activate the oldest run that ``status`` names (pending and
        suspended by default) with no claim, as ``claim_and_own`` with its
        current snapshot would; return its row (with state) or None when there
        is none.

        A run whose stored state no longer decodes raises ``decode_failed``
        and nothing is written.

        ``choose`` (model only) takes that candidate instead of the oldest, so
        the machines can follow a store that skipped runs other callers held;
        a ``choose`` that is not a candidate raises ``ValueError``.
        """
        who, now, statuses = _boundary.admit_claim_next(owner, now_ms, status, self._clock)
        with self._lock:
            state = self._state
            candidates = [
                rid for _created, rid in state.order if _takeable(state.rows[rid], statuses)
            ]
            if choose is not None and choose not in candidates:
                raise ValueError("claim_next cannot take that run now")
            if not candidates:
                return None
            rid = candidates[0] if choose is None else choose
            # A run whose stored state no longer decodes is refused before
            # anything is written (decode_failed), as a SQL store's read of
            # the row inside its transaction rolls the claim back.
            decoded("claim_next", state.rows[rid])
            outcome = self.claim_and_own(rid, state.rows[rid].snapshot, who, now)
            if not isinstance(outcome, Activated):
                raise AssertionError(f"claim_next could not take an unclaimed run: {outcome!r}")
            return decoded("claim_next", self._state.rows[rid])

    def heartbeat_many(
        self, owner: OwnerId, run_ids: Sequence[str], now_ms: int
    ) -> dict[str, HeartbeatOutcome]:
        """Renew ``owner``'s leases on many runs in one transaction.

        Each answer is what ``heartbeat(run_id, owner, now_ms)`` alone would
        give (a lost fence or a missing run does not fail the others); keys in
        ``run_ids`` order. The renewed rows are written in run id order (one
        revision each). A repeated or inadmissible id refuses the whole call.
        """
        who, ids, now = _boundary.admit_heartbeat_many(owner, run_ids, now_ms, self._clock)
        with self._lock:
            draft = self._draft("heartbeat_many")
            answers = {rid: _renew_in(draft, "heartbeat", rid, who, now) for rid in sorted(ids)}
            if any(isinstance(answer, Updated) for answer in answers.values()):
                self._commit(draft)
        return {rid: answers[rid] for rid in ids}

    def purge_settled(self, before_ms: int, *, limit: int = 1000) -> int:
        """Delete up to ``limit`` settled runs that finished before ``before_ms``.

        A run is purged with its state, facts, acknowledgement and attempts
        when it is terminal, ``finished_at_ms < before_ms``, no round of its
        lineage is still live, and no run names it as parent (children go
        first; a later call takes the parent). The oldest finished go first;
        each deletion takes a revision (in run id order) and leaves a
        tombstone in the change feed; the id may be created again. Answers
        how many runs were purged.
        """
        cutoff, size = _boundary.admit_purge_settled(before_ms, limit)
        with self._lock:
            draft = self._draft("purge_settled")
            eligible = _purgeable(draft.rows, cutoff, size)
            purged = sorted(row.run_id for row in eligible)
            for rid in purged:
                draft.delete_row(rid)
            if purged:
                self._commit(draft)
        if purged:
            forget_attempts(self, purged)
        return len(purged)

    def purge_candidates(self, before_ms: int, *, limit: int = 1000) -> list[RunRow]:
        """The runs ``purge_settled(before_ms, limit=limit)`` would purge now,
        in the order it picks them (oldest finished first, then run id),
        without their state; nothing is written. Same arguments and
        refusals as ``purge_settled``."""
        cutoff, size = _boundary.admit_purge_settled(before_ms, limit, "purge_candidates")
        with self._lock:
            return [_stateless(row) for row in _purgeable(self._state.rows, cutoff, size)]

    def compact_changes(self, through_revision: int, *, limit: int = 1000) -> int:
        """Drop up to ``limit`` tombstones whose revision is at most
        ``through_revision``, oldest first; live entries are never touched and
        the revision does not move. A consumer whose cursor is below
        ``through_revision`` may then miss those deletions: compact only below
        every consumer's cursor. Answers how many tombstones were dropped.
        """
        through, size = _boundary.admit_compact_changes(through_revision, limit)
        with self._lock:
            draft = self._draft("compact_changes")
            stale = sorted(
                (revision, rid) for rid, revision in draft.tombstones.items() if revision <= through
            )[:size]
            for _revision, rid in stale:
                draft.drop_tombstone(rid)
            if stale:
                self._commit(draft)
        return len(stale)

    # -- introspection ---------------------------------------------------------

    def ownership_facts(self, run_id: str) -> list[OwnershipFact]:
        """The run's ownership transitions in order; ``[]`` for an unknown run."""
        rid = _boundary.admit_run_id("ownership_facts", run_id)
        with self._lock:
            return list(self._state.facts.get(rid, ()))

    def revision(self) -> int:
        """The database revision: how many run rows were ever written."""
        with self._lock:
            return self._state.revision

    def changes(self, after_revision: int) -> list[RunChange]:
        """The latest revision of each run id above ``after_revision``, ascending."""
        after = _boundary.admit_changes(after_revision)
        with self._lock:
            state = self._state
        return _feed_from(state, after)

    def state(self) -> StoreState:
        """Everything the model holds, sorted for comparison with ``==``."""
        with self._lock:
            state = self._state
        return StoreState(
            rows=tuple(state.rows[k] for k in sorted(state.rows)),
            leases=tuple(state.leases[k] for k in sorted(state.leases)),
            facts=tuple(fact for k in sorted(state.facts) for fact in state.facts[k]),
            revision=state.revision,
            changes=tuple(_feed_from(state, -1)),
            acknowledgements=tuple(
                state.acknowledgements[k] for k in sorted(state.acknowledgements)
            ),
            attempts=(),
        )

    def check_invariants(self) -> None:
        """Raise ``AssertionError`` naming the first broken invariant."""
        with self._lock:
            state = self._state
        check_state(state)

    # -- test hooks --------------------------------------------------------------

    def raw_write_state(self, run_id: str, text: str) -> bool:
        """Store ``text`` as the run's state with no admission, as a raw SQL
        ``UPDATE`` behind the store's back would (one more revision).

        Reads of that run raise ``DecodeFailedError`` while the text breaks
        admission; writes never read state and are unaffected; a
        ``transition_owned`` with new state heals it. Answers whether a row was
        written (False, and nothing changes, for an unknown run).
        """
        with self._lock:
            draft = self._draft("raw_write_state")
            row = draft.row(run_id)
            if row is None:
                return False
            draft.write_row(attrs.evolve(row, state_json=text))
            self._commit(draft)
            return True

    # -- lifetime ----------------------------------------------------------------

    def close(self) -> None:
        """Do nothing: the model holds no resources. Repeatable."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        with self._lock:
            state = self._state
        return f"ModelRunStore(runs={len(state.rows)}, revision={state.revision})"


def _classify_cancellation_miss(
    method: str, run_id: str, rows: list[RunRow]
) -> RequestCancelOutcome:
    """Name the outcome of a cancellation request that marked no row.

    ``rows`` are the candidates in round order (none: ``NotFound``). A live
    round's earlier request dominates settled ones; otherwise the last settled
    round's status is reported. A live round without a request cannot survive
    the marking step, so meeting one is an internal failure.
    """
    outcome: RequestCancelOutcome = NotFound()
    for row in rows:
        if row.status in TERMINAL_STATUSES:
            if not isinstance(outcome, AlreadyRequested):
                outcome = Terminal(_terminal(row.status))
            continue
        if row.cancel_requested_at_ms is None:
            raise PersistenceFailedError(
                method,
                "guarded cancellation update missed a live unrequested row",
                {"run_id": run_id, "stage": "write-invariant"},
            )
        outcome = AlreadyRequested(row.cancel_requested_at_ms)
    return outcome


def _terminal(status: RunStatus) -> TerminalStatus:
    if status == "completed" or status == "failed" or status == "cancelled":
        return status
    raise AssertionError(f"{status!r} is not a terminal status")


def _renew_in(
    draft: Draft, method: _RenewMethod, rid: str, who: OwnerId, now: int
) -> HeartbeatOutcome:
    """One renewal decided on ``draft``; ``Updated`` means it wrote the row."""
    renew = _leases.heartbeat if method == "heartbeat" else _leases.reconfirm
    renewal, lease = renew(draft.lease(rid), who, now)
    row = draft.row(rid)
    if not isinstance(renewal, Renewed):
        return NotFound() if row is None else FenceLost()
    if row is None or not owned_by(row, who) or row.heartbeat_at_ms is None:
        # A renewed lease over a row the owner does not hold: the lease and row
        # disagree, which the model's own leases never do. The renewal is not
        # kept and the row's answer is given.
        return NotFound() if row is None else FenceLost()
    draft.set_lease(rid, lease)
    stamp = max(row.heartbeat_at_ms, renewal.heartbeat_at_ms)
    draft.write_row(attrs.evolve(row, heartbeat_at_ms=stamp))
    return Updated()


def _feed_from(state: ModelState, after: int) -> list[RunChange]:
    """The change feed above ``after``, from the revision index."""
    tombstones = state.tombstones
    feed = state.feed
    return [
        RunChange(feed[revision], revision, tombstones.get(feed[revision]) == revision)
        for revision in feed.irange(minimum=after + 1)
    ]


def _stale(stamp: int | None, at: int) -> bool:
    return stamp is not None and _leases.is_stale(stamp, at)


def _listed(row: RunRow, query: ListQuery, state: ModelState) -> bool:
    """Whether ``row`` passes every filter of ``query``."""
    if query.statuses is not None and row.status not in query.statuses:
        return False
    if query.claimable_at is not None and not (row.status in _CLAIMABLE and row.claim is None):
        return False
    if query.stale_at is not None and not (
        row.status == "running" and _stale(row.heartbeat_at_ms, query.stale_at)
    ):
        return False
    if query.claim_stale_at is not None and not (
        row.claim is not None and _stale(row.claimed_at_ms, query.claim_stale_at)
    ):
        return False
    if query.cancel_requested is not None:
        waiting = row.cancel_requested_at_ms is not None and row.run_id not in (
            state.acknowledgements
        )
        if waiting != query.cancel_requested:
            return False
    if query.lineage_id is not None:
        lineage = query.lineage_id
        member = row.lineage_id == lineage or (
            row.run_id == lineage and row.lineage_id in (None, lineage)
        )
        if not member:
            return False
    return query.parent_run_id is None or row.parent_run_id == query.parent_run_id


def _takeable(row: RunRow, statuses: tuple[str, ...]) -> bool:
    return row.status in statuses and row.claim is None


def _purgeable(rows: Mapping[str, RunRow], cutoff: int, size: int) -> list[RunRow]:
    """Up to ``size`` runs ``purge_settled`` may take: terminal, finished
    before ``cutoff``, no live round in their lineage, named as parent by no
    run; oldest finished first, then by run id."""
    parents = {row.parent_run_id for row in rows.values() if row.parent_run_id is not None}
    return sorted(
        (
            row
            for row in rows.values()
            if row.status in TERMINAL_STATUSES
            and row.finished_at_ms is not None
            and row.finished_at_ms < cutoff
            and row.run_id not in parents
            and not any(
                member.status not in TERMINAL_STATUSES
                for member in lineage_members(rows, row.run_id)
            )
        ),
        key=lambda row: (row.finished_at_ms, row.run_id),
    )[:size]


def _stateless(row: RunRow) -> RunRow:
    return attrs.evolve(row, state_json=None)
