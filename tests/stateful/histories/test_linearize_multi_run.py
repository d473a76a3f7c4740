"""Multi-run operations in recorded histories: how ``list_runs``,
``claim_next`` and ``purge_settled`` are checked across objects.

A page is a read of every object (each object's rows in the page's key range
must be exactly what the model lists there, so a skipped run fails its
object) plus a check of the page's shape; ``claim_next`` answering a run is
a claim of that run on its object (and no older run may have been
claimable throughout the call), answering None a read of "no candidate" on
every object; ``purge_settled`` deletes every
eligible run on each object, and the deletions must add up to its answer.

Histories are recorded from the reference model through a
``HistoryRecorder`` (every answer and clock reading real), then one answer
is changed.
"""

from __future__ import annotations

import attrs

import runstore.model
from runstore import ManualClock, OwnerId, RunSnapshot
from runstore.stateful import HistoryRecorder, RecordingClock, check_history, operation

A = OwnerId("host-a", 1, "a")
B = OwnerId("host-b", 2, "b")
PENDING = RunSnapshot("pending", None, None)


def recorded():
    clock = ManualClock(1_000)
    recorder = HistoryRecorder(process="p")
    store = recorder.record(runstore.model.ModelRunStore(RecordingClock(clock)))
    return store, clock, recorder


def changed(history, index, **changes):
    """``history`` with operation ``index`` (negative from the end) changed."""
    copy = list(history)
    copy[index] = attrs.evolve(copy[index], **changes)
    return copy


def three_runs():
    """r1 running (A), r2 pending, r3 pending; created a millisecond apart."""
    store, clock, recorder = recorded()
    for run_id in ("r1", "r2", "r3"):
        store.create(run_id, "{}")
        clock.advance(1)
    store.claim_and_own("r1", PENDING, A, clock.now_ms())
    return store, clock, recorder


def test_pages_are_read_object_by_object_and_nothing_may_be_skipped():
    """A walk over pages of one row checks; a page that leaves out a run that
    matched (its cursor skipping past it) fails that run's object, and so
    does a page listing a run that did not match."""
    store, _, recorder = three_runs()
    first = store.list_runs(status="pending", limit=1)
    store.list_runs(status="pending", limit=1, after=first.next)
    history = recorder.operations()
    assert check_history(history).ok
    assert [op.method for op in history[-2:]] == ["list_runs", "list_runs"]
    second = history[-1].value
    skipped = changed(history, -1, value=attrs.evolve(second, runs=()))
    verdict = check_history(skipped)
    assert verdict.status == "violation"
    assert [p.key for p in verdict.violations] == ["r3"]
    running = store.get("r1")
    wrong = changed(
        history, -1, value=attrs.evolve(second, runs=(attrs.evolve(running, state_json=None),))
    )
    assert {p.key for p in check_history(wrong).violations} == {"r1", "r3"}


def test_a_page_of_the_wrong_shape_is_a_violation():
    """Rows out of listing order, or a cursor that is not the last row's, fail
    even when each row is right."""
    store, _, recorder = three_runs()
    store.list_runs(status="pending")
    history = recorder.operations()
    page = history[-1].value
    assert len(page.runs) == 2
    reversed_page = attrs.evolve(page, runs=page.runs[::-1])
    assert check_history(changed(history, -1, value=reversed_page)).status == "violation"
    cursor = attrs.evolve(page, next="not-a-cursor")
    assert check_history(changed(history, -1, value=cursor)).status == "violation"


def test_claim_next_takes_the_oldest_unless_a_concurrent_write_holds_it():
    """With nothing else in flight claim_next must take the oldest candidate
    (r2): r3 instead breaks the oldest-claim rule. Under contention a store
    may pass over a run a concurrent write holds, so r3 is legal while a
    request_cancel of r2 overlaps the call; a run that was not a candidate
    (r1, running) never is."""
    store, clock, recorder = three_runs()
    store.claim_next(B, clock.now_ms())
    history = recorder.operations()
    assert check_history(history).ok
    oldest = history[-1].value
    assert oldest.run_id == "r2"
    # The row r3 would have had, had claim_next taken it at the same readings.
    other = attrs.evolve(oldest, run_id="r3", created_at_ms=oldest.created_at_ms + 1)
    verdict = check_history(changed(history, -1, value=other))
    assert verdict.status == "violation"
    assert [p.key for p in verdict.violations] == [f"claim_next {history[-1].id}"]
    store.request_cancel("r2", clock.now_ms())
    call, cancel = recorder.operations()[-2:]
    holding = attrs.evolve(cancel, invoked_ns=call.invoked_ns - 1, returned_ns=call.returned_ns + 1)
    assert check_history([*changed(history, -1, value=other), holding]).ok
    running = attrs.evolve(oldest, run_id="r1", created_at_ms=oldest.created_at_ms - 1)
    verdict = check_history(changed(history, -1, value=running))
    assert verdict.status == "violation"
    assert "r1" in {p.key for p in verdict.violations}


def test_claim_next_answers_none_only_when_no_object_has_a_candidate():
    """None while r2 and r3 were claimable fails both objects; None once
    nothing is claimable checks."""
    store, clock, recorder = three_runs()
    store.claim_next(B, clock.now_ms())
    history = recorder.operations()
    verdict = check_history(changed(history, -1, value=None))
    assert {p.key for p in verdict.violations} == {"r2", "r3"}
    store.claim_next(B, clock.now_ms())
    store.claim_next(B, clock.now_ms())
    history = recorder.operations()
    assert history[-1].value is None
    assert check_history(history).ok


def test_claim_next_may_pass_over_a_run_another_call_holds():
    """A None while r2 and r3 were claimable, overlapping a claim_and_own of
    r2 (whose transaction may have held r2's row: ``SKIP LOCKED``), says
    nothing of r2 but still fails r3, which no call held. An overlapping read
    holds no row, and passes over nothing."""
    store, clock, recorder = three_runs()
    store.claim_and_own("r2", PENDING, B, clock.now_ms())
    history = recorder.operations()
    taking = history[-1]
    none = operation(
        "claim_next",
        A,
        clock.now_ms(),
        invoked=taking.invoked_ns - 1,
        returned=taking.returned_ns + 1,
        value=None,
        clock=[clock.now_ms()],
        id="none",
    )
    verdict = check_history([*history, none])
    assert {p.key for p in verdict.violations} == {"r3"}
    store.get("r3")
    reading = recorder.operations()[-1]
    late = attrs.evolve(
        none, invoked_ns=reading.invoked_ns - 1, returned_ns=reading.returned_ns + 1
    )
    verdict = check_history([*recorder.operations(), late])
    assert {p.key for p in verdict.violations} == {"r3"}


def test_a_claim_next_of_unknown_outcome_may_have_taken_any_candidate():
    """A claim_next whose process died: the run it took (or not) shows up
    later; either way the history checks."""
    store, clock, recorder = three_runs()
    now = clock.now_ms()
    last = recorder.operations()[-1].returned_ns
    pending = operation("claim_next", B, now, invoked=last + 1, returned=None, clock=[now])
    store.wrapped.claim_next(B, now, choose="r3")
    store.get("r3")
    history = recorder.operations()
    assert check_history([*history[:-1], pending, history[-1]]).ok
    assert check_history(history).status == "violation"  # r3 owned by nobody's call


def test_purge_answers_must_add_up_across_objects():
    """Two settled runs on two objects, purged by one call answering 2: the
    deletions on both objects add up. Answering 1 or 3 does not; a call that
    reached its limit is excluded (which runs it took depends on all
    objects at once)."""
    store, clock, recorder = recorded()
    for run_id in ("r1", "r2"):
        store.create(run_id, "{}")
        store.claim_and_own(run_id, PENDING, A, clock.now_ms())
        store.transition_owned(run_id, A, "completed")
    clock.advance(60_000)
    assert store.purge_settled(clock.now_ms()) == 2
    history = recorder.operations()
    final = store.wrapped.state()
    verdict = check_history(history, final=final)
    assert verdict.ok, verdict.summary()
    for answer in (1, 3):
        wrong = check_history(changed(history, -1, value=answer))
        assert wrong.status == "violation"
        assert not wrong.violations
        assert "purge_settled answers no linearization accounts for" in wrong.summary()
    limited = changed(history, -1, kwargs={"limit": 2})
    reasons = [reason for _, reason in check_history(limited).excluded]
    assert reasons == ["purge_settled answered 2, its limit: which runs it took is not known"]


def test_a_purge_of_a_run_that_was_not_eligible_is_a_violation():
    """A run still running cannot be purged: a store whose purge took it
    fails that run's object (the final state lacks it)."""
    store, clock, recorder = recorded()
    store.create("r1", "{}")
    store.claim_and_own("r1", PENDING, A, clock.now_ms())
    clock.advance(60_000)
    store.purge_settled(clock.now_ms())
    history = recorder.operations()
    final = store.wrapped.state()
    assert check_history(history, final=final).ok
    purged = attrs.evolve(final, rows=(), leases=(), facts=())
    verdict = check_history(changed(history, -1, value=1), final=purged)
    assert verdict.status == "violation"
    assert [p.key for p in verdict.violations] == ["r1"]
