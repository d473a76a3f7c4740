"""A history shaped like a long torture's: hundreds of ``purge_settled`` calls
over dozens of objects, with calls of unknown outcome that make the revision
count enumerate each object's orders. It is checked in bounded work: model
applications counted, never timed.

Each ``purge_settled`` call is split into a part per object, so such a history
holds tens of thousands of parts. Before the parts were limited to the
objects that existed when the call ran, and before the enumerating search
kept its tally of purge parts sparse, a history like this took minutes."""

from __future__ import annotations

import itertools

import attrs

import runstore.model
from runstore import ManualClock, OwnerId
from runstore.stateful import HistoryRecorder, RecordingClock, check_history
from runstore.stateful._histories._history import Operation


def purge_heavy_history(
    runs: int, purges_per_run: int
) -> tuple[list[Operation], runstore.StoreState, runstore.StoreState]:
    """``runs`` runs, each created, owned, heartbeaten twice at one stamp (the
    second answer lost: it wrote, and only the revision shows it) and
    completed, with ``purges_per_run`` purges after each, every purge in flight
    with the call after it; also the initial and final states."""
    ticks = itertools.count(1_000, 1_000)
    clock = ManualClock(1_000_000)
    recorder = HistoryRecorder(process="client", now_ns=lambda: next(ticks))
    store = recorder.record(runstore.model.ModelRunStore(RecordingClock(clock)))
    me = OwnerId("host-1", 7, "n1")
    initial = store.wrapped.state()
    for n in range(runs):
        run_id = f"r{n}"
        store.create(run_id, "{}")
        row = store.get(run_id)
        store.claim_and_own(run_id, row.snapshot, me, clock.now_ms())
        store.heartbeat(run_id, me, clock.now_ms())
        store.heartbeat(run_id, me, clock.now_ms())
        store.transition_owned(run_id, me, "completed", "{}")
        for _ in range(purges_per_run):
            clock.advance(1_000)
            store.purge_settled(clock.now_ms() - 5_000)
    final = store.wrapped.state()
    recorded = recorder.operations()
    history = []
    beaten: set[str] = set()
    for k, op in enumerate(recorded):
        if op.method == "heartbeat" and op.args[0] in beaten:
            op = attrs.evolve(op, returned_ns=None, status="pending", unknown=True, value=None)
        elif op.method == "heartbeat":
            beaten.add(op.args[0])
        elif op.method == "purge_settled" and k + 1 < len(recorded):
            op = attrs.evolve(op, returned_ns=recorded[k + 1].invoked_ns + 10)
        history.append(op)
    return history, initial, final


RUNS = 40
PURGES_PER_RUN = 15


def test_hundreds_of_purges_over_dozens_of_objects_check_in_bounded_work(applications):
    """600 purges over 40 objects, every object with a write of unknown outcome
    that only the revision shows: linearizable, the revision count and every
    purge answer checked, in work linear in the parts (each purge has parts
    only on the objects created before it returned)."""
    history, initial, final = purge_heavy_history(RUNS, PURGES_PER_RUN)
    purges = sum(1 for op in history if op.method == "purge_settled")
    assert purges == RUNS * PURGES_PER_RUN
    verdict = check_history(history, initial=initial, final=final)
    assert verdict.ok, verdict.summary()
    assert verdict.revision is not None
    assert verdict.revision.result == "ok"
    # The found orders miss the lost heartbeats' writes: the counts were enumerated.
    assert verdict.revision.found != verdict.revision.final - verdict.revision.initial
    parts = sum(len(p.history) for p in verdict.partitions)
    # Object n has a part of the purges after its creation only: about half of
    # runs x purges, not all of them.
    assert parts <= len(history) + purges * RUNS * 0.55
    assert applications[0] <= 8 * parts


def test_a_purge_answer_off_by_one_in_such_a_history_is_caught(applications):
    """The same history with one purge answering a run more than it deleted: a
    counts violation, found in the same bounded work."""
    history, initial, final = purge_heavy_history(RUNS, PURGES_PER_RUN)
    k = next(
        k
        for k, op in enumerate(history)
        if op.method == "purge_settled" and op.value == 1 and k > len(history) // 2
    )
    history[k] = attrs.evolve(history[k], value=2)
    verdict = check_history(history, initial=initial, final=final)
    assert verdict.status == "violation"
    assert verdict.revision is not None
    assert verdict.revision.result == "violation"
    parts = sum(len(p.history) for p in verdict.partitions)
    assert applications[0] <= 8 * parts
