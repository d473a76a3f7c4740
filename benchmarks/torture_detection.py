"""Does the torture find each planted race, run after run, on CI's budget?

Runs ``runstore torture`` (in-process coordinator, real worker processes)
``--runs`` times (default 20) on each store of the zoo's races
(``tests/zoo/_races.py``: a classify read before the write transaction, the
driver's deferred BEGIN, a retry that replays only the writes), on the
shipped store and on the controls (correct stores that work differently), each
run with the budget CI uses (``BUDGET``) and a seed of its own. Shrinking is
off: detection is what is counted. Prints one line per run and a table of
detection counts with the median wall time of a run; exits 1 unless every
race is found in at least 19 of 20 runs (the same share of ``--runs``) and the
clean stores pass every run.

Run from the repository root: ``python benchmarks/torture_detection.py [--runs N]``.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.chdir(ROOT)  # the workers import the zoo's factories from here

from runstore.stateful._torture import TortureConfig, run_torture  # noqa: E402
from tests.zoo._races import BUDGET, CONTROLS, RACES  # noqa: E402

REQUIRED_SHARE = 19 / 20


def campaign(store: str | None, runs: int, first_seed: int) -> tuple[int, list[float]]:
    """How many of ``runs`` runs failed (status 1), and each run's wall time."""
    failed = 0
    times: list[float] = []
    for index in range(runs):
        with tempfile.TemporaryDirectory() as folder:
            started = time.monotonic()
            result = run_torture(
                TortureConfig(
                    db=str(Path(folder) / "db"),
                    out=str(Path(folder) / "out"),
                    store=store,
                    seed=first_seed + index,
                    shrink=False,
                    quiet=True,
                    **BUDGET,
                )
            )
            times.append(time.monotonic() - started)
        failed += result.status == 1
        print(
            f"  {store or 'shipped store'} #{index + 1}: status {result.status}, "
            f"{len(result.verdict.violations)} objects in violation, "
            f"{result.operations} calls, {times[-1]:.1f} s",
            flush=True,
        )
    return failed, times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="runs per store (default 20)")
    parser.add_argument("--seed", type=int, default=20_000, help="first seed (default 20000)")
    args = parser.parse_args(argv)
    needed = math.ceil(REQUIRED_SHARE * args.runs)
    print(f"torture detection: {args.runs} runs per store, budget {BUDGET}")
    rows: list[tuple[str, int, float, bool]] = []
    for module in RACES:
        found, times = campaign(f"tests.zoo.{module}:factory", args.runs, args.seed)
        rows.append((module, found, statistics.median(times), found >= needed))
    for module in (None, *CONTROLS):
        store = None if module is None else f"tests.zoo.{module}:factory"
        failed, times = campaign(store, args.runs, args.seed)
        rows.append((module or "shipped store", failed, statistics.median(times), failed == 0))
    print(f"\n{'store':<30} {'found':>7} {'median s':>9}  verdict")
    for name, found, median, good in rows:
        expected = f"(need >= {needed})" if name in RACES else "(need 0)"
        print(
            f"{name:<30} {found:>3}/{args.runs:<3} {median:>9.1f}  "
            f"{'ok' if good else 'FAILED'} {expected}"
        )
    return 0 if all(good for *_, good in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
