"""``runstore torture --async``: each worker process drives async stores
(``runstore.aopen``, every owner's calls tasks on the process's one event
loop), recorded and checked as the synchronous torture is.

On the shipped async store it passes, each owner's clock readings reaching the
history though the store reads its clock on a thread of its own; a race of
the zoo inside the async store fails it with a violation; and a store whose
readings never reach the history (what an async worker would record were its
clock not handed each call) never passes."""

from __future__ import annotations

import pytest

from runstore.stateful import load_history
from runstore.stateful._campaigns._torture import TortureConfig, run_torture

pytestmark = [pytest.mark.processes, pytest.mark.slow]

FACTORIES = "tests.stateful.campaigns.async_races"


def torture(tmp_path, store: str | None = None, **options):
    settings = {"workers": 2, "threads": 3, "seconds": 1.5, "seed": 7, "widen": 0.1}
    return run_torture(
        TortureConfig(
            db=str(tmp_path / "db"),
            out=str(tmp_path / "out"),
            store=None if store is None else f"{FACTORIES}:{store}",
            aio=True,
            quiet=True,
            **(settings | options),
        )
    )


def test_async_workers_pass_on_the_shipped_store_with_their_clock_readings(tmp_path):
    """Two worker processes, three owners each on async stores, kills and
    stops: linearizable, and the store's clock readings (taken on its
    connection's thread) are in the history of the calls that took them."""
    result = torture(tmp_path)
    assert result.status == 0, result.verdict.summary()
    operations = load_history(sorted(result.history_dir.glob("*.jsonl")))
    creates = [op for op in operations if op.method == "create" and op.status == "ok"]
    assert creates
    assert all(op.clock_ms for op in creates)


@pytest.mark.campaign
def test_a_race_inside_the_async_store_fails_the_torture(tmp_path):
    """The zoo's ``race_classify_before_begin`` behind ``runstore.aopen``'s
    store: a violation (found in the 1.5 s run of seed 7; the test takes 6 s)."""
    result = torture(tmp_path, "classifies_before_begin", workers=3, shrink=False)
    assert result.status == 1, result.verdict.summary()
    assert result.written


@pytest.mark.campaign
def test_readings_that_never_reach_the_history_never_pass(tmp_path):
    """A store reading a clock that records nothing: the history cannot be
    replayed, and the run is inconclusive (status 3), never passed (4 s)."""
    result = torture(tmp_path, "unrecorded_clock")
    assert result.status == 3, result.verdict.summary()
