"""PostgreSQL work that must not grow with the store (issue 28, "Growth").

``benchmarks/pg_growth.py`` measures every operation at 10^6 runs against
10^3 beside a raw baseline; these tests pin what it found, as counts of rows
read (``EXPLAIN ANALYZE``), never as times:

- ``check_invariants``' "every run has a live change entry" joined the runs
  on the COALESCE of a full join, which the planner ran as a nested loop
  under ``LIMIT 1``: every run against every change entry, 25 s at 20 000
  runs. It now joins each table on its own run id and reads each row a
  bounded number of times; each planted wrong entry is still caught.
- The parent index was full: every run kept a NULL entry in it, and every
  write that could not update its row in place inserted one. Migration 2015
  makes it partial; a run without a parent has no entry, the queries and
  the foreign key that use it still do, and a schema from before 2015 moves
  with its rows. The lineage index stays whole (made partial, a purge's
  plan turned to a scan of the table).
- ``list_runs`` passed the page's size as ``LIMIT $8``: a generic plan is
  costed for a tenth of the table, so on a large store the server planned
  the listing afresh on every call (at 10^6 runs, 9 buffers a page against
  4 at 10^3, the planner's included). The size is now written into the
  text, and the server keeps its generic plan.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from runstore import Activated, ConstraintError, ManualClock, OwnerId, RunSnapshot

from .. import _postgres

postgres = pytest.importorskip("runstore.postgres")

OWNER = OwnerId("host-a", 101, "nonce-a")
PENDING = RunSnapshot("pending", None, None)

RUNS = 300


def _rows_read(connection: Any, sql: str) -> dict[str, int]:
    """``EXPLAIN ANALYZE``'s rows read per relation and materialized node
    (rows returned and filtered out, times loops)."""
    ((plan,),) = connection.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql).fetchall()
    read: dict[str, int] = {}

    def visit(node: dict[str, Any]) -> None:
        name = node.get("Relation Name") or node["Node Type"]
        rows = node["Actual Rows"] + node.get("Rows Removed by Filter", 0)
        rows += node.get("Rows Removed by Join Filter", 0)
        read[name] = read.get(name, 0) + rows * node["Actual Loops"]
        for child in node.get("Plans", []):
            visit(child)

    visit(plan[0]["Plan"])
    return read


def _store_of(runs: int) -> Any:
    store = _postgres.open_store(ManualClock(1_000))
    for number in range(runs):
        store.create(f"run-{number:05d}", "{}")
    store.revision()  # numbers the log: the entries are in flows_run_changes
    store._connection.execute("ANALYZE")
    return store


def _live_entry_check() -> str:
    from runstore.postgres import _queries

    (query,) = [
        sql
        for name, sql in _queries.INVARIANT_QUERIES
        if name == "every run has a live change entry"
    ]
    return query


def test_the_live_entry_check_reads_each_row_a_bounded_number_of_times() -> None:
    with _store_of(RUNS) as store:
        read = _rows_read(store._connection, _live_entry_check())
        assert all(rows <= 3 * RUNS for rows in read.values()), read
        store.check_invariants()


@pytest.mark.parametrize(
    "plant",
    [
        "DELETE FROM flows_run_changes WHERE run_id = 'run-00007'",
        "UPDATE flows_run_changes SET deleted = 1 WHERE run_id = 'run-00007'",
        "INSERT INTO flows_change_log (run_ids, deleted) VALUES (ARRAY['run-00007'], 1)",
    ],
)
def test_the_live_entry_check_catches_a_planted_entry(plant: str) -> None:
    with _store_of(10) as store:
        connection = store._connection
        connection.execute("ALTER TABLE flows_run_changes DISABLE TRIGGER ALL")
        connection.execute(plant)
        found = connection.execute(_live_entry_check()).fetchone()
        assert found == ("run-00007",)
        with pytest.raises(AssertionError, match="live change entry"):
            store.check_invariants()


# -- migration 2015: partial parent and lineage indexes ---------------------------------


_PARTIAL = {
    "flows_runs_parent_run_id_idx": "WHERE (parent_run_id IS NOT NULL)",
    "flows_runs_lineage_idx": "",
}


def _predicates(connection: Any, schema: str = "public") -> dict[str, str]:
    """The parent and lineage indexes' conditions ('' for a full index)."""
    rows = connection.execute(
        "SELECT c.relname, pg_get_indexdef(c.oid) FROM pg_class AS c "
        "JOIN pg_namespace AS n ON n.oid = c.relnamespace WHERE n.nspname = %s "
        "AND c.relname IN ('flows_runs_parent_run_id_idx', 'flows_runs_lineage_idx')",
        (schema,),
    ).fetchall()
    return {
        name: ("WHERE" + text.split("WHERE", 1)[1]) if "WHERE" in text else ""
        for name, text in rows
    }


def _family(store: Any, plain: int) -> None:
    """``plain`` runs with neither parent nor lineage, a root, its child and its second round."""
    for number in range(plain):
        store.create(f"plain-{number:03d}", "{}")
    store.create("root", "{}", lineage_id="root", round_ordinal=1)
    store.create("child", "{}", parent_run_id="root")
    store.create("round-2", "{}", lineage_id="root", round_ordinal=2)


def test_only_runs_with_a_parent_are_in_the_parent_index(url: str) -> None:
    with postgres.open(url, clock=ManualClock(1_000)) as store:
        _family(store, 40)
        with psycopg.connect(url, autocommit=True) as raw:
            assert _predicates(raw) == _PARTIAL
        # What the indexes are for still holds and still reads them.
        with pytest.raises(ConstraintError):
            store.create("again", "{}", lineage_id="root", round_ordinal=2)
        with pytest.raises(ConstraintError):
            store.create("orphan", "{}", parent_run_id="nobody")
        assert [row.run_id for row in store.list_runs(parent_run_id="root").runs] == ["child"]
        assert [row.run_id for row in store.lineage("round-2")] == ["root", "round-2"]
        connection = store._connection
        connection.execute("SET enable_seqscan = off")
        try:
            for sql, index in (
                ("SELECT 1 FROM flows_runs WHERE parent_run_id = 'root'", "parent_run_id_idx"),
                ("SELECT 1 FROM flows_runs WHERE lineage_id = 'root'", "lineage_idx"),
            ):
                plan = "\n".join(row[0] for row in connection.execute("EXPLAIN " + sql))
                assert f"flows_runs_{index}" in plan, plan
        finally:
            connection.execute("RESET enable_seqscan")
        store.check_invariants()


@pytest.fixture
def url() -> str:
    return _postgres.database_url()


def test_a_schema_at_2014_moves_to_2015_with_its_rows(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    count = _postgres.migrations_before(2015)
    _postgres.build_schema(url, "moved", count)
    # A store of the release before 2015.
    older = _postgres.open_older(url, count, monkeypatch, ManualClock(1_000), schema="moved")
    try:
        _family(older, 10)
        assert older.claim_and_own("plain-000", PENDING, OWNER, 1_000) == Activated()
    finally:
        older.close()
    with psycopg.connect(url, autocommit=True) as raw:
        assert _predicates(raw, "moved") == dict.fromkeys(_PARTIAL, "")
    with postgres.open(url, clock=ManualClock(2_000), schema="moved") as store:
        with psycopg.connect(url, autocommit=True) as raw:
            assert _predicates(raw, "moved") == _PARTIAL
        assert store.revision() == 14
        assert [row.run_id for row in store.list_runs(parent_run_id="root").runs] == ["child"]
        with pytest.raises(ConstraintError):
            store.create("again", "{}", lineage_id="root", round_ordinal=1)
        store.create("round-3", "{}", lineage_id="root", round_ordinal=3)
        store.check_invariants()


# -- list_runs: a plan the server keeps -------------------------------------------------


def _listing_plans(store: Any) -> tuple[int, int]:
    """(generic, custom) plans of the listing statement prepared on the store's session."""
    row = store._connection.execute(
        "SELECT generic_plans, custom_plans FROM pg_prepared_statements "
        "WHERE statement LIKE '%ORDER BY r.created_at_ms, r.run_id LIMIT%'"
    ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


@pytest.mark.parametrize("planted", [False, True])
def test_a_large_store_keeps_the_listing_plan(
    url: str, planted: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the page's size passed as a parameter (planted: the old text), the
    server costs a generic plan for a tenth of the table and, on a large
    store, plans the listing afresh on every call; written into the text,
    the generic plan is kept after psycopg prepares the statement."""
    from runstore.postgres import _queries

    if planted:
        for name in ("LIST_ORDER", "LIST_UNION_ARM", "LIST_UNION_ORDER"):
            monkeypatch.setattr(
                _queries, name, getattr(_queries, name).replace("{limit}", "$8::bigint")
            )
    with postgres.open(url, clock=ManualClock(1_000)) as store:
        store._connection.execute(
            "INSERT INTO flows_runs (run_id, status, created_at_ms) "
            "SELECT 'run-' || lpad(g::text, 6, '0'), 'pending', g FROM generate_series(1, 20000) g"
        )
        store._connection.execute(
            "INSERT INTO flows_run_state (run_id, state_json) SELECT run_id, '{}' FROM flows_runs"
        )
        store._connection.execute("ANALYZE")
        # psycopg prepares a statement at its sixth call; the server then
        # makes five custom plans before it weighs the generic one.
        for _ in range(15):
            page = store.list_runs(limit=100)
            assert len(page.runs) == 100
        generic, custom = _listing_plans(store)
        assert generic + custom == 10
        assert generic == (0 if planted else 5)
