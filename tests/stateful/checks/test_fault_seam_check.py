"""The machines decide a faulted write's expected outcome from the faults the
store's seam says fired, so they also judge that account: each armed fault
fired, missed or unused, exactly once (``FaultSeamViolation``). Each test
plants a bug in the seam for the duration of the test."""

from __future__ import annotations

from typing import Any

import pytest

from runstore._sql import _faults
from runstore.sqlite import Fault, FaultPlan
from runstore.stateful import FaultSeamViolation
from runstore.stateful._checks._faults import FAULTS, fault_plan, fired_faults

from ..._sqlite import run_in_memory_store_machine


@pytest.mark.parametrize("name", FAULTS)
def test_an_honest_account_passes(name: str) -> None:
    plan = fault_plan(name)
    assert fired_faults(plan, name) == []
    taken = plan._take()
    assert taken is not None
    taken.finish()
    assert fired_faults(plan, name) == []
    assert plan.missed == [taken.fault]


def test_a_fault_counted_twice_is_refused() -> None:
    plan = FaultPlan(Fault("commit"))
    plan.fired.append(Fault("commit"))
    plan.missed.append(Fault("commit"))
    with pytest.raises(FaultSeamViolation, match="armed"):
        fired_faults(plan, "commit")


def test_a_fault_that_is_not_armed_is_refused() -> None:
    plan = fault_plan("statement-1")
    assert plan._take() is not None
    plan.fired.append(Fault("statement", 2))
    with pytest.raises(FaultSeamViolation):
        fired_faults(plan, "statement-1")


def test_a_seam_that_forgets_a_fault_fired_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fired fault not marked done: when its attempt ends it is recorded as
    missed as well, so the account has it twice."""
    fire = _faults.ArmedFault._fire

    def fire_and_forget(self: Any) -> Any:
        injected = fire(self)
        self.done = False  # the bug
        return injected

    monkeypatch.setattr(_faults.ArmedFault, "_fire", fire_and_forget)
    with pytest.raises(FaultSeamViolation, match="missed"):
        run_in_memory_store_machine()
