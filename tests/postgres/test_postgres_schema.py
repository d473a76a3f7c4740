"""The PostgreSQL schema makes impossible rows impossible, for every writer.

A raw SQL writer (another program, an operator at ``psql``) meets the same
rules as the store: CHECKs on status, owner and heartbeat coherence, claims,
safe integers and JSON validity (a plpgsql check: a bad document is a CHECK
violation, SQLSTATE 23514, which the store maps to ``constraint``); the run
id is immutable; every run row written takes one revision, at commit (the
revision triggers are deferred), in the order the rows were written; a
counter at ``2**53 - 1`` or a missing source refuses the commit. Ids compare
and sort byte-wise whatever the database's collation.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from runstore import (
    Activated,
    CancelRequested,
    ManualClock,
    OwnerId,
    RunChange,
    RunSnapshot,
    RunStoreError,
)

from .. import _postgres

postgres = pytest.importorskip("runstore.postgres")
psycopg = pytest.importorskip("psycopg")

MAX = 2**53 - 1
OWNER = OwnerId("host-a", 1, "nonce-a")
PENDING = RunSnapshot("pending", None, None)


@pytest.fixture
def url() -> str:
    return _postgres.database_url()


@pytest.fixture
def store(url: str) -> Iterator[Any]:
    with postgres.open(url, clock=ManualClock(0)) as opened:
        yield opened


@pytest.fixture
def raw(url: str) -> Iterator[Any]:
    """Another program's connection to the same database (autocommit)."""
    with psycopg.connect(url, autocommit=True) as connection:
        yield connection


def dump(raw: Any) -> list[Any]:
    tables = raw.execute(
        "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1"
    ).fetchall()
    return [(t, raw.execute(f'SELECT * FROM "{t}" ORDER BY 1').fetchall()) for (t,) in tables]


_INSERT = "INSERT INTO flows_runs (run_id, status, created_at_ms) VALUES ('raw', 'pending', 0)"

IMPOSSIBLE_ROWS = {
    "unknown-status": "UPDATE flows_runs SET status = 'paused'",
    "running-without-owner": "UPDATE flows_runs SET status = 'running', heartbeat_at_ms = 1",
    "owner-while-pending": (
        "UPDATE flows_runs SET owner_host_id = 'h', owner_pid = 1, owner_nonce = 'n'"
    ),
    "half-a-claim": "UPDATE flows_runs SET claim_host_id = 'h'",
    "claim-without-pid": (
        "UPDATE flows_runs SET claim_host_id = 'h', claim_nonce = 'n', claimed_at_ms = 1"
    ),
    "running-without-nonce": (
        "UPDATE flows_runs SET status = 'running', owner_host_id = 'h', owner_pid = 1, "
        "heartbeat_at_ms = 1"
    ),
    "empty-owner-host": (
        "UPDATE flows_runs SET status = 'running', owner_host_id = '', owner_pid = 1, "
        "owner_nonce = 'n', heartbeat_at_ms = 1"
    ),
    "negative-time": "UPDATE flows_runs SET created_at_ms = -1",
    "unsafe-integer": f"UPDATE flows_runs SET created_at_ms = {MAX + 1}",
    "empty-run-id-insert": (
        "INSERT INTO flows_runs (run_id, status, created_at_ms) VALUES ('', 'pending', 0)"
    ),
    "state-not-json": "UPDATE flows_run_state SET state_json = '{\"a\":}'",
    "state-nan": "UPDATE flows_run_state SET state_json = 'NaN'",
    "acknowledgement-not-json": "UPDATE flows_runs SET cancel_acknowledgement_json = '{'",
    "fact-without-run": (
        "INSERT INTO flows_ownership_facts VALUES ('ghost', 1, 'released', 'h', 1, 'n', NULL)"
    ),
    "fact-position-zero": (
        "INSERT INTO flows_ownership_facts VALUES ('run', 0, 'released', 'h', 1, 'n', NULL)"
    ),
    "fact-unknown-transition": (
        "INSERT INTO flows_ownership_facts VALUES ('run', 1, 'borrowed', 'h', 1, 'n', 1)"
    ),
    "attempt-checkpoint-not-json": (
        "INSERT INTO flows_attempts (run_id, step_key_digest, attempt, state, started_at_ms,"
        " checkpoint_json, meta_json) VALUES ('run', 's', 1, 'running', 0, 'x', '{}')"
    ),
    "lease-negative-pid": (
        "INSERT INTO flows_consensus_leases (run_id, owner_pid) VALUES ('run', -1)"
    ),
}


@pytest.mark.parametrize("statement", list(IMPOSSIBLE_ROWS.values()), ids=list(IMPOSSIBLE_ROWS))
def test_a_raw_writer_cannot_plant_an_impossible_row(store: Any, raw: Any, statement: str) -> None:
    """Each is refused with an integrity error (SQLSTATE class 23); nothing changes."""
    store.create("run", "{}")
    before = dump(raw)
    with pytest.raises(psycopg.errors.IntegrityError) as caught:
        raw.execute(statement)
    assert caught.value.sqlstate is not None
    assert caught.value.sqlstate.startswith("23")
    assert dump(raw) == before
    store.check_invariants()


def test_a_json_check_failure_through_the_store_is_constraint(store: Any) -> None:
    """A strategy writing bad JSON through tx.connection: the CHECK's 23514
    becomes ``constraint``, the operation rolls back whole."""
    store.create("run", "{}")

    def body(tx: Any) -> None:
        tx.connection.execute(
            "UPDATE flows_run_state SET state_json = $2::text WHERE run_id = $1::text",
            ("run", "[1,"),
        )

    before = store.state()
    with pytest.raises(RunStoreError) as caught:
        store._write("probe", body)
    assert caught.value.code == "constraint"
    assert caught.value.cause["sqlstate"] == "23514"
    assert caught.value.cause["table_name"] == "flows_run_state"
    assert store.state() == before


def test_the_json_check_admits_what_sqlite_json_valid_admits(store: Any) -> None:
    """Deep nesting, a \\u0000 escape, a lone surrogate escape and 1e400 are
    valid JSON text (admission, not the schema, refuses some of them)."""
    store.create("run", "{}")
    for text in ('{"v":"\\ud800"}', "[" * 130 + "]" * 130, '{"n":1e400}', '"\\u0000"'):

        def body(tx: Any, text: str = text) -> None:
            tx.connection.execute(
                "UPDATE flows_run_state SET state_json = $2::text WHERE run_id = $1::text",
                ("run", text),
            )

        store._write("probe", body)
        (stored,) = store._connection.execute("SELECT state_json FROM flows_run_state").fetchone()
        assert stored == text


def test_a_run_id_cannot_be_renamed(store: Any, raw: Any) -> None:
    store.create("run", "{}")
    with pytest.raises(psycopg.errors.CheckViolation) as caught:
        raw.execute("UPDATE flows_runs SET run_id = 'renamed' WHERE run_id = 'run'")
    assert caught.value.diag.constraint_name == "flows_runs_identity_immutable"
    assert store.get("run").run_id == "run"


def test_a_raw_delete_leaves_a_tombstone_and_recreating_is_newer(store: Any, raw: Any) -> None:
    store.create("a", "{}")
    store.create("b", "{}")
    raw.execute("DELETE FROM flows_runs WHERE run_id = 'a'")
    assert store.revision() == 3
    assert store.changes(0) == [RunChange("b", 2, False), RunChange("a", 3, True)]
    store.create("a", '{"again":true}')
    assert store.changes(2) == [RunChange("a", 4, False)]
    store.check_invariants()


def test_revisions_are_taken_at_commit_in_write_order(store: Any, raw: Any) -> None:
    """Inside one transaction nothing is numbered yet; at commit each row
    write takes the next revision, in the order the writes happened."""
    store.create("x", "{}")
    store.create("y", "{}")
    raw.execute("BEGIN")
    raw.execute("UPDATE flows_runs SET status = status WHERE run_id = 'y'")
    raw.execute("UPDATE flows_runs SET status = status WHERE run_id = 'x'")
    raw.execute("UPDATE flows_runs SET status = status WHERE run_id = 'y'")
    # Numbering inside the open transaction takes the two committed creates
    # (and holds the counter until COMMIT); its own writes are not logged yet.
    assert raw.execute("SELECT flows_number_changes()").fetchone() == (2,)
    # Another session is not held up by the uncommitted writer (different run),
    # nor by the numberer holding the counter.
    store.create("z", "{}")
    raw.execute("COMMIT")
    assert store.revision() == 6
    assert store.changes(3) == [RunChange("x", 5, False), RunChange("y", 6, False)]
    store.check_invariants()


def test_a_lineage_cancel_numbers_its_rounds_in_run_id_order(store: Any) -> None:
    """Rounds are marked in byte-wise run id order, whatever their round order."""
    store.create("root", "{}")
    for ordinal, run_id in ((1, "r-b"), (2, "r-a"), (3, "R-c")):
        store.create(run_id, "{}", lineage_id="root", round_ordinal=ordinal)
    assert store.request_cancel_lineage("root", 7) == CancelRequested(7)
    assert [c.run_id for c in store.changes(4)] == ["R-c", "r-a", "r-b", "root"]


@pytest.mark.parametrize(
    "mutation",
    [_INSERT, "UPDATE flows_runs SET cancel_requested_at_ms = 1", "DELETE FROM flows_runs"],
)
def test_revision_overflow_refuses_the_commit(store: Any, raw: Any, mutation: str) -> None:
    """At 2**53 - 1 the next revision breaks its CHECK; the commit is refused."""
    store.create("run", "{}")
    store.revision()  # numbered, so nothing waits to pass the maximum
    raw.execute("UPDATE flows_run_source SET revision = %s", (MAX,))
    before = dump(raw)
    with pytest.raises(psycopg.errors.CheckViolation):
        raw.execute(mutation)
    assert dump(raw) == before


def test_revision_overflow_refuses_every_store_write(store: Any, raw: Any) -> None:
    store.create("run", "{}")
    store.revision()  # numbered, so nothing waits to pass the maximum
    raw.execute("UPDATE flows_run_source SET revision = %s", (MAX,))
    before = dump(raw)
    for call in (
        lambda: store.create("other", "{}"),
        lambda: store.claim_and_own("run", PENDING, OWNER, 0),
        lambda: store.request_cancel("run", 1),
    ):
        with pytest.raises(RunStoreError) as caught:
            call()
        assert caught.value.code == "constraint"
        assert caught.value.__cause__ is None
    assert dump(raw) == before
    assert store.revision() == MAX


def test_a_missing_source_refuses_writes_and_revision(store: Any, raw: Any) -> None:
    store.create("run", "{}")
    raw.execute("DELETE FROM flows_run_source")
    with pytest.raises(psycopg.errors.CheckViolation) as raw_refusal:
        raw.execute(_INSERT)
    assert raw_refusal.value.diag.constraint_name == "flows_run_source_identity"
    with pytest.raises(RunStoreError) as caught:
        store.request_cancel("run", 1)
    assert caught.value.code == "constraint"
    with pytest.raises(RunStoreError) as caught:
        store.revision()
    assert caught.value.code == "persistence_failed"
    assert store.get("run").cancel_requested_at_ms is None


def test_the_acknowledgement_is_stored_as_upstream_stores_it(store: Any) -> None:
    store.create("run", "{}")
    assert store.claim_and_own("run", PENDING, OWNER, 0) == Activated()
    assert store.request_cancel("run", 2) == CancelRequested(2)
    assert store.acknowledge_cancel("run", OWNER, 4) is True
    (text,) = store._connection.execute(
        "SELECT cancel_acknowledgement_json FROM flows_runs"
    ).fetchone()
    assert json.loads(text) == {
        "observedAtMs": 4,
        "owner": {"hostId": OWNER.host_id, "pid": OWNER.pid, "nonce": OWNER.nonce},
    }


def _icu_database(admin: Any) -> str | None:
    """A database whose default collation is ICU's en-US (not byte order), or None."""
    name = "rs_icu_collation_test"
    admin.admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    try:
        admin.admin(
            f"CREATE DATABASE {name} TEMPLATE template0 ENCODING 'UTF8' "
            "LOCALE_PROVIDER icu ICU_LOCALE 'en-US' LOCALE 'C'"
        )
    except psycopg.Error:
        return None
    return _postgres._postgres.with_database(admin.url, name)


def test_ids_order_byte_wise_on_a_linguistic_collation() -> None:
    """On an en-US database 'a' < 'B' < 'é'; runstore orders by code point,
    as the model does: 'B' < 'a' < 'é'."""
    admin = _postgres.require_server()
    target = _icu_database(admin)
    if target is None:
        pytest.skip("the server has no ICU collations")
    try:
        with psycopg.connect(target) as connection:
            assert connection.execute(
                "SELECT array_agg(x ORDER BY x) FROM unnest(ARRAY['a', 'B', 'é']) AS x"
            ).fetchone() == (["a", "B", "é"],)
        with postgres.open(target, clock=ManualClock(0)) as store:
            store.create("a", "{}")
            for ordinal, run_id in enumerate(("é", "B"), start=1):
                store.create(run_id, "{}", lineage_id="a", round_ordinal=ordinal)
            assert [row.run_id for row in store.state().rows] == ["B", "a", "é"]
            assert store.request_cancel_lineage("a", 1) == CancelRequested(1)
            assert [c.run_id for c in store.changes(3)] == ["B", "a", "é"]
            store.check_invariants()
    finally:
        admin.admin("DROP DATABASE IF EXISTS rs_icu_collation_test WITH (FORCE)")
