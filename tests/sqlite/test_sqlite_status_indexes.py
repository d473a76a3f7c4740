"""Migration 2016: one listing index per status on SQLite (issue 28).

A file stopped before 2016 has one index led by the status; opening it with
this version replaces that index by one per status, keeps every run, and
every listing by status is served by its status's index, in listing order.
A store that had the file open before the upgrade keeps reading and writing
it (its statements are prepared again against the new indexes).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import runstore
from runstore import ManualClock, OwnerId, RunSnapshot
from runstore.sqlite import _migrations

OWNER = OwnerId("host-a", 1, "a1")
PENDING = RunSnapshot("pending", None, None)


def _indexes(connection: sqlite3.Connection) -> set[str]:
    rows = sqlite3.Connection.execute(
        connection, "SELECT name FROM sqlite_master WHERE type = 'index'"
    ).fetchall()
    return {str(row[0]) for row in rows}


def _plan(connection: sqlite3.Connection, sql: str, params: tuple[object, ...]) -> str:
    rows = sqlite3.Connection.execute(connection, "EXPLAIN QUERY PLAN " + sql, params)
    return "\n".join(str(row[3]) for row in rows)


def test_a_file_from_before_2016_gets_an_index_per_status_and_keeps_its_runs(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.db"
    clock = ManualClock(1_000)
    before = [m.id for m in _migrations.MIGRATIONS].index(2016)
    connection = sqlite3.connect(path, isolation_level=None)
    _migrations.apply(connection, before)
    assert "flows_runs_status_listing_idx" in _indexes(connection)
    connection.close()
    # Runs of every status, written by a store on the old schema: opened
    # with migrate=False it refuses to migrate, so build them by hand first.
    old = sqlite3.connect(path, isolation_level=None)
    statuses = ("completed", "pending", "running", "suspended", "failed", "cancelled")
    for number in range(30):
        status = statuses[number % len(statuses)]
        running = status == "running"
        settled = status in ("completed", "failed", "cancelled")
        old.execute(
            "INSERT INTO flows_runs (run_id, status, created_at_ms, started_at_ms, "
            "finished_at_ms, owner_host_id, owner_pid, owner_nonce, heartbeat_at_ms) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                f"r-{number:03d}",
                status,
                100 - number,  # listing order is not insertion order
                100 if running or settled else None,
                200 if settled else None,
                *((OWNER.host_id, OWNER.pid, OWNER.nonce, 900) if running else (None,) * 4),
            ),
        )
        old.execute(
            "INSERT INTO flows_run_state (run_id, state_json) VALUES (?, '{}')",
            (f"r-{number:03d}",),
        )
        if running:
            old.execute(
                "INSERT INTO flows_consensus_leases (run_id, owner_host_id, owner_pid, "
                "owner_nonce, granted_at_ms, heartbeat_at_ms) VALUES (?, ?, ?, ?, 900, 900)",
                (f"r-{number:03d}", OWNER.host_id, OWNER.pid, OWNER.nonce),
            )
            old.execute(
                "INSERT INTO flows_ownership_facts VALUES (?, 1, 'activated', ?, ?, ?, 900)",
                (f"r-{number:03d}", OWNER.host_id, OWNER.pid, OWNER.nonce),
            )
    expected = {
        status: [
            run_id
            for _created, run_id in sorted(
                (100 - n, f"r-{n:03d}") for n in range(30) if statuses[n % 6] == status
            )
        ]
        for status in statuses
    }

    with runstore.open(path, clock=clock) as store:
        store.check_invariants()
        connection = store._connection
        indexes = _indexes(connection)
        assert "flows_runs_status_listing_idx" not in indexes
        for status in statuses:
            name = _migrations.status_index(status)
            assert name in indexes
            listed = store.list_runs(status=status, limit=3)
            first = [row.run_id for row in listed.runs]
            assert first == expected[status][:3], status
            rest = store.list_runs(status=status, after=listed.next)
            assert first + [row.run_id for row in rest.runs] == expected[status], status
            plan = _plan(
                connection,
                "SELECT run_id FROM flows_runs AS r WHERE r.status = '" + status + "' "
                "ORDER BY r.created_at_ms, r.run_id LIMIT 5",
                (),
            )
            assert name in plan, plan
            assert "TEMP B-TREE" not in plan, plan
        # The store that migrated writes through the new indexes.
        assert store.claim_next(OWNER, 1_000, status="pending") is not None
        assert len(store.list_runs(status="pending").runs) == len(expected["pending"]) - 1
        store.check_invariants()

    # A connection that had the file open before the upgrade sees the new
    # schema at its next statement, and the index stays consistent.
    assert old.execute("SELECT count(*) FROM flows_runs WHERE status = 'running'").fetchone() == (
        len(expected["running"]) + 1,
    )
    old.execute(
        "UPDATE flows_runs SET status = 'failed', finished_at_ms = 300, "
        "owner_host_id = NULL, owner_pid = NULL, owner_nonce = NULL, "
        "heartbeat_at_ms = NULL WHERE run_id = ?",
        (expected["running"][0],),
    )
    assert old.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    old.close()
    with runstore.open(path, clock=clock) as store:
        failed = [row.run_id for row in store.list_runs(status="failed").runs]
        assert expected["running"][0] in failed
        recorded = sqlite3.Connection.execute(
            store._connection, "SELECT name FROM flows_migrations WHERE id = 2016"
        ).fetchone()
        assert recorded == ("runstore_status_indexes",)
