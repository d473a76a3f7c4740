"""The torture bites: each concurrency bug of the zoo (``tests/zoo/_races.py``)
fails a bounded torture run of CI's budget, with a violation file that checks
as a violation again; the controls, correct stores that work differently,
pass.

One run per store here; ``benchmarks/torture_detection.py`` runs twenty of
each and prints the detection counts (each race must be found in 19 of 20).
"""

from __future__ import annotations

import pytest

from runstore.stateful import check_history, load_history
from runstore.stateful._torture import TortureConfig, run_torture

from .zoo._races import BUDGET, CONTROLS, RACES

pytestmark = [pytest.mark.processes, pytest.mark.slow]


def torture(tmp_path, module: str, seed: int):
    return run_torture(
        TortureConfig(
            db=str(tmp_path / "db"),
            out=str(tmp_path / "out"),
            store=f"tests.zoo.{module}:factory",
            seed=seed,
            quiet=True,
            **BUDGET,
        )
    )


@pytest.mark.parametrize("module", RACES)
def test_a_race_of_the_zoo_is_found(tmp_path, module: str) -> None:
    """The run fails with a violation; its minimal sub-history is written and
    is itself a violation."""
    result = torture(tmp_path, module, seed=11)
    assert result.status == 1, result.verdict.summary()
    assert result.verdict.violations
    texts = [path for path in result.written if path.suffix == ".txt"]
    histories = [path for path in result.written if path.suffix == ".jsonl"]
    assert texts
    assert "Not linearizable" in texts[0].read_text()
    assert check_history(load_history([histories[0]])).status == "violation"


@pytest.mark.parametrize("module", CONTROLS)
def test_a_correct_store_that_works_differently_passes(tmp_path, module: str) -> None:
    """A deferred BEGIN that replays its whole body is slower, not wrong."""
    result = torture(tmp_path, module, seed=11)
    assert result.status == 0, result.verdict.summary()
