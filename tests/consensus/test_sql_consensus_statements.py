"""``SqlConsensus`` runs the lease statements the transaction hands it.

Our stores' transactions carry their backend's statements
(``tx.lease_queries``), as a SQL core is handed its dialect, so the strategy
imports no backend. A transaction that carries none gets the statements its
backend registered for ``tx.dialect`` (SQLite's when it names none); a
dialect no backend registered is refused with
``ConsensusError("persistence_failed")`` before anything is read or written.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

import pytest

import runstore
from runstore import LivenessEvidence, ManualClock, OwnerId
from runstore.consensus import ConsensusError, Granted, Lease, Rejected, SqlConsensus
from runstore.sqlite import _lease_queries, _migrations

from ._consensus_tx import FakeTransaction

A = OwnerId("host-a", 1, "nonce-a")
B = OwnerId("host-b", 2, "nonce-b")


class WithStatements(FakeTransaction):
    """A test's transaction that hands over SQLite's lease statements."""

    lease_queries = _lease_queries


@pytest.fixture
def connection() -> Iterator[sqlite3.Connection]:
    """An in-memory database with the whole schema (autocommit)."""
    connection = sqlite3.connect(":memory:", isolation_level=None)
    _migrations.apply(connection)
    yield connection
    connection.close()


def _leases(connection: sqlite3.Connection) -> list[tuple[object, ...]]:
    return connection.execute("SELECT * FROM flows_consensus_leases").fetchall()


class OtherDialect(FakeTransaction):
    """A transaction of a dialect no backend registered, with no statements."""

    dialect = "mysql"


class NamesSqlite(FakeTransaction):
    """Someone else's store's transaction: a SQLite connection and its dialect."""

    dialect = "sqlite"


def test_a_dialect_nobody_registered_is_refused_before_any_sql(
    connection: sqlite3.Connection,
) -> None:
    """No ``lease_queries`` and an unknown dialect: every method that would run
    SQL raises ``persistence_failed`` and the lease table is untouched."""
    strategy = SqlConsensus()
    calls = {
        "claim": lambda tx: strategy.claim(tx, "r", A, 1),
        "claim_and_activate": lambda tx: strategy.claim_and_activate(tx, "r", A, 1),
        "activate": lambda tx: strategy.activate(tx, "r", A, 1, 1),
        "heartbeat": lambda tx: strategy.heartbeat(tx, "r", A, 1),
        "reconfirm": lambda tx: strategy.reconfirm(tx, "r", A, 1),
        "heartbeat_many": lambda tx: strategy.heartbeat_many(tx, ["r"], A, 1),
        "release_claim": lambda tx: strategy.release_claim(tx, "r", A, 1),
        "release_ownership": lambda tx: strategy.release_ownership(tx, "r", A),
        "guard": lambda tx: strategy.guard(tx, "r", A),
        "lease": lambda tx: strategy.lease(tx, "r"),
        "leases": lambda tx: strategy.leases(tx),
    }
    for name, call in calls.items():
        with OtherDialect(connection) as tx, pytest.raises(ConsensusError) as raised:
            call(tx)
        assert raised.value.code == "persistence_failed", name
        assert "lease statements" in str(raised.value), name
    assert _leases(connection) == []


def test_evidence_is_judged_before_the_statements_are_asked_for(
    connection: sqlite3.Connection,
) -> None:
    """``steal`` with evidence about another owner answers ``evidence_invalid``
    without SQL, statements or not."""
    evidence = LivenessEvidence(B, 40_000, "cross-host-unreachable-stale")
    with OtherDialect(connection) as tx:
        assert SqlConsensus().steal(tx, "r", B, 40_000, evidence) == Rejected("evidence_invalid")


@pytest.mark.parametrize("transaction", [WithStatements, NamesSqlite, FakeTransaction])
def test_a_transaction_with_sqlite_statements_or_dialect_works(
    connection: sqlite3.Connection, transaction: type[FakeTransaction]
) -> None:
    """A transaction carrying SQLite's statements, or naming the ``sqlite``
    dialect, or naming none (the seam before dialects), claims, activates
    and reads the lease back, as a store's transaction does."""
    strategy = SqlConsensus()
    with transaction(connection) as tx:
        assert strategy.claim(tx, "r", A, 1_000) == Granted(1_000)
        assert strategy.claim(tx, "r", B, 1_001) == Rejected("already_claimed")
        strategy.activate(tx, "r", A, 1_000, 1_002)
        assert strategy.lease(tx, "r") == Lease("r", A, 1_000, 1_002, None, None)
        strategy.guard(tx, "r", A)


def test_the_sqlite_store_hands_its_statements_with_each_transaction() -> None:
    """The SQLite store's transactions carry ``runstore.sqlite._lease_queries``."""
    seen: list[object] = []
    with runstore.open(":memory:", clock=ManualClock(0)) as store:
        store._write("probe", lambda tx: seen.append(tx.lease_queries))
    assert seen == [_lease_queries]
