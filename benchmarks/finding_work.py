"""Finding work and renewing leases at scale, against raw baselines measured in the same run.

Four measurements (issue 13), each printing its figures and ratios and never
asserting (timings are not tests):

- ``heartbeat-many``: ``heartbeat_many`` of 10 000 leases of one owner on one
  SQLite file (WAL, ``synchronous=FULL``) against raw sqlite3 updating the
  same 10 000 lease rows of a plain table one statement each in one
  transaction; the same on PostgreSQL against psycopg. Target: >= 0.3x.
- ``claim-next``: 1, 2 and 4 worker processes draining 10 000 runs with
  ``claim_next``: claims per second, and a check that no run was taken twice
  and none was left (SQLite file and PostgreSQL).
- ``list-runs``: a page of 100 of each hot filter out of 10^6 runs against the
  same page out of 10^3. Target: >= 0.8x.
- ``growth``: ``heartbeat`` and ``claim_and_own`` per second at 10^6 runs
  against 10^3, next to a raw 4-statement compare-and-swap's own growth on the
  same files (WAL, ``synchronous=NORMAL``, so the B-trees and not the fsync
  are measured). Target: the store's ratio >= 0.8x the raw one's.

Fixtures of many runs are built in one bulk transaction of raw SQL (the run
rows, their state, leases and facts; on PostgreSQL also their change entries,
with the revision triggers off for the load) and then checked with
``check_invariants()``, so a benchmark never measures a store the library
would call corrupt. Batches are interleaved between the subjects compared,
and medians of several rounds are reported.

Run: ``python benchmarks/finding_work.py [heartbeat-many|claim-next|list-runs|growth]
[--rounds N] [--postgres URL|--no-postgres] [--fast]``. Without ``--postgres`` a
throwaway PostgreSQL cluster is started when the binaries are on PATH, durable
(``fsync`` and ``synchronous_commit`` on) unless ``--fast`` asks for the test
cluster's settings; ``--no-postgres`` skips it.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import runstore
from runstore import ManualClock, OwnerId, RunSnapshot

OWNER = OwnerId("bench-host", 1, "bench-nonce")
THIEF = OwnerId("thief-host", 2, "thief-nonce")
PENDING = RunSnapshot("pending", None, None)
START_MS = 1_000_000


def median(values: list[float]) -> float:
    return statistics.median(values)


# -- bulk fixtures -------------------------------------------------------------------


def _sqlite_rows(
    count: int, *, running: int = 0, pending: int = 0, claimed: int = 0, prefix: str = "run"
) -> Iterator[tuple[Any, ...]]:
    """(run_id, status, created, started, finished, owner..., heartbeat, claim..., claimed_at)
    for ``count`` runs: the first ``running`` owned by OWNER, then ``pending``
    unclaimed, then ``claimed`` pending runs claimed by THIEF, the rest completed."""
    for number in range(count):
        rid = f"{prefix}-{number:07d}"
        created = START_MS + number
        if number < running:
            yield (rid, "running", created, created, None, *_who(OWNER), created, *_NOBODY)
        elif number < running + pending:
            yield (rid, "pending", created, None, None, *_NOBODY, *_NOBODY)
        elif number < running + pending + claimed:
            yield (rid, "pending", created, None, None, *_NOBODY, *_who(THIEF), created)
        else:
            yield (rid, "completed", created, created, created + 1, *_NOBODY, *_NOBODY)


#: No owner (or no claim): its host, pid, nonce and instant all NULL.
_NOBODY = (None, None, None, None)


def _who(owner: OwnerId) -> tuple[str, int, str]:
    return (owner.host_id, owner.pid, owner.nonce)


_INSERT_RUN = """
INSERT INTO flows_runs (run_id, status, created_at_ms, started_at_ms, finished_at_ms,
  owner_host_id, owner_pid, owner_nonce, heartbeat_at_ms,
  claim_host_id, claim_pid, claim_nonce, claimed_at_ms)
VALUES ({})
"""


def populate(store: Any, rows: list[tuple[Any, ...]]) -> None:
    """Insert ``rows`` (see ``_sqlite_rows``) with their state, leases and facts
    in one transaction of the store's own connection, then check the store."""
    postgres = store.dialect == "postgresql"
    marks = ", ".join(f"${n}" if postgres else f"?{n}" for n in range(1, 14))
    run = _INSERT_RUN.format(marks)
    p = (lambda n: f"${n}") if postgres else (lambda n: f"?{n}")
    state = f"INSERT INTO flows_run_state (run_id, state_json) VALUES ({p(1)}, '{{}}')"
    lease = (
        "INSERT INTO flows_consensus_leases (run_id, owner_host_id, owner_pid, owner_nonce, "
        "granted_at_ms, heartbeat_at_ms, claim_host_id, claim_pid, claim_nonce, claimed_at_ms) "
        f"VALUES ({', '.join(p(n) for n in range(1, 11))})"
    )
    fact = (
        "INSERT INTO flows_ownership_facts (run_id, position, transition, owner_host_id, "
        f"owner_pid, owner_nonce, granted_at_ms) VALUES ({p(1)}, 1, {p(2)}, {p(3)}, {p(4)}, "
        f"{p(5)}, {p(6)})"
    )

    def body(tx: Any) -> None:
        connection = tx.connection
        cursor = connection.cursor()
        if postgres:
            cursor.execute("ALTER TABLE flows_runs DISABLE TRIGGER USER")
        cursor.executemany(run, rows)
        cursor.executemany(state, [(row[0],) for row in rows])
        leases = [
            (row[0], row[5], row[6], row[7], row[8], row[8], row[9], row[10], row[11], row[12])
            for row in rows
            if row[5] is not None or row[9] is not None
        ]
        cursor.executemany(lease, leases)
        facts = [(row[0], "activated", *row[5:8], row[8]) for row in rows if row[5] is not None]
        facts += [(row[0], "claimed", *row[9:12], row[12]) for row in rows if row[9] is not None]
        cursor.executemany(fact, facts)
        if postgres:
            cursor.execute("ALTER TABLE flows_runs ENABLE TRIGGER USER")
            cursor.execute(
                "INSERT INTO flows_run_changes (run_id, revision, deleted) "
                "SELECT run_id, (SELECT revision FROM flows_run_source) "
                "+ ROW_NUMBER() OVER (ORDER BY run_id), 0 FROM flows_runs "
                "WHERE run_id NOT IN (SELECT run_id FROM flows_run_changes)"
            )
            cursor.execute(
                "UPDATE flows_run_source "
                "SET revision = (SELECT MAX(revision) FROM flows_run_changes)"
            )

    store._write("bench-fixture", body)
    if postgres:
        store._connection.execute("ANALYZE")
    store.check_invariants()


def bulk(store: Any, size: int, *, running: int = 0, pending: int = 0, claimed: int = 0) -> None:
    """``size`` runs as ``_sqlite_rows`` lays them out, in one transaction:
    by ``executemany`` on SQLite, generated by the server on PostgreSQL."""
    if store.dialect != "postgresql":
        populate(store, list(_sqlite_rows(size, running=running, pending=pending, claimed=claimed)))
        return
    a, b, c = running, running + pending, running + pending + claimed
    owner = "'bench-host', 1, 'bench-nonce'"
    thief = "'thief-host', 2, 'thief-nonce'"
    created = f"{START_MS} + g"
    statements = [
        "ALTER TABLE flows_runs DISABLE TRIGGER USER",
        f"""INSERT INTO flows_runs (run_id, status, created_at_ms, started_at_ms, finished_at_ms,
              owner_host_id, owner_pid, owner_nonce, heartbeat_at_ms,
              claim_host_id, claim_pid, claim_nonce, claimed_at_ms)
            SELECT 'run-' || lpad(g::text, 7, '0'),
              CASE WHEN g < {a} THEN 'running' WHEN g < {c} THEN 'pending' ELSE 'completed' END,
              {created},
              CASE WHEN g < {a} OR g >= {c} THEN {created} END,
              CASE WHEN g >= {c} THEN {created} + 1 END,
              CASE WHEN g < {a} THEN 'bench-host' END, CASE WHEN g < {a} THEN 1 END,
              CASE WHEN g < {a} THEN 'bench-nonce' END, CASE WHEN g < {a} THEN {created} END,
              CASE WHEN g >= {b} AND g < {c} THEN 'thief-host' END,
              CASE WHEN g >= {b} AND g < {c} THEN 2 END,
              CASE WHEN g >= {b} AND g < {c} THEN 'thief-nonce' END,
              CASE WHEN g >= {b} AND g < {c} THEN {created} END
            FROM generate_series(0, {size - 1}) AS g""",
        "INSERT INTO flows_run_state (run_id, state_json) SELECT run_id, '{}' FROM flows_runs",
        f"""INSERT INTO flows_consensus_leases (run_id, owner_host_id, owner_pid, owner_nonce,
              granted_at_ms, heartbeat_at_ms)
            SELECT run_id, {owner}, heartbeat_at_ms, heartbeat_at_ms FROM flows_runs
            WHERE status = 'running'""",
        """INSERT INTO flows_consensus_leases (run_id, claim_host_id, claim_pid, claim_nonce,
              claimed_at_ms)
            SELECT run_id, claim_host_id, claim_pid, claim_nonce, claimed_at_ms FROM flows_runs
            WHERE claim_host_id IS NOT NULL""",
        f"""INSERT INTO flows_ownership_facts (run_id, position, transition, owner_host_id,
              owner_pid, owner_nonce, granted_at_ms)
            SELECT run_id, 1, 'activated', {owner}, heartbeat_at_ms FROM flows_runs
            WHERE status = 'running'""",
        f"""INSERT INTO flows_ownership_facts (run_id, position, transition, owner_host_id,
              owner_pid, owner_nonce, granted_at_ms)
            SELECT run_id, 1, 'claimed', {thief}, claimed_at_ms FROM flows_runs
            WHERE claim_host_id IS NOT NULL""",
        "ALTER TABLE flows_runs ENABLE TRIGGER USER",
        """INSERT INTO flows_run_changes (run_id, revision, deleted)
            SELECT run_id, ROW_NUMBER() OVER (ORDER BY run_id), 0 FROM flows_runs""",
        "UPDATE flows_run_source SET revision = (SELECT MAX(revision) FROM flows_run_changes)",
    ]

    def body(tx: Any) -> None:
        for statement in statements:
            tx.connection.execute(statement)

    store._write("bench-fixture", body)
    store._connection.execute("ANALYZE")
    # check_invariants reads every row in one snapshot; the test server's
    # idle-in-transaction limit is shorter than decoding 10^6 rows takes.
    store._connection.execute("SET idle_in_transaction_session_timeout = 0")
    store.check_invariants()


# -- PostgreSQL ------------------------------------------------------------------------


@contextmanager
def postgres_urls(
    explicit: str | None, wanted: bool, fast: bool = False
) -> Iterator[Callable[[], str] | None]:
    """A factory of fresh database URLs, or None without PostgreSQL: on a
    durable cluster of its own (``fsync`` and ``synchronous_commit`` on, a
    server's defaults), or with ``fast`` on the test cluster (both off)."""
    if not wanted:
        yield None
        return
    if explicit is not None:
        yield lambda: explicit
        return
    try:
        from runstore.stateful._targets import _postgres

        if fast:
            server = _postgres.server()
        else:
            cluster = _postgres.Cluster(fsync=True)
            server = _postgres.Server(cluster.url, cluster)
    except Exception as why:  # no binaries, no server
        print(f"(PostgreSQL skipped: {type(why).__name__}: {why})")
        yield None
        return
    made: list[str] = []

    def fresh() -> str:
        url = server.fresh_database()
        made.append(url)
        return url

    try:
        yield fresh
    finally:
        for url in made:
            with contextlib.suppress(Exception):
                server.drop(url)
        if not fast:
            server.close()
            cluster.stop()


# -- (1) heartbeat_many ------------------------------------------------------------------


class RawSqliteLeases:
    """10 000 lease rows, each updated by its own statement, one transaction."""

    def __init__(self, path: Path, ids: list[str]) -> None:
        self.connection = sqlite3.connect(path, isolation_level=None)
        for pragma in ("journal_mode = WAL", "synchronous = FULL"):
            self.connection.execute(f"PRAGMA {pragma}")
        self.connection.execute(
            "CREATE TABLE leases (run_id TEXT PRIMARY KEY, owner_host_id TEXT, owner_pid INTEGER, "
            "owner_nonce TEXT, heartbeat_at_ms INTEGER) WITHOUT ROWID"
        )
        self.connection.executemany(
            "INSERT INTO leases VALUES (?, ?, ?, ?, 0)", [(rid, *_who(OWNER)) for rid in ids]
        )
        self.ids = ids

    def renew(self, now: int) -> None:
        execute = self.connection.execute
        execute("BEGIN IMMEDIATE")
        for rid in self.ids:
            execute(
                "UPDATE leases SET heartbeat_at_ms = MAX(heartbeat_at_ms, ?) WHERE run_id = ? "
                "AND owner_host_id = ? AND owner_pid = ? AND owner_nonce = ?",
                (now, rid, *_who(OWNER)),
            )
        execute("COMMIT")


class RawPostgresLeases:
    def __init__(self, url: str, ids: list[str]) -> None:
        import psycopg

        self.connection = psycopg.connect(url, autocommit=True)
        self.connection.execute(
            'CREATE TABLE raw_leases (run_id TEXT COLLATE "C" PRIMARY KEY, owner_host_id TEXT, '
            "owner_pid BIGINT, owner_nonce TEXT, heartbeat_at_ms BIGINT) WITH (fillfactor = 80)"
        )
        with self.connection.cursor() as cursor:
            cursor.executemany(
                "INSERT INTO raw_leases VALUES (%s, %s, %s, %s, 0)",
                [(rid, *_who(OWNER)) for rid in ids],
            )
        self.ids = ids

    def renew(self, now: int) -> None:
        execute = self.connection.execute
        execute("BEGIN")
        for rid in self.ids:
            execute(
                "UPDATE raw_leases SET heartbeat_at_ms = GREATEST(heartbeat_at_ms, %s) "
                "WHERE run_id = %s AND owner_host_id = %s AND owner_pid = %s AND owner_nonce = %s",
                (now, rid, *_who(OWNER)),
            )
        execute("COMMIT")


def bench_heartbeat_many(rounds: int, urls: Callable[[], str] | None, count: int = 10_000) -> None:
    print(f"\n(1) heartbeat_many of {count} leases vs raw one-statement-each updates")
    print(f"{'backend':<12}{'store s':>10}{'raw s':>10}{'raw/store':>11}  (target >= 0.3)")
    ids = [f"run-{number:07d}" for number in range(count)]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        clock = ManualClock(START_MS + count + 10)
        store = runstore.open(folder / "store.db", clock=clock)
        populate(store, list(_sqlite_rows(count, running=count)))
        raw = RawSqliteLeases(folder / "raw.db", ids)
        _compare_renewals("sqlite", store, raw, clock, rounds, ids)
        store.close()
        raw.connection.close()
    if urls is not None:
        clock = ManualClock(START_MS + count + 10)
        store = runstore.open(urls(), clock=clock)
        bulk(store, count, running=count)
        raw_pg = RawPostgresLeases(urls(), ids)
        _compare_renewals("postgresql", store, raw_pg, clock, rounds, ids)
        store.close()
        raw_pg.connection.close()


def _compare_renewals(
    name: str, store: Any, raw: Any, clock: ManualClock, rounds: int, ids: list[str]
) -> None:
    store_times, raw_times = [], []
    for _ in range(rounds + 1):  # the first round warms caches and is dropped
        clock.advance(1_000)
        now = clock.now_ms()
        started = time.perf_counter()
        answers = store.heartbeat_many(OWNER, ids, now)
        store_times.append(time.perf_counter() - started)
        assert len(answers) == len(ids)
        assert all(type(a).__name__ == "Updated" for a in answers.values())
        started = time.perf_counter()
        raw.renew(now)
        raw_times.append(time.perf_counter() - started)
    s, r = median(store_times[1:]), median(raw_times[1:])
    store.check_invariants()
    print(f"{name:<12}{s:>10.3f}{r:>10.3f}{r / s:>11.2f}")


# -- (2) claim_next ----------------------------------------------------------------------


def _drain(target: str, index: int, start: Any, out: Any) -> None:
    owner = OwnerId(f"worker-{index}", 100 + index, f"n{index}")
    clock = runstore.SystemClock()
    taken = []
    with runstore.open(target, clock=clock) as store:
        start.wait()
        while (row := store.claim_next(owner, clock.now_ms())) is not None:
            taken.append(row.run_id)
    out.put(taken)


def bench_claim_next(urls: Callable[[], str] | None, count: int = 10_000) -> None:
    print(f"\n(2) claim_next draining {count} runs with worker processes")
    print(f"{'backend':<12}{'workers':>8}{'claims/s':>10}{'seconds':>9}  taken twice / left")
    context = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory() as tmp:
        for workers in (1, 2, 4):
            targets: list[tuple[str, str]] = [("sqlite", str(Path(tmp) / f"drain-{workers}.db"))]
            if urls is not None:
                targets.append(("postgresql", urls()))
            for name, target in targets:
                with runstore.open(target, clock=ManualClock(START_MS)) as store:
                    bulk(store, count, pending=count)
                start = context.Barrier(workers + 1)
                out = context.Queue()
                processes = [
                    context.Process(target=_drain, args=(target, index, start, out))
                    for index in range(workers)
                ]
                for process in processes:
                    process.start()
                start.wait()
                began = time.perf_counter()
                taken = [rid for _ in processes for rid in out.get()]
                elapsed = time.perf_counter() - began
                for process in processes:
                    process.join()
                twice = len(taken) - len(set(taken))
                left = count - len(set(taken))
                with runstore.open(target, clock=ManualClock(START_MS)) as store:
                    store.check_invariants()
                print(
                    f"{name:<12}{workers:>8}{count / elapsed:>10.0f}{elapsed:>9.2f}  "
                    f"{twice} / {left}"
                )


# -- (3) list_runs ------------------------------------------------------------------------


HOT = {
    "all": {},
    "status=running": {"status": "running"},
    "status=pending,suspended": {"status": ("pending", "suspended")},
    "claimable": {"claimable_at": START_MS},
    "stale": {"stale_at": START_MS + 10_000_000},
    "claim_stale": {"claim_stale_at": START_MS + 10_000_000},
}


def bench_list_runs(rounds: int, urls: Callable[[], str] | None) -> None:
    print("\n(3) list_runs: a page of 100 out of 10^6 runs vs out of 10^3")
    print(f"{'backend':<12}{'filter':<26}{'10^3 ms':>9}{'10^6 ms':>9}{'ratio':>7}  (target >= 0.8)")
    hot = {"running": 300, "pending": 300, "claimed": 200}
    with tempfile.TemporaryDirectory() as tmp:
        stores = {}
        for size in (1_000, 1_000_000):
            clock = ManualClock(START_MS + size)
            store = runstore.open(Path(tmp) / f"list-{size}.db", clock=clock)
            began = time.perf_counter()
            populate(store, list(_sqlite_rows(size, **hot)))
            print(
                f"  (sqlite fixture of {size} runs built and checked in "
                f"{time.perf_counter() - began:.1f} s)"
            )
            stores[size] = store
        _compare_pages("sqlite", stores, rounds)
        for store in stores.values():
            store.close()
    if urls is not None:
        stores = {}
        for size in (1_000, 1_000_000):
            clock = ManualClock(START_MS + size)
            store = runstore.open(urls(), clock=clock)
            began = time.perf_counter()
            bulk(store, size, **hot)
            print(
                f"  (postgresql fixture of {size} runs built and checked in "
                f"{time.perf_counter() - began:.1f} s)"
            )
            stores[size] = store
        _compare_pages("postgresql", stores, rounds)
        for store in stores.values():
            store.close()


def _compare_pages(name: str, stores: dict[int, Any], rounds: int, calls: int = 50) -> None:
    for label, filters in HOT.items():
        samples: dict[int, list[float]] = {size: [] for size in stores}
        for store in stores.values():
            store.list_runs(limit=100, **filters)  # warm
        for _ in range(rounds):
            for size, store in stores.items():
                started = time.perf_counter()
                for _ in range(calls):
                    page = store.list_runs(limit=100, **filters)
                samples[size].append((time.perf_counter() - started) / calls)
                assert len(page.runs) == 100, (label, size, len(page.runs))
        small, large = median(samples[1_000]), median(samples[1_000_000])
        print(f"{name:<12}{label:<26}{small * 1000:>9.3f}{large * 1000:>9.3f}{small / large:>7.2f}")


# -- (5) growth ------------------------------------------------------------------------------


#: The growth fixtures' pending runs by size (the rest are running).
GROWTH_PENDING = {1_000: 900, 1_000_000: 500_000}


def bench_growth(rounds: int, batch: int = 200) -> None:
    print("\n(5) growth: ops/s at 10^6 runs vs 10^3 (WAL, synchronous=NORMAL)")
    print(
        f"{'operation':<16}{'store 10^6/10^3':>16}{'raw 10^6/10^3':>15}{'relative':>10}"
        "  (target >= 0.8)"
    )
    # Each claim_and_own takes a pending run of its own (store and raw alike),
    # so the pending runs of the smaller file bound that operation's batch.
    claims = min(batch, GROWTH_PENDING[1_000] // (2 * rounds))
    with tempfile.TemporaryDirectory() as tmp:
        subjects = {}
        for size in (1_000, 1_000_000):
            clock = ManualClock(START_MS + size)
            path = Path(tmp) / f"growth-{size}.db"
            store = runstore.open(path, clock=clock, durability="normal")
            running = size - GROWTH_PENDING[size]
            populate(store, list(_sqlite_rows(size, running=running, pending=size - running)))
            raw = sqlite3.connect(path, isolation_level=None)
            raw.execute("PRAGMA synchronous = NORMAL")
            subjects[size] = (store, clock, raw)
        for operation in ("heartbeat", "claim_and_own"):
            store_rate: dict[int, list[float]] = {size: [] for size in subjects}
            raw_rate: dict[int, list[float]] = {size: [] for size in subjects}
            serial = dict.fromkeys(subjects, 0)
            count = batch if operation == "heartbeat" else claims
            total = 2 * rounds * count
            for _ in range(rounds):
                for size, (store, clock, raw) in subjects.items():
                    ids = _pick(size, operation, serial[size], count, total)
                    raw_ids = _pick(size, operation, serial[size] + count, count, total)
                    serial[size] += 2 * count
                    clock.advance(1)
                    now = clock.now_ms()
                    started = time.perf_counter()
                    for rid in ids:
                        if operation == "heartbeat":
                            store.heartbeat(rid, OWNER, now)
                        else:
                            store.claim_and_own(rid, PENDING, OWNER, now)
                    store_rate[size].append(count / (time.perf_counter() - started))
                    started = time.perf_counter()
                    for rid in raw_ids:
                        _raw_cas(raw, operation, rid, now)
                    raw_rate[size].append(count / (time.perf_counter() - started))
            s = median(store_rate[1_000_000]) / median(store_rate[1_000])
            r = median(raw_rate[1_000_000]) / median(raw_rate[1_000])
            print(f"{operation:<16}{s:>16.2f}{r:>15.2f}{s / r:>10.2f}")
        for store, _clock, raw in subjects.values():
            raw.close()
            store.close()


def _pick(size: int, operation: str, offset: int, count: int, total: int) -> list[str]:
    """Run ids spread over the file, a stride apart so every batch touches
    cold pages: running runs for heartbeats (renewed again and again), pending
    ones for claim_and_own, each taken once (``total``, what the whole
    measurement takes, never passes the file's pending runs)."""
    pending = GROWTH_PENDING[size]
    running = size - pending
    if operation == "heartbeat":
        stride = max(1, running // (count * 64))
        return [f"run-{(offset + n) * stride % running:07d}" for n in range(count)]
    assert offset + count <= total <= pending, (size, offset, count, total)
    stride = pending // total
    return [f"run-{running + (offset + n) * stride:07d}" for n in range(count)]


def _raw_cas(raw: sqlite3.Connection, operation: str, rid: str, now: int) -> None:
    """The raw compare-and-swap of the same operation on the same tables (the
    revision triggers fire), without the library: read the row, write the
    lease, write the row (and, for claim_and_own, its two facts)."""
    execute = raw.execute
    who = _who(OWNER)
    execute("BEGIN IMMEDIATE")
    execute(
        "SELECT status, owner_host_id, owner_pid, owner_nonce, heartbeat_at_ms FROM flows_runs "
        "WHERE run_id = ?",
        (rid,),
    ).fetchone()
    if operation == "heartbeat":
        execute(
            "UPDATE flows_consensus_leases SET heartbeat_at_ms = MAX(heartbeat_at_ms, ?) "
            "WHERE run_id = ? AND owner_host_id = ? AND owner_pid = ? AND owner_nonce = ?",
            (now, rid, *who),
        )
        execute(
            "UPDATE flows_runs SET heartbeat_at_ms = MAX(heartbeat_at_ms, ?) WHERE run_id = ? "
            "AND status = 'running' AND owner_host_id = ? AND owner_pid = ? AND owner_nonce = ?",
            (now, rid, *who),
        )
    else:
        execute(
            "INSERT INTO flows_consensus_leases (run_id, owner_host_id, owner_pid, owner_nonce, "
            "granted_at_ms, heartbeat_at_ms) VALUES (?, ?, ?, ?, ?, ?)",
            (rid, *who, now, now),
        )
        execute(
            "UPDATE flows_runs SET status = 'running', started_at_ms = ?, owner_host_id = ?, "
            "owner_pid = ?, owner_nonce = ?, heartbeat_at_ms = ? WHERE run_id = ? "
            "AND status = 'pending' AND claim_host_id IS NULL",
            (now, *who, now, rid),
        )
        execute(
            "INSERT INTO flows_ownership_facts (run_id, position, transition, owner_host_id, "
            "owner_pid, owner_nonce, granted_at_ms) VALUES (?, 1, 'claimed', ?, ?, ?, ?), "
            "(?, 2, 'activated', ?, ?, ?, ?)",
            (rid, *who, now, rid, *who, now),
        )
    execute("COMMIT")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "which", nargs="*", choices=["heartbeat-many", "claim-next", "list-runs", "growth", []]
    )
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--postgres", metavar="URL")
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument(
        "--fast", action="store_true", help="PostgreSQL with fsync and synchronous_commit off"
    )
    args = parser.parse_args(argv)
    chosen = args.which or ["heartbeat-many", "claim-next", "list-runs", "growth"]
    print(f"sqlite {sqlite3.sqlite_version}; medians of {args.rounds} interleaved rounds")
    with postgres_urls(args.postgres, not args.no_postgres, args.fast) as urls:
        if "heartbeat-many" in chosen:
            bench_heartbeat_many(args.rounds, urls)
        if "claim-next" in chosen:
            bench_claim_next(urls)
        if "list-runs" in chosen:
            bench_list_runs(args.rounds, urls)
        if "growth" in chosen:
            bench_growth(args.rounds)


if __name__ == "__main__":
    main()
