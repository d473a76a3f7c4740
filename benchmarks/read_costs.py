"""CPU per row of a read page: the store against the raw rows and the values it returns.

Issue 28, "Reads". For a ``list_runs`` page (the default: no filter, no run
state) and a ``changes`` page, three subjects run in one process, their
batches interleaved round by round:

- ``store``: the store's call (``list_runs(limit=...)``, ``changes(after)``);
- ``raw``: the same SQL on the same kind of connection, fetched into tuples
  (sqlite3, or psycopg with the store's cursor), nothing else;
- ``values``: the contract's values built alone from already-fetched Python
  data (``RunRow`` with its ``OwnerId``s, ``RunChange``), by their public
  constructors, with the same field values.

Each subject runs at two page sizes (100 rows and 10), and the cost per row
is the difference divided by the 90 rows between them, so the cost of a call
that does not grow with its rows (admission, the statement's preparation, a
round trip) cancels. The budget is ``(raw + values) * 1.25``; the verdict says
whether the store is within it.

Two figures, both CPU of this process only: the instructions counted by
valgrind's callgrind (the script re-runs itself under ``valgrind
--tool=callgrind``, zeroing the counters at a marker call before each batch
and dumping them at another after it; the counts do not depend on the load),
and thread CPU time (``time.thread_time_ns``; medians of the rounds).
Garbage collection is off inside the batches (its cost follows the whole
process's objects, not the batch's), and every statement has run six times
before (psycopg prepares a statement at its fifth execution). On
PostgreSQL that is the client's side of the call (psycopg and the store);
the server's work is not counted.

Backends: SQLite ``:memory:``, SQLite in a file (WAL), and PostgreSQL (a
throwaway cluster when the binaries are on PATH, or ``--postgres URL``;
``--no-postgres`` skips it). Each store holds 300 runs of four kinds in turn
(running with an owner, pending with a pending claim, completed, pending;
every fifth names a parent), so the page decodes every column shape.

Run: ``python benchmarks/read_costs.py [--rounds N] [--calls N] [--no-callgrind]
[--postgres URL|--no-postgres]``.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import runstore
from runstore import ManualClock, OwnerId, RunChange, RunRow, RunSnapshot

OWNER = OwnerId("bench-host", 4242, "bench-nonce-0001")
CLAIMANT = OwnerId("other-host", 4343, "other-nonce-0002")
PENDING = RunSnapshot("pending", None, None)
RUNS = 300
SIZES = (100, 10)
BUDGET_FACTOR = 1.25


# -- fixtures ---------------------------------------------------------------------------


def populate(store: Any) -> None:
    """``RUNS`` runs of four kinds in turn, created in listing order."""
    clock = store.clock
    for number in range(RUNS):
        rid = f"run-{number:05d}"
        parent = "run-00000" if number % 5 == 0 and number else None
        store.create(rid, '{"step":1,"note":"a run state"}', parent_run_id=parent)
        clock.advance(1)
        now = clock.now_ms()
        kind = number % 4
        if kind == 0:
            store.claim_and_own(rid, PENDING, OWNER, now)
        elif kind == 1:
            store.claim(rid, PENDING, CLAIMANT, now)
        elif kind == 2:
            store.claim_and_own(rid, PENDING, OWNER, now)
            store.transition_owned(rid, OWNER, "completed", '{"done":true}')


def open_store(backend: str, where: str | None) -> Any:
    clock = ManualClock(1_000_000)
    if backend == "sqlite-memory":
        return runstore.open(":memory:", clock=clock)
    assert where is not None
    return runstore.open(where, clock=clock)


# -- the subjects -----------------------------------------------------------------------


class Subjects:
    """The three subjects of one backend, each a callable per page size."""

    def __init__(self, backend: str, store: Any, url: str | None) -> None:
        from runstore import _boundary as admit
        from runstore._sql._store import _listing

        self.store = store
        if backend == "postgres":
            import psycopg

            self.raw = psycopg.connect(url, autocommit=True, cursor_factory=psycopg.RawCursor)
        else:
            self.raw = store._connection
        q = store._queries
        # Per page size: a backend may write the page's size into the text.
        self.list_sql = {
            size: _listing(q, admit.admit_list_runs(*[None] * 7, size, None, False))
            for size in SIZES
        }
        self.changes_sql = q.CHANGES
        every = store.changes(0)
        # The revision after which exactly ``size`` changes follow.
        self.after = {size: every[-size - 1].revision for size in SIZES}
        self.rows = {size: self._list_raw(size) for size in SIZES}
        self.change_rows = {size: self._changes_raw(size) for size in SIZES}
        assert len(self.rows[100]) == 101
        assert len(self.rows[10]) == 11
        assert len(self.change_rows[100]) == 100

    def _list_raw(self, size: int) -> list[Any]:
        return self.raw.execute(
            self.list_sql[size], (-1, "", None, None, None, None, None, size + 1)
        ).fetchall()

    def _changes_raw(self, size: int) -> list[Any]:
        return self.raw.execute(self.changes_sql, (self.after[size],)).fetchall()

    def subjects(self) -> dict[tuple[str, str], Callable[[int], object]]:
        store = self.store

        def list_store(size: int) -> object:
            return store.list_runs(limit=size)

        def changes_store(size: int) -> object:
            return store.changes(self.after[size])

        def list_values(size: int) -> object:
            return [
                RunRow(
                    r[0],
                    r[1],
                    r[2],
                    r[3],
                    r[4],
                    None if r[5] is None else OwnerId(r[5], r[6], r[7]),
                    r[8],
                    None if r[9] is None else OwnerId(r[9], r[10], r[11]),
                    r[12],
                    r[13],
                    r[14],
                    r[15],
                    r[16],
                    r[17],
                )
                for r in self.rows[size][:size]
            ]

        def changes_values(size: int) -> object:
            return [RunChange(r[0], r[1], bool(r[2])) for r in self.change_rows[size]]

        return {
            ("list_runs", "store"): list_store,
            ("list_runs", "raw"): self._list_raw,
            ("list_runs", "values"): list_values,
            ("changes", "store"): changes_store,
            ("changes", "raw"): self._changes_raw,
            ("changes", "values"): changes_values,
        }

    def close(self) -> None:
        if self.raw is not self.store._connection:
            self.raw.close()
        self.store.close()


# -- measuring ------------------------------------------------------------------------------


def batch(call: Callable[[int], object], size: int, calls: int) -> None:
    for _ in range(calls):
        call(size)


def timed(
    subjects: dict[Any, Callable[[int], object]], rounds: int, calls: int
) -> dict[Any, float]:
    """Thread CPU ns per row of each subject: medians over ``rounds``
    interleaved rounds of the difference between the two page sizes."""
    samples: dict[Any, list[float]] = {key: [] for key in subjects}
    for _ in range(rounds):
        for key, call in subjects.items():
            spent = {}
            for size in SIZES:
                started = time.thread_time_ns()
                batch(call, size, calls)
                spent[size] = time.thread_time_ns() - started
            samples[key].append((spent[100] - spent[10]) / (calls * 90))
    return {key: statistics.median(values) for key, values in samples.items()}


def counted(subjects: dict[Any, Callable[[int], object]], rounds: int, calls: int) -> list[Any]:
    """Under callgrind: each batch between ``math.gcd`` (counters zeroed) and
    ``math.lcm`` (counters dumped); the batches' labels, in dump order."""
    order = []
    for _ in range(rounds):
        for key, call in subjects.items():
            for size in SIZES:
                math.gcd(1, 1)
                batch(call, size, calls)
                math.lcm(1, 1)
                order.append([*key, size])
    return order


def dump_totals(prefix: str) -> list[int]:
    """The instruction totals of callgrind's numbered dumps, in order."""
    totals = []
    number = 1
    while os.path.exists(f"{prefix}.{number}"):
        with open(f"{prefix}.{number}") as dump:
            for line in dump:
                if line.startswith(("summary:", "totals:")):
                    totals.append(int(line.split()[1]))
                    break
        number += 1
    return totals


def per_row_instructions(order: list[Any], totals: list[int], calls: int) -> dict[Any, float]:
    by_key: dict[Any, dict[int, list[int]]] = {}
    for (operation, subject, size), total in zip(order, totals, strict=True):
        by_key.setdefault((operation, subject), {}).setdefault(size, []).append(total)
    return {
        key: (statistics.median(sizes[100]) - statistics.median(sizes[10])) / (calls * 90)
        for key, sizes in by_key.items()
    }


# -- one backend in this process ---------------------------------------------------------


def inner(arguments: argparse.Namespace) -> None:
    """Measure one backend in this process (maybe under callgrind) and write
    the figures as JSON to ``--out``."""
    backend = arguments.inner
    store = open_store(backend, arguments.where)
    if backend == "sqlite-memory":
        populate(store)
    subjects = Subjects(backend, store, arguments.where)
    try:
        chosen = subjects.subjects()
        # Warm caches, and let psycopg prepare its statements (after five
        # executions of one text) before anything is measured.
        for size in SIZES:
            batch(lambda size: [call(size) for call in chosen.values()], size, 6)
        # No collection of garbage inside a batch: a cycle collection costs
        # what the objects of the whole process cost, not the batch's.
        gc.collect()
        gc.disable()
        if arguments.callgrind:
            order = counted(chosen, arguments.rounds, arguments.calls)
            result: Any = {"order": order}
        else:
            figures = timed(chosen, arguments.rounds, arguments.calls)
            result = {"ns": [[*key, value] for key, value in figures.items()]}
    finally:
        gc.enable()
        subjects.close()
    Path(arguments.out).write_text(json.dumps(result))


def run_inner(
    backend: str, where: str | None, *, callgrind: bool, rounds: int, calls: int, folder: Path
) -> dict[Any, float]:
    out = folder / f"{backend}-{'cg' if callgrind else 'ns'}.json"
    command = [
        sys.executable,
        __file__,
        "--inner",
        backend,
        "--out",
        str(out),
        "--rounds",
        str(rounds),
        "--calls",
        str(calls),
    ]
    if where is not None:
        command += ["--where", where]
    prefix = str(folder / f"callgrind-{backend}")
    if callgrind:
        command = [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={prefix}",
            "--zero-before=math_gcd",
            "--dump-before=math_lcm",
            *command,
            "--callgrind",
        ]
    subprocess.run(command, check=True, capture_output=callgrind)
    result = json.loads(out.read_text())
    if not callgrind:
        return {(op, subject): value for op, subject, value in result["ns"]}
    order = [tuple(item) for item in result["order"]]
    return per_row_instructions(order, dump_totals(prefix), calls)


def report(backend: str, unit: str, figures: dict[Any, float]) -> list[str]:
    lines = []
    for operation in ("list_runs", "changes"):
        store = figures[(operation, "store")]
        raw = figures[(operation, "raw")]
        values = figures[(operation, "values")]
        budget = (raw + values) * BUDGET_FACTOR
        verdict = "within" if store <= budget else "OVER"
        lines.append(
            f"{backend:14} {operation:9} {unit:6} store {store:9.0f}  raw {raw:8.0f}  "
            f"values {values:8.0f}  budget {budget:9.0f}  {verdict} "
            f"(store/budget {store / budget:.2f})"
        )
    return lines


@contextlib.contextmanager
def postgres_url(explicit: str | None, wanted: bool) -> Iterator[str | None]:
    """A migrated database holding the fixture, or None without PostgreSQL."""
    if not wanted:
        yield None
        return
    if explicit is not None:
        yield explicit
        return
    try:
        from runstore.stateful._targets import _postgres

        server = _postgres.server()
        url = server.fresh_database()
    except Exception as why:  # no binaries, no server
        print(f"(PostgreSQL skipped: {type(why).__name__}: {why})")
        yield None
        return
    try:
        yield url
    finally:
        with contextlib.suppress(Exception):
            server.drop(url)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--no-callgrind", action="store_true")
    parser.add_argument("--postgres", metavar="URL")
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument(
        "--only", choices=["sqlite-memory", "sqlite-file", "postgres"], action="append"
    )
    parser.add_argument("--inner", help=argparse.SUPPRESS)
    parser.add_argument("--where", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--callgrind", action="store_true", help=argparse.SUPPRESS)
    arguments = parser.parse_args(argv)
    if arguments.inner:
        inner(arguments)
        return
    callgrind = not arguments.no_callgrind and shutil.which("valgrind") is not None
    load = os.getloadavg()
    print(
        f"per row, the difference of pages of {SIZES[0]} and {SIZES[1]} rows over 90; "
        f"budget (raw + values) x {BUDGET_FACTOR}; load {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}"
    )
    backends = arguments.only or ["sqlite-memory", "sqlite-file", "postgres"]
    lines: list[str] = []
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary)
        with postgres_url(
            arguments.postgres, "postgres" in backends and not arguments.no_postgres
        ) as url:
            for backend in backends:
                where: str | None = None
                if backend == "sqlite-file":
                    where = str(folder / "runs.db")
                    with contextlib.closing(open_store(backend, where)) as store:
                        populate(store)
                elif backend == "postgres":
                    if url is None:
                        continue
                    where = url
                    with contextlib.closing(open_store(backend, where)) as store:
                        populate(store)
                ns = run_inner(
                    backend,
                    where,
                    callgrind=False,
                    rounds=arguments.rounds,
                    calls=arguments.calls,
                    folder=folder,
                )
                lines += report(backend, "ns", ns)
                if callgrind:
                    counts = run_inner(
                        backend, where, callgrind=True, rounds=2, calls=3, folder=folder
                    )
                    lines += report(backend, "instr", counts)
                print("\n".join(lines[-4:] if callgrind else lines[-2:]), flush=True)
    load = os.getloadavg()
    print(f"load after: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")


if __name__ == "__main__":
    main()
