"""Every SQLite store operation at 10^6 runs against 10^3, beside a raw baseline (issue 28).

For each operation the store's rate at 10^6 runs over its rate at 10^3 (its
growth) is set against the same ratio of a raw baseline that does the same
work by hand with sqlite3 on the same two files and the same tables (the
revision triggers fire for both): ``relative = store growth / raw growth``.
The target is ``relative >= 0.9`` for every operation: what the store does
beyond the raw statements must not grow with the file.

Rates are operations per second of the measuring thread's CPU time (user
and system; the files sit in the page cache, so reading a page is a system
call), so the load of other processes does not move them much; store and raw
batches are interleaved, and the median of several rounds is used. The
files are in WAL mode with ``synchronous=NORMAL``, so the B-trees and not
the fsync are measured.

Each file is built in one bulk transaction of raw SQL: the oldest 20% of
runs completed, the next 38% running (owned, with their lease and
activation fact; their heartbeats are old, so they can be stolen), the
newest 50% pending; then ``check_invariants()`` on the small file. Each
write takes runs of its own, a stride apart over its part of the file, so
its batches touch cold pages at 10^6 as a real store's would. ``state``
reads the whole store (every run with its state, every lease, fact and
change entry) against the same reads by hand without decoding: one call a
batch, three rounds.

Run: ``python benchmarks/sqlite_growth.py [--rounds N] [--batch N]
[--large N] [OPERATION ...]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import runstore
from runstore import LivenessEvidence, ManualClock, OwnerId, RunSnapshot
from runstore._boundary import encode_cursor

OWNER = OwnerId("bench-host", 1, "bench-nonce")
THIEF = OwnerId("thief-host", 2, "thief-nonce")
START_MS = 1_000_000
#: The clock stands this far past the newest run, so every fixture heartbeat is stale.
LATER_MS = 1_000_000
STATE = '{"step": 1, "note": "' + "x" * 100 + '"}'
MANY = 10  # claim_next_many's limit
PAGE = 100  # list_runs and changes pages, heartbeat_many's leases
PURGE = 10  # purge_settled's limit

#: Operations that take each run once: the small file bounds their batches.
_CONSUMING = (
    "claim_and_own",
    "activate",
    "transition_owned completing",
    "steal",
    "claim_next",
    "claim_next_many",
    "purge_settled",
)
CONSUMING = frozenset(_CONSUMING)
OPERATIONS = (
    # Reads first, while the pending runs are all there.
    "get",
    "state",
    "revision",
    "list_runs page",
    "list_runs pending page",
    "changes page",
    "heartbeat",
    "heartbeat_many",
    "heartbeat_many, set-based raw",
    "transition_owned running",
    *_CONSUMING,
)
#: Operations that read the whole store: one call a batch, three rounds.
WHOLE = frozenset({"state"})


def _who(owner: OwnerId) -> tuple[str, int, str]:
    return (owner.host_id, owner.pid, owner.nonce)


def rid(number: int) -> str:
    return f"run-{number:07d}"


class Layout:
    """Which run numbers of a file of ``size`` runs are in which part."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.completed = range(size * 12 // 100)
        self.running = range(self.completed.stop, size * 50 // 100)
        self.pending = range(self.running.stop, size)


def build(path: Path, size: int) -> None:
    """The file: the store's schema, then ``size`` runs in one transaction."""
    layout = Layout(size)
    runstore.open(path, clock=ManualClock(START_MS)).close()
    c = sqlite3.connect(path, isolation_level=None)
    c.execute("PRAGMA synchronous = OFF")
    a, b = layout.running.start, layout.running.stop
    numbers = (
        f"WITH RECURSIVE g(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM g WHERE n < {size - 1})"
    )
    c.execute("BEGIN IMMEDIATE")
    c.execute(
        f"""{numbers}
        INSERT INTO flows_runs (run_id, status, created_at_ms, started_at_ms, finished_at_ms,
          owner_host_id, owner_pid, owner_nonce, heartbeat_at_ms)
        SELECT printf('run-%07d', n),
          CASE WHEN n < {a} THEN 'completed' WHEN n < {b} THEN 'running' ELSE 'pending' END,
          {START_MS} + n,
          CASE WHEN n < {b} THEN {START_MS} + n END,
          CASE WHEN n < {a} THEN {START_MS} + n + 1 END,
          CASE WHEN n >= {a} AND n < {b} THEN 'bench-host' END,
          CASE WHEN n >= {a} AND n < {b} THEN 1 END,
          CASE WHEN n >= {a} AND n < {b} THEN 'bench-nonce' END,
          CASE WHEN n >= {a} AND n < {b} THEN {START_MS} + n END
        FROM g"""
    )
    c.execute(
        f"INSERT INTO flows_run_state (run_id, state_json) SELECT run_id, '{STATE}' FROM flows_runs"
    )
    c.execute(
        """INSERT INTO flows_consensus_leases (run_id, owner_host_id, owner_pid, owner_nonce,
          granted_at_ms, heartbeat_at_ms)
        SELECT run_id, owner_host_id, owner_pid, owner_nonce, heartbeat_at_ms, heartbeat_at_ms
        FROM flows_runs WHERE status = 'running'"""
    )
    c.execute(
        """INSERT INTO flows_ownership_facts (run_id, position, transition, owner_host_id,
          owner_pid, owner_nonce, granted_at_ms)
        SELECT run_id, 1, 'activated', owner_host_id, owner_pid, owner_nonce, heartbeat_at_ms
        FROM flows_runs WHERE status = 'running'"""
    )
    c.execute("COMMIT")
    c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    c.close()


class Picks:
    """Run ids for each operation, a stride apart over its own slice of a part;
    a write that moves a run on takes each run once."""

    def __init__(self, layout: Layout, rounds: int, batch: int) -> None:
        self.layout = layout
        taken = 2 * rounds * batch  # store and raw, every round
        running = layout.running
        # Running runs: completing and stealing take each once; the rest is
        # renewed again and again (heartbeats, transitions to running).
        third = len(running) // 3
        self.slices = {
            "transition_owned completing": range(running.start, running.start + third),
            "steal": range(running.start + third, running.start + 2 * third),
            "renewed": range(running.start + 2 * third, running.stop),
        }
        pending = layout.pending
        # claim_next takes the oldest pending runs itself; the others a slice each.
        half = len(pending) // 2
        self.slices["claim_and_own"] = range(pending.start + half, pending.start + half + half // 2)
        self.slices["activate"] = range(pending.start + half + half // 2, pending.stop)
        self.taken = taken
        self.serial: dict[str, int] = {}

    def take(self, key: str, count: int, *, once: bool = True) -> list[str]:
        part = self.slices[key]
        start = self.serial.get(key, 0)
        self.serial[key] = start + count
        total = self.taken if once else max(self.taken, 64 * count)
        stride = max(1, len(part) // total)
        if once:
            assert start + count <= len(part), (key, start, count, len(part))
        return [rid(part.start + (n * stride) % len(part)) for n in range(start, start + count)]


class Subject:
    """One file, with the store and a raw connection open on it."""

    def __init__(self, path: Path, size: int, rounds: int, batch: int) -> None:
        self.size = size
        self.layout = Layout(size)
        self.clock = ManualClock(START_MS + size + LATER_MS)
        self.store: Any = runstore.open(path, clock=self.clock, durability="normal")
        self.raw = sqlite3.connect(path, isolation_level=None)
        self.raw.execute("PRAGMA synchronous = NORMAL")
        self.picks = Picks(self.layout, rounds, batch)
        self.tokens: dict[str, int] = {}

    def close(self) -> None:
        self.raw.close()
        self.store.close()

    # -- one batch of the store and one of the raw baseline, each a list of calls --

    def batches(self, operation: str, batch: int) -> tuple[list[Callable[[], object]], ...]:
        store, raw, picks = self.store, self.raw, self.picks
        self.clock.advance(1)
        now = self.clock.now_ms()
        pending = RunSnapshot("pending", None, None)
        if operation == "heartbeat":
            ids = picks.take("renewed", 2 * batch, once=False)
            return (
                [lambda r=r: _ok(store.heartbeat(r, OWNER, now)) for r in ids[:batch]],
                [lambda r=r: raw_heartbeat(raw, r, now) for r in ids[batch:]],
            )
        if operation == "transition_owned running":
            ids = picks.take("renewed", 2 * batch, once=False)
            return (
                [lambda r=r: _ok(store.transition_owned(r, OWNER, "running")) for r in ids[:batch]],
                [lambda r=r: raw_keep_running(raw, r) for r in ids[batch:]],
            )
        if operation == "claim_and_own":
            ids = picks.take("claim_and_own", 2 * batch)
            return (
                [lambda r=r: _ok(store.claim_and_own(r, pending, OWNER, now)) for r in ids[:batch]],
                [lambda r=r: raw_claim_and_own(raw, r, now) for r in ids[batch:]],
            )
        if operation == "activate":
            ids = picks.take("activate", 2 * batch)
            for r in ids:  # untimed: the claim each activation needs
                self.tokens[r] = store.claim(r, pending, OWNER, now).claimed_at_ms
            tokens = self.tokens
            return (
                [
                    lambda r=r: _ok(store.activate(r, OWNER, tokens[r], pending))
                    for r in ids[:batch]
                ],
                [lambda r=r: raw_activate(raw, r, now) for r in ids[batch:]],
            )
        if operation == "transition_owned completing":
            ids = picks.take("transition_owned completing", 2 * batch)
            return (
                [
                    lambda r=r: _ok(store.transition_owned(r, OWNER, "completed", STATE))
                    for r in ids[:batch]
                ],
                [lambda r=r: raw_complete(raw, r, now) for r in ids[batch:]],
            )
        if operation == "steal":
            ids = picks.take("steal", 2 * batch)
            evidence = LivenessEvidence(OWNER, now, "lease-expired")

            def steal(r: str) -> object:
                created = START_MS + int(r[4:])
                expected = RunSnapshot("running", OWNER, created)
                return _ok(store.steal(r, expected, THIEF, now, evidence))

            return (
                [lambda r=r: steal(r) for r in ids[:batch]],
                [lambda r=r: raw_steal(raw, r, now) for r in ids[batch:]],
            )
        if operation == "claim_next":
            return (
                [lambda: _ok(store.claim_next(OWNER, now)) for _ in range(batch)],
                [lambda: raw_claim_next(raw, now, 1) for _ in range(batch)],
            )
        if operation == "claim_next_many":
            calls = max(1, batch // MANY)
            return (
                [lambda: _ok(store.claim_next_many(OWNER, now, MANY)) for _ in range(calls)],
                [lambda: raw_claim_next(raw, now, MANY) for _ in range(calls)],
            )
        if operation == "get":
            ids = picks.take("renewed", 2 * batch, once=False)
            return (
                [lambda r=r: store.get(r) for r in ids[:batch]],
                [lambda r=r: raw_get(raw, r) for r in ids[batch:]],
            )
        if operation == "state":
            return ([store.state], [lambda: raw_state(raw)])
        if operation == "revision":
            return (
                [store.revision for _ in range(batch)],
                [lambda: raw.execute(RAW_REVISION).fetchone() for _ in range(batch)],
            )
        if operation in ("list_runs page", "list_runs pending page"):
            status = "pending" if "pending" in operation else None
            part = self.layout.pending if status else range(self.size)
            # Pages starting at points spread over the part.
            starts = [part.start + (n * 7919) % (len(part) - PAGE - 1) for n in range(batch)]
            cursors = [(START_MS + n, rid(n)) for n in starts]
            return (
                [
                    lambda c=c: _page(store.list_runs(status=status, after=encode_cursor(*c)))
                    for c in cursors
                ],
                [lambda c=c: raw_list(raw, c, status) for c in cursors],
            )
        if operation == "changes page":
            head = store.revision()
            return (
                [lambda: _page(store.changes(head - PAGE)) for _ in range(batch)],
                [lambda: raw_changes(raw, head - PAGE) for _ in range(batch)],
            )
        if operation.startswith("heartbeat_many"):
            calls = max(1, batch // 5)
            groups = [picks.take("renewed", PAGE, once=False) for _ in range(2 * calls)]
            by_hand = raw_heartbeat_many_set if "set-based" in operation else raw_heartbeat_many
            return (
                [lambda g=g: _ok(store.heartbeat_many(OWNER, g, now)) for g in groups[:calls]],
                [lambda g=g: by_hand(raw, g, now) for g in groups[calls:]],
            )
        if operation == "purge_settled":
            # Each purge takes the oldest settled runs: the store's batch,
            # then the raw one's, each its own.
            before = START_MS + self.size
            calls = max(1, batch // PURGE)
            return (
                [lambda: _purged(store.purge_settled(before, limit=PURGE)) for _ in range(calls)],
                [lambda: raw_purge(raw, before, PURGE) for _ in range(calls)],
            )
        raise ValueError(operation)


_WON = {"Claimed", "Activated", "Updated", "Transitioned", "RunRow"}


def _ok(outcome: object) -> object:
    """The outcome, after checking the store did the write (a benchmark of
    refusals would measure something else)."""
    answers = outcome if isinstance(outcome, list) else [outcome]
    if isinstance(outcome, dict):
        answers = list(outcome.values())
    lost = [type(a).__name__ for a in answers if type(a).__name__ not in _WON]
    if not answers or lost:
        raise AssertionError(f"the store refused a benchmark write: {lost or 'nothing'}")
    return outcome


def _page(rows: object) -> object:
    assert len(getattr(rows, "runs", rows)) == PAGE, "short page"  # type: ignore[arg-type]
    return rows


def _purged(count: int) -> int:
    assert count == PURGE, count
    return count


# -- the raw baseline: the same work by hand on the same tables ------------------------

_READ = (
    "SELECT status, owner_host_id, owner_pid, owner_nonce, heartbeat_at_ms, claim_host_id "
    "FROM flows_runs WHERE run_id = ?"
)
_FACT = (
    "INSERT INTO flows_ownership_facts (run_id, position, transition, owner_host_id, "
    "owner_pid, owner_nonce, granted_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?)"
)
RAW_REVISION = "SELECT revision FROM flows_run_source WHERE singleton = 1"
#: One heartbeat by hand: OWNER's lease row, then its run row.
_RENEW_LEASE = (
    "UPDATE flows_consensus_leases SET heartbeat_at_ms = MAX(heartbeat_at_ms, ?) "
    "WHERE run_id = ? AND owner_host_id = ? AND owner_pid = ? AND owner_nonce = ?"
)
_RENEW_RUN = (
    "UPDATE flows_runs SET heartbeat_at_ms = MAX(heartbeat_at_ms, ?) WHERE run_id = ? "
    "AND status = 'running' AND owner_host_id = ? AND owner_pid = ? AND owner_nonce = ?"
)


def raw_heartbeat(raw: sqlite3.Connection, r: str, now: int) -> None:
    execute = raw.execute
    execute("BEGIN IMMEDIATE")
    execute(_READ, (r,)).fetchone()
    execute(_RENEW_LEASE, (now, r, *_who(OWNER)))
    execute(_RENEW_RUN, (now, r, *_who(OWNER)))
    execute("COMMIT")


def raw_heartbeat_many(raw: sqlite3.Connection, ids: list[str], now: int) -> None:
    execute = raw.execute
    execute("BEGIN IMMEDIATE")
    for r in sorted(ids):
        execute(_RENEW_LEASE, (now, r, *_who(OWNER)))
        execute(_RENEW_RUN, (now, r, *_who(OWNER)))
    execute("COMMIT")


def raw_heartbeat_many_set(raw: sqlite3.Connection, ids: list[str], now: int) -> None:
    """The same renewals as two set-based statements (the lease rows, then the
    run rows), as the store writes them."""
    execute = raw.execute
    packed = json.dumps(sorted(ids))
    execute("BEGIN IMMEDIATE")
    execute(
        "UPDATE flows_consensus_leases SET heartbeat_at_ms = MAX(heartbeat_at_ms, ?1) "
        "WHERE run_id IN (SELECT value FROM json_each(?2)) "
        "AND owner_host_id = ?3 AND owner_pid = ?4 AND owner_nonce = ?5",
        (now, packed, *_who(OWNER)),
    )
    execute(
        "UPDATE flows_runs SET heartbeat_at_ms = MAX(heartbeat_at_ms, ?1) "
        "WHERE run_id IN (SELECT value FROM json_each(?2)) AND +status = 'running' "
        "AND owner_host_id = ?3 AND owner_pid = ?4 AND owner_nonce = ?5",
        (now, packed, *_who(OWNER)),
    )
    execute("COMMIT")


def raw_keep_running(raw: sqlite3.Connection, r: str) -> None:
    execute = raw.execute
    execute("BEGIN IMMEDIATE")
    execute(_READ, (r,)).fetchone()
    execute(
        "UPDATE flows_runs SET finished_at_ms = NULL WHERE run_id = ? AND status = 'running' "
        "AND owner_host_id = ? AND owner_pid = ? AND owner_nonce = ?",
        (r, *_who(OWNER)),
    )
    execute("COMMIT")


def _own(raw: sqlite3.Connection, r: str, now: int, position: int, *, claimed: bool) -> None:
    """A pending run becomes OWNER's: its lease, its row, its facts."""
    execute = raw.execute
    who = _who(OWNER)
    if claimed:
        execute(
            "UPDATE flows_consensus_leases SET owner_host_id = ?, owner_pid = ?, owner_nonce = ?, "
            "granted_at_ms = ?, heartbeat_at_ms = ?, claim_host_id = NULL, claim_pid = NULL, "
            "claim_nonce = NULL, claimed_at_ms = NULL WHERE run_id = ?",
            (*who, now, now, r),
        )
    else:
        execute(
            "INSERT INTO flows_consensus_leases (run_id, owner_host_id, owner_pid, owner_nonce, "
            "granted_at_ms, heartbeat_at_ms) VALUES (?, ?, ?, ?, ?, ?)",
            (r, *who, now, now),
        )
    execute(
        "UPDATE flows_runs SET status = 'running', started_at_ms = ?, owner_host_id = ?, "
        "owner_pid = ?, owner_nonce = ?, heartbeat_at_ms = ?, claim_host_id = NULL, "
        "claim_pid = NULL, claim_nonce = NULL, claimed_at_ms = NULL WHERE run_id = ? "
        "AND status = 'pending'",
        (now, *who, now, r),
    )
    if not claimed:
        execute(_FACT, (r, position, "claimed", *who, now))
        position += 1
    execute(_FACT, (r, position, "activated", *who, now))


def raw_claim_and_own(raw: sqlite3.Connection, r: str, now: int) -> None:
    raw.execute("BEGIN IMMEDIATE")
    raw.execute(_READ, (r,)).fetchone()
    _own(raw, r, now, 1, claimed=False)
    raw.execute("COMMIT")


def raw_activate(raw: sqlite3.Connection, r: str, now: int) -> None:
    raw.execute("BEGIN IMMEDIATE")
    raw.execute(_READ, (r,)).fetchone()
    _own(raw, r, now, 2, claimed=True)
    raw.execute("COMMIT")


def raw_claim_next(raw: sqlite3.Connection, now: int, limit: int) -> None:
    execute = raw.execute
    execute("BEGIN IMMEDIATE")
    rows = execute(
        "SELECT r.run_id, r.status, s.state_json FROM flows_runs AS r "
        "INDEXED BY flows_runs_claimable_idx JOIN flows_run_state AS s ON s.run_id = r.run_id "
        "WHERE r.status IN ('pending', 'suspended') AND r.claim_host_id IS NULL "
        "ORDER BY r.created_at_ms, r.run_id LIMIT ?",
        (limit,),
    ).fetchall()
    assert len(rows) == limit
    for row in rows:
        _own(raw, row[0], now, 1, claimed=False)
    execute("COMMIT")


def raw_complete(raw: sqlite3.Connection, r: str, now: int) -> None:
    execute = raw.execute
    who = _who(OWNER)
    execute("BEGIN IMMEDIATE")
    execute(_READ, (r,)).fetchone()
    execute("DELETE FROM flows_consensus_leases WHERE run_id = ?", (r,))
    execute(
        "UPDATE flows_runs SET status = 'completed', finished_at_ms = ?, owner_host_id = NULL, "
        "owner_pid = NULL, owner_nonce = NULL, heartbeat_at_ms = NULL WHERE run_id = ? "
        "AND status = 'running' AND owner_host_id = ? AND owner_pid = ? AND owner_nonce = ?",
        (now, r, *who),
    )
    execute("UPDATE flows_run_state SET state_json = ? WHERE run_id = ?", (STATE, r))
    execute(_FACT, (r, 2, "released", *who, None))
    execute("COMMIT")


def raw_steal(raw: sqlite3.Connection, r: str, now: int) -> None:
    execute = raw.execute
    thief = _who(THIEF)
    execute("BEGIN IMMEDIATE")
    execute(_READ, (r,)).fetchone()
    execute(
        "UPDATE flows_consensus_leases SET claim_host_id = ?, claim_pid = ?, claim_nonce = ?, "
        "claimed_at_ms = ? WHERE run_id = ?",
        (*thief, now, r),
    )
    execute(
        "UPDATE flows_runs SET claim_host_id = ?, claim_pid = ?, claim_nonce = ?, "
        "claimed_at_ms = ? WHERE run_id = ? AND claim_host_id IS NULL",
        (*thief, now, r),
    )
    execute(_FACT, (r, 2, "stolen", *thief, now))
    execute("COMMIT")


_COLUMNS = (
    "r.run_id, r.status, r.created_at_ms, r.started_at_ms, r.finished_at_ms, r.owner_host_id, "
    "r.owner_pid, r.owner_nonce, r.heartbeat_at_ms, r.claim_host_id, r.claim_pid, "
    "r.claim_nonce, r.claimed_at_ms, r.parent_run_id, r.cancel_requested_at_ms, r.lineage_id, "
    "r.round_ordinal"
)


def raw_get(raw: sqlite3.Connection, r: str) -> None:
    row = raw.execute(
        f"SELECT {_COLUMNS}, s.state_json FROM flows_runs AS r "
        "JOIN flows_run_state AS s ON s.run_id = r.run_id WHERE r.run_id = ?",
        (r,),
    ).fetchone()
    assert row is not None


def raw_state(raw: sqlite3.Connection) -> None:
    """Every run with its state, every lease, fact and change entry, in one
    read transaction (what ``state()`` returns), without decoding."""
    execute = raw.execute
    execute("BEGIN")
    execute(
        f"SELECT {_COLUMNS}, s.state_json FROM flows_runs AS r "
        "LEFT JOIN flows_run_state AS s ON s.run_id = r.run_id ORDER BY r.run_id"
    ).fetchall()
    execute("SELECT * FROM flows_consensus_leases ORDER BY run_id").fetchall()
    execute("SELECT * FROM flows_ownership_facts ORDER BY run_id, position").fetchall()
    execute(RAW_REVISION).fetchone()
    execute("SELECT run_id, revision, deleted FROM flows_run_changes ORDER BY revision").fetchall()
    execute("COMMIT")


def raw_list(raw: sqlite3.Connection, cursor: tuple[int, str], status: str | None) -> None:
    where = "r.status = 'pending' AND " if status else ""
    rows = raw.execute(
        f"SELECT {_COLUMNS} FROM flows_runs AS r WHERE {where}"
        "(r.created_at_ms, r.run_id) > (?, ?) ORDER BY r.created_at_ms, r.run_id LIMIT ?",
        (*cursor, PAGE + 1),
    ).fetchall()
    assert len(rows) == PAGE + 1


def raw_changes(raw: sqlite3.Connection, after: int) -> None:
    rows = raw.execute(
        "SELECT run_id, revision, deleted FROM flows_run_changes WHERE revision > ? "
        "ORDER BY revision",
        (after,),
    ).fetchall()
    assert len(rows) == PAGE


def raw_purge(raw: sqlite3.Connection, before: int, limit: int) -> None:
    execute = raw.execute
    execute("BEGIN IMMEDIATE")
    ids = [
        row[0]
        for row in execute(
            "SELECT run_id FROM flows_runs INDEXED BY flows_runs_finished_idx "
            "WHERE finished_at_ms < ? AND status = 'completed' "
            "ORDER BY finished_at_ms, run_id LIMIT ?",
            (before, limit),
        )
    ]
    assert len(ids) == limit
    for table in ("flows_ownership_facts", "flows_run_state", "flows_consensus_leases"):
        execute(f"DELETE FROM {table} WHERE run_id IN ({', '.join('?' * len(ids))})", ids)
    execute(f"DELETE FROM flows_runs WHERE run_id IN ({', '.join('?' * len(ids))})", ids)
    execute("COMMIT")


# -- measuring ----------------------------------------------------------------------------


def _spent(calls: list[Callable[[], object]]) -> float:
    clock = time.thread_time_ns
    started = clock()
    for call in calls:
        call()
    return (clock() - started) / 1e9


def measure(
    subjects: dict[int, Subject],
    fresh: Callable[[], Subject],
    operation: str,
    rounds: int,
    batch: int,
) -> Iterator[tuple[int, float, float]]:
    """(size, store ops/s, raw ops/s) per size: medians of ``rounds``. An
    operation that takes each run once gets a new small file each round
    (``fresh``; the large one has runs enough for every round)."""
    store_rate: dict[int, list[float]] = {size: [] for size in subjects}
    raw_rate: dict[int, list[float]] = {size: [] for size in subjects}
    small = min(subjects)
    consuming = operation in CONSUMING
    size_of_batch = batch if consuming else 5 * batch
    if operation in WHOLE:
        rounds = min(rounds, 3)
    for round_number in range(rounds + 1):  # round 0 warms up and is dropped
        for size in subjects:
            subject = subjects[size]
            if consuming and size == small:
                subject.close()
                subject = subjects[size] = fresh()
                # Untimed: the new connections compile their statements.
                for calls in subject.batches(operation, MANY):
                    for call in calls:
                        call()
            store_calls, raw_calls = subject.batches(operation, size_of_batch)
            # Alternate which side goes first, so neither always finds the
            # other's pages in the cache.
            if round_number % 2:
                raw_s, store_s = _spent(raw_calls), _spent(store_calls)
            else:
                store_s, raw_s = _spent(store_calls), _spent(raw_calls)
            if round_number:
                store_rate[size].append(len(store_calls) / store_s)
                raw_rate[size].append(len(raw_calls) / raw_s)
    for size in subjects:
        yield size, statistics.median(store_rate[size]), statistics.median(raw_rate[size])


def _rate(value: float) -> str:
    return f"{value:.0f}" if value >= 100 else f"{value:.3g}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("operations", nargs="*", choices=[*OPERATIONS, []])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--batch", type=int, default=20)
    parser.add_argument("--large", type=int, default=1_000_000)
    args = parser.parse_args(argv)
    operations = args.operations or OPERATIONS
    sizes = (1_000, args.large)
    print(
        f"sqlite {sqlite3.sqlite_version}; load {os.getloadavg()[0]:.1f}; "
        f"thread CPU, medians of {args.rounds} interleaved rounds of {args.batch}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        serial = iter(range(1_000_000))

        def fresh(size: int = sizes[0]) -> Subject:
            path = folder / f"growth-{size}-{next(serial)}.db"
            build(path, size)
            return Subject(path, size, args.rounds + 1, args.batch)

        subjects = {}
        for size in sizes:
            started = time.perf_counter()
            subjects[size] = fresh(size)
            print(f"built {size} runs in {time.perf_counter() - started:.1f} s")
        subjects[sizes[0]].store.check_invariants()
        print(
            f"{'operation':<30}{'store ops/s':>22}{'raw ops/s':>22}"
            f"{'store':>8}{'raw':>8}{'relative':>10}"
        )
        print(f"{'':<30}{'10^3 / large':>22}{'10^3 / large':>22}{'growth':>8}{'growth':>8}")
        for operation in operations:
            measured = measure(subjects, fresh, operation, args.rounds, args.batch)
            figures = {size: (s, r) for size, s, r in measured}
            (s_small, r_small), (s_large, r_large) = figures[sizes[0]], figures[sizes[1]]
            s, r = s_large / s_small, r_large / r_small
            rates = "".join(f"{_rate(x):>11}" for x in (s_small, s_large, r_small, r_large))
            print(f"{operation:<30}{rates}{s:>8.3f}{r:>8.3f}{s / r:>10.2f}", flush=True)
        for subject in subjects.values():
            subject.close()


if __name__ == "__main__":
    main()
