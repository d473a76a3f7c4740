"""Store clock readings: floored when fractional, refused when not a time.

The store reads its clock for ``created_at_ms``, the activation stamp, the
settle stamp and the skew bound. Upstream floors a fractional reading (a clock
at 10.5 ms stamps 10); any other reading that is not a non-negative safe
integer is refused with ``invalid_run`` naming the clock, never a raw
``TypeError`` or a misleading ``constraint`` error, and nothing is written.
The ``now_ms`` arguments stay exact ints.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runstore import OwnerId, RunSnapshot, RunStoreError

from .._stores import STORE_FACTORIES

OWNER = OwnerId("host-a", 1, "n1")
PENDING = RunSnapshot("pending", None, None)


class FixedClock:
    """A clock whose reading a test sets to anything, valid or not."""

    def __init__(self, reading: Any) -> None:
        self.reading = reading

    def now_ms(self) -> Any:
        return self.reading

    def sleep_until(self, deadline_ms: int) -> None:
        raise AssertionError("the store never sleeps")

    async def asleep_until(self, deadline_ms: int) -> None:
        raise AssertionError("the store never sleeps")


@pytest.fixture(params=sorted(STORE_FACTORIES))
def make(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    opened: list[Any] = []

    def build(clock: FixedClock) -> Any:
        store = STORE_FACTORIES[request.param](clock, tmp_path)  # type: ignore[arg-type]
        opened.append(store)
        return store

    yield build
    for store in opened:
        store.close()


def test_a_fractional_reading_is_floored(make: Any) -> None:
    """A clock at 10.5 ms stamps 10 on create, activation and settlement."""
    clock = FixedClock(10.5)
    store = make(clock)
    store.create("r", "{}")
    assert store.get("r").created_at_ms == 10
    clock.reading = 20.999
    assert type(store.claim("r", PENDING, OWNER, 20)).__name__ == "Claimed"
    assert store.activate("r", OWNER, 20, PENDING).__class__.__name__ == "Activated"
    row = store.get("r")
    assert (row.started_at_ms, row.heartbeat_at_ms) == (20, 20)
    clock.reading = 31.25
    store.transition_owned("r", OWNER, "completed")
    assert store.get("r").finished_at_ms == 31


@pytest.mark.parametrize(
    "reading",
    [None, -1, -0.5, float("nan"), float("inf"), 2**53, 1.7e18, True, "10", 10 + 0j],
    ids=repr,
)
def test_an_inadmissible_reading_is_invalid_run_naming_the_clock(make: Any, reading: Any) -> None:
    """create, a lease operation and a settlement refuse the reading with
    invalid_run (field ``clock``) and write nothing."""
    clock = FixedClock(1_000)
    store = make(clock)
    store.create("r", "{}")
    before = store.revision()
    clock.reading = reading
    calls = [
        lambda: store.create("s", "{}"),
        lambda: store.claim("r", PENDING, OWNER, 1_000),
        lambda: store.heartbeat("r", OWNER, 1_000),
        lambda: store.transition_owned("r", OWNER, "completed"),
    ]
    for call in calls:
        with pytest.raises(RunStoreError) as caught:
            call()
        assert caught.value.code == "invalid_run"
        assert caught.value.cause["field"] == "clock"
        assert "clock" in str(caught.value)
        assert caught.value.__cause__ is None
        assert caught.value.__suppress_context__
    clock.reading = 1_000
    assert store.revision() == before


def test_now_ms_arguments_stay_exact_ints(make: Any) -> None:
    """A float ``now_ms`` is refused even where the clock's own float is floored."""
    store = make(FixedClock(1_000.5))
    store.create("r", "{}")
    with pytest.raises(RunStoreError) as caught:
        store.claim("r", PENDING, OWNER, 1_000.0)
    assert (caught.value.code, caught.value.cause["field"]) == ("invalid_run", "now_ms")
