"""How long does a write wait when several processes share one file?

N processes each create runs and heartbeat them on one WAL file
(``synchronous=FULL``) as fast as they can. Every operation's latency is
recorded; the script prints the median, the 99th percentile and the worst
wait, and how many operations failed. The transaction manager keeps SQLite's
own busy wait short and retries with jitter inside a 5 s budget, so the worst
wait should stay far below the 19 000 ms write tolerance, and nothing should
fail.

Run: ``python benchmarks/contention.py [--processes N] [--seconds S]``.
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import runstore
from runstore import ManualClock, OwnerId, RunSnapshot, RunStoreError


def worker(path: str, index: int, seconds: float, results: Any) -> None:
    owner = OwnerId(f"host-{index}", index, "nonce")
    clock = ManualClock(1_000)
    latencies: list[float] = []
    failures = 0
    with runstore.open(path, clock=clock) as store:
        run_id = f"run-{index}"
        store.create(run_id, '{"n": 0}')
        store.claim_and_own(run_id, RunSnapshot("pending", None, None), owner, 1_000)
        deadline = time.monotonic() + seconds
        now = 1_000
        while time.monotonic() < deadline:
            now += 1
            clock.set(now)
            started = time.perf_counter()
            try:
                if now % 10 == 0:
                    store.transition_owned(run_id, owner, "running", f'{{"n": {now}}}')
                else:
                    store.heartbeat(run_id, owner, now)
            except RunStoreError:
                failures += 1
            latencies.append(time.perf_counter() - started)
    results.put((latencies, failures))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args(argv)
    context = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "shared.db")
        runstore.open(path).close()
        results = context.Queue()
        processes = [
            context.Process(target=worker, args=(path, i, args.seconds, results))
            for i in range(args.processes)
        ]
        for process in processes:
            process.start()
        collected = [results.get() for _ in processes]
        for process in processes:
            process.join()
    latencies = sorted(value for values, _ in collected for value in values)
    failures = sum(count for _, count in collected)
    p99 = latencies[int(len(latencies) * 0.99) - 1]
    print(
        f"{args.processes} processes, {len(latencies)} writes in {args.seconds:.0f} s "
        f"({len(latencies) / args.seconds:.0f}/s in all), {failures} failed"
    )
    print(
        f"latency ms: median {statistics.median(latencies) * 1000:.2f}, "
        f"p99 {p99 * 1000:.2f}, worst {latencies[-1] * 1000:.1f} (tolerance 19000)"
    )


if __name__ == "__main__":
    main()
