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
        """Insert the ``pending`` run ``run_id`` with ``state_json`` (strict JSON text, stored byte
        for byte), stamped ``created_at_ms`` by the store clock. ``parent_run_id`` names the run
        it was forked from, which must exist; ``lineage_id`` with ``round_ordinal`` makes it that
        round of a lineage (the lineage's first run has the lineage's id). Returns None.

        Raises ``ConstraintError`` for a duplicate id, a parent that does not exist or a taken
        ``(lineage_id, round_ordinal)``, so creating the same id twice fails the second time;
        ``InvalidRunError`` for an inadmissible argument, a ``lineage_id`` without a
        ``round_ordinal`` or a run id starting with ``flows.companion/``. In the model a run may
        name itself as its parent, as SQLite checks the foreign key after the insert.
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
        """The run ``run_id`` as a ``RunRow``, with its state. Raises ``RunNotFoundError``
        (``not_found_row``) when there is none and ``DecodeFailedError`` when its stored row is
        broken."""
        rid = _boundary.admit_run_id("get", run_id)
        with self._lock:
            row = self._state.rows.get(rid)
        if row is None:
            raise RunNotFoundError("get", rid)
        return decoded("get", row)

    def lineage(self, run_id: str) -> list[RunRow]:
        """Every round of the lineage that contains ``run_id``, in round order: the runs naming that
        lineage, and the run whose id it is. A run outside any lineage is a lineage of one; an
        unknown ``run_id`` gives ``[]``."""
        rid = _boundary.admit_run_id("lineage", run_id)
        with self._lock:
            members = lineage_members(self._state.rows, rid)
        return [decoded("lineage", row) for row in members]

    def latest_round(self, run_id: str) -> RunRow:
        """The highest round of the lineage that contains ``run_id`` (the run itself when it has no
        lineage). Raises ``RunNotFoundError`` when no run has that id."""
        rid = _boundary.admit_run_id("latest_round", run_id)
        with self._lock:
            row = latest_round_row(self._state.rows, rid)
        if row is None:
            raise RunNotFoundError("latest_round", rid)
        return decoded("latest_round", row)

    # -- cancellation ----------------------------------------------------------

    def request_cancel(self, run_id: str, now_ms: int) -> RequestCancelOutcome:
        """Record cancellation intent on the live run ``run_id`` at ``now_ms`` (the caller's
        reading). Returns ``CancelRequested(now_ms)``; a repeat answers ``AlreadyRequested`` with
        the original time, a settled run ``Terminal(status)`` and an unknown run ``NotFound()``.
        Only intent is recorded: the owner sees it (``acknowledge_cancel``) and settles the run."""
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
        """Record cancellation intent at ``now_ms`` on every live, unrequested round of the lineage
        that contains ``run_id``. Returns ``CancelRequested(now_ms)`` when at least one round was
        marked (earlier requests keep their time); otherwise ``AlreadyRequested`` with a live
        round's earlier time, ``Terminal`` with the last round's status when every round has
        settled, or ``NotFound()``."""
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
        """Record that ``owner`` has seen the cancellation request on ``run_id``, at ``now_ms``.
        Returns True when the run is running under ``owner`` with a request on it (a repeat keeps
        the first acknowledgement, still writes the row and answers True again); False, writing
        nothing, when there is no request or ``owner`` does not own the run."""
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
        """Trade ``claimant``'s exact claim, the one ``claim`` or ``steal`` answered with
        ``claimed_at_ms``, for ownership of ``run_id`` while the run still matches ``expected``.
        The store clock stamps the heartbeat (and the start, the first time).

        Returns ``Activated()``; ``ClaimLost()`` when that claim is not on the run (abandoned,
        recovered, already activated, or a wrong token), changing nothing; ``SnapshotChanged()``
        when the run moved since ``expected`` (typically the owner that was stolen from
        heartbeated), in which case the claim is released.
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
        """Drop ``claimant``'s exact claim on ``run_id``, the one made at ``claimed_at_ms``;
        ownership is untouched. Returns ``Abandoned()``, or ``ClaimLost()`` when there is no such
        claim (a repeat answers this)."""
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
        """Clear ``stale_claimant``'s claim on ``run_id`` made at ``claimed_at_ms``, once it is
        stale at ``now_ms``, on ``evidence`` that ``observer`` holds about the claimant (taken at
        ``now_ms``). The run is not handed to ``observer``.

        Returns ``Recovered()``; ``NotFound()``; ``ClaimFresh()`` while the claim is at most
        ``HEARTBEAT_STALE_AFTER_MS`` old; ``ClaimChanged()`` when that claim is not the one on
        the run (a repeat answers this); ``LivenessUnconfirmed()`` when the evidence does not
        fit, before the run is looked at.
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
        """Renew ``owner``'s lease on ``run_id`` to the later of its stamp and ``now_ms``; a pending
        claim does not stop it. Returns ``Updated()`` (also for an older ``now_ms``, which does
        not move the stamp back), ``FenceLost()`` when ``owner`` does not own the run, or
        ``NotFound()``. Repeat it freely: every ``HEARTBEAT_INTERVAL_MS`` while the work runs."""
        return self._renew("heartbeat", run_id, owner, now_ms)

    def reconfirm(self, run_id: str, owner: OwnerId, now_ms: int) -> HeartbeatOutcome:
        """Like ``heartbeat`` for ``owner`` on ``run_id`` at ``now_ms``, but ``FenceLost()`` while
        any claim is pending on the run: the check a supervisor makes before it trusts a lease it
        could not renew for a while. Returns ``Updated()``, ``FenceLost()`` or ``NotFound()``."""
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
        """Move the run ``run_id`` that ``owner`` owns to ``to_status`` (any status but
        ``pending``), replacing its state with ``state_json`` when that is given, if ``guard`` (a
        ``TransitionGuard``) holds. ``running`` keeps ownership; any other status releases it and
        any pending claim, and a terminal one stamps ``finished_at_ms`` from the store clock.

        Returns ``Transitioned()``; ``FenceLost()`` when ``owner`` does not own the run (also a
        repeat after a release), writing nothing; ``NotFound()``; ``GuardFailed()`` when
        ``owner`` owns the run but ``guard`` does not hold.
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
        """Claim the stale running run ``run_id`` for ``claimant`` while it still matches
        ``expected``, on ``evidence`` (taken at ``now_ms``) that names its owner; ``now_ms``
        becomes the claim's token. The old owner stays on the row until ``activate``.

        Returns ``Claimed(now_ms)``; ``NotFound()``; ``AlreadyClaimed()`` while another claim is
        pending (a repeat answers this); ``HeartbeatFresh()`` while the owner's heartbeat is
        fresh, whatever the evidence; ``SnapshotChanged()`` when the run moved or settled;
        ``LivenessUnconfirmed()`` when ``evidence`` does not fit (wrong owner, another instant, a
        kind that does not fit the host relation), before the run is looked at.
        """
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
        """The ids of the runs ``claim_next(..., status=status)`` may take now, oldest first: those
        whose status is one of ``status`` and that have no claim (a model-only read for the
        machines: a store under contention may take any of them)."""
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
        """Claim and activate, for ``owner`` at ``now_ms``, the oldest run whose status is one of
        ``status`` (pending and suspended by default) and that has no claim, as ``claim_and_own``
        with its current snapshot would; concurrent callers get different runs. Returns its
        ``RunRow`` with state, or None when there is none. A run whose stored state no longer
        decodes raises ``DecodeFailedError`` and nothing is written.

        ``choose`` (model only) takes that candidate instead of the oldest, so the machines can
        follow a store that skipped runs other callers held; a ``choose`` that is not a candidate
        raises ``ValueError``.
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

    def claim_next_many(
        self,
        owner: OwnerId,
        now_ms: int,
        limit: int,
        *,
        status: RunStatus | Collection[RunStatus] = CLAIMABLE_STATUSES,
        choose: Sequence[str] | None = None,
    ) -> list[RunRow]:
        """Claim and activate, for ``owner`` at ``now_ms``, up to ``limit`` (an int from 1 to
        1 000) of the oldest runs whose status is one of ``status`` (pending and suspended by
        default) and that have no claim, each as ``claim_next`` would take it, all in one
        transaction. Returns their ``RunRow``s with state, oldest first (``[]`` when there is
        none); concurrent callers get different runs. A run whose stored state no longer decodes
        raises ``DecodeFailedError`` and nothing is written.

        ``choose`` (model only) takes those candidates instead of the oldest, so the machines can
        follow a store that skipped runs other callers held: distinct candidates, oldest first,
        as many as the call would take (``limit`` or every candidate, whichever is fewer);
        anything else raises ``ValueError``.
        """
        who, now, size, statuses = _boundary.admit_claim_next_many(
            owner, now_ms, limit, status, self._clock
        )
        with self._lock:
            state = self._state
            candidates = [
                rid for _created, rid in state.order if _takeable(state.rows[rid], statuses)
            ]
            if choose is None:
                picks = candidates[:size]
            else:
                picks = list(choose)
                place = {rid: index for index, rid in enumerate(candidates)}
                if (
                    len(picks) != min(size, len(candidates))
                    or any(rid not in place for rid in picks)
                    or [place[rid] for rid in picks] != sorted({place[rid] for rid in picks})
                ):
                    raise ValueError("claim_next_many cannot take those runs now")
            # Every pick is decoded before anything is written: one that no
            # longer decodes refuses the whole call (decode_failed), as a SQL
            # store's transaction rolls back every claim it made.
            for rid in picks:
                decoded("claim_next_many", state.rows[rid])
            taken: list[RunRow] = []
            for rid in picks:
                outcome = self.claim_and_own(rid, self._state.rows[rid].snapshot, who, now)
                if not isinstance(outcome, Activated):
                    raise AssertionError(
                        f"claim_next_many could not take an unclaimed run: {outcome!r}"
                    )
                taken.append(decoded("claim_next_many", self._state.rows[rid]))
            return taken

    def heartbeat_many(
        self, owner: OwnerId, run_ids: Sequence[str], now_ms: int
    ) -> dict[str, HeartbeatOutcome]:
        """Renew ``owner``'s leases on all of ``run_ids`` at ``now_ms`` in one transaction. Returns
        a dict keyed in ``run_ids`` order, each value what ``heartbeat(run_id, owner, now_ms)``
        alone would answer (a lost fence or a missing run does not fail the others). A repeated
        or inadmissible id refuses the whole call with ``InvalidRunError``, writing nothing. The
        renewed rows are written in run id order, one revision each."""
        who, ids, now = _boundary.admit_heartbeat_many(owner, run_ids, now_ms, self._clock)
        with self._lock:
            draft = self._draft("heartbeat_many")
            answers = {rid: _renew_in(draft, "heartbeat", rid, who, now) for rid in sorted(ids)}
            if any(isinstance(answer, Updated) for answer in answers.values()):
                self._commit(draft)
        return {rid: answers[rid] for rid in ids}

    def purge_settled(self, before_ms: int, *, limit: int = 1000) -> int:
        """Delete up to ``limit`` (at most 10 000) settled runs that finished before ``before_ms``,
        oldest finished first, each with its state, facts, acknowledgement and attempts. A run is
        kept while a round of its lineage is live or a run names it as parent (children go first;
        a later call takes the parent). Each deletion takes a revision and leaves a tombstone in
        the change feed; the id may be created again. Returns how many runs were purged."""
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
        """The runs ``purge_settled`` would purge now with the same ``before_ms`` and ``limit``, in
        the order it takes them, as ``RunRow``s without their state; writes nothing. Same
        refusals as ``purge_settled``. Beyond the ``RunStore`` protocol, as on the SQL stores
        (``runstore purge`` lists through it)."""
        cutoff, size = _boundary.admit_purge_settled(before_ms, limit, "purge_candidates")
        with self._lock:
            return [_stateless(row) for row in _purgeable(self._state.rows, cutoff, size)]

    def compact_changes(self, through_revision: int, *, limit: int = 1000) -> int:
        """Drop up to ``limit`` tombstones whose revision is at most ``through_revision``, oldest
        first; live entries are never touched and the revision does not move. A consumer whose
        cursor is below ``through_revision`` may then miss those deletions: compact only below
        every consumer's cursor. Returns how many tombstones were dropped."""
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
        """The ownership transitions of ``run_id`` as ``OwnershipFact``s, in order (positions 1, 2,
        3, ...); ``[]`` for an unknown run. Replaying them rebuilds the run's owner and claim."""
        rid = _boundary.admit_run_id("ownership_facts", run_id)
        with self._lock:
            return list(self._state.facts.get(rid, ()))

    def revision(self) -> int:
        """The database's execution revision: how many run rows were ever written (inserted, updated
        or deleted), whatever the operations answered."""
        with self._lock:
            return self._state.revision

    def changes(self, after_revision: int) -> list[RunChange]:
        """The latest change of each run id whose revision is above ``after_revision``, as
        ``RunChange``s in ascending revision order; a purged run shows as a tombstone
        (``deleted=True``). Pass the last revision you processed to read what happened since."""
        after = _boundary.admit_changes(after_revision)
        with self._lock:
            state = self._state
        return _feed_from(state, after)

    def state(self) -> StoreState:
        """Everything the store holds (rows, leases, facts, revision, changes, acknowledgements) as
        a ``StoreState``, sorted so two stores compare with ``==``."""
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
        """Return when every invariant holds; raise ``AssertionError`` naming the first broken one
        (a row that breaks its shape, a lease that disagrees with its row, facts that do not
        replay to the row, ...). The model checks its rows, leases, facts, revisions and
        acknowledgements against each other."""
        with self._lock:
            state = self._state
        check_state(state)

    # -- test hooks --------------------------------------------------------------

    def raw_write_state(self, run_id: str, text: str) -> bool:
        """Store ``text`` as the state of ``run_id`` with no admission, as a raw SQL
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
        """Release the store's resources. Closing twice does nothing; stores are also context
        managers that close on exit. The model holds no resources: it does nothing."""

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
