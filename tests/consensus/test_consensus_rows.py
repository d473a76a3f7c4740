"""``run_ownership(tx)`` yields each owned or claimed run row's ownership.

It is the public way for a strategy's ``on_open`` to read the rows: one
``RunOwnership`` per ``running`` run or run with a pending claim, in run id
order, read inside the caller's transaction with the SQL of ``tx.dialect``
(SQLite when the transaction has none). ``RunOwnership.lease`` is the lease the
rows imply by the lease-backfill rule, which agrees with what ``SqlConsensus``
holds for the same runs except for the grant time (read back as the
heartbeat). A row that breaks the schema's rules is refused without quoting
its values; an unknown dialect and a transaction without a database are
refused too.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

import runstore
from runstore import (
    Activated,
    Claimed,
    LivenessEvidence,
    ManualClock,
    OwnerId,
    Transitioned,
)
from runstore.consensus import (
    ConsensusError,
    Lease,
    LocalConsensus,
    RunOwnership,
    Transaction,
    run_ownership,
)
from runstore.model import model_transaction

from ._consensus_tx import FakeTransaction, backfill_connection

A = OwnerId("host-a", 1, "nonce-a")
B = OwnerId("host-b", 2, "nonce-b")
C = OwnerId("host-c", 3, "nonce-c")


def populate(store: runstore.RunStore, clock: ManualClock) -> None:
    """Runs in every ownership situation a row can be in."""
    for run_id in ("claimed", "done", "idle", "owned", "paused", "stolen"):
        store.create(run_id, "{}")
    assert isinstance(store.claim("claimed", store.get("claimed"), C, 700), Claimed)
    for run_id in ("done", "owned", "paused", "stolen"):
        assert store.claim_and_own(run_id, store.get(run_id), A, 1_000) == Activated()
    assert store.transition_owned("done", A, "completed") == Transitioned()
    assert store.transition_owned("paused", A, "suspended") == Transitioned()
    clock.set(5_000)
    assert store.heartbeat("owned", A, 5_000) == runstore.Updated()
    clock.set(40_000)
    evidence = LivenessEvidence(A, 40_000, "cross-host-unreachable-stale")
    assert isinstance(store.steal("stolen", store.get("stolen"), B, 40_000, evidence), Claimed)


class Recording(LocalConsensus):
    """LocalConsensus that keeps what ``run_ownership`` told its ``on_open``."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[RunOwnership] = []

    def on_open(self, tx: Transaction) -> None:
        self.seen = list(run_ownership(tx))
        super().on_open(tx)


def test_a_strategy_sees_every_owned_or_claimed_row_when_a_store_opens(tmp_path: Path) -> None:
    """On reopen, ``on_open`` gets the running runs and the claimed ones, in
    run id order, with the rows' owner, heartbeat, claim and claim time."""
    clock = ManualClock(0)
    path = tmp_path / "runs.db"
    with runstore.open(path, clock=clock) as store:
        populate(store, clock)
        rows = {run_id: store.get(run_id) for run_id in ("claimed", "owned", "stolen")}
    strategy = Recording()
    with runstore.open(path, clock=clock, consensus=strategy):
        pass
    assert strategy.seen == [
        RunOwnership("claimed", "pending", None, None, C, 700),
        RunOwnership("owned", "running", A, rows["owned"].heartbeat_at_ms, None, None),
        RunOwnership("stolen", "running", A, rows["stolen"].heartbeat_at_ms, B, 40_000),
    ]


def test_the_lease_is_what_sql_consensus_holds_with_the_grant_read_back(tmp_path: Path) -> None:
    """``RunOwnership.lease`` equals SqlConsensus's lease for the same run, but
    for the grant time, which the rows do not keep: it is the heartbeat."""
    clock = ManualClock(0)
    with runstore.open(tmp_path / "runs.db", clock=clock) as store:
        populate(store, clock)
        held = {lease.run_id: lease for lease in store.state().leases}
        seen = {row.run_id: row.lease for row in store._write("read", run_ownership)}
    assert set(seen) == set(held) == {"claimed", "owned", "stolen"}
    for run_id, lease in seen.items():
        assert lease.granted_at_ms == lease.heartbeat_at_ms
        assert lease == Lease(
            run_id,
            held[run_id].owner,
            held[run_id].heartbeat_at_ms,
            held[run_id].heartbeat_at_ms,
            held[run_id].claim,
            held[run_id].claimed_at_ms,
        )
    assert held["owned"].granted_at_ms != seen["owned"].granted_at_ms  # 1 000 and 5 000


def test_a_local_consensus_reopened_holds_the_leases_the_rows_imply(tmp_path: Path) -> None:
    """The round trip ``on_open`` is for: a fresh LocalConsensus on the reopened
    file fences the owner, refuses a second claim and lets the claimant activate."""
    clock = ManualClock(0)
    path = tmp_path / "runs.db"
    with runstore.open(path, clock=clock) as store:
        populate(store, clock)
    with runstore.open(path, clock=clock, consensus=LocalConsensus()) as store:
        assert store.heartbeat("owned", A, 41_000) == runstore.Updated()
        assert store.heartbeat("owned", B, 41_000) == runstore.FenceLost()
        assert store.claim("claimed", store.get("claimed"), B, 41_000) == runstore.AlreadyClaimed()
        assert store.activate("claimed", C, 700, store.get("claimed")) == Activated()
        store.check_invariants()


def test_the_query_runs_at_the_call(tmp_path: Path) -> None:
    """The answer is the rows when ``run_ownership`` was called: iterating it
    later, after a write in the same transaction, changes nothing."""
    connection = backfill_connection(
        [("r", "running", "host-a", 1, "nonce-a", 500, None, None, None, None)]
    )
    with FakeTransaction(connection) as tx:
        answer = run_ownership(tx)
        connection.execute("DELETE FROM flows_runs")
        assert [row.run_id for row in answer] == ["r"]


def test_rows_that_own_or_claim_nothing_are_not_yielded() -> None:
    """Pending, suspended and settled rows without a claim are left out."""
    connection = backfill_connection(
        [
            ("idle", "pending", None, None, None, None, None, None, None, None),
            ("paused", "suspended", None, None, None, None, None, None, None, None),
            ("done", "completed", None, None, None, None, None, None, None, None),
            ("z", "suspended", None, None, None, None, "host-c", 3, "nonce-c", 9),
        ]
    )
    with FakeTransaction(connection) as tx:
        assert list(run_ownership(tx)) == [RunOwnership("z", "suspended", None, None, C, 9)]


BROKEN_ROWS = {
    "owner": ("r", "running", "host-a", "SEKRIT-pid", "nonce-a", 500, None, None, None, None),
    "claim": ("r", "pending", None, None, None, None, "host-c", None, "SEKRIT-nonce", 9),
    "claimed_at_ms": ("r", "pending", None, None, None, None, "host-c", 3, "nonce-c", "SEKRIT"),
    "status": ("r", "SEKRIT-status", None, None, None, None, "host-c", 3, "nonce-c", 9),
    "claim time": ("r", "pending", None, None, None, None, "host-c", 3, "nonce-c", None),
}


@pytest.mark.parametrize("broken", sorted(BROKEN_ROWS))
def test_a_row_that_breaks_the_schema_is_refused_without_its_values(broken: str) -> None:
    """A partial identity, a non-integer stamp, an unknown status or a claim
    without its time: ``persistence_failed``, naming no value."""
    connection = backfill_connection([BROKEN_ROWS[broken]])
    with FakeTransaction(connection) as tx, pytest.raises(ConsensusError) as raised:
        run_ownership(tx)
    assert raised.value.code == "persistence_failed"
    assert "SEKRIT" not in str(raised.value)


class WithDialect(FakeTransaction):
    def __init__(self, connection: sqlite3.Connection, dialect: Any) -> None:
        super().__init__(connection)
        self.dialect = dialect


def test_the_dialect_chooses_the_query() -> None:
    """``dialect="sqlite"`` reads as a transaction without one does; an unknown
    dialect is refused before anything is read."""
    rows = [("r", "running", "host-a", 1, "nonce-a", 500, None, None, None, None)]
    expected = [RunOwnership("r", "running", A, 500, None, None)]
    with WithDialect(backfill_connection(rows), "sqlite") as tx:
        assert list(run_ownership(tx)) == expected
    for dialect in ("oracle", None, 3):
        with WithDialect(backfill_connection(rows), dialect) as tx:
            with pytest.raises(ConsensusError, match="dialect") as raised:
                run_ownership(tx)
            assert raised.value.code == "persistence_failed"


def test_a_transaction_without_a_database_raises() -> None:
    """The model's transaction has no connection: ``RuntimeError``."""
    with model_transaction() as tx, pytest.raises(RuntimeError):
        run_ownership(tx)
