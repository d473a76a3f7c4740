"""Does the torture find each planted race, run after run, on CI's budget?

Runs ``runstore torture`` (in-process coordinator, real worker processes)
``--runs`` times (default 20) on each store of the zoo's races
(``tests/zoo/_races.py``), on the shipped stores and on the controls (correct
stores that work differently), each run with the budget CI uses (``BUDGET``)
and a seed of its own:

- SQLite: a classify read before the write transaction, the driver's deferred
  BEGIN, a retry that replays only the writes; the count bug (a heartbeat
  that writes its row twice, seen only by the final revision check); the
  shipped store and the deferred-BEGIN control.
- PostgreSQL (a throwaway server, ``runstore.stateful._targets._pgserver``, one fresh
  database per run, a server restart among the faults): the store without
  its run-row lock, the one whose statements each commit on their own; the
  shipped store.

Shrinking is off: detection is what is counted. Prints one line per run and a
table of detection counts with the median wall time of a run; exits 1 unless
every race is found in at least 19 of 20 runs (the same share of ``--runs``)
and the clean stores pass every run.

Run from the repository root: ``python benchmarks/torture_detection.py
[--runs N] [--backend sqlite|postgresql|all]``.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.chdir(ROOT)  # the workers import the zoo's factories from here

from runstore.stateful._campaigns._torture import TortureConfig, run_torture  # noqa: E402
from tests.zoo._races import BUDGET, CONTROLS, COUNTS, POSTGRES_RACES, RACES  # noqa: E402

REQUIRED_SHARE = 19 / 20

#: ``target(folder)`` yields the ``db`` for one run and the config's extras.
Target = Callable[[str], contextlib.AbstractContextManager[tuple[str, dict[str, Any]]]]


def sqlite_target(folder: str) -> contextlib.AbstractContextManager[tuple[str, dict[str, Any]]]:
    return contextlib.nullcontext((str(Path(folder) / "db"), {}))


def postgres_target(server: Any) -> Target:
    @contextlib.contextmanager
    def target(folder: str) -> Iterator[tuple[str, dict[str, Any]]]:
        url = server.create_database()
        try:
            yield url, {"restarter": server.restart}
        finally:
            server.drop_database(url)

    return target


def campaign(
    store: str | None, runs: int, first_seed: int, target: Target, *, clean: bool = False
) -> tuple[int, list[float]]:
    """How many of ``runs`` runs failed (status 1), and each run's wall time;
    a ``clean`` store's failures are printed in full."""
    failed = 0
    times: list[float] = []
    for index in range(runs):
        with tempfile.TemporaryDirectory() as folder, target(folder) as (db, extra):
            started = time.monotonic()
            result = run_torture(
                TortureConfig(
                    db=db,
                    out=str(Path(folder) / "out"),
                    store=store,
                    seed=first_seed + index,
                    shrink=False,
                    quiet=True,
                    **BUDGET,
                    **extra,
                )
            )
            times.append(time.monotonic() - started)
            failed += result.status == 1
            print(
                f"  {store or 'shipped store'} #{index + 1}: status {result.status}, "
                f"{len(result.verdict.violations)} objects in violation, "
                f"{result.operations} calls, {result.kills} kills, {result.stops} stops, "
                f"{result.restarts} restarts, {times[-1]:.1f} s",
                flush=True,
            )
            if result.status == 1 and clean:
                # A store expected to pass failed: say why before the folder goes.
                print(f"    seed {first_seed + index}: {result.verdict.summary()}")
                if result.invariant_failure:
                    print(f"    invariants: {result.invariant_failure}")
                for path in result.written:
                    if path.suffix == ".txt":
                        print(path.read_text())
    return failed, times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="runs per store (default 20)")
    parser.add_argument("--seed", type=int, default=20_000, help="first seed (default 20000)")
    parser.add_argument(
        "--backend", choices=("sqlite", "postgresql", "all"), default="all", help="default all"
    )
    args = parser.parse_args(argv)
    needed = math.ceil(REQUIRED_SHARE * args.runs)
    print(f"torture detection: {args.runs} runs per store, budget {BUDGET}")
    rows: list[tuple[str, str, int, float, bool]] = []
    plans: list[tuple[str, Target, tuple[str, ...], tuple[str | None, ...]]] = []
    with contextlib.ExitStack() as stack:
        if args.backend in ("sqlite", "all"):
            plans.append(("sqlite", sqlite_target, (*RACES, *COUNTS), (None, *CONTROLS)))
        if args.backend in ("postgresql", "all"):
            from runstore.stateful._targets._pgserver import TortureServer
            from runstore.stateful._targets._postgres import Unavailable

            try:
                server = stack.enter_context(TortureServer())
            except Unavailable as why:
                print(f"PostgreSQL unavailable: {why}", file=sys.stderr)
                return 2
            plans.append(("postgresql", postgres_target(server), POSTGRES_RACES, (None,)))
        for backend, target, races, clean in plans:
            for module in races:
                found, times = campaign(f"tests.zoo.{module}:factory", args.runs, args.seed, target)
                rows.append((backend, module, found, statistics.median(times), found >= needed))
            for name in clean:
                store = None if name is None else f"tests.zoo.{name}:factory"
                failed, times = campaign(store, args.runs, args.seed, target, clean=True)
                label = name or "shipped store"
                rows.append((backend, label, failed, statistics.median(times), failed == 0))
    print(f"\n{'backend':<11} {'store':<30} {'found':>7} {'median s':>9}  verdict")
    for backend, name, found, median, good in rows:
        expected = "(need 0)" if name in ("shipped store", *CONTROLS) else f"(need >= {needed})"
        print(
            f"{backend:<11} {name:<30} {found:>3}/{args.runs:<3} {median:>9.1f}  "
            f"{'ok' if good else 'FAILED'} {expected}"
        )
    return 0 if all(good for *_, good in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
