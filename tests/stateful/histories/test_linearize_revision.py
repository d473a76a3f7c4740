"""The final database-wide revision count: ``check_history(..., final=state)``
checks that the store's final revision is the initial one plus the row
writes of some linearization of every object, that an extra or a missing
write is a violation, that a call of unknown outcome may count or not, and
that an excluded call that may have written leaves the count unchecked.

Histories are recorded from the reference model itself through a
``HistoryRecorder`` (so every answer and clock reading is real), then the
final state is tampered with.
"""

from __future__ import annotations

import attrs

from runstore import ManualClock, OwnerId, RunSnapshot
from runstore.model import ModelRunStore
from runstore.stateful import HistoryRecorder, RecordingClock, check_history, operation

A = OwnerId("host-a", 1, "a")
PENDING = RunSnapshot("pending", None, None)


def recorded_model():
    """A model behind a recorder, a clock, and the recorder."""
    clock = ManualClock(1_000)
    recorder = HistoryRecorder(process="p")
    model = ModelRunStore(RecordingClock(clock))
    return recorder.record(model), clock, recorder


def owned_runs():
    """Two runs created, owned, heartbeaten, one settled; the history and state."""
    store, clock, recorder = recorded_model()
    for run_id in ("r1", "r2"):
        store.create(run_id, "{}")
        store.claim_and_own(run_id, PENDING, A, clock.now_ms())
    clock.advance(500)
    store.heartbeat("r1", A, clock.now_ms())
    store.heartbeat("r2", A, clock.now_ms())
    store.transition_owned("r2", A, "completed", '{"done": true}')
    return store, clock, recorder.operations(), store.wrapped.state()


def test_the_count_of_a_clean_history_is_accounted_for():
    """The model's own final revision checks; the summary says how many writes."""
    _, _, history, final = owned_runs()
    verdict = check_history(history, final=final)
    assert verdict.ok, verdict.summary()
    assert verdict.revision is not None
    assert verdict.revision.result == "ok"
    assert verdict.revision.final == final.revision > 0
    assert f"revision: {final.revision} row writes" in verdict.summary()


def test_an_extra_or_a_missing_row_write_is_a_violation():
    """One revision more (a write nobody recorded, such as a row written twice)
    or one less (a write that was answered but never counted) fails the
    history even though every run's own state is right."""
    _, _, history, final = owned_runs()
    for revision in (final.revision + 1, final.revision - 1):
        verdict = check_history(history, final=attrs.evolve(final, revision=revision))
        assert verdict.status == "violation"
        assert not verdict.violations  # no run is wrong; the count is
        assert verdict.revision is not None
        assert verdict.revision.result == "violation"
        assert "revision violation" in verdict.summary()


def test_the_count_starts_from_the_initial_state():
    """A history recorded on a store that already held writes counts from
    ``initial.revision``."""
    store, clock, recorder = recorded_model()
    store.wrapped.create("before", "{}")
    initial = store.wrapped.state()
    store.create("r", "{}")
    store.claim_and_own("r", PENDING, A, clock.now_ms())
    final = store.wrapped.state()
    assert check_history(recorder.operations(), initial=initial, final=final).ok
    assert check_history(recorder.operations(), final=final).status == "violation"


def test_a_call_of_unknown_outcome_may_count_or_not():
    """A heartbeat whose process died mid-call rewrites the row whether or not
    it moves the stamp: the final state may be the same either way, and both
    counts are accounted for; two more writes are not."""
    store, clock, recorder = recorded_model()
    store.create("r", "{}")
    store.claim_and_own("r", PENDING, A, clock.now_ms())
    history = recorder.operations()
    before = store.wrapped.state()
    at = clock.now_ms()
    pending = operation(
        "heartbeat", "r", A, at, invoked=history[-1].returned_ns + 10, returned=None, clock=[at]
    )
    store.wrapped.heartbeat("r", A, at)
    after = store.wrapped.state()
    assert after.revision == before.revision + 1
    for final in (before, after):
        verdict = check_history([*history, pending], final=final)
        assert verdict.ok, verdict.summary()
    beyond = attrs.evolve(after, revision=after.revision + 1)
    assert check_history([*history, pending], final=beyond).status == "violation"


def test_an_excluded_call_that_may_write_leaves_the_count_unchecked():
    """A call the checker cannot place (a method it does not know) may have
    written: the count is reported unchecked, never passed; whole-database
    reads do not get in the way."""
    _, _, history, final = owned_runs()
    last = history[-1].returned_ns
    read = operation("revision", invoked=last + 1, returned=last + 2, value=final.revision)
    assert check_history([*history, read], final=final).ok
    unknown = operation("rewrite_everything", invoked=last + 1, returned=last + 2, value=None)
    verdict = check_history([*history, unknown], final=final)
    assert verdict.status == "unchecked"
    assert verdict.revision is not None
    assert verdict.revision.result == "unchecked"
    assert "excluded operations may have written (rewrite_everything)" in verdict.summary()


def test_a_page_of_unknown_outcome_leaves_the_count_checked():
    """A ``list_runs`` whose process died mid-call is excluded (a read of
    unknown outcome constrains nothing), but it wrote nothing either: the
    count is still checked, and a wrong one still fails."""
    _, _, history, final = owned_runs()
    last = history[-1].returned_ns
    page = operation("list_runs", invoked=last + 1, returned=None)
    verdict = check_history([*history, page], final=final)
    assert verdict.ok, verdict.summary()
    assert verdict.revision is not None
    assert verdict.revision.result == "ok"
    beyond = attrs.evolve(final, revision=final.revision + 1)
    assert check_history([*history, page], final=beyond).status == "violation"
