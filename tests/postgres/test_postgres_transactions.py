"""The PostgreSQL transaction manager: replays, lost connections, commits of
unknown outcome, aborted transactions, savepoints and the fault seam.

Serialization failures (40001) and deadlocks (40P01) replay the whole
operation; so does a connection lost before ``COMMIT`` was sent (the store
reconnects first). A connection lost after ``COMMIT`` was sent is never
replayed: the operation raises ``persistence_failed`` with
``cause["outcome"] == "unknown"``. A transaction an error aborted is never
reported as committed, even when the strategy swallowed the error. Errors
carry SQLSTATEs, never the server's text, and no exception chain.
"""

from __future__ import annotations

import contextlib
from typing import Any

import pytest

from runstore import Activated, ManualClock, OwnerId, RunSnapshot, RunStoreError, Updated
from runstore.consensus import Granted, SqlConsensus
from runstore.sqlite import Fault, FaultPlan, RetryPolicy

from .. import _postgres

postgres = pytest.importorskip("runstore.postgres")
psycopg = pytest.importorskip("psycopg")

OWNER = OwnerId("host-a", 1, "nonce-a")
PENDING = RunSnapshot("pending", None, None)


class Scripted(SqlConsensus):
    """``SqlConsensus`` whose ``claim`` first runs the scripted statements,
    one per call, while any are left."""

    def __init__(self, *statements: str) -> None:
        self.script = list(statements)
        self.calls = 0

    def claim(self, tx: Any, run_id: str, claimant: OwnerId, now_ms: int) -> Any:
        self.calls += 1
        if self.script:
            tx.connection.execute(self.script.pop(0))
        return super().claim(tx, run_id, claimant, now_ms)


def _raise(state: str) -> str:
    return f"DO $$ BEGIN RAISE EXCEPTION 'scripted' USING ERRCODE = '{state}'; END $$"


SUICIDE = "SELECT pg_terminate_backend(pg_backend_pid())"


@pytest.fixture
def url() -> str:
    return _postgres.database_url()


def _open(url: str, consensus: Any = None) -> Any:
    return postgres.open(url, clock=ManualClock(0), consensus=consensus)


@pytest.mark.parametrize("state", ["40001", "40P01"])
def test_serialization_failures_and_deadlocks_are_replayed(url: str, state: str) -> None:
    strategy = Scripted(_raise(state), _raise(state))
    with _open(url, strategy) as store:
        store.create("r", "{}")
        assert store.claim_and_own("r", PENDING, OWNER, 0) == Activated()
        assert strategy.calls == 3
        assert len(store.ownership_facts("r")) == 2
        store.check_invariants()


def test_a_transient_failure_that_lasts_exhausts_the_budget(url: str) -> None:
    strategy = Scripted(*[_raise("40001")] * 10)
    with _open(url, strategy) as store:
        store._retry_policy = RetryPolicy(max_attempts=3)
        store.create("r", "{}")
        before = store.state()
        with pytest.raises(RunStoreError) as caught:
            store.claim_and_own("r", PENDING, OWNER, 0)
        assert caught.value.code == "persistence_failed"
        assert caught.value.cause["attempts"] == 3
        assert caught.value.cause["database_code"] == "busy"
        assert caught.value.cause["reason"] == "serialization-failure"
        assert caught.value.outcome_unknown is False
        assert caught.value.__cause__ is None
        assert caught.value.__context__ is None
        assert store.state() == before


def test_a_lasting_failure_is_not_replayed(url: str) -> None:
    strategy = Scripted(_raise("XX000"))
    with _open(url, strategy) as store:
        store.create("r", "{}")
        with pytest.raises(RunStoreError) as caught:
            store.claim_and_own("r", PENDING, OWNER, 0)
        assert caught.value.code == "persistence_failed"
        assert caught.value.cause["sqlstate"] == "XX000"
        assert "scripted" not in caught.value.message
        assert strategy.calls == 1


def test_a_connection_lost_before_commit_is_replaced_and_replayed(url: str) -> None:
    strategy = Scripted(SUICIDE)
    with _open(url, strategy) as store:
        store.create("r", "{}")
        assert store.claim_and_own("r", PENDING, OWNER, 0) == Activated()
        assert strategy.calls == 2
        store.check_invariants()


_DIE_AT_COMMIT = """
CREATE FUNCTION die_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_terminate_backend(pg_backend_pid());
  PERFORM pg_sleep(5);
  RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER die_at_commit AFTER UPDATE ON flows_runs
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
  WHEN (NEW.cancel_requested_at_ms = 666) EXECUTE FUNCTION die_at_commit();
"""


def test_a_connection_lost_after_commit_was_sent_has_an_unknown_outcome(url: str) -> None:
    """Never replayed blindly: persistence_failed, outcome unknown; the next
    operation reconnects (here the server had not committed)."""
    with psycopg.connect(url, autocommit=True) as raw:
        raw.execute(_DIE_AT_COMMIT)
    with _open(url) as store:
        store.create("r", "{}")
        before = store.state()
        with pytest.raises(RunStoreError) as caught:
            store.request_cancel("r", 666)
        assert caught.value.code == "persistence_failed"
        assert caught.value.cause["outcome"] == "unknown"
        assert caught.value.outcome_unknown is True
        assert "outcome unknown" in caught.value.message
        assert caught.value.cause["database_code"] == "connection"
        assert "attempts" not in caught.value.cause
        assert store.state() == before
        assert store.request_cancel("r", 7).__class__.__name__ == "CancelRequested"


class Swallowing(SqlConsensus):
    """A strategy that hides a failed statement and grants anyway."""

    def claim(self, tx: Any, run_id: str, claimant: OwnerId, now_ms: int) -> Any:
        with contextlib.suppress(psycopg.Error):
            tx.connection.execute("SELECT 1 / 0")
        return Granted(now_ms)


def test_an_aborted_transaction_is_never_reported_committed(url: str) -> None:
    with _open(url, Swallowing()) as store:
        store.create("r", "{}")
        before = store.state()
        with pytest.raises(RunStoreError) as caught:
            store.claim("r", PENDING, OWNER, 0)
        assert caught.value.code == "persistence_failed"
        assert store.state() == before


def test_a_nested_write_is_a_savepoint(url: str) -> None:
    """An inner write that fails rolls back alone; the outer one commits."""
    with _open(url) as store:
        store.create("r", "{}")

        def outer(tx: Any) -> str:
            try:
                store.create("r", "{}")  # duplicate: constraint, inside the outer write
            except RunStoreError as error:
                code = error.code
            tx.connection.execute(
                "UPDATE flows_runs SET cancel_requested_at_ms = 3 WHERE run_id = $1", ("r",)
            )
            return code

        assert store._write("outer", outer) == "constraint"
        assert store.get("r").cancel_requested_at_ms == 3
        store.check_invariants()


@pytest.mark.parametrize(
    "fault",
    [Fault("statement", 0), Fault("statement", 3), Fault("strategy", 0), Fault("commit")],
    ids=["first-statement", "fourth-statement", "strategy", "commit"],
)
def test_a_lasting_fault_leaves_no_trace(url: str, fault: Fault) -> None:
    with _open(url) as store:
        store.create("r", "{}")
        before = store.state()
        plan = FaultPlan(fault)
        store._install_faults(plan)
        try:
            with pytest.raises(RunStoreError) as caught:
                store.claim_and_own("r", PENDING, OWNER, 0)
        finally:
            store._install_faults(None)
        assert plan.fired == [fault]
        assert caught.value.code == "persistence_failed"
        assert caught.value.cause["database_code"] == "io"
        assert store.state() == before


def test_transient_faults_within_the_budget_do_not_change_the_outcome(url: str) -> None:
    with _open(url) as store:
        store.create("r", "{}")
        assert store.claim_and_own("r", PENDING, OWNER, 0) == Activated()
        plan = FaultPlan(Fault("commit", transient=True), Fault("statement", 1, transient=True))
        store._install_faults(plan)
        try:
            assert store.heartbeat("r", OWNER, 5) == Updated()
        finally:
            store._install_faults(None)
        assert len(plan.fired) == 2
        assert store.get("r").heartbeat_at_ms == 5


@pytest.fixture
def admin() -> Any:
    return _postgres.require_server()


def test_a_failure_in_the_middle_of_a_snapshot_read_leaves_no_transaction(
    url: str, admin: Any
) -> None:
    """state() on a dropped connection reconnects and reads."""
    with _open(url) as store:
        store.create("r", "{}")
        admin.terminate_connections(url)
        assert [row.run_id for row in store.state().rows] == ["r"]
        store.check_invariants()
