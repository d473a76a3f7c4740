"""Ported upstream cases: lease ordering, the staleness cutoff, evidence and skew.

upstream-semantics.md §9.2 "RunStoreLeaseOrdering" and the "ownership evidence
boundaries" cases of "RunStore"; rules from §3.2 (lease readings), §4.0
(strict staleness), §4.13 (monotonic heartbeat) and §5.2 (matchesEvidence).
"""

from __future__ import annotations

import math

import pytest

from runstore import (
    Abandoned,
    Activated,
    AlreadyClaimed,
    CancelRequested,
    ClaimChanged,
    Claimed,
    ClaimFresh,
    ClaimLost,
    EvidenceRequired,
    FenceLost,
    HeartbeatFresh,
    LivenessEvidence,
    LivenessUnconfirmed,
    ManualClock,
    OwnerId,
    Recovered,
    RunStore,
    RunStoreError,
    Updated,
)

from ._golden import (
    OWNER_A,
    OWNER_B,
    OWNER_C,
    PENDING,
    activate_new,
    assert_lease_agrees,
    lease_of,
    stale_evidence,
)

# --- monotonic heartbeat -------------------------------------------------------


@pytest.mark.parametrize("operation", ["heartbeat", "reconfirm"])
def test_older_heartbeat_reports_updated_without_moving_the_stamp(
    store: RunStore, clock: ManualClock, operation: str
) -> None:
    """an older heartbeat reports Updated without moving the stamp; a newer one advances it."""
    activate_new(store, clock, "run-ordering", OWNER_A)
    clock.set(5_000)
    renew = getattr(store, operation)
    assert renew("run-ordering", OWNER_A, 5_000) == Updated()
    assert store.get("run-ordering").heartbeat_at_ms == 5_000

    revision = store.revision()
    assert renew("run-ordering", OWNER_A, 4_000) == Updated()
    assert store.get("run-ordering").heartbeat_at_ms == 5_000
    # The row was still written (contract.md: revisions count row writes).
    assert store.revision() == revision + 1

    assert renew("run-ordering", OWNER_A, 6_000) == Updated()
    assert store.get("run-ordering").heartbeat_at_ms == 6_000
    assert lease_of(store, "run-ordering").heartbeat_at_ms == 6_000  # type: ignore[union-attr]
    assert_lease_agrees(store, "run-ordering")


@pytest.mark.parametrize("operation", ["heartbeat", "reconfirm"])
@pytest.mark.parametrize("now_ms", [-1, 1.5, math.nan, math.inf, True, 2**53, "5", None])
def test_heartbeat_refuses_a_malformed_reading(
    store: RunStore, clock: ManualClock, operation: str, now_ms: object
) -> None:
    """negative, fractional, NaN, infinite, bool, unsafe and non-int readings are invalid_run."""
    activate_new(store, clock, "run-bad-reading", OWNER_A)
    before = store.state()
    with pytest.raises(RunStoreError) as failure:
        getattr(store, operation)("run-bad-reading", OWNER_A, now_ms)
    assert (failure.value.code, failure.value.method) == ("invalid_run", operation)
    assert store.state() == before


def test_heartbeat_renews_while_a_steal_claim_is_pending_but_reconfirm_does_not(
    store: RunStore, clock: ManualClock
) -> None:
    """heartbeat succeeds for the owner while a stealer's claim is pending; reconfirm is lost."""
    activate_new(store, clock, "run-pending-steal", OWNER_A)
    clock.advance(31_000)
    stale = store.get("run-pending-steal")
    evidence = stale_evidence(OWNER_A, OWNER_C, 31_000)
    assert store.steal("run-pending-steal", stale.snapshot, OWNER_C, 31_000, evidence) == Claimed(
        31_000
    )
    before = store.state()
    assert store.reconfirm("run-pending-steal", OWNER_A, 31_000) == FenceLost()
    assert store.state() == before
    assert store.heartbeat("run-pending-steal", OWNER_A, 31_000) == Updated()
    row = store.get("run-pending-steal")
    assert (row.owner, row.heartbeat_at_ms, row.claim) == (OWNER_A, 31_000, OWNER_C)
    assert_lease_agrees(store, "run-pending-steal")


def test_strangers_and_claimants_cannot_heartbeat(store: RunStore, clock: ManualClock) -> None:
    """a claim alone is not a lease, and a stranger's heartbeat is FenceLost."""
    store.create("run-claim-only", "{}")
    assert store.claim("run-claim-only", PENDING, OWNER_A, 0) == Claimed(0)
    assert store.heartbeat("run-claim-only", OWNER_A, 0) == FenceLost()
    activate_new(store, clock, "run-owned", OWNER_A)
    assert store.heartbeat("run-owned", OWNER_B, 0) == FenceLost()
    # Same host and pid, new nonce: a restarted process is a different owner.
    restarted = OwnerId(OWNER_A.host_id, OWNER_A.pid, "owner-a-restarted")
    assert store.heartbeat("run-owned", restarted, 0) == FenceLost()


# --- strict cutoff at 30 000 ms -------------------------------------------------


@pytest.mark.parametrize(
    ("now_ms", "expected"),
    [
        (29_999, (HeartbeatFresh(), ClaimFresh(), HeartbeatFresh())),
        (30_000, (HeartbeatFresh(), ClaimFresh(), HeartbeatFresh())),
        (30_001, (Activated(), Recovered(), Claimed(30_001))),
    ],
)
def test_strict_cutoff_for_claim_and_own_recover_claim_and_steal(
    store: RunStore, clock: ManualClock, now_ms: int, expected: tuple[object, object, object]
) -> None:
    """uses a strict cutoff for claim_and_own, recover_claim and steal: 30 000 ms old is fresh."""
    direct = activate_new(store, clock, "boundary-direct", OWNER_A)
    store.create("boundary-claim", "{}")
    assert store.claim("boundary-claim", PENDING, OWNER_A, 0) == Claimed(0)
    running = activate_new(store, clock, "boundary-steal", OWNER_A)
    clock.set(now_ms)
    outcomes = (
        store.claim_and_own(
            "boundary-direct",
            direct.snapshot,
            OWNER_B,
            now_ms,
            stale_evidence(OWNER_A, OWNER_B, now_ms),
        ),
        store.recover_claim(
            "boundary-claim", OWNER_A, 0, OWNER_B, now_ms, stale_evidence(OWNER_A, OWNER_B, now_ms)
        ),
        store.steal(
            "boundary-steal",
            running.snapshot,
            OWNER_C,
            now_ms,
            stale_evidence(OWNER_A, OWNER_C, now_ms),
        ),
    )
    assert outcomes == expected
    for run_id in ("boundary-direct", "boundary-claim", "boundary-steal"):
        assert_lease_agrees(store, run_id)


# --- evidence mismatches ---------------------------------------------------------


def _wrong_time(now_ms: int) -> LivenessEvidence:
    return LivenessEvidence(OWNER_A, now_ms - 1, "same-host-pid-dead")


def _same_host_cross_kind(now_ms: int) -> LivenessEvidence:
    return LivenessEvidence(OWNER_A, now_ms, "cross-host-unreachable-stale")


def _cross_host_same_kind(now_ms: int) -> LivenessEvidence:
    return LivenessEvidence(OWNER_A, now_ms, "same-host-pid-dead")


def _wrong_owner(now_ms: int) -> LivenessEvidence:
    return LivenessEvidence(OWNER_C, now_ms, "lease-expired")


@pytest.mark.parametrize(
    ("observer", "evidence"),
    [
        (OWNER_B, _wrong_time),
        (OWNER_B, _same_host_cross_kind),
        (OWNER_C, _cross_host_same_kind),
        (OWNER_B, _wrong_owner),
    ],
    ids=["wrong-time", "same-host-cross-kind", "cross-host-same-kind", "wrong-owner"],
)
def test_evidence_mismatch_is_refused(
    store: RunStore, clock: ManualClock, observer, evidence
) -> None:
    """rejects stale checked_at_ms values and same-host/cross-host evidence kind mismatches:
    claim_and_own EvidenceRequired, recover_claim and steal LivenessUnconfirmed."""
    direct = activate_new(store, clock, "evidence-direct", OWNER_A)
    store.create("evidence-claim", "{}")
    assert store.claim("evidence-claim", PENDING, OWNER_A, 0) == Claimed(0)
    running = activate_new(store, clock, "evidence-steal", OWNER_A)
    clock.advance(30_001)
    now = clock.now_ms()
    proof = evidence(now)
    before = store.state()
    assert store.claim_and_own("evidence-direct", direct.snapshot, observer, now, proof) == (
        EvidenceRequired()
    )
    assert store.recover_claim("evidence-claim", OWNER_A, 0, observer, now, proof) == (
        LivenessUnconfirmed()
    )
    assert store.steal("evidence-steal", running.snapshot, observer, now, proof) == (
        LivenessUnconfirmed()
    )
    assert store.state() == before


def test_recover_claim_checks_evidence_before_touching_the_run(store: RunStore) -> None:
    """recover_claim answers LivenessUnconfirmed without touching the database, even for a
    missing run."""
    bad = LivenessEvidence(OWNER_A, 1, "lease-expired")
    assert store.recover_claim("missing", OWNER_A, 0, OWNER_B, 0, bad) == LivenessUnconfirmed()


def test_steal_with_a_non_running_snapshot_is_liveness_unconfirmed(store: RunStore) -> None:
    """steal's evidence check includes a running expected snapshot: a pending one is refused."""
    store.create("run-pending", "{}")
    evidence = LivenessEvidence(OWNER_A, 0, "lease-expired")
    assert store.steal("run-pending", PENDING, OWNER_B, 0, evidence) == LivenessUnconfirmed()


def test_lease_expired_evidence_works_from_any_host(store: RunStore, clock: ManualClock) -> None:
    """lease-expired evidence is host-neutral: a cross-host peer steals with it once stale."""
    running = activate_new(store, clock, "run-lease-expired", OWNER_A)
    evidence = LivenessEvidence(OWNER_A, 0, "lease-expired")
    assert (
        store.steal("run-lease-expired", running.snapshot, OWNER_C, 0, evidence) == HeartbeatFresh()
    )
    clock.set(30_001)
    evidence = LivenessEvidence(OWNER_A, 30_001, "lease-expired")
    assert store.steal("run-lease-expired", running.snapshot, OWNER_C, 30_001, evidence) == Claimed(
        30_001
    )


def test_claim_and_own_over_a_pending_steal_claim_is_already_claimed(
    store: RunStore, clock: ManualClock
) -> None:
    """a stale run with a pending steal claim: claim_and_own (with or without evidence) and a
    second steal report AlreadyClaimed."""
    running = activate_new(store, clock, "run-claimed-steal", OWNER_A)
    clock.advance(31_000)
    assert store.steal(
        "run-claimed-steal",
        running.snapshot,
        OWNER_C,
        31_000,
        stale_evidence(OWNER_A, OWNER_C, 31_000),
    ) == Claimed(31_000)
    assert store.claim_and_own("run-claimed-steal", running.snapshot, OWNER_B, 31_000) == (
        AlreadyClaimed()
    )
    assert (
        store.claim_and_own(
            "run-claimed-steal",
            running.snapshot,
            OWNER_B,
            31_000,
            stale_evidence(OWNER_A, OWNER_B, 31_000),
        )
        == AlreadyClaimed()
    )
    assert (
        store.steal(
            "run-claimed-steal",
            running.snapshot,
            OWNER_B,
            31_000,
            stale_evidence(OWNER_A, OWNER_B, 31_000),
        )
        == AlreadyClaimed()
    )


def test_re_owning_ones_own_run_still_needs_a_stale_heartbeat(
    store: RunStore, clock: ManualClock
) -> None:
    """claim_and_own by the same owner over its own fresh running row reports HeartbeatFresh."""
    running = activate_new(store, clock, "run-reown-fresh", OWNER_A)
    clock.set(30_000)
    assert store.claim_and_own("run-reown-fresh", running.snapshot, OWNER_A, 30_000) == (
        HeartbeatFresh()
    )
    clock.set(30_001)
    assert store.claim_and_own("run-reown-fresh", running.snapshot, OWNER_A, 30_001) == Activated()
    row = store.get("run-reown-fresh")
    assert (row.owner, row.heartbeat_at_ms, row.started_at_ms) == (OWNER_A, 30_001, 0)


# --- skew allowance ----------------------------------------------------------------


def test_pins_both_ten_second_skew_edges_around_the_stale_boundary(
    store: RunStore, clock: ManualClock
) -> None:
    """pins both ten-second clock-skew edges: store clock 30 001, peer at 20 001 sees a fresh
    lease, peer at 40 001 steals."""
    behind = activate_new(store, clock, "skew-behind", OWNER_A)
    ahead = activate_new(store, clock, "skew-ahead", OWNER_A)
    clock.set(30_001)
    assert (
        store.steal(
            "skew-behind",
            behind.snapshot,
            OWNER_C,
            20_001,
            stale_evidence(OWNER_A, OWNER_C, 20_001),
        )
        == HeartbeatFresh()
    )
    assert store.steal(
        "skew-ahead", ahead.snapshot, OWNER_C, 40_001, stale_evidence(OWNER_A, OWNER_C, 40_001)
    ) == Claimed(40_001)


def test_a_reading_exactly_the_allowance_ahead_is_admitted(
    store: RunStore, clock: ManualClock
) -> None:
    """now_ms exactly clock + 10 000 is admitted by every lease reading."""
    clock.set(1_000)
    store.create("run-edge", "{}")
    assert store.claim("run-edge", PENDING, OWNER_A, 11_000) == Claimed(11_000)
    assert (
        store.recover_claim(
            "run-edge", OWNER_A, 11_000, OWNER_B, 11_000, stale_evidence(OWNER_A, OWNER_B, 11_000)
        )
        == ClaimFresh()
    )
    assert store.abandon_claim("run-edge", OWNER_A, 11_000) == Abandoned()
    assert store.claim_and_own("run-edge", PENDING, OWNER_A, 11_000) == Activated()
    assert store.heartbeat("run-edge", OWNER_A, 11_000) == Updated()
    assert store.reconfirm("run-edge", OWNER_A, 11_000) == Updated()
    running = store.get("run-edge")
    assert running.heartbeat_at_ms == 11_000
    assert (
        store.steal(
            "run-edge", running.snapshot, OWNER_C, 11_000, stale_evidence(OWNER_A, OWNER_C, 11_000)
        )
        == HeartbeatFresh()
    )


@pytest.mark.parametrize(
    "operation",
    ["claim", "claim_and_own", "steal", "heartbeat", "reconfirm", "recover_claim"],
)
def test_a_reading_one_past_the_allowance_is_invalid(
    store: RunStore, clock: ManualClock, operation: str
) -> None:
    """now_ms = clock + 10 001 is refused with invalid_run before anything is compared."""
    running = activate_new(store, clock, "run-ahead", OWNER_A)
    clock.set(1_000)
    too_far = 11_001
    evidence = stale_evidence(OWNER_A, OWNER_C, too_far)
    calls = {
        "claim": lambda: store.claim("run-ahead", running.snapshot, OWNER_C, too_far),
        "claim_and_own": lambda: store.claim_and_own(
            "run-ahead", running.snapshot, OWNER_C, too_far, evidence
        ),
        "steal": lambda: store.steal("run-ahead", running.snapshot, OWNER_C, too_far, evidence),
        "heartbeat": lambda: store.heartbeat("run-ahead", OWNER_A, too_far),
        "reconfirm": lambda: store.reconfirm("run-ahead", OWNER_A, too_far),
        "recover_claim": lambda: store.recover_claim(
            "run-ahead", OWNER_A, 0, OWNER_C, too_far, evidence
        ),
    }
    before = store.state()
    with pytest.raises(RunStoreError) as failure:
        calls[operation]()
    assert (failure.value.code, failure.value.method) == ("invalid_run", operation)
    assert store.state() == before


def test_a_reading_behind_the_clock_is_admitted(store: RunStore, clock: ManualClock) -> None:
    """a reading behind the store clock is admitted (timestamps are checked independently)."""
    clock.set(100_000)
    store.create("run-behind", "{}")
    assert store.claim("run-behind", PENDING, OWNER_A, 50) == Claimed(50)
    row = store.get("run-behind")
    assert (row.created_at_ms, row.claimed_at_ms) == (100_000, 50)


def test_unbounded_tokens_and_request_times_are_not_skew_checked(
    store: RunStore, clock: ManualClock
) -> None:
    """request_cancel times and claimed_at_ms tokens (activate, abandon, recover) carry no
    skew bound."""
    store.create("run-tokens", "{}")
    far = 2**53 - 1
    assert store.activate("run-tokens", OWNER_A, far, PENDING) == ClaimLost()
    assert store.abandon_claim("run-tokens", OWNER_A, far) == ClaimLost()
    assert (
        store.recover_claim(
            "run-tokens", OWNER_A, far, OWNER_B, 0, stale_evidence(OWNER_A, OWNER_B, 0)
        )
        == ClaimChanged()
    )
    assert store.request_cancel("run-tokens", far) == CancelRequested(far)
    assert store.get("run-tokens").cancel_requested_at_ms == far
