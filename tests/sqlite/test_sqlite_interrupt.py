"""interrupt(): another thread aborts a store call that would not return."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

import runstore
from runstore import ManualClock, OwnerId, RunStoreError, Updated

RUNAWAY = (
    "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) "
    "SELECT count(*) FROM n WHERE i < 0"
)


def test_interrupt_aborts_a_running_statement_with_persistence_failed(tmp_path: Path) -> None:
    """A statement that never ends is aborted from another thread; the call
    raises persistence_failed and the store keeps working afterwards."""
    clock = ManualClock(0)
    with runstore.open(tmp_path / "runs.db", clock=clock) as store:
        store.create("r", "{}")
        owner = OwnerId("h", 1, "n")
        store.claim_and_own("r", store.get("r").snapshot, owner, 0)
        errors: list[BaseException] = []
        started = threading.Event()

        def runaway() -> None:
            def body(connection: object) -> object:
                started.set()
                return connection.execute(RUNAWAY).fetchone()  # type: ignore[attr-defined]

            try:
                store._write("runaway", lambda tx: body(tx.connection))
            except BaseException as error:
                errors.append(error)

        worker = threading.Thread(target=runaway, daemon=True)
        worker.start()
        assert started.wait(5)
        time.sleep(0.05)  # let the statement get going; not lease timing
        store.interrupt()
        worker.join(5)
        assert not worker.is_alive()
        assert len(errors) == 1
        error = errors[0]
        assert isinstance(error, RunStoreError)
        assert error.code == "persistence_failed"
        assert store.heartbeat("r", owner, 0) == Updated()
        store.check_invariants()


def test_interrupt_on_an_idle_or_closed_store_does_nothing(tmp_path: Path) -> None:
    """No statement running, or the store closed: interrupt is a no-op."""
    store = runstore.open(tmp_path / "runs.db", clock=ManualClock(0))
    store.interrupt()
    store.create("r", "{}")
    store.close()
    store.interrupt()
    with pytest.raises(RunStoreError):
        store.get("r")
