"""Supervision drives an asyncio store natively (issue 29): ``asupervise`` and the fleet's
``async with`` face await an ``AsyncRunStore``'s coroutines on the loop, with no worker thread,
the same bounds and the same ``LeaseLost`` rules; the thread faces refuse such a store.

Every test runs a real loop (``asyncio.run``) over a real SQLite file opened with
``runstore.aopen`` and a ``ManualClock``; ``wait_idle`` (in a thread) says when the supervisor has
reacted to a clock move. The store's own synchronous stores refuse any call made on the loop's
thread, so a test that passes here also shows that no store call ran there. A write is held in
flight by a strategy that waits inside the transaction (``Gate``), never by sleeping.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

import runstore
from runstore import (
    Activated,
    AsyncRunStore,
    InvalidRunError,
    LivenessEvidence,
    ManualClock,
    OwnerId,
)
from runstore.consensus import SqlConsensus
from runstore.ownership import (
    HEARTBEAT_INTERVAL_MS,
    HEARTBEAT_WRITE_TOLERANCE_MS,
    LeaseLost,
    _core,
    asupervise,
    supervise,
    supervise_many,
)
from runstore.sqlite import Fault, FaultPlan

A = OwnerId("host-a", 1, "a1")
B = OwnerId("host-b", 2, "b1")
START = 100_000
WAIT_S = 20.0
#: The names of the threads a supervisor runs blocking store calls in.
WORKER_THREADS = ("runstore-heartbeat", "runstore-fleet")


def supervisor_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith(WORKER_THREADS)]


class Gate(SqlConsensus):
    """``SqlConsensus`` whose heartbeat, once armed, waits for ``release``
    inside the store's write transaction: a write held in flight."""

    def __init__(self) -> None:
        super().__init__()
        self.armed = False
        self.entered = threading.Event()
        self.release = threading.Event()

    def heartbeat(self, tx: Any, run_id: str, owner: OwnerId, now_ms: int) -> Any:
        if self.armed:
            self.entered.set()
            self.release.wait(60)
        return super().heartbeat(tx, run_id, owner, now_ms)


def run(main: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(main())  # type: ignore[arg-type]


async def owned(store: AsyncRunStore, run_id: str, owner: OwnerId = A) -> None:
    await store.create(run_id, "{}")
    row = await store.get(run_id)
    assert await store.claim_and_own(run_id, row, owner, store.clock.now_ms()) == Activated()


async def idle(lease: Any) -> None:
    """Wait until the supervisor (a ``Supervision`` or a fleet) has reacted."""
    assert await asyncio.to_thread(lease.wait_idle, WAIT_S)


async def step(lease: Any, clock: ManualClock, ms: int = HEARTBEAT_INTERVAL_MS) -> None:
    clock.advance(ms)
    await idle(lease)


def take_over(path: Path, clock: ManualClock, run_id: str) -> None:
    """Another owner takes ``run_id`` as a takeover after a pause would: its row is made
    stale behind the owner's back (raw SQL, another connection), then taken with evidence."""
    stale = clock.now_ms() - 30_001
    with runstore.open(path, clock=clock) as other:
        other._write(
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
        row = other.get(run_id)
        assert other.claim_and_own(run_id, row.snapshot, B, now, evidence) == Activated()


def failing_writes(store: AsyncRunStore) -> FaultPlan:
    """Every write of ``store`` fails (an I/O error) from now on."""
    plan = FaultPlan(*[Fault("statement", 0)] * 1000)
    for sync in store.sync_stores:
        sync._install_faults(plan)
    return plan


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START)


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "runs.db"


# -- asupervise ------------------------------------------------------------------------------


def test_asupervise_keeps_the_lease_of_an_async_store_with_no_worker_thread(
    path: Path, clock: ManualClock
) -> None:
    """Each pulse is the store's coroutine, awaited on the loop: the row's heartbeat moves
    with the clock, and no supervisor thread exists while it does."""

    async def main() -> None:
        async with runstore.aopen(path, clock=clock) as store:
            await owned(store, "r")
            async with asupervise(store, "r", A, clock=clock) as lease:
                await idle(lease)
                for _ in range(3):
                    await step(lease, clock)
                    assert supervisor_threads() == []
                assert lease.last_confirmed_ms == START + 3 * HEARTBEAT_INTERVAL_MS
                assert (await store.get("r")).heartbeat_at_ms == lease.last_confirmed_ms
            assert not lease.lost.is_set()

    run(main)


def test_the_thread_check_sees_a_supervisor_that_runs_calls_in_threads(
    path: Path, clock: ManualClock
) -> None:
    """The planted bug for the check above: a store whose operations are plain functions
    (they hand each call to the loop and block for it) is supervised through worker
    threads, and ``supervisor_threads`` sees them."""

    class Blocking:
        def __init__(self, inner: AsyncRunStore, loop: asyncio.AbstractEventLoop) -> None:
            self.inner, self.loop = inner, loop

        def _call(self, name: str, *args: Any) -> Any:
            coro = getattr(self.inner, name)(*args)
            return asyncio.run_coroutine_threadsafe(coro, self.loop).result(WAIT_S)

        def heartbeat(self, *args: Any) -> Any:
            return self._call("heartbeat", *args)

        def reconfirm(self, *args: Any) -> Any:
            return self._call("reconfirm", *args)

        def ownership_facts(self, *args: Any) -> Any:
            return self._call("ownership_facts", *args)

        def acknowledge_cancel(self, *args: Any) -> Any:
            return self._call("acknowledge_cancel", *args)

    async def main() -> None:
        async with runstore.aopen(path, clock=clock) as store:
            await owned(store, "r")
            planted = Blocking(store, asyncio.get_running_loop())
            async with asupervise(planted, "r", A, clock=clock) as lease:
                await idle(lease)
                await step(lease, clock)
                assert supervisor_threads() != []
                assert lease.last_confirmed_ms == START + HEARTBEAT_INTERVAL_MS

    run(main)


def test_asupervise_loses_an_async_store_run_taken_over(path: Path, clock: ManualClock) -> None:
    """The first pulse after another owner took the run answers ``FenceLost``: the block's
    task is cancelled and the ``async with`` raises ``LeaseLost(reason="fence_lost")``."""

    async def main() -> None:
        async with runstore.aopen(path, clock=clock) as store:
            await owned(store, "r")
            lapses: list[int] = []

            async def owner() -> None:
                async with asupervise(store, "r", A, clock=clock, on_lapse=lapses.append) as lease:
                    await idle(lease)
                    await step(lease, clock)
                    await asyncio.to_thread(take_over, path, clock, "r")
                    clock.advance(HEARTBEAT_INTERVAL_MS)
                    await asyncio.sleep(WAIT_S)
                    pytest.fail("the block was never interrupted")

            with pytest.raises(LeaseLost) as lost:
                await owner()
            assert lost.value.reason == "fence_lost"
            assert lost.value.outcome == runstore.FenceLost()
            assert lapses == []
            assert (await store.get("r")).owner == B

    run(main)


def test_asupervise_lapses_when_the_async_stores_writes_fail(
    path: Path, clock: ManualClock
) -> None:
    """Heartbeats that fail are tolerated for the write tolerance; then the one reconfirm
    fails too and the lease lapses: ``on_lapse`` once, ``LeaseLost(reason="lapsed")``."""

    async def main() -> None:
        async with runstore.aopen(path, clock=clock) as store:
            await owned(store, "r")
            lapses: list[int] = []
            plans: list[FaultPlan] = []

            async def owner() -> None:
                async with asupervise(store, "r", A, clock=clock, on_lapse=lapses.append) as lease:
                    await idle(lease)
                    plans.append(failing_writes(store))
                    steps = HEARTBEAT_WRITE_TOLERANCE_MS // HEARTBEAT_INTERVAL_MS
                    for _ in range(steps - 1):
                        await step(lease, clock)
                        assert not lease.lost.is_set()
                    assert supervisor_threads() == []
                    clock.advance(HEARTBEAT_INTERVAL_MS)
                    await asyncio.sleep(WAIT_S)
                    pytest.fail("the block was never interrupted")

            with pytest.raises(LeaseLost) as lost:
                await owner()
            assert lost.value.reason == "lapsed"
            assert lapses == [HEARTBEAT_WRITE_TOLERANCE_MS]
            assert plans[0].fired  # the writes did fail, in the store

    run(main)


def _lapse_with_a_write_held(
    path: Path, clock: ManualClock, patience_s: float
) -> tuple[bool, bool]:
    """Hold the first pulse's heartbeat inside its transaction (grace: a minute), let the
    lease's budget run out, wait up to ``patience_s`` for the block to end, and report (was
    it interrupted with ``LeaseLost`` while the write was still held, was the held write
    still in flight then). The write is released afterwards either way."""
    gate = Gate()
    seen: list[bool] = []

    async def main() -> None:
        async with runstore.aopen(path, clock=clock, consensus=gate, cancel_grace_s=60) as store:
            await owned(store, "r")
            budget_spent = asyncio.Event()

            async def owner() -> None:
                async with asupervise(store, "r", A, clock=clock) as lease:
                    await idle(lease)
                    gate.armed = True
                    clock.advance(HEARTBEAT_INTERVAL_MS)  # the pulse's write is held
                    assert await asyncio.to_thread(gate.entered.wait, WAIT_S)
                    # The budget runs out: the deadline's reconfirm queues behind the held
                    # write, bounded by one interval on the clock.
                    clock.set(START + HEARTBEAT_WRITE_TOLERANCE_MS)
                    assert await asyncio.to_thread(clock.wait_for_sleepers, 1, WAIT_S)
                    clock.advance(HEARTBEAT_INTERVAL_MS)
                    budget_spent.set()
                    await asyncio.sleep(WAIT_S)
                    pytest.fail("the block was never interrupted")

            task = asyncio.ensure_future(owner())
            waiting = asyncio.ensure_future(budget_spent.wait())
            await asyncio.wait((task, waiting), return_when=asyncio.FIRST_COMPLETED)
            waiting.cancel()
            assert budget_spent.is_set(), task.exception()
            await asyncio.wait((task,), timeout=patience_s)
            seen.append(
                task.done()
                and not task.cancelled()
                and isinstance(task.exception(), LeaseLost)
                and not gate.release.is_set()
            )
            seen.append(any(not call.done() for call in _core._detached))
            gate.release.set()
            await asyncio.wait((task,))
            if not task.cancelled():
                task.exception()

    run(main)
    return seen[0], seen[1]


def test_a_lapse_is_not_held_back_by_the_grace_of_a_write_in_flight(
    path: Path, clock: ManualClock
) -> None:
    """A write that outlives the lease's budget is cancelled and not waited for: the
    block gets ``LeaseLost`` while the write is still held in its transaction (the store
    settles it later by its own cancellation rules), not a ``cancel_grace_s`` later."""
    interrupted_while_held, write_still_in_flight = _lapse_with_a_write_held(path, clock, WAIT_S)
    assert interrupted_while_held
    assert write_still_in_flight


def test_the_grace_check_catches_a_supervisor_that_awaits_its_calls_in_its_own_task(
    path: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The planted bug for the test above: a supervisor awaiting each coroutine call in its
    own task waits, when it stops, for the cancelled write's grace; the block is not
    interrupted while the write is held."""

    async def in_own_task(
        self: Any, fn: Any, args: tuple[Any, ...], *, bound: int | None, clock: Any
    ) -> Any:
        if bound is None:
            return await fn(*args)
        work = asyncio.ensure_future(fn(*args))
        timer = asyncio.ensure_future(clock.asleep_until(bound))
        await asyncio.wait((work, timer), return_when=asyncio.FIRST_COMPLETED)
        timer.cancel()
        if work.done():
            return work.result()
        work.cancel()
        raise _core._TimedOut

    monkeypatch.setattr(_core._AsyncCalls, "call", in_own_task)
    interrupted_while_held, _ = _lapse_with_a_write_held(path, clock, patience_s=1.0)
    assert not interrupted_while_held


def test_supervise_refuses_an_async_store(path: Path, clock: ManualClock) -> None:
    """The thread face cannot drive coroutines: ``InvalidRunError`` names the store and
    points at ``asupervise``."""

    async def main() -> None:
        async with runstore.aopen(path, clock=clock) as store:
            with pytest.raises(InvalidRunError) as refused:
                supervise(store, "r", A, clock=clock)
            assert refused.value.cause["field"] == "store"
            assert "asupervise" in refused.value.cause["detail"]
            fleet = supervise_many(store, A, clock=clock)
            with pytest.raises(InvalidRunError) as refused, fleet:
                pass
            assert refused.value.cause["field"] == "store"

    run(main)


# -- the fleet's async face ------------------------------------------------------------------


def test_the_async_fleet_renews_every_run_with_one_call_and_loses_only_the_one_taken(
    path: Path, clock: ManualClock
) -> None:
    """One ``heartbeat_many`` per pulse renews every run; a run taken over cancels the task
    holding it (``ahold`` raises ``LeaseLost``), ``on_lost`` hears it, and the other runs
    are still held and renewed. No supervisor thread runs."""

    async def main() -> None:
        async with runstore.aopen(path, clock=clock) as store:
            for run_id in ("r1", "r2"):
                await owned(store, run_id)
            heard: list[str | None] = []
            async with supervise_many(
                store, A, clock=clock, on_lost=lambda e: heard.append(e.run_id)
            ) as fleet:
                ready = asyncio.Event()

                async def hold(run_id: str) -> None:
                    async with fleet.ahold(run_id):
                        if len(fleet.run_ids) == 2:
                            ready.set()
                        await asyncio.sleep(WAIT_S)
                        pytest.fail("the holder was never interrupted")

                holders = [asyncio.ensure_future(hold(r)) for r in ("r1", "r2")]
                await ready.wait()
                await idle(fleet)
                await step(fleet, clock)
                assert supervisor_threads() == []
                for run_id in ("r1", "r2"):
                    assert fleet[run_id].last_confirmed_ms == START + HEARTBEAT_INTERVAL_MS
                    assert (await store.get(run_id)).heartbeat_at_ms == START + 1000
                await asyncio.to_thread(take_over, path, clock, "r1")
                await step(fleet, clock)
                (r1_ended,), _ = await asyncio.wait(holders[:1])
                error = r1_ended.exception()
                assert isinstance(error, LeaseLost)
                assert error.reason == "fence_lost"
                assert heard == ["r1"]
                assert not holders[1].done()
                await step(fleet, clock)
                assert fleet["r2"].last_confirmed_ms == START + 3 * HEARTBEAT_INTERVAL_MS
                assert fleet.run_ids == ["r2"]
                holders[1].cancel()
                with pytest.raises(asyncio.CancelledError):
                    await holders[1]
                assert fleet.run_ids == []

    run(main)


def test_the_async_fleet_lapses_every_run_when_writes_fail(path: Path, clock: ManualClock) -> None:
    """Failing ``heartbeat_many`` calls are tolerated for the write tolerance; then each
    run's own reconfirm fails and each holder ends with ``LeaseLost(reason="lapsed")``."""

    async def main() -> None:
        async with runstore.aopen(path, clock=clock) as store:
            for run_id in ("r1", "r2"):
                await owned(store, run_id)
            async with supervise_many(store, A, ("r1", "r2"), clock=clock) as fleet:
                holders: list[asyncio.Task[None]] = []

                async def hold(run_id: str) -> None:
                    async with fleet.ahold(run_id):
                        await asyncio.sleep(WAIT_S)
                        pytest.fail("the holder was never interrupted")

                holders = [asyncio.ensure_future(hold(r)) for r in ("r1", "r2")]
                await asyncio.sleep(0)
                await idle(fleet)
                plan = failing_writes(store)
                steps = HEARTBEAT_WRITE_TOLERANCE_MS // HEARTBEAT_INTERVAL_MS
                for _ in range(steps - 1):
                    await step(fleet, clock)
                    assert not any(h.done() for h in holders)
                await step(fleet, clock)
                done, _ = await asyncio.wait(holders)
                for holder in done:
                    error = holder.exception()
                    assert isinstance(error, LeaseLost)
                    assert error.reason == "lapsed"
                assert plan.fired

    run(main)


def test_ahold_needs_the_async_face(path: Path, clock: ManualClock) -> None:
    async def main() -> None:
        async with runstore.aopen(path, clock=clock) as store:
            await owned(store, "r")
            fleet = supervise_many(store, A, clock=clock)
            with pytest.raises(RuntimeError, match="async with"):
                async with fleet.ahold("r"):
                    pass

    run(main)


def test_asupervise_still_runs_a_blocking_store_in_threads(clock: ManualClock) -> None:
    """The synchronous path stays as it was: a blocking store's pulse runs in a thread."""

    async def main() -> None:
        with runstore.open(":memory:", clock=clock) as store:
            store.create("r", "{}")
            row = store.get("r")
            assert store.claim_and_own("r", row, A, START) == Activated()
            async with asupervise(store, "r", A, clock=clock) as lease:
                await idle(lease)
                await step(lease, clock)
                assert store.get("r").heartbeat_at_ms == START + HEARTBEAT_INTERVAL_MS
                assert lease.last_confirmed_ms == START + HEARTBEAT_INTERVAL_MS
                assert supervisor_threads() != []

    run(main)
