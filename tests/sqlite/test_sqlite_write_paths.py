"""What the SQLite store's hot writes cost the database (issue 28).

- No temporary tables: every statement a single-run write runs (its own
  statements, the strategy's lease statements, the revision trigger's
  statements) compiles to a program without ``OpenEphemeral``, CHECKs and
  partial-index conditions included, and no plan reads a whole table or
  index where a key lookup exists. A checker that missed them is shown to
  flag the statements and the schema this file had before migration 2012.
- Pages per commit: on a file of 3 000 older runs, each single-run write's
  commits write, in a WAL file, pages of exactly the B-trees (tables and
  indexes) listed for it here, and on average at most two pages more than
  there are B-trees in the list (the two allow the run's entry in the
  revision index to leave one leaf for another, and the odd page split). A
  change of status writes two listing indexes, the old status's and the new
  one's (migration 2016); with the one index of before planted back,
  ``claim_next`` breaks the bound.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import runstore
from runstore import LivenessEvidence, ManualClock, OwnerId, RunSnapshot
from runstore.sqlite import _lease_queries, _migrations, _queries

from ._wal import WalReader, btrees

OWNER = OwnerId("host-a", 101, "nonce-a")
THIEF = OwnerId("host-b", 202, "nonce-b")
PENDING = RunSnapshot("pending", None, None)
STATE = '{"step": 1, "note": "' + "x" * 100 + '"}'

#: Every statement of a single-run write, by its name in ``_queries``.
HOT_QUERIES = (
    "CREATE_RUN",
    "CREATE_STATE",
    "REQUEST_CANCEL_WRITE",
    "REQUEST_CANCEL_MISS",
    "ACKNOWLEDGE_CANCEL_WRITE",
    "CLAIM_CLASSIFY",
    "CLAIM_WRITE",
    "CLAIM_AND_OWN_CLASSIFY",
    "CLAIM_AND_OWN_WRITE",
    "STEAL_CLASSIFY",
    "STEAL_WRITE",
    "ACTIVATE_CLASSIFY",
    "ACTIVATE_WRITE",
    "CLEAR_CLAIM",
    "RECOVER_CLAIM_CLASSIFY",
    "RENEW_WRITE",
    "RUN_EXISTS",
    "TRANSITION_RUNNING_WRITE",
    "TRANSITION_SETTLE_WRITE",
    "TRANSITION_CLASSIFY",
    "STATE_WRITE",
    "FACT_AT",
    "FACTS_GRANT_ACTIVATED_AT",
    "FACT_APPEND",
    "LAST_FACT_POSITION",
    "CLAIM_NEXT_PICK",
)
#: ``SqlConsensus``'s statements on a single run. (Not ``RELEASE_CLAIM``,
#: which ``abandon_claim`` and a moved ``activate`` run: its ``RETURNING``
#: is buffered in a temporary table.)
HOT_LEASE_QUERIES = (
    "CLAIM",
    "CLAIM_ACTIVATE",
    "STEAL",
    "ACTIVATE",
    "HEARTBEAT",
    "HEARTBEAT_HELD",
    "RECONFIRM",
    "RECONFIRM_HELD",
    "RECOVER",
    "RELEASE_OWNERSHIP",
    "PRUNE",
    "GUARD",
)


def _arity(sql: str) -> int:
    return max((int(n) for n in re.findall(r"\?(\d+)", sql)), default=0)


def costly(connection: sqlite3.Connection, sql: str) -> list[str]:
    """What is wrong with ``sql``'s program and plan: each ``OpenEphemeral``
    (a temporary b-tree), and each plan step that scans a table or index."""
    params = (None,) * _arity(sql)
    execute = sqlite3.Connection.execute
    found = [
        f"OpenEphemeral at {row[0]}"
        for row in execute(connection, f"EXPLAIN {sql}", params)
        if row[1] == "OpenEphemeral"
    ]
    for row in execute(connection, f"EXPLAIN QUERY PLAN {sql}", params):
        detail = str(row[3])
        if detail.startswith("SCAN ") and "CONSTANT ROW" not in detail:
            found.append(detail)
    return found


def trigger_statements(connection: sqlite3.Connection) -> dict[str, str]:
    """The statements of the revision triggers, ``NEW.``/``OLD.`` columns as ``?1``
    and ``RAISE`` as ``NULL``."""
    found = {}
    rows = sqlite3.Connection.execute(
        connection, "SELECT name, sql FROM sqlite_master WHERE type = 'trigger'"
    ).fetchall()
    for name, sql in rows:
        body = sql[sql.upper().index("BEGIN") + len("BEGIN") : sql.upper().rindex("END")]
        body = re.sub(r"\b(NEW|OLD)\.run_id\b", "?1", body)
        # RAISE compiles only inside a trigger; a NULL in its place costs the same.
        body = re.sub(r"RAISE\([^)]*\)", "NULL", body)
        for number, statement in enumerate(s for s in body.split(";") if s.strip()):
            if "RAISE(ABORT, 'run identity is immutable')" in statement:
                continue  # the identity guard runs only when the id changes
            found[f"{name} #{number}"] = statement
    return found


def _store(path: Path | str = ":memory:") -> Any:
    return runstore.open(path, clock=ManualClock(1_000_000))


def test_hot_write_statements_need_no_temporary_table_and_scan_nothing() -> None:
    with _store() as store:
        connection = store._connection
        statements = {name: getattr(_queries, name) for name in HOT_QUERIES}
        statements |= {f"lease {n}": getattr(_lease_queries, n) for n in HOT_LEASE_QUERIES}
        statements |= trigger_statements(connection)
        assert any(name.startswith("flows_runs_revision_update") for name in statements)
        problems = {
            name: found for name, sql in statements.items() if (found := costly(connection, sql))
        }
        assert problems == {}


def test_the_check_flags_temporary_tables_and_scans() -> None:
    """The checker sees an ``IN`` list, an INSERT reading its own table, a scan."""
    with _store() as store:
        connection = store._connection
        assert costly(connection, "SELECT 1 FROM flows_runs WHERE run_id = ?1") == []
        in_list = "SELECT 1 FROM flows_runs WHERE run_id = ?1 AND status IN ('a', 'b', 'c')"
        self_read = (
            "INSERT INTO flows_ownership_facts SELECT * FROM flows_ownership_facts "
            "WHERE run_id = ?1"
        )
        for sql in (in_list, self_read):
            (problem,) = costly(connection, sql)
            assert problem.startswith("OpenEphemeral")
        scan = "SELECT 1 FROM flows_runs WHERE owner_nonce = ?1"
        assert costly(connection, scan) == ["SCAN flows_runs"]


def test_the_schema_before_2012_fails_the_check(tmp_path: Path) -> None:
    """A file stopped before migration 2012 (the status CHECK and the live-rounds
    index written with IN lists) has temporary tables on its hot writes; opening
    it migrates them away, and the rewritten CHECK still refuses a bad status."""
    path = tmp_path / "old.db"
    connection = sqlite3.connect(path, isolation_level=None)
    position = [m.id for m in _migrations.MIGRATIONS].index(2012)
    _migrations.apply(connection, position)
    before = costly(connection, _queries.TRANSITION_SETTLE_WRITE)
    assert any("OpenEphemeral" in problem for problem in before)
    assert any("OpenEphemeral" in problem for problem in costly(connection, _queries.FACT_AT))
    connection.close()
    with _store(path) as store:
        assert costly(store._connection, _queries.TRANSITION_SETTLE_WRITE) == []
        assert costly(store._connection, _queries.FACT_AT) == []
        store.create("run", STATE)
        store.check_invariants()
    # A connection that opened the file before the upgrade and one that opens it after.
    other = sqlite3.connect(path, isolation_level=None)
    assert costly(other, _queries.FACT_AT) == []
    with pytest.raises(sqlite3.IntegrityError):
        other.execute("UPDATE flows_runs SET status = 'paused' WHERE run_id = 'run'")
    with pytest.raises(sqlite3.IntegrityError):
        other.execute(
            "INSERT INTO flows_ownership_facts VALUES ('run', 1, 'borrowed', 'h', 1, 'n', 1)"
        )
    assert other.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    other.close()


# -- pages per commit --------------------------------------------------------------------

_RUN = "flows_runs"
_CHANGES = ("flows_run_source", "flows_run_changes", "sqlite_autoindex_flows_run_changes_2")
_LEASES = "flows_consensus_leases"
_FACTS = "flows_ownership_facts"
_PENDING = _migrations.status_index("pending")
_RUNNING = _migrations.status_index("running")

#: The B-trees each operation's commit must write: the run row, every index
#: whose columns it changes (a status change leaves one status's listing
#: index for another's), the revision counter and the run's change entry
#: (and its revision index), the lease row and the facts it appends.
MUST_TOUCH: dict[str, frozenset[str]] = {
    "create": frozenset(
        {
            _RUN,
            *_CHANGES,
            "flows_run_state",
            "sqlite_autoindex_flows_run_state_1",
            "flows_runs_listing_idx",
            _PENDING,
            "flows_runs_claimable_idx",
            "flows_runs_parent_run_id_idx",
            "flows_runs_lineage_idx",
        }
    ),
    "claim": frozenset(
        {_RUN, *_CHANGES, _LEASES, _FACTS, "flows_runs_claimable_idx", "flows_runs_claimed_idx"}
    ),
    "abandon_claim": frozenset(
        {_RUN, *_CHANGES, _LEASES, _FACTS, "flows_runs_claimable_idx", "flows_runs_claimed_idx"}
    ),
    "activate": frozenset(
        {_RUN, *_CHANGES, _LEASES, _FACTS, _PENDING, _RUNNING, "flows_runs_claimed_idx"}
    ),
    "claim_and_own": frozenset(
        {_RUN, *_CHANGES, _LEASES, _FACTS, _PENDING, _RUNNING, "flows_runs_claimable_idx"}
    ),
    "steal": frozenset({_RUN, *_CHANGES, _LEASES, _FACTS, "flows_runs_claimed_idx"}),
    "heartbeat": frozenset({_RUN, *_CHANGES, _LEASES}),
    "reconfirm": frozenset({_RUN, *_CHANGES, _LEASES}),
    # The row does not change (it is running already): only its revision.
    "transition_owned running": frozenset(_CHANGES),
    "request_cancel": frozenset({_RUN, *_CHANGES, "flows_runs_cancel_requested_idx"}),
    "acknowledge_cancel": frozenset({_RUN, *_CHANGES}),
    "transition_owned completed": frozenset(
        {
            _RUN,
            *_CHANGES,
            _LEASES,
            _FACTS,
            _RUNNING,
            _migrations.status_index("completed"),
            "flows_runs_finished_idx",
        }
    ),
    "transition_owned suspended": frozenset(
        {
            _RUN,
            *_CHANGES,
            _LEASES,
            _FACTS,
            _RUNNING,
            _migrations.status_index("suspended"),
            "flows_runs_claimable_idx",
        }
    ),
    "claim_next": frozenset(
        {_RUN, *_CHANGES, _LEASES, _FACTS, _PENDING, _RUNNING, "flows_runs_claimable_idx"}
    ),
}
#: Written when the file grows (the header page holds the database's size).
_HEADER = "sqlite_schema"
#: Runs already in the file when the writes are measured.
BACKGROUND = 3_000


def _operations(store: Any, clock: ManualClock) -> dict[str, Callable[[str], object]]:
    now = clock.now_ms
    tokens: dict[str, int] = {}

    def claim(run_id: str) -> object:
        claimed = store.claim(run_id, PENDING, OWNER, now())
        tokens[run_id] = claimed.claimed_at_ms
        return claimed

    def steal(run_id: str) -> object:
        evidence = LivenessEvidence(OWNER, now(), "lease-expired")
        expected = RunSnapshot("running", OWNER, now() - 40_000)
        return store.steal(run_id, expected, THIEF, now(), evidence)

    return {
        "create": lambda run_id: store.create(run_id, STATE),
        "claim": claim,
        "abandon_claim": lambda run_id: store.abandon_claim(run_id, OWNER, tokens.pop(run_id)),
        "activate": lambda run_id: store.activate(run_id, OWNER, tokens[run_id], PENDING),
        "claim_and_own": lambda run_id: store.claim_and_own(run_id, PENDING, OWNER, now()),
        "steal": steal,
        "heartbeat": lambda run_id: store.heartbeat(run_id, OWNER, now()),
        "reconfirm": lambda run_id: store.reconfirm(run_id, OWNER, now()),
        "request_cancel": lambda run_id: store.request_cancel(run_id, now()),
        "acknowledge_cancel": lambda run_id: store.acknowledge_cancel(run_id, OWNER, now()),
        "transition_owned running": lambda run_id: store.transition_owned(run_id, OWNER, "running"),
        "transition_owned completed": lambda run_id: store.transition_owned(
            run_id, OWNER, "completed", STATE
        ),
        "transition_owned suspended": lambda run_id: store.transition_owned(
            run_id, OWNER, "suspended", STATE
        ),
        "claim_next": lambda run_id: store.claim_next(OWNER, now()),
    }


def background(connection: sqlite3.Connection, count: int, now_ms: int) -> None:
    """``count`` older runs in one transaction, made as the store would leave
    them: three fifths completed, a fifth running (owned by ``THIEF``, with
    its lease and activation fact), a fifth pending, with ids ``a-NNNNN``
    (the file may hold other runs already). Their ids sort before the
    measured runs', their creation times before them too."""
    execute = sqlite3.Connection.execute
    a, b = 3 * count // 5, 4 * count // 5
    numbers = (
        f"WITH RECURSIVE g(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM g WHERE n < {count - 1})"
    )
    host, pid, nonce = THIEF.host_id, THIEF.pid, THIEF.nonce
    execute(connection, "BEGIN IMMEDIATE")
    execute(
        connection,
        f"""{numbers}
        INSERT INTO flows_runs (run_id, status, created_at_ms, started_at_ms, finished_at_ms,
          owner_host_id, owner_pid, owner_nonce, heartbeat_at_ms)
        SELECT printf('a-%05d', n),
          CASE WHEN n < {a} THEN 'completed' WHEN n < {b} THEN 'running' ELSE 'pending' END,
          n, CASE WHEN n < {b} THEN n END, CASE WHEN n < {a} THEN n + 1 END,
          CASE WHEN n >= {a} AND n < {b} THEN '{host}' END,
          CASE WHEN n >= {a} AND n < {b} THEN {pid} END,
          CASE WHEN n >= {a} AND n < {b} THEN '{nonce}' END,
          CASE WHEN n >= {a} AND n < {b} THEN {now_ms} END
        FROM g""",
    )
    execute(
        connection,
        "INSERT INTO flows_run_state (run_id, state_json) "
        f"SELECT run_id, '{STATE}' FROM flows_runs WHERE run_id GLOB 'a-*'",
    )
    execute(
        connection,
        """INSERT INTO flows_consensus_leases
          (run_id, owner_host_id, owner_pid, owner_nonce, granted_at_ms, heartbeat_at_ms)
        SELECT run_id, owner_host_id, owner_pid, owner_nonce, heartbeat_at_ms, heartbeat_at_ms
        FROM flows_runs WHERE status = 'running' AND run_id GLOB 'a-*'""",
    )
    execute(
        connection,
        """INSERT INTO flows_ownership_facts (run_id, position, transition, owner_host_id,
          owner_pid, owner_nonce, granted_at_ms)
        SELECT run_id, 1, 'activated', owner_host_id, owner_pid, owner_nonce, heartbeat_at_ms
        FROM flows_runs WHERE status = 'running' AND run_id GLOB 'a-*'""",
    )
    execute(connection, "COMMIT")


def pages_per_commit(path: Path, *, plant: str | None = None) -> dict[str, tuple[set[str], float]]:
    """Each single-run write on a file of ``BACKGROUND`` older runs: the
    B-trees its commits wrote pages of, and its pages per commit (averaged
    over 20 to 60 runs). ``plant`` is SQL run on the file first."""
    clock = ManualClock(1_000_000)
    seen: dict[str, tuple[set[str], float]] = {}
    with runstore.open(path, clock=clock) as store:
        connection = store._connection
        connection.execute("PRAGMA synchronous = OFF")  # changes no page a commit writes
        if plant is not None:
            connection.executescript(plant)
        background(connection, BACKGROUND, clock.now_ms())
        store.check_invariants()
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        connection.execute("PRAGMA wal_autocheckpoint = 0")
        operations = _operations(store, clock)
        reader = WalReader(path)
        reader.skip()

        def measure(name: str, run_ids: list[str]) -> None:
            reader.skip()
            pages, touched = 0, set()
            for run_id in run_ids:
                operations[name](run_id)
                frames = reader.take()
                assert sum(1 for _page, end in frames if end) == 1, name
                pages += len(frames)
                touched |= btrees(connection, frames) - {_HEADER}
            seen[name] = (touched, pages / len(run_ids))

        ids = [f"b-{number:05d}" for number in range(60)]
        measure("create", ids)
        # The pending backlog of the older runs, oldest first.
        measure("claim_next", ids[:20])
        seen["claim_next backlog"] = seen.pop("claim_next")
        measure("claim", ids[20:40])
        measure("activate", ids[20:40])
        measure("claim_and_own", ids[:20] + ids[40:])
        clock.advance(1_000)
        measure("heartbeat", ids)
        clock.advance(1_000)
        measure("reconfirm", ids)
        measure("transition_owned running", ids)
        measure("request_cancel", ids[:20])
        measure("acknowledge_cancel", ids[:20])
        measure("transition_owned completed", ids[:20])
        clock.advance(40_000)
        measure("steal", ids[20:40])
        clock.advance(1_000)
        for run_id in ids[40:]:
            store.heartbeat(run_id, OWNER, clock.now_ms())
        measure("transition_owned suspended", ids[40:])
        more = [f"c-{number:05d}" for number in range(20)]
        for run_id in more:
            store.create(run_id, STATE)
        measure("claim", more)
        measure("abandon_claim", more)
        while store.claim_next(OWNER, clock.now_ms()) is not None:
            pass
        # A worker that keeps up: the runs it takes were created moments before.
        fresh = [f"d-{number:05d}" for number in range(20)]
        for run_id in fresh:
            store.create(run_id, STATE)
        measure("claim_next", fresh)
        store.check_invariants()
    return seen


def test_each_commit_writes_its_btrees_and_at_most_two_pages_more(tmp_path: Path) -> None:
    """On a file of 3 000 runs, every single-run write's commits write pages of
    exactly the B-trees listed for it, and on average at most two pages more
    than there are B-trees in its list."""
    seen = pages_per_commit(tmp_path / "pages.db")
    report = {name: (sorted(touched), round(pages, 2)) for name, (touched, pages) in seen.items()}
    assert set(seen) - {"claim_next backlog"} == set(MUST_TOUCH), report
    for name, (touched, pages) in seen.items():
        listed = MUST_TOUCH[name.removesuffix(" backlog")]
        assert touched == listed, (name, report)
        assert pages <= len(listed) + 2, (name, report)


def test_the_page_check_sees_the_status_index_before_2016(tmp_path: Path) -> None:
    """With the one status index of the schema before migration 2016 planted
    back, ``claim_next`` writes more than two pages over its B-trees on the
    same file: the run's entry moves inside that index, from the pending
    stretch to the running one, packed full in the tree's middle."""
    names = [_migrations.status_index(status) for status in _migrations.STATUSES]
    plant = "".join(f"DROP INDEX {name};\n" for name in names) + (
        "CREATE INDEX flows_runs_status_listing_idx "
        "ON flows_runs (status, created_at_ms, run_id);\n"
    )
    seen = pages_per_commit(tmp_path / "planted.db", plant=plant)
    over = {
        name: round(pages - len(touched), 2)
        for name, (touched, pages) in seen.items()
        if pages > len(touched) + 2
    }
    assert {"claim_next", "claim_next backlog"} <= set(over), (over, seen)


def test_the_page_check_sees_an_index_a_write_did_not_need(tmp_path: Path) -> None:
    """A planted index on the heartbeat column: every heartbeat then writes one
    more B-tree than the list allows, and the check above would name it."""
    path = tmp_path / "planted.db"
    clock = ManualClock(1_000_000)
    with runstore.open(path, clock=clock) as store:
        connection = store._connection
        connection.execute("PRAGMA wal_autocheckpoint = 0")
        connection.execute("CREATE INDEX planted_heartbeat_idx ON flows_runs (heartbeat_at_ms)")
        store.create("run", STATE)
        store.claim_and_own("run", PENDING, OWNER, clock.now_ms())
        reader = WalReader(path)
        reader.skip()
        clock.advance(1_000)
        store.heartbeat("run", OWNER, clock.now_ms())
        touched = btrees(connection, reader.take()) - {_HEADER}
    assert touched != MUST_TOUCH["heartbeat"]
    assert touched - MUST_TOUCH["heartbeat"] == {"planted_heartbeat_idx"}
