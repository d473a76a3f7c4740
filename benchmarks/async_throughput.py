"""Heartbeats per second on durable PostgreSQL: 1 000 asyncio tasks on one
``AsyncRunStore`` with a pool of 8 connections, against the synchronous store
driven by 8 threads.

Both sides heartbeat the same ``--runs`` runs (default 1 000; created and
owned by one owner before anything is timed), each run ``--beats`` times per
measurement (default 5), every heartbeat with a later ``now_ms`` than the
run's last, so each is a real write and a durable commit:

- ``async``: one ``runstore.aopen(url, pool_size=8)`` store; one task per run,
  all started at once with ``asyncio.gather``, each awaiting its heartbeats
  one after another. The calls queue on the store's 8 lanes (a connection and
  its thread each).
- ``sync``: 8 threads, each with a ``runstore.open(url)`` store of its own
  (one connection), each heartbeating an eighth of the runs in turn.
- ``native`` (the reference for the design, not a store): one task per run
  on a ``psycopg_pool.AsyncConnectionPool`` of 8 ``AsyncConnection``s in
  autocommit, each heartbeat the one statement the store's one-round-trip
  path sends (``runstore.postgres._fused.RENEW``), without the store's
  admission and decoding: what an async driver alone costs.

Both sides take the store's one-round-trip path (``SqlConsensus``, the
default). The server is a throwaway cluster of this process's own
(``runstore.stateful._targets._postgres.Cluster(fsync=True)``) with
``fsync``, ``full_page_writes`` and ``synchronous_commit`` on: the server's
defaults, every commit durable before it is acknowledged. It listens on a
unix socket.

The rounds are interleaved (sync, async, native, sync, async, native ...,
after one untimed round to warm up), each round one measurement of each side over the same run
count. Printed per round: heartbeats per second of each side and the ratio
async/sync; then the median, minimum and maximum of the ratio over the
rounds (the issue's acceptance point: median >= 0.9); then, per side, CPU
time per heartbeat: this process's (every thread), the main thread (the
event loop's, on the async side), the threads that ran the store calls (the
lanes; the 8 threads on the sync side), and the server's processes (from
``/proc``), and WAL flushes per heartbeat (``pg_stat_wal``: below 1,
commits share flushes). The load average (``os.getloadavg``) is printed
before and after.

``--pin`` (2 cores or more) puts the server's processes on the last core and
this process on the others, so the client's CPU does not take from the
server's, as when the database has a host or cores of its own. Without it,
on a machine where the two share their cores and the run is CPU-bound, the
side that spends more CPU per call loses throughput for it. On our 2-core
machine, 9 rounds each: async/sync a median 1.09 shared, 1.06 pinned, with the
lanes sending the renewals waiting on them together (0.83 shared and 0.99
pinned before they did; docs/asyncio.md, "Why threads, and not an async
driver").

Run: ``python benchmarks/async_throughput.py [--runs N] [--beats B]
[--rounds R] [--pool P] [--pin]``. Never asserts (timings are not tests).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import psycopg_pool

import runstore
from runstore import ManualClock, OwnerId, RunSnapshot
from runstore.aio import AsyncRunStore
from runstore.postgres._fused import RENEW
from runstore.stateful._targets import _postgres

OWNER = OwnerId("bench-host", 1, "bench-nonce")
PENDING = RunSnapshot("pending", None, None)
LANE_PREFIX = "runstore-aio"
_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class Side:
    """One side's measurements, one entry per timed round."""

    rates: list[float] = field(default_factory=list)
    #: CPU seconds per round: process, loop thread, call threads, server.
    process: list[float] = field(default_factory=list)
    loop: list[float] = field(default_factory=list)
    callers: list[float] = field(default_factory=list)
    server: list[float] = field(default_factory=list)
    flushes: list[float] = field(default_factory=list)


def load() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def thread_cpu(thread: threading.Thread) -> float:
    """CPU seconds ``thread`` (alive, of this process) has used so far."""
    assert thread.ident is not None
    return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))


def lane_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(LANE_PREFIX)]


def server_pids(root_pid: int) -> list[int]:
    """The server's postmaster and every process it started."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:
            continue
        if int(entry.name) == root_pid or int(text[text.rindex(")") + 2 :].split()[1]) == root_pid:
            pids.append(int(entry.name))
    return pids


def server_cpu(root_pid: int) -> float:
    """CPU seconds of the server's postmaster and every process it started."""
    total = 0
    for pid in server_pids(root_pid):
        try:
            text = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue  # ended since
        fields = text[text.rindex(")") + 2 :].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / _TICKS


def pin(root_pid: int) -> str:
    """The server on the last core (backends it starts later inherit it), this
    process's threads (those started from now on inherit it) on the others."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        return "not pinned (one core)"
    for pid in server_pids(root_pid):
        os.sched_setaffinity(pid, {cores[-1]})
    os.sched_setaffinity(0, set(cores[:-1]))
    return f"server pinned to core {cores[-1]}, this process to {cores[:-1]}"


def wal_flushes(url: str, stores: list[runstore.RunStore]) -> int:
    """WAL flushes so far. A backend reports its statistics at most once a
    second unless told to: every store's connection is told first."""
    for store in stores:
        store._connection.execute("SELECT pg_stat_force_next_flush()")  # type: ignore[attr-defined]
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute("SELECT pg_stat_force_next_flush()")
        row = connection.execute("SELECT wal_sync FROM pg_stat_wal").fetchone()
        assert row is not None
        return int(row[0])


class Bench:
    def __init__(self, url: str, server_pid: int, runs: int, beats: int, pool: int) -> None:
        self.url = url
        self.server_pid = server_pid
        self.beats = beats
        self.pool = pool
        self.clock = ManualClock(1_000_000)
        self.run_ids = [f"beat-{index:05d}" for index in range(runs)]
        self.base = self.clock.now_ms()
        self.sync_stores = [runstore.open(url, clock=self.clock) for _ in range(pool)]
        self.loop = asyncio.new_event_loop()
        self.astore: AsyncRunStore = self.loop.run_until_complete(
            runstore.aopen(url, clock=self.clock, pool_size=pool)
        )
        self.loop.run_until_complete(self._prepare())
        self.all_stores = [*self.sync_stores, *self.astore.sync_stores]

    async def _prepare(self) -> None:
        now = self.clock.now_ms()

        async def one(run_id: str) -> None:
            await self.astore.create(run_id, "{}")
            outcome = await self.astore.claim_and_own(run_id, PENDING, OWNER, now)
            assert outcome == runstore.Activated(), outcome

        await asyncio.gather(*(one(run_id) for run_id in self.run_ids))

    def _next_window(self) -> int:
        """A base time past every earlier heartbeat; the store clock is moved to
        its window's end so that no beat runs ahead of it."""
        self.base += self.beats + 1
        self.clock.set(self.base + self.beats)
        return self.base

    def run_sync(self) -> tuple[float, float | None]:
        """Wall seconds, and CPU seconds of the 8 threads (each measures itself)."""
        base = self._next_window()
        shares = [self.run_ids[index :: self.pool] for index in range(self.pool)]
        errors: list[BaseException] = []
        cpu: list[float] = []

        def work(store: runstore.RunStore, run_ids: list[str]) -> None:
            start = time.thread_time()
            try:
                for beat in range(1, self.beats + 1):
                    for run_id in run_ids:
                        outcome = store.heartbeat(run_id, OWNER, base + beat)
                        assert outcome == runstore.Updated(), outcome
            except BaseException as error:
                errors.append(error)
            finally:
                cpu.append(time.thread_time() - start)

        threads = [
            threading.Thread(target=work, args=(store, share), name=f"sync-{index}")
            for index, (store, share) in enumerate(zip(self.sync_stores, shares, strict=True))
        ]
        started = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.perf_counter() - started
        if errors:
            raise errors[0]
        return elapsed, sum(cpu)

    def run_async(self) -> tuple[float, float | None]:
        """Wall seconds (the lanes' CPU is read by ``measure``)."""
        base = self._next_window()

        async def task(run_id: str) -> None:
            for beat in range(1, self.beats + 1):
                outcome = await self.astore.heartbeat(run_id, OWNER, base + beat)
                assert outcome == runstore.Updated(), outcome

        async def everything() -> float:
            started = time.perf_counter()
            await asyncio.gather(*(task(run_id) for run_id in self.run_ids))
            return time.perf_counter() - started

        return self.loop.run_until_complete(everything()), None

    def run_native(self) -> tuple[float, float | None]:
        """Wall seconds of the same heartbeats sent on an ``AsyncConnectionPool``."""
        base = self._next_window()
        statement = re.sub(r"\$\d+", "%s", RENEW)
        who = (OWNER.host_id, OWNER.pid, OWNER.nonce)

        async def everything() -> float:
            async with psycopg_pool.AsyncConnectionPool(
                self.url, min_size=self.pool, max_size=self.pool, kwargs={"autocommit": True}
            ) as pool:
                await pool.wait()

                async def task(run_id: str) -> None:
                    for beat in range(1, self.beats + 1):
                        async with pool.connection() as connection:
                            cursor = await connection.execute(
                                statement, (run_id, *who, base + beat, False)
                            )
                            row = await cursor.fetchone()
                            assert row is not None
                            assert row[0] == "updated", row

                started = time.perf_counter()
                await asyncio.gather(*(task(run_id) for run_id in self.run_ids))
                return time.perf_counter() - started

        return self.loop.run_until_complete(everything()), None

    def measure(self, side: Side, run: Callable[[], tuple[float, float | None]]) -> None:
        # The statistics queries stay outside the CPU readings they would add to.
        before_flushes = wal_flushes(self.url, self.all_stores)
        before_server = server_cpu(self.server_pid)
        lanes = lane_threads()
        main = threading.main_thread()
        before_lanes = sum(thread_cpu(t) for t in lanes)
        before_main = thread_cpu(main)
        before_process = time.process_time()
        elapsed, callers = run()
        process = time.process_time() - before_process
        loop = thread_cpu(main) - before_main
        if callers is None:
            callers = sum(thread_cpu(t) for t in lanes) - before_lanes
        server = server_cpu(self.server_pid) - before_server
        flushes = wal_flushes(self.url, self.all_stores) - before_flushes
        heartbeats = len(self.run_ids) * self.beats
        side.rates.append(heartbeats / elapsed)
        side.process.append(process / heartbeats)
        side.loop.append(loop / heartbeats)
        side.callers.append(callers / heartbeats)
        side.server.append(server / heartbeats)
        side.flushes.append(flushes / heartbeats)

    def close(self) -> None:
        self.loop.run_until_complete(self.astore.close())
        self.loop.close()
        for store in self.sync_stores:
            store.close()


def _us(values: list[float]) -> str:
    return f"{statistics.median(values) * 1e6:>9.0f}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000, help="runs, and tasks on the async side")
    parser.add_argument("--beats", type=int, default=5, help="heartbeats per run per measurement")
    parser.add_argument("--rounds", type=int, default=7, help="timed (sync, async) pairs")
    parser.add_argument("--pool", type=int, default=8, help="connections (threads) per side")
    parser.add_argument("--pin", action="store_true", help="the server on a core of its own")
    args = parser.parse_args(argv)
    print(f"load before: {load()}")
    cluster = _postgres.Cluster(fsync=True)
    server = _postgres.Server(cluster.url, cluster)
    bench = None
    try:
        url = server.fresh_database()
        with psycopg.connect(url, autocommit=True) as setup:
            row = setup.execute(
                "SELECT current_setting('server_version'), current_setting('fsync'), "
                "current_setting('synchronous_commit'), current_setting('full_page_writes')"
            ).fetchone()
        assert row is not None
        print(
            f"PostgreSQL {row[0]}, unix socket, fsync={row[1]}, synchronous_commit={row[2]}, "
            f"full_page_writes={row[3]}; {os.cpu_count()} cores"
        )
        assert cluster._process is not None
        if args.pin:
            print(pin(cluster._process.pid))
        bench = Bench(url, cluster._process.pid, args.runs, args.beats, args.pool)
        print(
            f"{args.runs} runs x {args.beats} heartbeats per measurement; async: "
            f"{args.runs} tasks on one AsyncRunStore, pool_size={args.pool}; "
            f"sync: {args.pool} threads, a store (one connection) each"
        )
        sync, async_, native = Side(), Side(), Side()
        bench.measure(Side(), bench.run_sync)  # warm-up, untimed
        bench.measure(Side(), bench.run_async)
        bench.measure(Side(), bench.run_native)
        print(
            f"{'round':>5}{'sync hb/s':>11}{'async hb/s':>12}{'native hb/s':>13}"
            f"{'async/sync':>12}{'native/sync':>13}  load"
        )
        for round_ in range(args.rounds):
            bench.measure(sync, bench.run_sync)
            bench.measure(async_, bench.run_async)
            bench.measure(native, bench.run_native)
            print(
                f"{round_ + 1:>5}{sync.rates[-1]:>11.0f}{async_.rates[-1]:>12.0f}"
                f"{native.rates[-1]:>13.0f}{async_.rates[-1] / sync.rates[-1]:>12.2f}"
                f"{native.rates[-1] / sync.rates[-1]:>13.2f}  {os.getloadavg()[0]:.2f}"
            )
        for name, side in (("async", async_), ("native", native)):
            ratios = sorted(a / s for a, s in zip(side.rates, sync.rates, strict=True))
            print(
                f"{name}/sync: median {statistics.median(ratios):.2f}, "
                f"min {ratios[0]:.2f}, max {ratios[-1]:.2f} over {len(ratios)} rounds"
                + (" (acceptance: median >= 0.9)" if name == "async" else "")
            )
        print(
            f"heartbeats/s, median: sync {statistics.median(sync.rates):.0f}, "
            f"async {statistics.median(async_.rates):.0f}, "
            f"native {statistics.median(native.rates):.0f}"
        )
        print("CPU microseconds per heartbeat (median of the rounds), WAL flushes per heartbeat:")
        print(
            f"{'side':<7}{'process':>9}{'main':>9}{'callers':>9}{'server':>9}{'flushes':>9}"
            "   (main: the event loop's thread; callers: the lanes / the 8 threads)"
        )
        for name, side in (("sync", sync), ("async", async_), ("native", native)):
            print(
                f"{name:<7}{_us(side.process)}{_us(side.loop)}{_us(side.callers)}"
                f"{_us(side.server)}{statistics.median(side.flushes):>9.2f}"
            )
    finally:
        if bench is not None:
            bench.close()
        server.close()
        cluster.stop()
    print(f"load after: {load()}")


if __name__ == "__main__":
    main()
