"""How the SQL stores find work, renew and purge: by index, in run id order, in one transaction.

- Every hot ``list_runs`` filter (all, one status, several statuses,
  claimable, stale, claim stale), ``claim_next``'s pick and
  ``purge_settled``'s candidates are served by an index in page order. The
  plans (``EXPLAIN QUERY PLAN`` on SQLite, ``EXPLAIN`` on PostgreSQL with
  sequential scans and sorts priced out) name that index and neither scan the
  table nor sort it, so dropping or breaking an index fails here.
- A purge (``purge_settled``'s candidate query, and ``purge_candidates``)
  checks each candidate by key lookups, the live rounds of its lineage
  through their own index (migration 2009): on SQLite it runs the same
  number of instructions on a store 8 times larger; on PostgreSQL, with
  statistics, ``EXPLAIN ANALYZE`` counts about two rows read per candidate,
  no sequential scan and no hashed subplan.
- ``heartbeat_many`` and ``purge_settled`` write their runs in run id order:
  the revisions they take follow the ids, whatever the creation order.
- ``heartbeat_many`` asks a strategy that has the batch method once, and one
  without it once per run id; a batch answer that leaves a run out is ``Lost``.
- ``claim_next`` passes over a run the strategy refuses, with nothing of that
  attempt left behind; on PostgreSQL, workers racing on one database take
  different runs (``FOR UPDATE SKIP LOCKED``).
- Migration 2003 upgrades a file from 2002 (indexes, ``compacted_through``).
"""

from __future__ import annotations

import random
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import runstore
from runstore import Activated, ManualClock, OwnerId, RunSnapshot, Updated
from runstore import _boundary as admit
from runstore._sql._store import _listing
from runstore.consensus import LocalConsensus, Lost, SqlConsensus
from runstore.sqlite import _migrations
from runstore.sqlite import _queries as sqlite_queries

from .. import _postgres

A = OwnerId("host-a", 1, "a1")
B = OwnerId("host-b", 2, "b1")
PENDING = RunSnapshot("pending", None, None)

#: The hot filters and the index each must be served by.
HOT = {
    "all": ({}, "flows_runs_listing_idx"),
    "status": ({"status": "running"}, "flows_runs_status_listing_idx"),
    "statuses": ({"status": ("pending", "suspended")}, "flows_runs_status_listing_idx"),
    "claimable": ({"claimable_at": 5}, "flows_runs_claimable_idx"),
    "stale": ({"stale_at": 5}, "flows_runs_status_listing_idx"),
    "claim_stale": ({"claim_stale_at": 5}, "flows_runs_claimed_idx"),
    "all_with_state": ({"with_state": True}, "flows_runs_listing_idx"),
}
#: On SQLite each status has a listing index of its own (migration 2016);
#: several statuses are read one arm per status, each from its index.
SQLITE_HOT: dict[str, tuple[dict[str, Any], str | tuple[str, ...]]] = {
    **HOT,
    "status": ({"status": "running"}, "flows_runs_running_listing_idx"),
    "statuses": (
        {"status": ("pending", "suspended")},
        ("flows_runs_pending_listing_idx", "flows_runs_suspended_listing_idx"),
    ),
    "stale": ({"stale_at": 5}, "flows_runs_running_listing_idx"),
}
PARAMS = (5, "x", None, 1, 1, None, None, 101)


def _statement(q: Any, filters: dict[str, Any], *, after: bool = True) -> str:
    arguments: dict[str, Any] = {
        "status": None,
        "claimable_at": None,
        "stale_at": None,
        "claim_stale_at": None,
        "cancel_requested": None,
        "lineage_id": None,
        "parent_run_id": None,
        "limit": 100,
        "after": admit.encode_cursor(5, "x") if after else None,
        "with_state": False,
    }
    arguments.update(filters)
    return _listing(q, admit.admit_list_runs(*arguments.values()))


@pytest.fixture
def postgres() -> Iterator[Any]:
    """A PostgreSQL store on a fresh database (skipped without a server)."""
    store = _postgres.open_store(ManualClock(1_000))
    try:
        yield store
    finally:
        store.close()


# -- plans ---------------------------------------------------------------------------


def _sqlite_plan(store: Any, sql: str, params: tuple[Any, ...]) -> list[str]:
    rows = sqlite3.Connection.execute(store._connection, "EXPLAIN QUERY PLAN " + sql, params)
    return [row[3] for row in rows]


@pytest.mark.parametrize("case", sorted(SQLITE_HOT))
@pytest.mark.parametrize("after", [True, False], ids=["after", "first"])
def test_sqlite_serves_each_hot_filter_from_its_index(case: str, after: bool) -> None:
    filters, index = SQLITE_HOT[case]
    with runstore.open(":memory:", clock=ManualClock(0)) as store:
        plan = _sqlite_plan(store, _statement(sqlite_queries, filters, after=after), PARAMS)
    runs = [line for line in plan if " r " in f" {line} "]
    assert runs, plan
    # One index, or one per arm of several statuses (each read in order).
    indexes = (index,) if isinstance(index, str) else index
    assert all(any(name in line for name in indexes) for line in runs), plan
    assert all(any(name in line for line in runs) for name in indexes), plan
    # An index walked in order ("SCAN r USING INDEX ...") stops at the limit;
    # a table scan or a sort would not.
    assert not any(line.startswith("SCAN") and "USING" not in line for line in plan), plan
    assert not any("TEMP B-TREE" in line for line in plan), plan


def test_sqlite_claim_next_and_purge_read_their_indexes() -> None:
    with runstore.open(":memory:", clock=ManualClock(0)) as store:
        pick = _sqlite_plan(store, sqlite_queries.CLAIM_NEXT_PICK, (-1, "", "pending", "pending"))
        purge = _sqlite_plan(store, sqlite_queries.PURGE_CANDIDATES, (10, 100))
        rows = _sqlite_plan(store, sqlite_queries.PURGE_CANDIDATE_ROWS, (10, 100))
    assert "flows_runs_claimable_idx" in pick[0], pick
    for plan in (purge, rows):
        assert "flows_runs_finished_idx" in plan[0], plan
        # Each check of a candidate is one key lookup: its children, the live
        # rounds of its lineage (not every round: migration 2009), its root.
        searches = [line for line in plan[1:] if line.startswith(("SEARCH", "SCAN"))]
        assert searches == [
            "SEARCH c USING COVERING INDEX flows_runs_parent_run_id_idx (parent_run_id=?)",
            "SEARCH m USING INDEX flows_runs_live_rounds_idx (lineage_id=?)",
            "SEARCH m USING PRIMARY KEY (run_id=?)",
        ], plan
    for plan in (pick, purge, rows):
        assert not any(line.startswith("SCAN") and "USING" not in line for line in plan), plan
        assert not any("TEMP B-TREE" in line for line in plan), plan


def _purge_backlog(store: Any, clock: ManualClock, rounds: int, live: int) -> None:
    """A lineage of ``rounds`` settled rounds (the oldest finished runs) and
    ``live`` pending runs: a purge's candidates are the lineage's rounds,
    each of which must be checked for a live round of its lineage."""
    store.create("L", "{}")
    for n in range(rounds):
        store.create(f"L-{n:04d}", "{}", lineage_id="L", round_ordinal=n + 2)
    for n in range(live):
        store.create(f"live-{n:04d}", "{}")
    for rid in ["L"] + [f"L-{n:04d}" for n in range(rounds)]:
        assert store.claim_and_own(rid, PENDING, A, clock.now_ms()) == Activated()
        assert type(store.transition_owned(rid, A, "completed")).__name__ == "Transitioned"
        clock.advance(1)


def _sqlite_steps(store: Any, sql: str, params: tuple[Any, ...]) -> int:
    """How many virtual machine instructions SQLite runs for ``sql``: a count
    of the work done, the same on every run, unlike a time."""
    steps = 0

    def tick() -> int:
        nonlocal steps
        steps += 1
        return 0

    sqlite3.Connection.set_progress_handler(store._connection, tick, 1)
    try:
        sqlite3.Connection.execute(store._connection, sql, params).fetchall()
    finally:
        sqlite3.Connection.set_progress_handler(store._connection, None, 1)
    return steps


def test_sqlite_purge_costs_its_limit_not_the_store() -> None:
    """purge_settled's and purge_candidates's query does the same work on a
    store 8 times larger, its limit alike: the candidates' lineage of settled
    rounds and the live runs grow, the instructions run do not (with the
    lineage index alone, each candidate read every round of its lineage)."""
    counts = []
    for size in (50, 400):
        clock = ManualClock(1_000)
        with runstore.open(":memory:", clock=clock) as store:
            _purge_backlog(store, clock, rounds=size, live=size)
            assert len(store.purge_candidates(clock.now_ms(), limit=5)) == 5
            counts.append(
                [
                    _sqlite_steps(store, statement, (clock.now_ms(), 5))
                    for statement in (
                        sqlite_queries.PURGE_CANDIDATES,
                        sqlite_queries.PURGE_CANDIDATE_ROWS,
                    )
                ]
            )
    small, large = counts
    assert large == small, counts


def test_sqlite_batch_statements_seek_each_run_by_its_key() -> None:
    """heartbeat_many's and purge_settled's statements are driven by the ids
    they are given (one key seek each), never by a scan of an index over all
    runs: 10 000 renewals would otherwise cost 10 000 scans of the ids."""
    from runstore.sqlite import _lease_queries as leases

    ids = '["a"]'
    with runstore.open(":memory:", clock=ManualClock(0)) as store:
        plans = {
            "renew": _sqlite_plan(
                store, sqlite_queries.RENEW_MANY_WRITE, ('{"a":1}', None, "h", 1, "n")
            ),
            "owned": _sqlite_plan(store, sqlite_queries.OWNED_AMONG, (ids, "h", 1, "n")),
            "existing": _sqlite_plan(store, sqlite_queries.EXISTING_AMONG, (ids,)),
            "leases": _sqlite_plan(store, leases.HEARTBEAT_MANY, (ids, "h", 1, "n", 5)),
            "purge": _sqlite_plan(store, sqlite_queries.PURGE_RUNS, (ids,)),
        }
    for name, plan in plans.items():
        seeks = [line for line in plan if line.startswith("SEARCH flows_")]
        assert seeks, (name, plan)
        assert "PRIMARY KEY (run_id=?)" in seeks[0], (name, plan)
        assert not any(line.startswith("SCAN flows_") for line in plan), (name, plan)


def _postgres_plan(store: Any, sql: str, params: tuple[Any, ...]) -> str:
    connection = store._connection
    connection.execute("SET enable_seqscan = off")
    connection.execute("SET enable_sort = off")
    try:
        return "\n".join(line for (line,) in connection.execute("EXPLAIN " + sql, params))
    finally:
        connection.execute("RESET enable_seqscan")
        connection.execute("RESET enable_sort")


@pytest.mark.parametrize("case", sorted(HOT))
def test_postgres_serves_each_hot_filter_from_its_index(postgres: Any, case: str) -> None:
    from runstore.postgres import _queries as postgres_queries

    filters, index = HOT[case]
    plan = _postgres_plan(postgres, _statement(postgres_queries, filters), PARAMS)
    assert f"Index Scan using {index} on flows_runs r" in plan, plan
    assert "Seq Scan" not in plan, plan
    assert "Sort " not in plan.replace("Sort Key", ""), plan
    if case == "statuses":
        assert "Merge Append" in plan, plan


def test_postgres_claim_next_and_purge_read_their_indexes(postgres: Any) -> None:
    from runstore.postgres import _queries as postgres_queries

    pick = _postgres_plan(postgres, postgres_queries.CLAIM_NEXT_PICK, (-1, "", "pending", "x"))
    purge = _postgres_plan(postgres, postgres_queries.PURGE_CANDIDATES, (10, 100))
    rows = _postgres_plan(postgres, postgres_queries.PURGE_CANDIDATE_ROWS, (10, 100))
    assert "Index Scan using flows_runs_claimable_idx" in pick, pick
    for plan in (purge, rows):
        assert "Index Scan using flows_runs_finished_idx" in plan, plan
        assert "flows_runs_live_rounds_idx" in plan, plan
        assert "SubPlan" not in plan, plan  # anti-joins, never a hashed subplan
    for plan in (pick, purge, rows):
        assert "Seq Scan" not in plan, plan
        assert "Sort " not in plan.replace("Sort Key", ""), plan


def _rows_read(connection: Any, sql: str, params: tuple[Any, ...]) -> tuple[int, list[str]]:
    """``EXPLAIN ANALYZE``'s count of the flows_runs rows ``sql`` read (rows
    returned and rows filtered out, times loops, over every node that reads
    the table), and those nodes: a count of the work, not a time."""
    ((plan,),) = connection.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params).fetchall()
    total = 0
    nodes: list[str] = []

    def visit(node: dict[str, Any]) -> None:
        nonlocal total
        if node.get("Relation Name") == "flows_runs":
            read = node["Actual Rows"] + node.get("Rows Removed by Filter", 0)
            total += read * node["Actual Loops"]
            nodes.append(
                f"{node['Node Type']} {node.get('Index Name')}: {read} x {node['Actual Loops']}"
            )
        if "hashed SubPlan" in node.get("Filter", ""):
            nodes.append(f"hashed subplan in {node['Node Type']} {node.get('Index Name')}")
        for child in node.get("Plans", []):
            visit(child)

    visit(plan[0]["Plan"])
    return total, nodes


def test_postgres_purge_costs_its_limit_not_the_store() -> None:
    """On a store holding a lineage of 200 settled rounds (the oldest finished
    runs) and 200 live runs, with statistics, a purge of 5 (and its
    candidates' read) reads about 2 rows per candidate: every check is an
    index probe per candidate. Written as one NOT (EXISTS OR EXISTS), the
    query hashed all 200 live runs on every call; with the lineage index
    alone, each candidate read every round of its lineage."""
    from runstore.postgres import _queries as postgres_queries

    clock = ManualClock(1_000)
    with _postgres.open_store(clock) as store:
        _purge_backlog(store, clock, rounds=200, live=200)
        connection = store._connection
        connection.execute("ANALYZE flows_runs")
        params = (clock.now_ms(), 5)
        for statement in (postgres_queries.PURGE_CANDIDATE_ROWS, postgres_queries.PURGE_CANDIDATES):
            connection.execute("BEGIN")  # PURGE_CANDIDATES locks what it picks
            try:
                read, nodes = _rows_read(connection, statement, params)
            finally:
                connection.execute("ROLLBACK")
            assert read <= 3 * 5, nodes
            assert not any(node.startswith(("Seq Scan", "hashed")) for node in nodes), nodes
        listed = [row.run_id for row in store.purge_candidates(clock.now_ms(), limit=5)]
        assert listed == ["L", "L-0000", "L-0001", "L-0002", "L-0003"]


def test_every_listing_assembly_runs_on_postgres(postgres: Any) -> None:
    """Each filter alone and all of them together are valid statements."""
    from runstore.postgres import _queries as postgres_queries

    every = {
        "status": ("pending", "running"),
        "claimable_at": 1,
        "stale_at": 1,
        "claim_stale_at": 1,
        "cancel_requested": True,
        "lineage_id": "L",
        "parent_run_id": "P",
        "with_state": True,
    }
    shapes = [{name: value} for name, value in every.items()]
    shapes += [{"cancel_requested": False}, every]
    for shape in shapes:
        for after in (True, False):
            statement = _statement(postgres_queries, shape, after=after)
            assert postgres._connection.execute(statement, PARAMS).fetchall() == []


# -- run id order ----------------------------------------------------------------------


def _stores(tmp_path: Path) -> list[tuple[str, Any]]:
    """Both backends, with SqlConsensus, PostgreSQL on its one-round-trip path
    and on the general one (skips PostgreSQL without a server)."""
    clock = ManualClock(1_000)
    found = [("sqlite", runstore.open(tmp_path / "order.db", clock=clock), clock)]
    try:
        for fast in (True, False):
            pg_clock = ManualClock(1_000)
            opened = _postgres.open_store(pg_clock, SqlConsensus(), fast_path=fast)
            found.append((f"postgres-fast={fast}", opened, pg_clock))
    except pytest.skip.Exception:
        pass
    return found  # type: ignore[return-value]


IDS = [f"run-{n:03d}" for n in range(60)] + ["Z", "a", "é", "\u4e00", "0"]


def test_heartbeat_many_and_purge_number_their_runs_in_run_id_order(tmp_path: Path) -> None:
    for name, store, clock in _stores(tmp_path):  # type: ignore[misc]
        with store:
            shuffled = random.Random(13).sample(IDS, len(IDS))
            for rid in shuffled:
                clock.advance(1)
                store.create(rid, "{}")
                assert store.claim_and_own(rid, PENDING, A, clock.now_ms()) == Activated()
            clock.advance(5)
            before = store.revision()
            asked = random.Random(7).sample(IDS, len(IDS))
            answers = store.heartbeat_many(A, asked, clock.now_ms())
            assert list(answers) == asked
            assert set(answers.values()) == {Updated()}
            renewed = [change.run_id for change in store.changes(before)]
            assert renewed == sorted(IDS), name
            for rid in shuffled:
                store.transition_owned(rid, A, "completed")
            clock.advance(5)
            before = store.revision()
            assert store.purge_settled(clock.now_ms(), limit=len(IDS)) == len(IDS)
            deleted = store.changes(before)
            assert [change.run_id for change in deleted] == sorted(IDS), name
            assert all(change.deleted for change in deleted)
            store.check_invariants()


# -- strategies -----------------------------------------------------------------------


class Counting(SqlConsensus):
    """SqlConsensus counting its renewal calls; optionally dropping a key."""

    def __init__(self, drop: str | None = None) -> None:
        self.single = 0
        self.batches = 0
        self.drop = drop

    def heartbeat(self, tx: Any, run_id: str, owner: OwnerId, now_ms: int) -> Any:
        self.single += 1
        return super().heartbeat(tx, run_id, owner, now_ms)

    def heartbeat_many(self, tx: Any, run_ids: Any, owner: OwnerId, now_ms: int) -> Any:
        self.batches += 1
        answers = super().heartbeat_many(tx, run_ids, owner, now_ms)
        answers.pop(self.drop, None)
        return answers


class Single(LocalConsensus):
    """LocalConsensus (no batch method), counting its heartbeat calls."""

    single = 0

    def heartbeat(self, tx: Any, run_id: str, owner: OwnerId, now_ms: int) -> Any:
        self.single += 1
        return super().heartbeat(tx, run_id, owner, now_ms)


def _owned(store: Any, clock: ManualClock, ids: list[str]) -> None:
    for rid in ids:
        clock.advance(1)
        store.create(rid, "{}")
        assert store.claim_and_own(rid, PENDING, A, clock.now_ms()) == Activated()


def test_heartbeat_many_asks_a_batch_strategy_once_and_others_per_run() -> None:
    clock = ManualClock(1_000)
    batch = Counting()
    with runstore.open(":memory:", clock=clock, consensus=batch) as store:
        _owned(store, clock, ["a", "b", "c"])
        assert (
            store.heartbeat_many(A, ["c", "a", "b", "x"], clock.now_ms())["x"].__class__.__name__
            == "NotFound"
        )
        assert (batch.batches, batch.single) == (1, 0)
    single = Single()
    with runstore.open(":memory:", clock=clock, consensus=single) as store:
        _owned(store, clock, ["a", "b", "c"])
        answers = store.heartbeat_many(A, ["c", "a", "b"], clock.now_ms())
        assert set(answers.values()) == {Updated()}
        assert single.single == 3
        store.check_invariants()


def test_a_run_a_batch_answer_leaves_out_is_lost() -> None:
    clock = ManualClock(1_000)
    with runstore.open(":memory:", clock=clock, consensus=Counting(drop="b")) as store:
        _owned(store, clock, ["a", "b"])
        before = store.get("b")
        answers = store.heartbeat_many(A, ["a", "b"], clock.now_ms() + 5)
        assert answers["a"] == Updated()
        assert answers["b"].__class__.__name__ == "FenceLost"
        assert store.get("b").heartbeat_at_ms == before.heartbeat_at_ms


class RefusesFirst(SqlConsensus):
    """Refuses the first claim of ``victim`` after granting it (so the grant's
    lease change must roll back with the attempt)."""

    def __init__(self, victim: str) -> None:
        self.victim = victim
        self.refused = 0

    def activate(
        self, tx: Any, run_id: str, owner: OwnerId, granted_at_ms: int, now_ms: int
    ) -> Any:
        if run_id == self.victim and not self.refused:
            self.refused += 1
            return Lost()
        return super().activate(tx, run_id, owner, granted_at_ms, now_ms)


def test_claim_next_passes_over_a_run_the_strategy_refuses() -> None:
    clock = ManualClock(1_000)
    strategy = RefusesFirst("old")
    with runstore.open(":memory:", clock=clock, consensus=strategy) as store:
        store.create("old", "{}")
        clock.advance(1)
        store.create("young", "{}")
        revision = store.revision()
        row = store.claim_next(A, clock.now_ms())
        assert row is not None
        assert row.run_id == "young"
        assert strategy.refused == 1
        assert store.get("old").claim is None
        assert store.ownership_facts("old") == []
        assert store.revision() == revision + 1
        store.check_invariants()
        # Next time the strategy agrees: the old run is taken.
        again = store.claim_next(B, clock.now_ms())
        assert again is not None
        assert again.run_id == "old"


def test_postgres_workers_racing_on_claim_next_take_different_runs() -> None:
    clock = ManualClock(1_000)
    url = _postgres.database_url()
    with _postgres.open_store(clock, url=url) as setup:
        for number in range(40):
            clock.advance(1)
            setup.create(f"run-{number:02d}", "{}")
    taken: list[list[str]] = [[] for _ in range(4)]
    start = threading.Barrier(4)

    def work(index: int) -> None:
        owner = OwnerId(f"host-{index}", index + 1, f"n{index}")
        with _postgres.open_store(clock, url=url) as store:
            start.wait()
            while (row := store.claim_next(owner, clock.now_ms())) is not None:
                taken[index].append(row.run_id)

    workers = [threading.Thread(target=work, args=(index,)) for index in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
    everything = [rid for claimed in taken for rid in claimed]
    assert sorted(everything) == [f"run-{number:02d}" for number in range(40)]
    with _postgres.open_store(clock, url=url) as check:
        check.check_invariants()
        assert check.list_runs(claimable_at=clock.now_ms()).runs == ()


# -- migration ------------------------------------------------------------------------


def test_a_file_from_2002_gains_the_indexes_and_keeps_its_runs(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    connection = sqlite3.connect(path, isolation_level=None)
    connection.execute("PRAGMA foreign_keys = ON")
    _migrations.apply(connection, len(_migrations.MIGRATIONS) - 1)
    connection.execute(
        "INSERT INTO flows_runs (run_id, status, created_at_ms) VALUES ('r', 'pending', 5)"
    )
    connection.execute("INSERT INTO flows_run_state (run_id, state_json) VALUES ('r', '{}')")
    connection.close()
    with runstore.open(path, clock=ManualClock(10)) as store:
        indexes = {
            row[0]
            for row in sqlite3.Connection.execute(
                store._connection, "SELECT name FROM sqlite_master WHERE type = 'index'"
            )
        }
        assert {
            "flows_runs_listing_idx",
            "flows_runs_pending_listing_idx",
            "flows_runs_claimable_idx",
            "flows_runs_claimed_idx",
            "flows_runs_finished_idx",
            "flows_run_changes_tombstone_idx",
        } <= indexes
        (through,) = sqlite3.Connection.execute(
            store._connection, "SELECT compacted_through FROM flows_run_source"
        ).fetchone()
        assert through == 0
        assert [row.run_id for row in store.list_runs(claimable_at=10).runs] == ["r"]
        store.check_invariants()
