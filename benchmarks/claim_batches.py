"""A worker loop claiming runs ten at a time (``claim_next_many``) against one at a time
(``claim_next``), on SQLite and on durable PostgreSQL.

Each loop drains ``--jobs`` pending runs (default 2 000): it claims, then settles every
run it took with ``transition_owned(..., "completed")``, as a worker with nothing to do
but mark its jobs done would. The subjects are interleaved round by round on fresh
databases, and the medians of ``--rounds`` rounds (default 5) are printed: jobs per
second of wall time, and the thread CPU time of the loop per job (the figure to trust
on a loaded machine; wall time includes the server's work and the commits' flushes).
The load (``os.getloadavg``) before and after is printed too.

SQLite: a file in WAL mode with the store's own settings. PostgreSQL: a throwaway
cluster of its own with ``fsync``, ``synchronous_commit`` and ``full_page_writes`` on
(the durable default), over its unix socket, the store's one-round-trip path
(``SqlConsensus``); ``--postgres URL`` uses that server instead and ``--no-postgres``
skips it.

Run from the repository root: ``python benchmarks/claim_batches.py [--jobs N]
[--rounds N] [--batch N] [--postgres URL | --no-postgres]``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import runstore
from runstore import OwnerId, Transitioned

OWNER = OwnerId("bench-host", 1, "bench-nonce")


def one_at_a_time(store: Any, clock: Any, _batch: int) -> int:
    done = 0
    while (row := store.claim_next(OWNER, clock.now_ms())) is not None:
        outcome = store.transition_owned(row.run_id, OWNER, "completed")
        assert outcome == Transitioned()
        done += 1
    return done


def in_batches(store: Any, clock: Any, batch: int) -> int:
    done = 0
    while rows := store.claim_next_many(OWNER, clock.now_ms(), batch):
        for row in rows:
            outcome = store.transition_owned(row.run_id, OWNER, "completed")
            assert outcome == Transitioned()
        done += len(rows)
    return done


LOOPS: dict[str, Callable[[Any, Any, int], int]] = {
    "claim_next": one_at_a_time,
    "claim_next_many": in_batches,
}


def measure(open_store: Callable[[], Any], jobs: int, loop: str, batch: int) -> tuple[float, float]:
    """(jobs per second of wall time, thread CPU seconds per job) of one drain."""
    clock = runstore.SystemClock()
    with open_store() as store:
        for number in range(jobs):
            store.create(f"job-{number:06d}", '{"rows": 0}')
        began, cpu = time.perf_counter(), time.thread_time()
        done = LOOPS[loop](store, clock, batch)
        wall, spent = time.perf_counter() - began, time.thread_time() - cpu
        assert done == jobs, (done, jobs)
        store.check_invariants()
    return jobs / wall, spent / jobs


@contextlib.contextmanager
def durable_postgres(explicit: str | None, wanted: bool) -> Iterator[Callable[[], str] | None]:
    """A factory of fresh database URLs on a durable server, or None without PostgreSQL."""
    if not wanted:
        yield None
        return
    if explicit is not None:
        yield lambda: explicit
        return
    try:
        from runstore.stateful._targets import _postgres

        cluster = _postgres.Cluster(fsync=True)
    except Exception as why:  # no binaries
        print(f"(PostgreSQL skipped: {type(why).__name__}: {why})")
        yield None
        return
    server = _postgres.Server(cluster.url, cluster)
    try:
        yield server.fresh_database
    finally:
        with contextlib.suppress(Exception):
            cluster.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--postgres", metavar="URL")
    parser.add_argument("--no-postgres", action="store_true")
    args = parser.parse_args(argv)
    print(f"load before: {os.getloadavg()[0]:.1f}")
    print(f"{args.jobs} jobs a drain, batches of {args.batch}, medians of {args.rounds} rounds")
    print(f"{'backend':<12}{'loop':<17}{'jobs/s':>9}{'CPU us/job':>12}")
    with (
        tempfile.TemporaryDirectory() as folder,
        durable_postgres(args.postgres, not args.no_postgres) as urls,
    ):
        backends: dict[str, Callable[[], Callable[[], Any]]] = {}
        counter = iter(range(10**9))

        def sqlite_opener() -> Callable[[], Any]:
            path = Path(folder) / f"drain-{next(counter)}.db"
            return lambda: runstore.open(path, clock=runstore.SystemClock())

        backends["sqlite-file"] = sqlite_opener
        if urls is not None:

            def postgres_opener() -> Callable[[], Any]:
                url = urls()
                return lambda: runstore.open(url, clock=runstore.SystemClock())

            backends["postgresql"] = postgres_opener
        for name, opener in backends.items():
            figures: dict[str, list[tuple[float, float]]] = {loop: [] for loop in LOOPS}
            for _ in range(args.rounds):
                for loop in LOOPS:
                    figures[loop].append(measure(opener(), args.jobs, loop, args.batch))
            rates = {}
            for loop, runs in figures.items():
                rate = statistics.median(r for r, _ in runs)
                cpu = statistics.median(c for _, c in runs)
                rates[loop] = rate
                print(f"{name:<12}{loop:<17}{rate:>9.0f}{cpu * 1e6:>12.0f}")
            ratio = rates["claim_next_many"] / rates["claim_next"]
            print(f"{name:<12}{'batches / one':<17}{ratio:>9.2f}x")
    print(f"load after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
