"""Threads and processes on one store or one file.

One store object is shared by a worker thread and its heartbeat thread; two
threads racing for one run see exactly one winner; two stores (two
connections) on one file are serialized by SQLite's write lock, and a writer
that finds the file locked waits (inside the retry budget) instead of failing;
two real processes racing for a run see exactly one winner, and every fenced
write of the loser is refused.
"""

from __future__ import annotations

import multiprocessing
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import runstore
from runstore import (
    Activated,
    AlreadyClaimed,
    Claimed,
    FenceLost,
    HeartbeatFresh,
    ManualClock,
    OwnerId,
    RunStoreError,
    SnapshotChanged,
    Transitioned,
    Updated,
)
from runstore.sqlite import RetryPolicy, SqliteRunStore

from .._sqlite import OTHER, OWNER, PENDING


def _race(count: int, fn: Callable[[int], Any]) -> list[Any]:
    """Run ``fn(i)`` on ``count`` threads released together; results in order."""
    barrier = threading.Barrier(count)
    results: list[Any] = [None] * count

    def run(index: int) -> None:
        barrier.wait()
        try:
            results[index] = fn(index)
        except BaseException as error:  # reported through the results
            results[index] = error

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return results


@pytest.mark.parametrize("where", ["memory", "file"])
def test_two_threads_claiming_one_run_on_one_store_see_one_winner(
    where: str, tmp_path: Path, clock: ManualClock
) -> None:
    """Over many runs, exactly one of two racing claims wins each time."""
    path = ":memory:" if where == "memory" else tmp_path / "runs.db"
    with runstore.open(path, clock=clock) as store:
        claimants = [OWNER, OTHER]
        for index in range(30):
            store.create(f"run-{index}", "{}")
            results = _race(
                2, lambda i, index=index: store.claim(f"run-{index}", PENDING, claimants[i], 0)
            )
            assert sorted(map(repr, results)) == sorted(
                [repr(Claimed(0)), repr(AlreadyClaimed())]
            ), results
        store.check_invariants()


def test_two_stores_on_one_file_race_claim_and_own_with_one_winner(
    tmp_path: Path, clock: ManualClock
) -> None:
    """Two connections racing claim_and_own: one Activated, the other a loss."""
    path = tmp_path / "runs.db"
    with runstore.open(path, clock=clock) as a, runstore.open(path, clock=clock) as b:
        stores = [a, b]
        owners = [OWNER, OTHER]
        for index in range(30):
            a.create(f"run-{index}", "{}")
            results = _race(
                2,
                lambda i, index=index: stores[i].claim_and_own(
                    f"run-{index}", PENDING, owners[i], 0
                ),
            )
            wins = [result for result in results if result == Activated()]
            assert len(wins) == 1, results
            loser = results[1 - results.index(Activated())]
            assert loser in (HeartbeatFresh(), SnapshotChanged()), results
        a.check_invariants()


def test_a_worker_and_a_heartbeat_thread_share_one_store(
    tmp_path: Path, clock: ManualClock
) -> None:
    """Heartbeats and state writes interleave on one store without errors; the
    heartbeat ends at its highest stamp and the state at the last write."""
    with runstore.open(tmp_path / "runs.db", clock=clock) as store:
        store.create("run", "{}")
        assert store.claim_and_own("run", PENDING, OWNER, 0) == Activated()
        errors: list[BaseException] = []

        def heartbeats() -> None:
            try:
                for now in range(1, 301):
                    assert store.heartbeat("run", OWNER, now) == Updated()
            except BaseException as error:  # reported below
                errors.append(error)

        thread = threading.Thread(target=heartbeats)
        thread.start()
        for step in range(300):
            state = f'{{"step":{step}}}'
            assert store.transition_owned("run", OWNER, "running", state) == Transitioned()
        thread.join(timeout=60)
        assert errors == []
        row = store.get("run")
        assert row.heartbeat_at_ms == 300
        assert row.state_json == '{"step":299}'
        store.check_invariants()


def test_a_writer_waits_out_a_short_lock_held_by_another_connection(
    tmp_path: Path, clock: ManualClock
) -> None:
    """While another connection holds the write lock briefly, a heartbeat
    retries and succeeds instead of failing."""
    path = tmp_path / "runs.db"
    with runstore.open(path, clock=clock) as holder, runstore.open(path, clock=clock) as writer:
        holder.create("run", "{}")
        assert holder.claim_and_own("run", PENDING, OWNER, 0) == Activated()
        locked = threading.Event()
        release = threading.Event()

        def hold(_tx: Any) -> None:
            locked.set()
            release.wait(timeout=10)

        thread = threading.Thread(target=lambda: holder._write("hold", hold))
        thread.start()
        assert locked.wait(timeout=10)
        timer = threading.Timer(0.3, release.set)
        timer.start()
        assert writer.heartbeat("run", OWNER, 5) == Updated()
        thread.join(timeout=10)
        timer.cancel()


def test_a_lock_held_past_the_budget_is_persistence_failed(
    tmp_path: Path, clock: ManualClock
) -> None:
    """When the lock is never released within the budget the write gives up as busy."""
    path = tmp_path / "runs.db"
    with runstore.open(path, clock=clock) as holder, runstore.open(path, clock=clock) as writer:
        holder.create("run", "{}")
        writer._retry_policy = RetryPolicy(max_attempts=1000, budget_ms=300)
        locked = threading.Event()
        release = threading.Event()

        def hold(_tx: Any) -> None:
            locked.set()
            release.wait(timeout=10)

        thread = threading.Thread(target=lambda: holder._write("hold", hold))
        thread.start()
        assert locked.wait(timeout=10)
        try:
            with pytest.raises(RunStoreError) as caught:
                writer.request_cancel("run", 1)
        finally:
            release.set()
            thread.join(timeout=10)
        assert caught.value.code == "persistence_failed"
        assert caught.value.cause["database_code"] == "busy"
        assert writer.get("run").cancel_requested_at_ms is None


# -- two processes -------------------------------------------------------------------


def _contender(path: str, host: str, barrier: Any, results: Any) -> None:
    """One process: race for the run, then try every fenced write as its owner."""
    owner = OwnerId(host, 1, f"nonce-{host}")
    with runstore.open(path, clock=ManualClock(1000)) as store:
        barrier.wait()
        claimed = store.claim_and_own("run", PENDING, owner, 1000)
        barrier.wait()  # both have tried; now every fenced write
        fenced = [
            store.heartbeat("run", owner, 1001),
            store.reconfirm("run", owner, 1002),
            store.transition_owned("run", owner, "running", f'{{"by":"{host}"}}'),
        ]
        acknowledged = store.acknowledge_cancel("run", owner, 1003)
        results.put((host, repr(claimed), [repr(outcome) for outcome in fenced], acknowledged))


@pytest.mark.processes
def test_two_processes_racing_for_a_run_see_one_winner_and_a_fenced_loser(
    tmp_path: Path,
) -> None:
    """Exactly one process activates; the other's heartbeat, reconfirm and
    transition are FenceLost and its acknowledgement is refused."""
    path = str(tmp_path / "runs.db")
    with runstore.open(path, clock=ManualClock(1000)) as store:
        store.create("run", "{}")
        assert store.request_cancel("run", 500) is not None
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(2)
    results = context.Queue()
    processes = [
        context.Process(target=_contender, args=(path, host, barrier, results))
        for host in ("host-x", "host-y")
    ]
    for process in processes:
        process.start()
    answers = [results.get(timeout=60) for _ in processes]
    for process in processes:
        process.join(timeout=60)
        assert process.exitcode == 0
    by_result = {answer[1]: answer for answer in answers}
    assert repr(Activated()) in by_result, answers
    winner = by_result.pop(repr(Activated()))
    (loser,) = by_result.values()
    assert loser[1] in (repr(HeartbeatFresh()), repr(SnapshotChanged()))
    assert winner[2] == [repr(Updated()), repr(Updated()), repr(Transitioned())]
    assert winner[3] is True
    assert loser[2] == [repr(FenceLost())] * 3
    assert loser[3] is False
    with runstore.open(path, clock=ManualClock(2000)) as store:
        assert store.get("run").state_json == f'{{"by":"{winner[0]}"}}'
        store.check_invariants()


def test_the_shared_store_is_one_object(tmp_path: Path, clock: ManualClock) -> None:
    """Sanity: the store is a SqliteRunStore usable from another thread."""
    with runstore.open(tmp_path / "runs.db", clock=clock) as store:
        assert isinstance(store, SqliteRunStore)
        (result,) = _race(1, lambda _i: store.create("run", "{}"))
        assert result is None
        assert store.get("run").status == "pending"
