from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runstore import ManualClock, RunStore
from runstore.stateful._profiles import load_profile

from . import _postgres
from ._stores import STORE_FACTORIES

load_profile()


@pytest.fixture(autouse=True)
def _drop_test_databases() -> Iterator[None]:
    """Drop the PostgreSQL databases a test created, after everything else."""
    yield
    _postgres.drop_created()


@pytest.fixture
def clock() -> ManualClock:
    """The store clock, starting at 0; tests move it, never sleep."""
    return ManualClock(0)


@pytest.fixture(params=sorted(STORE_FACTORIES))
def store(request: pytest.FixtureRequest, clock: ManualClock, tmp_path: Path) -> Iterator[RunStore]:
    """Every store under test (the model and each adapter configuration)."""
    opened = STORE_FACTORIES[request.param](clock, tmp_path)
    try:
        yield opened
        # Whatever a test did, the store must still be internally consistent.
        opened.check_invariants()
    finally:
        opened.close()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Say what the PostgreSQL tests cost: databases cloned and how fast."""
    clones, waits = _postgres.clone_seconds()
    if clones:

        def median_ms(values: list[float]) -> float:
            return sorted(values)[len(values) // 2] * 1000

        terminalreporter.write_line(
            f"PostgreSQL: {len(clones)} databases cloned from the template "
            f"(median {median_ms(clones):.1f} ms, max {max(clones) * 1000:.1f} ms); "
            f"tests waited a median {median_ms(waits):.1f} ms, "
            f"{sum(waits):.1f} s in all"
        )
