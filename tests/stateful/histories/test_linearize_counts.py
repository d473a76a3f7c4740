"""The counts that span objects when many of them are open at once: a history
shaped like a long torture's on PostgreSQL (many ``purge_settled`` calls, each
overlapping the settling of the runs it deletes, and many writes of unknown
outcome after restarts) is decided exactly, and a wrong count planted in it
is still caught.

Each object could count several ways (a purge part before or after the
completion it overlaps, an unknown heartbeat applied or not); the
combinations across objects number in the hundreds of thousands, but the
sums that can still add up are few. The history is recorded from the
reference model (every answer real), then each purge's call is widened back
to its round's start (the recorded order stays one legal order, but the
search's first guess deletes nothing) and heartbeats the model applied are
recorded as of unknown outcome (a restart cut their answers).
"""

from __future__ import annotations

import attrs

from runstore import ManualClock, OwnerId, RunSnapshot, StoreState
from runstore.model import ModelRunStore
from runstore.stateful import HistoryRecorder, Operation, RecordingClock, check_history, operation

A = OwnerId("host-a", 1, "a")
PENDING = RunSnapshot("pending", None, None)
ROUNDS = 14
UNKNOWN_PER_RUN = 2


def crowded_history() -> tuple[list[Operation], StoreState, list[int]]:
    """``ROUNDS`` rounds of two runs created, owned, heartbeaten (twice of unknown outcome)
    and completed, then purged by one call answering 2 (with two calls answering 0 around
    it); the history, the final state, and the positions of the purges answering 2."""
    clock = ManualClock(1_000)
    recorder = HistoryRecorder(process="p")
    model = ModelRunStore(RecordingClock(clock))
    store = recorder.record(model)
    unknown: list[Operation] = []
    for n in range(ROUNDS):
        pair = (f"a{n}", f"b{n}")
        for run_id in pair:
            store.create(run_id, "{}")
            store.claim_and_own(run_id, PENDING, A, clock.now_ms())
            at = clock.now_ms()
            store.heartbeat(run_id, A, at)
            for _ in range(UNKNOWN_PER_RUN):
                # Applied (the row rewritten as it was, one revision more), its answer lost.
                model.heartbeat(run_id, A, at)
                stamp = recorder.operations()[-1].returned_ns + 1
                unknown.append(
                    operation("heartbeat", run_id, A, at, invoked=stamp, returned=None, clock=[at])
                )
            store.transition_owned(run_id, A, "completed")
        clock.advance(1_000)
        assert store.purge_settled(1) == 0
        assert store.purge_settled(clock.now_ms()) == 2
        assert store.purge_settled(clock.now_ms()) == 0
    history = recorder.operations()
    # Each purge widened back to its round's first create: it overlaps the round's completions.
    widened = []
    begun = history[0].invoked_ns
    for op in history:
        if op.method == "create" and op.args[0].startswith("a"):
            begun = op.invoked_ns
        widened.append(attrs.evolve(op, invoked_ns=begun) if op.method == "purge_settled" else op)
    purges = [i for i, op in enumerate(widened) if op.method == "purge_settled" and op.value == 2]
    return [*widened, *unknown], model.state(), purges


def test_a_crowded_history_is_decided():
    """Every object linearizable and the counts accounted for: the final revision (every
    unknown heartbeat applied) and every purge's answer."""
    history, final, _ = crowded_history()
    verdict = check_history(history, final=final)
    assert verdict.ok, verdict.summary()
    assert verdict.revision is not None
    assert verdict.revision.result == "ok"
    assert verdict.revision.final == final.revision


def test_a_wrong_count_in_a_crowded_history_is_caught():
    """One row write more than every write (the unknown ones included) could make, and a
    purge answering one run more than it could have deleted, each fail the history as a
    count that does not add up, not as a run in the wrong state; one write fewer is
    accounted for (an unknown heartbeat not applied)."""
    history, final, purges = crowded_history()
    beyond = check_history(history, final=attrs.evolve(final, revision=final.revision + 1))
    assert beyond.status == "violation"
    assert not beyond.violations
    assert beyond.revision is not None
    assert beyond.revision.result == "violation"
    reason = beyond.revision.reason or ""
    assert reason.startswith("the history accounts for ")
    assert reason.endswith(f"{final.revision - 1}, {final.revision} (nearest)")
    fewer = check_history(history, final=attrs.evolve(final, revision=final.revision - 1))
    assert fewer.ok, fewer.summary()
    first = purges[0]
    wrong = [attrs.evolve(op, value=3) if i == first else op for i, op in enumerate(history)]
    verdict = check_history(wrong, final=final)
    assert verdict.status == "violation"
    assert not verdict.violations
    assert verdict.revision is not None
    assert verdict.revision.result == "violation"
    assert "purge_settled answers no linearization accounts for" in (verdict.revision.reason or "")


def test_a_count_that_adds_up_only_per_call_is_caught():
    """The first round's purge answering 1 instead of 2: it could have run between its
    round's two completions and deleted one run, but then the other is deleted by no call
    (the next round's purge would delete three, its round's two and the one left behind,
    and every other answer is as recorded). Each call's parts alone can reach its answer;
    only all the sums together cannot."""
    history, final, purges = crowded_history()
    wrong = [attrs.evolve(op, value=1) if i == purges[0] else op for i, op in enumerate(history)]
    verdict = check_history(wrong, final=final)
    assert verdict.status == "violation", verdict.summary()
    assert not verdict.violations
    assert verdict.revision is not None
    assert verdict.revision.result == "violation"
    assert verdict.revision.reason == (
        "purge_settled answers no linearization accounts for: not all at once"
    )
