"""Smoke tests of the reference model's own bookkeeping: revisions, facts,
lease/row agreement, all-or-nothing commits, the corruption hook, invariants."""

from __future__ import annotations

import threading

import attrs
import pytest

from runstore import (
    Abandoned,
    Activated,
    CancelRequested,
    Claimed,
    ClaimLost,
    FenceLost,
    HeartbeatFresh,
    LivenessEvidence,
    ManualClock,
    OwnerId,
    OwnershipFact,
    RunChange,
    RunSnapshot,
    RunStoreError,
    SnapshotChanged,
    Transitioned,
    Updated,
)
from runstore._values import Lease
from runstore.model import ModelRunStore
from runstore.model._invariants import check_state

A = OwnerId("host-a", 1, "nonce-a")
B = OwnerId("host-b", 2, "nonce-b")
PENDING = RunSnapshot("pending", None, None)


@pytest.fixture
def model(clock: ManualClock) -> ModelRunStore:
    return ModelRunStore(clock)


def running(owner: OwnerId, heartbeat: int) -> RunSnapshot:
    return RunSnapshot("running", owner, heartbeat)


def test_create_stamps_created_at_from_the_store_clock(
    model: ModelRunStore, clock: ManualClock
) -> None:
    """create stores a pending row stamped with the clock, state byte for byte."""
    clock.set(1234)
    model.create("r", '{ "a" : 1 }')
    row = model.get("r")
    assert (row.status, row.created_at_ms, row.state_json) == ("pending", 1234, '{ "a" : 1 }')
    assert model.revision() == 1
    assert model.changes(0) == [RunChange("r", 1, False)]


def test_revisions_count_row_writes_and_nothing_else(model: ModelRunStore) -> None:
    """Each written row is one revision; refusals and losses write nothing."""
    model.create("r", "{}")
    assert model.claim_and_own("r", PENDING, A, 0) == Activated()
    assert model.revision() == 2
    assert model.claim_and_own("r", PENDING, B, 0) == HeartbeatFresh()
    assert model.acknowledge_cancel("r", A, 1) is False
    assert model.revision() == 2
    assert model.request_cancel("r", 5) == CancelRequested(5)
    assert model.acknowledge_cancel("r", A, 6) is True
    assert model.acknowledge_cancel("r", A, 7) is True
    assert model.heartbeat("r", A, 0) == Updated()
    assert model.transition_owned("r", A, "completed") == Transitioned()
    assert model.revision() == 7
    assert model.state().acknowledgements[0].observed_at_ms == 6
    assert model.changes(6) == [RunChange("r", 7, False)]


def test_lineage_cancel_counts_one_revision_per_marked_round(model: ModelRunStore) -> None:
    """request_cancel_lineage writes every live, unrequested round once."""
    model.create("root", "{}")
    model.create("round-1", "{}", lineage_id="root", round_ordinal=1)
    model.create("round-2", "{}", lineage_id="root", round_ordinal=2)
    assert model.request_cancel("round-1", 3) == CancelRequested(3)
    assert model.request_cancel_lineage("round-2", 9) == CancelRequested(9)
    assert model.revision() == 6
    assert [r.cancel_requested_at_ms for r in model.lineage("root")] == [9, 3, 9]


def test_steal_and_activate_keep_lease_and_row_in_agreement(
    model: ModelRunStore, clock: ManualClock
) -> None:
    """A steal claims over the stale owner; activation hands lease and row over."""
    model.create("r", "{}")
    model.claim_and_own("r", PENDING, A, 0)
    clock.set(30_001)
    evidence = LivenessEvidence(A, 30_001, "cross-host-unreachable-stale")
    assert model.steal("r", running(A, 0), B, 30_001, evidence) == Claimed(30_001)
    assert model.state().leases == (Lease("r", A, 0, 0, B, 30_001),)
    assert model.activate("r", B, 30_001, running(A, 0)) == Activated()
    assert model.state().leases == (Lease("r", B, 30_001, 30_001, None, None),)
    assert model.heartbeat("r", A, 30_001) == FenceLost()
    assert [f.transition for f in model.ownership_facts("r")] == [
        "claimed",
        "activated",
        "stolen",
        "activated",
    ]


def test_reowning_a_stale_own_run_releases_and_regrants(
    model: ModelRunStore, clock: ManualClock
) -> None:
    """claim_and_own over one's own stale run records released, claimed, activated."""
    model.create("r", "{}")
    model.claim_and_own("r", PENDING, A, 0)
    clock.set(40_000)
    assert model.claim_and_own("r", running(A, 0), A, 40_000) == Activated()
    assert model.ownership_facts("r")[2:] == [
        OwnershipFact("r", "released", A, None, 3),
        OwnershipFact("r", "claimed", A, 40_000, 4),
        OwnershipFact("r", "activated", A, 40_000, 5),
    ]
    assert model.get("r").started_at_ms == 0


def test_abandoning_a_self_steal_keeps_the_owner(model: ModelRunStore, clock: ManualClock) -> None:
    """A self-steal then abandon_claim leaves ownership; the next heartbeat is Updated."""
    model.create("r", "{}")
    model.claim_and_own("r", PENDING, A, 0)
    clock.set(30_001)
    evidence = LivenessEvidence(A, 30_001, "lease-expired")
    assert model.steal("r", running(A, 0), A, 30_001, evidence) == Claimed(30_001)
    assert model.abandon_claim("r", A, 30_001) == Abandoned()
    assert model.heartbeat("r", A, 30_001) == Updated()
    assert model.state().leases == (Lease("r", A, 0, 30_001, None, None),)


def test_settling_under_a_pending_steal_leaves_the_run_claimable(
    model: ModelRunStore, clock: ManualClock
) -> None:
    """Suspending drops the stealer's claim from lease and row; a later claim wins."""
    model.create("r", "{}")
    model.claim_and_own("r", PENDING, A, 0)
    clock.set(30_001)
    evidence = LivenessEvidence(A, 30_001, "cross-host-unreachable-stale")
    model.steal("r", running(A, 0), B, 30_001, evidence)
    assert model.transition_owned("r", A, "suspended") == Transitioned()
    assert model.state().leases == ()
    suspended = RunSnapshot("suspended", None, None)
    assert model.claim("r", suspended, B, 30_001) == Claimed(30_001)
    assert model.activate("r", B, 30_001, suspended) == Activated()


def test_reconfirm_is_lost_while_a_claim_is_pending(
    model: ModelRunStore, clock: ManualClock
) -> None:
    """reconfirm answers FenceLost while a steal claim is pending; heartbeat still works."""
    model.create("r", "{}")
    model.claim_and_own("r", PENDING, A, 0)
    clock.set(30_001)
    model.steal("r", running(A, 0), B, 30_001, LivenessEvidence(A, 30_001, "lease-expired"))
    assert model.reconfirm("r", A, 30_001) == FenceLost()
    assert model.heartbeat("r", A, 30_001) == Updated()
    assert model.activate("r", B, 30_001, running(A, 0)) == SnapshotChanged()
    assert model.reconfirm("r", A, 30_002) == Updated()


def test_a_refused_operation_leaves_the_state_untouched(model: ModelRunStore) -> None:
    """A constraint error and a lost race leave the whole state equal to before."""
    model.create("r", "{}")
    before = model.state()
    with pytest.raises(RunStoreError) as raised:
        model.create("r", "{}")
    assert raised.value.code == "constraint"
    with pytest.raises(RunStoreError):
        model.create("s", "{}", parent_run_id="missing")
    assert model.activate("r", A, 0, PENDING) == ClaimLost()
    assert model.state() == before


def test_a_run_may_name_itself_as_parent(model: ModelRunStore) -> None:
    """The foreign key is checked after the insert, so a self-parent is admitted."""
    model.create("r", "{}", parent_run_id="r")
    assert model.get("r").parent_run_id == "r"


def test_a_strategy_loss_after_a_release_rolls_the_whole_operation_back(
    model: ModelRunStore, clock: ManualClock
) -> None:
    """If the re-own's fresh claim were refused, no release, fact or row write remains."""
    model.create("r", "{}")
    model.claim_and_own("r", PENDING, A, 0)
    # White-box: make the lease disagree with the row (B holds it), which the
    # model's own operations never do, to reach the rollback path.
    state = model.model_state
    foreign = Lease("r", B, 0, 0, None, None)
    model._state = attrs.evolve(state, leases={"r": foreign})
    clock.set(40_000)
    assert model.claim_and_own("r", running(A, 0), A, 40_000) == SnapshotChanged()
    assert model.model_state.leases == {"r": foreign}
    assert len(model.ownership_facts("r")) == 2
    assert model.revision() == 2


def test_raw_state_breaks_reads_until_a_transition_heals_it(model: ModelRunStore) -> None:
    """Corrupt stored state fails decoding on reads only; new state heals it."""
    model.create("r", "{}")
    model.claim_and_own("r", PENDING, A, 0)
    assert model.raw_write_state("r", "not json") is True
    assert model.raw_write_state("missing", "x") is False
    assert model.revision() == 3
    for read in (model.get, model.lineage, model.latest_round):
        with pytest.raises(RunStoreError) as raised:
            read("r")
        assert raised.value.code == "decode_failed"
        assert raised.value.cause["state_json_valid"] is False
        assert "not json" not in repr(raised.value)
    assert model.state().rows[0].state_json == "not json"
    assert model.heartbeat("r", A, 0) == Updated()
    assert model.transition_owned("r", A, "running", '{"ok":true}') == Transitioned()
    assert model.get("r").state_json == '{"ok":true}'


def test_check_invariants_names_the_broken_invariant(model: ModelRunStore) -> None:
    """A state whose lease disagrees with its row fails with the invariant's name."""
    model.create("r", "{}")
    model.claim_and_own("r", PENDING, A, 0)
    model.check_invariants()
    broken = attrs.evolve(model.model_state, leases={})
    with pytest.raises(AssertionError, match="no lease means no owner"):
        check_state(broken)
    skipped = attrs.evolve(model.model_state, revision=5)
    with pytest.raises(AssertionError, match="revision equals"):
        check_state(skipped)


def test_threads_may_share_a_model(model: ModelRunStore) -> None:
    """Concurrent heartbeats from two threads all land; invariants hold."""
    model.create("r", "{}")
    model.claim_and_own("r", PENDING, A, 0)

    def beat() -> None:
        for now in range(200):
            assert model.heartbeat("r", A, now) == Updated()

    threads = [threading.Thread(target=beat) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert model.revision() == 402
    assert model.get("r").heartbeat_at_ms == 199
    model.check_invariants()


def test_the_model_is_a_context_manager_and_close_repeats(model: ModelRunStore) -> None:
    """close does nothing and may be called twice; with-blocks close the model."""
    with model as opened:
        opened.create("r", "{}")
    model.close()
    assert model.get("r").run_id == "r"
