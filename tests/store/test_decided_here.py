"""contract.md "Decided here, beyond upstream": one test per decision.

(2a)-(2c) run on every store: the lease and the run row agree after every
committed operation, where upstream let them drift apart. (1) and (3) need a
strategy that loses or refuses on purpose, which only a store that accepts an
injected strategy can run; those tests build their own store over a
disagreeing double wrapped around ``LocalConsensus`` and are skipped for
stores that cannot take one (the reference model's strategy cannot be made to
lose mid-operation).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import runstore
from runstore import (
    Abandoned,
    Activated,
    ClaimChanged,
    Claimed,
    ClaimLost,
    FenceLost,
    Lease,
    ManualClock,
    Recovered,
    RunStore,
    RunStoreError,
    SnapshotChanged,
    Transitioned,
    Updated,
)
from runstore.consensus import (
    ConsensusError,
    FenceLostError,
    LocalConsensus,
    Lost,
    Rejected,
    SqlConsensus,
)

from .. import _postgres
from ._golden import (
    OWNER_A,
    OWNER_B,
    OWNER_C,
    PENDING,
    activate_new,
    assert_facts_replay_to_row,
    assert_lease_agrees,
    fact,
    lease_expired,
    lease_of,
    stale_evidence,
)

# --- (2) the lease and the row agree ------------------------------------------------


@pytest.mark.parametrize("status", ["suspended", "completed", "failed", "cancelled"])
def test_2a_settling_over_a_pending_steal_claim_leaves_no_claim_behind(
    store: RunStore, clock: ManualClock, status: str
) -> None:
    """(2a) the owner suspends or settles while a stealer's claim is pending: the lease keeps
    no claim, so a later claim of the suspended run answers Claimed (upstream: SnapshotChanged)."""
    running = activate_new(store, clock, "run-2a", OWNER_A)
    clock.set(31_000)
    evidence = stale_evidence(OWNER_A, OWNER_B, 31_000)
    assert store.steal("run-2a", running.snapshot, OWNER_B, 31_000, evidence) == Claimed(31_000)
    assert store.transition_owned("run-2a", OWNER_A, status) == Transitioned()  # type: ignore[arg-type]
    assert lease_of(store, "run-2a") is None
    row = store.get("run-2a")
    assert (row.owner, row.claim, row.claimed_at_ms) == (None, None, None)
    # The stealer's claim is gone from both sides.
    assert store.activate("run-2a", OWNER_B, 31_000, running.snapshot) == ClaimLost()
    assert store.abandon_claim("run-2a", OWNER_B, 31_000) == ClaimLost()
    if status == "suspended":
        assert store.claim("run-2a", row.snapshot, OWNER_C, 31_000) == Claimed(31_000)
        assert lease_of(store, "run-2a") == Lease("run-2a", None, None, None, OWNER_C, 31_000)
        assert store.activate("run-2a", OWNER_C, 31_000, row.snapshot) == Activated()
        assert store.get("run-2a").owner == OWNER_C
    else:
        assert store.claim("run-2a", row.snapshot, OWNER_C, 31_000) == SnapshotChanged()
    assert_lease_agrees(store, "run-2a")
    assert_facts_replay_to_row(store, "run-2a")


def test_2b_self_steal_then_abandon_keeps_the_owner(store: RunStore, clock: ManualClock) -> None:
    """(2b) a self-steal (lease-expired evidence, claimant == owner) followed by abandon_claim
    keeps the owner, whose next heartbeat is Updated (upstream: FenceLost)."""
    running = activate_new(store, clock, "run-2b", OWNER_A)
    clock.set(31_000)
    evidence = lease_expired(OWNER_A, 31_000)
    assert store.steal("run-2b", running.snapshot, OWNER_A, 31_000, evidence) == Claimed(31_000)
    assert lease_of(store, "run-2b") == Lease("run-2b", OWNER_A, 0, 0, OWNER_A, 31_000)
    assert store.abandon_claim("run-2b", OWNER_A, 31_000) == Abandoned()
    assert lease_of(store, "run-2b") == Lease("run-2b", OWNER_A, 0, 0, None, None)
    row = store.get("run-2b")
    assert (row.status, row.owner, row.heartbeat_at_ms, row.claim) == ("running", OWNER_A, 0, None)
    assert store.heartbeat("run-2b", OWNER_A, 31_000) == Updated()
    assert store.reconfirm("run-2b", OWNER_A, 31_001) == Updated()
    assert store.get("run-2b").heartbeat_at_ms == 31_001
    assert store.transition_owned("run-2b", OWNER_A, "completed") == Transitioned()
    assert store.ownership_facts("run-2b") == [
        fact("run-2b", "claimed", OWNER_A, 0, 1),
        fact("run-2b", "activated", OWNER_A, 0, 2),
        fact("run-2b", "stolen", OWNER_A, 31_000, 3),
        fact("run-2b", "released", OWNER_A, 31_000, 4),
        fact("run-2b", "released", OWNER_A, None, 5),
    ]
    assert_lease_agrees(store, "run-2b")
    assert_facts_replay_to_row(store, "run-2b")


def test_2c_self_steal_heartbeat_then_stale_activate_keeps_the_owner(
    store: RunStore, clock: ManualClock
) -> None:
    """(2c) a self-steal, an owner heartbeat, then the stale activate (SnapshotChanged) keeps
    the owner, whose next heartbeat is Updated (upstream: FenceLost)."""
    running = activate_new(store, clock, "run-2c", OWNER_A)
    clock.set(31_000)
    evidence = lease_expired(OWNER_A, 31_000)
    assert store.steal("run-2c", running.snapshot, OWNER_A, 31_000, evidence) == Claimed(31_000)
    assert store.heartbeat("run-2c", OWNER_A, 31_000) == Updated()
    assert store.activate("run-2c", OWNER_A, 31_000, running.snapshot) == SnapshotChanged()
    assert lease_of(store, "run-2c") == Lease("run-2c", OWNER_A, 0, 31_000, None, None)
    row = store.get("run-2c")
    assert (row.owner, row.heartbeat_at_ms, row.claim) == (OWNER_A, 31_000, None)
    assert store.heartbeat("run-2c", OWNER_A, 31_001) == Updated()
    assert store.get("run-2c").heartbeat_at_ms == 31_001
    assert store.ownership_facts("run-2c")[2:] == [
        fact("run-2c", "stolen", OWNER_A, 31_000, 3),
        fact("run-2c", "released", OWNER_A, 31_000, 4),
    ]
    assert_lease_agrees(store, "run-2c")
    assert_facts_replay_to_row(store, "run-2c")


def test_2_self_steal_then_activate_starts_a_new_generation(
    store: RunStore, clock: ManualClock
) -> None:
    """a self-steal that activates makes the owner's lease a new generation granted at the steal."""
    running = activate_new(store, clock, "run-self", OWNER_A)
    clock.set(31_000)
    evidence = lease_expired(OWNER_A, 31_000)
    assert store.steal("run-self", running.snapshot, OWNER_A, 31_000, evidence) == Claimed(31_000)
    assert store.activate("run-self", OWNER_A, 31_000, running.snapshot) == Activated()
    assert lease_of(store, "run-self") == Lease("run-self", OWNER_A, 31_000, 31_000, None, None)
    row = store.get("run-self")
    assert (row.owner, row.heartbeat_at_ms, row.started_at_ms) == (OWNER_A, 31_000, 0)
    assert_facts_replay_to_row(store, "run-self")


def test_2_lease_and_row_agree_after_every_operation(store: RunStore, clock: ManualClock) -> None:
    """after each committed operation of a long mixed history, lease and row agree and the
    facts replay to the row."""
    run = "run-agree"

    def snapshot() -> Any:
        return store.get(run).snapshot

    steps: list[tuple[Callable[[], object], object]] = [
        (lambda: store.create(run, "{}"), None),
        (lambda: store.claim(run, PENDING, OWNER_A, 0), Claimed(0)),
        (lambda: store.abandon_claim(run, OWNER_A, 0), Abandoned()),
        (lambda: store.claim(run, PENDING, OWNER_B, 0), Claimed(0)),
        (lambda: store.activate(run, OWNER_B, 0, PENDING), Activated()),
        (lambda: store.heartbeat(run, OWNER_B, 10), Updated()),
        (lambda: clock.set(40_011), 40_011),
        (
            lambda: store.steal(
                run, snapshot(), OWNER_C, 40_011, stale_evidence(OWNER_B, OWNER_C, 40_011)
            ),
            Claimed(40_011),
        ),
        (lambda: store.reconfirm(run, OWNER_B, 40_011), FenceLost()),
        (lambda: store.heartbeat(run, OWNER_B, 40_011), Updated()),
        (lambda: store.activate(run, OWNER_C, 40_011, PENDING), SnapshotChanged()),
        (lambda: clock.set(80_000), 80_000),
        (
            lambda: store.claim_and_own(
                run, snapshot(), OWNER_C, 80_000, stale_evidence(OWNER_B, OWNER_C, 80_000)
            ),
            Activated(),
        ),
        (lambda: store.transition_owned(run, OWNER_C, "running", '{"step":2}'), Transitioned()),
        (lambda: store.transition_owned(run, OWNER_C, "suspended"), Transitioned()),
        (lambda: store.claim(run, snapshot(), OWNER_A, 80_000), Claimed(80_000)),
        (lambda: clock.set(110_001), 110_001),
        (
            lambda: store.recover_claim(
                run, OWNER_A, 80_000, OWNER_B, 110_001, stale_evidence(OWNER_A, OWNER_B, 110_001)
            ),
            Recovered(),
        ),
        (lambda: store.claim_and_own(run, snapshot(), OWNER_A, 110_001), Activated()),
        (lambda: store.transition_owned(run, OWNER_A, "completed"), Transitioned()),
    ]
    for index, (step, expected) in enumerate(steps):
        assert step() == expected, f"step {index}"
        assert_lease_agrees(store, run)
        assert_facts_replay_to_row(store, run)
    row = store.get(run)
    assert (row.status, row.owner, row.state_json) == ("completed", None, '{"step":2}')
    assert row.finished_at_ms == 110_001


def test_1_deliberate_clean_up_on_a_loss_still_commits(store: RunStore, clock: ManualClock) -> None:
    """(1) the SnapshotChanged path of activate releases the claim and commits that clean-up."""
    running = activate_new(store, clock, "run-1", OWNER_A)
    clock.set(31_000)
    evidence = stale_evidence(OWNER_A, OWNER_B, 31_000)
    assert store.steal("run-1", running.snapshot, OWNER_B, 31_000, evidence) == Claimed(31_000)
    assert store.heartbeat("run-1", OWNER_A, 31_000) == Updated()
    revision = store.revision()
    assert store.activate("run-1", OWNER_B, 31_000, running.snapshot) == SnapshotChanged()
    assert store.revision() == revision + 1
    assert store.ownership_facts("run-1")[-1] == fact("run-1", "released", OWNER_B, 31_000, 4)
    assert lease_of(store, "run-1") == Lease("run-1", OWNER_A, 0, 31_000, None, None)
    assert_lease_agrees(store, "run-1")


# --- (1) and (3): stores over a strategy that disagrees on purpose ----------------------


class _Disagreeing:
    """A strategy double: a real strategy except for the methods overridden, which take
    over only while ``armed``."""

    def __init__(self, inner: Any, overrides: dict[str, Callable[..., Any]]) -> None:
        self.inner = inner
        self.overrides = overrides
        self.armed = False

    def _call(self, name: str, *args: Any) -> Any:
        if self.armed and name in self.overrides:
            return self.overrides[name](self.inner, *args)
        return getattr(self.inner, name)(*args)

    def claim(self, *args: Any) -> Any:
        return self._call("claim", *args)

    def steal(self, *args: Any) -> Any:
        return self._call("steal", *args)

    def activate(self, *args: Any) -> Any:
        return self._call("activate", *args)

    def heartbeat(self, *args: Any) -> Any:
        return self._call("heartbeat", *args)

    def reconfirm(self, *args: Any) -> Any:
        return self._call("reconfirm", *args)

    def recover(self, *args: Any) -> Any:
        return self._call("recover", *args)

    def release_claim(self, *args: Any) -> Any:
        return self._call("release_claim", *args)

    def release_ownership(self, *args: Any) -> Any:
        return self._call("release_ownership", *args)

    def guard(self, *args: Any) -> Any:
        return self._call("guard", *args)

    def lease(self, *args: Any) -> Any:
        return self._call("lease", *args)

    def on_open(self, *args: Any) -> Any:
        hook = getattr(self.inner, "on_open", None)
        return None if hook is None else hook(*args)


def _model_takes_a_strategy() -> bool:
    try:
        from runstore.model import ModelRunStore
    except ImportError:
        return False
    return "consensus" in inspect.signature(ModelRunStore).parameters


Injectable = Callable[..., tuple[RunStore, _Disagreeing]]


@pytest.fixture(params=["sqlite", "postgres-sql", "model"])
def injectable(
    request: pytest.FixtureRequest, clock: ManualClock, tmp_path: Path
) -> Iterator[Injectable]:
    """Opens a store of the parametrized kind over a disagreeing double, or skips.

    The SQLite adapter takes ``consensus=`` (contract.md, ``runstore.open``); the
    reference model is used only if it grows the same parameter.
    """
    kind = request.param
    if kind == "model" and not _model_takes_a_strategy():
        pytest.skip("the reference model takes no injected strategy: (1)/(3) are unreachable on it")
    opened: list[RunStore] = []

    def open_over(**overrides: Callable[..., Any]) -> tuple[RunStore, _Disagreeing]:
        if kind == "sqlite":
            double = _Disagreeing(LocalConsensus(), overrides)
            try:
                store: RunStore = runstore.open(  # type: ignore[assignment]
                    tmp_path / "decided.db", clock=clock, consensus=double
                )
            except NotImplementedError:
                pytest.skip("the SQLite adapter cannot be opened yet")
        elif kind == "postgres-sql":
            # The leases in the database, rolled back with the transaction.
            double = _Disagreeing(SqlConsensus(), overrides)
            store = _postgres.open_store(clock, double)
        else:
            from runstore.model import ModelConsensus, ModelRunStore

            double = _Disagreeing(ModelConsensus(), overrides)
            store = ModelRunStore(clock=clock, consensus=double)  # type: ignore[call-arg]
        opened.append(store)
        return store, double

    yield open_over
    for store in opened:
        store.close()


def _rejected(_inner: Any, *_args: Any) -> Rejected:
    return Rejected("unavailable")


def _lost(_inner: Any, *_args: Any) -> Lost:
    return Lost()


def test_1_re_own_that_cannot_re_grant_rolls_back_whole(
    injectable: Injectable, clock: ManualClock
) -> None:
    """(1) re-owning one's own stale run, when the strategy refuses the re-grant after the
    release, rolls back: lease, facts and row are as before, and the loss is row-classified."""
    store, double = injectable(claim=_rejected)
    store.create("run-reown", "{}")
    assert store.claim_and_own("run-reown", PENDING, OWNER_A, 0) == Activated()
    running = store.get("run-reown")
    clock.set(30_001)
    before = store.state()
    double.armed = True
    assert store.claim_and_own("run-reown", running.snapshot, OWNER_A, 30_001) == SnapshotChanged()
    assert store.state() == before
    double.armed = False
    store.check_invariants()


def test_1_grant_then_lost_activation_rolls_back_whole(
    injectable: Injectable, clock: ManualClock
) -> None:
    """(1) claim_and_own whose fresh grant then loses its activation rolls back: no lease
    change, no fact, no row write."""
    store, double = injectable(activate=_lost)
    store.create("run-grant", "{}")
    before = store.state()
    double.armed = True
    assert store.claim_and_own("run-grant", PENDING, OWNER_A, 0) == SnapshotChanged()
    assert store.state() == before
    double.armed = False
    assert store.claim_and_own("run-grant", PENDING, OWNER_A, 0) == Activated()
    store.check_invariants()


def test_3_strategy_refusals_are_reported_as_row_classified_losses(
    injectable: Injectable, clock: ManualClock
) -> None:
    """(3) the strategy stays authoritative: where it refuses what the row admitted, claim,
    claim_and_own and steal report the row-classified loss, recover_claim ClaimChanged,
    and nothing is written."""
    store, double = injectable(claim=_rejected, steal=_rejected, recover=_rejected)
    store.create("run-pending", "{}")
    store.create("run-claimed", "{}")
    assert store.claim("run-claimed", PENDING, OWNER_A, 0) == Claimed(0)
    running = activate_new(store, clock, "run-owned", OWNER_A)
    clock.set(31_000)
    before = store.state()
    double.armed = True
    assert store.claim("run-pending", PENDING, OWNER_B, 31_000) == SnapshotChanged()
    assert store.claim_and_own("run-pending", PENDING, OWNER_B, 31_000) == SnapshotChanged()
    evidence = stale_evidence(OWNER_A, OWNER_C, 31_000)
    assert (
        store.steal("run-owned", running.snapshot, OWNER_C, 31_000, evidence) == SnapshotChanged()
    )
    assert (
        store.recover_claim(
            "run-claimed", OWNER_A, 0, OWNER_B, 31_000, stale_evidence(OWNER_A, OWNER_B, 31_000)
        )
        == ClaimChanged()
    )
    assert store.state() == before


def test_3_lost_activation_clears_the_claim_and_reports_claim_lost(
    injectable: Injectable,
) -> None:
    """(3) activate whose strategy no longer holds the claim clears the row's claim and
    reports ClaimLost without a fact."""
    store, double = injectable(activate=_lost)
    store.create("run-lost", "{}")
    assert store.claim("run-lost", PENDING, OWNER_A, 0) == Claimed(0)
    facts = store.ownership_facts("run-lost")
    double.armed = True
    assert store.activate("run-lost", OWNER_A, 0, PENDING) == ClaimLost()
    row = store.get("run-lost")
    assert (row.status, row.claim, row.claimed_at_ms) == ("pending", None, None)
    assert store.ownership_facts("run-lost") == facts


def test_3_fence_and_renewal_disagreements_are_fence_lost(
    injectable: Injectable, clock: ManualClock
) -> None:
    """(3) a guard that refuses makes transition_owned FenceLost; a heartbeat the strategy
    loses is FenceLost; nothing is written."""

    def refuse(_inner: Any, _tx: Any, run_id: str, _owner: Any) -> None:
        raise FenceLostError(run_id)

    store, double = injectable(guard=refuse, heartbeat=_lost, reconfirm=_lost)
    activate_new(store, clock, "run-fenced", OWNER_A)
    before = store.state()
    double.armed = True
    assert store.transition_owned("run-fenced", OWNER_A, "completed") == FenceLost()
    assert store.heartbeat("run-fenced", OWNER_A, 1) == FenceLost()
    assert store.reconfirm("run-fenced", OWNER_A, 1) == FenceLost()
    assert store.state() == before


def test_3_a_failing_strategy_surfaces_as_persistence_failed(
    injectable: Injectable,
) -> None:
    """a strategy that cannot answer fails the operation with persistence_failed; nothing
    it did is visible."""

    def broken(_inner: Any, *_args: Any) -> Any:
        raise ConsensusError("persistence_failed", "lease storage unavailable")

    store, double = injectable(claim=broken)
    store.create("run-broken", "{}")
    before = store.state()
    double.armed = True
    with pytest.raises(RunStoreError) as failure:
        store.claim("run-broken", PENDING, OWNER_A, 0)
    assert (failure.value.code, failure.value.method) == ("persistence_failed", "claim")
    double.armed = False
    assert store.state() == before


# --- (4) a store clock past the safe integers ---------------------------------------


def test_4_a_store_clock_past_2_53_refuses_every_operation_that_reads_it(
    store: RunStore, clock: ManualClock
) -> None:
    """(4) once the store clock reads 2**53 (past the safe integers), every operation that
    reads it raises invalid_run naming the clock and writes nothing; reads that do not
    consult the clock carry on. Upstream carried on: a claim succeeded, a create failed
    with constraint."""
    running = activate_new(store, clock, "run-4-running", OWNER_A)
    store.create("run-4-pending", "{}")
    before = store.state()
    clock.set(2**53)
    now = 1_000  # the callers' own readings stay admissible
    evidence = stale_evidence(OWNER_A, OWNER_B, now)
    reading_the_clock: dict[str, Callable[[], object]] = {
        "create": lambda: store.create("run-4-new", "{}"),
        "claim": lambda: store.claim("run-4-pending", PENDING, OWNER_B, now),
        "claim_and_own": lambda: store.claim_and_own("run-4-pending", PENDING, OWNER_B, now),
        "activate": lambda: store.activate("run-4-pending", OWNER_B, now, PENDING),
        "steal": lambda: store.steal("run-4-running", running, OWNER_B, now, evidence),
        "recover_claim": lambda: store.recover_claim(
            "run-4-pending", OWNER_B, now, OWNER_C, now, stale_evidence(OWNER_B, OWNER_C, now)
        ),
        "heartbeat": lambda: store.heartbeat("run-4-running", OWNER_A, now),
        "reconfirm": lambda: store.reconfirm("run-4-running", OWNER_A, now),
        "heartbeat_many": lambda: store.heartbeat_many(OWNER_A, ["run-4-running"], now),
        "claim_next": lambda: store.claim_next(OWNER_B, now),
        "transition_owned": lambda: store.transition_owned("run-4-running", OWNER_A, "completed"),
    }
    for method, call in reading_the_clock.items():
        with pytest.raises(RunStoreError) as refused:
            call()
        assert (refused.value.code, refused.value.cause.get("field")) == ("invalid_run", "clock"), (
            method
        )
    assert store.state() == before
    # What does not read the clock is unaffected.
    assert store.get("run-4-running").owner == OWNER_A
    assert [row.run_id for row in store.list_runs(status="pending").runs] == ["run-4-pending"]
