"""Regression: a LocalConsensus lease rebuilt by two reopens.

Found by the CI fuzz campaign on sqlite-file-local (rewritten here from seed 2
of a local replay). The thief's clock runs 1 ms ahead, so its grant time
(130002) and its first heartbeat (130001, the store clock) differ. The first
reopen rebuilds its lease with the heartbeat as grant time; a pulse then moves
the heartbeat to 130002, so the second reopen rebuilds the grant time the model
holds. The machine kept the alias the first reopen taught and reported a
mismatch: a defect in the harness (fixed), not in the store. The expected
state is the reference model's.
"""

import runstore
from runstore import (
    Activated,
    Claimed,
    Lease,
    LivenessEvidence,
    ManualClock,
    OwnerId,
    OwnershipFact,
    Recovered,
    RunChange,
    RunRow,
    RunSnapshot,
    StoreState,
    Updated,
)
from runstore.consensus import LocalConsensus
from runstore.sqlite import RetryPolicy


def make_strategy():
    return LocalConsensus()


def open_store(clock, path):
    return runstore.open(path, clock=clock, consensus=make_strategy())


def reopen(clock, path):
    """Open the store; transient faults are replayed at once, 3 attempts in all."""
    store = open_store(clock, path)
    store._retry_policy = RetryPolicy(
        max_attempts=3, budget_ms=60_000, base_delay_ms=0.0, max_delay_ms=0.0
    )
    return store


def test_local_lease_rebuilt_by_two_reopens(tmp_path):
    """The shrunk program gets the reference model's answers and state."""
    clock = ManualClock(100000)
    path = tmp_path / "store.db"
    store = reopen(clock, path)
    try:
        assert store.create("a", '{"n":0}') is None
        assert store.create("b", '{"n":0}') is None
        assert store.create("lin", '{"n":0}') is None
        assert (
            store.claim_and_own(
                "a",
                RunSnapshot(status="pending", owner=None, heartbeat_at_ms=None),
                OwnerId(host_id="h1", pid=1, nonce="n0"),
                100000,
                evidence=LivenessEvidence(
                    expected_owner=OwnerId(host_id="h1", pid=1, nonce="n0"),
                    checked_at_ms=100000,
                    kind="lease-expired",
                ),
            )
            == Activated()
        )
        assert store.claim(
            "b",
            RunSnapshot(status="pending", owner=None, heartbeat_at_ms=None),
            OwnerId(host_id="h1", pid=1, nonce="n0"),
            100000,
        ) == Claimed(claimed_at_ms=100000)
        clock.set(130001)
        assert (
            store.recover_claim(
                "b",
                OwnerId(host_id="h1", pid=1, nonce="n0"),
                100000,
                OwnerId(host_id="h1", pid=1, nonce="n1"),
                130001,
                LivenessEvidence(
                    expected_owner=OwnerId(host_id="h1", pid=1, nonce="n0"),
                    checked_at_ms=130001,
                    kind="same-host-pid-dead",
                ),
            )
            == Recovered()
        )
        assert store.steal(
            "a",
            RunSnapshot(
                status="running",
                owner=OwnerId(host_id="h1", pid=1, nonce="n0"),
                heartbeat_at_ms=100000,
            ),
            OwnerId(host_id="h2", pid=1, nonce="n0"),
            130002,
            LivenessEvidence(
                expected_owner=OwnerId(host_id="h1", pid=1, nonce="n0"),
                checked_at_ms=130002,
                kind="cross-host-unreachable-stale",
            ),
        ) == Claimed(claimed_at_ms=130002)
        assert (
            store.activate(
                "a",
                OwnerId(host_id="h2", pid=1, nonce="n0"),
                130002,
                RunSnapshot(
                    status="running",
                    owner=OwnerId(host_id="h1", pid=1, nonce="n0"),
                    heartbeat_at_ms=100000,
                ),
            )
            == Activated()
        )
        store.close()
        store = reopen(clock, path)
        assert store.heartbeat("a", OwnerId(host_id="h2", pid=1, nonce="n0"), 130002) == Updated()
        assert store.heartbeat("a", OwnerId(host_id="h2", pid=1, nonce="n0"), 130001) == Updated()
        store.close()
        store = reopen(clock, path)
        expected = StoreState(
            rows=(
                RunRow(
                    run_id="a",
                    status="running",
                    created_at_ms=100000,
                    started_at_ms=100000,
                    finished_at_ms=None,
                    owner=OwnerId(host_id="h2", pid=1, nonce="n0"),
                    heartbeat_at_ms=130002,
                    claim=None,
                    claimed_at_ms=None,
                    parent_run_id=None,
                    cancel_requested_at_ms=None,
                    lineage_id=None,
                    round_ordinal=None,
                    state_json='{"n":0}',
                ),
                RunRow(
                    run_id="b",
                    status="pending",
                    created_at_ms=100000,
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
                    state_json='{"n":0}',
                ),
                RunRow(
                    run_id="lin",
                    status="pending",
                    created_at_ms=100000,
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
                    state_json='{"n":0}',
                ),
            ),
            leases=(
                Lease(
                    run_id="a",
                    owner=OwnerId(host_id="h2", pid=1, nonce="n0"),
                    granted_at_ms=130002,
                    heartbeat_at_ms=130002,
                    claim=None,
                    claimed_at_ms=None,
                ),
            ),
            facts=(
                OwnershipFact(
                    run_id="a",
                    transition="claimed",
                    owner=OwnerId(host_id="h1", pid=1, nonce="n0"),
                    granted_at_ms=100000,
                    position=1,
                ),
                OwnershipFact(
                    run_id="a",
                    transition="activated",
                    owner=OwnerId(host_id="h1", pid=1, nonce="n0"),
                    granted_at_ms=100000,
                    position=2,
                ),
                OwnershipFact(
                    run_id="a",
                    transition="stolen",
                    owner=OwnerId(host_id="h2", pid=1, nonce="n0"),
                    granted_at_ms=130002,
                    position=3,
                ),
                OwnershipFact(
                    run_id="a",
                    transition="activated",
                    owner=OwnerId(host_id="h2", pid=1, nonce="n0"),
                    granted_at_ms=130002,
                    position=4,
                ),
                OwnershipFact(
                    run_id="b",
                    transition="claimed",
                    owner=OwnerId(host_id="h1", pid=1, nonce="n0"),
                    granted_at_ms=100000,
                    position=1,
                ),
                OwnershipFact(
                    run_id="b",
                    transition="expired",
                    owner=OwnerId(host_id="h1", pid=1, nonce="n0"),
                    granted_at_ms=100000,
                    position=2,
                ),
            ),
            revision=10,
            changes=(
                RunChange(run_id="lin", revision=3, deleted=False),
                RunChange(run_id="b", revision=6, deleted=False),
                RunChange(run_id="a", revision=10, deleted=False),
            ),
            acknowledgements=(),
            attempts=(),
        )
        assert store.state() == expected
    finally:
        store.close()
