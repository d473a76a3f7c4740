"""The zoo bites: every deliberately broken strategy or store in ``tests/zoo``
is caught under the ``ci`` profile by the check it is expected to trip.

Shrinking is skipped (detection is what is measured). Each test records how
many examples detection took as the ``examples_to_detection`` property (in
JUnit XML) and prints it (``pytest -s`` shows the table).
"""

from __future__ import annotations

import importlib

import pytest
from hypothesis import Phase, settings

from runstore.stateful import Capabilities, run_conformance
from runstore.stateful._observe import Observer, observing

from .zoo import ZOO

CI_WITHOUT_SHRINKING = settings(
    settings.get_profile("ci"),
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    report_multiple_bugs=False,
    print_blob=False,
)


def test_the_zoo_holds_at_least_twelve_bugs():
    """Twelve or more single, realistic bugs, each in its own module."""
    assert len(ZOO) >= 12
    assert len(set(ZOO)) == len(ZOO)


@pytest.mark.parametrize("name", ZOO)
def test_zoo_bug_is_caught_by_its_expected_check(name: str, record_property) -> None:
    """The broken strategy or store fails ``run_conformance`` with the check its
    module names, within the ``ci`` example budget."""
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
        run_conformance(settings=CI_WITHOUT_SHRINKING, **arguments)
    fired = type(caught.value).__name__
    record_property("examples_to_detection", observer.first_failure_example)
    record_property("check", fired)
    print(f"zoo {name}: {fired} after {observer.first_failure_example} examples")
    assert fired == module.EXPECTED_CHECK
