"""Worker processes replay a store rebuilt by replay, a level at a time (issue 25).

The walk of a store the explorer cannot copy is handed, a level at a time, to
worker processes that import the factory by name and build stores of their
own. Here the thresholds are lowered so the tiny scope uses them (a worker's
start costs more than the tiny scope's walk): the workers' walk gives the
same verdict and counts as a walk in one process, and a planted bug's
shortest program, a read-back finding included, is the same both ways. The
default run keeps the quickest (a second or two of a worker's start); the
rest are a campaign (``-m campaign``).
"""

from __future__ import annotations

import importlib

import pytest

from runstore.stateful import Exploration, explore
from runstore.stateful._explore import _workers

THIRD_PARTY = "tests.stateful.explore.third_party:factory"


@pytest.fixture
def workers_everywhere(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_workers, "LEVEL_AT_LEAST", 1)
    monkeypatch.setattr(_workers, "IN_ONE_PROCESS", ())


def _counts(result: Exploration) -> tuple[object, ...]:
    return (result.exhausted, result.states, result.transitions, result.depth, result.rebuilds)


@pytest.mark.campaign
def test_workers_walk_a_store_not_ours_as_one_process_does(workers_everywhere: None) -> None:
    """A SQLite file store behind a class of its own: the same counts, clean both ways."""
    alone = explore(target=THIRD_PARTY, scope="tiny", depth_k=0, workers=1)
    shared = explore(target=THIRD_PARTY, scope="tiny", depth_k=0, workers=2)
    assert alone.clean
    assert shared.clean
    assert _counts(shared) == _counts(alone)
    assert shared.restores == alone.restores == 0


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("revision_lag_after_heartbeat_many", marks=pytest.mark.campaign),
        "lineage_cancel_skips_root",
        pytest.param("settle_drops_new_state", marks=pytest.mark.campaign),
    ],
)
def test_workers_find_the_same_shortest_program(workers_everywhere: None, name: str) -> None:
    """A planted bug (one found by reading a write back, one at the start, one a move in) is
    found as the same program and check with workers as without."""
    module = importlib.import_module(f"tests.zoo.{name}")
    runs = [
        explore(
            store_factory=module.factory,
            capabilities=module.capabilities,
            scope="tiny",
            depth_k=0,
            restore=False,
            workers=count,
        )
        for count in (1, 2)
    ]
    alone, shared = (run.failure for run in runs)
    assert alone is not None
    assert shared is not None
    assert (shared.check, shared.program) == (alone.check, alone.program)
