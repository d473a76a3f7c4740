"""AttemptStore operations and their outcomes, on the model and the SQLite store.

Ported from upstream's AttemptStore cases: round trips, COALESCE on finish and
patch, the fence after an owner change, monotonic heartbeats that keep the
checkpoint, several attempts per step, Conflict and ExistingSame, RunNotFound,
settled attempts, custom in-progress states, patch semantics.
"""

from __future__ import annotations

import pytest

import runstore
from runstore import OwnerId
from runstore.attempts import (
    ABSENT,
    AttemptPatch,
    Conflict,
    ExistingSame,
    FenceLost,
    FinishAttempt,
    Finished,
    Inserted,
    NotFound,
    Patched,
    RunNotFound,
    StateChanged,
    Updated,
    Upserted,
)

from .test_attempts_pairs import OWNER, RIVAL, RUN, STEP, Env, env, ident, running

__all__ = ["env"]

STRANGER = OwnerId("host-a", 100, "another-nonce")


# -- put and get ----------------------------------------------------------------------


def test_put_then_get_round_trips_every_field(env: Env) -> None:
    """A put attempt reads back equal, with every field as written."""
    env.own()
    record = running(
        1,
        started_at_ms=1_000,
        finished_at_ms=None,
        heartbeat_at_ms=1_500,
        checkpoint={"cursor": "abc", "n": [1, 2.5, True, None]},
        error=None,
        outcome="\U0001f600 and \ufffd and \x00 inside",
        meta={"attempt": {"nested": {"deep": [[]]}}},
    )
    assert env.attempts.put(record, OWNER) == Inserted()
    stored = env.attempts.get(ident(1))
    assert stored == record
    assert stored.error is None
    assert stored.checkpoint == {"cursor": "abc", "n": [1, 2.5, True, None]}
    assert type(stored.checkpoint["n"][0]) is int
    assert type(stored.checkpoint["n"][1]) is float
    assert type(stored.checkpoint["n"][2]) is bool


def test_absent_fields_read_back_absent_and_null_reads_back_null(env: Env) -> None:
    """Absent JSON fields stay absent; JSON null is kept as a value."""
    env.own()
    env.attempts.put(running(1), OWNER)
    env.attempts.put(running(2, checkpoint=None, error=None, outcome=None, meta=None), OWNER)
    first = env.attempts.get(ident(1))
    second = env.attempts.get(ident(2))
    assert (first.checkpoint, first.error, first.outcome, first.meta) == (
        ABSENT,
        ABSENT,
        ABSENT,
        {},
    )
    assert (second.checkpoint, second.error, second.outcome, second.meta) == (None,) * 4


def test_get_of_an_unknown_attempt_is_none(env: Env) -> None:
    """get answers None for an attempt, step or run that does not exist."""
    env.own()
    env.attempts.put(running(1), OWNER)
    assert env.attempts.get(ident(2)) is None
    assert env.attempts.get(ident(1, step="other")) is None
    assert env.attempts.get(ident(1, run_id="no-such-run")) is None


def test_get_is_not_fenced(env: Env) -> None:
    """Anyone may read an attempt, also after the run settled."""
    env.own()
    env.attempts.put(running(1), OWNER)
    env.settle()
    assert env.attempts.get(ident(1)) == running(1)


def test_get_hands_out_a_copy(env: Env) -> None:
    """Mutating a returned value does not change the stored attempt."""
    env.own()
    env.attempts.put(running(1, checkpoint={"list": [1]}), OWNER)
    env.attempts.get(ident(1)).checkpoint["list"].append(2)
    assert env.attempts.get(ident(1)).checkpoint == {"list": [1]}


def test_put_detaches_the_callers_values(env: Env) -> None:
    """Mutating the caller's dict after put does not change the stored attempt."""
    env.own()
    meta: dict[str, object] = {"k": [1]}
    env.attempts.put(running(1, meta=meta), OWNER)
    meta["k"].append(2)  # type: ignore[attr-defined]
    meta["extra"] = True
    assert env.attempts.get(ident(1)).meta == {"k": [1]}


def test_several_attempts_of_one_step_and_several_steps_coexist(env: Env) -> None:
    """Attempts are keyed by run, step and number; each is stored on its own."""
    env.own()
    for number in (0, 1, 7):
        assert env.attempts.put(running(number, meta={"n": number}), OWNER) == Inserted()
    assert env.attempts.put(running(1, step="other-step"), OWNER) == Inserted()
    state = env.attempts.state()
    assert [(r.step_key_digest, r.attempt) for r in state] == [
        ("other-step", 1),
        (STEP, 0),
        (STEP, 1),
        (STEP, 7),
    ]
    assert [r.meta for r in state[1:]] == [{"n": 0}, {"n": 1}, {"n": 7}]


def test_repeating_the_same_put_answers_existing_same(env: Env) -> None:
    """A second put of an equal attempt answers ExistingSame and changes nothing."""
    env.own()
    record = running(1, checkpoint={"a": 1, "b": [1, 2]}, meta={"x": None})
    assert env.attempts.put(record, OWNER) == Inserted()
    reordered = running(1, checkpoint={"b": [1, 2], "a": 1}, meta={"x": None})
    assert env.attempts.put(reordered, OWNER) == ExistingSame()
    assert env.attempts.state() == (record,)


def test_a_different_put_over_an_existing_attempt_is_a_conflict(env: Env) -> None:
    """Any difference (a field, a type, absent vs null, array order) is a Conflict."""
    env.own()
    record = running(1, checkpoint={"n": 1}, outcome=[1, 2])
    env.attempts.put(record, OWNER)
    for other in (
        running(1, checkpoint={"n": True}, outcome=[1, 2]),
        running(1, checkpoint={"n": 1.0}, outcome=[1, 2]),
        running(1, checkpoint={"n": 1}, outcome=[2, 1]),
        running(1, checkpoint={"n": 1}, outcome=[1, 2], error=None),
        running(1, checkpoint={"n": 1}),
        running(1, checkpoint={"n": 1}, outcome=[1, 2], state="queued"),
        running(1, checkpoint={"n": 1}, outcome=[1, 2], started_at_ms=11),
        running(1, checkpoint={"n": 1}, outcome=[1, 2], heartbeat_at_ms=10),
        running(1, checkpoint={"n": 1}, outcome=[1, 2], finished_at_ms=10),
        running(1, checkpoint={"n": 1}, outcome=[1, 2], meta={"m": 1}),
    ):
        assert env.attempts.put(other, OWNER) == Conflict(), other
    assert env.attempts.state() == (record,)


def test_put_on_a_missing_run_is_run_not_found(env: Env) -> None:
    """An attempt of a run that does not exist answers RunNotFound, and nothing is stored."""
    assert env.attempts.put(running(1), OWNER) == RunNotFound()
    assert env.attempts.state() == ()


def test_put_without_the_fence_is_fence_lost(env: Env) -> None:
    """A non-owner, a restarted owner (new nonce) and any owner of a non-running run lose."""
    env.runs.create("pending-run", "{}")
    assert env.attempts.put(running(1, run_id="pending-run"), OWNER) == FenceLost()
    env.own()
    assert env.attempts.put(running(1), RIVAL) == FenceLost()
    assert env.attempts.put(running(1), STRANGER) == FenceLost()
    env.settle(status="suspended")
    assert env.attempts.put(running(1), OWNER) == FenceLost()
    assert env.attempts.state() == ()


def test_put_compares_only_under_the_fence(env: Env) -> None:
    """An equal put from a non-owner is still FenceLost, never ExistingSame."""
    env.own()
    env.attempts.put(running(1), OWNER)
    assert env.attempts.put(running(1), RIVAL) == FenceLost()


def test_put_may_store_a_settled_attempt(env: Env) -> None:
    """put stores any state, including one that is not in progress."""
    env.own()
    record = running(1, state="succeeded", finished_at_ms=20, outcome={"v": 1})
    assert env.attempts.put(record, OWNER) == Inserted()
    assert env.attempts.get(ident(1)) == record


# -- heartbeat ---------------------------------------------------------------------------


def test_heartbeat_sets_the_first_stamp_and_never_moves_it_back(env: Env) -> None:
    """The stamp becomes max(old, now); an older reading still answers Updated."""
    env.own()
    env.attempts.put(running(1), OWNER)
    assert env.attempts.heartbeat(RUN, STEP, 1, OWNER, 250) == Updated()
    assert env.attempts.get(ident(1)).heartbeat_at_ms == 250
    assert env.attempts.heartbeat(RUN, STEP, 1, OWNER, 150) == Updated()
    assert env.attempts.get(ident(1)).heartbeat_at_ms == 250
    assert env.attempts.heartbeat(RUN, STEP, 1, OWNER, 300) == Updated()
    assert env.attempts.get(ident(1)).heartbeat_at_ms == 300


def test_heartbeat_keeps_the_checkpoint_unless_one_is_given(env: Env) -> None:
    """Without a checkpoint the stored one stays; with one it is replaced whole."""
    env.own()
    env.attempts.put(running(1, checkpoint={"page": 1, "seen": [1]}), OWNER)
    env.attempts.heartbeat(RUN, STEP, 1, OWNER, 5)
    assert env.attempts.get(ident(1)).checkpoint == {"page": 1, "seen": [1]}
    env.attempts.heartbeat(RUN, STEP, 1, OWNER, 6, {"page": 2})
    assert env.attempts.get(ident(1)).checkpoint == {"page": 2}
    env.attempts.heartbeat(RUN, STEP, 1, OWNER, 1, None)
    stored = env.attempts.get(ident(1))
    assert stored.checkpoint is None
    assert stored.heartbeat_at_ms == 6


def test_heartbeat_changes_nothing_else(env: Env) -> None:
    """Only the stamp and the checkpoint move."""
    env.own()
    record = running(1, error="e", outcome="o", meta={"m": 1}, finished_at_ms=3)
    env.attempts.put(record, OWNER)
    env.attempts.heartbeat(RUN, STEP, 1, OWNER, 9)
    stored = env.attempts.get(ident(1))
    assert stored == running(
        1, error="e", outcome="o", meta={"m": 1}, finished_at_ms=3, heartbeat_at_ms=9
    )


def test_heartbeat_losses_in_order(env: Env) -> None:
    """Attempt missing is NotFound before the fence; fence lost before StateChanged."""
    assert env.attempts.heartbeat(RUN, STEP, 1, OWNER, 1) == NotFound()
    env.own()
    assert env.attempts.heartbeat(RUN, STEP, 1, RIVAL, 1) == NotFound()
    env.attempts.put(running(1), OWNER)
    env.attempts.put(running(2, state="succeeded"), OWNER)
    assert env.attempts.heartbeat(RUN, STEP, 1, RIVAL, 1) == FenceLost()
    assert env.attempts.heartbeat(RUN, STEP, 2, RIVAL, 1) == FenceLost()
    assert env.attempts.heartbeat(RUN, STEP, 2, OWNER, 1) == StateChanged()
    assert env.attempts.get(ident(2)).heartbeat_at_ms is None


def test_a_finished_attempt_cannot_be_heartbeated(env: Env) -> None:
    """After finish, heartbeat answers StateChanged and leaves the attempt alone."""
    env.own()
    env.attempts.put(running(1, checkpoint=1), OWNER)
    env.attempts.finish(FinishAttempt(RUN, STEP, 1, "succeeded", 9), OWNER)
    before = env.attempts.get(ident(1))
    assert env.attempts.heartbeat(RUN, STEP, 1, OWNER, 99, 2) == StateChanged()
    assert env.attempts.get(ident(1)) == before


def test_heartbeat_after_the_run_settled_is_fence_lost(env: Env) -> None:
    """A settled or suspended run clears its owner, so every heartbeat loses the fence."""
    env.own()
    env.attempts.put(running(1), OWNER)
    env.settle(status="suspended")
    assert env.attempts.heartbeat(RUN, STEP, 1, OWNER, 5) == FenceLost()


# -- finish --------------------------------------------------------------------------------


def test_finish_settles_and_coalesces_error_outcome_and_meta(env: Env) -> None:
    """Given fields replace, absent fields keep; state and finish time are written."""
    env.own()
    env.attempts.put(
        running(1, heartbeat_at_ms=4, checkpoint="cp", error="old", outcome="old", meta={"m": 0}),
        OWNER,
    )
    request = FinishAttempt(RUN, STEP, 1, "failed", 50, error={"code": 7})
    assert env.attempts.finish(request, OWNER) == Finished()
    assert env.attempts.get(ident(1)) == running(
        1,
        state="failed",
        finished_at_ms=50,
        heartbeat_at_ms=4,
        checkpoint="cp",
        error={"code": 7},
        outcome="old",
        meta={"m": 0},
    )


def test_finish_writes_null_when_null_is_given(env: Env) -> None:
    """A JSON null in a finish request replaces the stored value with null."""
    env.own()
    env.attempts.put(running(1, error="e", outcome="o", meta={"m": 1}), OWNER)
    env.attempts.finish(
        FinishAttempt(RUN, STEP, 1, "done", 2, error=None, outcome=None, meta=None), OWNER
    )
    stored = env.attempts.get(ident(1))
    assert (stored.error, stored.outcome, stored.meta) == (None, None, None)


def test_a_second_finish_is_state_changed(env: Env) -> None:
    """Only the first finish settles; the next answers StateChanged and writes nothing."""
    env.own()
    env.attempts.put(running(1), OWNER)
    assert (
        env.attempts.finish(FinishAttempt(RUN, STEP, 1, "succeeded", 5, outcome=1), OWNER)
        == Finished()
    )
    again = FinishAttempt(RUN, STEP, 1, "failed", 6, outcome=2)
    assert env.attempts.finish(again, OWNER) == StateChanged()
    stored = env.attempts.get(ident(1))
    assert (stored.state, stored.finished_at_ms, stored.outcome) == ("succeeded", 5, 1)


def test_finish_losses_in_order(env: Env) -> None:
    """NotFound, then FenceLost, then StateChanged, as for heartbeat."""
    request = FinishAttempt(RUN, STEP, 1, "succeeded", 5)
    assert env.attempts.finish(request, OWNER) == NotFound()
    env.own()
    assert env.attempts.finish(request, RIVAL) == NotFound()
    env.attempts.put(running(1), OWNER)
    assert env.attempts.finish(request, RIVAL) == FenceLost()
    assert env.attempts.get(ident(1)).state == "running"
    env.attempts.put(running(2, state="queued"), OWNER)
    assert env.attempts.finish(FinishAttempt(RUN, STEP, 2, "done", 1), OWNER) == StateChanged()


def test_custom_in_progress_states_drive_heartbeat_and_finish(env: Env) -> None:
    """With in-progress states (queued, running), both are heartbeat-able and
    finishable; 'running' is refused as a finish state; others are settled."""
    env.own()
    attempts = env.attempt_store(in_progress_states=("queued", "running"))
    attempts.put(running(1, state="queued"), OWNER)
    attempts.put(running(2, state="paused"), OWNER)
    assert attempts.heartbeat(RUN, STEP, 1, OWNER, 3) == Updated()
    assert attempts.heartbeat(RUN, STEP, 2, OWNER, 3) == StateChanged()
    assert attempts.finish(FinishAttempt(RUN, STEP, 2, "done", 4), OWNER) == StateChanged()
    assert attempts.finish(FinishAttempt(RUN, STEP, 1, "paused", 4), OWNER) == Finished()
    assert attempts.heartbeat(RUN, STEP, 1, OWNER, 5) == StateChanged()
    # The default store sees 'queued' as settled.
    env.attempts.put(running(3, state="queued"), OWNER)
    assert env.attempts.heartbeat(RUN, STEP, 3, OWNER, 3) == StateChanged()
    assert attempts.heartbeat(RUN, STEP, 3, OWNER, 3) == Updated()


# -- patch ------------------------------------------------------------------------------------


def test_patch_coalesces_each_field(env: Env) -> None:
    """Given fields replace (null included), absent fields keep their value."""
    env.own()
    env.attempts.put(running(1, checkpoint="c", error="e", outcome="o", meta={"m": 1}), OWNER)
    assert (
        env.attempts.patch(ident(1), AttemptPatch(checkpoint={"n": 2}, outcome=None), OWNER)
        == Patched()
    )
    assert env.attempts.get(ident(1)) == running(
        1, checkpoint={"n": 2}, error="e", outcome=None, meta={"m": 1}
    )


def test_an_empty_patch_is_patched_and_changes_nothing(env: Env) -> None:
    """An empty patch proves the fence: Patched, attempt unchanged."""
    env.own()
    env.attempts.put(running(1, checkpoint="c"), OWNER)
    assert env.attempts.patch(ident(1), AttemptPatch(), OWNER) == Patched()
    assert env.attempts.get(ident(1)) == running(1, checkpoint="c")


def test_patch_works_on_a_settled_attempt(env: Env) -> None:
    """patch has no state predicate: a finished attempt can still be patched."""
    env.own()
    env.attempts.put(running(1), OWNER)
    env.attempts.finish(FinishAttempt(RUN, STEP, 1, "succeeded", 5), OWNER)
    assert env.attempts.patch(ident(1), AttemptPatch(outcome={"late": True}), OWNER) == Patched()
    stored = env.attempts.get(ident(1))
    assert (stored.state, stored.outcome) == ("succeeded", {"late": True})


def test_patch_losses_in_order(env: Env) -> None:
    """Attempt missing is NotFound (whoever asks), then FenceLost."""
    assert env.attempts.patch(ident(1), AttemptPatch(), OWNER) == NotFound()
    env.own()
    assert env.attempts.patch(ident(1), AttemptPatch(meta=1), RIVAL) == NotFound()
    env.attempts.put(running(1), OWNER)
    assert env.attempts.patch(ident(1), AttemptPatch(meta=1), RIVAL) == FenceLost()
    assert env.attempts.patch(ident(1), AttemptPatch(), STRANGER) == FenceLost()
    assert env.attempts.get(ident(1)).meta == {}


# -- upsert ----------------------------------------------------------------------------------


def test_upsert_replaces_every_column_of_an_in_progress_attempt(env: Env) -> None:
    """In upsert mode a put over an in-progress attempt replaces it whole."""
    env.own()
    attempts = env.attempt_store(put_mode="upsert")
    assert attempts.put(running(1, checkpoint="c", error="e", meta={"m": 1}), OWNER) == Inserted()
    replacement = running(1, started_at_ms=99, outcome=[1], meta={})
    assert attempts.put(replacement, OWNER) == Upserted()
    assert attempts.get(ident(1)) == replacement
    assert attempts.put(replacement, OWNER) == Upserted()


def test_upsert_never_rewrites_a_settled_attempt(env: Env) -> None:
    """A settled attempt is immutable in upsert mode too: ExistingSame or Conflict."""
    env.own()
    attempts = env.attempt_store(put_mode="upsert")
    attempts.put(running(1), OWNER)
    attempts.finish(FinishAttempt(RUN, STEP, 1, "succeeded", 5, outcome="v"), OWNER)
    settled = attempts.get(ident(1))
    assert attempts.put(running(1), OWNER) == Conflict()
    assert attempts.put(settled, OWNER) == ExistingSame()
    assert attempts.get(ident(1)) == settled


def test_upsert_can_settle_an_attempt_in_one_put(env: Env) -> None:
    """An upsert may write a settled state; afterwards the attempt is immutable."""
    env.own()
    attempts = env.attempt_store(put_mode="upsert")
    attempts.put(running(1), OWNER)
    done = running(1, state="succeeded", finished_at_ms=8)
    assert attempts.put(done, OWNER) == Upserted()
    assert attempts.put(running(1), OWNER) == Conflict()
    assert attempts.get(ident(1)) == done


def test_attempt_writes_never_touch_the_run_row(env: Env) -> None:
    """Attempt writes change no run row, so the execution revision stays put."""
    env.own()
    revision = env.runs.revision()
    row = env.runs.get(RUN)
    env.attempts.put(running(1), OWNER)
    env.attempts.put(running(2), OWNER)
    env.attempts.heartbeat(RUN, STEP, 1, OWNER, 8, "cp")
    env.attempts.patch(ident(1), AttemptPatch(error="e"), OWNER)
    env.attempts.finish(FinishAttempt(RUN, STEP, 1, "done", 9), OWNER)
    assert env.runs.revision() == revision
    assert env.runs.get(RUN) == row


def test_attempt_writes_do_not_read_run_state(env: Env) -> None:
    """A run whose stored state was corrupted behind the store's back still
    fences attempt writes by its owner (attempt writes never read run state)."""
    env.own()
    env.attempts.put(running(1), OWNER)
    corrupt = "[" * 130 + "]" * 130  # valid JSON text, deeper than admission allows
    hook = getattr(env.runs, "raw_write_state", None)
    if callable(hook):
        assert hook(RUN, corrupt)
    else:
        # Raw SQL behind the adapter's back (the state lives in its side table).
        mark = "$" if env.runs.dialect == "postgresql" else "?"  # type: ignore[attr-defined]
        env.runs._connection.execute(  # type: ignore[attr-defined]
            f"UPDATE flows_run_state SET state_json = {mark}1 WHERE run_id = {mark}2",
            (corrupt, RUN),
        )
    with pytest.raises(runstore.RunStoreError):
        env.runs.get(RUN)
    assert env.attempts.heartbeat(RUN, STEP, 1, OWNER, 5) == Updated()
    assert env.attempts.heartbeat(RUN, STEP, 1, RIVAL, 6) == FenceLost()
    assert env.attempts.put(running(2), OWNER) == Inserted()
    assert env.attempts.finish(FinishAttempt(RUN, STEP, 1, "done", 7), OWNER) == Finished()
    assert env.attempts.patch(ident(1), AttemptPatch(), OWNER) == Patched()
    env.runs.transition_owned(RUN, OWNER, "running", "{}")  # heal it for the invariant check
