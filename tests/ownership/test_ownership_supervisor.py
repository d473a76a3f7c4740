"""The heartbeat supervisor's behaviour, on a scripted store double (both faces).

Timing facts against the real stores live in test_ownership_timing.py; this
file pins what the supervisor does with each kind of answer, how the work is
interrupted, and how the two faces stop. Nothing sleeps for lease timing: the
tests advance a ManualClock and call ``lease.wait_idle()`` to know the
supervisor has finished reacting (where a test cares how many waits are on the
clock, it counts them with ``clock.wait_for_sleepers``: two while idle, the
pulse loop and the deadline).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from runstore import (
    FenceLost,
    InvalidRunError,
    ManualClock,
    NotFound,
    OwnerId,
    OwnershipFact,
    PersistenceFailedError,
    Updated,
)
from runstore.ownership import LeaseLost, Supervision, asupervise, supervise

OWNER = OwnerId("host-a", 101, "owner-a")
RUN = "run-1"
IDLE = 2  # sleepers of an idle supervisor: the pulse loop and the deadline

STALL = object()


class ScriptedStore:
    """A store double: ``heartbeat`` and ``reconfirm`` answer what the test sets.

    An answer is an outcome value, an exception instance (raised), or ``STALL``
    (block until ``release`` is set or the store is interrupted).
    """

    def __init__(self) -> None:
        self.heartbeat_answer: object = Updated()
        self.reconfirm_answer: object = Updated()
        self.facts: list[OwnershipFact] = []
        self.cancel_intent = False
        self.calls: list[tuple[str, int]] = []
        self.release = threading.Event()
        self.gates: dict[str, threading.Event] = {}  # a gate per operation, if set
        self.interrupts = 0
        self._cond = threading.Condition()

    def _answer(self, name: str, answer: object, now_ms: int) -> Any:
        with self._cond:
            self.calls.append((name, now_ms))
            self._cond.notify_all()
        if answer is STALL:
            self.gates.get(name, self.release).wait(10)
            if self.interrupts:
                raise PersistenceFailedError(name, "interrupted")
            return Updated()
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def heartbeat(self, run_id: str, owner: OwnerId, now_ms: int) -> Any:
        return self._answer("heartbeat", self.heartbeat_answer, now_ms)

    def reconfirm(self, run_id: str, owner: OwnerId, now_ms: int) -> Any:
        return self._answer("reconfirm", self.reconfirm_answer, now_ms)

    def ownership_facts(self, run_id: str) -> list[OwnershipFact]:
        return list(self.facts)

    def acknowledge_cancel(self, run_id: str, owner: OwnerId, now_ms: int) -> bool:
        with self._cond:
            self.calls.append(("acknowledge_cancel", now_ms))
            self._cond.notify_all()
        return self.cancel_intent

    def interrupt(self) -> None:
        self.interrupts += 1
        self.release.set()

    def named(self, name: str) -> list[int]:
        with self._cond:
            return [now for called, now in self.calls if called == name]

    def wait_for_calls(self, name: str, count: int, timeout_s: float = 5.0) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: len(self.named(name)) >= count, timeout_s)


def failure() -> PersistenceFailedError:
    return PersistenceFailedError("heartbeat", "database is locked")


def step(lease: Supervision, clock: ManualClock, ms: int) -> None:
    """Advance the clock and wait until the supervisor has reacted."""
    clock.advance(ms)
    assert lease.wait_idle()


def spin_until_interrupted(limit_s: float = 5.0) -> None:
    """Busy work (Python bytecode between short sleeps) that only an injected
    exception can end; fails the test if nothing arrives."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        time.sleep(0.001)
    pytest.fail("the work was never interrupted")


class Caught:
    """What ``expect_lost`` caught."""

    value: LeaseLost


@contextlib.contextmanager
def expect_lost(match: str | None = None) -> Iterator[Caught]:
    """The block must end with LeaseLost (optionally matching ``match``)."""
    caught = Caught()
    try:
        yield caught
    except LeaseLost as error:
        caught.value = error
    else:
        pytest.fail("the block did not end with LeaseLost")
    if match is not None:
        assert re.search(match, str(caught.value))


def released_fact(owner: OwnerId = OWNER) -> OwnershipFact:
    return OwnershipFact(RUN, "released", owner, None, 3)


@pytest.fixture
def double() -> ScriptedStore:
    return ScriptedStore()


# --- pulses ---------------------------------------------------------------------


def test_pulses_every_interval_with_the_clock_reading(
    double: ScriptedStore, clock: ManualClock
) -> None:
    """A pulse every 1 000 ms sends the clock's reading and re-arms from it."""
    with supervise(double, RUN, OWNER, clock=clock) as lease:
        assert lease.wait_idle()
        for _ in range(3):
            step(lease, clock, 1000)
        assert double.named("heartbeat") == [1000, 2000, 3000]
        assert lease.last_confirmed_ms == 3000
        assert not lease.lost.is_set()


def test_next_pulse_is_one_interval_after_the_previous(
    double: ScriptedStore, clock: ManualClock
) -> None:
    """A late pulse moves the schedule: the next one comes 1 000 ms after it."""
    with supervise(double, RUN, OWNER, clock=clock) as lease:
        assert lease.wait_idle()
        step(lease, clock, 1500)
        step(lease, clock, 999)
        assert double.named("heartbeat") == [1500]
        step(lease, clock, 1)
        assert double.named("heartbeat") == [1500, 2500]


def test_no_pulse_before_the_first_interval(double: ScriptedStore, clock: ManualClock) -> None:
    """Entering the block writes nothing; the first pulse is one interval later."""
    with supervise(double, RUN, OWNER, clock=clock) as lease:
        assert lease.wait_idle()
        step(lease, clock, 999)
        assert double.calls == []


def test_budget_starts_when_supervision_starts(double: ScriptedStore, clock: ManualClock) -> None:
    """With every write failing, the lease lapses 19 000 ms after supervision began."""
    clock.set(5000)
    double.heartbeat_answer = failure()
    double.reconfirm_answer = failure()
    lapses: list[int] = []
    with (
        expect_lost() as raised,
        supervise(double, RUN, OWNER, clock=clock, on_lapse=lapses.append) as lease,
    ):
        assert lease.wait_idle()
        step(lease, clock, 18_999 - 1)
        assert not lease.lost.is_set()
        clock.set(24_000)
        spin_until_interrupted()
    assert raised.value.reason == "lapsed"
    assert raised.value.unconfirmed_ms == 19_000
    assert lapses == [19_000]
    assert double.named("reconfirm") == [24_000]


# --- a lost fence ---------------------------------------------------------------


@pytest.mark.parametrize("answer", [FenceLost(), NotFound()])
def test_lost_fence_interrupts_the_work_at_once_without_on_lapse(
    double: ScriptedStore, clock: ManualClock, answer: object
) -> None:
    """Any answer but Updated raises LeaseLost inside the work; on_lapse is not called."""
    lapses: list[int] = []
    seen_inside: list[BaseException] = []
    with (
        expect_lost() as raised,
        supervise(double, RUN, OWNER, clock=clock, on_lapse=lapses.append) as lease,
    ):
        assert lease.wait_idle()
        double.heartbeat_answer = answer
        clock.advance(1000)
        try:
            spin_until_interrupted()
        except LeaseLost as error:
            seen_inside.append(error)
            raise
    assert seen_inside == [raised.value]
    assert raised.value.reason == "fence_lost"
    assert raised.value.outcome == answer
    assert raised.value.run_id == RUN
    assert lease.lost.is_set()
    assert lapses == []
    assert double.named("reconfirm") == []


def test_work_that_released_the_run_ends_supervision_quietly(
    double: ScriptedStore, clock: ManualClock
) -> None:
    """After the owner's own transition out of running, a FenceLost pulse is not a loss."""
    with supervise(double, RUN, OWNER, clock=clock) as lease:
        assert lease.wait_idle()
        double.facts = [
            OwnershipFact(RUN, "claimed", OWNER, 0, 1),
            OwnershipFact(RUN, "activated", OWNER, 0, 2),
            released_fact(),
        ]
        double.heartbeat_answer = FenceLost()
        clock.advance(1000)
        assert lease.wait_idle()
        assert clock.sleepers == 0  # the supervisor ended
        clock.advance(60_000)
        assert double.calls == [("heartbeat", 1000)]
    assert not lease.lost.is_set()


def test_a_steal_after_the_owners_activation_is_a_loss(
    double: ScriptedStore, clock: ManualClock
) -> None:
    """Facts where another owner took the run over are a lost fence, not a release."""
    thief = OwnerId("host-b", 9, "thief")
    double.facts = [
        OwnershipFact(RUN, "activated", OWNER, 0, 2),
        OwnershipFact(RUN, "stolen", thief, 31_000, 3),
        OwnershipFact(RUN, "activated", thief, 31_000, 4),
    ]
    double.heartbeat_answer = FenceLost()
    with expect_lost("no longer owned"), supervise(double, RUN, OWNER, clock=clock) as lease:
        assert lease.wait_idle()
        clock.advance(1000)
        spin_until_interrupted()


# --- leaving the block ----------------------------------------------------------


def test_leaving_the_block_stops_the_supervisor_without_on_lapse(
    double: ScriptedStore, clock: ManualClock
) -> None:
    """A normal exit ends the pulses; no callback runs and nothing is raised."""
    lapses: list[int] = []
    # Only this supervisor's threads are judged: another test's may still be
    # winding down in the same process.
    before = set(threading.enumerate())

    def ours() -> list[str]:
        return [
            t.name
            for t in threading.enumerate()
            if t.name.startswith("runstore-") and t not in before
        ]

    with supervise(double, RUN, OWNER, clock=clock, on_lapse=lapses.append) as lease:
        assert lease.wait_idle()
        assert ours()
        step(lease, clock, 1000)
    assert clock.sleepers == 0
    clock.advance(60_000)
    assert double.named("heartbeat") == [1000]
    assert lapses == []
    # Helper threads exit once told to; the bound is generous because a loaded
    # 2-core CI machine can delay a thread's last steps by more than a second.
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and ours():
        time.sleep(0.005)
    assert not ours(), ours()


def test_an_exception_in_the_block_propagates_and_stops_the_supervisor(
    double: ScriptedStore, clock: ManualClock
) -> None:
    """The work's own error leaves the block unchanged; the pulses stop."""

    def work() -> None:
        with supervise(double, RUN, OWNER, clock=clock) as lease:
            assert lease.wait_idle()
            raise KeyError("work failed")

    with pytest.raises(KeyError):
        work()
    assert clock.sleepers == 0


def test_leaving_during_a_failing_outage_is_not_a_lapse(
    double: ScriptedStore, clock: ManualClock
) -> None:
    """The owner leaving while writes fail propagates nothing and never calls on_lapse."""
    double.heartbeat_answer = failure()
    lapses: list[int] = []
    with supervise(double, RUN, OWNER, clock=clock, on_lapse=lapses.append) as lease:
        assert lease.wait_idle()
        step(lease, clock, 18_000)
    clock.advance(10_000)
    assert lapses == []


def test_leaving_while_a_reconfirm_is_pending_propagates_without_on_lapse(
    double: ScriptedStore, clock: ManualClock
) -> None:
    """Cancelling the owner during the expiry procedure skips on_lapse."""
    double.heartbeat_answer = failure()
    double.reconfirm_answer = STALL
    lapses: list[int] = []
    with supervise(double, RUN, OWNER, clock=clock, on_lapse=lapses.append) as lease:
        assert lease.wait_idle()
        clock.advance(19_000)
        assert double.wait_for_calls("reconfirm", 1)
    double.release.set()
    clock.advance(5_000)
    assert lapses == []


def test_a_supervisor_is_entered_once(double: ScriptedStore, clock: ManualClock) -> None:
    """Re-entering the same supervisor is a programming error."""
    supervisor = supervise(double, RUN, OWNER, clock=clock)
    with supervisor:
        pass
    with pytest.raises(RuntimeError):
        supervisor.__enter__()


@pytest.mark.parametrize(
    ("run_id", "owner"),
    [("", OWNER), ("r\x00", OWNER), (RUN, None), (RUN, OwnerId("h", -1, "n"))],
)
def test_malformed_arguments_are_refused_at_once(
    double: ScriptedStore, clock: ManualClock, run_id: str, owner: Any
) -> None:
    """supervise admits run_id and owner before any pulse: invalid_run, not a slow lapse."""
    with pytest.raises(InvalidRunError):
        supervise(double, run_id, owner, clock=clock)
    with pytest.raises(InvalidRunError):
        asupervise(double, run_id, owner, clock=clock)


# --- interrupting a thread ---------------------------------------------------------


def test_cooperative_mode_sets_lost_and_raises_on_exit(
    double: ScriptedStore, clock: ManualClock
) -> None:
    """interrupt_thread=False injects nothing: lost is set, check() raises, exit raises."""
    double.heartbeat_answer = FenceLost()
    with (
        expect_lost() as raised,
        supervise(double, RUN, OWNER, clock=clock, interrupt_thread=False) as lease,
    ):
        assert lease.wait_idle()
        clock.advance(1000)
        assert lease.lost.wait(5)
        with pytest.raises(LeaseLost) as checked:
            lease.check()
        time.sleep(0.01)  # nothing arrives asynchronously
    assert checked.value is raised.value
    assert lease.error is raised.value


def test_check_does_nothing_while_the_lease_holds(
    double: ScriptedStore, clock: ManualClock
) -> None:
    """check() is silent until the lease is lost."""
    with supervise(double, RUN, OWNER, clock=clock) as lease:
        assert lease.wait_idle()
        step(lease, clock, 1000)
        lease.check()
        assert lease.error is None


def test_work_that_swallows_the_interruption_still_ends_with_lease_lost(
    double: ScriptedStore, clock: ManualClock
) -> None:
    """Catching the injected LeaseLost inside the block does not hide the loss."""
    double.heartbeat_answer = FenceLost()
    with expect_lost(), supervise(double, RUN, OWNER, clock=clock) as lease:
        assert lease.wait_idle()
        clock.advance(1000)
        with contextlib.suppress(LeaseLost):
            spin_until_interrupted()


def test_the_work_error_after_a_loss_is_chained_under_lease_lost(
    double: ScriptedStore, clock: ManualClock
) -> None:
    """A block that fails with its own error after the loss ends with LeaseLost from it."""
    double.heartbeat_answer = FenceLost()
    with (
        expect_lost() as raised,
        supervise(double, RUN, OWNER, clock=clock, interrupt_thread=False) as lease,
    ):
        assert lease.wait_idle()
        clock.advance(1000)
        assert lease.lost.wait(5)
        raise ValueError("the write was refused")
    assert isinstance(raised.value.__cause__, ValueError)


def test_an_interruption_never_escapes_the_block(clock: ManualClock) -> None:
    """Losses racing the block's exit surface inside the with statement or not at all."""
    for attempt in range(40):
        double = ScriptedStore()
        double.heartbeat_answer = FenceLost()
        try:
            with supervise(double, RUN, OWNER, clock=clock) as lease:
                assert lease.wait_idle()
                racer = threading.Thread(target=clock.advance, args=(1000,))
                racer.start()
                for _ in range(attempt * 50):
                    pass
        except LeaseLost:
            pass
        racer.join()
        # A stray asynchronous exception would land in this loop.
        for _ in range(20_000):
            pass
        time.sleep(0.002)
        for _ in range(20_000):
            pass


# --- write failures, stalls and logging ------------------------------------------


def test_one_warning_per_outage_then_one_lapse_warning(
    double: ScriptedStore, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Failures warn once per outage, a success ends it, the lapse warns once more."""
    caplog.set_level(logging.WARNING, logger="runstore.ownership")
    with expect_lost(), supervise(double, RUN, OWNER, clock=clock) as lease:
        assert lease.wait_idle()
        double.heartbeat_answer = failure()
        for _ in range(3):
            step(lease, clock, 1000)
        double.heartbeat_answer = Updated()
        step(lease, clock, 1000)  # 4000 confirmed: the outage is over
        double.heartbeat_answer = failure()
        double.reconfirm_answer = failure()
        for _ in range(18):
            step(lease, clock, 1000)
        clock.advance(1000)  # 23 000 = 4 000 + 19 000
        spin_until_interrupted()
    messages = [r.getMessage() for r in caplog.records if r.name == "runstore.ownership"]
    assert [m.split(" (")[0] for m in messages] == [
        "run heartbeat write failed",
        "run heartbeat write failed",
        "run lease lapsed; interrupting owned work",
    ]
    failed = [r for r in caplog.records if r.getMessage().startswith("run heartbeat")]
    assert all(r.run_id == RUN and r.error_code == "persistence_failed" for r in failed)  # type: ignore[attr-defined]
    assert caplog.records[-1].unconfirmed_ms == 19_000  # type: ignore[attr-defined]


def test_warnings_carry_the_code_never_the_error_text(
    double: ScriptedStore, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A driver message (which may quote state) never reaches the log."""
    caplog.set_level(logging.DEBUG, logger="runstore.ownership")
    double.heartbeat_answer = RuntimeError('{"api_key": "sk-secret"}')
    with supervise(double, RUN, OWNER, clock=clock) as lease:
        assert lease.wait_idle()
        step(lease, clock, 1000)
    assert [r.getMessage() for r in caplog.records] == [
        "run heartbeat write failed (run_id=run-1, code=RuntimeError)"
    ]
    assert all(r.exc_info is None for r in caplog.records)


def test_a_write_that_never_returns_is_bounded_and_interrupted(
    double: ScriptedStore, clock: ManualClock
) -> None:
    """A stalled heartbeat cannot hold the lease: at the budget the store is
    interrupted, reconfirm (stalled too) times out, and the lease lapses."""
    lapses: list[int] = []
    with (
        expect_lost() as raised,
        supervise(double, RUN, OWNER, clock=clock, on_lapse=lapses.append) as lease,
    ):
        assert lease.wait_idle()
        double.heartbeat_answer = STALL
        double.reconfirm_answer = STALL
        clock.advance(1000)
        assert double.wait_for_calls("heartbeat", 1)
        assert clock.wait_for_sleepers(1)  # only the deadline is waiting
        clock.set(19_000)
        assert double.wait_for_calls("reconfirm", 1)
        assert clock.wait_for_sleepers(1)  # the reconfirm's one-interval bound
        clock.set(19_999)
        time.sleep(0.01)
        assert lapses == []
        clock.set(20_000)
        spin_until_interrupted()
    assert raised.value.reason == "lapsed"
    assert lapses == [19_000]
    assert double.interrupts == 1


def test_a_store_without_interrupt_is_simply_abandoned(clock: ManualClock) -> None:
    """A stalled call on a store that cannot be interrupted is no longer waited for."""
    double = ScriptedStore()
    double.interrupt = None  # type: ignore[assignment,method-assign]
    double.heartbeat_answer = STALL
    double.reconfirm_answer = failure()
    with expect_lost(), supervise(double, RUN, OWNER, clock=clock) as lease:
        assert lease.wait_idle()
        clock.advance(1000)
        assert double.wait_for_calls("heartbeat", 1)
        clock.set(19_000)
        spin_until_interrupted()
    double.release.set()


def test_a_crashed_supervisor_interrupts_the_work(
    double: ScriptedStore, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    """If the supervisor itself dies, nobody keeps the lease, so the work stops."""

    class Defect(BaseException):
        pass

    double.heartbeat_answer = Defect()
    with expect_lost("supervisor"), supervise(double, RUN, OWNER, clock=clock) as lease:
        assert lease.wait_idle()
        clock.advance(1000)
        spin_until_interrupted()
    assert any(r.levelno == logging.ERROR for r in caplog.records)


# --- cancellation intent -------------------------------------------------------------


def test_cancel_intent_fires_once_and_is_acknowledged(
    double: ScriptedStore, clock: ManualClock
) -> None:
    """on_cancel_requested runs once when a pulse finds intent; the checks then stop."""
    fired = threading.Event()
    count: list[int] = []

    def on_cancel() -> None:
        count.append(1)
        fired.set()

    with supervise(double, RUN, OWNER, clock=clock, on_cancel_requested=on_cancel) as lease:
        assert lease.wait_idle()
        step(lease, clock, 1000)
        assert not lease.cancel_requested.is_set()
        double.cancel_intent = True
        step(lease, clock, 1000)
        assert fired.wait(5)
        for _ in range(3):
            step(lease, clock, 1000)
        assert lease.cancel_requested.is_set()
    assert count == [1]
    assert double.named("acknowledge_cancel") == [1000, 2000]


def test_cancel_intent_is_not_watched_without_a_callback(
    double: ScriptedStore, clock: ManualClock
) -> None:
    """Without on_cancel_requested a pulse is one heartbeat and nothing else."""
    double.cancel_intent = True
    with supervise(double, RUN, OWNER, clock=clock) as lease:
        assert lease.wait_idle()
        step(lease, clock, 1000)
    assert double.named("acknowledge_cancel") == []
    assert not lease.cancel_requested.is_set()


# --- the asyncio face -----------------------------------------------------------------


async def parked(clock: ManualClock, count: int = IDLE) -> None:
    assert await asyncio.to_thread(clock.wait_for_sleepers, count)


async def astep(clock: ManualClock, ms: int) -> None:
    clock.advance(ms)
    await parked(clock)


def run(main: Callable[[], Any]) -> Any:
    return asyncio.run(main())


def test_async_pulses_every_interval(double: ScriptedStore, clock: ManualClock) -> None:
    """The asyncio face pulses on the same schedule."""

    async def main() -> None:
        async with asupervise(double, RUN, OWNER, clock=clock) as lease:
            await parked(clock)
            for _ in range(3):
                await astep(clock, 1000)
            assert lease.last_confirmed_ms == 3000

    run(main)
    assert double.named("heartbeat") == [1000, 2000, 3000]


def test_async_lost_fence_cancels_the_block_and_raises_lease_lost(
    double: ScriptedStore, clock: ManualClock
) -> None:
    """The block's task sees CancelledError; the async with raises LeaseLost."""
    inside: list[str] = []

    async def main() -> None:
        with expect_lost() as raised:
            async with asupervise(double, RUN, OWNER, clock=clock):
                await parked(clock)
                double.heartbeat_answer = FenceLost()
                clock.advance(1000)
                try:
                    await asyncio.sleep(10)
                except asyncio.CancelledError:
                    inside.append("cancelled")
                    raise
        assert raised.value.reason == "fence_lost"
        task = asyncio.current_task()
        assert task is not None
        assert task.cancelling() == 0

    run(main)
    assert inside == ["cancelled"]


def test_async_external_cancellation_propagates_without_on_lapse(
    double: ScriptedStore, clock: ManualClock
) -> None:
    """Cancelling the owner's task is a CancelledError, not a lapse."""
    lapses: list[int] = []

    async def main() -> None:
        async def owner() -> None:
            async with asupervise(double, RUN, OWNER, clock=clock, on_lapse=lapses.append):
                await asyncio.sleep(10)

        task = asyncio.create_task(owner())
        await parked(clock)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert clock.sleepers == 0

    run(main)
    assert lapses == []


def test_async_timeout_around_the_block_still_works(
    double: ScriptedStore, clock: ManualClock
) -> None:
    """asyncio.timeout's cancellation is its own, not turned into LeaseLost."""

    async def main() -> None:
        async def owner() -> None:
            async with asyncio.timeout(0.05), asupervise(double, RUN, OWNER, clock=clock):
                await asyncio.sleep(10)

        with pytest.raises(TimeoutError):
            await owner()

    run(main)


def test_async_store_calls_never_block_the_loop(double: ScriptedStore, clock: ManualClock) -> None:
    """While a heartbeat write is stalled, other coroutines keep running."""

    async def main() -> int:
        ticks = 0
        async with asupervise(double, RUN, OWNER, clock=clock):
            await parked(clock)
            double.heartbeat_answer = STALL
            clock.advance(1000)
            await asyncio.to_thread(double.wait_for_calls, "heartbeat", 1)
            for _ in range(20):
                await asyncio.sleep(0.001)
                ticks += 1
            double.release.set()
        return ticks

    assert run(main) == 20


def test_async_lapse_after_failing_writes_calls_on_lapse_once(
    double: ScriptedStore, clock: ManualClock
) -> None:
    """The asyncio face lapses at the budget, with on_lapse as a coroutine."""
    lapses: list[int] = []

    async def on_lapse(unconfirmed_ms: int) -> None:
        lapses.append(unconfirmed_ms)

    async def main() -> None:
        double.heartbeat_answer = failure()
        double.reconfirm_answer = failure()
        with expect_lost() as raised:
            async with asupervise(double, RUN, OWNER, clock=clock, on_lapse=on_lapse) as lease:
                await parked(clock)
                clock.set(18_999)
                await parked(clock)
                assert not lease.lost.is_set()
                clock.set(19_000)
                await asyncio.sleep(10)
        assert raised.value.unconfirmed_ms == 19_000

    run(main)
    assert lapses == [19_000]


def test_async_reconfirm_receipt_may_be_a_coroutine(
    double: ScriptedStore, clock: ManualClock
) -> None:
    """A coroutine on_reconfirm is awaited on the loop with the unconfirmed time."""
    receipts: list[int] = []

    async def on_reconfirm(unconfirmed_ms: int) -> None:
        await asyncio.sleep(0)
        receipts.append(unconfirmed_ms)

    async def main() -> None:
        double.heartbeat_answer = failure()
        async with asupervise(double, RUN, OWNER, clock=clock, on_reconfirm=on_reconfirm) as lease:
            await parked(clock)
            clock.set(19_000)
            await parked(clock)
            assert lease.last_confirmed_ms == 19_000

    run(main)
    assert receipts == [19_000]


def test_async_work_that_released_the_run_ends_quietly(
    double: ScriptedStore, clock: ManualClock
) -> None:
    """The asyncio face also treats the owner's own release as the end, not a loss."""

    async def main() -> None:
        async with asupervise(double, RUN, OWNER, clock=clock) as lease:
            await parked(clock)
            double.facts = [released_fact()]
            double.heartbeat_answer = FenceLost()
            clock.advance(1000)
            for _ in range(200):
                if clock.sleepers == 0:
                    break
                await asyncio.sleep(0.005)
            assert clock.sleepers == 0
        assert not lease.lost.is_set()

    run(main)


def test_async_cancel_intent_callback_runs_once(double: ScriptedStore, clock: ManualClock) -> None:
    """on_cancel_requested may be a coroutine; it runs once."""
    fired: list[int] = []

    async def on_cancel() -> None:
        fired.append(1)

    async def main() -> None:
        double.cancel_intent = True
        async with asupervise(
            double, RUN, OWNER, clock=clock, on_cancel_requested=on_cancel
        ) as lease:
            await parked(clock)
            for _ in range(3):
                await astep(clock, 1000)
            for _ in range(100):
                if fired:
                    break
                await asyncio.sleep(0.005)
            assert lease.cancel_requested.is_set()

    run(main)
    assert fired == [1]


def test_wait_idle_reports_a_supervisor_still_busy(
    double: ScriptedStore, clock: ManualClock
) -> None:
    """wait_idle is False while a pulse is stuck in its write, True once it returns
    and when supervision has ended."""
    with supervise(double, RUN, OWNER, clock=clock) as lease:
        assert lease.wait_idle()
        double.heartbeat_answer = STALL
        clock.advance(1000)
        assert double.wait_for_calls("heartbeat", 1)
        assert not lease.wait_idle(0.05)
        double.release.set()
        assert lease.wait_idle()
        assert lease.last_confirmed_ms == 1000
    assert lease.wait_idle(0.01)  # ended: nothing left to wait for


def test_a_pulse_landing_during_a_failed_reconfirm_keeps_the_lease(
    double: ScriptedStore, clock: ManualClock
) -> None:
    """A heartbeat sent at 18 500 that returns while the deadline's reconfirm is
    pending renews the lease from 18 500: the reconfirm timing out is no lapse."""
    lapses: list[int] = []
    double.gates["heartbeat"] = threading.Event()
    with supervise(double, RUN, OWNER, clock=clock, on_lapse=lapses.append) as lease:
        assert lease.wait_idle()
        double.heartbeat_answer = STALL
        double.reconfirm_answer = STALL  # never released: it times out at 20 000
        clock.set(18_500)
        assert double.wait_for_calls("heartbeat", 1)
        clock.set(19_000)
        assert double.wait_for_calls("reconfirm", 1)
        double.heartbeat_answer = Updated()
        double.gates["heartbeat"].set()  # the 18 500 pulse lands now
        # Parked again: the pulse loop (next at 20 000) and the reconfirm's bound.
        assert clock.wait_for_sleepers(2)
        assert lease.last_confirmed_ms == 18_500
        clock.set(20_000)
        assert lease.wait_idle()
        assert lease.last_confirmed_ms == 20_000
        assert not lease.lost.is_set()
    double.release.set()
    assert lapses == []
    assert double.named("heartbeat") == [18_500, 20_000]
