"""Growth on PostgreSQL: every operation at 10^6 runs against 10^3, beside raw psycopg's own growth.

For each operation the store's ratio (its rate at 10^6 runs / its rate at
10^3) is divided by a raw baseline's ratio measured in the same run on the
same server: psycopg statements on plain tables (``raw_runs``,
``raw_leases``, ``raw_facts``: no triggers, no CHECKs) holding copies of the
same rows, doing what a careful application would do for that operation
(the 5-round-trip compare-and-swap of ``postgres_throughput`` for a
single-run write: a locking read pipelined with ``BEGIN``, the lease, the
row, a fact, ``COMMIT``; a search of the oldest pending row ``FOR UPDATE
SKIP LOCKED`` for ``claim_next``; one statement per page for reads).
Target (issue 28): relative = store ratio / raw ratio >= 0.9.

Both of the store's paths are measured: ``fast`` (one round trip per
operation) and ``general``. The 10^6-run database is built once and serves
both paths; each path has a 10^3-run database of its own (the writes
consume runs of each kind, and 10^3 runs hold only so many).

Fixtures are built in one bulk transaction of raw SQL (``finding_work.bulk``:
runs, state, leases, facts and change entries, the revision triggers off for
the load), analyzed, and checked with ``check_invariants()``. The layout, in
created order: 35% running (owned, stale), 35% pending, 10% pending and
claimed by another owner, 20% completed. The runs an operation touches are
spread over its part of the table a stride apart, so a batch touches cold
pages; an operation that consumes runs (completing, steal, claim_and_own,
activate, claim_next, purge) takes each once.

Three figures per operation, each from medians over ``--rounds``
interleaved rounds (store and raw alternate, both sizes in every round):

- ``wall``: the store's growth over raw's in calls per second of wall time
  (blurred by a loaded machine);
- ``cpu``: calls per second of CPU, the client thread's CPU time plus the
  server backend's (``/proc/<pid>/schedstat``, nanoseconds) for that
  connection, per size and side, each side's growth and the store's over
  raw's: the target's measure;
- ``buffers``: shared buffers touched per call (``pg_stat_database`` read
  from another database, the measured session made to report its counts
  after each batch; autovacuum is off on the fixtures): a count a loaded
  machine does not blur, where a scan, a deeper B-tree or a statement
  planned anew on every call shows.

The whole-store ``state()`` reads every run by design and is not measured.

Run: ``python benchmarks/pg_growth.py [--rounds N] [--batch B] [--calls C] [--large N]
[--only op,op] [--path fast|general|both]``. Prints the load before and after.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))

import finding_work as fw

import runstore.postgres
from runstore import LivenessEvidence, ManualClock, RunSnapshot
from runstore.stateful._targets import _postgres

OWNER = fw.OWNER
THIEF = fw.THIEF
PENDING = RunSnapshot("pending", None, None)
START_MS = fw.START_MS
STATE = '{"step": 2, "note": "' + "x" * 100 + '"}'

#: Layout fractions, in created order (finding_work.bulk's order).
RUNNING, PENDING_PART, CLAIMED, COMPLETED = 0.35, 0.35, 0.10, 0.20

#: Parts of the running runs: heartbeats and running transitions (renewed
#: again and again), completions, steals.
_RUN_PARTS = {"renew": (0.0, 0.3), "complete": (0.3, 0.6), "steal": (0.6, 0.9)}

#: The writes that take a run at most once (purge_settled too, below).
_TAKING = (
    "transition_owned/completed",
    "steal",
    "claim_and_own",
    "activate",
    "claim_next",
    "claim_next_many/10",
)

OPERATIONS = (
    # Reads first, on the fixture as built (the writes below leave dead
    # versions at the front of the listing, more of them at 10^3).
    "get",
    "revision",
    "list_runs/all",
    "list_runs/claimable",
    "changes/100",
    "heartbeat",
    "transition_owned/running",
    *_TAKING,
    "heartbeat_many/100",
    "purge_settled/10",
)

#: How many distinct runs the renewing operations cycle over, at every size.
RENEWED = 100

#: Calls per batch for the operations that take many runs a call.
_FEW = {"claim_next_many/10": 2, "purge_settled/10": 2}

#: The operations that take a run at most once; the others reuse theirs and
#: run batches of ``--calls`` (a longer batch, less blurred by the timer).
_CONSUMING = {*_TAKING, "purge_settled/10"}


def _load() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def _backend_ns(pid: int) -> int:
    with open(f"/proc/{pid}/schedstat") as f:
        return int(f.read().split()[0])


class Layout:
    """Where each kind of run lies in a fixture of ``size`` runs."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.running = int(size * RUNNING)
        self.pending = int(size * PENDING_PART)
        self.claimed = int(size * CLAIMED)
        self.first_pending = self.running
        self.first_claimed = self.running + self.pending
        self.first_completed = self.first_claimed + self.claimed

    def region(self, kind: str) -> tuple[int, int]:
        """(first index, count) of a kind's runs."""
        if kind in _RUN_PARTS:
            low, high = _RUN_PARTS[kind]
            return int(self.running * low), int(self.running * high) - int(self.running * low)
        if kind == "own":  # claim_and_own takes pending runs from the newest half
            half = self.pending // 2
            return self.first_pending + half, self.pending - half
        if kind == "claimed":
            return self.first_claimed, self.claimed
        raise AssertionError(kind)


class Picker:
    """Run ids of one region, a stride apart; ``once`` ids are never given twice."""

    def __init__(self, layout: Layout, kind: str, needed: int, once: bool) -> None:
        self.first, self.count = layout.region(kind)
        # A reused region cycles over the same number of runs at every size
        # (RENEWED, spread over the region): a working set that does not grow.
        self.stride = max(1, self.count // max(1, needed if once else RENEWED))
        self.needed, self.once, self.serial = needed, once, 0

    def take(self, n: int) -> list[int]:
        out = []
        for _ in range(n):
            if self.once:
                assert self.serial < self.needed
                assert self.serial * self.stride < self.count
                out.append(self.first + self.serial * self.stride)
            else:
                out.append(self.first + (self.serial % RENEWED) * self.stride)
            self.serial += 1
        return out


def rid(number: int) -> str:
    return f"run-{number:07d}"


_RAW_SCHEMA = """
CREATE TABLE raw_runs (run_id TEXT COLLATE "C" PRIMARY KEY, status TEXT NOT NULL,
  created_at_ms BIGINT NOT NULL, started_at_ms BIGINT, finished_at_ms BIGINT,
  owner_host_id TEXT, owner_pid BIGINT, owner_nonce TEXT, heartbeat_at_ms BIGINT,
  claim_host_id TEXT, claim_pid BIGINT, claim_nonce TEXT, claimed_at_ms BIGINT, state TEXT);
CREATE TABLE raw_leases (run_id TEXT COLLATE "C" PRIMARY KEY, owner_host_id TEXT,
  owner_pid BIGINT, owner_nonce TEXT, heartbeat_at_ms BIGINT, claim_host_id TEXT,
  claim_pid BIGINT, claim_nonce TEXT, claimed_at_ms BIGINT);
CREATE TABLE raw_facts (run_id TEXT COLLATE "C" NOT NULL, position BIGINT NOT NULL,
  transition TEXT, owner_host_id TEXT, owner_pid BIGINT, owner_nonce TEXT,
  PRIMARY KEY (run_id, position));
INSERT INTO raw_runs SELECT r.run_id, r.status, r.created_at_ms, r.started_at_ms,
  r.finished_at_ms, r.owner_host_id, r.owner_pid, r.owner_nonce, r.heartbeat_at_ms,
  r.claim_host_id, r.claim_pid, r.claim_nonce, r.claimed_at_ms, s.state_json
  FROM flows_runs AS r JOIN flows_run_state AS s USING (run_id);
INSERT INTO raw_leases SELECT run_id, owner_host_id, owner_pid, owner_nonce, heartbeat_at_ms,
  claim_host_id, claim_pid, claim_nonce, claimed_at_ms FROM flows_consensus_leases;
INSERT INTO raw_facts SELECT run_id, position, transition, owner_host_id, owner_pid,
  owner_nonce FROM flows_ownership_facts;
CREATE INDEX raw_runs_listing ON raw_runs (created_at_ms, run_id);
CREATE INDEX raw_runs_claimable ON raw_runs (created_at_ms, run_id)
  WHERE status = 'pending' AND claim_host_id IS NULL;
CREATE INDEX raw_runs_finished ON raw_runs (finished_at_ms, run_id)
  WHERE finished_at_ms IS NOT NULL;
CREATE SEQUENCE raw_positions START 1000;
ANALYZE;
DO $$ DECLARE t text; BEGIN
  FOR t IN SELECT tablename FROM pg_tables WHERE schemaname = 'public' LOOP
    EXECUTE format('ALTER TABLE %I SET (autovacuum_enabled = false)', t);
  END LOOP;
END $$;
"""

_COLUMNS = (
    "run_id, status, created_at_ms, started_at_ms, finished_at_ms, owner_host_id, owner_pid, "
    "owner_nonce, heartbeat_at_ms, claim_host_id, claim_pid, claim_nonce, claimed_at_ms"
)


class Raw:
    """Raw psycopg on the plain tables: one method per operation's baseline."""

    def __init__(self, url: str) -> None:
        self.connection = psycopg.connect(url, autocommit=True)
        self.pid = self.connection.info.backend_pid
        self.who = fw._who(OWNER)

    def _begin(self, query: str, params: tuple[Any, ...]) -> Any:
        """``BEGIN`` and a locking read, pipelined (one round trip); the read's cursor."""
        c = self.connection
        with c.pipeline():
            c.execute("BEGIN")
            # Leaving the pipeline sends both and waits for their answers.
            return c.execute(query, params)

    def cas(self, run_id: str, status: str, now: int, state: str | None = None) -> None:
        """Read the row locked (pipelined with BEGIN), write the lease, the row, a fact."""
        c, who = self.connection, self.who
        self._begin(
            "SELECT status, owner_host_id, owner_pid, owner_nonce, heartbeat_at_ms "
            "FROM raw_runs WHERE run_id = %s FOR UPDATE",
            (run_id,),
        ).fetchone()
        c.execute(
            "INSERT INTO raw_leases (run_id, owner_host_id, owner_pid, owner_nonce, "
            "heartbeat_at_ms) VALUES (%s, %s, %s, %s, %s) ON CONFLICT (run_id) DO UPDATE "
            "SET heartbeat_at_ms = GREATEST(raw_leases.heartbeat_at_ms, excluded.heartbeat_at_ms)",
            (run_id, *who, now),
        )
        c.execute(
            "UPDATE raw_runs SET status = %s, owner_host_id = %s, owner_pid = %s, "
            "owner_nonce = %s, heartbeat_at_ms = %s, state = COALESCE(%s, state) "
            "WHERE run_id = %s RETURNING run_id",
            (status, *who, now, state, run_id),
        ).fetchone()
        c.execute(
            "INSERT INTO raw_facts VALUES (%s, nextval('raw_positions'), 'activated', %s, %s, %s)",
            (run_id, *who),
        )
        c.execute("COMMIT")

    def claim_next(self, now: int, limit: int) -> None:
        c, who = self.connection, self.who
        cur = self._begin(
            "SELECT run_id FROM raw_runs WHERE status = 'pending' AND claim_host_id IS NULL "
            "ORDER BY created_at_ms, run_id LIMIT %s FOR UPDATE SKIP LOCKED",
            (limit,),
        )
        ids = [row[0] for row in cur.fetchall()]
        c.execute(
            "INSERT INTO raw_leases (run_id, owner_host_id, owner_pid, owner_nonce, "
            "heartbeat_at_ms) SELECT u, %s, %s, %s, %s FROM unnest(%s::text[]) AS u "
            "ON CONFLICT (run_id) DO UPDATE SET heartbeat_at_ms = excluded.heartbeat_at_ms",
            (*who, now, ids),
        )
        c.execute(
            "UPDATE raw_runs SET status = 'running', owner_host_id = %s, owner_pid = %s, "
            "owner_nonce = %s, heartbeat_at_ms = %s WHERE run_id = ANY(%s) RETURNING *",
            (*who, now, ids),
        ).fetchall()
        c.execute(
            "INSERT INTO raw_facts SELECT u, nextval('raw_positions'), 'activated', %s, %s, %s "
            "FROM unnest(%s::text[]) AS u",
            (*who, ids),
        )
        c.execute("COMMIT")

    def heartbeat_many(self, ids: list[str], now: int) -> None:
        c, who = self.connection, self.who
        c.execute("BEGIN")
        c.execute(
            "UPDATE raw_leases SET heartbeat_at_ms = GREATEST(heartbeat_at_ms, %s) "
            "WHERE run_id = ANY(%s) AND owner_host_id = %s AND owner_pid = %s "
            "AND owner_nonce = %s",
            (now, ids, *who),
        )
        c.execute(
            "UPDATE raw_runs SET heartbeat_at_ms = GREATEST(heartbeat_at_ms, %s) "
            "WHERE run_id = ANY(%s) AND status = 'running' AND owner_host_id = %s "
            "AND owner_pid = %s AND owner_nonce = %s RETURNING run_id",
            (now, ids, *who),
        ).fetchall()
        c.execute("COMMIT")

    def purge(self, before: int, limit: int) -> None:
        c = self.connection
        c.execute("BEGIN")
        ids = [
            row[0]
            for row in c.execute(
                "DELETE FROM raw_runs WHERE run_id IN (SELECT run_id FROM raw_runs "
                "WHERE finished_at_ms < %s ORDER BY finished_at_ms, run_id LIMIT %s "
                "FOR UPDATE) RETURNING run_id",
                (before, limit),
            ).fetchall()
        ]
        c.execute("DELETE FROM raw_leases WHERE run_id = ANY(%s)", (ids,))
        c.execute("DELETE FROM raw_facts WHERE run_id = ANY(%s)", (ids,))
        c.execute("COMMIT")

    def get(self, run_id: str) -> None:
        self.connection.execute(
            f"SELECT {_COLUMNS}, state FROM raw_runs WHERE run_id = %s", (run_id,)
        ).fetchone()

    def counter(self) -> None:
        self.connection.execute("SELECT last_value FROM raw_positions").fetchone()

    def page(self, claimable: bool) -> None:
        where = "WHERE status = 'pending' AND claim_host_id IS NULL " if claimable else ""
        rows = self.connection.execute(
            f"SELECT {_COLUMNS} FROM raw_runs {where}ORDER BY created_at_ms, run_id LIMIT 100"
        ).fetchall()
        assert len(rows) == 100

    def changes(self, after: int) -> None:
        # The raw feed: runs by their created instant, a range of an index.
        self.connection.execute(
            "SELECT run_id, created_at_ms FROM raw_runs WHERE created_at_ms > %s "
            "ORDER BY created_at_ms LIMIT 100",
            (after,),
        ).fetchall()

    def close(self) -> None:
        self.connection.close()


class Side:
    """One database at one size: the store (one path) or the raw baseline, with its pickers."""

    def __init__(self, url: str, store: Any, raw: Raw, layout: Layout, clock: ManualClock) -> None:
        self.store, self.raw, self.layout, self.clock = store, raw, layout, clock
        self.pickers: dict[tuple[str, str], Picker] = {}
        self.needed = 0
        self.buffers = Buffers(url)

    def picker(self, who: str, kind: str, once: bool) -> Picker:
        key = ("raw" if who == "raw" else "store", kind)
        if key not in self.pickers:
            self.pickers[key] = Picker(self.layout, kind, self.needed, once)
        return self.pickers[key]


def _calls(
    operation: str, side: Side, who: str, batch: int, calls: int
) -> tuple[Callable[[int], None], int]:
    """The batch's call (its argument: the call's number) and its count, for the store
    (``who`` = the path) or the raw baseline (``who`` = "raw")."""
    store, raw, clock = side.store, side.raw, side.clock
    clock.advance(1)
    now = clock.now_ms()
    count = _FEW.get(operation, batch if operation in _CONSUMING else calls)
    is_raw = who == "raw"

    def ids(kind: str, once: bool) -> list[int]:
        return side.picker(who, kind, once).take(count)

    if operation in ("heartbeat", "transition_owned/running"):
        numbers = ids("renew", False)
        if is_raw:
            state = STATE if operation != "heartbeat" else None
            return (lambda i: raw.cas(rid(numbers[i]), "running", now, state)), count
        if operation == "heartbeat":
            return (lambda i: _is(store.heartbeat(rid(numbers[i]), OWNER, now), "Updated")), count
        return (
            lambda i: _is(
                store.transition_owned(rid(numbers[i]), OWNER, "running", STATE), "Transitioned"
            )
        ), count
    if operation == "transition_owned/completed":
        numbers = ids("complete", True)
        if is_raw:
            return (lambda i: raw.cas(rid(numbers[i]), "completed", now, STATE)), count
        return (
            lambda i: _is(
                store.transition_owned(rid(numbers[i]), OWNER, "completed", STATE),
                "Transitioned",
            )
        ), count
    if operation == "steal":
        numbers = ids("steal", True)
        if is_raw:
            return (lambda i: raw.cas(rid(numbers[i]), "running", now)), count
        evidence = LivenessEvidence(OWNER, now, "lease-expired")
        return (
            lambda i: _is(
                store.steal(
                    rid(numbers[i]),
                    RunSnapshot("running", OWNER, START_MS + numbers[i]),
                    THIEF,
                    now,
                    evidence,
                ),
                "Claimed",
            )
        ), count
    if operation == "claim_and_own":
        numbers = ids("own", True)
        if is_raw:
            return (lambda i: raw.cas(rid(numbers[i]), "running", now)), count
        return (
            lambda i: _is(store.claim_and_own(rid(numbers[i]), PENDING, OWNER, now), "Activated")
        ), count
    if operation == "activate":
        numbers = ids("claimed", True)
        if is_raw:
            return (lambda i: raw.cas(rid(numbers[i]), "running", now)), count
        return (
            lambda i: _is(
                store.activate(rid(numbers[i]), THIEF, START_MS + numbers[i], PENDING), "Activated"
            )
        ), count
    if operation in ("claim_next", "claim_next_many/10"):
        limit = 1 if operation == "claim_next" else 10
        if is_raw:
            return (lambda i: raw.claim_next(now, limit)), count
        if limit == 1:
            return (lambda i: _present(store.claim_next(OWNER, now))), count
        return (lambda i: _present(store.claim_next_many(OWNER, now, limit))), count
    if operation == "heartbeat_many/100":
        first, span = side.layout.region("renew")
        numbers = [first + n * max(1, span // 100) for n in range(100)]
        names = [rid(n) for n in numbers]
        if is_raw:
            return (lambda i: raw.heartbeat_many(names, now)), count
        return (lambda i: _present(store.heartbeat_many(OWNER, names, now))), count
    if operation == "purge_settled/10":
        if is_raw:
            return (lambda i: raw.purge(now, 10)), count
        return (lambda i: _is_count(store.purge_settled(now, limit=10), 10)), count
    if operation == "get":
        numbers = ids("renew", False)
        if is_raw:
            return (lambda i: raw.get(rid(numbers[i]))), count
        return (lambda i: store.get(rid(numbers[i]))), count
    if operation == "revision":
        if is_raw:
            return (lambda i: raw.counter()), count
        return (lambda i: _present(store.revision())), count
    if operation.startswith("list_runs/"):
        claimable = operation.endswith("claimable")
        if is_raw:
            return (lambda i: raw.page(claimable)), count
        filters: dict[str, Any] = {"claimable_at": now} if claimable else {}
        return (lambda i: _pages(store.list_runs(limit=100, **filters))), count
    if operation == "changes/100":
        if is_raw:
            after = START_MS + side.layout.size - 101
            return (lambda i: raw.changes(after)), count
        revision = store.revision() - 100
        return (lambda i: _present(store.changes(revision))), count
    raise AssertionError(operation)


def _is(outcome: Any, name: str) -> None:
    assert type(outcome).__name__ == name, (name, type(outcome).__name__)


def _present(value: Any) -> None:
    assert value, value


def _is_count(value: int, expected: int) -> None:
    assert value == expected, (value, expected)


def _pages(page: Any) -> None:
    assert len(page.runs) == 100, len(page.runs)


class Buffers:
    """Shared buffers a connection touches (hit or read), from ``pg_stat_database``
    read on another database: the measured backend is made to flush its
    counters before each reading (autovacuum is off on the fixtures, and the
    store and raw sides never run at once)."""

    def __init__(self, url: str) -> None:
        self.name = psycopg.conninfo.conninfo_to_dict(url)["dbname"]
        self.monitor = psycopg.connect(_postgres.with_database(url, "postgres"), autocommit=True)

    def now(self, measured: Any) -> int:
        measured.execute("SELECT pg_stat_force_next_flush()")
        row = self.monitor.execute(
            "SELECT blks_hit + blks_read FROM pg_stat_database WHERE datname = %s", (self.name,)
        ).fetchone()
        assert row is not None
        return int(row[0])

    def close(self) -> None:
        self.monitor.close()


def _timed(
    call: Callable[[int], None], count: int, connection: Any, buffers: Buffers
) -> tuple[float, float, float]:
    """(calls per wall second, calls per CPU second: client thread + backend,
    calls per thousand shared buffers touched)."""
    pid = connection.info.backend_pid
    touched = buffers.now(connection)
    server, cpu, wall = _backend_ns(pid), time.thread_time(), time.perf_counter()
    for i in range(count):
        call(i)
    wall = time.perf_counter() - wall
    cpu = time.thread_time() - cpu
    server = (_backend_ns(pid) - server) / 1e9
    touched = buffers.now(connection) - touched
    return count / wall, count / (cpu + server), 1000 * count / max(1, touched)


def _fixture(url: str, size: int, clock: ManualClock) -> None:
    layout = Layout(size)
    began = time.perf_counter()
    with runstore.postgres.open(url, clock=clock) as store:
        fw.bulk(
            store,
            size,
            running=layout.running,
            pending=layout.pending,
            claimed=layout.claimed,
        )
    with psycopg.connect(url, autocommit=True) as c:
        c.execute(_RAW_SCHEMA)
    print(f"  (fixture of {size} runs built and checked in {time.perf_counter() - began:.1f} s)")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--large", type=int, default=1_000_000)
    parser.add_argument("--only", help="comma-separated operations")
    parser.add_argument("--path", choices=["fast", "general", "both"], default="both")
    args = parser.parse_args(argv)
    operations = args.only.split(",") if args.only else list(OPERATIONS)
    paths = ["fast", "general"] if args.path == "both" else [args.path]
    sizes = (1_000, args.large)
    print(f"load before: {_load()}")
    server = _postgres.server()
    # Each consumed region must hold every batch: the warm-up and the rounds, per path.
    per_path = (args.rounds + 1) * args.batch
    sides: dict[tuple[str, int], Side] = {}
    stores = []
    try:
        urls = {(path, 1_000): server.fresh_database() for path in paths}
        large = server.fresh_database()
        for path in paths:
            urls[(path, args.large)] = large
        clocks: dict[str, ManualClock] = {}
        for (path, size), url in urls.items():
            if url not in clocks:
                clocks[url] = ManualClock(START_MS + size + 100_000)
                _fixture(url, size, clocks[url])
            store = runstore.postgres.open(url, clock=clocks[url], fast_path=(path == "fast"))
            store._connection.execute("SET idle_in_transaction_session_timeout = 0")
            stores.append(store)
            shared = [s for (p, z), s in sides.items() if z == size == args.large]
            side = Side(url, store, Raw(url), Layout(size), clocks[url])
            side.needed = per_path * (len(paths) if size == args.large else 1)
            if shared:  # one large database: the paths share its pickers
                side.pickers = shared[0].pickers
            sides[(path, size)] = side
        print(
            f"PostgreSQL, fsync off; {args.rounds} rounds; batches of {args.batch} calls "
            f"(runs taken once), {args.calls} (runs reused), 2 (batch operations)"
        )
        print(
            "wall: the store's growth over raw's (calls per second of wall time);\n"
            "cpu: calls per second of CPU (client thread + backend) at 10^3 and at the large\n"
            "  size, store (s) and raw (r), each side's growth and the store's over raw's;\n"
            "buffers: shared buffers touched per call, and the store's growth over raw's\n"
            "  by that count (its rate of calls per buffer at the large size over at 10^3)"
        )
        print(
            f"{'operation':<28}{'path':<9}{'wall':>6}"
            + "".join(f"{name:>8}" for name in ("s 10^3", "s big", "r 10^3", "r big"))
            + f"{'s grow':>7}{'r grow':>7}{'rel':>6}"
            + "".join(f"{name:>7}" for name in ("s 10^3", "s big", "r 10^3", "r big"))
            + f"{'rel':>6}"
        )
        for operation in operations:
            for path in paths:
                rates: dict[tuple[str, int], list[tuple[float, float]]] = {}
                for round_ in range(args.rounds + 1):
                    order = ["store", "raw"] if round_ % 2 == 0 else ["raw", "store"]
                    for size in sizes if round_ % 4 < 2 else sizes[::-1]:
                        side = sides[(path, size)]
                        for who in order:
                            name = path if who == "store" else "raw"
                            call, count = _calls(operation, side, name, args.batch, args.calls)
                            connection = (
                                side.store._connection if who == "store" else side.raw.connection
                            )
                            measured = _timed(call, count, connection, side.buffers)
                            if round_ > 0:
                                rates.setdefault((who, size), []).append(measured)

                def median(who: str, size: int, index: int, rates: dict[Any, Any] = rates) -> float:
                    return float(statistics.median(r[index] for r in rates[(who, size)]))

                def ratio(who: str, index: int) -> float:
                    return median(who, args.large, index) / median(who, 1_000, index)

                wall = ratio("store", 0) / ratio("raw", 0)
                cpu = [median(who, size, 1) for who in ("store", "raw") for size in sizes]
                grown = (cpu[1] / cpu[0], cpu[3] / cpu[2])
                touched = [
                    1000 / median(who, size, 2) for who in ("store", "raw") for size in sizes
                ]
                by_buffers = (touched[0] / touched[1]) / (touched[2] / touched[3])
                flag = "" if min(grown[0] / grown[1], by_buffers) >= 0.9 else "  <"
                print(
                    f"{operation:<28}{path:<9}{wall:>6.2f}"
                    + "".join(f"{rate:>8.0f}" for rate in cpu)
                    + f"{grown[0]:>7.2f}{grown[1]:>7.2f}{grown[0] / grown[1]:>6.2f}"
                    + "".join(f"{count:>7.1f}" for count in touched)
                    + f"{by_buffers:>6.2f}{flag}",
                    flush=True,
                )
        for store in stores:
            store.check_invariants()
    finally:
        for store in stores:
            store.close()
        for side in sides.values():
            side.raw.close()
            side.buffers.close()
        server.close()
    print(f"load after: {_load()}")


if __name__ == "__main__":
    threading.current_thread().name = "pg_growth"
    os.environ.setdefault("PGAPPNAME", "pg_growth")
    main()
