"""``state()`` builds every row, lease and fact with the cyclic collector paused.

At 10^5 runs and more the collector's full passes, which walk every object
alive, cost more than the decoding (issue 28, growth): ``state()`` pauses it
while the snapshot is built and leaves it as it found it.
"""

from __future__ import annotations

import gc
from typing import Any

import runstore
from runstore import ManualClock, OwnerId, RunSnapshot

OWNER = OwnerId("host-a", 1, "a1")


def _store() -> Any:
    store = runstore.open(":memory:", clock=ManualClock(1_000))
    for number in range(2_000):
        store.create(f"run-{number:05d}", '{"n": 1}')
    for number in range(0, 2_000, 2):
        store.claim_and_own(f"run-{number:05d}", RunSnapshot("pending", None, None), OWNER, 1_000)
    return store


def test_no_collection_runs_while_the_snapshot_is_built() -> None:
    passes: list[str] = []

    def seen(phase: str, _info: dict[str, int]) -> None:
        if phase == "start":
            passes.append(phase)

    with _store() as store:
        assert gc.isenabled()
        gc.callbacks.append(seen)
        try:
            state = store.state()
        finally:
            gc.callbacks.remove(seen)
        assert len(state.rows) == 2_000
        assert len(state.leases) == 1_000
        assert passes == []
        assert gc.isenabled()


def test_a_collector_turned_off_stays_off() -> None:
    with _store() as store:
        gc.disable()
        try:
            store.state()
            assert not gc.isenabled()
        finally:
            gc.enable()
