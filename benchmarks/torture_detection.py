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

With ``--detect``, instead: each race of ``WINDOW_RACES`` (those the
torture of 9e899fd passed, at least one per window of issue 26, then the
regression entries it found already) is tortured on each backend its entry
names with ``DETECT``'s options (widened windows; lost acknowledgements aimed
at commits for the races of that window, ``LOST_ACK_RACES``), with
``--seed`` (default 20000), first for 10 s and, if that passes, for 60 s;
it prints, per entry, the time to detection (from the first call of the
history to the last return of the first minimal violation found, or the
budget when only the final checks failed), the budget, and the load
(``os.getloadavg``) before and after. Exits 1 unless every entry is found
within 60 s.

``--keep DIR`` keeps each detection run's histories and violation files
(``DIR/<module>-<backend>-seed<S>-<budget>s``) to read afterwards.

Run from the repository root: ``python benchmarks/torture_detection.py
[--runs N] [--seed S] [--backend sqlite|postgresql|all] [--detect [--only MODULE ...]
[--keep DIR]]``.
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
from runstore.stateful._histories._history import load_history  # noqa: E402
from tests.zoo._races import (  # noqa: E402
    BUDGET,
    CONTROLS,
    COUNTS,
    DETECT,
    LOST_ACK_RACES,
    POSTGRES_RACES,
    RACES,
    WINDOW_RACES,
)

#: Detection's budgets, tried in turn until the race is found.
DETECTION_BUDGETS_S = (10.0, 60.0)

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


def detection_time(result: Any) -> float | None:
    """Seconds from the history's first call to the last return of the first
    minimal violation written (None when none was written)."""
    histories = sorted(result.history_dir.glob("*.jsonl"))
    violations = [path for path in result.written if path.suffix == ".jsonl"]
    if not histories or not violations:
        return None
    start = min(op.invoked_ns for op in load_history(histories))
    ends = [
        op.returned_ns if op.returned_ns is not None else op.invoked_ns
        for op in load_history([violations[0]])
    ]
    return (max(ends) - start) / 1e9


def detect(
    modules: tuple[str, ...], backends: tuple[str, ...], seed: int, keep: Path | None = None
) -> int:
    """The ``--detect`` mode (see the module docstring); with ``keep``, each
    run's histories and violation files stay in a folder of their own there."""
    rows: list[tuple[str, str, float | None, float, str]] = []
    with contextlib.ExitStack() as stack:
        server = None
        for module, applies, window in WINDOW_RACES:
            if modules and module not in modules:
                continue
            for backend in applies:
                if backend not in backends:
                    continue
                if backend == "postgresql" and server is None:
                    from runstore.stateful._targets._pgserver import TortureServer

                    server = stack.enter_context(TortureServer())
                target = sqlite_target if backend == "sqlite" else postgres_target(server)
                found: float | None = None
                budget = 0.0
                load_before = os.getloadavg()[0]
                for budget in DETECTION_BUDGETS_S:
                    with tempfile.TemporaryDirectory() as folder, target(folder) as (db, extra):
                        out = Path(folder) / "out"
                        if keep is not None:
                            out = keep / f"{module}-{backend}-seed{seed}-{budget:g}s"
                        started = time.monotonic()
                        result = run_torture(
                            TortureConfig(
                                db=db,
                                out=str(out),
                                store=f"tests.zoo.{module}:factory",
                                seed=seed,
                                seconds=budget,
                                quiet=True,
                                **DETECT[backend],
                                **LOST_ACK_RACES.get(module, {}),
                                **extra,
                            )
                        )
                        wall = time.monotonic() - started
                        if result.status == 1:
                            found = detection_time(result)
                            found = budget if found is None else found
                            break
                load = f"{load_before:.1f}-{os.getloadavg()[0]:.1f}"
                print(
                    f"  {module} on {backend} ({window}): "
                    + (f"found at {found:.1f} s" if found is not None else "NOT FOUND")
                    + f" (budget {budget:g} s, wall {wall:.0f} s, load {load})",
                    flush=True,
                )
                rows.append((backend, module, found, budget, load))
    print(f"\n{'backend':<11} {'store':<34} {'found at':>9} {'budget':>7}  load")
    for backend, module, found, budget, load in rows:
        shown = "MISSED" if found is None else f"{found:.1f} s"
        print(f"{backend:<11} {module:<34} {shown:>9} {budget:>5g} s  {load}")
    return 0 if all(found is not None for _b, _m, found, _t, _l in rows) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="runs per store (default 20)")
    parser.add_argument("--seed", type=int, default=20_000, help="first seed (default 20000)")
    parser.add_argument(
        "--backend", choices=("sqlite", "postgresql", "all"), default="all", help="default all"
    )
    parser.add_argument(
        "--detect", action="store_true", help="time to detection of WINDOW_RACES (up to 60 s)"
    )
    parser.add_argument("--only", nargs="*", default=(), help="--detect: these modules only")
    parser.add_argument(
        "--keep", type=Path, default=None, help="--detect: keep each run's files under this folder"
    )
    args = parser.parse_args(argv)
    if args.detect:
        chosen = ("sqlite", "postgresql") if args.backend == "all" else (args.backend,)
        return detect(tuple(args.only), chosen, args.seed, args.keep)
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
