"""How long does the event loop wait while an ``AsyncRunStore`` is busy?

A ticker task sleeps 1 ms in a loop (``asyncio.sleep(0.001)``) and records
how late it wakes (the time it slept, less 1 ms, by the loop's clock): the
loop cannot wake it while something holds the loop's thread. Meanwhile
``--tasks`` tasks (default 100) call the store back to back, each awaiting
its call before the next, for ``--seconds`` seconds (default 3) per
condition. The conditions:

- ``idle``: the ticker alone: what the machine and asyncio give by
  themselves.
- ``sqlite-file heartbeat`` / ``create``: ``runstore.aopen(path)`` on a
  SQLite file (its one connection and one thread), heartbeats of the tasks'
  own runs (each created and owned first; every beat later than the last, so
  each is a write) or creates of new runs.
- ``postgres heartbeat`` / ``create``: the same on ``runstore.aopen(url)``
  with its default pool (4 connections, each with its thread), on a
  throwaway cluster of this process's own with ``fsync`` and
  ``synchronous_commit`` on (durable commits, the server's default), over a
  unix socket.
- ``... on the loop (reference)``: heartbeats on a synchronous store
  (``runstore.open``) called straight from the tasks, on the loop's thread:
  what ``aopen`` exists to avoid, and proof that the ticker sees a blocked
  loop. (The stores behind an ``AsyncRunStore`` refuse such calls.)

Every round (``--rounds``, default 2) runs every condition once, in this
order; a condition's figures pool its rounds. Printed per condition: store
calls per second, ticks, and the ticker's lateness p50, p99 and max in
milliseconds. Lateness under load is the loop's own work for the calls (each
call's hand-off to its thread and its answer's return) plus whatever holds
the thread otherwise; on a loaded machine also the time the loop's thread
waits for a core. The load average (``os.getloadavg``) is printed before and
after each round.

Run: ``python benchmarks/async_loop_block.py [--tasks N] [--seconds S]
[--rounds R] [--only sqlite,postgres]``. Never asserts (timings are not
tests).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import runstore
from runstore import ManualClock, OwnerId, RunSnapshot
from runstore.stateful._targets import _postgres

OWNER = OwnerId("bench-host", 1, "bench-nonce")
PENDING = RunSnapshot("pending", None, None)
TICK_S = 0.001

#: A store call to make back to back: (task index, call number) -> awaitable.
Call = Callable[[int, int], Awaitable[Any]]


def load() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def quantile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


async def measure(tasks: int, seconds: float, call: Call | None) -> tuple[list[float], int]:
    """The ticker's lateness (seconds) while ``tasks`` tasks run ``call``, and
    how many calls they made."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    late: list[float] = []
    calls = 0

    async def ticker() -> None:
        while not stop.is_set():
            before = loop.time()
            await asyncio.sleep(TICK_S)
            late.append(max(0.0, loop.time() - before - TICK_S))

    async def caller(index: int, call: Call) -> None:
        nonlocal calls
        for number in itertools.count():
            if stop.is_set():
                return
            await call(index, number)
            calls += 1

    running = [asyncio.create_task(ticker())]
    if call is not None:
        running += [asyncio.create_task(caller(index, call)) for index in range(tasks)]
    await asyncio.sleep(seconds)
    stop.set()
    await asyncio.gather(*running)
    return late, calls


class Target:
    """One backend: its async store, a synchronous store for the reference,
    and the tasks' runs, each created and owned."""

    def __init__(self, name: str, target: str, tasks: int) -> None:
        self.name = name
        self.target = target
        self.clock = ManualClock(1_000_000)
        self.run_ids = [f"loop-{name}-{index}" for index in range(tasks)]
        self.serial = itertools.count()
        self.astore: Any = None
        self.sync: Any = None

    async def open(self) -> None:
        self.astore = await runstore.aopen(self.target, clock=self.clock)
        now = self.clock.now_ms()
        for run_id in self.run_ids:
            await self.astore.create(run_id, "{}")
            await self.astore.claim_and_own(run_id, PENDING, OWNER, now)
        # Unguarded: the reference calls it on the loop's thread on purpose.
        self.sync = runstore.open(self.target, clock=self.clock)

    async def heartbeat(self, index: int, number: int) -> None:
        # Every beat later than the last: each is a write.
        await self.astore.heartbeat(self.run_ids[index], OWNER, self.clock.advance(1))

    async def create(self, index: int, number: int) -> None:
        await self.astore.create(f"new-{self.name}-{next(self.serial)}", '{"n": 1}')

    async def blocking_heartbeat(self, index: int, number: int) -> None:
        self.sync.heartbeat(self.run_ids[index], OWNER, self.clock.advance(1))
        await asyncio.sleep(0)  # let the others (and the ticker) have a turn

    async def close(self) -> None:
        await self.astore.close()
        self.sync.close()


async def bench(args: argparse.Namespace, targets: list[Target]) -> None:
    for target in targets:
        await target.open()
    conditions: list[tuple[str, Call | None]] = [("idle", None)]
    for target in targets:
        pool = target.astore.pool_size
        conditions += [
            (f"{target.name} heartbeat (pool {pool})", target.heartbeat),
            (f"{target.name} create (pool {pool})", target.create),
            (f"{target.name} heartbeat on the loop (reference)", target.blocking_heartbeat),
        ]
    results: dict[str, tuple[list[float], int, float]] = {}
    try:
        for round_ in range(args.rounds):
            print(f"round {round_ + 1}: load {load()}")
            for label, call in conditions:
                started = time.perf_counter()
                late, calls = await measure(args.tasks, args.seconds, call)
                elapsed = time.perf_counter() - started
                before = results.get(label, ([], 0, 0.0))
                results[label] = (before[0] + late, before[1] + calls, before[2] + elapsed)
        print(f"load after: {load()}")
    finally:
        for target in targets:
            await target.close()
    print(
        f"{args.tasks} tasks calling back to back, {args.seconds:g} s per condition and round, "
        f"{args.rounds} rounds; ticker: asyncio.sleep(0.001), lateness in ms"
    )
    print(f"{'condition':<46}{'calls/s':>9}{'ticks':>8}{'p50':>8}{'p99':>8}{'max':>8}")
    for label, _ in conditions:
        late, calls, elapsed = results[label]
        print(
            f"{label:<46}{calls / elapsed:>9.0f}{len(late):>8}"
            f"{statistics.median(late) * 1e3:>8.2f}{quantile(late, 0.99) * 1e3:>8.2f}"
            f"{max(late) * 1e3:>8.2f}"
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--only", default="sqlite,postgres")
    args = parser.parse_args(argv)
    backends = set(args.only.split(","))
    print(f"load before: {load()}; {os.cpu_count()} cores")
    cluster = server = None
    with tempfile.TemporaryDirectory(prefix="runstore-loop-") as folder:
        targets = []
        if "sqlite" in backends:
            targets.append(Target("sqlite-file", str(Path(folder) / "runs.db"), args.tasks))
        try:
            if "postgres" in backends:
                cluster = _postgres.Cluster(fsync=True)
                server = _postgres.Server(cluster.url, cluster)
                targets.append(Target("postgres", server.fresh_database(), args.tasks))
                print(
                    "PostgreSQL: a throwaway cluster, fsync and synchronous_commit on, unix socket"
                )
            asyncio.run(bench(args, targets))
        finally:
            if server is not None:
                server.close()
            if cluster is not None:
                cluster.stop()


if __name__ == "__main__":
    main()
