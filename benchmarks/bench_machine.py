"""How fast does the differential machine step, compared with a trivial one?

Runs ``RunStoreComparison`` (the reference model against the SQLite adapter
in memory over ``SqlConsensus``, every invariant and whole-state comparison
on) and a trivial dict-backed ``RuleBasedStateMachine`` (two dicts compared
after every step) in the same process, with the same settings, alternately,
and reports steps per second of each and their ratio (the median over rounds).
Both pay Hypothesis's own cost of drawing and running a step; the ratio says
how much the store, the model and the checks add on top.

Target (issue 4): the comparison runs at least 0.2 of the trivial machine's
steps per second.

Run: ``python benchmarks/bench_machine.py [--rounds N] [--examples N]``.
Prints the table and the ratio; never asserts (timings are not tests).
"""

from __future__ import annotations

import argparse
import statistics
import time

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from runstore.stateful import comparison_for
from runstore.stateful._base._observe import Observer, observing
from runstore.stateful._targets._builtin import BUILTIN_TARGETS, raw_writer_for

KEYS = st.sampled_from(("a", "b", "lin", "lin-2", "fork"))


class DictMachine(RuleBasedStateMachine):
    """The trivial baseline: a dict and its copy, compared after every step."""

    steps = 0

    def __init__(self) -> None:
        super().__init__()
        self.left: dict[str, int] = {}
        self.right: dict[str, int] = {}

    @rule(key=KEYS, value=st.integers(0, 9))
    def put(self, key: str, value: int) -> None:
        DictMachine.steps += 1
        self.left[key] = value
        self.right[key] = value

    @rule(key=KEYS)
    def delete(self, key: str) -> None:
        DictMachine.steps += 1
        self.left.pop(key, None)
        self.right.pop(key, None)

    @rule(key=KEYS)
    def read(self, key: str) -> None:
        DictMachine.steps += 1
        assert self.left.get(key) == self.right.get(key)

    @invariant()
    def agree(self) -> None:
        assert self.left == self.right


def _settings(examples: int) -> settings:
    return settings(
        max_examples=examples,
        derandomize=False,
        database=None,
        deadline=None,
        stateful_step_count=50,
        suppress_health_check=list(HealthCheck),
    )


def measure_comparison(examples: int) -> float:
    """Steps per second of ``RunStoreComparison`` on the in-memory SQLite target."""
    target = BUILTIN_TARGETS["sqlite-sql"]
    assert target.store_factory is not None
    machine = comparison_for(
        target.store_factory,
        target.capabilities,
        name="bench",
        raw_writer=raw_writer_for(target.store_factory),
    )
    observer = Observer()
    started = time.perf_counter()
    with observing(observer):
        run_state_machine_as_test(machine, settings=_settings(examples))
    return observer.steps / (time.perf_counter() - started)


def measure_dict(examples: int) -> float:
    """Steps per second of the trivial dict-backed machine."""
    DictMachine.steps = 0
    started = time.perf_counter()
    run_state_machine_as_test(DictMachine, settings=_settings(examples))
    return DictMachine.steps / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--examples", type=int, default=50)
    args = parser.parse_args()
    ours: list[float] = []
    trivial: list[float] = []
    for _ in range(args.rounds):
        ours.append(measure_comparison(args.examples))
        trivial.append(measure_dict(args.examples))
    print(f"{'machine':<40} {'steps/s (median)':>18}")
    print(f"{'RunStoreComparison, sqlite :memory:':<40} {statistics.median(ours):>18.0f}")
    print(f"{'trivial dict machine':<40} {statistics.median(trivial):>18.0f}")
    ratio = statistics.median(a / b for a, b in zip(ours, trivial, strict=True))
    print(f"ratio {ratio:.2f} (target >= 0.2)")


if __name__ == "__main__":
    main()
