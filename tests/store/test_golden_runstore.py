"""Ported upstream cases: the RunStore suite (upstream-semantics.md §9.2, "RunStore").

Every expected value is derived from the spec (§4 operations, §3 admission)
and contract.md, not from a store's output. Cases that need raw SQL (corrupt
rows, a dropped table) live with the SQLite adapter's tests. Two concurrent
claimants become a sequential pair presenting the same snapshot: the first
wins, the second gets the loss §4 classifies from the row it then finds.
"""

from __future__ import annotations

import pytest

from runstore import (
    Abandoned,
    Activated,
    AlreadyClaimed,
    ClaimChanged,
    Claimed,
    ClaimFresh,
    ClaimLost,
    EvidenceRequired,
    FenceLost,
    HeartbeatFresh,
    Lease,
    LivenessUnconfirmed,
    ManualClock,
    NotFound,
    OwnerId,
    Recovered,
    RunRow,
    RunStore,
    RunStoreError,
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
    assert_lease_agrees,
    fact,
    lease_of,
    stale_evidence,
)

# --- create, get and admission of identifiers and state -----------------------


def test_round_trips_a_newly_created_run(store: RunStore) -> None:
    """round-trips a newly created run: created at the clock's 0, all else null, state verbatim."""
    store.create("run-round-trip", '{"cursor":1}')
    assert store.get("run-round-trip") == RunRow(
        run_id="run-round-trip",
        status="pending",
        created_at_ms=0,
        started_at_ms=None,
        finished_at_ms=None,
        owner=None,
        heartbeat_at_ms=None,
        claim=None,
        claimed_at_ms=None,
        parent_run_id=None,
        cancel_requested_at_ms=None,
        lineage_id=None,
        round_ordinal=None,
        state_json='{"cursor":1}',
    )
    assert lease_of(store, "run-round-trip") is None
    assert store.ownership_facts("run-round-trip") == []


def test_create_stamps_created_at_from_the_store_clock(store: RunStore, clock: ManualClock) -> None:
    """create stamps created_at_ms from the store clock (upstream: fractional 10.5 ms stores 10)."""
    clock.set(10)
    store.create("run-clock", "{}")
    assert store.get("run-clock").created_at_ms == 10


def test_typed_errors_for_invalid_duplicate_and_missing_runs(store: RunStore) -> None:
    """returns typed errors: empty id and not-json are invalid_run, duplicate is constraint,
    missing is not_found_row."""
    with pytest.raises(RunStoreError) as empty:
        store.create("", "{}")
    assert (empty.value.code, empty.value.method) == ("invalid_run", "create")

    with pytest.raises(RunStoreError) as not_json:
        store.create("invalid-json", "not-json")
    assert (not_json.value.code, not_json.value.method) == ("invalid_run", "create")

    store.create("duplicate", "{}")
    with pytest.raises(RunStoreError) as duplicate:
        store.create("duplicate", "{}")
    assert (duplicate.value.code, duplicate.value.method) == ("constraint", "create")

    with pytest.raises(RunStoreError) as missing:
        store.get("missing")
    assert (missing.value.code, missing.value.method) == ("not_found_row", "get")

    # Only the one good create wrote anything.
    assert [row.run_id for row in store.state().rows] == ["duplicate"]
    assert store.revision() == 1


@pytest.mark.parametrize(
    "run_id",
    ["run-" + chr(0xD800), "run-" + chr(0xDC00), chr(0xDC00) + chr(0xD800)],
    ids=["high", "low", "reversed-pair"],
)
def test_rejects_lone_surrogate_run_identifiers(store: RunStore, run_id: str) -> None:
    """rejects lone high and low surrogate run identifiers."""
    with pytest.raises(RunStoreError) as failure:
        store.create(run_id, "{}")
    assert (failure.value.code, failure.value.method) == ("invalid_run", "create")
    assert store.state().rows == ()


def test_rejects_lone_surrogates_in_parent_lineage_and_state(store: RunStore) -> None:
    """rejects lone surrogates in parent, lineage, and executable state."""
    store.create("parent", "{}")
    attempts = [
        lambda: store.create("bad-parent", "{}", parent_run_id="parent-\ud800"),
        lambda: store.create("bad-lineage", "{}", lineage_id="lineage-\udc00", round_ordinal=1),
        # A raw surrogate code point in the text, and the same as a JSON escape.
        lambda: store.create("bad-state", '{"value":"\ud800"}'),
        lambda: store.create("bad-state-escape", '{"value":"\\uD800"}'),
        lambda: store.create("bad-key-escape", '{"\\uDC00":1}'),
    ]
    for attempt in attempts:
        with pytest.raises(RunStoreError) as failure:
            attempt()
        assert (failure.value.code, failure.value.method) == ("invalid_run", "create")
    assert [row.run_id for row in store.state().rows] == ["parent"]


def test_accepts_u_fffd_as_a_well_formed_identifier(store: RunStore) -> None:
    """accepts U+FFFD as a well-formed identifier."""
    store.create("run-\ufffd", "{}")
    assert store.get("run-\ufffd").run_id == "run-\ufffd"


def test_round_trips_an_astral_identifier(store: RunStore) -> None:
    """round-trips a valid astral identifier byte-identically."""
    run_id = "run-\U0001f600"
    store.create(run_id, "{}")
    assert store.get(run_id).run_id == run_id


def test_rejects_lone_surrogates_in_transition_owned_state(
    store: RunStore, clock: ManualClock
) -> None:
    """rejects lone surrogates in transition_owned executable state; the row keeps its state."""
    activate_new(store, clock, "run-bad-transition-state", OWNER_A)
    before = store.revision()
    with pytest.raises(RunStoreError) as failure:
        store.transition_owned(
            "run-bad-transition-state", OWNER_A, "running", '{"value":"\\uD800"}'
        )
    assert (failure.value.code, failure.value.method) == ("invalid_run", "transition_owned")
    assert store.get("run-bad-transition-state").state_json == "{}"
    assert store.revision() == before


# --- claim, claim_and_own --------------------------------------------------


def test_exactly_one_of_two_claimants_claims_one_snapshot(store: RunStore) -> None:
    """allows exactly one of two claimants to claim one snapshot (sequential form)."""
    store.create("run-concurrent", "{}")
    expected = store.get("run-concurrent").snapshot
    first = store.claim("run-concurrent", expected, OWNER_A, 0)
    second = store.claim("run-concurrent", expected, OWNER_B, 0)
    assert first == Claimed(0)
    # The loser finds the winner's claim on the row: classifyClaimLoss says AlreadyClaimed.
    assert second == AlreadyClaimed()
    row = store.get("run-concurrent")
    assert (row.claim, row.claimed_at_ms, row.status) == (OWNER_A, 0, "pending")
    assert lease_of(store, "run-concurrent") == Lease(
        "run-concurrent", None, None, None, OWNER_A, 0
    )


def test_exactly_one_of_two_claim_and_own_calls_wins(store: RunStore) -> None:
    """allows exactly one of two claim-and-own calls to win (sequential form)."""
    store.create("run-concurrent-cao", "{}")
    expected = store.get("run-concurrent-cao").snapshot
    assert store.claim_and_own("run-concurrent-cao", expected, OWNER_A, 0) == Activated()
    # The loser finds a running row with a fresh heartbeat.
    assert store.claim_and_own("run-concurrent-cao", expected, OWNER_B, 0) == HeartbeatFresh()
    row = store.get("run-concurrent-cao")
    assert (row.status, row.owner, row.heartbeat_at_ms, row.started_at_ms) == (
        "running",
        OWNER_A,
        0,
        0,
    )
    assert lease_of(store, "run-concurrent-cao") == Lease(
        "run-concurrent-cao", OWNER_A, 0, 0, None, None
    )


def test_claim_and_own_transfers_stale_ownership_and_fences_the_old_owner(
    store: RunStore, clock: ManualClock
) -> None:
    """claims and transfers stale ownership observably: heartbeat = now_ms, old owner FenceLost."""
    activate_new(store, clock, "run-transfer", OWNER_A)
    clock.advance(31_000)
    stale = store.get("run-transfer")
    outcome = store.claim_and_own(
        "run-transfer", stale.snapshot, OWNER_B, 31_000, stale_evidence(OWNER_A, OWNER_B, 31_000)
    )
    assert outcome == Activated()
    assert store.heartbeat("run-transfer", OWNER_A, 31_001) == FenceLost()
    row = store.get("run-transfer")
    assert (row.status, row.owner, row.heartbeat_at_ms) == ("running", OWNER_B, 31_000)
    assert (row.claim, row.claimed_at_ms, row.started_at_ms) == (None, None, 0)
    assert lease_of(store, "run-transfer") == Lease(
        "run-transfer", OWNER_B, 31_000, 31_000, None, None
    )
    assert store.ownership_facts("run-transfer")[2:] == [
        fact("run-transfer", "stolen", OWNER_B, 31_000, 3),
        fact("run-transfer", "activated", OWNER_B, 31_000, 4),
    ]


def test_claim_and_own_installs_an_owner_other_than_the_caller(store: RunStore) -> None:
    """installs an owner different from the process claiming by proxy."""
    engine_owner = OwnerId("engine-host", 404, "engine-to-spawn")
    store.create("run-proxy-claim", "{}")
    pending = store.get("run-proxy-claim")
    assert store.claim_and_own("run-proxy-claim", pending.snapshot, engine_owner, 0) == Activated()
    row = store.get("run-proxy-claim")
    assert (row.status, row.owner, row.heartbeat_at_ms) == ("running", engine_owner, 0)


def test_claim_and_own_names_the_fresh_lease_not_the_missing_evidence(
    store: RunStore, clock: ManualClock
) -> None:
    """names the fresh lease, not the missing evidence, when a live owner holds the run."""
    running = activate_new(store, clock, "run-fresh-cao", OWNER_A)
    before = store.state()
    assert store.claim_and_own("run-fresh-cao", running.snapshot, OWNER_B, 0) == HeartbeatFresh()
    assert store.state() == before


def test_claim_and_own_without_evidence_reports_evidence_required_twice(
    store: RunStore, clock: ManualClock
) -> None:
    """reports a distinguishable refusal when no liveness evidence was supplied (B12)."""
    running = activate_new(store, clock, "run-no-evidence", OWNER_A)
    clock.advance(31_000)
    before = store.state()
    first = store.claim_and_own("run-no-evidence", running.snapshot, OWNER_B, 31_000)
    again = store.claim_and_own("run-no-evidence", running.snapshot, OWNER_B, 31_000)
    assert first == EvidenceRequired()
    assert again == EvidenceRequired()
    assert store.state() == before
    row = store.get("run-no-evidence")
    assert (row.status, row.owner) == ("running", OWNER_A)


def test_claim_and_own_without_evidence_on_a_suspended_snapshot(
    store: RunStore, clock: ManualClock
) -> None:
    """reports SnapshotChanged when a no-evidence claim-and-own snapshot was suspended;
    the fresh snapshot then activates."""
    running = activate_new(store, clock, "run-suspended-cao", OWNER_A)
    assert store.transition_owned("run-suspended-cao", OWNER_A, "suspended") == Transitioned()
    clock.advance(30_001)
    stale = store.claim_and_own("run-suspended-cao", running.snapshot, OWNER_B, 30_001)
    assert stale == SnapshotChanged()
    fresh_snapshot = store.get("run-suspended-cao").snapshot
    assert store.claim_and_own("run-suspended-cao", fresh_snapshot, OWNER_B, 30_001) == Activated()
    row = store.get("run-suspended-cao")
    assert (row.status, row.owner, row.heartbeat_at_ms) == ("running", OWNER_B, 30_001)
    # The first start time survives a later activation (COALESCE).
    assert row.started_at_ms == 0


def test_claim_and_own_without_evidence_on_a_completed_snapshot(
    store: RunStore, clock: ManualClock
) -> None:
    """reports SnapshotChanged when a no-evidence claim-and-own snapshot completed."""
    running = activate_new(store, clock, "run-completed-cao", OWNER_A)
    assert store.transition_owned("run-completed-cao", OWNER_A, "completed") == Transitioned()
    clock.advance(30_001)
    assert (
        store.claim_and_own("run-completed-cao", running.snapshot, OWNER_B, 30_001)
        == SnapshotChanged()
    )
    row = store.get("run-completed-cao")
    assert (row.status, row.owner) == ("completed", None)


def test_claim_and_own_refuses_a_changed_snapshot(store: RunStore) -> None:
    """refuses claim-and-own when the expected snapshot has changed."""
    store.create("run-changed-cao", "{}")
    pending = store.get("run-changed-cao").snapshot
    assert store.claim("run-changed-cao", pending, OWNER_A, 0) == Claimed(0)
    assert store.activate("run-changed-cao", OWNER_A, 0, pending) == Activated()
    assert store.transition_owned("run-changed-cao", OWNER_A, "suspended") == Transitioned()
    assert store.claim_and_own("run-changed-cao", pending, OWNER_B, 0) == SnapshotChanged()
    row = store.get("run-changed-cao")
    assert (row.status, row.owner) == ("suspended", None)


def test_ordinary_claim_on_a_running_run_reports_the_fresh_lease(
    store: RunStore, clock: ManualClock
) -> None:
    """reports the fresh lease when an ordinary claim meets a running run."""
    running = activate_new(store, clock, "run-fresh-claim", OWNER_A)
    assert store.claim("run-fresh-claim", running.snapshot, OWNER_B, 0) == HeartbeatFresh()


def test_ordinary_claim_on_a_stale_running_run_is_snapshot_changed(
    store: RunStore, clock: ManualClock
) -> None:
    """rejects an ordinary claim on a running run even once its heartbeat is stale (D4)."""
    running = activate_new(store, clock, "run-stale-claim", OWNER_A)
    clock.advance(31_000)
    assert store.claim("run-stale-claim", running.snapshot, OWNER_B, 31_000) == SnapshotChanged()
    row = store.get("run-stale-claim")
    assert (row.claim, row.owner) == (None, OWNER_A)


def test_classifies_missing_and_already_held_claims(store: RunStore) -> None:
    """classifies missing and already-held claims."""
    assert store.claim("missing", PENDING, OWNER_A, 0) == NotFound()
    store.create("claimed", "{}")
    pending = store.get("claimed").snapshot
    assert store.claim("claimed", pending, OWNER_A, 0) == Claimed(0)
    assert store.claim("claimed", pending, OWNER_B, 0) == AlreadyClaimed()
    # The holder itself cannot claim twice either.
    assert store.claim("claimed", pending, OWNER_A, 0) == AlreadyClaimed()


# --- recover_claim, reused claimants ------------------------------------------


def test_recovers_an_exact_stale_claim_only_with_matching_evidence(
    store: RunStore, clock: ManualClock
) -> None:
    """recovers an exact stale claim only after liveness evidence confirms its claimant is dead."""
    store.create("stale-claim", "{}")
    pending = store.get("stale-claim").snapshot
    assert store.claim("stale-claim", pending, OWNER_A, 0) == Claimed(0)

    fresh = store.recover_claim(
        "stale-claim", OWNER_A, 0, OWNER_B, 0, stale_evidence(OWNER_A, OWNER_B, 0)
    )
    assert fresh == ClaimFresh()
    clock.advance(31_000)
    assert store.claim("stale-claim", pending, OWNER_B, 31_000) == AlreadyClaimed()
    unconfirmed = store.recover_claim(
        "stale-claim", OWNER_A, 0, OWNER_B, 31_000, stale_evidence(OWNER_C, OWNER_B, 31_000)
    )
    assert unconfirmed == LivenessUnconfirmed()
    recovered = store.recover_claim(
        "stale-claim", OWNER_A, 0, OWNER_B, 31_000, stale_evidence(OWNER_A, OWNER_B, 31_000)
    )
    assert recovered == Recovered()
    # Recovery clears the claim; it does not hand the run to the observer.
    row = store.get("stale-claim")
    assert (row.status, row.owner, row.claim, row.claimed_at_ms) == ("pending", None, None, None)
    assert lease_of(store, "stale-claim") is None
    changed = store.recover_claim(
        "stale-claim", OWNER_A, 0, OWNER_B, 31_000, stale_evidence(OWNER_A, OWNER_B, 31_000)
    )
    assert changed == ClaimChanged()
    assert store.claim("stale-claim", pending, OWNER_B, 31_000) == Claimed(31_000)
    missing = store.recover_claim(
        "missing", OWNER_A, 0, OWNER_B, 31_000, stale_evidence(OWNER_A, OWNER_B, 31_000)
    )
    assert missing == NotFound()


def test_fences_delayed_activation_and_abandonment_of_a_reused_claimant(
    store: RunStore, clock: ManualClock
) -> None:
    """fences delayed activation and abandonment when a claimant identity is reused."""
    store.create("reused-claimant", "{}")
    pending = store.get("reused-claimant").snapshot
    assert store.claim("reused-claimant", pending, OWNER_A, 0) == Claimed(0)
    clock.advance(31_000)
    assert (
        store.recover_claim(
            "reused-claimant", OWNER_A, 0, OWNER_B, 31_000, stale_evidence(OWNER_A, OWNER_B, 31_000)
        )
        == Recovered()
    )
    assert store.claim("reused-claimant", pending, OWNER_A, 31_000) == Claimed(31_000)

    assert store.activate("reused-claimant", OWNER_A, 0, pending) == ClaimLost()
    assert store.abandon_claim("reused-claimant", OWNER_A, 0) == ClaimLost()
    still = store.get("reused-claimant")
    assert (still.claim, still.claimed_at_ms) == (OWNER_A, 31_000)
    assert store.activate("reused-claimant", OWNER_A, 31_000, pending) == Activated()
    row = store.get("reused-claimant")
    assert (row.status, row.owner, row.heartbeat_at_ms, row.started_at_ms) == (
        "running",
        OWNER_A,
        31_000,
        31_000,
    )


# --- steal and activate after a steal ------------------------------------------


def test_steal_needs_a_stale_row_and_matching_evidence(store: RunStore, clock: ManualClock) -> None:
    """requires both a stale row and matching liveness evidence to steal."""
    fresh = activate_new(store, clock, "run-steal", OWNER_A)
    assert (
        store.steal("run-steal", fresh.snapshot, OWNER_C, 0, stale_evidence(OWNER_A, OWNER_C, 0))
        == HeartbeatFresh()
    )
    clock.advance(31_000)
    stale = store.get("run-steal")
    assert store.claim("run-steal", stale.snapshot, OWNER_C, 31_000) == SnapshotChanged()
    wrong = store.steal(
        "run-steal", stale.snapshot, OWNER_C, 31_000, stale_evidence(OWNER_B, OWNER_C, 31_000)
    )
    assert wrong == LivenessUnconfirmed()
    stolen = store.steal(
        "run-steal", stale.snapshot, OWNER_C, 31_000, stale_evidence(OWNER_A, OWNER_C, 31_000)
    )
    assert stolen == Claimed(31_000)
    # A steal writes only the claim: status, owner and heartbeat stay.
    row = store.get("run-steal")
    assert (row.status, row.owner, row.heartbeat_at_ms) == ("running", OWNER_A, 0)
    assert (row.claim, row.claimed_at_ms) == (OWNER_C, 31_000)
    assert lease_of(store, "run-steal") == Lease("run-steal", OWNER_A, 0, 0, OWNER_C, 31_000)


def test_matching_steal_evidence_loses_to_a_changed_row(
    store: RunStore, clock: ManualClock
) -> None:
    """reports SnapshotChanged when matching steal evidence loses to a changed row."""
    running = activate_new(store, clock, "run-steal-moved", OWNER_A)
    clock.advance(31_000)
    assert store.heartbeat("run-steal-moved", OWNER_A, 31_000) == Updated()
    clock.advance(31_000)
    outcome = store.steal(
        "run-steal-moved",
        running.snapshot,
        OWNER_C,
        62_000,
        stale_evidence(OWNER_A, OWNER_C, 62_000),
    )
    assert outcome == SnapshotChanged()


def test_old_owner_heartbeat_after_a_steal_claim_invalidates_activation(
    store: RunStore, clock: ManualClock
) -> None:
    """invalidates activation when the old owner heartbeats after the claim."""
    activate_new(store, clock, "run-activation-race", OWNER_A)
    clock.advance(31_000)
    stale = store.get("run-activation-race")
    evidence = stale_evidence(OWNER_A, OWNER_B, 31_000)
    assert store.steal("run-activation-race", stale.snapshot, OWNER_B, 31_000, evidence) == Claimed(
        31_000
    )
    assert store.heartbeat("run-activation-race", OWNER_A, 31_000) == Updated()
    activation = store.activate("run-activation-race", OWNER_B, 31_000, stale.snapshot)
    assert activation == SnapshotChanged()
    row = store.get("run-activation-race")
    assert (row.owner, row.heartbeat_at_ms, row.claim, row.claimed_at_ms) == (
        OWNER_A,
        31_000,
        None,
        None,
    )
    assert lease_of(store, "run-activation-race") == Lease(
        "run-activation-race", OWNER_A, 0, 31_000, None, None
    )


def test_abandon_after_a_steal_preserves_the_previous_owner(
    store: RunStore, clock: ManualClock
) -> None:
    """abandons only the claim and preserves the previous owner."""
    activate_new(store, clock, "run-abandon", OWNER_A)
    clock.advance(31_000)
    stale = store.get("run-abandon")
    evidence = stale_evidence(OWNER_A, OWNER_B, 31_000)
    assert store.steal("run-abandon", stale.snapshot, OWNER_B, 31_000, evidence) == Claimed(31_000)
    assert store.abandon_claim("run-abandon", OWNER_B, 31_000) == Abandoned()
    row = store.get("run-abandon")
    assert (row.owner, row.heartbeat_at_ms, row.claim, row.claimed_at_ms) == (
        OWNER_A,
        0,
        None,
        None,
    )
    assert lease_of(store, "run-abandon") == Lease("run-abandon", OWNER_A, 0, 0, None, None)


def test_reports_claim_losses_for_activation_and_abandonment(store: RunStore) -> None:
    """reports claim losses for activation and abandonment, writing nothing."""
    assert store.activate("missing", OWNER_A, 0, PENDING) == ClaimLost()
    assert store.abandon_claim("missing", OWNER_A, 0) == ClaimLost()
    store.create("claimed", "{}")
    pending = store.get("claimed").snapshot
    assert store.claim("claimed", pending, OWNER_A, 0) == Claimed(0)
    before = store.state()
    assert store.activate("claimed", OWNER_B, 0, pending) == ClaimLost()
    assert store.abandon_claim("claimed", OWNER_B, 0) == ClaimLost()
    assert store.state() == before


def test_fences_the_old_owner_heartbeat_after_an_activated_steal(
    store: RunStore, clock: ManualClock
) -> None:
    """fences the old owner's heartbeat after an activated steal."""
    activate_new(store, clock, "run-heartbeat-fence", OWNER_A)
    clock.advance(31_000)
    stale = store.get("run-heartbeat-fence")
    evidence = stale_evidence(OWNER_A, OWNER_B, 31_000)
    assert store.steal("run-heartbeat-fence", stale.snapshot, OWNER_B, 31_000, evidence) == Claimed(
        31_000
    )
    assert store.activate("run-heartbeat-fence", OWNER_B, 31_000, stale.snapshot) == Activated()
    assert store.heartbeat("run-heartbeat-fence", OWNER_A, 31_001) == FenceLost()
    row = store.get("run-heartbeat-fence")
    # activate stamps the heartbeat from the store clock; the first start time stays.
    assert (row.owner, row.heartbeat_at_ms, row.started_at_ms, row.claim) == (
        OWNER_B,
        31_000,
        0,
        None,
    )


# --- heartbeat and transition_owned --------------------------------------------


def test_reports_missing_targets_and_stale_owners(store: RunStore, clock: ManualClock) -> None:
    """reports missing heartbeat and transition targets and stale owners;
    running -> running replaces or keeps state."""
    assert store.heartbeat("missing", OWNER_A, 0) == NotFound()
    assert store.transition_owned("missing", OWNER_A, "failed") == NotFound()
    activate_new(store, clock, "running-transition", OWNER_A)
    assert (
        store.transition_owned("running-transition", OWNER_A, "running", '{"cursor":1}')
        == Transitioned()
    )
    assert store.transition_owned("running-transition", OWNER_A, "running") == Transitioned()
    assert store.transition_owned("running-transition", OWNER_B, "failed") == FenceLost()
    row = store.get("running-transition")
    assert row.state_json == '{"cursor":1}'
    assert (row.status, row.owner, row.heartbeat_at_ms) == ("running", OWNER_A, 0)


@pytest.mark.parametrize(
    ("to_status", "state_json"),
    [("unknown", None), ("pending", None), ("failed", "not-json"), ("running", "")],
)
def test_rejects_invalid_owned_transitions(
    store: RunStore, to_status: str, state_json: str | None
) -> None:
    """rejects invalid owned transitions: unknown or pending status, bad state."""
    with pytest.raises(RunStoreError) as failure:
        store.transition_owned("run", OWNER_A, to_status, state_json)  # type: ignore[arg-type]
    assert (failure.value.code, failure.value.method) == ("invalid_run", "transition_owned")


def test_suspend_clears_owner_heartbeat_and_an_in_flight_claim(
    store: RunStore, clock: ManualClock
) -> None:
    """suspends while clearing owner, heartbeat, and an in-flight claim atomically."""
    activate_new(store, clock, "run-suspend", OWNER_A)
    clock.advance(31_000)
    stale = store.get("run-suspend")
    evidence = stale_evidence(OWNER_A, OWNER_B, 31_000)
    assert store.steal("run-suspend", stale.snapshot, OWNER_B, 31_000, evidence) == Claimed(31_000)
    assert (
        store.transition_owned("run-suspend", OWNER_A, "suspended", '{"reason":"opaque"}')
        == Transitioned()
    )
    row = store.get("run-suspend")
    assert (row.status, row.owner, row.heartbeat_at_ms, row.claim, row.claimed_at_ms) == (
        "suspended",
        None,
        None,
        None,
        None,
    )
    assert row.finished_at_ms is None
    assert row.state_json == '{"reason":"opaque"}'
    assert_lease_agrees(store, "run-suspend")


@pytest.mark.parametrize("status", ["completed", "failed", "cancelled"])
def test_every_terminal_transition_clears_ownership(
    store: RunStore, clock: ManualClock, status: str
) -> None:
    """clears ownership for every terminal transition and stamps finished_at_ms from the clock."""
    activate_new(store, clock, f"run-terminal-{status}", OWNER_A)
    clock.set(7)
    assert store.transition_owned(f"run-terminal-{status}", OWNER_A, status) == Transitioned()  # type: ignore[arg-type]
    row = store.get(f"run-terminal-{status}")
    assert row.status == status
    assert row.finished_at_ms == 7
    assert (row.owner, row.heartbeat_at_ms, row.claim, row.claimed_at_ms) == (
        None,
        None,
        None,
        None,
    )
    assert lease_of(store, f"run-terminal-{status}") is None


def test_does_not_reclaim_a_terminal_run(store: RunStore, clock: ManualClock) -> None:
    """does not reclaim a terminal run."""
    activate_new(store, clock, "run-terminal-claim", OWNER_A)
    assert store.transition_owned("run-terminal-claim", OWNER_A, "completed") == Transitioned()
    terminal = store.get("run-terminal-claim")
    assert store.claim("run-terminal-claim", terminal.snapshot, OWNER_B, 0) == SnapshotChanged()
    assert (
        store.claim_and_own("run-terminal-claim", terminal.snapshot, OWNER_B, 0)
        == SnapshotChanged()
    )


def test_does_not_steal_a_terminal_run_through_its_old_snapshot(
    store: RunStore, clock: ManualClock
) -> None:
    """does not steal a terminal run through its pre-completion snapshot."""
    running = activate_new(store, clock, "run-terminal-steal", OWNER_A)
    assert store.transition_owned("run-terminal-steal", OWNER_A, "completed") == Transitioned()
    clock.advance(30_001)
    outcome = store.steal(
        "run-terminal-steal",
        running.snapshot,
        OWNER_B,
        30_001,
        stale_evidence(OWNER_A, OWNER_B, 30_001),
    )
    assert outcome == SnapshotChanged()
    row = store.get("run-terminal-steal")
    assert (row.status, row.owner, row.claim, row.claimed_at_ms) == ("completed", None, None, None)


def test_never_persists_owner_columns_for_a_non_running_status(
    store: RunStore, clock: ManualClock
) -> None:
    """never persists owner columns for a non-running status."""
    store.create("run-pending", "{}")
    for status in ("suspended", "completed", "failed", "cancelled"):
        activate_new(store, clock, f"run-{status}", OWNER_A)
        assert store.transition_owned(f"run-{status}", OWNER_A, status) == Transitioned()  # type: ignore[arg-type]
    for row in store.state().rows:
        assert row.status != "running"
        assert (row.owner, row.heartbeat_at_ms) == (None, None)


def test_activate_never_clears_a_foreign_claim(store: RunStore) -> None:
    """activate clears nothing it does not own after a third party took the claim."""
    store.create("run-foreign-claim", "{}")
    pending = store.get("run-foreign-claim").snapshot
    assert store.claim("run-foreign-claim", pending, OWNER_A, 0) == Claimed(0)
    assert store.abandon_claim("run-foreign-claim", OWNER_A, 0) == Abandoned()
    assert store.claim("run-foreign-claim", pending, OWNER_B, 1) == Claimed(1)
    before = store.revision()
    assert store.activate("run-foreign-claim", OWNER_A, 0, pending) == ClaimLost()
    row = store.get("run-foreign-claim")
    assert (row.claim, row.claimed_at_ms, row.status) == (OWNER_B, 1, "pending")
    assert store.revision() == before


def test_heartbeat_on_a_suspended_run_is_fence_lost_not_not_found(
    store: RunStore, clock: ManualClock
) -> None:
    """heartbeat on a run suspended under the same owner reports FenceLost, not NotFound."""
    activate_new(store, clock, "run-suspended-heartbeat", OWNER_A)
    assert store.transition_owned("run-suspended-heartbeat", OWNER_A, "suspended") == Transitioned()
    assert store.heartbeat("run-suspended-heartbeat", OWNER_A, 5) == FenceLost()
    assert store.reconfirm("run-suspended-heartbeat", OWNER_A, 5) == FenceLost()
    assert store.heartbeat("run-never-created", OWNER_A, 5) == NotFound()
    assert store.reconfirm("run-never-created", OWNER_A, 5) == NotFound()


# --- snapshot admission ------------------------------------------------------


def test_accepts_a_run_row_as_the_expected_snapshot(store: RunStore, clock: ManualClock) -> None:
    """accepts a RunRow from get as the expected snapshot of claim, claim_and_own, activate
    and steal."""
    store.create("row-cao", "{}")
    pending_row = store.get("row-cao")
    assert store.claim_and_own("row-cao", pending_row, OWNER_A, 0) == Activated()

    store.create("row-claim", "{}")
    claim_row = store.get("row-claim")
    assert store.claim("row-claim", claim_row, OWNER_A, 1) == Claimed(1)
    assert store.activate("row-claim", OWNER_A, 1, claim_row) == Activated()

    clock.advance(31_000)
    running_row = store.get("row-cao")
    stolen = store.steal(
        "row-cao", running_row, OWNER_C, 31_000, stale_evidence(OWNER_A, OWNER_C, 31_000)
    )
    assert stolen == Claimed(31_000)
