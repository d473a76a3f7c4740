"""Migration 2004's one CHECK per hot table admits and refuses exactly what the
per-column CHECKs before it did.

PostgreSQL compiles a table's CHECK expressions for every statement that
writes it, which made the nineteen CHECKs of ``flows_runs`` cost more than
the rest of a single-row UPDATE; 2004 folds each hot table's CHECKs into one
that calls a plpgsql function evaluating the same expressions, and 2006
writes those expressions shorter (no COALESCE around each term, no
``IS NULL OR`` before a nullable column's test), 2008 passes each
function the row whole instead of a column per argument, and 2014 writes the
runs', leases' and facts' checks with fewer terms (ranges as one LEAST and
one GREATEST, lengths as one LEAST, the rules as NULL counts). Here the same
generated rows are written into a schema migrated only up to 2003 and into a
current one, each in a transaction that is rolled back: every write must get
the same answer (committed, or the same SQLSTATE) from both. A zoo check
shows the comparison catches a function that forgets one expression.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from .. import _postgres

psycopg = pytest.importorskip("psycopg")

from runstore.postgres import _migrations  # noqa: E402

MAX = 2**53 - 1
BEFORE = [m.id for m in _migrations.MIGRATIONS].index(2004)

ints = st.sampled_from([None, 0, 5, MAX, -1, MAX + 1])
texts = st.sampled_from([None, "a", "run-1", ""])
jsons = st.sampled_from([None, "{}", '{"a": 1}', "not json"])
statuses = st.sampled_from(
    ["pending", "running", "suspended", "completed", "failed", "cancelled", "bogus"]
)
transitions = st.sampled_from(["claimed", "activated", "released", "stolen", "expired", "x"])

RUN_COLUMNS = (
    "run_id", "status", "created_at_ms", "started_at_ms", "finished_at_ms",
    "owner_host_id", "owner_pid", "owner_nonce", "heartbeat_at_ms",
    "claim_host_id", "claim_pid", "claim_nonce", "claimed_at_ms",
    "cancel_requested_at_ms", "waiting_reason", "waiting_wake_at_ms", "waiting_token",
    "lineage_id", "round_ordinal", "cancel_acknowledgement_json", "waiting_request",
)  # fmt: skip
runs = st.tuples(
    st.sampled_from(["r1", "", None]),
    statuses,
    ints,
    ints,
    ints,
    texts,
    ints,
    texts,
    ints,
    texts,
    ints,
    texts,
    ints,
    ints,
    texts,
    ints,
    texts,
    texts,
    ints,
    jsons,
    jsons,
)
LEASE_COLUMNS = (
    "run_id", "owner_host_id", "owner_pid", "owner_nonce", "granted_at_ms",
    "heartbeat_at_ms", "claim_host_id", "claim_pid", "claim_nonce", "claimed_at_ms",
)  # fmt: skip
leases = st.tuples(
    st.sampled_from(["l1", ""]), texts, ints, texts, ints, ints, texts, ints, texts, ints
)
FACT_COLUMNS = (
    "run_id", "position", "transition", "owner_host_id", "owner_pid", "owner_nonce",
    "granted_at_ms",
)  # fmt: skip
facts = st.tuples(
    st.just("parent"), st.sampled_from([0, 1, 2, MAX, MAX + 1]), transitions, texts, ints,
    texts, ints,
)  # fmt: skip
CHANGE_COLUMNS = ("run_id", "revision", "deleted")
changes = st.tuples(
    st.sampled_from(["c1", ""]), st.sampled_from([0, 1, MAX, MAX + 1]), st.sampled_from([0, 1, 2])
)
sources = st.tuples(st.sampled_from(["0" * 32, "ab" * 16, "g" * 32, "0" * 31]), ints, ints)


@pytest.fixture(scope="module")
def pair() -> Iterator[tuple[Any, Any]]:
    """Connections to a current schema and to one stopped before 2004."""
    server = _postgres.require_server()
    url = server.fresh_database()
    try:
        with psycopg.connect(url, autocommit=True, cursor_factory=psycopg.RawCursor) as old:
            old.execute("CREATE SCHEMA old")
            old.execute("SET search_path TO old")
            _migrations.apply(old.execute, "old", BEFORE)
            with psycopg.connect(url, autocommit=True) as new:
                for connection in (old, new):
                    connection.execute(
                        "INSERT INTO flows_runs (run_id, status, created_at_ms) "
                        "VALUES ('parent', 'pending', 0)"
                    )
                # The new schema's writers leave their change to be numbered.
                new.execute("SELECT flows_number_changes()")
                yield old, new
    finally:
        server.drop(url)


def _answer(connection: Any, statement: str, params: tuple[Any, ...]) -> str | None:
    """None when the write is admitted, else its SQLSTATE; always rolled back."""
    connection.execute("BEGIN")
    try:
        connection.execute(statement, params)
    except psycopg.Error as error:
        return error.sqlstate
    finally:
        connection.execute("ROLLBACK")
    return None


def _insert(table: str, columns: tuple[str, ...], old: bool) -> str:
    marks = ", ".join(f"${n}" if old else "%s" for n in range(1, len(columns) + 1))
    return f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})"


def _same(
    pair: tuple[Any, Any], table: str, columns: tuple[str, ...], row: tuple[Any, ...]
) -> None:
    old, new = pair
    before = _answer(old, _insert(table, columns, True), row)
    after = _answer(new, _insert(table, columns, False), row)
    assert before == after, (table, row, before, after)


@settings(max_examples=300, deadline=None)
@given(row=runs)
def test_run_rows(pair: tuple[Any, Any], row: tuple[Any, ...]) -> None:
    _same(pair, "flows_runs", RUN_COLUMNS, row)


@settings(max_examples=120, deadline=None)
@given(row=leases)
def test_lease_rows(pair: tuple[Any, Any], row: tuple[Any, ...]) -> None:
    _same(pair, "flows_consensus_leases", LEASE_COLUMNS, row)


@settings(max_examples=120, deadline=None)
@given(row=facts)
def test_fact_rows(pair: tuple[Any, Any], row: tuple[Any, ...]) -> None:
    _same(pair, "flows_ownership_facts", FACT_COLUMNS, row)


@settings(max_examples=40, deadline=None)
@given(row=changes)
def test_change_rows(pair: tuple[Any, Any], row: tuple[Any, ...]) -> None:
    _same(pair, "flows_run_changes", CHANGE_COLUMNS, row)


@settings(max_examples=40, deadline=None)
@given(row=sources)
def test_source_rows(pair: tuple[Any, Any], row: tuple[Any, ...]) -> None:
    old, new = pair
    before = _answer(
        old,
        "UPDATE flows_run_source SET source = $1, revision = $2, compacted_through = $3",
        row,
    )
    after = _answer(
        new,
        "UPDATE flows_run_source SET source = %s, revision = %s, compacted_through = %s",
        row,
    )
    assert before == after, (row, before, after)


def test_a_function_that_forgets_an_expression_is_caught(pair: tuple[Any, Any]) -> None:
    """The zoo case: a row-validity CHECK without the ownership rule admits a
    running row with no owner, which the old CHECKs refused: the comparison
    sees the difference."""
    old, new = pair
    row = ("zoo", "running", 0) + (None,) * (len(RUN_COLUMNS) - 3)
    before = _answer(old, _insert("flows_runs", RUN_COLUMNS, True), row)
    assert before == "23514"
    assert _answer(new, _insert("flows_runs", RUN_COLUMNS, False), row) == before
    new.execute("BEGIN")
    try:
        new.execute("ALTER TABLE flows_runs DROP CONSTRAINT flows_runs_valid")
        new.execute(
            "ALTER TABLE flows_runs ADD CONSTRAINT flows_runs_valid CHECK (status <> 'bogus')"
        )
        new.execute(_insert("flows_runs", RUN_COLUMNS, False), row)
        weakened = None  # admitted
    except psycopg.Error as error:
        weakened = error.sqlstate
    finally:
        new.execute("ROLLBACK")
    assert weakened != before


_HOSTILE = """
CREATE SCHEMA hostile;
CREATE FUNCTION hostile.length(text) RETURNS integer LANGUAGE sql AS 'SELECT 7';
CREATE FUNCTION hostile.yes(text, text) RETURNS boolean LANGUAGE sql AS 'SELECT true';
CREATE FUNCTION hostile.yes2(bigint, integer) RETURNS boolean LANGUAGE sql AS 'SELECT true';
CREATE FUNCTION hostile.yes3(bigint, bigint) RETURNS boolean LANGUAGE sql AS 'SELECT true';
CREATE FUNCTION hostile.yes4(integer, integer) RETURNS boolean LANGUAGE sql AS 'SELECT true';
CREATE OPERATOR hostile.= (LEFTARG = text, RIGHTARG = text, FUNCTION = hostile.yes);
CREATE OPERATOR hostile.!~ (LEFTARG = text, RIGHTARG = text, FUNCTION = hostile.yes);
CREATE OPERATOR hostile.>= (LEFTARG = bigint, RIGHTARG = integer, FUNCTION = hostile.yes2);
CREATE OPERATOR hostile.> (LEFTARG = bigint, RIGHTARG = integer, FUNCTION = hostile.yes2);
CREATE OPERATOR hostile.<= (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = hostile.yes3);
CREATE OPERATOR hostile.> (LEFTARG = integer, RIGHTARG = integer, FUNCTION = hostile.yes4);
CREATE DOMAIN hostile.json AS text;
"""

#: Writes every row check refuses, each through a built-in the hostile
#: schema redefines (length, =, >=, <=, >, !~, the json type).
_REFUSED = [
    ("INSERT INTO flows_runs (run_id, status, created_at_ms) VALUES ('', 'pending', 0)", ()),
    ("INSERT INTO flows_runs (run_id, status, created_at_ms) VALUES ('r', 'bogus', 0)", ()),
    ("INSERT INTO flows_runs (run_id, status, created_at_ms) VALUES ('r', 'pending', -1)", ()),
    (
        "INSERT INTO flows_runs (run_id, status, created_at_ms, round_ordinal)"
        " VALUES ('r', 'pending', 0, 9007199254740992)",
        (),
    ),
    (
        "INSERT INTO flows_runs (run_id, status, created_at_ms, cancel_acknowledgement_json)"
        " VALUES ('r', 'pending', 0, 'not json')",
        (),
    ),
    ("UPDATE flows_run_source SET source = repeat('g', 32)", ()),
    ("INSERT INTO flows_run_changes (run_id, revision, deleted) VALUES ('r', 0, 0)", ()),
    (
        "INSERT INTO flows_ownership_facts (run_id, position, transition, owner_host_id,"
        " owner_pid, owner_nonce, granted_at_ms) VALUES ('parent', 0, 'claimed', 'h', 1, 'n', 0)",
        (),
    ),
    ("INSERT INTO flows_consensus_leases (run_id, owner_pid) VALUES ('parent', -1)", ()),
]


def test_a_sessions_search_path_cannot_change_what_a_row_check_admits(
    pair: tuple[Any, Any],
) -> None:
    """A writer whose search path puts its own length(), operators and json
    type before pg_catalog's gets the same refusals as any other writer: the
    row checks name pg_catalog's (migration 2008), and flows_json_valid's
    cast does too."""
    _old, new = pair
    url = new.info.dsn
    new.execute(_HOSTILE)
    try:
        with psycopg.connect(url, autocommit=True) as hostile:
            hostile.execute("SET search_path TO hostile, pg_catalog, public")
            for statement, params in _REFUSED:
                honest = _answer(new, statement, params)
                assert honest == "23514", statement
                assert _answer(hostile, statement, params) == honest, statement
    finally:
        new.execute("DROP SCHEMA hostile CASCADE")
