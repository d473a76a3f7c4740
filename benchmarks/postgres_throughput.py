"""Operations per second of the PostgreSQL store against raw psycopg.

The raw baseline is the SQLite benchmark's 4-statement compare-and-swap
(read the row; update a lease; update the row with RETURNING; append a
fact), written with psycopg on the same server and socket as a careful
application would: ``BEGIN`` sent with the locking read in one pipelined
round trip, then one round trip per statement and one for ``COMMIT``, five
in all, over tables with no triggers or CHECKs.

1. **Per operation, one client**: every store call is followed by the
   baseline transactions it stands for, so both see the same load on a busy
   machine; median latencies are compared per transaction. The database is
   analyzed once the runs are prepared, as autovacuum keeps a live one.
   ``claim_next`` is measured twice: against that baseline, and
   (``claim_next/search``) against one that finds its row first, the oldest
   pending one, with ``FOR UPDATE SKIP LOCKED``, and reads its state, in the
   same five round trips.
2. **Writers on distinct runs**: 1, 2, 4 and 8 client processes, each
   heartbeating its own run (store) or running the baseline on its own row
   (raw); aggregate throughput, and each side's n-client / 1-client ratio
   (the store's should be at least 0.8 of raw's). Sixteen processes start
   once, and the time of each point and side is cut into ``--windows``
   windows, run round by round, the sides in alternating order, so that the
   1-client figures, which every ratio divides by, come from the whole run
   and not from one stretch of it.
3. **Writers on one run**: n processes heartbeat the same run as its owner;
   throughput, p50 and p99 latency, and how many calls raised (none should).
4. **The revision step at commit**: on the general path a write's ``COMMIT``
   is its own round trip, and the revision source's row lock is taken by
   the deferred trigger inside it and released when it returns, so its
   round trip bounds how long that lock is held; printed beside the whole
   transaction's duration (what a counter updated inside the transaction,
   upstream's design, would hold).

``--path`` picks the store's path: ``fast`` (one round trip per operation,
the default for ``SqlConsensus``), ``general`` (every statement of the
shared core, strategy calls through ``tx.connection``) or ``both``.
By default it runs on a cluster of its own with ``fsync`` and
``synchronous_commit`` on: durable, as a server is by default. ``--fast``
runs on the test cluster instead, with both off, where round trips
dominate. (``--durable``, the old way to ask for the default, is kept.)

``--busy`` keeps a busy loop running in a process of its own throughout,
so that the other core is never idle: a round trip then cannot be served by
waking an idle core, on either side.

``--repeat K`` runs parts 1 and 2 K times and ends with each ratio's
median and range over the runs (one run on a shared machine can be off by a
factor of two).

Run: ``python benchmarks/postgres_throughput.py [--calls N] [--seconds S]
[--windows W] [--path fast|general|both] [--fast] [--only 1,2,3,4]
[--repeat K] [--busy]``.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import psycopg

import runstore.postgres
from runstore import LivenessEvidence, ManualClock, OwnerId, RunSnapshot, RunStoreError
from runstore.stateful._targets import _postgres

OWNER = OwnerId("bench-host", 1, "bench-nonce")
THIEF = OwnerId("other-host", 2, "other-nonce")
PENDING = RunSnapshot("pending", None, None)
STATE = '{"step": 1, "items": [1, 2, 3], "note": "' + "x" * 200 + '"}'

#: Operation name -> baseline transactions one call stands for (claim+activate
#: is two transactions; heartbeat_many of 10 runs replaces 10 heartbeats).
OPERATIONS = {
    "create": 1,
    "claim+activate": 2,
    "activate": 1,
    "claim_and_own": 1,
    "claim_next": 1,
    "claim_next/search": 1,
    "heartbeat": 1,
    "reconfirm": 1,
    "heartbeat_many/10": 10,
    "transition_owned": 1,
    "transition_owned/completing": 1,
    "steal": 1,
    "request_cancel": 1,
}

_RAW_SCHEMA = """
CREATE TABLE raw_runs (run_id TEXT PRIMARY KEY, status TEXT NOT NULL,
  owner_host_id TEXT, owner_pid BIGINT, owner_nonce TEXT, heartbeat_at_ms BIGINT,
  state TEXT);
CREATE TABLE raw_leases (run_id TEXT PRIMARY KEY, owner_host_id TEXT, owner_pid BIGINT,
  owner_nonce TEXT, heartbeat_at_ms BIGINT);
CREATE INDEX raw_runs_pending ON raw_runs (run_id) WHERE status = 'pending';
CREATE TABLE raw_facts (run_id TEXT NOT NULL, position BIGINT NOT NULL,
  owner_host_id TEXT, PRIMARY KEY (run_id, position));
"""


class Baseline:
    """Raw psycopg: the 4-statement compare-and-swap in five round trips."""

    def __init__(self, url: str, run_id: str = "run") -> None:
        self.connection = psycopg.connect(url, autocommit=True)
        self.run_id = run_id
        self.connection.execute(
            "INSERT INTO raw_runs VALUES (%s, 'running', %s, %s, %s, 0) ON CONFLICT DO NOTHING",
            (run_id, OWNER.host_id, OWNER.pid, OWNER.nonce),
        )
        self.connection.execute(
            "INSERT INTO raw_leases VALUES (%s, %s, %s, %s, 0) ON CONFLICT DO NOTHING",
            (run_id, OWNER.host_id, OWNER.pid, OWNER.nonce),
        )
        self.now = int(
            self.connection.execute(
                "SELECT COALESCE(MAX(position), 0) FROM raw_facts WHERE run_id = %s", (run_id,)
            ).fetchone()[0]  # type: ignore[index]
        )

    def one(self) -> None:
        connection, run_id = self.connection, self.run_id
        self.now += 1
        owner = (OWNER.host_id, OWNER.pid, OWNER.nonce)
        with connection.pipeline() as pipeline:
            connection.execute("BEGIN")
            connection.execute(
                "SELECT status, owner_host_id, owner_pid, owner_nonce, heartbeat_at_ms "
                "FROM raw_runs WHERE run_id = %s FOR UPDATE",
                (run_id,),
            ).fetchone()  # round trip 1 (with BEGIN)
            renewed = connection.execute(
                "UPDATE raw_leases SET heartbeat_at_ms = %s WHERE run_id = %s "
                "AND owner_host_id = %s AND owner_pid = %s AND owner_nonce = %s",
                (self.now, run_id, *owner),
            )
            pipeline.sync()  # round trip 2
            assert renewed.rowcount == 1
            connection.execute(
                "UPDATE raw_runs SET heartbeat_at_ms = %s WHERE run_id = %s "
                "AND status = 'running' AND owner_host_id = %s AND owner_pid = %s "
                "AND owner_nonce = %s RETURNING 1",
                (self.now, run_id, *owner),
            ).fetchall()  # round trip 3
            connection.execute(
                "INSERT INTO raw_facts VALUES (%s, %s, %s)", (run_id, self.now, OWNER.host_id)
            )
            pipeline.sync()  # round trip 4
            connection.execute("COMMIT")
            pipeline.sync()  # round trip 5

    def batch(self, count: int) -> float:
        started = time.perf_counter()
        for _ in range(count):
            self.one()
        return time.perf_counter() - started

    def close(self) -> None:
        self.connection.close()


class SearchingBaseline:
    """Raw psycopg finding its run: the same compare-and-swap in five round
    trips, whose read takes the first pending row with its state (``FOR
    UPDATE SKIP LOCKED``, over a partial index of the pending rows, as the
    store's search has), then claims it (a lease inserted, the row made
    running, a fact appended). What a careful application writes instead of
    ``claim_next``, which answers the claimed row and its state; one row made
    pending per call it will make."""

    def __init__(self, url: str, prefix: str, count: int) -> None:
        self.connection = psycopg.connect(url, autocommit=True)
        self.now = 0
        with self.connection.cursor() as cursor:
            cursor.executemany(
                "INSERT INTO raw_runs (run_id, status, state) VALUES (%s, 'pending', %s)",
                [(f"{prefix}-{i:06d}", STATE) for i in range(count)],
            )

    def one(self) -> None:
        connection = self.connection
        self.now += 1
        owner = (OWNER.host_id, OWNER.pid, OWNER.nonce)
        with connection.pipeline() as pipeline:
            connection.execute("BEGIN")
            row = connection.execute(
                "SELECT run_id, status, owner_host_id, owner_pid, owner_nonce, heartbeat_at_ms, "
                "state FROM raw_runs WHERE status = 'pending' ORDER BY run_id LIMIT 1 "
                "FOR UPDATE SKIP LOCKED"
            ).fetchone()  # round trip 1 (with BEGIN)
            assert row is not None
            run_id = row[0]
            granted = connection.execute(
                "INSERT INTO raw_leases AS l VALUES (%s, %s, %s, %s, %s) "
                "ON CONFLICT (run_id) DO UPDATE SET owner_host_id = excluded.owner_host_id, "
                "owner_pid = excluded.owner_pid, owner_nonce = excluded.owner_nonce, "
                "heartbeat_at_ms = excluded.heartbeat_at_ms WHERE l.owner_host_id IS NULL",
                (run_id, *owner, self.now),
            )
            pipeline.sync()  # round trip 2
            assert granted.rowcount == 1
            connection.execute(
                "UPDATE raw_runs SET status = 'running', owner_host_id = %s, owner_pid = %s, "
                "owner_nonce = %s, heartbeat_at_ms = %s WHERE run_id = %s "
                "AND status = 'pending' RETURNING 1",
                (*owner, self.now, run_id),
            ).fetchall()  # round trip 3
            connection.execute("INSERT INTO raw_facts VALUES (%s, 1, %s)", (run_id, OWNER.host_id))
            pipeline.sync()  # round trip 4
            connection.execute("COMMIT")
            pipeline.sync()  # round trip 5

    def close(self) -> None:
        self.connection.close()


def open_store(url: str, clock: Any, path: str) -> Any:
    return runstore.postgres.open(url, clock=clock, fast_path=(path == "fast"))


class Subject:
    """The store, with runs prepared so every call of an operation succeeds."""

    made = 0  # subjects so far in this process: a repeated run's runs are new

    def __init__(self, url: str, operation: str, path: str) -> None:
        self.clock = ManualClock(0)
        self.store: Any = open_store(url, self.clock, path)
        self.operation = operation
        self.serial = 0
        Subject.made += 1
        self.prefix = f"{path}-{operation}-{Subject.made}"

    def _fresh(self, count: int) -> list[str]:
        ids = []
        for _ in range(count):
            self.serial += 1
            run_id = f"{self.prefix}-{self.serial}"
            self.store.create(run_id, STATE)
            ids.append(run_id)
        return ids

    def prepare(self, count: int) -> Callable[[int], None]:
        """Runs for ``count`` calls; returns the call (its argument: the call's number)."""
        store, clock, operation = self.store, self.clock, self.operation
        now = clock.now_ms()
        if operation == "create":
            names = [f"{self.prefix}-new-{self.serial + i}" for i in range(count)]
            self.serial += count
            return lambda i: store.create(names[i], STATE)
        if operation in ("heartbeat", "reconfirm", "transition_owned"):
            (owned,) = self._fresh(1)
            store.claim_and_own(owned, PENDING, OWNER, now)
            if operation == "transition_owned":
                return lambda i: store.transition_owned(owned, OWNER, "running", STATE)
            renew = store.heartbeat if operation == "heartbeat" else store.reconfirm
            return lambda i: renew(owned, OWNER, now + i % 1000)
        if operation == "heartbeat_many/10":
            ids = self._fresh(10)
            for run_id in ids:
                store.claim_and_own(run_id, PENDING, OWNER, now)
            return lambda i: store.heartbeat_many(OWNER, ids, now + i % 1000)
        ids = self._fresh(count)
        if operation == "claim+activate":

            def claim_activate(i: int) -> None:
                claimed = store.claim(ids[i], PENDING, OWNER, now)
                store.activate(ids[i], OWNER, claimed.claimed_at_ms, PENDING)

            return claim_activate
        if operation == "activate":  # the claims made here, untimed
            tokens = [store.claim(run_id, PENDING, OWNER, now).claimed_at_ms for run_id in ids]
            return lambda i: store.activate(ids[i], OWNER, tokens[i], PENDING)
        if operation == "claim_and_own":
            return lambda i: store.claim_and_own(ids[i], PENDING, OWNER, now)
        if operation == "transition_owned/completing":
            for run_id in ids:
                store.claim_and_own(run_id, PENDING, OWNER, now)
            return lambda i: store.transition_owned(ids[i], OWNER, "completed", STATE)
        if operation.startswith("claim_next"):
            return lambda i: store.claim_next(OWNER, now)
        if operation == "request_cancel":
            return lambda i: store.request_cancel(ids[i], now)
        if operation == "steal":
            for run_id in ids:
                store.claim_and_own(run_id, PENDING, OWNER, now)
            clock.advance(40_000)
            later = clock.now_ms()
            evidence = LivenessEvidence(OWNER, later, "lease-expired")
            expected = RunSnapshot("running", OWNER, now)
            return lambda i: store.steal(ids[i], expected, THIEF, later, evidence)
        raise AssertionError(operation)

    def close(self) -> None:
        self.store.close()


def _median_us(values: list[float]) -> float:
    return statistics.median(values) * 1e6


def per_operation(url: str, path: str, calls: int) -> dict[str, float]:
    """Each store call alternates with the baseline's transactions (as many as
    the call replaces), so both see the same load; medians are compared.
    Returns each operation's ratio per transaction."""
    print(f"\n1. one client, {path} path ({calls} calls, each followed by the baseline)")
    print(f"{'operation':<20}{'store us':>10}{'raw us/tx':>11}{'store op/s':>12}{'ratio/tx':>10}")
    baseline = Baseline(url, "solo")
    ratios: dict[str, float] = {}
    for operation, transactions in OPERATIONS.items():
        subject = Subject(url, operation, path)
        call = subject.prepare(calls + 5)
        searching = None
        if operation.endswith("/search"):  # the baseline finds its run too
            searching = SearchingBaseline(url, subject.prefix, calls + 5)
        raw = searching.one if searching else baseline.one
        # The planner's statistics of a database in use (autovacuum keeps them).
        subject.store._connection.execute("ANALYZE")
        for i in range(5):
            call(calls + i)  # warm: prepared statements, plpgsql compiled
            raw()
        store_times, raw_times = [], []
        for i in range(calls):
            began = time.perf_counter()
            call(i)
            store_times.append(time.perf_counter() - began)
            began = time.perf_counter()
            for _ in range(transactions):
                raw()
            raw_times.append((time.perf_counter() - began) / transactions)
        subject.close()
        if searching:
            searching.close()
        store_us, raw_us = _median_us(store_times), _median_us(raw_times)
        ratio = ratios[operation] = raw_us * transactions / store_us
        print(
            f"{operation:<20}{store_us:>10.0f}{raw_us:>11.0f}{1e6 / store_us:>12.0f}{ratio:>10.2f}"
        )
    baseline.close()
    return ratios


# -- several client processes ---------------------------------------------------------


def _client_setup(url: str, kind: str, path: str, index: int) -> Callable[[], None]:
    """One client's call: a heartbeat of its run (store; ``-shared``: the one
    run all clients share) or a baseline compare-and-swap on its own row."""
    shared = kind.endswith("-shared")
    run_id = "shared" if shared else f"client-{index}"
    if kind.startswith("raw"):
        return Baseline(url, f"raw-{run_id}").one
    clock = ManualClock(1_000)
    store = open_store(url, clock, path)
    name = f"{path}-{run_id}"
    if not shared or index == 0:
        try:
            store.create(name, "{}")
            store.claim_and_own(name, PENDING, OWNER, 1_000)
        except RunStoreError:
            pass  # made by an earlier point, or by another client
    beat = [1_000]

    def step() -> None:
        beat[0] += 1
        store.heartbeat(name, OWNER, beat[0] % 2_000 + 1_000)

    return step


def _client(
    url: str, kind: str, path: str, index: int, seconds: float, start: Any, out: Any
) -> None:
    """One client process: calls until ``seconds`` pass; reports its count,
    its latencies and its failures."""
    step = _client_setup(url, kind, path, index)
    latencies: list[float] = []
    failures = 0
    start.wait()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        began = time.perf_counter()
        try:
            step()
        except RunStoreError:
            failures += 1
        latencies.append(time.perf_counter() - began)
    out.put((len(latencies), latencies, failures))


def _run_clients(
    url: str, kind: str, path: str, n: int, seconds: float
) -> tuple[float, list[float], int]:
    context = multiprocessing.get_context("spawn")
    start = context.Event()
    out = context.Queue()
    processes = [
        context.Process(target=_client, args=(url, kind, path, i, seconds, start, out))
        for i in range(n)
    ]
    for process in processes:
        process.start()
    if kind.endswith("-shared"):
        time.sleep(0.5)  # let client 0 create the shared run
    time.sleep(1.0)  # imports and connections
    start.set()
    results = [out.get(timeout=seconds + 60) for _ in processes]
    for process in processes:
        process.join(30)
    count = sum(r[0] for r in results)
    latencies = [value for r in results for value in r[1]]
    return count / seconds, latencies, sum(r[2] for r in results)


def serve_windows(
    step: Callable[[], None], pipe: Any, after: Callable[[], object] | None = None
) -> None:
    """A client process's life after its setup: it says ``ready``, then each
    message is a deadline on the shared monotonic clock (None: stop); it
    calls ``step`` until then, calls ``after`` (if given), and answers how
    many calls finished by the deadline, and how many raised."""
    pipe.send("ready")
    while (deadline := pipe.recv()) is not None:
        done = failures = 0
        while time.monotonic() < deadline:
            try:
                step()
            except RunStoreError:
                failures += 1
            if time.monotonic() <= deadline:
                done += 1
        if after is not None:
            after()
        pipe.send((done, failures))


def _window_client(url: str, path: str, kind: str, index: int, pipe: Any) -> None:
    """A client process that stays up for every window (``serve_windows``)."""
    serve_windows(_client_setup(url, kind, path, index), pipe)


class Clients:
    """``most`` client processes of each kind, started once; a window runs the
    first n of one kind for a fixed time while every other client waits.
    Each process runs ``target(*args, kind, index, pipe)``."""

    def __init__(self, target: Callable[..., None], args: tuple[Any, ...], most: int) -> None:
        context = multiprocessing.get_context("spawn")
        self.pipes: dict[str, list[Any]] = {"store": [], "raw": []}
        self.processes: list[Any] = []
        for kind, pipes in self.pipes.items():
            for index in range(most):
                ours, theirs = context.Pipe()
                process = context.Process(target=target, args=(*args, kind, index, theirs))
                process.start()
                self.processes.append(process)
                pipes.append(ours)
        for pipes in self.pipes.values():
            for pipe in pipes:
                if not pipe.poll(120) or pipe.recv() != "ready":
                    raise RuntimeError("a client process did not start")

    def window(self, kind: str, n: int, seconds: float) -> tuple[int, int]:
        """Calls done by n clients of ``kind`` in ``seconds``, and calls that raised."""
        pipes = self.pipes[kind][:n]
        deadline = time.monotonic() + seconds
        for pipe in pipes:
            pipe.send(deadline)
        answers = []
        for pipe in pipes:
            if not pipe.poll(seconds + 60):
                raise RuntimeError("a client process did not answer")
            answers.append(pipe.recv())
        return sum(a[0] for a in answers), sum(a[1] for a in answers)

    def close(self) -> None:
        for pipes in self.pipes.values():
            for pipe in pipes:
                pipe.send(None)
        for process in self.processes:
            process.join(30)


COUNTS = (1, 2, 4, 8)


def scaling(url: str, path: str, seconds: float, windows: int) -> dict[str, float]:
    """Each point's time is cut into ``windows`` windows, and every round runs
    one window of each point and kind, the kinds in alternating order: both
    sides' 1-client figures (every ratio's denominator) are taken throughout
    the run, not in one stretch of it. The processes start once, before the
    first window, and one short round warms everything up and is dropped."""
    window = seconds / windows
    print(
        f"\n2. writers on distinct runs, {path} path ({seconds:g} s per point and side, "
        f"in {windows} interleaved windows)"
    )
    header = ("clients", 8), ("store tx/s", 12), ("raw tx/s", 12), ("store n/1", 11)
    print("".join(f"{name:>{width}}" for name, width in (*header, ("raw n/1", 9), ("ratio", 8))))
    clients = Clients(_window_client, (url, path), max(COUNTS))
    done = {(kind, n): 0 for kind in ("store", "raw") for n in COUNTS}
    per_round: list[dict[tuple[str, int], int]] = []
    failed = dict.fromkeys(COUNTS, 0)
    try:
        for round_ in range(-1, windows):
            this_round = {}
            for position, n in enumerate(COUNTS):
                kinds = ("store", "raw") if (round_ + position) % 2 == 0 else ("raw", "store")
                for kind in kinds:
                    calls, raised = clients.window(kind, n, window if round_ >= 0 else 0.1)
                    this_round[(kind, n)] = calls
                    if round_ >= 0 and kind == "store":
                        failed[n] += raised
            if round_ >= 0:
                per_round.append(this_round)
                for key, calls in this_round.items():
                    done[key] += calls
    finally:
        clients.close()

    def ratio(counts: dict[tuple[str, int], int], n: int) -> float:
        store = counts[("store", n)] / counts[("store", 1)]
        return store / (counts[("raw", n)] / counts[("raw", 1)])

    ratios: dict[str, float] = {}
    for n in COUNTS:
        store, raw = done[("store", n)] / seconds, done[("raw", n)] / seconds
        s_ratio = done[("store", n)] / done[("store", 1)]
        r_ratio = done[("raw", n)] / done[("raw", 1)]
        ratios[f"{n} clients: n/1 against raw's"] = s_ratio / r_ratio
        rounds = sorted(ratio(counts, n) for counts in per_round)
        print(
            f"{n:>8}{store:>12.0f}{raw:>12.0f}{s_ratio:>11.2f}{r_ratio:>9.2f}"
            f"{s_ratio / r_ratio:>8.2f}"
            + (f"  (one round: {rounds[0]:.2f} to {rounds[-1]:.2f})" if n > 1 else "")
            + (f"  ({failed[n]} failed)" if failed[n] else "")
        )
    return ratios


def summary(path: str, runs: list[dict[str, float]]) -> None:
    """Each ratio's median over the repeated runs, with its range: on a
    shared machine one run's ratio can be off by a factor of two."""
    print(f"\nratios over {len(runs)} runs, {path} path: median (min to max)")
    for name in runs[0]:
        values = [run[name] for run in runs]
        low, mid, high = min(values), statistics.median(values), max(values)
        print(f"{name:<34}{mid:>6.2f}  ({low:.2f} to {high:.2f})")


def one_run(url: str, path: str, seconds: float) -> None:
    print(f"\n3. writers on one run (heartbeats by its owner), {path} path")
    print(f"{'clients':>8}{'tx/s':>10}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}{'errors':>8}")
    for n in COUNTS:
        rate, latencies, failures = _run_clients(url, f"store-{n}-shared", path, n, seconds)
        ordered = sorted(latencies)
        p50 = ordered[len(ordered) // 2] * 1000
        p99 = ordered[int(len(ordered) * 0.99)] * 1000
        print(f"{n:>8}{rate:>10.0f}{p50:>9.2f}{p99:>9.2f}{ordered[-1] * 1000:>9.2f}{failures:>8}")


def revision_step(url: str, count: int) -> None:
    """COMMIT round trip (bounds the revision lock's hold) vs the whole write."""
    print("\n4. the revision step at commit (general path heartbeats, microseconds)")
    clock = ManualClock(0)
    store: Any = open_store(url, clock, "general")
    store.create("rev", "{}")
    store.claim_and_own("rev", PENDING, OWNER, 0)
    commits: list[float] = []
    whole: list[float] = []
    from runstore.postgres import _tx

    original = _tx._raw

    def timed(connection: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        if query == "COMMIT":
            began = time.perf_counter()
            result = original(connection, query, *args, **kwargs)
            commits.append(time.perf_counter() - began)
            return result
        return original(connection, query, *args, **kwargs)

    _tx._raw = timed  # the manager's BEGIN and COMMIT go through it
    try:
        for step in range(count):
            began = time.perf_counter()
            store.heartbeat("rev", OWNER, step % 1000)
            whole.append(time.perf_counter() - began)
    finally:
        _tx._raw = original
    store.close()

    def q(values: list[float], fraction: float) -> float:
        ordered = sorted(values)
        return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))] * 1e6

    print(f"{'':<28}{'p50':>8}{'p99':>8}{'max':>8}")
    for label, values in (("COMMIT (lock held within)", commits), ("whole transaction", whole)):
        print(f"{label:<28}{q(values, 0.5):>8.0f}{q(values, 0.99):>8.0f}{q(values, 1.0):>8.0f}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument(
        "--windows", type=int, default=5, help="part 2: interleaved windows per point and side"
    )
    parser.add_argument("--path", choices=["fast", "general", "both"], default="both")
    parser.add_argument("--durable", action="store_true", help="the default: fsync on")
    parser.add_argument("--fast", action="store_true", help="fsync and synchronous_commit off")
    parser.add_argument("--only", default="1,2,3,4")
    parser.add_argument(
        "--repeat", type=int, default=1, help="run parts 1 and 2 this many times, then summarize"
    )
    parser.add_argument("--busy", action="store_true", help="a busy loop on the other core")
    args = parser.parse_args(argv)
    parts = set(args.only.split(","))
    busy = None
    if args.busy:
        busy = multiprocessing.get_context("spawn").Process(target=_spin, daemon=True)
        busy.start()
    cluster = None
    if not args.fast:
        cluster = _postgres.Cluster(fsync=True)
        server = _postgres.Server(cluster.url, cluster)
    else:
        server = _postgres.server()
    url = server.fresh_database()
    with psycopg.connect(url, autocommit=True) as setup:
        setup.execute(_RAW_SCHEMA)
        version = setup.execute("SHOW server_version").fetchone()[0]  # type: ignore[index]
        durable = setup.execute("SHOW synchronous_commit").fetchone()[0]  # type: ignore[index]
    print(
        f"PostgreSQL {version}, unix socket, synchronous_commit={durable}"
        + (", a busy loop on the other core" if args.busy else "")
        + f"; load {os.getloadavg()[0]:.1f} at the start"
    )
    paths = ["fast", "general"] if args.path == "both" else [args.path]
    try:
        for path in paths:
            runs: list[dict[str, float]] = [{} for _ in range(args.repeat)]
            for run in runs:
                if "1" in parts:
                    run.update(per_operation(url, path, args.calls))
                if "2" in parts:
                    run.update(scaling(url, path, args.seconds, args.windows))
            if args.repeat > 1 and runs[0]:
                summary(path, runs)
            if "3" in parts:
                one_run(url, path, args.seconds)
        if "4" in parts:
            revision_step(url, args.calls * 3)
    finally:
        server.drop(url)
        server.close()
        if cluster is not None:
            cluster.stop()
        if busy is not None:
            busy.terminate()
            busy.join(10)


def _spin() -> None:  # pragma: no cover - runs in its own process
    while True:
        pass


if __name__ == "__main__":
    main()
