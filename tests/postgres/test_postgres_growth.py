"""PostgreSQL work that must not grow with the store (issue 28, "Growth").

``benchmarks/pg_growth.py`` measures every operation at 10^6 runs against
10^3 beside a raw baseline; these tests pin what it found, as counts of rows
read (``EXPLAIN ANALYZE``), never as times:

- ``check_invariants``' "every run has a live change entry" joined the runs
  on the COALESCE of a full join, which the planner ran as a nested loop
  under ``LIMIT 1``: every run against every change entry, 25 s at 20 000
  runs. It now joins each table on its own run id and reads each row a
  bounded number of times; each planted wrong entry is still caught.
"""

from __future__ import annotations

from typing import Any

import pytest

from runstore import ManualClock

from .. import _postgres

postgres = pytest.importorskip("runstore.postgres")

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
