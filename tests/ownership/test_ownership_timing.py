"""Every timing fact of heartbeat supervision, on the model and on the SQLite adapter.

Upstream §6.1's closing facts and the Ownership list of §9.2, each pinned with
a ManualClock shared by the store and the supervisor. A ``Faulty`` wrapper makes
the owner's heartbeat or reconfirm writes fail, stall or lag while everything
else (a peer's steal, the persisted row) goes to the real store. Nothing sleeps
for lease timing: the tests move the clock and wait until the supervisor is
parked (two sleepers while idle).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from runstore import (
    Activated,
    Claimed,
    FenceLost,
    HeartbeatFresh,
    LivenessEvidence,
    ManualClock,
    OwnerId,
    PersistenceFailedError,
    RunStore,
    Updated,
)
from runstore.ownership import Supervision, asupervise, supervise, takeover_evidence

from .test_ownership_supervisor import IDLE, expect_lost, spin_until_interrupted

OWNER = OwnerId("host-a", 101, "owner-a")
PEER = OwnerId("host-b", 202, "peer-b")  # another host: cross-host evidence
RUN = "timed-run"


class Faulty:
    """A real store whose ``heartbeat`` and ``reconfirm`` can be made to misbehave.

    Modes: ``"pass"`` (the real store answers), ``"fail"`` (raise
    persistence_failed without touching the store), ``"stall"`` (block until
    ``gate`` opens, then behave as ``after_stall``). Every other operation goes
    straight to the real store.
    """

    def __init__(self, inner: RunStore) -> None:
        self.inner = inner
        self.modes = {"heartbeat": "pass", "reconfirm": "pass"}
        self.after_stall = "pass"
        self.gate = threading.Event()
        self.calls: list[tuple[str, int]] = []
        self.interrupted = 0
        self._cond = threading.Condition()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def _through(self, name: str, run_id: str, owner: OwnerId, now_ms: int) -> Any:
        with self._cond:
            self.calls.append((name, now_ms))
            self._cond.notify_all()
        mode = self.modes[name]
        if mode == "stall":
            self.gate.wait(10)
            mode = self.after_stall
        if mode == "fail":
            raise PersistenceFailedError(name, "injected failure")
        return getattr(self.inner, name)(run_id, owner, now_ms)

    def heartbeat(self, run_id: str, owner: OwnerId, now_ms: int) -> Any:
        return self._through("heartbeat", run_id, owner, now_ms)

    def reconfirm(self, run_id: str, owner: OwnerId, now_ms: int) -> Any:
        return self._through("reconfirm", run_id, owner, now_ms)

    def interrupt(self) -> None:
        self.interrupted += 1

    def named(self, name: str) -> list[int]:
        with self._cond:
            return [now for called, now in self.calls if called == name]

    def wait_for_calls(self, name: str, count: int) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: len(self.named(name)) >= count, 5)


@pytest.fixture
def faulty(store: RunStore, clock: ManualClock) -> Iterator[Faulty]:
    """The owner's view of a store holding RUN, running under OWNER since the clock's now."""
    store.create(RUN, '{"step": 0}')
    assert store.claim_and_own(RUN, store.get(RUN), OWNER, clock.now_ms()) == Activated()
    wrapper = Faulty(store)
    yield wrapper
    wrapper.gate.set()


def parked(clock: ManualClock, count: int = IDLE) -> None:
    assert clock.wait_for_sleepers(count)


def idle(lease: Supervision) -> None:
    """Wait until the supervisor has reacted to the clock's last move."""
    assert lease.wait_idle()


def to(lease: Supervision, clock: ManualClock, ms: int) -> None:
    """Set the clock and wait until the supervisor is idle again."""
    clock.set(ms)
    idle(lease)


def steal(store: RunStore, clock: ManualClock, peer_now: int) -> object:
    """A peer on another host tries to steal RUN at its own reading ``peer_now``."""
    row = store.get(RUN)
    evidence = takeover_evidence(row, PEER, peer_now)
    assert evidence == LivenessEvidence(OWNER, peer_now, "cross-host-unreachable-stale")
    return store.steal(RUN, row, PEER, peer_now, evidence)


def fail_everything(faulty: Faulty) -> None:
    faulty.modes = {"heartbeat": "fail", "reconfirm": "fail"}


# --- the write tolerance ------------------------------------------------------------


@pytest.mark.parametrize("t0", [0, 7_000])
def test_failing_writes_interrupt_at_exactly_t0_plus_19000(
    faulty: Faulty, clock: ManualClock, t0: int
) -> None:
    """With every write failing from t0, the work runs at t0 + 18 999 and is
    interrupted at t0 + 19 000, with no further clock movement."""
    clock.set(t0)
    fail_everything(faulty)
    lapses: list[int] = []
    with (
        expect_lost() as raised,
        supervise(faulty, RUN, OWNER, clock=clock, on_lapse=lapses.append) as lease,
    ):
        idle(lease)
        to(lease, clock, t0 + 18_999)
        assert not lease.lost.is_set()
        assert lapses == []
        clock.set(t0 + 19_000)
        spin_until_interrupted()
    assert clock.now_ms() == t0 + 19_000
    assert raised.value.reason == "lapsed"
    assert raised.value.unconfirmed_ms == 19_000
    assert lapses == [19_000]
    assert faulty.named("reconfirm") == [t0 + 19_000]


def test_a_peer_cannot_steal_until_long_after_the_owner_stopped(
    faulty: Faulty, store: RunStore, clock: ManualClock
) -> None:
    """Owner failing from 0 stops at 19 000; a peer steal at the owner's 18 999
    (also with a +5 s clock) is HeartbeatFresh, at 30 000 still fresh, at 30 001 Claimed."""
    fail_everything(faulty)
    with expect_lost(), supervise(faulty, RUN, OWNER, clock=clock) as lease:
        idle(lease)
        to(lease, clock, 18_999)
        assert steal(store, clock, 18_999) == HeartbeatFresh()
        assert steal(store, clock, 18_999 + 5_000) == HeartbeatFresh()
        assert not lease.lost.is_set()
        clock.set(19_000)
        spin_until_interrupted()
    clock.set(30_000)
    assert steal(store, clock, 30_000) == HeartbeatFresh()
    clock.set(30_001)
    assert steal(store, clock, 30_001) == Claimed(30_001)
    assert store.get(RUN).heartbeat_at_ms == 0


def test_even_the_largest_skew_leaves_the_owner_stopped_first(
    faulty: Faulty, store: RunStore, clock: ManualClock
) -> None:
    """At the owner's last working instant a peer 10 s ahead still reads the lease fresh."""
    fail_everything(faulty)
    with expect_lost(), supervise(faulty, RUN, OWNER, clock=clock) as lease:
        idle(lease)
        to(lease, clock, 18_999)
        assert steal(store, clock, 18_999 + 10_000) == HeartbeatFresh()
        clock.set(19_000)
        spin_until_interrupted()


def test_one_successful_pulse_rearms_a_full_budget(
    faulty: Faulty, store: RunStore, clock: ManualClock
) -> None:
    """A single Updated at 10 000 moves the lapse from 19 000 to exactly 29 000."""
    fail_everything(faulty)
    lapses: list[int] = []
    with (
        expect_lost(),
        supervise(faulty, RUN, OWNER, clock=clock, on_lapse=lapses.append) as lease,
    ):
        idle(lease)
        to(lease, clock, 9_000)
        faulty.modes["heartbeat"] = "pass"
        to(lease, clock, 10_000)
        assert store.get(RUN).heartbeat_at_ms == 10_000
        assert lease.last_confirmed_ms == 10_000
        faulty.modes["heartbeat"] = "fail"
        to(lease, clock, 19_000)
        to(lease, clock, 28_999)
        assert not lease.lost.is_set()
        clock.set(29_000)
        spin_until_interrupted()
    assert lapses == [19_000]
    assert faulty.named("reconfirm") == [29_000]


def test_the_budget_is_rearmed_from_the_timestamp_sent(
    faulty: Faulty, store: RunStore, clock: ManualClock
) -> None:
    """A pulse sent at 1 000 that returns at 5 000 confirms 1 000: the lapse
    comes at 20 000, not 24 000."""
    lapses: list[int] = []
    with (
        expect_lost(),
        supervise(faulty, RUN, OWNER, clock=clock, on_lapse=lapses.append) as lease,
    ):
        idle(lease)
        faulty.modes["heartbeat"] = "stall"
        clock.set(1_000)
        assert faulty.wait_for_calls("heartbeat", 1)
        parked(clock, 1)  # the deadline only; the pulse is inside its write
        clock.set(5_000)
        faulty.modes["heartbeat"] = "fail"
        faulty.gate.set()  # the stalled write now succeeds, late
        idle(lease)
        assert lease.last_confirmed_ms == 1_000
        assert store.get(RUN).heartbeat_at_ms == 1_000
        faulty.modes["reconfirm"] = "fail"
        to(lease, clock, 19_999)
        assert not lease.lost.is_set()
        clock.set(20_000)
        spin_until_interrupted()
    assert lapses == [19_000]


# --- delayed pulses and reconfirmation --------------------------------------------------


@pytest.mark.parametrize(
    ("gap", "reconfirms"),
    [(18_999, []), (19_000, [19_000]), (20_000, [20_000])],
)
def test_a_delayed_pulse_heartbeats_or_reconfirms_at_the_budget(
    faulty: Faulty, store: RunStore, clock: ManualClock, gap: int, reconfirms: list[int]
) -> None:
    """A first pulse delayed to 18 999 is a plain heartbeat; delayed to 19 000 or
    20 000 it is one reconfirm, which renews the lease with on_reconfirm(gap)."""
    receipts: list[int] = []
    lapses: list[int] = []
    with supervise(
        faulty,
        RUN,
        OWNER,
        clock=clock,
        on_reconfirm=receipts.append,
        on_lapse=lapses.append,
    ) as lease:
        idle(lease)
        to(lease, clock, gap)
        assert not lease.lost.is_set()
        assert lease.last_confirmed_ms == gap
    assert faulty.named("reconfirm") == reconfirms
    assert receipts == reconfirms
    assert lapses == []
    assert faulty.named("heartbeat") == ([] if reconfirms else [gap])
    assert store.get(RUN).heartbeat_at_ms == gap


def test_an_untouched_lease_is_reconfirmed_again_and_again(
    faulty: Faulty, store: RunStore, clock: ManualClock
) -> None:
    """Heartbeats failing but reconfirm working: renewals at 19 000 and 38 000, work goes on."""
    faulty.modes["heartbeat"] = "fail"
    receipts: list[int] = []
    with supervise(faulty, RUN, OWNER, clock=clock, on_reconfirm=receipts.append) as lease:
        idle(lease)
        for now in range(1_000, 38_001, 1_000):
            to(lease, clock, now)
        assert not lease.lost.is_set()
    assert faulty.named("reconfirm") == [19_000, 38_000]
    assert receipts == [19_000, 19_000]
    assert store.get(RUN).heartbeat_at_ms == 38_000


def test_the_reconfirm_hook_is_optional(faulty: Faulty, clock: ManualClock) -> None:
    """Without on_reconfirm a successful reconfirmation simply continues."""
    faulty.modes["heartbeat"] = "fail"
    with supervise(faulty, RUN, OWNER, clock=clock) as lease:
        idle(lease)
        to(lease, clock, 19_000)
        assert lease.last_confirmed_ms == 19_000
        assert not lease.lost.is_set()


def test_reconfirm_is_refused_while_a_stealers_claim_is_pending(
    faulty: Faulty, store: RunStore, clock: ManualClock
) -> None:
    """A peer that only reserved the stale lease wins: reconfirm is lost and the
    owner lapses (with on_lapse), though a plain heartbeat would still pass."""
    clock.set(12_000)  # the lease was last written at 0; supervision starts late
    faulty.modes["heartbeat"] = "fail"
    lapses: list[int] = []
    with (
        expect_lost() as raised,
        supervise(faulty, RUN, OWNER, clock=clock, on_lapse=lapses.append) as lease,
    ):
        idle(lease)
        to(lease, clock, 30_000)
        clock.set(30_001)
        assert steal(store, clock, 30_001) == Claimed(30_001)
        assert store.heartbeat(RUN, OWNER, 30_001) == Updated()  # a heartbeat still passes
        clock.set(31_000)
        spin_until_interrupted()
    assert raised.value.reason == "lapsed"
    assert lapses == [19_000]
    assert faulty.named("reconfirm") == [31_000]


def test_reconfirm_is_refused_after_a_foreign_owner_took_over(
    faulty: Faulty, store: RunStore, clock: ManualClock
) -> None:
    """An activated thief makes reconfirm FenceLost: the expiry lapses."""
    clock.set(12_000)
    faulty.modes["heartbeat"] = "fail"
    lapses: list[int] = []
    with expect_lost(), supervise(faulty, RUN, OWNER, clock=clock, on_lapse=lapses.append) as lease:
        idle(lease)
        to(lease, clock, 30_000)
        clock.set(30_001)
        row = store.get(RUN)
        evidence = takeover_evidence(row, PEER, 30_001)
        assert store.claim_and_own(RUN, row, PEER, 30_001, evidence) == Activated()
        clock.set(31_000)
        spin_until_interrupted()
    assert lapses == [19_000]


def test_a_lost_fence_interrupts_at_once_without_on_lapse(
    faulty: Faulty, store: RunStore, clock: ManualClock
) -> None:
    """An owner whose clock lags 25 s behind the store (beyond the skew
    allowance) is taken over while its pulses still succeed; its next pulse
    finds the fence lost and interrupts the work at once, without on_lapse."""
    owner_clock = ManualClock(0)
    clock.set(25_000)
    lapses: list[int] = []
    with (
        expect_lost() as raised,
        supervise(faulty, RUN, OWNER, clock=owner_clock, on_lapse=lapses.append) as lease,
    ):
        idle(lease)
        to(lease, owner_clock, 1_000)
        assert store.get(RUN).heartbeat_at_ms == 1_000
        clock.set(31_001)
        row = store.get(RUN)
        assert steal(store, clock, 31_001) == Claimed(31_001)
        assert store.activate(RUN, PEER, 31_001, row) == Activated()
        assert not lease.lost.is_set()
        owner_clock.set(2_000)
        spin_until_interrupted()
    assert raised.value.reason == "fence_lost"
    assert raised.value.outcome == FenceLost()
    assert lapses == []
    assert faulty.named("reconfirm") == []
    assert faulty.named("heartbeat") == [1_000, 2_000]


def test_a_reconfirm_slower_than_one_interval_lapses(
    faulty: Faulty, store: RunStore, clock: ManualClock
) -> None:
    """Reconfirm is bounded by 1 000 ms: still pending at 20 000, the lease lapses."""
    faulty.modes = {"heartbeat": "fail", "reconfirm": "stall"}
    lapses: list[int] = []
    receipts: list[int] = []
    with (
        expect_lost(),
        supervise(
            faulty,
            RUN,
            OWNER,
            clock=clock,
            on_lapse=lapses.append,
            on_reconfirm=receipts.append,
        ) as lease,
    ):
        idle(lease)
        clock.set(19_000)
        assert faulty.wait_for_calls("reconfirm", 1)
        clock.set(19_999)
        parked(clock, 1)  # one loop holds the reconfirm's bound, the other waits its turn
        assert not lease.lost.is_set()
        clock.set(20_000)
        spin_until_interrupted()
    faulty.gate.set()  # the late reconfirm succeeds in the store; too late
    assert lapses == [19_000]
    assert receipts == []
    assert faulty.interrupted == 1


# --- the receipt (on_reconfirm) ------------------------------------------------------


def test_a_delayed_receipt_within_the_budget_is_fine(faulty: Faulty, clock: ManualClock) -> None:
    """on_reconfirm may take time, as long as it returns before stamp + 19 000."""
    faulty.modes["heartbeat"] = "fail"
    release = threading.Event()
    entered = threading.Event()

    def receipt(unconfirmed_ms: int) -> None:
        entered.set()
        release.wait(5)

    with supervise(faulty, RUN, OWNER, clock=clock, on_reconfirm=receipt) as lease:
        idle(lease)
        clock.set(19_000)
        assert entered.wait(5)
        clock.set(37_999)
        parked(clock, 1)  # only the receipt's bound waits; the other loop waits its turn
        release.set()
        idle(lease)
        to(lease, clock, 38_000)  # the next budget ends here: one more reconfirm
        assert not lease.lost.is_set()
    assert faulty.named("reconfirm") == [19_000, 38_000]


def test_a_stalled_receipt_is_bounded_by_stamp_plus_19000(
    faulty: Faulty, clock: ManualClock
) -> None:
    """A receipt that never returns lapses the lease at stamp + 19 000 exactly."""
    faulty.modes["heartbeat"] = "fail"
    entered = threading.Event()
    stuck = threading.Event()
    lapses: list[int] = []

    def receipt(unconfirmed_ms: int) -> None:
        entered.set()
        stuck.wait(10)

    with (
        expect_lost(),
        supervise(
            faulty, RUN, OWNER, clock=clock, on_reconfirm=receipt, on_lapse=lapses.append
        ) as lease,
    ):
        idle(lease)
        clock.set(19_000)
        assert entered.wait(5)
        clock.set(37_999)
        parked(clock, 1)
        assert not lease.lost.is_set()
        clock.set(38_000)
        spin_until_interrupted()
    stuck.set()
    assert lapses == [19_000]
    assert faulty.named("reconfirm") == [19_000]


@pytest.mark.parametrize("failure", [RuntimeError("receipt failed"), KeyError("defect")])
def test_a_failing_receipt_lapses_the_lease(
    faulty: Faulty, clock: ManualClock, failure: Exception
) -> None:
    """on_reconfirm raising is a lapse, with on_lapse."""
    faulty.modes["heartbeat"] = "fail"
    lapses: list[int] = []

    def receipt(unconfirmed_ms: int) -> None:
        raise failure

    with (
        expect_lost(),
        supervise(
            faulty, RUN, OWNER, clock=clock, on_reconfirm=receipt, on_lapse=lapses.append
        ) as lease,
    ):
        idle(lease)
        clock.set(19_000)
        spin_until_interrupted()
    assert lapses == [19_000]


# --- settling once -----------------------------------------------------------------------


def test_simultaneous_expiry_paths_settle_once_on_renewal(
    faulty: Faulty, clock: ManualClock
) -> None:
    """A jump past the budget wakes pulse and deadline together: one reconfirm, one receipt."""
    receipts: list[int] = []
    with supervise(faulty, RUN, OWNER, clock=clock, on_reconfirm=receipts.append) as lease:
        idle(lease)
        to(lease, clock, 25_000)
        to(lease, clock, 26_000)
    assert faulty.named("reconfirm") == [25_000]
    assert receipts == [25_000]
    assert faulty.named("heartbeat") == [26_000]


def test_simultaneous_expiry_paths_settle_once_on_lapse(
    faulty: Faulty, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Both paths overdue with failing writes: one reconfirm, one on_lapse, one lapse warning."""
    fail_everything(faulty)
    lapses: list[int] = []
    with expect_lost(), supervise(faulty, RUN, OWNER, clock=clock, on_lapse=lapses.append) as lease:
        idle(lease)
        clock.set(25_000)
        spin_until_interrupted()
    assert faulty.named("reconfirm") == [25_000]
    assert lapses == [25_000]
    lapse_logs = [r for r in caplog.records if r.getMessage().startswith("run lease lapsed")]
    assert len(lapse_logs) == 1


def test_a_late_success_after_the_lapse_changes_nothing(
    faulty: Faulty, store: RunStore, clock: ManualClock
) -> None:
    """A stalled heartbeat that succeeds after the lapse neither revives the lease
    nor calls anything twice."""
    faulty.modes = {"heartbeat": "stall", "reconfirm": "fail"}
    faulty.after_stall = "pass"
    lapses: list[int] = []
    with (
        expect_lost(),
        supervise(faulty, RUN, OWNER, clock=clock, on_lapse=lapses.append) as lease,
    ):
        idle(lease)
        clock.set(1_000)
        assert faulty.wait_for_calls("heartbeat", 1)
        clock.set(19_000)
        spin_until_interrupted()
    faulty.gate.set()
    assert lapses == [19_000]
    assert faulty.interrupted == 1
    assert lease.lost.is_set()


@pytest.mark.parametrize("after", ["never", "fail", "pass"])
def test_a_stalled_write_is_interrupted_at_the_budget(
    faulty: Faulty, clock: ManualClock, after: str
) -> None:
    """A heartbeat stuck from 1 000 (that never returns, later fails or later
    succeeds) cannot hold the lease: lapse at 19 000 and the write is interrupted."""
    faulty.modes = {"heartbeat": "stall", "reconfirm": "fail"}
    faulty.after_stall = "fail" if after == "fail" else "pass"
    lapses: list[int] = []
    with expect_lost(), supervise(faulty, RUN, OWNER, clock=clock, on_lapse=lapses.append) as lease:
        idle(lease)
        clock.set(1_000)
        assert faulty.wait_for_calls("heartbeat", 1)
        parked(clock, 1)
        clock.set(18_999)
        parked(clock, 1)
        clock.set(19_000)
        spin_until_interrupted()
    if after != "never":
        faulty.gate.set()
    assert lapses == [19_000]
    assert faulty.interrupted == 1


# --- the owner leaving ---------------------------------------------------------------------


def test_parent_cancellation_during_reconfirm_skips_on_lapse(
    faulty: Faulty, clock: ManualClock
) -> None:
    """The owner leaving while the expiry's reconfirm is pending propagates, without on_lapse."""
    faulty.modes = {"heartbeat": "fail", "reconfirm": "stall"}
    faulty.after_stall = "fail"
    lapses: list[int] = []
    with supervise(faulty, RUN, OWNER, clock=clock, on_lapse=lapses.append) as lease:
        idle(lease)
        clock.set(19_000)
        assert faulty.wait_for_calls("reconfirm", 1)
    faulty.gate.set()
    clock.set(40_000)
    assert lapses == []


def test_async_parent_cancellation_skips_on_lapse(faulty: Faulty, clock: ManualClock) -> None:
    """Cancelling the owner's task mid-outage is a CancelledError, never a lapse."""
    fail_everything(faulty)
    lapses: list[int] = []

    async def main() -> None:
        async def owner() -> None:
            async with asupervise(faulty, RUN, OWNER, clock=clock, on_lapse=lapses.append):
                await asyncio.sleep(30)

        task = asyncio.create_task(owner())
        assert await asyncio.to_thread(clock.wait_for_sleepers, IDLE)
        clock.set(18_999)
        assert await asyncio.to_thread(clock.wait_for_sleepers, IDLE)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        clock.set(19_000)

    asyncio.run(main())
    assert lapses == []


def test_async_face_lapses_at_exactly_the_budget(faulty: Faulty, clock: ManualClock) -> None:
    """The asyncio face honours the same 18 999 / 19 000 boundary on a real store."""
    fail_everything(faulty)
    lapses: list[int] = []

    async def main() -> None:
        with expect_lost() as raised:
            async with asupervise(faulty, RUN, OWNER, clock=clock, on_lapse=lapses.append) as lease:
                assert await asyncio.to_thread(clock.wait_for_sleepers, IDLE)
                clock.set(18_999)
                assert await asyncio.to_thread(clock.wait_for_sleepers, IDLE)
                assert not lease.lost.is_set()
                clock.set(19_000)
                await asyncio.sleep(10)
        assert raised.value.reason == "lapsed"

    asyncio.run(main())
    assert lapses == [19_000]


def test_settling_the_run_ends_supervision_without_lease_lost(
    store: RunStore, clock: ManualClock
) -> None:
    """The ordinary ending: the work completes the run inside the block; a pulse
    after that finds its own release and nothing is raised."""
    store.create(RUN, "{}")
    assert store.claim_and_own(RUN, store.get(RUN), OWNER, 0) == Activated()
    with supervise(store, RUN, OWNER, clock=clock) as lease:
        idle(lease)
        to(lease, clock, 1_000)
        store.transition_owned(RUN, OWNER, "completed", '{"done": true}')
        clock.set(2_000)
        wait_until(lambda: clock.sleepers == 0)
    assert not lease.lost.is_set()
    assert store.get(RUN).status == "completed"


def wait_until(condition: Callable[[], bool]) -> None:
    done = threading.Event()
    for _ in range(1000):
        if condition():
            return
        done.wait(0.005)
    pytest.fail("condition never held")
