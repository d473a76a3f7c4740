"""The checker on histories generated from the reference model.

Simulated clients (torture workers) run against ``ModelRunStore``, each call
taking effect at a point of a virtual timeline inside its recorded interval,
so every generated history is linearizable by construction; one changed
answer usually makes it a violation. Small histories are also decided by
enumerating every order (``brute_force``), and the checker must agree with
that oracle on every one, with and without the change, pending calls
included.
"""

from __future__ import annotations

import pytest

from runstore.stateful import check_history
from runstore.stateful._histories._generate import brute_force, generate_history, inject_violation


@pytest.mark.parametrize("seed", range(6))
def test_generated_histories_are_linearizable(seed: int) -> None:
    """Overlapping calls of four clients over lineages of runs, some left
    pending by a dying client (effect or not): always linearizable."""
    history = generate_history(seed, 1500, pending=0.01)
    assert any(op.status == "pending" for op in history)
    verdict = check_history(history)
    assert verdict.ok, verdict.summary()


def test_a_long_history_of_one_run_is_linearizable() -> None:
    """Thousands of calls on one run (never settled), its fact stream growing."""
    history = generate_history(7, 3000, runs=1, settle=False, lineages=False, pending=0.002)
    verdict = check_history(history)
    assert verdict.ok, verdict.summary()
    assert max(len(p.history) for p in verdict.partitions) > 2500


@pytest.mark.parametrize("seed", range(3))
def test_a_changed_answer_in_a_sequential_history_is_always_a_violation(seed: int) -> None:
    """Without overlap there is one order only, so any changed answer breaks it."""
    history = generate_history(seed, 400, overlap_ns=0, clients=3)
    mutated, changed = inject_violation(history, seed)
    verdict = check_history(mutated)
    assert verdict.status == "violation"
    (failing,) = verdict.violations
    assert failing.minimal is not None
    assert changed in {op.id for op in failing.minimal}


def test_the_checker_agrees_with_enumeration_on_small_histories() -> None:
    """On 120 small histories (three clients, one run, pending calls) the
    checker's verdict equals the brute-force oracle's, before and after one
    answer is changed; both kinds of verdict occur."""
    verdicts = {True: 0, False: 0}
    for seed in range(120):
        history = generate_history(seed, 7, clients=3, runs=1, pending=0.1, overlap_ns=4_000)
        assert brute_force(history), seed
        assert check_history(history, shrink=False).ok, seed
        mutated, _ = inject_violation(history, seed)
        expected = brute_force(mutated)
        assert check_history(mutated, shrink=False).ok == expected, seed
        verdicts[expected] += 1
    assert verdicts[False] > 0
