"""Ported upstream cases: execution revisions and cancellation acknowledgement.

upstream-semantics.md §9.2 "ExecutionRevisions", §2.5, §4.7 and §8, with
contract.md's counting rule: the revision rises by one for every run row
inserted, updated (even to the values it already had) or deleted, whatever
the operation's outcome; an operation that writes no row leaves it alone.

SQL-only and left to the adapter's tests: the upgrade from schema 0002 (baseline
revisions 1, 2 in creation order), the 32-hex source identity, the refused
``run_id`` rename, a raw cross-process DELETE leaving a tombstone, and
overflow / missing-source refusals.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from runstore import (
    Abandoned,
    Activated,
    AlreadyClaimed,
    AlreadyRequested,
    CancelAcknowledgement,
    CancelRequested,
    ClaimChanged,
    Claimed,
    ClaimFresh,
    ClaimLost,
    EvidenceRequired,
    FenceLost,
    GuardFailed,
    HeartbeatFresh,
    LivenessEvidence,
    LivenessUnconfirmed,
    ManualClock,
    NotFound,
    OwnerId,
    Recovered,
    RunChange,
    RunSnapshot,
    RunStore,
    SnapshotChanged,
    Terminal,
    Transitioned,
    TransitionGuard,
    Updated,
)

from ._golden import OWNER_A, OWNER_B, OWNER_C, PENDING, activate_new, fact, stale_evidence


def test_an_empty_store_is_at_revision_zero(store: RunStore) -> None:
    """a new store is at revision 0 with no changes."""
    assert store.revision() == 0
    assert store.changes(0) == []


def test_acknowledgement_needs_intent_and_the_running_owner(store: RunStore) -> None:
    """acknowledge_cancel is false before ownership or intent and for a stale nonce, true (twice)
    for the owner keeping the first observation, false after the run settles."""
    store.create("r1", "{}")
    store.create("r2", "{}")
    assert store.revision() == 2
    assert store.acknowledge_cancel("r1", OWNER_A, 0) is False
    assert store.claim_and_own("r1", PENDING, OWNER_A, 0) == Activated()
    assert store.revision() == 3
    assert store.acknowledge_cancel("r1", OWNER_A, 1) is False
    assert store.request_cancel("r1", 2) == CancelRequested(2)
    assert store.revision() == 4
    stale_nonce = OwnerId(OWNER_A.host_id, OWNER_A.pid, "owner-a-previous")
    assert store.acknowledge_cancel("r1", stale_nonce, 3) is False
    assert store.revision() == 4
    assert store.acknowledge_cancel("r1", OWNER_A, 4) is True
    assert store.revision() == 5
    # A repeat keeps the first observation but still writes the row.
    assert store.acknowledge_cancel("r1", OWNER_A, 5) is True
    assert store.revision() == 6
    assert store.state().acknowledgements == (CancelAcknowledgement("r1", 4, OWNER_A),)
    assert store.transition_owned("r1", OWNER_A, "cancelled") == Transitioned()
    assert store.revision() == 7
    assert store.acknowledge_cancel("r1", OWNER_A, 6) is False
    assert store.revision() == 7
    # Intent without ownership is not enough either.
    assert store.request_cancel("r2", 1) == CancelRequested(1)
    assert store.acknowledge_cancel("r2", OWNER_A, 1) is False
    assert store.revision() == 8

    assert store.changes(0) == [RunChange("r1", 7, False), RunChange("r2", 8, False)]
    assert store.changes(7) == [RunChange("r2", 8, False)]
    assert store.changes(8) == []
    # Acknowledging is not an ownership transition and settles nothing.
    assert store.ownership_facts("r1") == [
        fact("r1", "claimed", OWNER_A, 0, 1),
        fact("r1", "activated", OWNER_A, 0, 2),
        fact("r1", "released", OWNER_A, None, 3),
    ]
    # The acknowledgement outlives the settlement; only the first one is kept.
    assert store.state().acknowledgements == (CancelAcknowledgement("r1", 4, OWNER_A),)


def test_every_successful_write_advances_the_revision_by_one(
    store: RunStore, clock: ManualClock
) -> None:
    """each operation that writes its run row advances the revision by exactly one."""
    steps: list[tuple[Callable[[], object], object]] = []

    def step(call: Callable[[], object], expected: object) -> None:
        revision = store.revision()
        assert call() == expected
        assert store.revision() == revision + 1, f"step {len(steps)}: {expected}"
        steps.append((call, expected))

    step(lambda: store.create("r", "{}"), None)
    step(lambda: store.claim("r", PENDING, OWNER_A, 0), Claimed(0))
    step(lambda: store.abandon_claim("r", OWNER_A, 0), Abandoned())
    step(lambda: store.claim("r", PENDING, OWNER_A, 0), Claimed(0))
    step(lambda: store.activate("r", OWNER_A, 0, PENDING), Activated())
    step(lambda: store.heartbeat("r", OWNER_A, 0), Updated())
    step(lambda: store.reconfirm("r", OWNER_A, 0), Updated())
    step(lambda: store.transition_owned("r", OWNER_A, "running"), Transitioned())
    step(lambda: store.transition_owned("r", OWNER_A, "running", '{"a":1}'), Transitioned())
    step(lambda: store.request_cancel("r", 1), CancelRequested(1))
    step(lambda: store.acknowledge_cancel("r", OWNER_A, 1), True)

    clock.set(31_000)
    owned = RunSnapshot("running", OWNER_A, 0)
    step(
        lambda: store.steal("r", owned, OWNER_C, 31_000, stale_evidence(OWNER_A, OWNER_C, 31_000)),
        Claimed(31_000),
    )
    step(lambda: store.heartbeat("r", OWNER_A, 31_000), Updated())
    # A losing activate that clears its own claim writes the row.
    step(lambda: store.activate("r", OWNER_C, 31_000, owned), SnapshotChanged())

    clock.set(61_001)
    moved = RunSnapshot("running", OWNER_A, 31_000)
    step(
        lambda: store.steal("r", moved, OWNER_C, 61_001, stale_evidence(OWNER_A, OWNER_C, 61_001)),
        Claimed(61_001),
    )
    step(lambda: store.activate("r", OWNER_C, 61_001, moved), Activated())
    step(lambda: store.transition_owned("r", OWNER_C, "suspended"), Transitioned())
    suspended = RunSnapshot("suspended", None, None)
    # claim_and_own records two facts but writes its row once.
    step(lambda: store.claim_and_own("r", suspended, OWNER_B, 61_001), Activated())
    step(lambda: store.transition_owned("r", OWNER_B, "completed"), Transitioned())

    step(lambda: store.create("q", "{}"), None)
    step(lambda: store.claim("q", PENDING, OWNER_A, 61_001), Claimed(61_001))
    clock.set(91_002)
    step(
        lambda: store.recover_claim(
            "q", OWNER_A, 61_001, OWNER_B, 91_002, stale_evidence(OWNER_A, OWNER_B, 91_002)
        ),
        Recovered(),
    )

    assert store.revision() == len(steps) == 22
    assert store.changes(0) == [RunChange("r", 19, False), RunChange("q", 22, False)]
    assert store.changes(19) == [RunChange("q", 22, False)]
    assert store.state().revision == 22
    assert store.state().changes == (RunChange("r", 19, False), RunChange("q", 22, False))


def test_request_cancel_lineage_counts_one_per_marked_round(store: RunStore) -> None:
    """request_cancel_lineage advances the revision once per round it marks."""
    store.create("lin", "{}")
    for ordinal in range(1, 4):
        store.create(f"lin-{ordinal}", "{}", lineage_id="lin", round_ordinal=ordinal)
    assert store.request_cancel("lin-2", 1) == CancelRequested(1)
    assert store.revision() == 5
    assert store.request_cancel_lineage("lin", 2) == CancelRequested(2)
    assert store.revision() == 8
    changed = store.changes(5)
    assert sorted(change.run_id for change in changed) == ["lin", "lin-1", "lin-3"]
    assert [change.revision for change in changed] == [6, 7, 8]
    assert not any(change.deleted for change in changed)


def _refusal_world(store: RunStore, clock: ManualClock) -> None:
    """Runs in every state a refusal needs, at clock 31 000."""
    activate_new(store, clock, "owned", OWNER_A)  # heartbeat 0, stale from 30 001
    store.create("claimed", "{}")
    assert store.claim("claimed", PENDING, OWNER_A, 0) == Claimed(0)
    activate_new(store, clock, "done", OWNER_A)
    assert store.transition_owned("done", OWNER_A, "completed") == Transitioned()
    store.create("requested", "{}")
    assert store.request_cancel("requested", 1) == CancelRequested(1)
    clock.set(31_000)
    activate_new(store, clock, "fresh", OWNER_A)  # heartbeat 31 000


_OWNED = RunSnapshot("running", OWNER_A, 0)
_FRESH = RunSnapshot("running", OWNER_A, 31_000)
_DONE = RunSnapshot("completed", None, None)


def _evidence(claimant: OwnerId) -> LivenessEvidence:
    return stale_evidence(OWNER_A, claimant, 31_000)


REFUSALS: dict[str, tuple[Callable[[RunStore], object], object]] = {
    "claim-not-found": (lambda s: s.claim("nobody", PENDING, OWNER_B, 31_000), NotFound()),
    "claim-already-claimed": (
        lambda s: s.claim("claimed", PENDING, OWNER_B, 31_000),
        AlreadyClaimed(),
    ),
    "claim-heartbeat-fresh": (
        lambda s: s.claim("fresh", _FRESH, OWNER_B, 31_000),
        HeartbeatFresh(),
    ),
    "claim-snapshot-changed": (
        lambda s: s.claim("done", _DONE, OWNER_B, 31_000),
        SnapshotChanged(),
    ),
    "claim-and-own-evidence-required": (
        lambda s: s.claim_and_own("owned", _OWNED, OWNER_B, 31_000),
        EvidenceRequired(),
    ),
    "claim-and-own-heartbeat-fresh": (
        lambda s: s.claim_and_own("fresh", _FRESH, OWNER_B, 31_000, _evidence(OWNER_B)),
        HeartbeatFresh(),
    ),
    "claim-and-own-snapshot-changed": (
        lambda s: s.claim_and_own("owned", PENDING, OWNER_B, 31_000),
        SnapshotChanged(),
    ),
    "claim-and-own-already-claimed": (
        lambda s: s.claim_and_own("claimed", PENDING, OWNER_B, 31_000),
        AlreadyClaimed(),
    ),
    "claim-and-own-not-found": (
        lambda s: s.claim_and_own("nobody", PENDING, OWNER_B, 31_000),
        NotFound(),
    ),
    "steal-liveness-unconfirmed": (
        lambda s: s.steal(
            "owned", _OWNED, OWNER_C, 31_000, stale_evidence(OWNER_B, OWNER_C, 31_000)
        ),
        LivenessUnconfirmed(),
    ),
    "steal-heartbeat-fresh": (
        lambda s: s.steal("fresh", _FRESH, OWNER_C, 31_000, _evidence(OWNER_C)),
        HeartbeatFresh(),
    ),
    "steal-snapshot-changed": (
        lambda s: s.steal("owned", _FRESH, OWNER_C, 31_000, _evidence(OWNER_C)),
        SnapshotChanged(),
    ),
    "activate-claim-lost": (lambda s: s.activate("claimed", OWNER_B, 0, PENDING), ClaimLost()),
    "abandon-claim-lost": (lambda s: s.abandon_claim("claimed", OWNER_A, 1), ClaimLost()),
    "recover-claim-fresh": (
        lambda s: s.recover_claim(
            "claimed", OWNER_A, 0, OWNER_B, 30_000, stale_evidence(OWNER_A, OWNER_B, 30_000)
        ),
        ClaimFresh(),
    ),
    "recover-liveness-unconfirmed": (
        lambda s: s.recover_claim("claimed", OWNER_C, 0, OWNER_B, 31_000, _evidence(OWNER_B)),
        LivenessUnconfirmed(),
    ),
    "recover-claim-changed-token": (
        lambda s: s.recover_claim("claimed", OWNER_A, 1, OWNER_B, 31_000, _evidence(OWNER_B)),
        ClaimChanged(),
    ),
    "recover-not-found": (
        lambda s: s.recover_claim("nobody", OWNER_A, 0, OWNER_B, 31_000, _evidence(OWNER_B)),
        NotFound(),
    ),
    "heartbeat-fence-lost": (lambda s: s.heartbeat("owned", OWNER_B, 31_000), FenceLost()),
    "heartbeat-not-found": (lambda s: s.heartbeat("nobody", OWNER_A, 31_000), NotFound()),
    "reconfirm-fence-lost": (lambda s: s.reconfirm("done", OWNER_A, 31_000), FenceLost()),
    "transition-fence-lost": (
        lambda s: s.transition_owned("owned", OWNER_B, "failed"),
        FenceLost(),
    ),
    "transition-not-found": (lambda s: s.transition_owned("nobody", OWNER_A, "failed"), NotFound()),
    "transition-guard-failed": (
        lambda s: s.transition_owned("owned", OWNER_A, "failed", None, TransitionGuard("present")),
        GuardFailed(),
    ),
    "request-cancel-already-requested": (
        lambda s: s.request_cancel("requested", 5),
        AlreadyRequested(1),
    ),
    "request-cancel-terminal": (lambda s: s.request_cancel("done", 5), Terminal("completed")),
    "request-cancel-not-found": (lambda s: s.request_cancel("nobody", 5), NotFound()),
    "request-cancel-lineage-already-requested": (
        lambda s: s.request_cancel_lineage("requested", 5),
        AlreadyRequested(1),
    ),
    "acknowledge-false": (lambda s: s.acknowledge_cancel("owned", OWNER_A, 5), False),
}


@pytest.mark.parametrize("case", list(REFUSALS), ids=list(REFUSALS))
def test_a_refused_operation_writes_nothing(store: RunStore, clock: ManualClock, case: str) -> None:
    """a refused compare-and-swap (any loss outcome, or a False acknowledgement) leaves the
    revision, the rows, the leases and the facts unchanged."""
    _refusal_world(store, clock)
    before = store.state()
    call, expected = REFUSALS[case]
    assert call(store) == expected
    assert store.state() == before
    assert store.revision() == before.revision
