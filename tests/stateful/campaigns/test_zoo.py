"""The zoo bites: every deliberately broken strategy or store in ``tests/zoo``
is caught under ``run_conformance``'s default budget (each of its machines
under its own budget) by the check it is expected to trip.

Shrinking is skipped (detection is what is measured). Each test records how
many examples detection took as the ``examples_to_detection`` property (in
JUnit XML) and prints it (``pytest -s`` shows the table).
"""

from __future__ import annotations

import importlib

import pytest
from hypothesis.stateful import run_state_machine_as_test

from runstore.stateful import Capabilities, conformance_machines
from runstore.stateful._base._observe import Observer, observing
from runstore.stateful._campaigns._budget import default_settings

from ...zoo import ZOO


def test_the_zoo_holds_at_least_twelve_bugs():
    """Twelve or more single, realistic bugs, each in its own module."""
    assert len(ZOO) >= 12
    assert len(set(ZOO)) == len(ZOO)


def _run_default_budget(machines: list) -> None:
    for machine in machines:
        run_state_machine_as_test(machine, settings=default_settings(machine, shrink=False))


@pytest.mark.parametrize("name", ZOO)
def test_zoo_bug_is_caught_by_its_expected_check(name: str, record_property) -> None:
    """The broken strategy or store fails one of ``run_conformance``'s machines
    with the check its module names, within that machine's default budget."""
    module = importlib.import_module(f"tests.zoo.{name}")
    if module.KIND == "consensus":
        arguments = {"consensus_factory": module.factory}
    else:
        arguments = {
            "store_factory": module.factory,
            "capabilities": getattr(module, "capabilities", Capabilities()),
        }
    observer = Observer()
    with observing(observer), pytest.raises(AssertionError) as caught:
        _run_default_budget(conformance_machines(**arguments))
    fired = type(caught.value).__name__
    record_property("examples_to_detection", observer.first_failure_example)
    record_property("check", fired)
    print(f"zoo {name}: {fired} after {observer.first_failure_example} examples")
    assert fired == module.EXPECTED_CHECK
