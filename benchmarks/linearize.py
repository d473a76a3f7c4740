"""How fast is the linearizability checker, and how large do its searches get?

Histories are generated from the reference model (``runstore.stateful._histories._generate``:
simulated owners whose calls overlap, linearizable by construction), in four
shapes:

- ``ci``: the size of one torture run of CI's budget (six owners on one live
  run at a time, about 6 000 calls, a few pending);
- ``lineages``: four owners over two live runs in lineages of three rounds;
- ``one-run``: 10 000 calls on a single run id that is never settled (its
  fact stream grows to thousands), a few pending;
- ``one-run-20k``: the same with 20 000 calls.

For each shape the script prints histories checked per second, calls checked
per second, the largest search of any object (distinct (state, placed set)
pairs met) and the model steps per call, next to a raw baseline measured in
the same run, interleaved with the checks: applying every call once to the
model in invocation order, no search and no comparison. The ratio is the
search's price over the model's own cost.

Run: ``python benchmarks/linearize.py [--repeat N] [--shape NAME ...]``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from runstore.stateful import check_history
from runstore.stateful._histories._generate import generate_history
from runstore.stateful._histories._spec import Spec, initial_state, make_node

SHAPES: dict[str, dict[str, Any]] = {
    "ci": {"operations": 6_000, "clients": 6, "runs": 1, "pending": 0.002},
    "lineages": {"operations": 5_000, "clients": 4, "runs": 2, "pending": 0.002},
    "one-run": {
        "operations": 10_000,
        "clients": 4,
        "runs": 1,
        "settle": False,
        "lineages": False,
        "pending": 0.001,
    },
    "one-run-20k": {
        "operations": 20_000,
        "clients": 4,
        "runs": 1,
        "settle": False,
        "lineages": False,
        "pending": 0.001,
    },
}


def replay(history: list[Any]) -> float:
    """The baseline: every call applied once, in invocation order."""
    spec = Spec()
    started = time.perf_counter()
    nodes: dict[Any, Any] = {}
    for op in history:
        key = op.args[0] if op.args else None
        node = nodes.get(key) or make_node(initial_state(None))
        nodes[key], _ = spec.apply(node, op)
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="histories per shape (default 3)")
    parser.add_argument("--shape", action="append", choices=sorted(SHAPES), help="default: all")
    args = parser.parse_args(argv)
    print(
        f"{'shape':<12} {'calls':>7} {'hist/s':>7} {'calls/s':>9} {'worst search':>12} "
        f"{'steps/call':>10} {'baseline s':>10} {'check s':>8} {'ratio':>6}"
    )
    for name in args.shape or list(SHAPES):
        shape = dict(SHAPES[name])
        operations = shape.pop("operations")
        checks: list[float] = []
        baselines: list[float] = []
        worst = steps = calls = 0
        for seed in range(args.repeat):
            history = generate_history(seed, operations, **shape)
            baselines.append(replay(history))
            started = time.perf_counter()
            verdict = check_history(history)
            checks.append(time.perf_counter() - started)
            if not verdict.ok:
                raise SystemExit(f"{name} seed {seed}: {verdict.summary()}")
            worst = max(worst, verdict.worst_explored)
            steps += sum(p.steps for p in verdict.partitions)
            calls += len(history)
        check = statistics.median(checks)
        baseline = statistics.median(baselines)
        print(
            f"{name:<12} {calls // args.repeat:>7} {1 / check:>7.2f} "
            f"{calls / sum(checks):>9,.0f} {worst:>12,} {steps / calls:>10.2f} "
            f"{baseline:>10.3f} {check:>8.3f} {check / baseline:>6.1f}"
        )


if __name__ == "__main__":
    main()
