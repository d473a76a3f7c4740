"""Operations per second of the SQLite store against raw sqlite3.

For each operation (claim+activate, claim_and_own, heartbeat,
transition_owned, steal, heartbeat_many of one run, claim_next) the store
and a raw sqlite3 baseline alternate operation by operation: one store
operation, then the baseline's transactions for it, each timed on its own, so
both see the same machine at the same moment. The baseline is the
4-statement compare-and-swap transaction (BEGIN IMMEDIATE; read the row;
update a lease; update the row; append a fact; COMMIT) over a schema with no
triggers or CHECKs, on a fresh row for each operation that takes a fresh run
(as the store's does) and on one hot row otherwise. The median of several
rounds of each is compared per transaction (claim+activate takes two
transactions and is compared with two baseline transactions).

Run in ``:memory:`` (timed in thread CPU time, which other processes on a
busy machine do not inflate) and in a WAL file with ``synchronous=FULL``
(wall time: the fsync is the cost). Targets:
at least 0.5 of the baseline in the file (the commit dominates; the library
must not), at least 0.2 in memory (issue 13: every operation).

Run: ``python benchmarks/throughput.py [--rounds N] [--batch N] [--only memory|file]``.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import runstore
from runstore import LivenessEvidence, ManualClock, OwnerId, RunSnapshot
from runstore.sqlite import SqliteRunStore

OWNER = OwnerId("bench-host", 1, "bench-nonce")
THIEF = OwnerId("other-host", 2, "other-nonce")
PENDING = RunSnapshot("pending", None, None)
STATE = '{"step": 1, "items": [1, 2, 3], "note": "' + "x" * 200 + '"}'

# Operation name -> transactions per operation.
OPERATIONS = {
    "claim+activate": 2,
    "claim_and_own": 1,
    "heartbeat": 1,
    "transition_owned": 1,
    "steal": 1,
    "heartbeat_many(1)": 1,
    "claim_next": 1,
}
#: Operations that take a fresh run each time (the baseline then uses a fresh row).
FRESH = frozenset({"claim+activate", "claim_and_own", "steal", "claim_next"})


class Baseline:
    """Raw sqlite3: the 4-statement compare-and-swap transaction."""

    def __init__(self, path: str) -> None:
        self.connection = sqlite3.connect(path, isolation_level=None)
        for pragma in ("journal_mode = WAL", "synchronous = FULL", "foreign_keys = ON"):
            self.connection.execute(f"PRAGMA {pragma}")
        self.connection.executescript(
            """
            CREATE TABLE runs (run_id TEXT PRIMARY KEY, status TEXT NOT NULL,
              owner_host_id TEXT, owner_pid INTEGER, owner_nonce TEXT, heartbeat_at_ms INTEGER);
            CREATE TABLE leases (run_id TEXT PRIMARY KEY, owner_host_id TEXT, owner_pid INTEGER,
              owner_nonce TEXT, heartbeat_at_ms INTEGER);
            CREATE TABLE facts (run_id TEXT NOT NULL, position INTEGER NOT NULL,
              owner_host_id TEXT, PRIMARY KEY (run_id, position)) WITHOUT ROWID;
            INSERT INTO runs VALUES ('run', 'running', 'bench-host', 1, 'bench-nonce', 0);
            INSERT INTO leases VALUES ('run', 'bench-host', 1, 'bench-nonce', 0);
            """
        )
        self.now = 0
        self.serial = 0

    def prepare(self, count: int) -> list[str]:
        """``count`` fresh rows, as the store's operations on fresh runs get."""
        ids = []
        for _ in range(count):
            self.serial += 1
            run_id = f"raw-{self.serial}"
            self.connection.execute(
                "INSERT INTO runs VALUES (?, 'pending', NULL, NULL, NULL, NULL)", (run_id,)
            )
            self.connection.execute(
                "INSERT INTO leases VALUES (?, NULL, NULL, NULL, NULL)", (run_id,)
            )
            ids.append(run_id)
        return ids

    def one(self, run_id: str = "run") -> None:
        """One compare-and-swap transaction on ``run_id``."""
        execute = self.connection.execute
        owner = (OWNER.host_id, OWNER.pid, OWNER.nonce)
        self.now += 1
        execute("BEGIN IMMEDIATE")
        execute(
            "SELECT status, owner_host_id, owner_pid, owner_nonce, heartbeat_at_ms "
            "FROM runs WHERE run_id = ?",
            (run_id,),
        ).fetchone()
        execute(
            "UPDATE leases SET owner_host_id = ?, owner_pid = ?, owner_nonce = ?, "
            "heartbeat_at_ms = ? WHERE run_id = ?",
            (*owner, self.now, run_id),
        )
        execute(
            "UPDATE runs SET status = 'running', owner_host_id = ?, owner_pid = ?, "
            "owner_nonce = ?, heartbeat_at_ms = ? WHERE run_id = ?",
            (*owner, self.now, run_id),
        )
        execute("INSERT INTO facts VALUES (?, ?, ?)", (run_id, self.now, OWNER.host_id))
        execute("COMMIT")


class Subject:
    """The store, with runs prepared so every operation of a round succeeds."""

    def __init__(self, path: str, operation: str) -> None:
        self.clock = ManualClock(0)
        self.store: SqliteRunStore = runstore.open(path, clock=self.clock)
        self.operation = operation
        self.serial = 0
        self.owned = f"{operation}-hot"
        self.store.create(self.owned, STATE)
        self.store.claim_and_own(self.owned, PENDING, OWNER, 0)

    def prepare(self, count: int) -> list[str]:
        ids = []
        for _ in range(count):
            self.serial += 1
            run_id = f"{self.operation}-{self.serial}"
            self.store.create(run_id, STATE)
            ids.append(run_id)
        if self.operation == "steal":
            now = self.clock.now_ms()
            for run_id in ids:
                self.store.claim_and_own(run_id, PENDING, OWNER, now)
            self.clock.advance(40_000)
            self.store.heartbeat(self.owned, OWNER, self.clock.now_ms())
        return ids

    def op(self, run_id: str, step: int) -> Callable[[], object]:
        """The timed operation on ``run_id`` (a fresh run) or the hot run."""
        store, operation, now = self.store, self.operation, self.clock.now_ms()
        if operation == "claim+activate":

            def claim_activate() -> object:
                claimed = store.claim(run_id, PENDING, OWNER, now)
                return store.activate(run_id, OWNER, claimed.claimed_at_ms, PENDING)  # type: ignore[union-attr]

            return claim_activate
        if operation == "claim_and_own":
            return lambda: store.claim_and_own(run_id, PENDING, OWNER, now)
        if operation == "heartbeat":
            return lambda: store.heartbeat(self.owned, OWNER, now + step % 1000)
        if operation == "transition_owned":
            return lambda: store.transition_owned(self.owned, OWNER, "running", STATE)
        if operation == "steal":
            evidence = LivenessEvidence(OWNER, now, "lease-expired")
            expected = RunSnapshot("running", OWNER, now - 40_000)
            return lambda: store.steal(run_id, expected, THIEF, now, evidence)
        if operation == "heartbeat_many(1)":
            ids = [self.owned]
            return lambda: store.heartbeat_many(OWNER, ids, now + step % 1000)
        if operation == "claim_next":
            return lambda: store.claim_next(OWNER, now)
        raise ValueError(operation)

    def close(self) -> None:
        self.store.close()


def compare(where: str, rounds: int, batch: int) -> dict[str, tuple[float, float, float]]:
    """Per operation: (store ops/s, baseline tx/s, per-transaction ratio)."""
    results: dict[str, tuple[float, float, float]] = {}
    # In memory nothing waits on I/O: the thread's own CPU time is the cost,
    # and it does not count the time other processes hold the CPU (this
    # machine is shared). A file's cost includes fsync: wall time.
    clock = time.thread_time if where == "memory" else time.perf_counter
    with tempfile.TemporaryDirectory() as tmp:
        for operation, transactions in OPERATIONS.items():
            if where == "memory":
                store_path = baseline_path = ":memory:"
            else:
                store_path = str(Path(tmp) / f"{operation}.db")
                baseline_path = str(Path(tmp) / f"{operation}-raw.db")
            subject, baseline = Subject(store_path, operation), Baseline(baseline_path)
            store_rounds, baseline_rounds = [], []
            for round_number in range(rounds + 1):  # round 0 warms up and is dropped
                fresh = operation in FRESH
                ids = subject.prepare(batch) if fresh else [subject.owned] * batch
                raw_ids = baseline.prepare(batch * transactions) if fresh else []
                store_time = baseline_time = 0.0
                for step, run_id in enumerate(ids):
                    operate = subject.op(run_id, step)
                    started = clock()
                    operate()
                    store_time += clock() - started
                    started = clock()
                    for tx in range(transactions):
                        baseline.one(raw_ids[step * transactions + tx] if fresh else "run")
                    baseline_time += clock() - started
                if round_number:
                    store_rounds.append(store_time)
                    baseline_rounds.append(baseline_time)
            subject.close()
            baseline.connection.close()
            ops = batch / statistics.median(store_rounds)
            base = batch * transactions / statistics.median(baseline_rounds)
            results[operation] = (ops, base, ops * transactions / base)
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--batch", type=int, default=200)
    parser.add_argument("--only", choices=["memory", "file"])
    args = parser.parse_args(argv)
    targets = {"memory": 0.2, "file": 0.5}
    print(f"sqlite {sqlite3.sqlite_version}; median of {args.rounds} interleaved batches")
    for where in ("memory", "file"):
        if args.only and where != args.only:
            continue
        batch = args.batch if where == "memory" else max(10, args.batch // 5)
        label = ":memory:" if where == "memory" else "WAL file, synchronous=FULL"
        print(f"\n{label} (batch {batch}; target >= {targets[where]} of baseline per transaction)")
        print(f"{'operation':<18}{'store op/s':>12}{'raw tx/s':>12}{'ratio':>8}")
        show: Callable[[float], str] = lambda value: f"{value:>12.0f}"  # noqa: E731
        for operation, (ops, base, ratio) in compare(where, args.rounds, batch).items():
            print(f"{operation:<18}{show(ops)}{show(base)}{ratio:>8.2f}")


if __name__ == "__main__":
    main()
