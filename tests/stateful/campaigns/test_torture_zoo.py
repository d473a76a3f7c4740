"""The torture bites: each concurrency bug of the zoo (``tests/zoo/_races.py``)
fails a bounded torture run of CI's budget, on SQLite and on PostgreSQL (a
throwaway server the torture restarts now and then), with a violation file
that checks as a violation again; a bug only the revision count shows fails
on that count; the shipped stores and the controls, correct stores that work
differently, pass.

One run per store here; ``benchmarks/torture_detection.py`` runs twenty of
each and prints the detection counts (each race must be found in 19 of 20).
"""

from __future__ import annotations

import os

import pytest

from runstore.stateful import check_history, load_history
from runstore.stateful._campaigns._torture import TortureConfig, run_torture

from ...zoo._races import BUDGET, CONTROLS, COUNTS, POSTGRES_RACES, RACES

pytestmark = [pytest.mark.processes, pytest.mark.slow]


def torture(tmp_path, module: str | None, seed: int, db: str | None = None, **options):
    return run_torture(
        TortureConfig(
            db=db or str(tmp_path / "db"),
            out=str(tmp_path / "out"),
            store=None if module is None else f"tests.zoo.{module}:factory",
            seed=seed,
            quiet=True,
            **BUDGET,
            **options,
        )
    )


@pytest.fixture(scope="module")
def server():
    """A throwaway PostgreSQL server of this module's own (the torture
    restarts it, which the suite's shared server must not see)."""
    from runstore.stateful._targets._pgserver import TortureServer
    from runstore.stateful._targets._postgres import Unavailable

    try:
        found = TortureServer()
    except Unavailable as why:
        reason = f"PostgreSQL unavailable: {why}"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason} (CI=true requires the PostgreSQL tests to run)")
        pytest.skip(reason)
    yield found
    found.stop()


def postgres_torture(server, tmp_path, module: str | None, seed: int):
    url = server.create_database()
    try:
        return torture(tmp_path, module, seed, db=url, restarter=server.restart)
    finally:
        server.drop_database(url)


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


@pytest.mark.parametrize("module", POSTGRES_RACES)
def test_a_postgres_race_of_the_zoo_is_found(server, tmp_path, module: str) -> None:
    """The PostgreSQL store without its row lock, and the one whose statements
    commit one by one, fail the run."""
    result = postgres_torture(server, tmp_path, module, seed=11)
    assert result.status == 1, result.verdict.summary()
    assert result.verdict.violations or result.invariant_failure


def test_the_shipped_postgres_store_passes_with_restarts(server, tmp_path) -> None:
    """Kills, stops and server restarts (immediate: sessions cut, crash
    recovery) leave operations of unknown outcome, and the history, the final
    state and the revision count still check."""
    result = torture(
        tmp_path,
        None,
        seed=11,
        db=(url := server.create_database()),
        restarter=server.restart,
        fault_every_s=0.3,
    )
    server.drop_database(url)
    assert result.status == 0, result.verdict.summary()
    assert result.restarts >= 1
    assert result.verdict.revision is not None
    assert result.verdict.revision.result == "ok"


@pytest.mark.parametrize("module", COUNTS)
def test_a_bug_only_the_revision_count_shows_is_found(tmp_path, module: str) -> None:
    """Every run's history is linearizable; the final revision is not."""
    result = torture(tmp_path, module, seed=11)
    assert result.status == 1, result.verdict.summary()
    assert not result.verdict.violations
    assert result.verdict.revision is not None
    assert result.verdict.revision.result == "violation"
