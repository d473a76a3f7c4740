"""The schema's history: recorded migrations, upgrades with rows in them, refusals.

A file is built at every earlier point of the chain by applying only its first
k migrations to a raw connection, rows are inserted the way that version
stored them, and ``runstore.open`` must upgrade it: baseline revisions in
creation order, a 32-hex source identity, leases (and facts) for owned and
claimed runs, run state moved to its own table, and a store that works.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

import runstore
from runstore import (
    Activated,
    Claimed,
    FenceLost,
    HeartbeatFresh,
    LivenessEvidence,
    ManualClock,
    OwnershipFact,
    RunChange,
    RunSnapshot,
    RunStoreError,
    Transitioned,
    UnsupportedDatabaseError,
    Updated,
)
from runstore.consensus import Lease, LocalConsensus, SqlConsensus
from runstore.sqlite import _migrations, _open

from .._sqlite import OTHER, OWNER

CHAIN = _migrations.MIGRATIONS
POSITION = {m.id: index + 1 for index, m in enumerate(CHAIN)}


def _build(path: Path, count: int) -> sqlite3.Connection:
    connection = sqlite3.connect(path, isolation_level=None)
    connection.execute("PRAGMA foreign_keys = ON")
    _migrations.apply(connection, count)
    return connection


def _insert(connection: sqlite3.Connection, count: int, **row: Any) -> None:
    """Insert a run as the schema after ``count`` migrations stores it."""
    state = row.pop("state_json")
    columns = dict(row)
    if count < POSITION[2002]:
        columns["state_json"] = state
    names = ", ".join(columns)
    marks = ", ".join("?" for _ in columns)
    connection.execute(
        f"INSERT INTO flows_runs ({names}) VALUES ({marks})", tuple(columns.values())
    )
    if count >= POSITION[2002]:
        connection.execute(
            "INSERT INTO flows_run_state (run_id, state_json) VALUES (?, ?)", (row["run_id"], state)
        )


def _old_rows(connection: sqlite3.Connection, count: int) -> None:
    # Inserted out of creation order: the baseline numbers by created_at_ms.
    _insert(
        connection,
        count,
        run_id="b-pending",
        status="pending",
        created_at_ms=5,
        state_json='{"b":1}',
    )
    _insert(
        connection,
        count,
        run_id="a-running",
        status="running",
        created_at_ms=3,
        started_at_ms=3,
        owner_host_id=OWNER.host_id,
        owner_pid=OWNER.pid,
        owner_nonce=OWNER.nonce,
        heartbeat_at_ms=1000,
        state_json='{"a":[1,2]}',
    )
    _insert(
        connection,
        count,
        run_id="c-claimed",
        status="suspended",
        created_at_ms=9,
        claim_host_id=OTHER.host_id,
        claim_pid=OTHER.pid,
        claim_nonce=OTHER.nonce,
        claimed_at_ms=2000,
        state_json="[]",
    )
    # Tables that already existed at this version hold what the store of that
    # version wrote with the rows: the leases, then the facts.
    if count >= POSITION[6]:
        connection.execute(
            "INSERT INTO flows_consensus_leases "
            "VALUES (?, ?, ?, ?, 1000, 1000, NULL, NULL, NULL, NULL)",
            ("a-running", OWNER.host_id, OWNER.pid, OWNER.nonce),
        )
        connection.execute(
            "INSERT INTO flows_consensus_leases "
            "VALUES (?, NULL, NULL, NULL, NULL, NULL, ?, ?, ?, 2000)",
            ("c-claimed", OTHER.host_id, OTHER.pid, OTHER.nonce),
        )
    if count >= POSITION[2001]:
        for run_id, transition, who, granted in (
            ("a-running", "activated", OWNER, 1000),
            ("c-claimed", "claimed", OTHER, 2000),
        ):
            connection.execute(
                "INSERT INTO flows_ownership_facts VALUES (?, 1, ?, ?, ?, ?, ?)",
                (run_id, transition, who.host_id, who.pid, who.nonce, granted),
            )


@pytest.mark.parametrize("count", range(1, len(CHAIN)))
@pytest.mark.parametrize("strategy", ["sql", "local"])
def test_a_file_from_an_earlier_version_upgrades_with_its_rows(
    tmp_path: Path, count: int, strategy: str
) -> None:
    """Rows written at every earlier version survive the upgrade and the store works."""
    path = tmp_path / "old.db"
    connection = _build(path, count)
    _old_rows(connection, count)
    connection.close()
    clock = ManualClock(5000)
    consensus = SqlConsensus() if strategy == "sql" else LocalConsensus()
    with runstore.open(path, clock=clock, consensus=consensus) as store:
        store.check_invariants()
        assert [row.run_id for row in store.state().rows] == ["a-running", "b-pending", "c-claimed"]
        assert store.get("a-running").state_json == '{"a":[1,2]}'
        assert store.get("b-pending").state_json == '{"b":1}'
        if count < POSITION[1003]:
            # The baseline numbers existing runs 1..n by creation time.
            assert store.changes(0) == [
                RunChange("a-running", 1, False),
                RunChange("b-pending", 2, False),
                RunChange("c-claimed", 3, False),
            ]
        else:
            # Triggers existed: one revision per insert, in insert order.
            assert [change.run_id for change in store.changes(0)] == [
                "b-pending",
                "a-running",
                "c-claimed",
            ]
        assert store.revision() == 3
        (source,) = store._connection.execute("SELECT source FROM flows_run_source").fetchone()
        assert len(source) == 32
        assert set(source) <= set("0123456789abcdef")
        leases = store.state().leases
        assert leases == (
            Lease("a-running", OWNER, 1000, 1000, None, None),
            Lease("c-claimed", None, None, None, OTHER, 2000),
        )
        assert store.ownership_facts("a-running") == [
            OwnershipFact("a-running", "activated", OWNER, 1000, 1)
        ]
        assert store.ownership_facts("c-claimed") == [
            OwnershipFact("c-claimed", "claimed", OTHER, 2000, 1)
        ]
        # The old owner keeps its fence; the old claim can still be activated.
        assert store.heartbeat("a-running", OWNER, 5000) == Updated()
        suspended = RunSnapshot("suspended", None, None)
        assert store.activate("c-claimed", OTHER, 2000, suspended) == Activated()
        store.check_invariants()
    recorded = sqlite3.connect(path).execute("SELECT id FROM flows_migrations").fetchall()
    assert sorted(row[0] for row in recorded) == sorted(m.id for m in CHAIN)


def test_a_running_row_from_before_the_lease_table_keeps_its_fence(tmp_path: Path) -> None:
    """Upstream's ConsensusUpgrade: a pre-lease owner keeps its fence while live,
    and once stale is taken over with lease-expired evidence and fenced out."""
    path = tmp_path / "old.db"
    connection = _build(path, POSITION[6] - 1)
    _insert(
        connection,
        POSITION[6] - 1,
        run_id="run",
        status="running",
        created_at_ms=0,
        started_at_ms=0,
        owner_host_id=OWNER.host_id,
        owner_pid=OWNER.pid,
        owner_nonce=OWNER.nonce,
        heartbeat_at_ms=1000,
        state_json="{}",
    )
    connection.close()
    clock = ManualClock(1000)
    with runstore.open(path, clock=clock) as store:
        row = store.get("run")
        assert (
            store.claim_and_own(
                "run", row, OTHER, 1000, LivenessEvidence(OWNER, 1000, "lease-expired")
            )
            == HeartbeatFresh()
        )
        assert store.transition_owned("run", OWNER, "running", '{"step":1}') == Transitioned()
        clock.set(31_001)
        evidence = LivenessEvidence(OWNER, 31_001, "lease-expired")
        assert store.steal("run", store.get("run"), OTHER, 31_001, evidence) == Claimed(31_001)
        assert store.activate("run", OTHER, 31_001, row) == Activated()
        assert store.heartbeat("run", OWNER, 31_001) == FenceLost()
        assert store.transition_owned("run", OWNER, "completed") == FenceLost()
        assert store.transition_owned("run", OTHER, "completed") == Transitioned()
        store.check_invariants()


def test_a_fresh_file_records_every_migration(tmp_path: Path) -> None:
    """The bookkeeping table lists the whole chain under upstream's names."""
    with runstore.open(tmp_path / "new.db"):
        pass
    rows = (
        sqlite3.connect(tmp_path / "new.db")
        .execute("SELECT id, name FROM flows_migrations ORDER BY id")
        .fetchall()
    )
    assert rows == sorted((m.id, m.name) for m in CHAIN)
    assert (1001, "run-store_initial") in rows
    assert (6, "journal_consensus") in rows


def test_the_replayed_schema_has_upstreams_columns(tmp_path: Path) -> None:
    """flows_runs keeps every upstream column but the state, which moved out."""
    with runstore.open(tmp_path / "new.db") as store:
        columns = [row[1] for row in store._connection.execute("PRAGMA table_info(flows_runs)")]
    assert columns == [
        "run_id",
        "status",
        "created_at_ms",
        "started_at_ms",
        "finished_at_ms",
        "owner_host_id",
        "owner_pid",
        "owner_nonce",
        "heartbeat_at_ms",
        "claim_host_id",
        "claim_pid",
        "claim_nonce",
        "claimed_at_ms",
        "parent_run_id",
        "cancel_requested_at_ms",
        "waiting_reason",
        "waiting_wake_at_ms",
        "waiting_token",
        "lineage_id",
        "round_ordinal",
        "cancel_acknowledgement_json",
        "waiting_request",
    ]


def test_a_newer_schema_is_refused_and_left_alone(tmp_path: Path) -> None:
    """A migration this version does not know means the file is from the future."""
    path = tmp_path / "future.db"
    with runstore.open(path):
        pass
    raw = sqlite3.connect(path, isolation_level=None)
    raw.execute("INSERT INTO flows_migrations (id, name) VALUES (9001, 'runstore_from_the_future')")
    raw.close()
    with pytest.raises(UnsupportedDatabaseError) as caught:
        runstore.open(path)
    assert caught.value.code == "persistence_failed"
    assert caught.value.cause["unknown_migrations"] == [9001]
    count = sqlite3.connect(path).execute("SELECT count(*) FROM flows_migrations").fetchone()
    assert count == (len(CHAIN) + 1,)


def test_a_renamed_migration_is_refused(tmp_path: Path) -> None:
    """A known id under another name is somebody else's bookkeeping."""
    path = tmp_path / "renamed.db"
    with runstore.open(path):
        pass
    raw = sqlite3.connect(path, isolation_level=None)
    raw.execute("UPDATE flows_migrations SET name = 'elsewhere_initial' WHERE id = 1001")
    raw.close()
    with pytest.raises(UnsupportedDatabaseError):
        runstore.open(path)


def test_a_foreign_sqlite_file_is_refused_and_left_alone(tmp_path: Path) -> None:
    """A database with tables but no runstore bookkeeping is not ours to migrate."""
    path = tmp_path / "foreign.db"
    raw = sqlite3.connect(path)
    raw.execute("CREATE TABLE users (name TEXT)")
    raw.commit()
    raw.close()
    with pytest.raises(UnsupportedDatabaseError) as caught:
        runstore.open(path)
    assert "not a runstore database" in str(caught.value)
    names = sqlite3.connect(path).execute("SELECT name FROM sqlite_master").fetchall()
    assert names == [("users",)]


def test_a_file_that_is_not_a_database_is_refused(tmp_path: Path) -> None:
    """Random bytes are refused with the named error, not a driver error."""
    path = tmp_path / "noise.db"
    path.write_bytes(b"this is not a database at all, just some bytes" * 100)
    with pytest.raises(UnsupportedDatabaseError) as caught:
        runstore.open(path)
    assert caught.value.__cause__ is None
    assert caught.value.__context__ is None


def test_a_failed_upgrade_leaves_the_file_as_it_was(tmp_path: Path) -> None:
    """A step that fails part-way rolls the whole upgrade back."""
    count = POSITION[2002] - 1
    path = tmp_path / "old.db"
    connection = _build(path, count)
    _insert(connection, count, run_id="run", status="pending", created_at_ms=0, state_json="{}")
    # State the run-state table's CHECK refuses, planted with checks off.
    connection.execute("PRAGMA ignore_check_constraints = ON")
    connection.execute("UPDATE flows_runs SET state_json = 'not json'")
    connection.close()
    with pytest.raises(RunStoreError):
        runstore.open(path)
    raw = sqlite3.connect(path)
    assert raw.execute("SELECT count(*) FROM flows_migrations").fetchone() == (count,)
    assert raw.execute("SELECT state_json FROM flows_runs").fetchone() == ("not json",)


def test_concurrent_openers_of_a_fresh_file_migrate_it_once(tmp_path: Path) -> None:
    """Several connections racing to create one file all open it; each
    migration is recorded once."""
    path = tmp_path / "race.db"
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []

    def opener() -> None:
        try:
            barrier.wait()
            runstore.open(path).close()
        except BaseException as error:  # collected for the assertion below
            errors.append(error)

    threads = [threading.Thread(target=opener) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    ids = sqlite3.connect(path).execute("SELECT id FROM flows_migrations").fetchall()
    assert sorted(ids) == sorted((m.id,) for m in CHAIN)


def test_a_file_that_cannot_use_wal_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When SQLite answers a journal mode other than WAL, open refuses by name."""
    real = _open._pragma

    def no_wal(connection: sqlite3.Connection, text: str) -> Any:
        return "delete" if "journal_mode" in text else real(connection, text)

    monkeypatch.setattr(_open, "_pragma", no_wal)
    with pytest.raises(UnsupportedDatabaseError) as caught:
        runstore.open(tmp_path / "nowal.db")
    assert caught.value.cause == {"stage": "wal", "journal_mode": "delete"}


def test_an_old_sqlite_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The minimum SQLite version is checked before anything is created."""
    monkeypatch.setattr(sqlite3, "sqlite_version_info", (3, 31, 1))
    with pytest.raises(UnsupportedDatabaseError) as caught:
        runstore.open(tmp_path / "old-sqlite.db")
    assert caught.value.cause["stage"] == "sqlite-version"
    assert not (tmp_path / "old-sqlite.db").exists()
