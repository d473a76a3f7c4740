"""Operations per second of the SQLite store against raw sqlite3.

For each operation (claim+activate, claim_and_own, heartbeat,
transition_owned, steal) the store runs a batch of operations on runs
prepared for it, and a raw sqlite3 baseline runs a batch of 4-statement
compare-and-swap transactions (BEGIN IMMEDIATE; read the row; update a lease;
update the row with RETURNING; append a fact; COMMIT) over a schema with no
triggers or CHECKs. Batches alternate between the two; the median of each is
compared per transaction (claim+activate takes two transactions and is
compared with two baseline transactions).

Run in ``:memory:`` and in a WAL file with ``synchronous=FULL``. Targets
(issue 3): at least 0.5 of the baseline in the file (the commit dominates; the
library must not), at least 0.2 in memory.

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
}


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

    def batch(self, count: int) -> float:
        execute = self.connection.execute
        owner = (OWNER.host_id, OWNER.pid, OWNER.nonce)
        started = time.perf_counter()
        for _ in range(count):
            self.now += 1
            execute("BEGIN IMMEDIATE")
            execute(
                "SELECT status, owner_host_id, owner_pid, owner_nonce, heartbeat_at_ms "
                "FROM runs WHERE run_id = 'run'"
            ).fetchone()
            execute(
                "UPDATE leases SET heartbeat_at_ms = ? WHERE run_id = 'run' AND owner_host_id = ? "
                "AND owner_pid = ? AND owner_nonce = ?",
                (self.now, *owner),
            )
            execute(
                "UPDATE runs SET heartbeat_at_ms = ? WHERE run_id = 'run' AND status = 'running' "
                "AND owner_host_id = ? AND owner_pid = ? AND owner_nonce = ? RETURNING 1",
                (self.now, *owner),
            ).fetchall()
            execute("INSERT INTO facts VALUES ('run', ?, ?)", (self.now, OWNER.host_id))
            execute("COMMIT")
        return time.perf_counter() - started


class Subject:
    """The store, with runs prepared so every operation of a batch succeeds."""

    def __init__(self, path: str, operation: str) -> None:
        self.clock = ManualClock(0)
        self.store: SqliteRunStore = runstore.open(path, clock=self.clock)
        self.operation = operation
        self.serial = 0

    def _prepare(self, count: int) -> list[str]:
        ids = []
        for _ in range(count):
            self.serial += 1
            run_id = f"{self.operation}-{self.serial}"
            self.store.create(run_id, STATE)
            ids.append(run_id)
        if self.operation in ("heartbeat", "transition_owned") and self.serial == count:
            self.store.claim_and_own(ids[0], PENDING, OWNER, self.clock.now_ms())
        if self.operation == "steal":
            now = self.clock.now_ms()
            for run_id in ids:
                self.store.claim_and_own(run_id, PENDING, OWNER, now)
            self.clock.advance(40_000)
        return ids

    def batch(self, count: int) -> float:
        store, clock = self.store, self.clock
        ids = self._prepare(count)
        now = clock.now_ms()
        owned = f"{self.operation}-1"
        started = time.perf_counter()
        if self.operation == "claim+activate":
            for run_id in ids:
                claimed = store.claim(run_id, PENDING, OWNER, now)
                store.activate(run_id, OWNER, claimed.claimed_at_ms, PENDING)  # type: ignore[union-attr]
        elif self.operation == "claim_and_own":
            for run_id in ids:
                store.claim_and_own(run_id, PENDING, OWNER, now)
        elif self.operation == "heartbeat":
            for step in range(count):
                store.heartbeat(owned, OWNER, now + step % 1000)
        elif self.operation == "transition_owned":
            for _ in range(count):
                store.transition_owned(owned, OWNER, "running", STATE)
        elif self.operation == "steal":
            evidence = LivenessEvidence(OWNER, now, "lease-expired")
            expected = RunSnapshot("running", OWNER, now - 40_000)
            for run_id in ids:
                store.steal(run_id, expected, THIEF, now, evidence)
        return time.perf_counter() - started

    def close(self) -> None:
        self.store.close()


def compare(where: str, rounds: int, batch: int) -> dict[str, tuple[float, float, float]]:
    """Per operation: (store ops/s, baseline tx/s, per-transaction ratio)."""
    results: dict[str, tuple[float, float, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for operation, transactions in OPERATIONS.items():
            if where == "memory":
                store_path = baseline_path = ":memory:"
            else:
                store_path = str(Path(tmp) / f"{operation}.db")
                baseline_path = str(Path(tmp) / f"{operation}-raw.db")
            subject, baseline = Subject(store_path, operation), Baseline(baseline_path)
            subject.batch(5)
            baseline.batch(5)
            store_times, baseline_times = [], []
            for _ in range(rounds):
                store_times.append(subject.batch(batch))
                baseline_times.append(baseline.batch(batch * transactions))
            subject.close()
            baseline.connection.close()
            ops = batch / statistics.median(store_times)
            base = batch * transactions / statistics.median(baseline_times)
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
