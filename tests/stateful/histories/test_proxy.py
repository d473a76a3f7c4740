"""Lost acknowledgements aimed at commits, against a real PostgreSQL server:
the proxy relays a store's session, cuts it after the message that commits
(a COMMIT on the general path, the one-statement call on the one-round-trip
path) and before the answer, and the store reports the outcome unknown,
never done, whether the write committed or not; reads are never aimed at,
and the recorded history, with its unknown operation, still checks."""

from __future__ import annotations

import random
import time

import psycopg
import pytest

import runstore
from runstore import Activated, ManualClock, OwnerId, PersistenceFailedError
from runstore.stateful import HistoryRecorder, RecordingClock, check_history
from runstore.stateful._histories._proxy import CommitCutter, ends_transaction, writes

from ..._postgres import database_url

ME = OwnerId("host-1", 1, "n1")


def owner_of(url: str, run_id: str) -> str | None:
    """The run's owner nonce, read straight from the server (not through the proxy)."""
    with psycopg.connect(url, autocommit=True) as connection:
        row = connection.execute(
            "SELECT owner_nonce FROM flows_runs WHERE run_id = %s", (run_id,)
        ).fetchone()
    return None if row is None else row[0]


def wait_gone(url: str, pid: int) -> None:
    """Wait until the server's session ``pid`` has ended (a cut at once may
    leave the server still committing for a moment)."""
    with psycopg.connect(url, autocommit=True) as connection:
        for _ in range(3000):
            query = "SELECT 1 FROM pg_stat_activity WHERE pid = %s"
            if connection.execute(query, (pid,)).fetchone() is None:
                return
            time.sleep(0.01)
    raise AssertionError("the cut session did not end")


def test_what_commits() -> None:
    assert ends_transaction(" commit")
    assert ends_transaction("END;")
    assert not ends_transaction("SELECT 1")
    assert writes("UPDATE flows_runs SET a = 1")
    assert writes("SELECT flows_op_claim_and_own($1::text)")
    assert writes("SELECT * FROM flows_op_claim_next_once($1::text)")
    assert not writes("SELECT run_id FROM flows_runs WHERE run_id = $1")
    assert not writes("BEGIN")


@pytest.mark.parametrize("fast_path", [False, True], ids=["general-path", "one-round-trip"])
@pytest.mark.parametrize("wait_chance", [1.0, 0.0], ids=["after-answer", "at-once"])
def test_a_write_whose_answer_is_cut_is_outcome_unknown(
    fast_path: bool, wait_chance: float
) -> None:
    url = database_url()
    with CommitCutter(url, random.Random(3), wait_chance=wait_chance) as cutter:
        clock = ManualClock(1_000)
        store = runstore.open(cutter.url, clock=clock, fast_path=fast_path)
        try:
            store.create("r1", "{}")
            snapshot = store.get("r1").snapshot
            cutter.arm()
            store.get("r1")  # a read does not commit: not aimed at
            assert cutter.armed
            assert cutter.cuts == 0
            pid = store._tm.live().info.backend_pid
            with pytest.raises(PersistenceFailedError) as caught:
                store.claim_and_own("r1", snapshot, ME, 1_000)
            assert caught.value.outcome_unknown
            assert cutter.cuts == 1
            assert not cutter.armed
            wait_gone(url, pid)
            committed = owner_of(url, "r1") == ME.nonce
            if wait_chance == 1.0:
                assert committed  # the server answered before the cut
            # The store goes on: a new session through the proxy.
            row = store.get("r1")
            assert (row.owner == ME) is committed
        finally:
            store.close()
    assert cutter.relayed >= 2


def test_the_history_of_a_cut_write_still_checks() -> None:
    url = database_url()
    recorder = HistoryRecorder()
    with CommitCutter(url, random.Random(4), wait_chance=1.0) as cutter:
        store = recorder.record(
            runstore.open(cutter.url, clock=RecordingClock(ManualClock(1_000)), fast_path=False)
        )
        try:
            store.create("r1", "{}")
            snapshot = store.get("r1").snapshot
            cutter.arm()
            with pytest.raises(PersistenceFailedError):
                store.claim_and_own("r1", snapshot, ME, 1_000)
            assert store.get("r1").owner == ME
            assert type(store.heartbeat("r1", ME, 1_001)).__name__ == "Updated"
        finally:
            store.close()
    operations = recorder.operations()
    assert [op.unknown for op in operations] == [False, False, True, False, False]
    verdict = check_history(operations)
    assert verdict.ok, verdict.summary()


def test_a_store_that_replays_a_lost_commit_is_seen() -> None:
    """The zoo's store that replays a settle whose answer was lost answers
    ``FenceLost`` for the settle it made: the history fails."""
    from tests.zoo.race_pg_replays_lost_ack import factory

    url = database_url()
    recorder = HistoryRecorder()
    with CommitCutter(url, random.Random(5), wait_chance=1.0) as cutter:
        store = recorder.record(factory(RecordingClock(ManualClock(1_000)), cutter.url))
        try:
            store.create("r1", "{}")
            snapshot = store.get("r1").snapshot
            assert type(store.claim_and_own("r1", snapshot, ME, 1_000)) is Activated
            cutter.arm()
            outcome = store.transition_owned("r1", ME, "completed", '{"done": 1}')
            assert type(outcome).__name__ == "FenceLost"
            assert cutter.cuts == 1
            assert store.get("r1").status == "completed"
        finally:
            store.close()
    assert check_history(recorder.operations()).status == "violation"


def test_torture_refuses_lost_acks_without_a_postgres_url(tmp_path, capsys) -> None:
    from runstore.stateful._campaigns._torture import main

    assert main(["--db", str(tmp_path / "db"), "--lost-acks", "0.5", "--quiet"]) == 2
    assert "--lost-acks" in capsys.readouterr().err
    assert not (tmp_path / "db").exists()
