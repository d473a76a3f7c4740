"""A torn snapshot of a ``heartbeat_many`` among many calls in flight, as a
torture of ``race_heartbeat_many_one_by_one`` on PostgreSQL records it: the
batch rule proves it a violation in bounded work (model applications counted,
never timed).

The batch rule searches one object made of the objects of the batch's runs.
Their calls are independent of one another, but a search of the union meets
every interleaving of them, and a violation is only proved once every one is
exhausted: on such a history from a torture the rule took over 15 minutes.
The union's objects are now taken one by one first: in what orders can the
batch and the snapshot come on each? A snapshot that must come after the
batch on one object and before it on another has no place in any order of
the union."""

from __future__ import annotations

import itertools

import attrs

import runstore.model
from runstore import ManualClock, OwnerId, RunSnapshot
from runstore.stateful import HistoryRecorder, RecordingClock, check_history
from runstore.stateful._histories._linearize import BATCH_RULE, check_partition
from runstore.stateful._histories._rules import batch_objects
from runstore.stateful._histories._spec import partition_operations

A = OwnerId("host-a", 1, "a")
PENDING = RunSnapshot("pending", None, None)
RUNS = 8
READS = 4


def crowded(torn: bool) -> list:
    """``RUNS`` runs owned by A, one ``heartbeat_many`` of them all, and in flight with it
    ``READS`` reads of each run (half before the batch, half after) and a ``state()``
    snapshot: whole (as after the batch) or, with ``torn``, showing the first run renewed
    and the others not."""
    ticks = itertools.count(1_000, 1_000)
    clock = ManualClock(1_000)
    recorder = HistoryRecorder(process="p", now_ns=lambda: next(ticks))
    store = recorder.record(runstore.model.ModelRunStore(RecordingClock(clock)))
    runs = [f"r{n}" for n in range(RUNS)]
    for run_id in runs:
        store.create(run_id, "{}")
        store.claim_and_own(run_id, PENDING, A, clock.now_ms())
    clock.advance(5_000)
    setup = len(recorder.operations())
    before = store.state()
    for run_id in runs:
        for _ in range(READS // 2):
            store.get(run_id)
    store.heartbeat_many(A, runs, clock.now_ms())
    for run_id in runs:
        for _ in range(READS // 2):
            store.get(run_id)
    after = store.state()
    ops = recorder.operations()
    batch = next(op for op in ops if op.method == "heartbeat_many")
    span = {"invoked_ns": batch.invoked_ns - 500, "returned_ns": batch.returned_ns + 500}
    history = list(ops[:setup])
    for op in ops[setup:]:
        if op.method == "get":
            # Every read in flight with every other and with the batch.
            history.append(attrs.evolve(op, **span))
        elif op is batch:
            history.append(op)
    snapshot = after
    if torn:
        first = runs[0]

        def pick(items, mine):
            return tuple(item for item in items if (item.run_id == first) == mine)

        snapshot = attrs.evolve(
            after,
            rows=pick(after.rows, True) + pick(before.rows, False),
            leases=pick(after.leases, True) + pick(before.leases, False),
        )
    state = next(op for op in ops[setup:] if op.method == "state")
    history.append(attrs.evolve(state, value=snapshot, **span))
    return history


#: The model applications the whole check of ``crowded`` may take.
BOUND = 100_000


def test_a_torn_snapshot_among_many_calls_is_proved_a_violation_in_bounded_work(applications):
    verdict = check_history(crowded(torn=True))
    assert all(p.result == "linearizable" for p in verdict.partitions)
    rule = next(r for r in verdict.rules if r.rule == BATCH_RULE)
    (violation,) = rule.violations
    assert violation.minimal is not None
    # The minimal sub-history keeps the batch and the snapshot.
    assert {op.method for op in violation.minimal} >= {"heartbeat_many", "state/part"}
    assert applications[0] < BOUND, applications[0]


def test_the_same_history_whole_passes_in_bounded_work(applications):
    verdict = check_history(crowded(torn=False))
    assert verdict.ok, verdict.summary()
    assert next(r for r in verdict.rules if r.rule == BATCH_RULE).judged == 1
    assert applications[0] < BOUND, applications[0]


def test_a_search_of_the_union_alone_meets_every_interleaving(applications):
    """What the objects one by one save: the union's own search of the torn history spends
    the whole check's bound and has not proved it (nor ten times that: over 30 s)."""
    history = crowded(torn=True)
    partitions, _ = partition_operations(history)
    orders = {}
    for partition in partitions:
        found = check_partition(partition, shrink_violations=False)
        orders[partition.key] = found.linearization
    (union,), _ = batch_objects(history, partitions, orders)
    (start,) = union.starts
    applications[0] = 0
    searched = check_partition(
        union.partition, shrink_violations=False, start=start, max_steps=BOUND
    )
    assert searched.result == "unchecked"
    assert applications[0] >= BOUND
