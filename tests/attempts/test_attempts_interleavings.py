"""Attempts interleaved with ownership changes: takeovers, settling runs, upserts.

Ported from upstream's AttemptStore Interleavings cases: an old owner's writes
after a takeover are fenced, the run settling races an attempt settling, and
upsert replaces only while the attempt is in progress and the caller still
holds the fence. The last test races real threads over one SQLite file.
"""

from __future__ import annotations

import threading
from pathlib import Path

import runstore
from runstore import ManualClock, Transitioned
from runstore.attempts import (
    AttemptPatch,
    AttemptStore,
    Conflict,
    ExistingSame,
    FenceLost,
    FinishAttempt,
    Finished,
    Inserted,
    Patched,
    Updated,
    Upserted,
)

from .test_attempts_pairs import OWNER, RIVAL, RUN, STEP, Env, env, ident, running

__all__ = ["env"]


def test_old_owner_is_fenced_on_every_write_after_a_takeover(env: Env) -> None:
    """After a stale takeover the displaced owner's put, heartbeat, finish and
    patch all answer FenceLost, and the new owner's writes succeed."""
    env.own()
    env.attempts.put(running(1, checkpoint="old-owner"), OWNER)
    env.take_over()
    assert env.attempts.put(running(2), OWNER) == FenceLost()
    assert env.attempts.heartbeat(RUN, STEP, 1, OWNER, 99, "late") == FenceLost()
    assert env.attempts.finish(FinishAttempt(RUN, STEP, 1, "failed", 99), OWNER) == FenceLost()
    assert env.attempts.patch(ident(1), AttemptPatch(outcome="late"), OWNER) == FenceLost()
    assert env.attempts.state() == (running(1, checkpoint="old-owner"),)
    # The successor continues the same attempt.
    assert env.attempts.heartbeat(RUN, STEP, 1, RIVAL, 100, "new-owner") == Updated()
    assert env.attempts.finish(FinishAttempt(RUN, STEP, 1, "succeeded", 101), RIVAL) == Finished()
    assert env.attempts.patch(ident(1), AttemptPatch(outcome=1), RIVAL) == Patched()
    assert env.attempts.put(running(2), RIVAL) == Inserted()


def test_a_restarted_owner_with_a_new_nonce_is_fenced(env: Env) -> None:
    """Re-owning with a new incarnation fences the old one, even on the same host and pid."""
    env.own()
    env.attempts.put(running(1), OWNER)
    reborn = runstore.OwnerId(OWNER.host_id, OWNER.pid, "nonce-after-restart")
    env.take_over(new_owner=reborn)
    assert env.attempts.heartbeat(RUN, STEP, 1, OWNER, 5) == FenceLost()
    assert env.attempts.heartbeat(RUN, STEP, 1, reborn, 5) == Updated()


def test_run_settled_first_leaves_the_attempt_in_progress(env: Env) -> None:
    """When the run settles before the attempt, finish and patch are FenceLost
    and the attempt stays as it was (a sweeper's concern, not the store's)."""
    env.own()
    env.attempts.put(running(1), OWNER)
    env.settle(status="completed")
    assert env.attempts.finish(FinishAttempt(RUN, STEP, 1, "succeeded", 5), OWNER) == FenceLost()
    assert env.attempts.patch(ident(1), AttemptPatch(outcome=1), OWNER) == FenceLost()
    assert env.attempts.get(ident(1)) == running(1)


def test_attempt_settled_first_then_the_run(env: Env) -> None:
    """When the attempt settles first, the run can still settle, and the attempt
    keeps its final state."""
    env.own()
    env.attempts.put(running(1), OWNER)
    assert (
        env.attempts.finish(FinishAttempt(RUN, STEP, 1, "succeeded", 5, outcome=7), OWNER)
        == Finished()
    )
    env.settle(status="completed")
    stored = env.attempts.get(ident(1))
    assert (stored.state, stored.outcome) == ("succeeded", 7)
    assert env.attempts.finish(FinishAttempt(RUN, STEP, 1, "failed", 6), OWNER) == FenceLost()


def test_a_suspended_then_resumed_run_fences_by_the_new_ownership(env: Env) -> None:
    """Suspending clears the owner; whoever owns the run next holds the fence."""
    env.own()
    env.attempts.put(running(1), OWNER)
    env.settle(status="suspended")
    assert env.attempts.heartbeat(RUN, STEP, 1, OWNER, 5) == FenceLost()
    row = env.runs.get(RUN)
    assert (
        env.runs.claim_and_own(RUN, row.snapshot, RIVAL, env.clock.now_ms()) == runstore.Activated()
    )
    assert env.attempts.heartbeat(RUN, STEP, 1, RIVAL, 6) == Updated()
    assert env.attempts.heartbeat(RUN, STEP, 1, OWNER, 7) == FenceLost()


def test_upsert_only_while_in_progress_and_still_fenced(env: Env) -> None:
    """Upsert replaces an in-progress attempt under the fence; after a takeover
    the old owner's upsert is FenceLost; once settled, upsert only compares."""
    env.own()
    attempts = env.attempt_store(put_mode="upsert")
    assert attempts.put(running(1, checkpoint=1), OWNER) == Inserted()
    assert attempts.put(running(1, checkpoint=2), OWNER) == Upserted()
    env.take_over()
    assert attempts.put(running(1, checkpoint=3), OWNER) == FenceLost()
    assert attempts.get(ident(1)).checkpoint == 2
    assert attempts.put(running(1, checkpoint=4), RIVAL) == Upserted()
    assert attempts.finish(FinishAttempt(RUN, STEP, 1, "succeeded", 9), RIVAL) == Finished()
    settled = attempts.get(ident(1))
    assert attempts.put(running(1, checkpoint=5), RIVAL) == Conflict()
    assert attempts.put(settled, RIVAL) == ExistingSame()
    assert attempts.put(settled, OWNER) == FenceLost()
    assert attempts.get(ident(1)) == settled


def test_insert_mode_never_replaces_an_in_progress_attempt(env: Env) -> None:
    """In insert mode a different put over an in-progress attempt is a Conflict."""
    env.own()
    env.attempts.put(running(1, checkpoint=1), OWNER)
    assert env.attempts.put(running(1, checkpoint=2), OWNER) == Conflict()
    assert env.attempts.get(ident(1)).checkpoint == 1


def test_heartbeat_after_takeover_does_not_move_the_successors_stamp(env: Env) -> None:
    """A displaced owner's late heartbeat neither moves the stamp nor the checkpoint."""
    env.own()
    env.attempts.put(running(1), OWNER)
    env.take_over()
    env.attempts.heartbeat(RUN, STEP, 1, RIVAL, 40_000, "successor")
    assert env.attempts.heartbeat(RUN, STEP, 1, OWNER, 90_000, "ghost") == FenceLost()
    stored = env.attempts.get(ident(1))
    assert (stored.heartbeat_at_ms, stored.checkpoint) == (40_000, "successor")


def _race_once(runs: runstore.SqliteRunStore, attempts: AttemptStore, run_id: str) -> object:
    """Finish the attempt and settle the run from two threads at once."""
    runs.create(run_id, "{}")
    runs.claim_and_own(run_id, runstore.RunSnapshot("pending", None, None), OWNER, 0)
    attempts.put(running(1, run_id=run_id), OWNER)
    start = threading.Barrier(2)
    results: dict[str, object] = {}

    def finish() -> None:
        start.wait()
        request = FinishAttempt(run_id, STEP, 1, "succeeded", 5)
        results["finish"] = attempts.finish(request, OWNER)

    def settle() -> None:
        start.wait()
        results["settle"] = runs.transition_owned(run_id, OWNER, "completed")

    threads = [threading.Thread(target=finish), threading.Thread(target=settle)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert results["settle"] == Transitioned()
    stored = attempts.get(ident(1, run_id=run_id))
    if results["finish"] == Finished():
        assert stored.state == "succeeded"
    else:
        assert results["finish"] == FenceLost()
        assert stored.state == "running"
    late = attempts.finish(FinishAttempt(run_id, STEP, 1, "failed", 6), OWNER)
    assert late == FenceLost()
    return results["finish"]


def test_threads_racing_run_settle_and_attempt_finish_agree(tmp_path: Path) -> None:
    """Over one SQLite file, an attempt finish racing the run's settle ends in
    one of the two serial orders: (Finished, settled attempt) or (FenceLost,
    attempt still running); never a finish after the run lost its owner."""
    with runstore.open(tmp_path / "race.db", clock=ManualClock(0)) as runs:
        attempts = AttemptStore(runs)
        seen = {type(_race_once(runs, attempts, f"race-{n}")).__name__ for n in range(40)}
        attempts.check_invariants()
    assert seen <= {"Finished", "FenceLost"}
