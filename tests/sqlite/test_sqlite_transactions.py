"""The transaction manager: callbacks, savepoints, classification.

``_write`` and ``_read`` are the seams the attempt store and the strategies
use; these tests pin what they promise: commit callbacks after the commit,
rollback callbacks in reverse order, a nested write as a savepoint that can
fail alone, and failures classified without a chain back to the driver.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import runstore
from runstore import ManualClock, RunStoreError
from runstore.consensus import Transaction
from runstore.sqlite import SqliteRunStore

SECRET = "sk-do-not-leak"


@pytest.fixture
def store(clock: ManualClock) -> Iterator[SqliteRunStore]:
    with runstore.open(":memory:", clock=clock) as opened:
        yield opened


def _insert(tx: Transaction, run_id: str) -> None:
    tx.connection.execute(
        "INSERT INTO flows_runs (run_id, status, created_at_ms) VALUES (?, 'pending', 0)",
        (run_id,),
    )
    tx.connection.execute(
        "INSERT INTO flows_run_state (run_id, state_json) VALUES (?, '{}')", (run_id,)
    )


def test_the_transaction_satisfies_the_strategy_protocol(store: SqliteRunStore) -> None:
    """What a strategy receives is a runstore.consensus.Transaction inside BEGIN."""
    seen: list[Any] = []
    store._write("probe", lambda tx: seen.append((tx, tx.connection.in_transaction)))
    tx, inside = seen[0]
    assert isinstance(tx, Transaction)
    assert inside is True


def test_commit_callbacks_run_after_commit_in_order(store: SqliteRunStore) -> None:
    """on_commit callbacks run once, in registration order, after the commit."""
    calls: list[str] = []

    def body(tx: Transaction) -> None:
        tx.on_commit(lambda: calls.append(f"first {tx.connection.in_transaction}"))
        tx.on_commit(lambda: calls.append("second"))
        tx.on_rollback(lambda: calls.append("never"))

    store._write("probe", body)
    assert calls == ["first False", "second"]


def test_rollback_callbacks_run_in_reverse_order(store: SqliteRunStore) -> None:
    """A failing body undoes its SQL and runs on_rollback callbacks last-first."""
    calls: list[str] = []

    def body(tx: Transaction) -> None:
        _insert(tx, "run")
        tx.on_rollback(lambda: calls.append("first"))
        tx.on_rollback(lambda: calls.append("second"))
        tx.on_commit(lambda: calls.append("never"))
        tx.connection.execute("SELECT * FROM no_such_table")

    with pytest.raises(RunStoreError) as caught:
        store._write("probe", body)
    assert caught.value.code == "persistence_failed"
    assert caught.value.method == "probe"
    assert calls == ["second", "first"]
    assert store.state().rows == ()


def test_a_nested_write_is_a_savepoint_that_can_fail_alone(store: SqliteRunStore) -> None:
    """An inner write that fails rolls back only itself; the outer one commits."""
    calls: list[str] = []

    def inner(tx: Transaction) -> None:
        _insert(tx, "inner")
        tx.on_rollback(lambda: calls.append("inner undone"))
        _insert(tx, "outer")  # duplicate: the savepoint fails

    def outer(tx: Transaction) -> str:
        _insert(tx, "outer")
        with pytest.raises(RunStoreError) as caught:
            store._write("inner", inner)
        assert caught.value.code == "constraint"
        return "done"

    assert store._write("outer", outer) == "done"
    assert [row.run_id for row in store.state().rows] == ["outer"]
    assert calls == ["inner undone"]


def test_a_nested_writes_callbacks_follow_the_outer_transaction(store: SqliteRunStore) -> None:
    """A released savepoint's callbacks wait for the outer commit or rollback."""
    calls: list[str] = []

    def inner(tx: Transaction) -> None:
        tx.on_commit(lambda: calls.append("inner committed"))
        tx.on_rollback(lambda: calls.append("inner undone"))

    def outer(tx: Transaction) -> None:
        store._write("inner", inner)
        assert calls == []
        raise ZeroDivisionError

    with pytest.raises(ZeroDivisionError):
        store._write("outer", outer)
    assert calls == ["inner undone"]


def test_a_read_inside_a_write_sees_its_changes(store: SqliteRunStore) -> None:
    """_read on the writing thread runs inside the open transaction."""

    def body(tx: Transaction) -> int:
        _insert(tx, "run")
        return store._read(
            "probe", lambda c: c.execute("SELECT count(*) FROM flows_runs").fetchone()[0]
        )

    assert store._write("probe", body) == 1


def test_failures_carry_no_driver_message_and_no_chain(store: SqliteRunStore) -> None:
    """A constraint failure quoting nothing: no chain, no bound values."""
    store.create("run", "{}")

    def body(tx: Transaction) -> None:
        tx.connection.execute(
            "INSERT INTO flows_runs (run_id, status, created_at_ms) VALUES (?, 'bogus', 0)",
            (SECRET,),
        )

    with pytest.raises(RunStoreError) as caught:
        store._write("probe", body)
    error = caught.value
    assert error.code == "constraint"
    assert error.__cause__ is None
    assert error.__context__ is None
    assert SECRET not in repr(error)
    assert "CHECK" not in str(error)
    assert error.cause["sqlite_error"] == "SQLITE_CONSTRAINT_CHECK"


def test_a_defect_in_a_body_propagates_unchanged(store: SqliteRunStore) -> None:
    """Exceptions that are not database or strategy failures are not reclassified."""

    def body(tx: Transaction) -> None:
        _insert(tx, "run")
        raise KeyError("defect")

    with pytest.raises(KeyError):
        store._write("probe", body)
    assert store.state().rows == ()


def test_a_closed_connection_is_persistence_failed(store: SqliteRunStore) -> None:
    """Reads and writes on a closed store are classified, not raw driver errors."""
    store.close()
    with pytest.raises(RunStoreError):
        store._read("probe", lambda c: c.execute("SELECT 1").fetchone())
    with pytest.raises(RunStoreError):
        store._write("probe", lambda tx: None)


@pytest.mark.parametrize("links", range(1, 9))
def test_a_strategy_failure_is_classified_by_the_database_error_behind_it(links: int) -> None:
    """The store inspects up to 8 links of a strategy error's cause chain,
    counted from its cause (upstream's depth): a constraint failure 1 to 8
    links behind a ``ConsensusError`` is ``constraint``, not ``persistence_failed``."""
    import sqlite3

    from runstore import OwnerId, RunSnapshot
    from runstore.consensus import ConsensusError, NoopConsensus

    def failure() -> ConsensusError:
        cause: BaseException = sqlite3.IntegrityError("UNIQUE constraint failed")
        for layer in range(links - 1):
            wrapper = RuntimeError(f"layer {layer}")
            wrapper.__cause__ = cause
            cause = wrapper
        error = ConsensusError("persistence_failed", "could not record the claim")
        error.__cause__ = cause
        return error

    class Failing(NoopConsensus):
        def claim(self, tx: Any, run_id: str, claimant: Any, now_ms: int) -> Any:
            raise failure()

    with runstore.open(":memory:", clock=ManualClock(0), consensus=Failing()) as store:
        store.create("r", "{}")
        with pytest.raises(RunStoreError) as caught:
            store.claim("r", RunSnapshot("pending", None, None), OwnerId("h", 1, "n"), 0)
    assert (caught.value.code, caught.value.cause["database_code"]) == ("constraint", "constraint")


def test_a_database_error_nine_links_behind_is_not_inspected() -> None:
    """Past the depth the failure is a plain ``persistence_failed``."""
    import sqlite3

    from runstore import OwnerId, RunSnapshot
    from runstore.consensus import ConsensusError, NoopConsensus

    class Failing(NoopConsensus):
        def claim(self, tx: Any, run_id: str, claimant: Any, now_ms: int) -> Any:
            cause: BaseException = sqlite3.IntegrityError("UNIQUE constraint failed")
            for layer in range(8):
                wrapper = RuntimeError(f"layer {layer}")
                wrapper.__cause__ = cause
                cause = wrapper
            error = ConsensusError("persistence_failed")
            error.__cause__ = cause
            raise error

    with runstore.open(":memory:", clock=ManualClock(0), consensus=Failing()) as store:
        store.create("r", "{}")
        with pytest.raises(RunStoreError) as caught:
            store.claim("r", RunSnapshot("pending", None, None), OwnerId("h", 1, "n"), 0)
    assert caught.value.code == "persistence_failed"
