"""The attempt zoo bites: every deliberately broken attempt store in
``tests/zoo/attempt_*.py`` is caught under the attempt machine's default
budget (``run_conformance``'s), over the in-memory adapter, with the check it
is expected to trip.

Shrinking is skipped (detection is what is measured). Each test records how
many examples detection took as the ``examples_to_detection`` property (in
JUnit XML) and prints it (``pytest -s`` shows the table).
"""

from __future__ import annotations

import importlib

import pytest
from hypothesis.stateful import run_state_machine_as_test

from runstore.stateful import attempt_comparison_for
from runstore.stateful._base._observe import Observer, observing
from runstore.stateful._campaigns._budget import default_settings
from runstore.stateful._targets._builtin import BUILTIN_TARGETS

#: The broken attempt stores, one module each.
ATTEMPT_ZOO = (
    "attempt_patch_unfenced",
    "attempt_heartbeat_overwrites",
    "attempt_finish_rewrites",
    "attempt_upsert_any_state",
    "attempt_cap_counts_characters",
)


def test_the_attempt_zoo_holds_at_least_three_bugs():
    """Three or more single, realistic attempt bugs, each in its own module."""
    assert len(ATTEMPT_ZOO) >= 3
    assert len(set(ATTEMPT_ZOO)) == len(ATTEMPT_ZOO)


@pytest.mark.parametrize("name", ATTEMPT_ZOO)
def test_attempt_zoo_bug_is_caught_by_its_expected_check(name: str, record_property) -> None:
    """The broken attempt store fails the attempt machine with the check its
    module names, within the attempt machine's default budget."""
    module = importlib.import_module(f"tests.zoo.{name}")
    assert module.KIND == "attempts"
    target = BUILTIN_TARGETS["sqlite-sql"]
    assert target.store_factory is not None
    machine = attempt_comparison_for(
        target.store_factory,
        module.capabilities,
        name=name,
        attempt_store=module.attempt_store,
    )
    observer = Observer()
    with observing(observer), pytest.raises(AssertionError) as caught:
        run_state_machine_as_test(machine, settings=default_settings(machine, shrink=False))
    fired = type(caught.value).__name__
    record_property("examples_to_detection", observer.first_failure_example)
    record_property("check", fired)
    print(f"attempt zoo {name}: {fired} after {observer.first_failure_example} examples")
    assert fired == module.EXPECTED_CHECK
