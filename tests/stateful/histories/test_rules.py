"""The rules the checker judges beyond one object at a time, each shown to
reject a planted mistake and to accept the correct history.

- a snapshot read (a ``list_runs`` page, a ``state()``) that overlapped a
  ``heartbeat_many`` shows the batch whole or not at all;
- ``claim_next`` takes the oldest claimable run, unless a concurrent write
  holds it;
- ``purge_settled`` never deletes a run that is unsettled, finished at or
  after the cutoff, or has a child or lineage round that is not settled.

Histories are recorded from the reference model through a
``HistoryRecorder`` (every answer and clock reading real); the planted
mistake changes what one operation answered, or when.
"""

from __future__ import annotations

import contextlib

import attrs
import pytest

import runstore.model
from runstore import ManualClock, OwnerId, RunSnapshot, StoreState
from runstore.stateful import (
    HistoryRecorder,
    RecordingClock,
    check_history,
    load_history,
    operation,
    write_violation,
)
from runstore.stateful._histories._linearize import BATCH_RULE, CLAIM_RULE

A = OwnerId("host-a", 1, "a")
B = OwnerId("host-b", 2, "b")
PENDING = RunSnapshot("pending", None, None)


def recorded():
    clock = ManualClock(1_000)
    recorder = HistoryRecorder(process="p")
    store = recorder.record(runstore.model.ModelRunStore(RecordingClock(clock)))
    return store, clock, recorder


def during(op, other):
    """``op`` moved inside ``other``'s interval (the two overlap)."""
    return attrs.evolve(op, invoked_ns=other.invoked_ns + 1, returned_ns=other.returned_ns - 1)


def rule(verdict, name):
    return next(r for r in verdict.rules if r.rule == name)


# -- heartbeat_many is atomic --------------------------------------------------------


def batch_history(read):
    """r1 and r2 owned by A; ``read`` (a snapshot) before the batch, the
    batch, the same read after it. Returns the history and the two reads'
    answers."""
    store, clock, recorder = recorded()
    for run_id in ("r1", "r2"):
        store.create(run_id, "{}")
        store.claim_and_own(run_id, PENDING, A, clock.now_ms())
    clock.advance(5_000)
    before = read(store)
    store.heartbeat_many(A, ["r1", "r2"], clock.now_ms())
    after = read(store)
    return recorder.operations(), before, after


def torn_page(before, after):
    """r1 as the batch left it, r2 as it was before."""
    return attrs.evolve(after, runs=(after.runs[0], before.runs[1]))


def torn_state(before, after):
    def pick(items, run_id):
        return tuple(item for item in items if item.run_id == run_id)

    return attrs.evolve(
        after,
        rows=pick(after.rows, "r1") + pick(before.rows, "r2"),
        leases=pick(after.leases, "r1") + pick(before.leases, "r2"),
    )


@pytest.mark.parametrize(
    ("read", "tear"),
    [
        (lambda store: store.list_runs(status="running"), torn_page),
        (lambda store: store.state(), torn_state),
    ],
    ids=["list_runs", "state"],
)
def test_a_snapshot_during_a_batch_shows_it_whole_or_not_at_all(read, tear):
    """A snapshot read overlapping a heartbeat_many may show the batch done
    or not yet done; one that shows r1 renewed and r2 not breaks the batch's
    atomicity, though each run alone could be read at its own instant (the
    per-object check alone passes it)."""
    history, before, after = batch_history(read)
    batch = history[-2]
    assert batch.method == "heartbeat_many"
    for shown in (before, after):
        overlapping = [*history[:-1], during(attrs.evolve(history[-1], value=shown), batch)]
        verdict = check_history(overlapping)
        assert verdict.ok, verdict.summary()
        assert rule(verdict, BATCH_RULE).judged == 1
    torn = during(attrs.evolve(history[-1], value=tear(before, after)), batch)
    verdict = check_history([*history[:-1], torn])
    assert verdict.status == "violation"
    assert all(p.result == "linearizable" for p in verdict.partitions)
    (violation,) = rule(verdict, BATCH_RULE).violations
    assert violation.key == f"heartbeat_many {batch.id}"
    assert violation.runs == ("r1", "r2")
    assert {op.id for op in violation.unplaced} & {batch.id, f"{torn.id}/union"}
    # After the batch returned, a torn read is wrong on r2's object already.
    late = check_history([*history[:-1], attrs.evolve(history[-1], value=tear(before, after))])
    assert [p.key for p in late.violations] == ["r2"]


def test_a_state_snapshot_is_read_object_by_object():
    """A ``state()`` answer is checked on every object at one instant of the
    call: one that shows a run's row changed (a status nobody wrote) fails
    that run's object."""
    store, _clock, recorder = recorded()
    store.create("r1", "{}")
    store.create("r2", "{}")
    store.state()
    history = recorder.operations()
    assert check_history(history).ok
    snapshot: StoreState = history[-1].value
    wrong_row = attrs.evolve(snapshot.rows[1], status="suspended")
    wrong = attrs.evolve(
        history[-1], value=attrs.evolve(snapshot, rows=(snapshot.rows[0], wrong_row))
    )
    assert [p.key for p in check_history([*history[:-1], wrong]).violations] == ["r2"]


# -- claim_next takes the oldest -----------------------------------------------------


def three_runs():
    """r1 running (A), r2 pending, r3 pending; created a millisecond apart."""
    store, clock, recorder = recorded()
    for run_id in ("r1", "r2", "r3"):
        store.create(run_id, "{}")
        clock.advance(1)
    store.claim_and_own("r1", PENDING, A, clock.now_ms())
    return store, clock, recorder


def took_r3(history):
    """``history`` whose last operation, a claim_next that took r2, took r3 instead."""
    oldest = history[-1].value
    assert oldest.run_id == "r2"
    other = attrs.evolve(oldest, run_id="r3", created_at_ms=oldest.created_at_ms + 1)
    return [*history[:-1], attrs.evolve(history[-1], value=other)]


def test_claim_next_passing_over_an_older_claimable_run_is_a_violation():
    """r2 was pending with no claim before the call and nothing touched it
    during it: taking r3 breaks the rule, and the report shows r2's object's
    writes in a legal order and the call, which cannot follow them."""
    store, clock, recorder = three_runs()
    store.claim_next(B, clock.now_ms())
    history = recorder.operations()
    verdict = check_history(history)
    assert verdict.ok, verdict.summary()
    assert rule(verdict, CLAIM_RULE).violations == ()
    verdict = check_history(took_r3(history))
    assert verdict.status == "violation"
    assert all(p.result == "linearizable" for p in verdict.partitions)
    (violation,) = rule(verdict, CLAIM_RULE).violations
    call = history[-1]
    assert violation.key == f"claim_next {call.id}"
    assert "the older r2 was claimable" in (violation.reason or "")
    assert [op.method for op in violation.minimal] == ["create", "claim_next"]
    assert [op.id for op in violation.unplaced] == [call.id]
    (blocked, answer) = violation.explanation.blocked[0]
    assert blocked.id == call.id
    assert answer[1].run_id == "r2"


@pytest.mark.parametrize("held_by", ["request_cancel", "claim"])
def test_claim_next_may_pass_over_a_run_a_concurrent_write_holds(held_by):
    """A write on r2 in flight during the call (a cancel request, a claim
    from a stale snapshot that loses) may hold r2's row: taking r3 is then
    legal."""
    store, clock, recorder = three_runs()
    if held_by == "claim":
        store.claim("r2", RunSnapshot("suspended", None, None), A, clock.now_ms())
    store.claim_next(B, clock.now_ms())
    if held_by == "request_cancel":
        store.request_cancel("r2", clock.now_ms())
    history = recorder.operations()
    holding = next(op for op in history if op.method == held_by)
    call = next(op for op in history if op.method == "claim_next")
    assert holding.value != call.value
    moved = attrs.evolve(holding, invoked_ns=call.invoked_ns - 1, returned_ns=call.returned_ns + 1)
    taken = took_r3(
        [op for op in history if op is not holding and op.invoked_ns <= call.invoked_ns]
    )
    overlapping = [*taken, moved]
    verdict = check_history(overlapping)
    assert verdict.ok, verdict.summary()
    assert (
        check_history(
            [*taken, holding] if held_by == "request_cancel" else [holding, *taken]
        ).status
        == "violation"
    )


def test_claim_next_is_not_judged_where_a_write_of_unknown_outcome_came_before():
    """r2 settled by a write whose answer was lost (persistence_failed)
    before the call: it may or may not have taken effect, so r2 may not
    have been claimable, and taking r3 is not judged against r2."""
    store, clock, recorder = three_runs()
    store.claim_and_own("r2", PENDING, B, clock.now_ms())
    store.transition_owned("r2", B, "suspended")
    store.claim_next(A, clock.now_ms())
    history = recorder.operations()
    assert history[-1].value.run_id == "r2"
    assert check_history(took_r3(history)).status == "violation"
    lost = attrs.evolve(
        history[-2], status="error", error="persistence_failed", unknown=True, value=None
    )
    assert check_history([*took_r3(history)[:-2], lost, took_r3(history)[-1]]).ok


def test_claim_next_judges_every_order_the_history_allows():
    """Two concurrent writes on r2, a suspend by its owner and a steal
    attempt, leave r2 claimable in one order and not in the other: the rule
    does not judge r2 (it is not claimable in every state), while a run
    claimable in every order is still judged."""
    store, clock, recorder = three_runs()
    store.claim_and_own("r2", PENDING, B, clock.now_ms())
    store.request_cancel("r2", clock.now_ms())
    store.transition_owned("r2", B, "suspended")
    store.claim_next(A, clock.now_ms())
    history = recorder.operations()
    cancel, suspend, call = history[-3:]
    assert call.value.run_id == "r2"
    # The cancel request and the suspension overlap: either order answers the same.
    both = [*history[:-3], attrs.evolve(cancel, returned_ns=suspend.returned_ns), suspend, call]
    assert check_history(both).ok
    assert check_history(took_r3(both)).status == "violation"


# -- claim_next_many takes the oldest ------------------------------------------------


def four_runs():
    """r1 running (A), r2, r3 and r4 pending; created a millisecond apart."""
    store, clock, recorder = recorded()
    for run_id in ("r1", "r2", "r3", "r4"):
        store.create(run_id, "{}")
        clock.advance(1)
    store.claim_and_own("r1", PENDING, A, clock.now_ms())
    return store, clock, recorder


def answered(history, *run_ids):
    """``history`` whose last operation, a claim_next_many, answered the rows of ``run_ids``
    (each as the model made the row it took, moved to that run)."""
    call = history[-1]
    model = call.value[0]
    rows = [
        attrs.evolve(model, run_id=run_id, created_at_ms=1_000 + int(run_id[1:]) - 1)
        for run_id in run_ids
    ]
    return [*history[:-1], attrs.evolve(call, value=rows)]


def test_claim_next_many_passing_over_an_older_claimable_run_is_a_violation():
    """A batch of two took r2 and r3; one that took r3 and r4 passed over r2, pending with no
    claim and untouched during the call."""
    store, clock, recorder = four_runs()
    taken = store.claim_next_many(B, clock.now_ms(), 2)
    assert [row.run_id for row in taken] == ["r2", "r3"]
    history = recorder.operations()
    verdict = check_history(history)
    assert verdict.ok, verdict.summary()
    assert rule(verdict, CLAIM_RULE).violations == ()
    planted = check_history(answered(history, "r3", "r4"))
    assert planted.status == "violation"
    assert all(p.result == "linearizable" for p in planted.partitions)
    (violation,) = rule(planted, CLAIM_RULE).violations
    assert violation.key == f"claim_next_many {history[-1].id}"
    assert "r3, r4" in (violation.reason or "")
    assert "the older r2 was claimable" in (violation.reason or "")


def test_claim_next_many_short_of_its_limit_must_take_every_candidate():
    """A batch of up to three that took r2 and r3 while r4 was claimable left a run it had to
    take: a violation (r4's object had a candidate at every instant of the call); the same
    answer from a batch of two checks."""
    store, clock, recorder = four_runs()
    taken = store.claim_next_many(B, clock.now_ms(), 3)
    assert [row.run_id for row in taken] == ["r2", "r3", "r4"]
    history = recorder.operations()
    assert check_history(history).ok
    short = answered(history, "r2", "r3")
    assert check_history(short).status == "violation"
    call = short[-1]
    two = attrs.evolve(call, args=(*call.args[:2], 2))
    assert check_history([*short[:-1], two]).ok


def test_claim_next_many_may_pass_over_a_run_a_concurrent_write_holds():
    """A cancel request on r2 in flight during the batch may hold r2's row: a batch of two that
    took r3 and r4 is then legal; once the request no longer overlaps, it is a violation."""
    store, clock, recorder = four_runs()
    store.claim_next_many(B, clock.now_ms(), 2)
    store.request_cancel("r2", clock.now_ms())
    history = recorder.operations()
    holding, call = history[-1], history[-2]
    planted = answered(history[:-1], "r3", "r4")
    moved = attrs.evolve(holding, invoked_ns=call.invoked_ns - 1, returned_ns=call.returned_ns + 1)
    verdict = check_history([*planted, moved])
    assert verdict.ok, verdict.summary()
    assert check_history([*planted, holding]).status == "violation"


# -- purge never deletes what it must keep ---------------------------------------------


def purge_history(setup):
    """``setup(store, clock)`` builds runs; then a purge with cutoff 5 s
    after the last settle and a ``get`` of every run. Returns the history."""
    store, clock, recorder = recorded()
    runs = setup(store, clock)
    store.purge_settled(clock.now_ms())
    for run_id in runs:
        with contextlib.suppress(runstore.RunNotFoundError):
            store.get(run_id)
    return recorder.operations(), runs


def settled(store, clock, run_id, **create):
    store.create(run_id, "{}", **create)
    store.claim_and_own(run_id, PENDING, A, clock.now_ms())
    store.transition_owned(run_id, A, "completed")


def planted_purge(history, runs, deleted):
    """The history as a store that also deleted ``deleted`` would record it."""
    out = []
    purge = next(op for op in history if op.method == "purge_settled")
    for op in history:
        if op is purge:
            op = attrs.evolve(op, value=op.value + 1)
        elif op.method == "get" and op.args[0] == deleted and op.invoked_ns > purge.invoked_ns:
            op = attrs.evolve(op, status="error", error="not_found_row", value=None)
        out.append(op)
    return out


def unsettled(store, clock):
    store.create("r1", "{}")
    store.claim_and_own("r1", PENDING, A, clock.now_ms())
    clock.advance(60_000)
    return ["r1"]


def at_cutoff(store, clock):
    settled(store, clock, "r1")
    return ["r1"]  # the purge's cutoff is the settle's own instant: not before it


def unsettled_child(store, clock):
    settled(store, clock, "r1")
    store.create("r2", "{}", parent_run_id="r1")
    clock.advance(60_000)
    return ["r1", "r2"]


def unsettled_round(store, clock):
    settled(store, clock, "r1")
    store.create("r2", "{}", lineage_id="r1", round_ordinal=1)
    clock.advance(60_000)
    return ["r1", "r2"]


@pytest.mark.parametrize(
    "setup", [unsettled, at_cutoff, unsettled_child, unsettled_round], ids=lambda f: f.__name__
)
def test_a_purge_of_a_run_it_must_keep_is_a_violation(setup):
    """A store whose purge also took r1 (unsettled; finished at the cutoff;
    the parent of a live child; the first round of a live lineage) fails
    r1's object: no instant of the call had r1 eligible."""
    history, runs = purge_history(setup)
    assert check_history(history).ok
    assert next(op for op in history if op.method == "purge_settled").value == 0
    verdict = check_history(planted_purge(history, runs, "r1"))
    assert verdict.status == "violation"
    assert [p.key for p in verdict.violations] == ["r1"]


def test_a_purge_of_an_eligible_run_checks():
    """A run settled well before the cutoff, with no live child or round, is
    purged: the history checks, and one that kept it (answering 0, the run
    still there) fails."""

    def eligible(store, clock):
        settled(store, clock, "r1")
        clock.advance(60_000)
        return ["r1"]

    history, _ = purge_history(eligible)
    assert check_history(history).ok
    purge = next(op for op in history if op.method == "purge_settled")
    assert purge.value == 1
    kept = [attrs.evolve(op, value=0) if op is purge else op for op in history]
    assert check_history(kept).status == "violation"


def test_claim_next_is_not_judged_beside_a_write_the_checker_does_not_know():
    """An operation the checker excludes (a method it does not know) that may
    have written overlapped the call: it may have held r2's row, so taking
    r3 is not judged; once it no longer overlaps, it is."""
    store, clock, recorder = three_runs()
    store.claim_next(B, clock.now_ms())
    history = took_r3(recorder.operations())
    call = history[-1]
    unknown = operation(
        "claim_a_batch", A, clock.now_ms(), 2,
        invoked=call.invoked_ns - 1, returned=call.returned_ns + 1, value=[], id="many",
    )  # fmt: skip
    verdict = check_history([*history, unknown])
    assert verdict.ok, verdict.summary()
    assert rule(verdict, CLAIM_RULE).skipped == 1
    later = attrs.evolve(unknown, invoked_ns=call.returned_ns + 5, returned_ns=call.returned_ns + 9)
    assert check_history([*history, later]).status == "violation"


def test_claim_next_is_judged_on_the_taken_runs_own_lineage():
    """The root r1 of a lineage is pending and older than its round r2:
    a claim_next that took r2 passed over r1 on the same object (the call's
    own part there is set aside); taking r1 checks."""
    store, clock, recorder = recorded()
    store.create("r1", "{}")
    clock.advance(1)
    store.create("r2", "{}", lineage_id="r1", round_ordinal=1)
    clock.advance(1)
    store.claim_next(B, clock.now_ms())
    history = recorder.operations()
    call = history[-1]
    assert call.value.run_id == "r1"
    assert check_history(history).ok
    other = attrs.evolve(
        call.value,
        run_id="r2",
        created_at_ms=call.value.created_at_ms + 1,
        lineage_id="r1",
        round_ordinal=1,
    )
    verdict = check_history([*history[:-1], attrs.evolve(call, value=other)])
    assert all(p.result == "linearizable" for p in verdict.partitions)
    (violation,) = rule(verdict, CLAIM_RULE).violations
    assert "the older r1 was claimable" in (violation.reason or "")


def test_two_reads_in_turn_during_a_batch_see_it_whole_or_not_at_all():
    """No snapshot at all: a get of r1 showing the renewal, then a get of r2
    not showing it, both while the batch ran, split the batch in halves;
    in the other order (r2 old first, then r1 renewed) they fit."""
    history, _, _ = batch_history(lambda store: (store.get("r1"), store.get("r2")))
    *start, old_r1, old_r2, batch, new_r1, new_r2 = history
    assert batch.method == "heartbeat_many"

    def inside(op, slot):
        return attrs.evolve(
            op,
            invoked_ns=batch.invoked_ns + 2 * slot + 1,
            returned_ns=batch.invoked_ns + 2 * slot + 2,
        )

    assert batch.returned_ns > batch.invoked_ns + 6
    halves = [*start, old_r1, batch, inside(new_r1, 0), inside(old_r2, 1), new_r2]
    verdict = check_history(halves)
    assert all(p.result == "linearizable" for p in verdict.partitions)
    (violation,) = rule(verdict, BATCH_RULE).violations
    assert violation.key == f"heartbeat_many {batch.id}"
    fitting = [*start, old_r1, batch, inside(old_r2, 0), inside(new_r1, 1), new_r2]
    assert check_history(fitting).ok


def test_a_broken_rule_is_written_as_a_history_that_breaks_it_again(tmp_path):
    """The minimal sub-history of a torn snapshot, written as a history file
    (the snapshot as its read of the union's runs), is read back and judged a
    violation of the same rule again; so is a passed-over run's."""
    history, before, after = batch_history(lambda store: store.state())
    batch = history[-2]
    torn = during(attrs.evolve(history[-1], value=torn_state(before, after)), batch)
    (failing,) = check_history([*history[:-1], torn]).violations
    _, replayable, _ = write_violation(failing, tmp_path / "batch")
    again = check_history(load_history([replayable]))
    assert [v.key for v in rule(again, BATCH_RULE).violations] == [failing.key]
    store, clock, recorder = three_runs()
    store.claim_next(B, clock.now_ms())
    (failing,) = check_history(took_r3(recorder.operations())).violations
    _, replayable, _ = write_violation(failing, tmp_path / "claim")
    again = check_history(load_history([replayable]))
    assert [v.key for v in rule(again, CLAIM_RULE).violations] == [failing.key]
