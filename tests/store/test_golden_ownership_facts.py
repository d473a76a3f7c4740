"""Ported upstream cases: ownership facts (upstream-semantics.md §9.2 "OwnershipTransitions").

Each ownership transition a store grants is recorded as one fact in the run's
stream, in the operation's transaction, with positions 1, 2, 3, ... and no
gaps (contract.md). Heartbeats, reconfirmations, refusals, creation,
cancellation and acknowledgement record nothing. Facts are always recorded in
this port (no "journal absent" mode), so upstream's "no journal, no facts"
case does not apply; "rollback removes facts" needs fault injection and
belongs to the adapter's tests; the "strategy is authoritative" cases need a
strategy double that disagrees with the row (adapter-only, contract.md
"Decided here" 3).

Every test also replays the facts by contract.md's rule and checks that they
rebuild the row's owner and claim.
"""

from __future__ import annotations

from runstore import (
    Abandoned,
    Activated,
    AlreadyClaimed,
    CancelRequested,
    Claimed,
    HeartbeatFresh,
    ManualClock,
    Recovered,
    RunStore,
    SnapshotChanged,
    Transitioned,
    Updated,
)

from ._golden import (
    OWNER_A,
    OWNER_B,
    OWNER_C,
    PENDING,
    activate_new,
    assert_facts_replay_to_row,
    assert_lease_agrees,
    fact,
    stale_evidence,
)


def _check(store: RunStore, run_id: str) -> None:
    assert_facts_replay_to_row(store, run_id)
    assert_lease_agrees(store, run_id)


def test_claim_activate_release(store: RunStore, clock: ManualClock) -> None:
    """claim -> activate -> settle records claimed, activated, released(None); activation keeps
    the grant time, not the activation time."""
    store.create("r", "{}")
    assert store.claim("r", PENDING, OWNER_A, 0) == Claimed(0)
    assert store.ownership_facts("r") == [fact("r", "claimed", OWNER_A, 0, 1)]
    _check(store, "r")
    clock.set(5)
    assert store.activate("r", OWNER_A, 0, PENDING) == Activated()
    _check(store, "r")
    assert store.transition_owned("r", OWNER_A, "completed") == Transitioned()
    assert store.ownership_facts("r") == [
        fact("r", "claimed", OWNER_A, 0, 1),
        fact("r", "activated", OWNER_A, 0, 2),
        fact("r", "released", OWNER_A, None, 3),
    ]
    _check(store, "r")


def test_claim_and_own_records_claimed_then_activated(store: RunStore) -> None:
    """claim_and_own = claimed + activated, both at the caller's now_ms."""
    store.create("r", "{}")
    assert store.claim_and_own("r", PENDING, OWNER_A, 7) == Activated()
    assert store.ownership_facts("r") == [
        fact("r", "claimed", OWNER_A, 7, 1),
        fact("r", "activated", OWNER_A, 7, 2),
    ]
    _check(store, "r")


def test_re_owning_a_stale_run_releases_then_claims_a_new_generation(
    store: RunStore, clock: ManualClock
) -> None:
    """re-own = released(None), claimed, activated under a fresh grant."""
    store.create("r", "{}")
    assert store.claim_and_own("r", PENDING, OWNER_A, 0) == Activated()
    running = store.get("r")
    clock.set(30_001)
    assert store.claim_and_own("r", running.snapshot, OWNER_A, 30_001) == Activated()
    assert store.ownership_facts("r") == [
        fact("r", "claimed", OWNER_A, 0, 1),
        fact("r", "activated", OWNER_A, 0, 2),
        fact("r", "released", OWNER_A, None, 3),
        fact("r", "claimed", OWNER_A, 30_001, 4),
        fact("r", "activated", OWNER_A, 30_001, 5),
    ]
    row = store.get("r")
    assert (row.owner, row.heartbeat_at_ms, row.started_at_ms) == (OWNER_A, 30_001, 0)
    lease = store.state().leases
    assert [(item.run_id, item.granted_at_ms) for item in lease] == [("r", 30_001)]
    _check(store, "r")


def test_steal_records_stolen(store: RunStore, clock: ManualClock) -> None:
    """steal = stolen(claimant, grant)."""
    activate_new(store, clock, "r", OWNER_A)
    clock.set(31_000)
    running = store.get("r").snapshot
    assert store.steal("r", running, OWNER_C, 31_000, stale_evidence(OWNER_A, OWNER_C, 31_000)) == (
        Claimed(31_000)
    )
    assert store.ownership_facts("r")[2:] == [fact("r", "stolen", OWNER_C, 31_000, 3)]
    _check(store, "r")
    assert store.activate("r", OWNER_C, 31_000, running) == Activated()
    assert store.ownership_facts("r")[2:] == [
        fact("r", "stolen", OWNER_C, 31_000, 3),
        fact("r", "activated", OWNER_C, 31_000, 4),
    ]
    _check(store, "r")


def test_claim_and_own_over_a_rival_records_stolen_then_activated(
    store: RunStore, clock: ManualClock
) -> None:
    """claim_and_own over a rival = stolen + activated."""
    running = activate_new(store, clock, "r", OWNER_A)
    clock.set(31_000)
    outcome = store.claim_and_own(
        "r", running.snapshot, OWNER_C, 31_000, stale_evidence(OWNER_A, OWNER_C, 31_000)
    )
    assert outcome == Activated()
    assert store.ownership_facts("r") == [
        fact("r", "claimed", OWNER_A, 0, 1),
        fact("r", "activated", OWNER_A, 0, 2),
        fact("r", "stolen", OWNER_C, 31_000, 3),
        fact("r", "activated", OWNER_C, 31_000, 4),
    ]
    _check(store, "r")


def test_abandon_records_released_with_the_claim_time(store: RunStore) -> None:
    """abandon = released(claimant, claimed_at_ms)."""
    store.create("r", "{}")
    assert store.claim("r", PENDING, OWNER_A, 3) == Claimed(3)
    assert store.abandon_claim("r", OWNER_A, 3) == Abandoned()
    assert store.ownership_facts("r") == [
        fact("r", "claimed", OWNER_A, 3, 1),
        fact("r", "released", OWNER_A, 3, 2),
    ]
    _check(store, "r")


def test_snapshot_changed_activate_records_released_with_the_claim_time(
    store: RunStore, clock: ManualClock
) -> None:
    """a snapshot-changed activate = released(claimant, claimed_at_ms)."""
    running = activate_new(store, clock, "r", OWNER_A)
    clock.set(31_000)
    evidence = stale_evidence(OWNER_A, OWNER_B, 31_000)
    assert store.steal("r", running.snapshot, OWNER_B, 31_000, evidence) == Claimed(31_000)
    assert store.heartbeat("r", OWNER_A, 31_000) == Updated()
    assert store.activate("r", OWNER_B, 31_000, running.snapshot) == SnapshotChanged()
    assert store.ownership_facts("r")[2:] == [
        fact("r", "stolen", OWNER_B, 31_000, 3),
        fact("r", "released", OWNER_B, 31_000, 4),
    ]
    _check(store, "r")


def test_recover_records_expired_with_the_claim_time(store: RunStore, clock: ManualClock) -> None:
    """recover = expired(stale claimant, claimed_at_ms); the observer records nothing."""
    store.create("r", "{}")
    assert store.claim("r", PENDING, OWNER_A, 0) == Claimed(0)
    clock.set(31_000)
    outcome = store.recover_claim(
        "r", OWNER_A, 0, OWNER_B, 31_000, stale_evidence(OWNER_A, OWNER_B, 31_000)
    )
    assert outcome == Recovered()
    assert store.ownership_facts("r") == [
        fact("r", "claimed", OWNER_A, 0, 1),
        fact("r", "expired", OWNER_A, 0, 2),
    ]
    _check(store, "r")


def test_suspending_over_a_pending_steal_records_one_release(
    store: RunStore, clock: ManualClock
) -> None:
    """settling or suspending releases the owner once (released(owner, None)); the dropped
    pending claim needs no fact of its own to replay correctly."""
    running = activate_new(store, clock, "r", OWNER_A)
    clock.set(31_000)
    evidence = stale_evidence(OWNER_A, OWNER_B, 31_000)
    assert store.steal("r", running.snapshot, OWNER_B, 31_000, evidence) == Claimed(31_000)
    assert store.transition_owned("r", OWNER_A, "suspended") == Transitioned()
    assert store.ownership_facts("r")[2:] == [
        fact("r", "stolen", OWNER_B, 31_000, 3),
        fact("r", "released", OWNER_A, None, 4),
    ]
    _check(store, "r")


def test_refusals_heartbeats_and_bookkeeping_record_nothing(
    store: RunStore, clock: ManualClock
) -> None:
    """refused claims, heartbeats, reconfirms, running -> running, cancellation and
    acknowledgement record no fact."""
    store.create("r", "{}")
    assert store.ownership_facts("r") == []
    assert store.claim("r", PENDING, OWNER_A, 0) == Claimed(0)
    assert store.claim("r", PENDING, OWNER_B, 0) == AlreadyClaimed()
    assert store.activate("r", OWNER_A, 0, PENDING) == Activated()
    facts = store.ownership_facts("r")
    assert len(facts) == 2
    running = store.get("r").snapshot
    assert store.claim_and_own("r", running, OWNER_B, 0) == HeartbeatFresh()
    assert store.heartbeat("r", OWNER_A, 1) == Updated()
    assert store.reconfirm("r", OWNER_A, 2) == Updated()
    assert store.transition_owned("r", OWNER_A, "running", '{"x":1}') == Transitioned()
    assert store.request_cancel("r", 3) == CancelRequested(3)
    assert store.acknowledge_cancel("r", OWNER_A, 3) is True
    assert store.ownership_facts("r") == facts
    assert store.ownership_facts("never-created") == []
    _check(store, "r")


def test_positions_are_dense_across_a_long_history(store: RunStore, clock: ManualClock) -> None:
    """facts of one run count 1..n without gaps; another run's stream is separate."""
    store.create("r", "{}")
    store.create("other", "{}")
    assert store.claim_and_own("other", PENDING, OWNER_B, 0) == Activated()
    assert store.claim("r", PENDING, OWNER_A, 0) == Claimed(0)
    assert store.abandon_claim("r", OWNER_A, 0) == Abandoned()
    assert store.claim("r", PENDING, OWNER_B, 0) == Claimed(0)
    assert store.activate("r", OWNER_B, 0, PENDING) == Activated()
    assert store.transition_owned("r", OWNER_B, "suspended") == Transitioned()
    suspended = store.get("r").snapshot
    assert store.claim_and_own("r", suspended, OWNER_C, 0) == Activated()
    clock.set(30_001)
    owned = store.get("r").snapshot
    assert store.claim_and_own("r", owned, OWNER_C, 30_001) == Activated()
    assert store.transition_owned("r", OWNER_C, "failed") == Transitioned()
    facts = store.ownership_facts("r")
    assert [item.position for item in facts] == list(range(1, 12))
    assert [item.transition for item in facts] == [
        "claimed",
        "released",
        "claimed",
        "activated",
        "released",
        "claimed",
        "activated",
        "released",
        "claimed",
        "activated",
        "released",
    ]
    assert {item.run_id for item in facts} == {"r"}
    assert [item.position for item in store.ownership_facts("other")] == [1, 2]
    # The whole-state view lists facts by run id, then position.
    assert [(item.run_id, item.position) for item in store.state().facts] == [
        ("other", 1),
        ("other", 2),
        *[("r", position) for position in range(1, 12)],
    ]
    _check(store, "r")
    _check(store, "other")
