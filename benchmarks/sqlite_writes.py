"""CPU and WAL pages of the SQLite store's single-run writes, against raw sqlite3 (issue 28).

Two measurements, each printing figures and never asserting:

- ``cpu``: every single-run write of the store on ``:memory:`` against the
  raw 4-statement compare-and-swap of ``throughput.py`` (BEGIN IMMEDIATE;
  read the row; update a lease; update the row; append a fact; COMMIT), and
  ``claim_next`` also against a raw claim that searches (the oldest pending
  row by an index, then the same compare-and-swap on it). Store and raw
  alternate operation by operation, each timed in the thread's own CPU time
  (``time.thread_time_ns``, which other processes on a busy machine do not
  inflate), over several rounds of fresh runs; the figure is raw CPU / store
  CPU per operation (1.0: as cheap as the raw transaction), the median of
  the rounds' ratios. Target: >= 0.25 for every operation.
  ``--callgrind`` counts instructions instead (valgrind's callgrind, which
  gives the same count on every run whatever the load): one process under
  valgrind runs each side's batch inside one ``functools.reduce`` call,
  and only what runs inside those calls is counted, one dump per batch.
- ``pages``: WAL pages per commit of each write on a file (WAL, automatic
  checkpoints off, so the ``-wal`` file holds every frame each commit
  wrote; no fsync, which changes no page), in a file of ``--background``
  older runs (3 000 by default; three fifths completed, a fifth running, a
  fifth pending, as the page test lays them out), next to the B-trees
  (tables and indexes) the commits touched; and the raw compare-and-swap's.
- ``scenario``: the page test's writes (``tests/sqlite/test_sqlite_write_paths.py``)
  on a file of ``--background`` older runs, with the schema's listing index
  per status and with the one status index of before migration 2016.

Run: ``python benchmarks/sqlite_writes.py [cpu|pages|scenario] [--rounds N] [--batch N]
[--callgrind] [--only OPERATION ...] [--background N]``.
"""

from __future__ import annotations

import argparse
import functools
import os
import re
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import runstore
from runstore import LivenessEvidence, ManualClock, RunSnapshot
from runstore.sqlite import SqliteRunStore, _migrations

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from throughput import OWNER, STATE, THIEF, Baseline  # noqa: E402

from tests.sqlite import test_sqlite_write_paths as page_test  # noqa: E402
from tests.sqlite._wal import WalReader, page_owners  # noqa: E402
from tests.sqlite.test_sqlite_write_paths import background as older_runs  # noqa: E402

PENDING = RunSnapshot("pending", None, None)
STALE_MS = 40_000

#: The operations measured, in the order printed.
OPERATIONS = (
    "create",
    "claim",
    "activate",
    "claim_and_own",
    "steal",
    "heartbeat",
    "transition_owned running",
    "transition_owned completed",
    "request_cancel",
    "abandon_claim",
    "claim_next",
)


class Searching(Baseline):
    """The raw compare-and-swap on the oldest pending row, found by an index."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.connection.execute("ALTER TABLE runs ADD COLUMN created INTEGER")
        self.connection.execute(
            "CREATE INDEX runs_pending ON runs (created, run_id) WHERE status = 'pending'"
        )

    def prepare(self, count: int) -> list[str]:
        ids = []
        for _ in range(count):
            self.serial += 1
            run_id = f"raw-{self.serial}"
            self.connection.execute(
                "INSERT INTO runs VALUES (?, 'pending', NULL, NULL, NULL, NULL, ?)",
                (run_id, self.serial),
            )
            self.connection.execute(
                "INSERT INTO leases VALUES (?, NULL, NULL, NULL, NULL)", (run_id,)
            )
            ids.append(run_id)
        return ids

    def claim(self) -> None:
        execute = self.connection.execute
        owner = (OWNER.host_id, OWNER.pid, OWNER.nonce)
        self.now += 1
        execute("BEGIN IMMEDIATE")
        row = execute(
            "SELECT run_id, status, owner_host_id, owner_pid, owner_nonce, heartbeat_at_ms "
            "FROM runs WHERE status = 'pending' ORDER BY created, run_id LIMIT 1"
        ).fetchone()
        run_id = row[0]
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
    """The store, with fresh runs prepared (untimed) in the state each operation needs."""

    def __init__(self, path: str, operation: str) -> None:
        self.clock = ManualClock(1_000_000)
        self.store: SqliteRunStore = runstore.open(path, clock=self.clock)
        self.operation = operation
        self.serial = 0
        self.tokens: dict[str, int] = {}
        self.hot = f"{operation}-hot"
        self.store.create(self.hot, STATE)
        self.store.claim_and_own(self.hot, PENDING, OWNER, self.clock.now_ms())

    def prepare(self, count: int) -> list[str]:
        store, operation, now = self.store, self.operation, self.clock.now_ms()
        ids = []
        for _ in range(count):
            self.serial += 1
            ids.append(f"{operation}-{self.serial:07d}")
        if operation == "create":
            return ids
        for run_id in ids:
            store.create(run_id, STATE)
        if operation in ("activate", "abandon_claim"):
            for run_id in ids:
                self.tokens[run_id] = store.claim(run_id, PENDING, OWNER, now).claimed_at_ms  # type: ignore[union-attr]
        if operation in ("steal", "transition_owned completed"):
            for run_id in ids:
                store.claim_and_own(run_id, PENDING, OWNER, now)
        if operation == "steal":
            self.clock.advance(STALE_MS)
        return ids

    def op(self, run_id: str, step: int) -> Callable[[], object]:
        """The measured call on ``run_id`` (a fresh run) or the hot run."""
        store, operation, now = self.store, self.operation, self.clock.now_ms()
        if operation == "create":
            return lambda: store.create(run_id, STATE)
        if operation == "claim":
            return lambda: store.claim(run_id, PENDING, OWNER, now)
        if operation == "activate":
            token = self.tokens.pop(run_id)
            return lambda: store.activate(run_id, OWNER, token, PENDING)
        if operation == "abandon_claim":
            token = self.tokens.pop(run_id)
            return lambda: store.abandon_claim(run_id, OWNER, token)
        if operation == "claim_and_own":
            return lambda: store.claim_and_own(run_id, PENDING, OWNER, now)
        if operation == "steal":
            evidence = LivenessEvidence(OWNER, now, "lease-expired")
            expected = RunSnapshot("running", OWNER, now - STALE_MS)
            return lambda: store.steal(run_id, expected, THIEF, now, evidence)
        if operation == "heartbeat":
            return lambda: store.heartbeat(self.hot, OWNER, now + step)
        if operation == "transition_owned running":
            return lambda: store.transition_owned(self.hot, OWNER, "running", STATE)
        if operation == "transition_owned completed":
            return lambda: store.transition_owned(run_id, OWNER, "completed", STATE)
        if operation == "request_cancel":
            return lambda: store.request_cancel(run_id, now)
        if operation == "claim_next":
            return lambda: store.claim_next(OWNER, now)
        raise ValueError(operation)

    def after_round(self) -> None:
        # Heartbeats and steals move the clock; keep the hot run fresh.
        self.clock.advance(1_000)
        self.store.heartbeat(self.hot, OWNER, self.clock.now_ms())


def bench_cpu(rounds: int, batch: int, operations: tuple[str, ...] = OPERATIONS) -> None:
    print(f"\n:memory:, thread CPU, median of {rounds} rounds of {batch} fresh runs")
    print(f"{'operation':<28}{'store us':>10}{'raw us':>8}{'raw/store':>11}", end="")
    print(f"{'searching raw us':>18}{'raw/store':>11}")
    clock = time.thread_time_ns
    for operation in operations:
        subject = Subject(":memory:", operation)
        raw = Baseline(":memory:")
        search = Searching(":memory:") if operation == "claim_next" else None
        ratios, searching_ratios = [], []
        store_ns, raw_ns, search_ns = [], [], []
        for round_number in range(rounds + 1):  # round 0 warms up and is dropped
            ids = subject.prepare(batch)
            raw_ids = raw.prepare(batch)
            if search is not None:
                search.prepare(batch)
            spent = [0, 0, 0]
            for step, run_id in enumerate(ids):
                operate = subject.op(run_id, step)
                started = clock()
                operate()
                spent[0] += clock() - started
                started = clock()
                raw.one(raw_ids[step])
                spent[1] += clock() - started
                if search is not None:
                    started = clock()
                    search.claim()
                    spent[2] += clock() - started
            subject.after_round()
            if round_number:
                ratios.append(spent[1] / spent[0])
                store_ns.append(spent[0] / batch)
                raw_ns.append(spent[1] / batch)
                if search is not None:
                    searching_ratios.append(spent[2] / spent[0])
                    search_ns.append(spent[2] / batch)
        subject.store.close()
        line = (
            f"{operation:<28}{statistics.median(store_ns) / 1000:>10.1f}"
            f"{statistics.median(raw_ns) / 1000:>8.1f}{statistics.median(ratios):>11.3f}"
        )
        if search is not None:
            line += (
                f"{statistics.median(search_ns) / 1000:>18.1f}"
                f"{statistics.median(searching_ratios):>11.3f}"
            )
        print(line)


def callgrind_child(batch: int, operations: tuple[str, ...] = OPERATIONS) -> None:
    """Under valgrind: per operation, one batch of the store, then one of each
    baseline, each inside one ``functools.reduce`` call (one dump each);
    prints the dumps' labels in order."""
    labels = []
    for operation in operations:
        subject = Subject(":memory:", operation)
        raw = Baseline(":memory:")
        search = Searching(":memory:") if operation == "claim_next" else None
        for measured in (False, True):
            ids = subject.prepare(batch)
            raw_ids = raw.prepare(batch)
            if search is not None:
                search.prepare(batch)
            calls = [subject.op(run_id, step) for step, run_id in enumerate(ids)]
            if not measured:  # a warm-up batch, not counted
                for call in calls:
                    call()
                for run_id in raw_ids:
                    raw.one(run_id)
                if search is not None:
                    for _ in raw_ids:
                        search.claim()
                subject.after_round()
                continue
            functools.reduce(lambda _, call: call(), calls, None)
            labels.append(f"{operation}|store")
            functools.reduce(lambda _, run_id: raw.one(run_id), raw_ids, None)
            labels.append(f"{operation}|raw")
            if search is not None:
                functools.reduce(lambda _, _run_id: search.claim(), raw_ids, None)
                labels.append(f"{operation}|searching")
        subject.store.close()
    print("\n".join(labels))


def bench_callgrind(batch: int, operations: tuple[str, ...] = OPERATIONS) -> None:
    print(f"\n:memory:, instructions per operation (callgrind), batches of {batch}")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cg.out"
        command = [
            "valgrind",
            "--tool=callgrind",
            "--collect-atstart=no",
            "--toggle-collect=functools_reduce",
            "--dump-after=functools_reduce",
            f"--callgrind-out-file={out}",
            sys.executable,
            __file__,
            "callgrind-child",
            "--batch",
            str(batch),
            *(f"--only={operation}" for operation in operations),
        ]
        done = subprocess.run(command, capture_output=True, text=True, check=True)
        labels = done.stdout.splitlines()
        dumps = sorted(Path(tmp).glob("cg.out.*"), key=lambda p: int(p.suffix[1:]))
        counts: dict[str, float] = {}
        for label, dump in zip(labels, dumps, strict=True):
            found = re.search(r"^(?:summary|totals): (\d+)", dump.read_text(), re.M)
            assert found is not None
            counts[label] = int(found.group(1)) / batch
    print(f"{'operation':<28}{'store':>10}{'raw':>9}{'raw/store':>11}", end="")
    print(f"{'searching raw':>15}{'raw/store':>11}")
    for operation in operations:
        store, raw = counts[f"{operation}|store"], counts[f"{operation}|raw"]
        line = f"{operation:<28}{store:>10.0f}{raw:>9.0f}{raw / store:>11.3f}"
        if f"{operation}|searching" in counts:
            search = counts[f"{operation}|searching"]
            line += f"{search:>15.0f}{search / store:>11.3f}"
        print(line)


def _pages(path: Path, connection: sqlite3.Connection, run: Callable[[], None], count: int) -> str:
    reader = WalReader(path)
    reader.skip()
    pages = commits = 0
    trees: Counter[str] = Counter()
    for _ in range(count):
        run()
        frames = reader.take()
        owners = page_owners(connection)
        pages += len(frames)
        commits += sum(1 for _page, end in frames if end)
        trees.update({owners.get(page, "(other)") for page, _end in frames})
    touched = ", ".join(f"{name} {n / commits:.2f}" for name, n in sorted(trees.items()))
    # The header page (written when the file grows) and free pages are no B-tree.
    count = len(set(trees) - {"sqlite_schema", "(other)"})
    return f"{pages / commits:>6.2f} pages/commit, {count} B-trees: {touched}"


def bench_pages(batch: int, background: int = 3000) -> None:
    print(f"\nWAL pages per commit on a file of {background} runs ({batch} commits each)")
    with tempfile.TemporaryDirectory() as tmp:
        raw_path = Path(tmp) / "raw.db"
        raw = Baseline(str(raw_path))
        raw.connection.execute("PRAGMA synchronous = OFF")
        raw_ids = raw.prepare(background)
        raw.connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        raw.connection.execute("PRAGMA wal_autocheckpoint = 0")
        fresh = iter(raw_ids)
        print(f"{'raw compare-and-swap':<28}", end="")
        print(_pages(raw_path, raw.connection, lambda: raw.one(next(fresh)), batch))
        for operation in OPERATIONS:
            path = Path(tmp) / f"{operation}.db"
            subject = Subject(str(path), operation)
            connection = subject.store._connection
            # No fsync (the pages a commit writes do not depend on it).
            connection.execute("PRAGMA synchronous = OFF")
            # The older runs, in one transaction: three fifths completed, a
            # fifth running, a fifth pending (as the page test lays them).
            older_runs(connection, background, subject.clock.now_ms())
            ids = subject.prepare(batch)
            connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            connection.execute("PRAGMA wal_autocheckpoint = 0")
            steps = iter(enumerate(ids))

            def run(subject: Subject = subject, steps: object = steps) -> None:
                step, run_id = next(steps)  # type: ignore[call-overload]
                subject.op(run_id, step)()

            print(f"{operation:<28}{_pages(path, connection, run, batch)}")
            subject.store.close()


def bench_scenario(background: int) -> None:
    """The page test's scenario on ``background`` older runs, with the listing
    index per status (migration 2016) and with the one status index before it
    planted back: B-trees written and pages per commit of each write."""
    print(f"\nThe page test's writes on a file of {background} older runs")
    names = [_migrations.status_index(status) for status in _migrations.STATUSES]
    before = "".join(f"DROP INDEX {name};\n" for name in names) + (
        "CREATE INDEX flows_runs_status_listing_idx ON flows_runs (status, created_at_ms, run_id);"
    )
    page_test.BACKGROUND = background
    with tempfile.TemporaryDirectory() as tmp:
        now = page_test.pages_per_commit(Path(tmp) / "now.db")
        old = page_test.pages_per_commit(Path(tmp) / "old.db", plant=before)
    print(f"{'operation':<28}{'B-trees':>8}{'pages':>7}{'before 2016: B-trees':>22}{'pages':>7}")
    for name, (touched, pages) in now.items():
        old_touched, old_pages = old[name]
        print(f"{name:<28}{len(touched):>8}{pages:>7.2f}{len(old_touched):>22}{old_pages:>7.2f}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("which", nargs="?", choices=["cpu", "pages", "scenario", "callgrind-child"])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--batch", type=int, default=200)
    parser.add_argument("--callgrind", action="store_true", help="count instructions")
    parser.add_argument(
        "--background", type=int, default=3000, help="runs already in the file (pages)"
    )
    parser.add_argument(
        "--only", action="append", choices=OPERATIONS, help="measure this operation (repeatable)"
    )
    args = parser.parse_args(argv)
    operations = tuple(args.only) if args.only else OPERATIONS
    if args.which == "callgrind-child":
        callgrind_child(args.batch, operations)
        return
    print(f"sqlite {sqlite3.sqlite_version}; load {os.getloadavg()[0]:.1f}")
    if args.which in (None, "cpu"):
        if args.callgrind:
            bench_callgrind(min(args.batch, 50), operations)
        else:
            bench_cpu(args.rounds, args.batch, operations)
    if args.which in (None, "pages"):
        bench_pages(min(args.batch, 100), args.background)
    if args.which in (None, "scenario"):
        bench_scenario(args.background)


if __name__ == "__main__":
    main()
