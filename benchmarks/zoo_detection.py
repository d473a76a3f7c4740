"""Time to first failure of every zoo bug under ``run_conformance``'s default budget.

    python benchmarks/zoo_detection.py            # every entry, 3 runs each
    python benchmarks/zoo_detection.py --runs 5 steal_cutoff_inclusive

Each zoo entry (``tests/zoo``: broken strategies and stores, and broken
attempt stores) is run through the machines ``run_conformance`` would run,
each under its default budget without shrinking, until the first failure.
Run 1 is the default itself (derandomized: what a third party's CI sees);
runs 2.. are the same budget randomized with seeds 1, 2, ... Printed per
entry: the check that fired, seconds and examples to the first failure
(median and worst over the runs), and how many runs missed it (reached the
end of the budget without a failure). For reference it also prints the
seconds the same machines take on the unbroken strategy (the cost of a
clean default run).
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from hypothesis import Phase, seed, settings
from hypothesis.stateful import get_state_machine_test

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from runstore.stateful import Capabilities, attempt_comparison_for, conformance_machines  # noqa: E402
from runstore.stateful._budget import default_settings  # noqa: E402
from runstore.stateful._observe import Observer, observing  # noqa: E402
from runstore.stateful._targets import BUILTIN_TARGETS  # noqa: E402
from tests.test_attempt_zoo import ATTEMPT_ZOO  # noqa: E402
from tests.zoo import ZOO  # noqa: E402


def machines_of(name: str) -> list[Any]:
    module = importlib.import_module(f"tests.zoo.{name}")
    if module.KIND == "consensus":
        return conformance_machines(consensus_factory=module.factory)
    if module.KIND == "attempts":
        target = BUILTIN_TARGETS["sqlite-sql"]
        assert target.store_factory is not None
        return [
            attempt_comparison_for(
                target.store_factory,
                module.capabilities,
                name=name,
                attempt_store=module.attempt_store,
            )
        ]
    return conformance_machines(
        store_factory=module.factory,
        capabilities=getattr(module, "capabilities", Capabilities()),
    )


def one_run(name: str, run: int) -> tuple[str, float, int | None]:
    """(check or "missed", seconds, examples to the first failure)."""
    started = time.monotonic()
    observer = Observer()
    with observing(observer):
        for machine in machines_of(name):
            chosen = settings(
                default_settings(machine),
                phases=[Phase.explicit, Phase.generate, Phase.target],
                derandomize=run == 1,
                print_blob=False,
            )
            test = get_state_machine_test(machine, settings=chosen)
            if run > 1:
                test = seed(run - 1)(test)
            try:
                test()
            except AssertionError as error:
                return type(error).__name__, time.monotonic() - started, observer.examples
    return "missed", time.monotonic() - started, None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="zoo entries (default: all)")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    names = args.names or [*ZOO, *ATTEMPT_ZOO]
    print(
        f"{'zoo entry':34} {'check':26} {'median s':>8} {'worst s':>8} "
        f"{'median ex':>9} {'worst ex':>8} missed"
    )
    for name in names:
        results = [one_run(name, run) for run in range(1, args.runs + 1)]
        found = [r for r in results if r[0] != "missed"]
        checks = sorted({r[0] for r in found}) or ["-"]
        seconds = [r[1] for r in found] or [float("nan")]
        examples = [r[2] for r in found if r[2] is not None] or [0]
        missed = len(results) - len(found)
        worst_s = max(r[1] for r in results)
        print(
            f"{name:34} {','.join(checks)[:26]:26} {statistics.median(seconds):8.1f} "
            f"{worst_s:8.1f} {statistics.median(examples):9.0f} {max(examples):8d} "
            f"{missed}/{len(results)}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
