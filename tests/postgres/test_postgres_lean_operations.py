"""Migration 2014: the one-round-trip functions without a pinned search path,
each appending its own change-log entry.

- Every function 2014 writes runs without a pinned search path and names the
  store's tables with the schema, so a caller whose search path selects
  another runstore schema still writes the store's own rows (shown to fail
  with the schema's name taken out of a function's text).
- A one-round-trip write appends exactly one change-log entry: the function
  marks its run-row write, which the revision trigger then skips (shown to
  fail with a trigger that does not skip: the write is logged twice and the
  revision counts it twice).
- A schema at 2013 with a run owned, claimed and pending moves to 2014, and
  its writers' revisions count each write once across the upgrade.
"""

from __future__ import annotations

from typing import Any

import pytest

from runstore import Activated, CancelRequested, ManualClock, OwnerId, RunSnapshot, Updated

from .. import _postgres

postgres = pytest.importorskip("runstore.postgres")
psycopg = pytest.importorskip("psycopg")

OWNER = OwnerId("host-a", 1, "nonce-a")
PENDING = RunSnapshot("pending", None, None)
#: The functions 2014 writes again.
LEAN = [
    "flows_op_claim",
    "flows_op_steal",
    "flows_op_claim_and_own",
    "flows_op_activate",
    "flows_op_renew",
    "flows_op_transition_owned",
    "flows_op_request_cancel",
    "flows_op_claim_next",
    "flows_op_claim_next_once",
    "flows_op_claim_next_many",
    "flows_op_claim_next_many_once",
    "flows_op_source_refused",
]


@pytest.fixture
def url() -> str:
    return _postgres.database_url()


def _schema_url(url: str, schema: str) -> str:
    return url + ("&" if "?" in url else "?") + f"options=-csearch_path%3D{schema}"


def test_the_functions_pin_no_search_path_and_name_their_schema(url: str) -> None:
    with postgres.open(url, clock=ManualClock(0), schema="lean"):
        pass
    with psycopg.connect(url, autocommit=True) as raw:
        rows = raw.execute(
            "SELECT p.proname, p.proconfig, p.prosrc FROM pg_proc AS p "
            "JOIN pg_namespace AS n ON n.oid = p.pronamespace "
            "WHERE n.nspname = 'lean' AND p.proname = ANY(%s)",
            (LEAN,),
        ).fetchall()
    assert sorted(name for name, _config, _source in rows) == sorted(LEAN)
    for name, config, source in rows:
        assert config is None, name
        assert "lean.flows_" in source, name
        assert "@s." not in source, name


def _two_schemas(url: str) -> tuple[Any, Any]:
    """A store in schema ``lean`` and one in ``other``, each with a run
    ``r``; a raw connection whose search path selects ``other``."""
    lean = postgres.open(url, clock=ManualClock(0), schema="lean")
    other = postgres.open(url, clock=ManualClock(0), schema="other")
    for store in (lean, other):
        store.create("r", "{}")
    return lean, other


def _cancel_through_other_path(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as raw:
        raw.execute("SET search_path TO other")
        (marked,) = raw.execute(
            "SELECT marked FROM lean.flows_op_request_cancel('r', 7)"
        ).fetchone()
        assert marked == 1


def test_a_caller_whose_path_selects_another_schema_writes_the_stores_rows(url: str) -> None:
    lean, other = _two_schemas(url)
    try:
        _cancel_through_other_path(url)
        assert lean.get("r").cancel_requested_at_ms == 7
        assert other.get("r").cancel_requested_at_ms is None
        assert lean.revision() == 2
        assert other.revision() == 1
        lean.check_invariants()
        other.check_invariants()
    finally:
        lean.close()
        other.close()


def test_a_function_that_resolves_tables_through_the_path_is_caught(url: str) -> None:
    """The planted bug: request_cancel with the schema's name taken out of
    its text writes the caller's schema instead."""
    lean, other = _two_schemas(url)
    try:
        with psycopg.connect(url, autocommit=True) as raw:
            (source,) = raw.execute(
                "SELECT prosrc FROM pg_proc AS p JOIN pg_namespace AS n "
                "ON n.oid = p.pronamespace "
                "WHERE n.nspname = 'lean' AND p.proname = 'flows_op_request_cancel'"
            ).fetchone()
            raw.execute(
                "CREATE OR REPLACE FUNCTION lean.flows_op_request_cancel(p_run text, p_now bigint)"
                " RETURNS TABLE (marked bigint, requested_at bigint, status text)"
                " LANGUAGE plpgsql AS $$" + source.replace("lean.", "") + "$$"
            )
        _cancel_through_other_path(url)
        assert lean.get("r").cancel_requested_at_ms is None
        assert other.get("r").cancel_requested_at_ms == 7
    finally:
        lean.close()
        other.close()


def _entries(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as raw:
        return int(raw.execute("SELECT count(*) FROM flows_change_log").fetchone()[0])


def _write_each(store: Any) -> list[Any]:
    """One write of each one-round-trip kind, on fresh runs: creates first."""
    for run_id in ("a", "b", "c"):
        store.create(run_id, "{}")
    return [
        store.claim_and_own("a", PENDING, OWNER, 0),
        store.heartbeat("a", OWNER, 5),
        store.transition_owned("a", OWNER, "running", '{"n": 1}'),
        store.request_cancel("b", 6),
        store.claim_next(OWNER, 7) is not None,
        store.transition_owned("a", OWNER, "completed", '{"n": 2}'),
    ]


def test_each_one_round_trip_write_is_logged_once(url: str) -> None:
    with postgres.open(url, clock=ManualClock(0)) as store:
        assert store.fast_path
        assert store.revision() == 0
        answers = _write_each(store)
        assert answers[:4] == [Activated(), Updated(), answers[2], CancelRequested(6)]
        # 3 creates and 6 writes, none numbered yet: one entry each.
        assert _entries(url) == 9
        assert store.revision() == 9
        assert _entries(url) == 0
        store.check_invariants()


def test_a_write_logged_by_its_function_and_the_trigger_is_caught(url: str) -> None:
    """The planted bug: the update trigger without the WHEN clause that
    skips marked writes. Each one-round-trip update is then logged twice."""
    with psycopg.connect(url, autocommit=True) as raw:
        raw.execute(
            "DROP TRIGGER flows_runs_revision_update ON flows_runs;"
            "CREATE CONSTRAINT TRIGGER flows_runs_revision_update AFTER UPDATE ON flows_runs"
            "  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION flows_runs_revision()"
        )
    with postgres.open(url, clock=ManualClock(0)) as store:
        _write_each(store)
        assert _entries(url) > 9
        assert store.revision() > 9


def test_a_schema_at_2013_moves_to_2014_and_counts_each_write_once(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    count = _postgres.migrations_before(2014)
    _postgres.build_schema(url, "moved", count)
    with psycopg.connect(url, autocommit=True) as c:
        recorded = [row[0] for row in c.execute("SELECT id FROM moved.flows_migrations")]
        assert 2013 in recorded
        assert 2014 not in recorded
        (pinned,) = c.execute(
            "SELECT proconfig FROM pg_proc AS p JOIN pg_namespace AS n "
            "ON n.oid = p.pronamespace "
            "WHERE n.nspname = 'moved' AND p.proname = 'flows_op_renew'"
        ).fetchone()
        assert pinned is not None  # 2004's function, before the move
    # Rows written by the 2013 functions, by a store of the release before 2014.
    older = _postgres.open_older(url, count, monkeypatch, ManualClock(0), schema="moved")
    try:
        older.create("r", "{}")
        older.create("p", "{}")
        assert older.claim_and_own("r", PENDING, OWNER, 0) == Activated()
        assert older.revision() == 3
    finally:
        older.close()
    with postgres.open(url, clock=ManualClock(0), schema="moved") as store:
        assert store.revision() == 3
        assert store.heartbeat("r", OWNER, 5) == Updated()
        assert store.claim_next(OWNER, 6) is not None
        assert store.request_cancel("r", 7) == CancelRequested(7)
        assert store.revision() == 6
        assert [c.run_id for c in store.changes(3)] == ["p", "r"]
        store.check_invariants()
