"""Where a PostgreSQL store call's time goes, beside the raw baseline.

For ``heartbeat`` and ``claim_and_own`` on the one-round-trip path, each
round of the loop times, interleaved (so all see the same load):

- ``store``: the store call, as a user makes it;
- ``statement``: the same server-side function call the store sends, with
  the same arguments, sent by a bare psycopg connection in autocommit (one
  round trip and the server's work, no runstore Python);
- ``raw``: the baseline of ``postgres_throughput.py`` (the 4-statement
  compare-and-swap in five round trips);
- ``trip``: an empty round trip (``SELECT 1``).

So ``store - statement`` is runstore's Python (admission, the transaction
runner, decoding the answer) and ``statement - trip`` is the server's work.
Medians in microseconds; nothing here is a timed assertion.

Run: ``python benchmarks/postgres_breakdown.py [--calls N]``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import psycopg
from postgres_throughput import _RAW_SCHEMA, OWNER, PENDING, STATE, Baseline, open_store

from runstore import ManualClock
from runstore.postgres import _fused
from runstore.stateful._targets import _postgres


def _timed(fn: Callable[[int], Any], i: int) -> float:
    started = time.perf_counter()
    fn(i)
    return time.perf_counter() - started


def breakdown(url: str, calls: int) -> None:
    clock = ManualClock(0)
    store: Any = open_store(url, clock, "fast")
    bare = psycopg.connect(url, autocommit=True, cursor_factory=psycopg.RawCursor)
    baseline = Baseline(url, "breakdown")
    now = clock.now_ms()
    who = (OWNER.host_id, OWNER.pid, OWNER.nonce)

    store.create("beat", STATE)
    store.claim_and_own("beat", PENDING, OWNER, now)
    bare_runs = [f"bare-{i}" for i in range(calls)]
    store_runs = [f"store-{i}" for i in range(calls)]
    for run_id in bare_runs + store_runs:
        store.create(run_id, STATE)
    store._connection.execute("ANALYZE")

    cases: dict[str, tuple[Callable[[int], Any], Callable[[int], Any]]] = {
        "heartbeat": (
            lambda i: store.heartbeat("beat", OWNER, now + 1 + i % 1000),
            lambda i: bare.execute(_fused.RENEW, ("beat", *who, now + 1 + i % 1000, False)),
        ),
        "claim_and_own": (
            lambda i: store.claim_and_own(store_runs[i], PENDING, OWNER, now),
            lambda i: bare.execute(
                _fused.CLAIM_AND_OWN,
                (bare_runs[i], "pending", None, None, None, None, now - 30_000, *who, now, "claim"),
            ),
        ),
    }
    print(
        f"{'operation':<16}{'store':>8}{'statement':>11}{'raw':>8}{'trip':>7}"
        f"{'python':>8}{'server':>8}{'store/raw':>11}"
    )
    for operation, (call, direct) in cases.items():
        times: dict[str, list[float]] = {k: [] for k in ("store", "statement", "raw", "trip")}
        for i in range(calls):
            times["store"].append(_timed(call, i))
            times["statement"].append(_timed(direct, i))
            times["raw"].append(_timed(lambda _: baseline.one(), i))
            times["trip"].append(_timed(lambda _: bare.execute("SELECT 1").fetchone(), i))
        med = {k: statistics.median(v) * 1e6 for k, v in times.items()}
        print(
            f"{operation:<16}{med['store']:>8.0f}{med['statement']:>11.0f}"
            f"{med['raw']:>8.0f}{med['trip']:>7.0f}{med['store'] - med['statement']:>8.0f}"
            f"{med['statement'] - med['trip']:>8.0f}{med['raw'] / med['store']:>11.2f}"
        )
    baseline.close()
    bare.close()
    store.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=500)
    args = parser.parse_args(argv)
    server = _postgres.server()
    url = server.fresh_database()
    with psycopg.connect(url, autocommit=True) as setup:
        setup.execute(_RAW_SCHEMA)
        version = setup.execute("SHOW server_version").fetchone()[0]  # type: ignore[index]
    print(f"PostgreSQL {version}, unix socket; medians of {args.calls} interleaved rounds (us)")
    try:
        breakdown(url, args.calls)
    finally:
        server.drop(url)
        server.close()


if __name__ == "__main__":
    main()
