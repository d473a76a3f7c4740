"""The fence invariants, as pure functions over ``StoreState`` values.

Two kinds of check, each failing with its own ``AssertionError`` subclass so a
test can tell which one fired:

- ``check_state(state)`` judges one state on its own: ownership fields agree
  with the status, claim fields come in pairs, ``finished_at_ms`` marks
  exactly the settled runs, lease and row agree, replaying each run's facts
  rebuilds its owner and claim, and the change feed agrees with the revision.
- ``check_transition(before, after, step)`` judges one step: a settled run
  never changes again; only the owner of record gets a fenced write accepted;
  a heartbeat never moves backwards within one ownership grant (the owner,
  its grant time and the activation that made it owner: activation stamps
  the store clock, so a re-activation by the same owner may move it back); a
  run changes hands only through its own grant, and a running run only
  through a steal (or
  ``claim_and_own``) granted while its heartbeat was strictly older than
  ``now - 30000`` and the evidence matched; facts are only
  appended; the revision moves exactly by the rows the step wrote; every run
  keeps the state last written, byte for byte; a failed step leaves no trace.
  For the operations that work across runs: ``claim_next`` (and each run
  ``claim_next_many`` takes) takes only an unclaimed run of the statuses it
  was given; ``heartbeat_many`` writes only
  the runs it answered ``Updated`` for, each owned by the caller;
  ``purge_settled`` deletes exactly the settled runs it may (finished before
  the cutoff, no live round in the lineage, no child), oldest first, each
  leaving a tombstone; a tombstone leaves the feed only through
  ``compact_changes`` (at or below its cutoff, oldest first) or when its id
  is created again.

Neither function reads a store, a clock or Hypothesis: they are usable from
any test, and from the regression files the fuzzer writes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

import attrs

from runstore._constants import HEARTBEAT_STALE_AFTER_MS
from runstore._outcomes import (
    Abandoned,
    Activated,
    CancelRequested,
    Claimed,
    Recovered,
    SnapshotChanged,
    Transitioned,
    Updated,
)
from runstore._values import (
    TERMINAL_STATUSES,
    Lease,
    LivenessEvidence,
    OwnerId,
    OwnershipFact,
    RunRow,
    StoreState,
)

from .._base._steps import Raised, Step


class InvariantViolation(AssertionError):
    """Base of every fence invariant failure; the subclass names the invariant."""


class RunningOwnershipViolation(InvariantViolation):
    """A run is running without an owner and heartbeat, or has them while not running."""


class ClaimFieldsViolation(InvariantViolation):
    """A run's claimant and claim time are not both set or both empty."""


class FinishedTerminalViolation(InvariantViolation):
    """``finished_at_ms`` is set on a live run, or missing on a settled one."""


class TerminalChangedViolation(InvariantViolation):
    """A settled run changed."""


class LeaseRowDisagreement(InvariantViolation):
    """The strategy's lease and the run row disagree about owner, heartbeat or claim."""


class UnfencedWriteAccepted(InvariantViolation):
    """A fenced write (heartbeat, reconfirm, transition) took effect for someone
    other than the owner of record, or a running run changed without one."""


class HeartbeatRegressed(InvariantViolation):
    """A heartbeat moved backwards within one ownership grant (same owner, same
    grant: no activation in between)."""


class StealWithoutStaleness(InvariantViolation):
    """A steal (or ``claim_and_own`` over another owner) was granted while the
    heartbeat was not strictly older than ``now - 30000``, or without matching
    evidence; or a running run changed hands through a claim no steal granted."""


class OwnerWithoutGrant(InvariantViolation):
    """A run gained an owner without activating that owner's own claim."""


class FactReplayMismatch(InvariantViolation):
    """Replaying a run's facts does not rebuild its owner and claim, or the
    fact stream was rewritten, has gaps, or grew on a run the step did not touch."""


class RevisionMismatch(InvariantViolation):
    """The revision or change feed moved differently from the rows written."""


class StateNotPreserved(InvariantViolation):
    """A run's state is not the text last written, or a run disappeared or
    appeared without ``create``."""


class AdmissionViolation(InvariantViolation):
    """Input contract.md refuses was admitted, or input at one of its limits
    was refused (judged by the suite's own table, since the reference shares
    the stores' admission)."""


class StoreCrashed(InvariantViolation):
    """An operation raised something other than the store's own error type
    (a ``TypeError``, an ``AttributeError``...): a defect even when the
    reference, sharing the same admission code, raised it too."""


class StoreInvariantsFailed(InvariantViolation):
    """The store's own ``check_invariants()`` failed at the end of a program
    in which every other check passed."""


class FailedOperationVisible(InvariantViolation):
    """An operation that raised left a trace in the state."""


class CommittedStateLost(InvariantViolation):
    """Reopening the store lost or changed committed rows, facts or revisions."""


class UnclaimableTaken(InvariantViolation):
    """``claim_next`` (or ``claim_next_many``) took a run that was claimed, owned, settled or
    of a status it was not asked for."""


class SettledPurgeViolation(InvariantViolation):
    """``purge_settled`` deleted a run it must keep (live, finished too late,
    with a live lineage round or a child), kept one it had to take, skipped
    older ones, miscounted, or left no tombstone."""


class PageWalkBroken(InvariantViolation):
    """Walking ``list_runs`` pages by their cursors repeated a run, went back
    in listing order, or skipped a run that matched at every page."""


class TombstoneLost(InvariantViolation):
    """A deletion vanished from the change feed other than by
    ``compact_changes`` at or below its cutoff (oldest first) or by the id
    being created again; or compaction dropped a live entry."""


class CorruptRowAccepted(InvariantViolation):
    """A row edited behind the store's back into one its schema forbids (or
    whose owner columns disagree with the lease) was handed out by a read,
    or passed the store's own ``check_invariants()``."""


class StrategyShapeViolation(InvariantViolation):
    """The strategy under test is not a ``runstore.consensus.Consensus``
    (``isinstance``, as a caller would check it), or that check fails."""


class FaultSeamViolation(InvariantViolation):
    """The store's fault seam accounted for an armed fault other than once:
    each is fired, missed (its attempt ended without reaching it) or left
    unused, exactly one of the three."""


class FailureCauseMismatch(InvariantViolation):
    """A failure the suite caused on purpose was reported with a ``cause``
    that does not say what failed: a write failed by injected faults (the
    error class, the database code, whether the strategy reported it, the
    attempts spent, no constraint or table), or a row broken behind the
    store's back (the run id, the decode stage, the state validity flag)."""


class ReferenceInvariantViolation(AssertionError):
    """An invariant failed on the reference model's own state or step: a
    defect of the conformance suite (its model or its invariants), never a
    failure of the store under test. Built as
    ``ReferenceInvariantViolation(message, invariant)``: ``message`` says what
    broke, ``invariant`` names the invariant (see ``of``)."""

    def __init__(self, message: str, invariant: str = "") -> None:
        super().__init__(message)
        self.invariant = invariant
        """The class name of the invariant that broke on the reference."""

    @classmethod
    def of(cls, error: AssertionError) -> ReferenceInvariantViolation:
        """The suite defect that ``error``, raised on the reference, reveals."""
        name = type(error).__name__
        return cls(f"{name} on the reference model's own history: {error}", name)


INVARIANTS: tuple[type[InvariantViolation], ...] = (
    RunningOwnershipViolation,
    ClaimFieldsViolation,
    FinishedTerminalViolation,
    TerminalChangedViolation,
    LeaseRowDisagreement,
    UnfencedWriteAccepted,
    HeartbeatRegressed,
    StealWithoutStaleness,
    OwnerWithoutGrant,
    FactReplayMismatch,
    RevisionMismatch,
    StateNotPreserved,
    FailedOperationVisible,
    CommittedStateLost,
    UnclaimableTaken,
    SettledPurgeViolation,
    PageWalkBroken,
    TombstoneLost,
    AdmissionViolation,
    StoreCrashed,
    StoreInvariantsFailed,
    FaultSeamViolation,
    CorruptRowAccepted,
    StrategyShapeViolation,
    FailureCauseMismatch,
)
"""Every invariant exception class of the run store, each an ``InvariantViolation``: catch or list
them by class."""


class _Missing:
    """The value of a cause key that must not be there."""

    def __repr__(self) -> str:
        return "(absent)"


MISSING: Final = _Missing()


def check_cause(outcome: object, expected: Mapping[str, Any], shown: str) -> None:
    """``outcome`` (a ``Raised``) carries a cause that says what ``expected``
    says, key by key (``MISSING``: not there), else ``FailureCauseMismatch``
    with both sides. Anything but a ``Raised`` is left to the differential
    step."""
    if not isinstance(outcome, Raised):
        return
    cause = outcome.cause
    wrong = [key for key, value in expected.items() if cause.get(key, MISSING) != value]
    if wrong:
        raise FailureCauseMismatch(
            f"{shown}: the {outcome.code} cause does not say what failed"
            f" (wrong: {', '.join(wrong)})\n"
            f"  expected: {dict(expected)!r}\n"
            f"  store:    {dict(cause)!r}"
        )


_FENCED = frozenset({"heartbeat", "reconfirm", "transition_owned"})
_ACCEPTED = (Updated, Transitioned)


# --- helpers -----------------------------------------------------------------


def _rows(state: StoreState) -> dict[str, RunRow]:
    return {row.run_id: row for row in state.rows}


def _leases(state: StoreState) -> dict[str, Lease]:
    return {
        lease.run_id: lease
        for lease in state.leases
        if lease.owner is not None or lease.claim is not None
    }


def _facts(state: StoreState) -> dict[str, list[OwnershipFact]]:
    streams: dict[str, list[OwnershipFact]] = {}
    for fact in state.facts:
        streams.setdefault(fact.run_id, []).append(fact)
    return streams


def _changes(state: StoreState) -> dict[str, int]:
    return {change.run_id: change.revision for change in state.changes}


def is_stale(stamp: int, now_ms: int) -> bool:
    """Whether ``stamp`` is strictly older than ``now_ms - 30000``."""
    return stamp < now_ms - HEARTBEAT_STALE_AFTER_MS


def evidence_fits(
    expected_owner: OwnerId, observer: OwnerId, now_ms: int, evidence: object
) -> bool:
    """Whether ``evidence`` names ``expected_owner``, was taken at ``now_ms``
    exactly, and fits the host relation between owner and observer."""
    if not isinstance(evidence, LivenessEvidence):
        return False
    if evidence.expected_owner != expected_owner or evidence.checked_at_ms != now_ms:
        return False
    same_host = expected_owner.host_id == observer.host_id
    if evidence.kind == "same-host-pid-dead":
        return same_host
    if evidence.kind == "cross-host-unreachable-stale":
        return not same_host
    return evidence.kind == "lease-expired"


def replay_facts(
    facts: Iterable[OwnershipFact],
) -> tuple[OwnerId | None, OwnerId | None, int | None]:
    """The owner, claimant and claim time that a run's facts rebuild, in order."""
    owner: OwnerId | None = None
    claim: OwnerId | None = None
    claimed_at: int | None = None
    for fact in facts:
        if fact.transition in ("claimed", "stolen"):
            claim, claimed_at = fact.owner, fact.granted_at_ms
        elif fact.transition == "activated":
            owner, claim, claimed_at = fact.owner, None, None
        elif fact.transition == "released" and fact.granted_at_ms is None:
            owner, claim, claimed_at = None, None, None
        else:  # released(X, t) or expired(X, t): the claim goes
            claim, claimed_at = None, None
    return owner, claim, claimed_at


# --- one state ---------------------------------------------------------------


def check_state(state: StoreState, *, leases: bool = True) -> None:
    """Raise the first broken single-state invariant of ``state`` (a
    ``StoreState``); return None when all hold. ``leases=False`` skips the
    lease agreement (for stores that do not expose their leases)."""
    rows = _rows(state)
    for row in state.rows:
        _check_row(row)
    if leases:
        _check_leases(rows, _leases(state))
    _check_facts(rows, _facts(state))
    _check_changes(state, rows)


def _check_row(row: RunRow) -> None:
    running = row.status == "running"
    if running != (row.owner is not None) or (row.owner is None) != (row.heartbeat_at_ms is None):
        raise RunningOwnershipViolation(
            f"run {row.run_id!r}: status {row.status}, owner {row.owner!r}, "
            f"heartbeat {row.heartbeat_at_ms!r}"
        )
    if (row.claim is None) != (row.claimed_at_ms is None):
        raise ClaimFieldsViolation(
            f"run {row.run_id!r}: claim {row.claim!r}, claimed_at_ms {row.claimed_at_ms!r}"
        )
    if (row.finished_at_ms is not None) != (row.status in TERMINAL_STATUSES):
        raise FinishedTerminalViolation(
            f"run {row.run_id!r}: status {row.status}, finished_at_ms {row.finished_at_ms!r}"
        )


def _check_leases(rows: Mapping[str, RunRow], leases: Mapping[str, Lease]) -> None:
    for run_id, orphan in leases.items():
        if run_id not in rows:
            raise LeaseRowDisagreement(f"lease for unknown run {run_id!r}: {orphan!r}")
    for run_id, row in rows.items():
        lease = leases.get(run_id)
        lease_owner = None if lease is None else lease.owner
        lease_claim = None if lease is None else lease.claim
        lease_claimed_at = None if lease is None else lease.claimed_at_ms
        problems = []
        if lease_owner != row.owner:
            problems.append(f"owner {lease_owner!r} vs row {row.owner!r}")
        elif (
            lease is not None
            and lease.owner is not None
            and lease.heartbeat_at_ms != row.heartbeat_at_ms
        ):
            problems.append(f"heartbeat {lease.heartbeat_at_ms!r} vs row {row.heartbeat_at_ms!r}")
        if lease_claim != row.claim or lease_claimed_at != row.claimed_at_ms:
            problems.append(
                f"claim {lease_claim!r}@{lease_claimed_at!r} vs row {row.claim!r}@"
                f"{row.claimed_at_ms!r}"
            )
        if problems:
            raise LeaseRowDisagreement(f"run {run_id!r}: " + "; ".join(problems))


def _check_facts(rows: Mapping[str, RunRow], streams: Mapping[str, list[OwnershipFact]]) -> None:
    for run_id, facts in streams.items():
        if run_id not in rows:
            raise FactReplayMismatch(f"facts recorded for unknown run {run_id!r}")
        positions = [fact.position for fact in facts]
        if positions != list(range(1, len(facts) + 1)):
            raise FactReplayMismatch(f"run {run_id!r}: fact positions {positions}")
    for run_id, row in rows.items():
        owner, claim, claimed_at = replay_facts(streams.get(run_id, ()))
        if (owner, claim, claimed_at) != (row.owner, row.claim, row.claimed_at_ms):
            raise FactReplayMismatch(
                f"run {run_id!r}: facts rebuild owner {owner!r}, claim {claim!r}@{claimed_at!r};"
                f" row has owner {row.owner!r}, claim {row.claim!r}@{row.claimed_at_ms!r}"
            )


def _check_changes(state: StoreState, rows: Mapping[str, RunRow]) -> None:
    revisions = [change.revision for change in state.changes]
    if revisions != sorted(set(revisions)):
        raise RevisionMismatch(f"change revisions not strictly ascending: {revisions}")
    if revisions and revisions[-1] > state.revision:
        raise RevisionMismatch(f"change at {revisions[-1]} above revision {state.revision}")
    if len(rows) > state.revision:
        raise RevisionMismatch(f"{len(rows)} rows but revision {state.revision}")
    changed = _changes(state)
    for run_id in rows:
        if run_id not in changed:
            raise RevisionMismatch(f"run {run_id!r} has no change entry")
    for change in state.changes:
        if not change.deleted and change.run_id not in rows:
            raise RevisionMismatch(f"live change entry for missing run {change.run_id!r}")


def check_leases(
    before: Iterable[Lease | None], after: Iterable[Lease | None], calls: Iterable[Any] = ()
) -> None:
    """Raise the first invariant a strategy's leases break across one
    transaction, from ``before`` to ``after`` (for the strategy machine, where
    no rows exist); return None when all hold: owner, grant time and heartbeat
    are set together, claimant and claim time are set together, an empty lease
    is pruned, and within one grant (same owner and grant time, no activation
    of the run in the transaction) the heartbeat never moves back. ``calls``
    are the transaction's calls (``Call`` values)."""
    activated = {
        op.run_id for op in calls if getattr(op, "method", None) in ("activate", "claim_and_own")
    }
    old = {lease.run_id: lease for lease in before if lease is not None}
    for lease in after:
        if lease is None:
            continue
        if lease.owner is None and lease.claim is None:
            raise RunningOwnershipViolation(f"lease of run {lease.run_id!r} is empty: {lease!r}")
        if (
            not (lease.owner is None)
            == (lease.granted_at_ms is None)
            == (lease.heartbeat_at_ms is None)
        ):
            raise RunningOwnershipViolation(
                f"lease of run {lease.run_id!r}: owner, grant and heartbeat not set together"
                f" ({lease!r})"
            )
        if (lease.claim is None) != (lease.claimed_at_ms is None):
            raise ClaimFieldsViolation(f"lease of run {lease.run_id!r}: {lease!r}")
        previous = old.get(lease.run_id)
        if (
            previous is not None
            and lease.run_id not in activated
            and previous.owner is not None
            and (previous.owner, previous.granted_at_ms) == (lease.owner, lease.granted_at_ms)
            and previous.heartbeat_at_ms is not None
            and lease.heartbeat_at_ms is not None
            and lease.heartbeat_at_ms < previous.heartbeat_at_ms
        ):
            raise HeartbeatRegressed(
                f"lease of run {lease.run_id!r}: heartbeat {previous.heartbeat_at_ms} -> "
                f"{lease.heartbeat_at_ms} under {lease.owner!r} within one grant"
            )


def check_page_walk(pages: Iterable[Any], matching: Iterable[Iterable[str]]) -> None:
    """Judge a finished walk of ``list_runs`` ``pages`` (each a ``RunPage``, the
    last with ``next`` None), raising ``PageWalkBroken`` unless listing keys
    strictly ascend across the walk, and
    every run in each of ``matching`` (the runs that matched the filters when
    each page was read) was listed."""
    keys = [(row.created_at_ms, row.run_id) for page in pages for row in page.runs]
    if keys != sorted(set(keys)):
        raise PageWalkBroken(f"a page walk listed {[key[1] for key in keys]} out of order")
    sets = [set(ids) for ids in matching]
    always = set.intersection(*sets) if sets else set()
    missed = always - {key[1] for key in keys}
    if missed:
        raise PageWalkBroken(f"a page walk skipped {sorted(missed)}, which matched throughout")


# --- one step ------------------------------------------------------------------


def check_transition(
    before: StoreState, after: StoreState, step: Step, *, leases: bool = True
) -> None:
    """Raise the first broken invariant of ``step``, which took the store from
    the state ``before`` to the state ``after``; return None when all hold.
    ``leases=False`` leaves the leases out (for stores that do not expose
    them)."""
    rows_before, rows_after = _rows(before), _rows(after)
    if step.method == "reopen":
        _check_reopen(before, after)
        return
    if step.raised:
        if (rows_before, before.facts, before.revision, before.changes) != (
            rows_after,
            after.facts,
            after.revision,
            after.changes,
        ) or (leases and _leases(before) != _leases(after)):
            raise FailedOperationVisible(f"{step.call.describe()} raised but changed the state")
        return
    purged = _check_purge(before, after, rows_before, rows_after, step)
    _check_tombstones(before, after, step)
    _check_terminal(rows_before, rows_after, step)
    _check_fenced(rows_before, rows_after, step)
    _check_takeover(rows_before, rows_after, _facts(before), step)
    _check_heartbeats(rows_before, rows_after, before, after, step, leases=leases)
    _check_state_preserved(rows_before, rows_after, step, purged)
    _check_fact_growth(before, after, step, purged)
    _check_revision(before, after, rows_before, rows_after, step)


def _check_reopen(before: StoreState, after: StoreState) -> None:
    if (before.rows, before.facts, before.revision, before.changes, before.acknowledgements) != (
        after.rows,
        after.facts,
        after.revision,
        after.changes,
        after.acknowledgements,
    ):
        raise CommittedStateLost("the reopened store differs from the one that crashed")


def _step_run(step: Step) -> object:
    return step.get("run_id")


def _taken(step: Step) -> tuple[str, ...]:
    """The runs ``claim_next`` or ``claim_next_many`` took (none for any other step)."""
    if step.method == "claim_next" and isinstance(step.outcome, RunRow):
        return (step.outcome.run_id,)
    if step.method == "claim_next_many" and isinstance(step.outcome, list):
        return tuple(row.run_id for row in step.outcome if isinstance(row, RunRow))
    return ()


def _touches(step: Step, run_id: str) -> bool:
    """Whether ``step`` names ``run_id`` as a run it may write: its
    ``run_id``, a run ``claim_next`` (``claim_next_many``) took, or one of
    ``heartbeat_many``'s."""
    if step.method == "heartbeat_many":
        ids = step.get("run_ids")
        return isinstance(ids, list | tuple) and run_id in ids
    if step.method == "claim_next" or step.method == "claim_next_many":
        return run_id in _taken(step)
    return _step_run(step) == run_id


def lineage_members(rows: Mapping[str, RunRow], run_id: str) -> list[RunRow]:
    """The rounds of the lineage ``run_id`` belongs to (its lineage id, or its
    own id for a root): every row naming that lineage, plus the root when it
    names none or itself."""
    named = rows.get(run_id)
    if named is None:
        return []
    lineage = named.lineage_id if named.lineage_id is not None else named.run_id
    return [
        row
        for row in rows.values()
        if row.lineage_id == lineage
        or (row.run_id == lineage and row.lineage_id in (None, lineage))
    ]


def purgeable(rows: Mapping[str, RunRow], run_id: str, before_ms: int) -> bool:
    """Whether ``purge_settled(before_ms)`` may delete ``run_id`` from ``rows``."""
    row = rows[run_id]
    return (
        row.status in TERMINAL_STATUSES
        and row.finished_at_ms is not None
        and row.finished_at_ms < before_ms
        and not any(other.parent_run_id == run_id for other in rows.values())
        and all(member.status in TERMINAL_STATUSES for member in lineage_members(rows, run_id))
    )


def _check_purge(
    before: StoreState,
    after: StoreState,
    rows_before: Mapping[str, RunRow],
    rows_after: Mapping[str, RunRow],
    step: Step,
) -> frozenset[str]:
    """The runs ``step`` purged, after judging them (``SettledPurgeViolation``)."""
    if step.method != "purge_settled":
        return frozenset()
    gone = frozenset(run_id for run_id in rows_before if run_id not in rows_after)
    cutoff, limit = step.get("before_ms"), step.get("limit", 1000)
    if step.outcome != len(gone):
        raise SettledPurgeViolation(
            f"{step.call.describe()} answered {step.outcome!r} but deleted {sorted(gone)}"
        )
    if not isinstance(cutoff, int) or not isinstance(limit, int):
        return gone
    for run_id in sorted(gone):
        if not purgeable(rows_before, run_id, cutoff):
            raise SettledPurgeViolation(
                f"{step.call.describe()} deleted {run_id!r}, which it must keep: "
                f"{rows_before[run_id]!r}"
            )
    eligible = sorted(
        (rows_before[run_id].finished_at_ms or 0, run_id)
        for run_id in rows_before
        if purgeable(rows_before, run_id, cutoff)
    )
    if (
        sorted((rows_before[run_id].finished_at_ms or 0, run_id) for run_id in gone)
        != (eligible[:limit])
    ):
        raise SettledPurgeViolation(
            f"{step.call.describe()} deleted {sorted(gone)}; the oldest {limit} of the "
            f"purgeable runs are {[run_id for _at, run_id in eligible[:limit]]}"
        )
    tombstones = {change.run_id for change in after.changes if change.deleted}
    for run_id in gone:
        if run_id not in tombstones:
            raise SettledPurgeViolation(f"purged run {run_id!r} left no tombstone")
    return gone


def _check_tombstones(before: StoreState, after: StoreState, step: Step) -> None:
    """A deletion stays in the feed unless compacted (at or below the cutoff,
    oldest first) or its id is created again; compaction drops only deletions."""
    entries_after = {change.run_id: change for change in after.changes}
    dropped: list[tuple[int, str]] = []
    for change in before.changes:
        now = entries_after.get(change.run_id)
        if now == change:
            continue
        if now is not None and not now.deleted and step.method == "create":
            continue  # the id was created again
        if not change.deleted:
            if now is None:
                raise TombstoneLost(
                    f"{step.call.describe()} dropped the live change entry of {change.run_id!r}"
                )
            continue
        if now is not None and now.deleted:
            continue  # purged again: a newer tombstone
        dropped.append((change.revision, change.run_id))
    if not dropped:
        return
    through = step.get("through_revision")
    if step.method != "compact_changes" or not isinstance(through, int):
        raise TombstoneLost(
            f"{step.call.describe()} dropped the tombstones of {[rid for _r, rid in dropped]}"
        )
    if step.outcome != len(dropped) or any(revision > through for revision, _rid in dropped):
        raise TombstoneLost(f"{step.call.describe()} -> {step.outcome!r} dropped {sorted(dropped)}")
    kept = [
        change.revision for change in after.changes if change.deleted and change.revision <= through
    ]
    if kept and min(kept) < max(revision for revision, _rid in dropped):
        raise TombstoneLost(
            f"{step.call.describe()} dropped {sorted(dropped)} before older tombstones {kept}"
        )


def _check_state_preserved(
    rows_before: Mapping[str, RunRow],
    rows_after: Mapping[str, RunRow],
    step: Step,
    purged: frozenset[str] = frozenset(),
) -> None:
    for run_id in rows_before:
        if run_id not in rows_after and run_id not in purged:
            raise StateNotPreserved(f"run {run_id!r} disappeared")
    for run_id, row in rows_after.items():
        old = rows_before.get(run_id)
        if old is None:
            if step.method != "create" or _step_run(step) != run_id:
                raise StateNotPreserved(f"run {run_id!r} appeared without create")
            expected = step.get("state_json")
        elif (
            step.method == "transition_owned"
            and isinstance(step.outcome, Transitioned)
            and (_step_run(step) == run_id and step.get("state_json") is not None)
        ):
            expected = step.get("state_json")
        elif (
            step.method == "raw_write_state"
            and step.outcome is True
            and (_step_run(step) == run_id)
        ):
            expected = step.get("text")
        else:
            expected = old.state_json
        if row.state_json != expected:
            raise StateNotPreserved(
                f"run {run_id!r}: state is not the text last written "
                f"({len(row.state_json or '')} chars, expected {len(str(expected))})"
            )


def _check_terminal(
    rows_before: Mapping[str, RunRow], rows_after: Mapping[str, RunRow], step: Step
) -> None:
    for run_id, old in rows_before.items():
        if old.status not in TERMINAL_STATUSES or run_id not in rows_after:
            continue  # (a purge, judged by _check_purge)
        new = rows_after[run_id]
        if step.method == "raw_write_state" and _step_run(step) == run_id:
            new = attrs.evolve(new, state_json=old.state_json)
        if new != old:
            raise TerminalChangedViolation(f"settled run {run_id!r} changed: {old!r} -> {new!r}")


def _caller(step: Step) -> object:
    if step.method in (
        "heartbeat",
        "reconfirm",
        "transition_owned",
        "claim_and_own",
        "heartbeat_many",
        "claim_next",
        "claim_next_many",
    ):
        return step.get("owner")
    if step.method == "activate":
        return step.get("claimant")
    return None


def _check_fenced(
    rows_before: Mapping[str, RunRow], rows_after: Mapping[str, RunRow], step: Step
) -> None:
    if step.method == "heartbeat_many" and isinstance(step.outcome, Mapping):
        caller = step.get("owner")
        for run_id, answer in step.outcome.items():
            old = rows_before.get(run_id)
            is_owner = old is not None and old.status == "running" and old.owner == caller
            if not is_owner and isinstance(answer, _ACCEPTED):
                raise UnfencedWriteAccepted(
                    f"heartbeat_many by {caller!r} answered {answer!r} for run {run_id!r} "
                    f"owned by {None if old is None else old.owner!r}"
                )
            if (
                old is not None
                and not isinstance(answer, _ACCEPTED)
                and rows_after.get(run_id) != old
            ):
                raise UnfencedWriteAccepted(
                    f"heartbeat_many by {caller!r} answered {answer!r} for run {run_id!r} "
                    "but changed it"
                )
    if step.method in _FENCED:
        run_id = _step_run(step)
        caller = step.get("owner")
        old = rows_before.get(run_id) if isinstance(run_id, str) else None
        is_owner = old is not None and old.status == "running" and old.owner == caller
        if not is_owner:
            if isinstance(step.outcome, _ACCEPTED):
                raise UnfencedWriteAccepted(
                    f"{step.method} by {caller!r} answered {step.outcome!r} on run {run_id!r} "
                    f"owned by {None if old is None else old.owner!r}"
                )
            if isinstance(run_id, str) and old is not None and rows_after.get(run_id) != old:
                raise UnfencedWriteAccepted(
                    f"{step.method} by non-owner {caller!r} changed run {run_id!r}"
                )
    # A running run's status, state or heartbeat changes only through a write
    # its owner made (or through a takeover, judged separately).
    for run_id, old in rows_before.items():
        new = rows_after.get(run_id)
        if new is None:
            continue  # (a purge, judged by _check_purge)
        if old.status != "running" or old.owner is None or new.owner not in (None, old.owner):
            continue
        moved = (
            new.status != old.status
            or new.heartbeat_at_ms != old.heartbeat_at_ms
            or (new.state_json != old.state_json and step.method != "raw_write_state")
        )
        if moved and (not _touches(step, run_id) or _caller(step) != old.owner):
            raise UnfencedWriteAccepted(
                f"running run {run_id!r} of {old.owner!r} changed through {step.call.describe()}"
            )


def grant_of(run_id: str, row: RunRow, state: StoreState) -> tuple[object, ...] | None:
    """The ownership grant ``row``'s owner holds: the owner, the grant time and
    the position of the ``activated`` fact that made it owner (``None`` when
    the run has no owner). A steal and its activation, even by the same owner,
    start a new grant; heartbeats are judged within one."""
    if row.owner is None:
        return None
    for fact in reversed([fact for fact in state.facts if fact.run_id == run_id]):
        if fact.transition == "activated":
            return (fact.owner, fact.granted_at_ms, fact.position)
    return (row.owner,)


def _check_heartbeats(
    rows_before: Mapping[str, RunRow],
    rows_after: Mapping[str, RunRow],
    before: StoreState,
    after: StoreState,
    step: Step,
    *,
    leases: bool,
) -> None:
    for run_id, old in rows_before.items():
        new = rows_after.get(run_id)
        if new is None:
            continue
        if _regrants(step, run_id) and grant_of(run_id, old, before) != grant_of(
            run_id, new, after
        ):
            continue
        if (
            old.owner is not None
            and new.owner == old.owner
            and old.heartbeat_at_ms is not None
            and new.heartbeat_at_ms is not None
            and new.heartbeat_at_ms < old.heartbeat_at_ms
        ):
            raise HeartbeatRegressed(
                f"run {run_id!r}: heartbeat {old.heartbeat_at_ms} -> {new.heartbeat_at_ms} "
                f"under {old.owner!r} within one grant"
            )
    if not leases:
        return
    leases_after = _leases(after)
    for run_id, old_lease in _leases(before).items():
        new_lease = leases_after.get(run_id)
        if (
            new_lease is not None
            and old_lease.owner is not None
            and new_lease.owner == old_lease.owner
            and new_lease.granted_at_ms == old_lease.granted_at_ms
            and old_lease.heartbeat_at_ms is not None
            and new_lease.heartbeat_at_ms is not None
            and new_lease.heartbeat_at_ms < old_lease.heartbeat_at_ms
            and not (
                _regrants(step, run_id)
                and _activations(run_id, before) != _activations(run_id, after)
            )
        ):
            raise HeartbeatRegressed(
                f"lease of run {run_id!r}: heartbeat {old_lease.heartbeat_at_ms} -> "
                f"{new_lease.heartbeat_at_ms} under {old_lease.owner!r} within one grant"
            )


def _regrants(step: Step, run_id: str) -> bool:
    """Whether ``step`` could have started a new grant on ``run_id``: an
    accepted ``activate`` or ``claim_and_own`` of that run."""
    return (
        step.method in ("activate", "claim_and_own")
        and isinstance(step.outcome, Activated)
        and _step_run(step) == run_id
    ) or run_id in _taken(step)


def _activations(run_id: str, state: StoreState) -> int:
    return sum(
        1 for fact in state.facts if fact.run_id == run_id and fact.transition == "activated"
    )


def _check_takeover(
    rows_before: Mapping[str, RunRow],
    rows_after: Mapping[str, RunRow],
    facts_before: Mapping[str, list[OwnershipFact]],
    step: Step,
) -> None:
    run_id = _step_run(step)
    now = step.get("now_ms")
    old_row = rows_before.get(run_id) if isinstance(run_id, str) else None
    # A steal claim needs a stale owner and evidence about it.
    if step.method == "steal" and isinstance(step.outcome, Claimed):
        claimant = step.get("claimant")
        if (
            old_row is None
            or old_row.status != "running"
            or old_row.owner is None
            or old_row.heartbeat_at_ms is None
            or not is_stale(old_row.heartbeat_at_ms, now)
            or not evidence_fits(old_row.owner, claimant, now, step.get("evidence"))
        ):
            raise StealWithoutStaleness(
                f"steal of {run_id!r} by {claimant!r} at {now} granted over {old_row!r}"
            )
    if step.method == "claim_and_own" and isinstance(step.outcome, Activated):
        owner = step.get("owner")
        if old_row is not None and old_row.status == "running" and old_row.owner is not None:
            stale = old_row.heartbeat_at_ms is not None and is_stale(old_row.heartbeat_at_ms, now)
            fits = old_row.owner == owner or evidence_fits(
                old_row.owner, owner, now, step.get("evidence")
            )
            if not (stale and fits):
                raise StealWithoutStaleness(
                    f"claim_and_own of {run_id!r} by {owner!r} at {now} over {old_row!r}"
                )
    taken = _taken(step)
    for took in taken:
        old_row = rows_before.get(took)
        wanted = step.get("status", ("pending", "suspended"))
        statuses = (wanted,) if isinstance(wanted, str) else tuple(wanted)
        if old_row is None or old_row.status not in statuses or old_row.claim is not None:
            raise UnclaimableTaken(f"{step.call.describe()} took {took!r}, which was {old_row!r}")
    for rid, new in rows_after.items():
        old = rows_before.get(rid)
        if new.owner is None or old is None or new.owner == old.owner:
            continue
        # The run gained a (different) owner: only its own grant may do that.
        if rid in taken and step.get("owner") == new.owner:
            continue
        if step.method == "claim_and_own" and rid == run_id and step.get("owner") == new.owner:
            continue
        if step.method == "activate" and rid == run_id and step.get("claimant") == new.owner:
            token = step.get("claimed_at_ms")
            if old.claim != new.owner or old.claimed_at_ms != token:
                raise OwnerWithoutGrant(
                    f"run {rid!r} activated for {new.owner!r} with token {token} but the "
                    f"row's claim was {old.claim!r}@{old.claimed_at_ms!r}"
                )
            if old.status == "running" and old.owner is not None:
                # Taking a running run: the claim must be a steal's, whose
                # staleness and evidence were judged when it was granted. (The
                # owner may have heartbeated since: only ``reconfirm`` notices a
                # pending claim, and an activation presenting the current
                # snapshot still goes ahead, as upstream's does.)
                grant = [
                    fact
                    for fact in facts_before.get(rid, [])
                    if fact.transition in ("claimed", "stolen")
                    and fact.owner == new.owner
                    and fact.granted_at_ms == token
                ]
                if not grant or grant[-1].transition != "stolen":
                    raise StealWithoutStaleness(
                        f"run {rid!r} taken from {old.owner!r} by a claim granted at {token} "
                        "that no steal granted"
                    )
            continue
        raise OwnerWithoutGrant(
            f"run {rid!r} changed owner {old.owner!r} -> {new.owner!r} through "
            f"{step.call.describe()}"
        )


def _check_fact_growth(
    before: StoreState, after: StoreState, step: Step, purged: frozenset[str] = frozenset()
) -> None:
    streams_before, streams_after = _facts(before), _facts(after)
    for run_id, facts in streams_before.items():
        if run_id in purged:
            if run_id in streams_after:
                raise FactReplayMismatch(f"purged run {run_id!r} kept its facts")
            continue
        if streams_after.get(run_id, [])[: len(facts)] != facts:
            raise FactReplayMismatch(f"run {run_id!r}: recorded facts were rewritten")
    for run_id, facts in streams_after.items():
        grown = len(facts) > len(streams_before.get(run_id, []))
        if grown and not _touches(step, run_id):
            raise FactReplayMismatch(f"run {run_id!r} gained facts from {step.call.describe()}")


def expected_writes(
    rows_before: Mapping[str, RunRow], rows_after: Mapping[str, RunRow], step: Step
) -> int:
    """How many run rows ``step`` must have written (contract.md's revision table)."""
    method, outcome = step.method, step.outcome
    if step.raised:
        return 0
    if method == "create":
        return 1
    if method == "claim_next":
        return 1 if isinstance(outcome, RunRow) else 0
    if method == "claim_next_many":
        return len(outcome) if isinstance(outcome, list) else 0
    if method == "heartbeat_many":
        if not isinstance(outcome, Mapping):
            return 0
        return sum(1 for answer in outcome.values() if isinstance(answer, Updated))
    if method == "purge_settled":
        # Each deletion takes a revision, as its tombstone.
        return outcome if type(outcome) is int else 0
    if method == "request_cancel_lineage":
        if not isinstance(outcome, CancelRequested):
            return 0
        return sum(
            1
            for run_id, old in rows_before.items()
            if old.cancel_requested_at_ms is None
            and rows_after[run_id].cancel_requested_at_ms is not None
        )
    if method == "activate":
        if isinstance(outcome, Activated | SnapshotChanged):
            return 1
        run_id = step.get("run_id")
        old = rows_before.get(run_id) if isinstance(run_id, str) else None
        # A losing activation clears the row's copy of a claim the strategy no
        # longer holds; it writes only when that claim was there.
        matched = (
            old is not None
            and old.claim == step.get("claimant")
            and old.claimed_at_ms == step.get("claimed_at_ms")
        )
        return 1 if matched else 0
    accepted: dict[str, tuple[type, ...]] = {
        "request_cancel": (CancelRequested,),
        "claim": (Claimed,),
        "steal": (Claimed,),
        "claim_and_own": (Activated,),
        "abandon_claim": (Abandoned,),
        "recover_claim": (Recovered,),
        "heartbeat": (Updated,),
        "reconfirm": (Updated,),
        "transition_owned": (Transitioned,),
    }
    if method in accepted:
        return 1 if isinstance(outcome, accepted[method]) else 0
    if method in ("acknowledge_cancel", "raw_write_state"):
        return 1 if outcome is True else 0
    return 0


def _check_revision(
    before: StoreState,
    after: StoreState,
    rows_before: Mapping[str, RunRow],
    rows_after: Mapping[str, RunRow],
    step: Step,
) -> None:
    expected = expected_writes(rows_before, rows_after, step)
    delta = after.revision - before.revision
    if delta != expected:
        raise RevisionMismatch(
            f"{step.call.describe()} -> {step.outcome!r} moved the revision by {delta}, "
            f"expected {expected}"
        )
    changes_before, changes_after = _changes(before), _changes(after)
    written = {
        run_id
        for run_id, revision in changes_after.items()
        if changes_before.get(run_id) != revision
    }
    if len(written) != expected:
        raise RevisionMismatch(
            f"{step.call.describe()} moved the change feed of {sorted(written)}, "
            f"expected {expected} rows"
        )
    for run_id in written:
        if not before.revision < changes_after[run_id] <= after.revision:
            raise RevisionMismatch(
                f"run {run_id!r} change at {changes_after[run_id]} outside "
                f"({before.revision}, {after.revision}]"
            )
    for run_id, new in rows_after.items():
        if run_id not in written and rows_before.get(run_id) != new:
            raise RevisionMismatch(f"run {run_id!r} changed without a revision")
