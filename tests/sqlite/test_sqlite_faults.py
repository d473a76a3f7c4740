"""The fault seam: an injected failure anywhere in a write rolls all of it back.

Every scenario puts a store in a state, then runs one operation with a fault
armed. A lasting fault at any statement of the operation, in any strategy
call, or at the commit is ``persistence_failed`` and changes nothing (SQL dump,
whole state, revision, leases and facts all equal). Fewer transient faults
than the retry budget give exactly the model's outcome; as many as the budget
give the error.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from runstore import (
    LivenessEvidence,
    ManualClock,
    RunSnapshot,
    RunStore,
    RunStoreError,
    TransitionGuard,
)
from runstore.model import ModelRunStore
from runstore.sqlite import Fault, FaultPlan, RetryPolicy, SqliteRunStore

from .._sqlite import OTHER, OWNER, PENDING, STRATEGIES, THIRD, logical_dump, open_store

Setup = Callable[[RunStore, ManualClock], None]
Call = Callable[[RunStore, ManualClock], Any]


def _pending(store: RunStore, _clock: ManualClock) -> None:
    store.create("run", '{"step":0}')
    store.create("root", "{}")
    store.create("round", "{}", lineage_id="root", round_ordinal=1)


def _owned(store: RunStore, clock: ManualClock) -> None:
    _pending(store, clock)
    store.claim_and_own("run", PENDING, OWNER, 0)


def _claimed(store: RunStore, clock: ManualClock) -> None:
    _pending(store, clock)
    store.claim("run", PENDING, OTHER, 0)


def _stale(store: RunStore, clock: ManualClock) -> None:
    _owned(store, clock)
    clock.set(40_000)


def _stolen(store: RunStore, clock: ManualClock) -> None:
    _stale(store, clock)
    store.steal(
        "run", store.get("run"), OTHER, 40_000, LivenessEvidence(OWNER, 40_000, "lease-expired")
    )


def _stale_claim(store: RunStore, clock: ManualClock) -> None:
    _claimed(store, clock)
    clock.set(40_000)


def _cancel_requested(store: RunStore, clock: ManualClock) -> None:
    _owned(store, clock)
    store.request_cancel("run", 3)


SCENARIOS: dict[str, tuple[Setup, Call]] = {
    "create": (_pending, lambda s, c: s.create("new", '{"x":1}', parent_run_id="run")),
    "claim": (_pending, lambda s, c: s.claim("run", PENDING, OTHER, 0)),
    "claim_and_own": (_pending, lambda s, c: s.claim_and_own("run", PENDING, OWNER, 0)),
    "claim_and_own re-own": (
        _stale,
        lambda s, c: s.claim_and_own("run", s.get("run"), OWNER, 40_000),
    ),
    "claim_and_own over a stale owner": (
        _stale,
        lambda s, c: s.claim_and_own(
            "run", s.get("run"), OTHER, 40_000, LivenessEvidence(OWNER, 40_000, "lease-expired")
        ),
    ),
    "activate": (_claimed, lambda s, c: s.activate("run", OTHER, 0, PENDING)),
    "activate after a moved snapshot": (
        _claimed,
        lambda s, c: s.activate("run", OTHER, 0, RunSnapshot("suspended", None, None)),
    ),
    "activate a stolen claim": (
        _stolen,
        lambda s, c: s.activate("run", OTHER, 40_000, s.get("run")),
    ),
    "abandon_claim": (_claimed, lambda s, c: s.abandon_claim("run", OTHER, 0)),
    "recover_claim": (
        _stale_claim,
        lambda s, c: s.recover_claim(
            "run", OTHER, 0, THIRD, 40_000, LivenessEvidence(OTHER, 40_000, "lease-expired")
        ),
    ),
    "heartbeat": (_owned, lambda s, c: s.heartbeat("run", OWNER, 5)),
    "reconfirm": (_owned, lambda s, c: s.reconfirm("run", OWNER, 5)),
    "transition_owned running": (
        _owned,
        lambda s, c: s.transition_owned("run", OWNER, "running", '{"step":1}'),
    ),
    "transition_owned completed": (
        _cancel_requested,
        lambda s, c: s.transition_owned(
            "run", OWNER, "completed", '{"step":2}', TransitionGuard("present")
        ),
    ),
    "transition_owned suspended over a steal": (
        _stolen,
        lambda s, c: s.transition_owned("run", OWNER, "suspended"),
    ),
    "steal": (
        _stale,
        lambda s, c: s.steal(
            "run", s.get("run"), OTHER, 40_000, LivenessEvidence(OWNER, 40_000, "lease-expired")
        ),
    ),
    "request_cancel": (_pending, lambda s, c: s.request_cancel("run", 7)),
    "request_cancel_lineage": (_pending, lambda s, c: s.request_cancel_lineage("round", 7)),
    "acknowledge_cancel": (_cancel_requested, lambda s, c: s.acknowledge_cancel("run", OWNER, 8)),
}

NO_WAIT = RetryPolicy(max_attempts=4, budget_ms=5000, base_delay_ms=0, max_delay_ms=0)


@pytest.fixture(params=["memory-sql", "memory-local", "file-sql"])
def configuration(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def build(
    configuration: str, tmp_path: Path
) -> Iterator[Callable[[str], tuple[SqliteRunStore, ManualClock]]]:
    where, strategy = configuration.split("-")
    opened: list[SqliteRunStore] = []

    def make(scenario: str) -> tuple[SqliteRunStore, ManualClock]:
        clock = ManualClock(0)
        folder = tmp_path / f"s{len(opened)}"
        folder.mkdir()
        store = open_store(where, clock, folder, STRATEGIES[strategy]())
        store._retry_policy = NO_WAIT
        opened.append(store)
        SCENARIOS[scenario][0](store, clock)
        return store, clock

    yield make
    for store in opened:
        store.close()


def _expected(scenario: str) -> Any:
    """The model's answer for the scenario (the oracle)."""
    clock = ManualClock(0)
    model = ModelRunStore(clock=clock)
    setup, call = SCENARIOS[scenario]
    setup(model, clock)
    return call(model, clock)


def _fails_cleanly(store: SqliteRunStore, clock: ManualClock, scenario: str, fault: Fault) -> bool:
    """Run the scenario's call with ``fault`` armed. True if the fault fired
    (and then the call failed and changed nothing); False if the call never
    reached the fault's point (and then it answered the model's outcome)."""
    before = logical_dump(store)
    plan = FaultPlan(fault)
    store._install_faults(plan)
    failure: RunStoreError | None = None
    try:
        outcome = SCENARIOS[scenario][1](store, clock)
    except RunStoreError as error:
        failure = error
    store._install_faults(None)
    if failure is not None:
        assert plan.fired == [fault], (scenario, fault, failure)
        assert failure.code == "persistence_failed", (scenario, fault)
        assert failure.__cause__ is None
        assert logical_dump(store) == before, (scenario, fault)
        store.check_invariants()
        return True
    assert plan.fired == []
    assert plan.missed == [fault]
    assert outcome == _expected(scenario), (scenario, fault)
    store.check_invariants()
    return False


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_a_lasting_fault_at_any_statement_changes_nothing(
    build: Callable[[str], tuple[SqliteRunStore, ManualClock]], scenario: str
) -> None:
    """A fault before statement k, for every k the operation reaches, rolls it all back."""
    fired = 0
    for index in range(64):
        store, clock = build(scenario)
        if not _fails_cleanly(store, clock, scenario, Fault("statement", index)):
            break
        fired += 1
    else:
        pytest.fail("the operation never ran out of statements")
    assert fired >= 1


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_a_lasting_fault_in_any_strategy_call_changes_nothing(
    build: Callable[[str], tuple[SqliteRunStore, ManualClock]], scenario: str
) -> None:
    """A strategy failing after its k-th call (its change made) rolls back everything."""
    for index in range(16):
        store, clock = build(scenario)
        if not _fails_cleanly(store, clock, scenario, Fault("strategy", index)):
            break
    else:
        pytest.fail("the operation never ran out of strategy calls")


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_a_lasting_fault_at_commit_changes_nothing(
    build: Callable[[str], tuple[SqliteRunStore, ManualClock]], scenario: str
) -> None:
    """A commit that fails leaves the database and the strategy as they were."""
    store, clock = build(scenario)
    assert _fails_cleanly(store, clock, scenario, Fault("commit"))


@pytest.mark.parametrize("point", ["statement", "strategy", "commit"])
@pytest.mark.parametrize("scenario", ["claim_and_own", "heartbeat", "transition_owned completed"])
def test_fewer_transient_faults_than_the_budget_give_the_models_outcome(
    build: Callable[[str], tuple[SqliteRunStore, ManualClock]], scenario: str, point: Any
) -> None:
    """max_attempts - 1 transient faults are retried away: same outcome as the model."""
    store, clock = build(scenario)
    faults = [Fault(point, 0, transient=True)] * (NO_WAIT.max_attempts - 1)
    plan = FaultPlan(*faults)
    store._install_faults(plan)
    outcome = SCENARIOS[scenario][1](store, clock)
    store._install_faults(None)
    assert outcome == _expected(scenario)
    assert len(plan.fired) == NO_WAIT.max_attempts - 1
    store.check_invariants()


@pytest.mark.parametrize("point", ["statement", "strategy", "commit"])
@pytest.mark.parametrize("scenario", ["claim_and_own", "heartbeat", "transition_owned completed"])
def test_as_many_transient_faults_as_the_budget_give_the_error(
    build: Callable[[str], tuple[SqliteRunStore, ManualClock]], scenario: str, point: Any
) -> None:
    """When every attempt fails transiently the call is persistence_failed
    (database code busy) and nothing changed."""
    store, clock = build(scenario)
    before = logical_dump(store)
    plan = FaultPlan(*[Fault(point, 0, transient=True)] * NO_WAIT.max_attempts)
    store._install_faults(plan)
    with pytest.raises(RunStoreError) as caught:
        SCENARIOS[scenario][1](store, clock)
    store._install_faults(None)
    assert caught.value.code == "persistence_failed"
    assert caught.value.cause["database_code"] == "busy"
    assert caught.value.cause["attempts"] == NO_WAIT.max_attempts
    assert logical_dump(store) == before


def test_reads_take_no_faults(build: Callable[[str], tuple[SqliteRunStore, ManualClock]]) -> None:
    """get, state and the claim_and_own pre-check leave the plan untouched."""
    store, _clock = build("heartbeat")
    plan = FaultPlan(Fault("statement", 0))
    store._install_faults(plan)
    store.get("run")
    store.lineage("run")
    store.state()
    store.ownership_facts("run")
    assert store.claim_and_own("run", store.get("run"), OTHER, 0) is not None
    assert plan.unused == [Fault("statement", 0)]


def test_the_fault_api_refuses_nonsense() -> None:
    """Faults and plans are checked when built."""
    with pytest.raises(ValueError, match="fault point"):
        Fault("nowhere")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="index"):
        Fault("statement", -1)
    with pytest.raises(TypeError):
        FaultPlan("statement")  # type: ignore[arg-type]
