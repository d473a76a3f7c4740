"""The strategy machine first checks that the strategy under test is a
``runstore.consensus.Consensus`` the way callers check it, with
``isinstance`` (``StrategyShapeViolation``)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from runstore.consensus import SqlConsensus
from runstore.consensus import _types as consensus_types
from runstore.stateful import StrategyShapeViolation, conformance_machines


def _first_example(factory: Any) -> None:
    machine = conformance_machines(consensus_factory=factory)[0]
    run_state_machine_as_test(
        machine, settings=settings(max_examples=1, stateful_step_count=2, database=None)
    )


class WithoutLease(SqlConsensus):
    lease = None  # type: ignore[assignment]


def test_a_strategy_missing_a_method_is_refused() -> None:
    with pytest.raises(StrategyShapeViolation, match="does not satisfy"):
        _first_example(WithoutLease)


def test_a_protocol_that_cannot_be_checked_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """``Consensus`` without ``@runtime_checkable``: isinstance raises."""

    class Plain(consensus_types.Protocol):  # type: ignore[misc]
        def lease(self, tx: Any, run_id: str) -> Any: ...

    import runstore.stateful._machines._consensus as machine_module

    monkeypatch.setattr(machine_module, "Consensus", Plain)
    with pytest.raises(StrategyShapeViolation, match="raised"):
        _first_example(SqlConsensus)


def test_the_shipped_strategy_passes_the_check() -> None:
    _first_example(SqlConsensus)
