"""The PostgreSQL schema's history: the same recorded migrations as SQLite's,
upgrades with rows in them from every earlier version, and refusals.

A schema is built at every earlier point of the chain by applying only its
first k migrations, rows are inserted the way that version stored them, and
``runstore.postgres.open`` must upgrade it: baseline revisions in creation
order, a 32-hex source identity, leases and facts for owned and claimed runs,
run state moved to its own table, and a store that works. A schema newer than
this version, a foreign schema and a renamed migration are refused and left
as they were; concurrent openers of a fresh schema migrate it once.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from runstore import (
    Activated,
    LivenessEvidence,
    ManualClock,
    OwnerId,
    OwnershipFact,
    RunChange,
    RunSnapshot,
    RunStoreError,
    UnsupportedDatabaseError,
    Updated,
)
from runstore.consensus import Lease
from runstore.sqlite import _migrations as sqlite_migrations

from .. import _postgres

postgres = pytest.importorskip("runstore.postgres")
psycopg = pytest.importorskip("psycopg")
from runstore.postgres import _migrations  # noqa: E402

CHAIN = _migrations.MIGRATIONS
POSITION = {m.id: index + 1 for index, m in enumerate(CHAIN)}
OWNER = OwnerId("host-a", 101, "nonce-a")
OTHER = OwnerId("host-b", 202, "nonce-b")
SCHEMA = "old"


@pytest.fixture
def url() -> str:
    return _postgres.database_url()


@pytest.fixture
def raw(url: str) -> Iterator[Any]:
    """An autocommit connection whose search path is the (new) schema ``old``."""
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(f"CREATE SCHEMA {SCHEMA}")
        connection.execute(f"SET search_path TO {SCHEMA}")
        yield connection


def _build(url: str, count: int | None) -> None:
    """Apply the first ``count`` migrations (all for None) to schema ``old``,
    as the store does (``$1`` parameters: a raw cursor)."""
    with psycopg.connect(url, autocommit=True, cursor_factory=psycopg.RawCursor) as c:
        c.execute(f"SET search_path TO {SCHEMA}")
        _migrations.apply(c.execute, SCHEMA, count)


def _insert(raw: Any, count: int, **row: Any) -> None:
    """Insert a run as the schema after ``count`` migrations stores it."""
    state = row.pop("state_json")
    columns = dict(row)
    if count < POSITION[2002]:
        columns["state_json"] = state
    names = ", ".join(columns)
    marks = ", ".join("%s" for _ in columns)
    raw.execute(f"INSERT INTO flows_runs ({names}) VALUES ({marks})", tuple(columns.values()))
    if count >= POSITION[2002]:
        raw.execute(
            "INSERT INTO flows_run_state (run_id, state_json) VALUES (%s, %s)",
            (row["run_id"], state),
        )


def _old_rows(raw: Any, count: int) -> None:
    # Inserted out of creation order: the baseline numbers by created_at_ms.
    _insert(raw, count, run_id="b-pending", status="pending", created_at_ms=5, state_json='{"b":1}')
    _insert(
        raw,
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
        raw,
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
    if count >= POSITION[6]:
        raw.execute(
            "INSERT INTO flows_consensus_leases "
            "VALUES (%s, %s, %s, %s, 1000, 1000, NULL, NULL, NULL, NULL)",
            ("a-running", OWNER.host_id, OWNER.pid, OWNER.nonce),
        )
        raw.execute(
            "INSERT INTO flows_consensus_leases "
            "VALUES (%s, NULL, NULL, NULL, NULL, NULL, %s, %s, %s, 2000)",
            ("c-claimed", OTHER.host_id, OTHER.pid, OTHER.nonce),
        )
    if count >= POSITION[2001]:
        for run_id, transition, who, granted in (
            ("a-running", "activated", OWNER, 1000),
            ("c-claimed", "claimed", OTHER, 2000),
        ):
            raw.execute(
                "INSERT INTO flows_ownership_facts VALUES (%s, 1, %s, %s, %s, %s, %s)",
                (run_id, transition, who.host_id, who.pid, who.nonce, granted),
            )


def test_the_history_is_sqlites() -> None:
    """Same ids, same names, same order on both backends."""
    assert [(m.id, m.name) for m in CHAIN] == [(m.id, m.name) for m in sqlite_migrations.MIGRATIONS]


@pytest.mark.parametrize("count", range(1, len(CHAIN)))
def test_a_schema_from_an_earlier_version_upgrades_with_its_rows(
    url: str, raw: Any, count: int
) -> None:
    """Rows written at every earlier version survive the upgrade and the store works."""
    _build(url, count)
    _old_rows(raw, count)
    with postgres.open(url, clock=ManualClock(5000), schema=SCHEMA) as store:
        store.check_invariants()
        assert [row.run_id for row in store.state().rows] == ["a-running", "b-pending", "c-claimed"]
        assert store.get("a-running").state_json == '{"a":[1,2]}'
        assert store.get("b-pending").state_json == '{"b":1}'
        if count < POSITION[1003]:
            assert store.changes(0) == [
                RunChange("a-running", 1, False),
                RunChange("b-pending", 2, False),
                RunChange("c-claimed", 3, False),
            ]
        else:
            assert [change.run_id for change in store.changes(0)] == [
                "b-pending",
                "a-running",
                "c-claimed",
            ]
        assert store.revision() == 3
        (source,) = store._connection.execute("SELECT source FROM flows_run_source").fetchone()
        assert len(source) == 32
        assert set(source) <= set("0123456789abcdef")
        assert store.state().leases == (
            Lease("a-running", OWNER, 1000, 1000, None, None),
            Lease("c-claimed", None, None, None, OTHER, 2000),
        )
        assert store.ownership_facts("a-running") == [
            OwnershipFact("a-running", "activated", OWNER, 1000, 1)
        ]
        assert store.ownership_facts("c-claimed") == [
            OwnershipFact("c-claimed", "claimed", OTHER, 2000, 1)
        ]
        assert store.heartbeat("a-running", OWNER, 5000) == Updated()
        suspended = RunSnapshot("suspended", None, None)
        assert store.activate("c-claimed", OTHER, 2000, suspended) == Activated()
        store.check_invariants()
    ids = raw.execute("SELECT id FROM flows_migrations ORDER BY id").fetchall()
    assert [row[0] for row in ids] == sorted(m.id for m in CHAIN)


def test_a_running_row_from_before_the_lease_table_keeps_its_fence(url: str, raw: Any) -> None:
    """The pre-lease owner keeps its fence; once stale it is taken over."""
    count = POSITION[6] - 1
    _build(url, count)
    _insert(
        raw,
        count,
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
    clock = ManualClock(31_001)
    with postgres.open(url, clock=clock, schema=SCHEMA) as store:
        row = store.get("run")
        evidence = LivenessEvidence(OWNER, 31_001, "lease-expired")
        assert store.claim_and_own("run", row, OTHER, 31_001, evidence) == Activated()
        assert store.heartbeat("run", OWNER, 31_001).__class__.__name__ == "FenceLost"
        store.check_invariants()


def test_a_fresh_schema_records_every_migration(url: str) -> None:
    with postgres.open(url, clock=ManualClock(0), schema="fresh") as store:
        rows = store._connection.execute(
            "SELECT id, name FROM flows_migrations ORDER BY id"
        ).fetchall()
    assert rows == sorted((m.id, m.name) for m in CHAIN)


def test_the_schema_has_upstreams_columns(url: str) -> None:
    with postgres.open(url, clock=ManualClock(0)) as store:
        columns = store._connection.execute(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND table_name = 'flows_runs' "
            "ORDER BY ordinal_position"
        ).fetchall()
    assert [c[0] for c in columns] == [
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


def _dump(raw: Any) -> list[Any]:
    """The schema's tables and their rows (what "left alone" compares)."""
    tables = raw.execute(
        "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() ORDER BY 1"
    ).fetchall()
    return [
        (name, raw.execute(f'SELECT * FROM "{name}" ORDER BY 1').fetchall()) for (name,) in tables
    ]


def test_a_newer_schema_is_refused_and_left_alone(url: str, raw: Any) -> None:
    _build(url, None)
    raw.execute("INSERT INTO flows_migrations VALUES (9001, 'runstore_from_the_future')")
    before = _dump(raw)
    with pytest.raises(UnsupportedDatabaseError) as caught:
        postgres.open(url, clock=ManualClock(0), schema=SCHEMA)
    assert caught.value.cause["unknown_migrations"] == [9001]
    assert _dump(raw) == before


def test_a_renamed_migration_is_refused(url: str, raw: Any) -> None:
    _build(url, None)
    raw.execute("UPDATE flows_migrations SET name = 'elsewhere_initial' WHERE id = 1001")
    with pytest.raises(UnsupportedDatabaseError) as caught:
        postgres.open(url, clock=ManualClock(0), schema=SCHEMA)
    assert caught.value.cause["foreign_migrations"] == [1001]


def test_a_foreign_schema_is_refused_and_left_alone(url: str, raw: Any) -> None:
    """Tables but no runstore bookkeeping: not ours to migrate."""
    raw.execute("CREATE TABLE users (name TEXT)")
    raw.execute("INSERT INTO users VALUES ('ada')")
    before = _dump(raw)
    with pytest.raises(UnsupportedDatabaseError) as caught:
        postgres.open(url, clock=ManualClock(0), schema=SCHEMA)
    assert "not a runstore schema" in str(caught.value)
    assert caught.value.__cause__ is None
    assert _dump(raw) == before


def test_other_schemas_of_the_database_are_not_looked_at(url: str, raw: Any) -> None:
    """An application's tables elsewhere in the database do not make a schema foreign."""
    raw.execute("CREATE TABLE users (name TEXT)")
    with postgres.open(url, clock=ManualClock(0), schema="runs") as store:
        store.create("r", "{}")


def test_a_failed_upgrade_leaves_the_schema_as_it_was(url: str, raw: Any) -> None:
    """A step that fails part-way rolls the whole upgrade back (DDL included)."""
    count = POSITION[2002] - 1
    _build(url, count)
    _insert(raw, count, run_id="run", status="pending", created_at_ms=0, state_json="{}")
    # A run-state CHECK the move to flows_run_state will break: plant a
    # document that the old column accepted with its constraint dropped.
    (constraint,) = raw.execute(
        "SELECT conname FROM pg_constraint WHERE conrelid = 'flows_runs'::regclass "
        "AND pg_get_constraintdef(oid) LIKE '%flows_json_valid(state_json)%'"
    ).fetchone()
    raw.execute(f'ALTER TABLE flows_runs DROP CONSTRAINT "{constraint}"')
    raw.execute("UPDATE flows_runs SET state_json = 'not json'")
    before = _dump(raw)
    with pytest.raises(RunStoreError) as caught:
        postgres.open(url, clock=ManualClock(0), schema=SCHEMA)
    assert caught.value.cause["sqlstate"] == "23514"
    assert raw.execute("SELECT count(*) FROM flows_migrations").fetchone() == (count,)
    assert _dump(raw) == before
    assert raw.execute("SELECT to_regclass('flows_run_state')").fetchone() == (None,)


def test_concurrent_openers_of_a_fresh_schema_migrate_it_once(url: str) -> None:
    """Openers racing on a schema that does not exist yet all open it."""
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []

    def opener() -> None:
        try:
            barrier.wait()
            postgres.open(url, clock=ManualClock(0), schema="race").close()
        except BaseException as error:  # collected for the assertion below
            errors.append(error)

    threads = [threading.Thread(target=opener) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    with psycopg.connect(url) as connection:
        ids = connection.execute("SELECT id FROM race.flows_migrations").fetchall()
    assert sorted(ids) == sorted((m.id,) for m in CHAIN)


@pytest.mark.parametrize("read_only", [False, True], ids=["writable", "read-only"])
def test_a_schema_created_after_current_schema_looked_is_opened(
    url: str, monkeypatch: pytest.MonkeyPatch, read_only: bool
) -> None:
    """The window a racing opener falls into: ``current_schema()`` found no
    schema, and another opener created it (usable by this role) before the
    store asked whether it exists. The store opens it as a schema that
    existed; it is refused as unusable only when the role lacks a grant."""
    postgres.open(url, clock=ManualClock(0), schema="late").close()
    # current_schema() answers as it did before the other opener's CREATE.
    monkeypatch.setattr("runstore.postgres._open._CURRENT_SCHEMA", "SELECT NULL::text")
    opened = postgres.open(url, clock=ManualClock(0), schema="late", read_only=read_only)
    opened.close()
