"""Does a heartbeat cost more when the run holds more state?

Measures ``store.heartbeat`` on a run holding 1 KiB and 8 MiB of state, in a
WAL file with ``synchronous=FULL``, against a raw sqlite3 baseline measured in
the same run: the same heartbeat UPDATE on a table that keeps the state inline
in the run row (the straightforward layout, where SQLite rewrites the whole
record, state included, on every update). The four subjects (store and
baseline, each at both sizes) take turns heartbeat by heartbeat, so each sees
the machine as the others do, and each round's mean per heartbeat is
reported as the median over rounds. Rounds are long (300 heartbeats by
default): with the 20 of the first version, the noise of a busy machine made
8 MiB look cheaper than 1 KiB.

Target (issue 3): the store's 8 MiB heartbeat costs at most 2x its 1 KiB one.

Run: ``python benchmarks/heartbeat_state_size.py [--rounds N] [--batch N]``.
Prints a table and the ratios; never asserts (timings are not tests).
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import runstore
from runstore import ManualClock, OwnerId, RunSnapshot

OWNER = OwnerId("bench-host", 1, "bench-nonce")
SIZES = {"1 KiB": 1024, "8 MiB": 8 * 1024 * 1024}


def state_of(size: int) -> str:
    """Valid run state of about ``size`` bytes (one long string)."""
    return json.dumps({"blob": "x" * (size - 12)})


class StoreHeartbeat:
    def __init__(self, folder: Path, size: int) -> None:
        self.clock = ManualClock(1_000)
        self.store = runstore.open(folder / f"store-{size}.db", clock=self.clock)
        self.store.create("run", state_of(size))
        assert self.store.claim_and_own("run", RunSnapshot("pending", None, None), OWNER, 1_000)
        self.now = 1_000

    def one(self) -> float:
        self.now += 1
        self.clock.set(self.now)
        started = time.perf_counter()
        self.store.heartbeat("run", OWNER, self.now)
        return time.perf_counter() - started

    def close(self) -> None:
        self.store.close()


class RawInlineHeartbeat:
    """The baseline: state inline in the run row, one guarded UPDATE per heartbeat."""

    def __init__(self, folder: Path, size: int) -> None:
        self.connection = sqlite3.connect(folder / f"raw-{size}.db", isolation_level=None)
        for pragma in (
            "journal_mode = WAL",
            "synchronous = FULL",
            "secure_delete = ON",
            "foreign_keys = ON",
        ):
            self.connection.execute(f"PRAGMA {pragma}")
        self.connection.execute(
            "CREATE TABLE runs (run_id TEXT PRIMARY KEY, status TEXT, owner_host_id TEXT, "
            "owner_pid INTEGER, owner_nonce TEXT, heartbeat_at_ms INTEGER, state_json TEXT)"
        )
        self.connection.execute(
            "INSERT INTO runs VALUES ('run', 'running', ?, ?, ?, 1000, ?)",
            (OWNER.host_id, OWNER.pid, OWNER.nonce, state_of(size)),
        )
        self.now = 1_000

    def one(self) -> float:
        execute = self.connection.execute
        self.now += 1
        started = time.perf_counter()
        execute("BEGIN IMMEDIATE")
        execute(
            "UPDATE runs SET heartbeat_at_ms = MAX(heartbeat_at_ms, ?) WHERE run_id = 'run' "
            "AND status = 'running' AND owner_host_id = ? AND owner_pid = ? "
            "AND owner_nonce = ? RETURNING 1",
            (self.now, OWNER.host_id, OWNER.pid, OWNER.nonce),
        ).fetchall()
        execute("COMMIT")
        return time.perf_counter() - started

    def close(self) -> None:
        self.connection.close()


def measure(rounds: int, batch: int) -> dict[tuple[str, str], float]:
    """Median seconds per heartbeat for every (subject, size)."""
    samples: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        subjects: dict[tuple[str, str], StoreHeartbeat | RawInlineHeartbeat] = {}
        for label, size in SIZES.items():
            subjects[("store", label)] = StoreHeartbeat(folder, size)
            subjects[("raw inline", label)] = RawInlineHeartbeat(folder, size)
        try:
            for subject in subjects.values():
                for _ in range(10):  # warm caches
                    subject.one()
            for _ in range(rounds):
                totals = dict.fromkeys(subjects, 0.0)
                for _ in range(batch):  # heartbeat by heartbeat, in turn
                    for key, subject in subjects.items():
                        totals[key] += subject.one()
                for key, total in totals.items():
                    samples.setdefault(key, []).append(total / batch)
        finally:
            for subject in subjects.values():
                subject.close()
    return {key: statistics.median(values) for key, values in samples.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--batch", type=int, default=300)
    args = parser.parse_args(argv)
    medians = measure(args.rounds, args.batch)
    print(
        f"sqlite {sqlite3.sqlite_version}; WAL, synchronous=FULL; median of {args.rounds} "
        f"rounds of {args.batch} heartbeats each, taken in turn"
    )
    print(f"{'subject':<12}{'state':>8}{'ms/heartbeat':>15}")
    for (subject, label), seconds in sorted(medians.items()):
        print(f"{subject:<12}{label:>8}{seconds * 1000:>15.3f}")
    small, large = SIZES
    ratio: Callable[[str], float] = lambda s: medians[(s, large)] / medians[(s, small)]  # noqa: E731
    print(f"store     8 MiB / 1 KiB: {ratio('store'):6.2f}x  (target <= 2x)")
    print(f"raw inline 8 MiB / 1 KiB: {ratio('raw inline'):6.2f}x  (the inline layout)")
    print(
        f"store / raw at 1 KiB: {medians[('store', small)] / medians[('raw inline', small)]:6.2f}x"
    )


if __name__ == "__main__":
    main()
