"""A PostgreSQL store measures its clock against the server's and refuses
lease operations while the two are more than half the skew allowance apart.

Hosts whose clocks are each within ``HEARTBEAT_SKEW_ALLOWANCE_MS / 2`` of the
server's are within the allowance of each other, which is what the lease
rules assume. The offset is measured at open and again before a lease
operation once 30 s of store-clock time have passed or the clock moved
backwards; while it is too large, ``claim``, ``claim_and_own``, ``steal``,
``heartbeat`` and the other lease operations raise ``persistence_failed``
(``reason`` ``clock-skew``, the offset in the message and the cause), and
every other operation goes on. The check is on for ``SystemClock``, off for
other clocks unless ``check_clock=True``.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from runstore import (
    HEARTBEAT_SKEW_ALLOWANCE_MS,
    Activated,
    ManualClock,
    OwnerId,
    RunSnapshot,
    RunStoreError,
    SystemClock,
    Transitioned,
    Updated,
)

from .. import _postgres

postgres = pytest.importorskip("runstore.postgres")

OWNER = OwnerId("host-a", 1, "nonce-a")
PENDING = RunSnapshot("pending", None, None)
LIMIT = HEARTBEAT_SKEW_ALLOWANCE_MS // 2


class SkewedClock:
    """A wall clock of one's own, ``skew_ms`` off the real time (settable)."""

    def __init__(self, skew_ms: int) -> None:
        self.skew_ms = skew_ms

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000 + self.skew_ms

    def sleep_until(self, deadline_ms: int) -> None:
        time.sleep(max(0, deadline_ms - self.now_ms()) / 1000)

    async def asleep_until(self, deadline_ms: int) -> None:
        await asyncio.sleep(max(0, deadline_ms - self.now_ms()) / 1000)


@pytest.fixture
def url() -> str:
    return _postgres.database_url()


def test_a_system_clock_is_checked_and_a_manual_clock_is_not(url: str) -> None:
    with postgres.open(url, clock=SystemClock()) as store:
        offset = store.clock_offset_ms
        assert offset is not None
        assert abs(offset) < 1_000  # same machine
        now = store.clock.now_ms()
        store.create("r", "{}")
        assert store.claim_and_own("r", PENDING, OWNER, now) == Activated()
    with postgres.open(url, clock=ManualClock(0)) as store:
        assert store.clock_offset_ms is None
    with postgres.open(url, clock=SkewedClock(60_000)) as store:
        assert store.clock_offset_ms is None  # not a SystemClock: not checked
    with postgres.open(url, clock=SystemClock(), check_clock=False) as store:
        assert store.clock_offset_ms is None


@pytest.mark.parametrize("skew_ms", [LIMIT + 1_000, -(LIMIT + 1_000)])
def test_lease_operations_are_refused_beyond_half_the_allowance(url: str, skew_ms: int) -> None:
    clock = SkewedClock(skew_ms)
    with postgres.open(url, clock=clock, check_clock=True) as store:
        offset = store.clock_offset_ms
        assert offset is not None
        assert abs(offset - skew_ms) < 1_000
        store.create("r", "{}")  # not a lease operation
        with pytest.raises(RunStoreError) as caught:
            store.claim_and_own("r", PENDING, OWNER, clock.now_ms())
        error = caught.value
        assert error.code == "persistence_failed"
        assert error.cause["reason"] == "clock-skew"
        assert error.cause["offset_ms"] == store.clock_offset_ms
        assert error.cause["limit_ms"] == LIMIT
        way = "ahead of" if skew_ms > 0 else "behind"
        assert f"{abs(error.cause['offset_ms'])} ms {way} the database server's clock" in (
            error.message
        )
        for call in (
            lambda: store.claim("r", PENDING, OWNER, clock.now_ms()),
            lambda: store.heartbeat("r", OWNER, clock.now_ms()),
            lambda: store.reconfirm("r", OWNER, clock.now_ms()),
        ):
            with pytest.raises(RunStoreError) as again:
                call()
            assert again.value.cause["reason"] == "clock-skew"
        assert store.get("r").status == "pending"
        assert store.ownership_facts("r") == []
        store.check_invariants()


def test_within_half_the_allowance_lease_operations_work(url: str) -> None:
    clock = SkewedClock(LIMIT - 1_000)
    with postgres.open(url, clock=clock, check_clock=True) as store:
        store.create("r", "{}")
        assert store.claim_and_own("r", PENDING, OWNER, clock.now_ms()) == Activated()
        assert store.heartbeat("r", OWNER, clock.now_ms()) == Updated()


def test_a_clock_that_moves_is_measured_again(url: str) -> None:
    """Backwards, or 30 s forwards, the store measures again; while it refuses
    it measures before every lease operation, so a fixed clock is accepted at
    once; fenced writes of an owner go on all the while."""
    clock = SkewedClock(0)
    with postgres.open(url, clock=clock, check_clock=True) as store:
        store.create("r", "{}")
        assert store.claim_and_own("r", PENDING, OWNER, clock.now_ms()) == Activated()
        clock.skew_ms = -(LIMIT + 2_000)  # the host's clock is stepped back
        with pytest.raises(RunStoreError) as caught:
            store.heartbeat("r", OWNER, clock.now_ms())
        assert caught.value.cause["reason"] == "clock-skew"
        assert store.transition_owned("r", OWNER, "running", '{"step": 1}') == Transitioned()
        clock.skew_ms = 0
        assert store.heartbeat("r", OWNER, clock.now_ms()) == Updated()
        clock.skew_ms = 45_000  # stepped forward by more than the interval
        with pytest.raises(RunStoreError) as caught:
            store.heartbeat("r", OWNER, clock.now_ms())
        assert caught.value.cause["reason"] == "clock-skew"
        assert caught.value.cause["offset_ms"] > LIMIT


def test_check_clock_is_admitted(url: str) -> None:
    with pytest.raises(RunStoreError) as caught:
        postgres.open(url, clock=ManualClock(0), check_clock="yes")
    assert caught.value.code == "invalid_run"
    assert caught.value.cause["field"] == "check_clock"
