"""``supervise_many``: one owner's many runs kept alive with one ``heartbeat_many`` per pulse.

Driven on a ``ManualClock`` (``fleet.wait_idle()`` after each move), over a
real SQLite store:

- each pulse is one ``heartbeat_many`` naming every run kept, and no single
  ``heartbeat``; ``Updated`` re-arms each run's budget from the time sent;
- a run another owner took ends with ``LeaseLost(reason="fence_lost")`` for
  that run only: the others stay held and are still renewed; a run the owner
  settled itself ends quietly;
- writes that keep failing are tolerated for ``HEARTBEAT_WRITE_TOLERANCE_MS``,
  then each run gets its own ``reconfirm``: renewed or ``lapsed``;
- ``hold(run_id)`` raises ``LeaseLost`` in the thread doing that run's work and
  from its exit, and leaves other holders alone; ``on_lost`` hears every loss;
- runs can be added and discarded while the fleet runs; a store without
  ``heartbeat_many`` is refused at the call.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

import runstore
from runstore import (
    Activated,
    LivenessEvidence,
    ManualClock,
    OwnerId,
    RunSnapshot,
    RunStoreError,
    Updated,
)
from runstore.ownership import (
    HEARTBEAT_INTERVAL_MS,
    HEARTBEAT_WRITE_TOLERANCE_MS,
    LeaseLost,
    supervise_many,
)

A = OwnerId("host-a", 1, "a1")
B = OwnerId("host-b", 2, "b1")
PENDING = RunSnapshot("pending", None, None)
START = 100_000


class Recording:
    """A store that records the renewal calls and can be made to fail."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.failing = False
        self.reconfirm_fails = False

    def heartbeat_many(self, owner: OwnerId, run_ids: list[str], now_ms: int) -> Any:
        self.calls.append(("heartbeat_many", (owner, tuple(run_ids), now_ms)))
        if self.failing:
            raise runstore.PersistenceFailedError("heartbeat_many", "disk on fire")
        return self.inner.heartbeat_many(owner, run_ids, now_ms)

    def take(self, run_id: str, clock: ManualClock) -> None:
        """Another owner takes ``run_id``, as a takeover after a pause would:
        the run's row is made stale behind the owner's back, then stolen."""
        inner = self.inner
        stale = clock.now_ms() - 30_001
        inner._write(
            "test",
            lambda tx: [
                tx.connection.execute(statement, (stale, run_id))
                for statement in (
                    "UPDATE flows_runs SET heartbeat_at_ms = ?1 WHERE run_id = ?2",
                    "UPDATE flows_consensus_leases SET heartbeat_at_ms = ?1 WHERE run_id = ?2",
                )
            ],
        )
        now = clock.now_ms()
        evidence = LivenessEvidence(A, now, "cross-host-unreachable-stale")
        row = inner.get(run_id)
        assert inner.claim_and_own(run_id, row.snapshot, B, now, evidence) == Activated()

    def heartbeat(self, *args: Any) -> Any:
        self.calls.append(("heartbeat", args))
        return self.inner.heartbeat(*args)

    def reconfirm(self, *args: Any) -> Any:
        self.calls.append(("reconfirm", args))
        if self.reconfirm_fails:
            raise runstore.PersistenceFailedError("reconfirm", "disk on fire")
        return self.inner.reconfirm(*args)

    def ownership_facts(self, run_id: str) -> Any:
        return self.inner.ownership_facts(run_id)

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START)


@pytest.fixture
def store(clock: ManualClock) -> Any:
    with runstore.open(":memory:", clock=clock) as opened:
        for run_id in ("r1", "r2", "r3"):
            opened.create(run_id, "{}")
            assert opened.claim_and_own(run_id, PENDING, A, START) == Activated()
        yield Recording(opened)


def tick(clock: ManualClock, fleet: Any, ms: int = HEARTBEAT_INTERVAL_MS) -> None:
    clock.advance(ms)
    assert fleet.wait_idle()


def test_one_pulse_renews_every_run_with_one_call(store: Any, clock: ManualClock) -> None:
    with supervise_many(store, A, ["r1", "r2", "r3"], clock=clock) as fleet:
        assert fleet.wait_idle()
        tick(clock, fleet)
        assert store.calls == [("heartbeat_many", (A, ("r1", "r2", "r3"), START + 1000))]
        tick(clock, fleet)
        assert store.names() == ["heartbeat_many", "heartbeat_many"]
        for run_id in ("r1", "r2", "r3"):
            assert fleet[run_id].last_confirmed_ms == START + 2000
            assert store.inner.get(run_id).heartbeat_at_ms == START + 2000
            assert not fleet[run_id].lost.is_set()


def test_a_stolen_run_is_lost_alone(store: Any, clock: ManualClock) -> None:
    lost: list[LeaseLost] = []
    with supervise_many(store, A, ["r1", "r2"], clock=clock, on_lost=lost.append) as fleet:
        assert fleet.wait_idle()
        tick(clock, fleet)
        store.take("r2", clock)
        tick(clock, fleet)
        assert fleet["r2"].lost.is_set()
        with pytest.raises(LeaseLost) as caught:
            fleet["r2"].check()
        assert (caught.value.run_id, caught.value.reason) == ("r2", "fence_lost")
        assert [error.run_id for error in lost] == ["r2"]
        assert not fleet["r1"].lost.is_set()
        store.calls.clear()
        tick(clock, fleet)
        assert store.calls[0][1][1] == ("r1",)
        assert store.inner.get("r1").heartbeat_at_ms == clock.now_ms()


def test_a_run_the_owner_settled_ends_quietly(store: Any, clock: ManualClock) -> None:
    with supervise_many(store, A, ["r1", "r2"], clock=clock) as fleet:
        assert fleet.wait_idle()
        store.inner.transition_owned("r1", A, "completed")
        tick(clock, fleet)
        assert "r1" not in fleet
        assert fleet.run_ids == ["r2"]
        tick(clock, fleet)
        assert store.calls[-1][1][1] == ("r2",)


def test_failing_writes_lapse_each_run_after_the_tolerance(store: Any, clock: ManualClock) -> None:
    with supervise_many(store, A, ["r1", "r2"], clock=clock) as fleet:
        assert fleet.wait_idle()
        store.failing = True
        store.reconfirm_fails = True
        for _ in range(HEARTBEAT_WRITE_TOLERANCE_MS // HEARTBEAT_INTERVAL_MS - 1):
            tick(clock, fleet)
        assert not fleet["r1"].lost.is_set()
        assert "reconfirm" not in store.names()
        tick(clock, fleet)
        assert store.names().count("reconfirm") == 2
        for run_id in ("r1", "r2"):
            assert fleet[run_id].error is not None
            assert fleet[run_id].error.reason == "lapsed"


def test_a_reconfirm_that_renews_keeps_the_run(store: Any, clock: ManualClock) -> None:
    with supervise_many(store, A, ["r1"], clock=clock) as fleet:
        assert fleet.wait_idle()
        store.failing = True
        for _ in range(HEARTBEAT_WRITE_TOLERANCE_MS // HEARTBEAT_INTERVAL_MS):
            tick(clock, fleet)
        assert store.names().count("reconfirm") == 1
        assert not fleet["r1"].lost.is_set()
        assert fleet["r1"].last_confirmed_ms == clock.now_ms()
        store.failing = False
        tick(clock, fleet)
        assert store.calls[-1][0] == "heartbeat_many"


def test_hold_interrupts_only_the_thread_of_the_lost_run(store: Any, clock: ManualClock) -> None:
    started = threading.Barrier(3)
    results: dict[str, str] = {}

    def work(fleet: Any, run_id: str) -> None:
        try:
            with fleet.hold(run_id) as lease:
                started.wait()
                while not stop.is_set():
                    lease.lost.wait(0.001)
            results[run_id] = "finished"
        except LeaseLost as error:
            results[run_id] = f"lost:{error.reason}"

    stop = threading.Event()
    with supervise_many(store, A, clock=clock) as fleet:
        workers = [threading.Thread(target=work, args=(fleet, rid)) for rid in ("r1", "r2")]
        for worker in workers:
            worker.start()
        started.wait()
        assert fleet.wait_idle()
        store.take("r1", clock)
        tick(clock, fleet)
        workers[0].join(timeout=10)
        assert results == {"r1": "lost:fence_lost"}
        stop.set()
        workers[1].join(timeout=10)
    assert results == {"r1": "lost:fence_lost", "r2": "finished"}


def test_runs_come_and_go_while_the_fleet_runs(store: Any, clock: ManualClock) -> None:
    with supervise_many(store, A, clock=clock) as fleet:
        assert fleet.wait_idle()
        tick(clock, fleet)
        assert store.calls == []  # nothing to keep: no call
        fleet.add("r3")
        fleet.add("r1")
        tick(clock, fleet)
        assert store.calls[-1][1][1] == ("r1", "r3")
        fleet.discard("r3")
        tick(clock, fleet)
        assert store.calls[-1][1][1] == ("r1",)
        assert store.inner.heartbeat("r1", A, clock.now_ms()) == Updated()


def test_a_store_without_heartbeat_many_is_refused() -> None:
    class Old:
        def heartbeat(self, *_args: Any) -> Any: ...
        def reconfirm(self, *_args: Any) -> Any: ...
        def ownership_facts(self, *_args: Any) -> Any: ...

    with pytest.raises(RunStoreError) as caught:
        supervise_many(Old(), A, ["r"], clock=ManualClock(0))
    assert caught.value.code == "invalid_run"
    assert caught.value.cause["missing"] == ["heartbeat_many"]
