"""The linearizability checker on hand-made histories: the classic register
examples adapted to runs, known linearizable and known not, operations of
unknown outcome, the caps, the replay clock, partitioning, and the files a
violation is written to.

Times are plain integers (nanoseconds); ``op(..., invoked=a, returned=b)``
builds one recorded call, ``returned=None`` a pending one, and ``clock`` lists
the store-clock readings the store took for it.
"""

from __future__ import annotations

import os
import stat

import attrs

from runstore import (
    Activated,
    AlreadyClaimed,
    CancelRequested,
    Claimed,
    FenceLost,
    LivenessEvidence,
    ManualClock,
    NotFound,
    OwnerId,
    RunRow,
    RunSnapshot,
    Transitioned,
    Updated,
)
from runstore.model import ModelRunStore
from runstore.stateful import check_history, load_history, operation, write_violation
from runstore.stateful._histories._linearize import shrink
from runstore.stateful._histories._spec import (
    FINAL_STATE,
    initial_state,
    make_node,
    project_store_state,
)

A = OwnerId("host-a", 1, "a")
B = OwnerId("host-b", 2, "b")
PENDING = RunSnapshot("pending", None, None)


def op(method, *args, invoked, returned, clock=(), **kwargs):
    return operation(method, *args, invoked=invoked, returned=returned, clock=clock, **kwargs)


def create(run_id="r", invoked=0, returned=10, at=0, **kwargs):
    return op("create", run_id, "{}", invoked=invoked, returned=returned, clock=[at], **kwargs)


def fresh(run_id="r", state="{}", **changes):
    """The row of a run just created at store time 0."""
    row = RunRow(
        run_id, "pending", 0, None, None, None, None, None, None, None, None, None, None, state
    )
    return attrs.evolve(row, **changes)


def row_after(*calls):
    """The model's row of ``r`` after ``calls`` (method, args, clock) run in order."""
    readings: list[int] = []

    class Clock:
        def now_ms(self):
            return readings.pop(0) if readings else 0

    model = ModelRunStore(Clock())
    for method, args, kwargs, clock in calls:
        readings[:] = list(clock)
        getattr(model, method)(*args, **kwargs)
    return model.get("r")


# -- the classic examples -----------------------------------------------------------


def test_two_overlapping_claims_both_claimed_are_a_violation():
    """Two claims of one pending run that both answer Claimed: in no order can
    the second find the run unclaimed. The violation names the run."""
    history = [
        create(),
        op("claim", "r", PENDING, A, 5, invoked=20, returned=40, clock=[5], value=Claimed(5)),
        op("claim", "r", PENDING, B, 6, invoked=25, returned=45, clock=[6], value=Claimed(6)),
    ]
    verdict = check_history(history)
    assert verdict.status == "violation"
    assert not verdict.ok
    (failing,) = verdict.violations
    assert failing.key == "r"
    assert failing.minimal is not None
    assert len(failing.minimal) == 3


def test_one_claimed_one_already_claimed_overlapping_is_linearizable():
    """The loser answered AlreadyClaimed while the winner's claim was in flight."""
    history = [
        create(),
        op("claim", "r", PENDING, A, 5, invoked=20, returned=40, clock=[5], value=Claimed(5)),
        op("claim", "r", PENDING, B, 6, invoked=25, returned=45, clock=[6], value=AlreadyClaimed()),
    ]
    assert check_history(history).ok


def test_already_claimed_before_the_claim_began_is_a_violation():
    """The register's "read returned the new value before the write began": a
    claim answered AlreadyClaimed and returned before the only claim started."""
    history = [
        create(),
        op("claim", "r", PENDING, B, 6, invoked=15, returned=18, clock=[6], value=AlreadyClaimed()),
        op("claim", "r", PENDING, A, 5, invoked=20, returned=40, clock=[5], value=Claimed(5)),
    ]
    assert check_history(history).status == "violation"


def test_a_read_after_a_completed_create_cannot_miss_it():
    """A create returned; a later get answering not_found_row is a stale read
    (a violation); the same get overlapping the create is fine."""
    stale = op("get", "r", invoked=20, returned=30, error="not_found_row")
    assert check_history([create(), stale]).status == "violation"
    overlapping = attrs.evolve(stale, invoked_ns=5)
    assert check_history([create(), overlapping]).ok


def _stolen_run() -> list:
    """A owns r from 0; B steals it at 40 000 and activates at 40 001."""
    evidence = LivenessEvidence(A, 40_000, "cross-host-unreachable-stale")
    running = RunSnapshot("running", A, 0)
    return [
        create(),
        op("claim_and_own", "r", PENDING, A, 0, None, invoked=20, returned=30, clock=[0],
           value=Activated()),
        op("steal", "r", running, B, 40_000, evidence, invoked=100, returned=110,
           clock=[40_000], value=Claimed(40_000)),
        op("activate", "r", B, 40_000, running, invoked=120, returned=130, clock=[40_001],
           value=Activated()),
    ]  # fmt: skip


def test_a_heartbeat_updated_after_a_steal_was_activated_is_a_violation():
    """The displaced owner's heartbeat answered Updated although B's activation
    had returned before it was invoked: the fence failed."""
    late = op("heartbeat", "r", A, 0, invoked=140, returned=150, clock=[40_002], value=Updated())
    verdict = check_history([*_stolen_run(), late])
    assert verdict.status == "violation"
    (failing,) = verdict.violations
    assert failing.explanation is not None
    assert any(result == ("ok", FenceLost()) for _, result in failing.explanation.blocked)


def test_a_heartbeat_overlapping_the_steal_may_have_come_first():
    """The same heartbeat, in flight while the steal and its activation ran, can
    be ordered between them (a pending claim does not stop a heartbeat)."""
    overlapping = op(
        "heartbeat", "r", A, 0, invoked=105, returned=125, clock=[40_002], value=Updated()
    )
    assert check_history([*_stolen_run(), overlapping]).ok


def test_reads_that_see_two_writes_in_two_orders_are_a_violation():
    """The register classic: two concurrent writes of the run's state; reads in
    sequence see the second, then the first again. Without the last read the
    history is linearizable."""
    started = [
        create(),
        op("claim_and_own", "r", PENDING, A, 0, None, invoked=20, returned=30, clock=[0],
           value=Activated()),
        op("transition_owned", "r", A, "running", '{"v":1}', None, invoked=40, returned=90,
           clock=[1], value=Transitioned()),
        op("transition_owned", "r", A, "running", '{"v":2}', None, invoked=41, returned=91,
           clock=[2], value=Transitioned()),
    ]  # fmt: skip
    base = row_after(
        ("create", ("r", "{}"), {}, [0]),
        ("claim_and_own", ("r", PENDING, A, 0, None), {}, [0]),
    )
    one, two = attrs.evolve(base, state_json='{"v":1}'), attrs.evolve(base, state_json='{"v":2}')
    reads = [
        op("get", "r", invoked=50, returned=52, value=one),
        op("get", "r", invoked=60, returned=62, value=two),
        op("get", "r", invoked=70, returned=72, value=one),
    ]
    assert check_history(started + reads[:2]).ok
    assert check_history(started + reads).status == "violation"


# -- unknown outcomes -----------------------------------------------------------------


def test_a_pending_claim_may_have_taken_effect_or_not():
    """A claim with no return (its process died): a later read may show its
    claim, or no claim; but a claim that showed cannot disappear again."""
    pending = op("claim", "r", PENDING, A, 5, invoked=20, returned=None, clock=[5])
    claimed = attrs.evolve(row_after(("create", ("r", "{}"), {}, [0])), claim=A, claimed_at_ms=5)
    unclaimed = row_after(("create", ("r", "{}"), {}, [0]))
    shows = op("get", "r", invoked=50, returned=60, value=claimed)
    hides = op("get", "r", invoked=70, returned=80, value=unclaimed)
    assert check_history([create(), pending, shows]).ok
    assert check_history([create(), pending, attrs.evolve(hides, invoked_ns=50)]).ok
    assert check_history([create(), pending, shows, hides]).status == "violation"


def test_persistence_failed_may_or_may_not_have_taken_effect():
    """An operation that raised persistence_failed is of unknown outcome: its
    effect may be visible later, or not."""
    failed = op(
        "claim", "r", PENDING, A, 5, invoked=20, returned=30, clock=[5], error="persistence_failed"
    )
    assert failed.unknown
    claimed = attrs.evolve(row_after(("create", ("r", "{}"), {}, [0])), claim=A, claimed_at_ms=5)
    assert check_history(
        [create(), failed, op("get", "r", invoked=50, returned=60, value=claimed)]
    ).ok
    plain = row_after(("create", ("r", "{}"), {}, [0]))
    assert check_history(
        [create(), failed, op("get", "r", invoked=50, returned=60, value=plain)]
    ).ok


def test_errors_are_compared_by_code():
    """A second create of the same id raises constraint: recorded as constraint it
    agrees; recorded as invalid_run it does not; a non-RunStoreError never does."""
    again = op("create", "r", "{}", invoked=20, returned=30, clock=[1], error="constraint")
    assert check_history([create(), again]).ok
    assert check_history([create(), attrs.evolve(again, error="invalid_run")]).status == "violation"
    crash = attrs.evolve(again, error="exception:TypeError")
    assert check_history([create(), crash]).status == "violation"


def test_too_many_unknown_writes_leave_the_object_unchecked():
    """Past max_unknown operations of unknown outcome that could write, an object
    is reported unchecked with the count, never passed; pending reads do not
    count."""
    pendings = [
        op("heartbeat", "r", A, 5, invoked=20 + i, returned=None, clock=[5]) for i in range(4)
    ]
    reads = [op("get", "r", invoked=40 + i, returned=None) for i in range(10)]
    verdict = check_history([create(), *pendings, *reads], max_unknown=3)
    assert verdict.status == "unchecked"
    assert not verdict.ok
    (partition,) = verdict.unchecked
    assert "too many operations of unknown outcome (4 > 3)" in (partition.reason or "")
    assert check_history([create(), *pendings, *reads], max_unknown=4).ok


def test_a_search_past_its_budget_is_unchecked():
    """max_steps bounds the model applications of one object's search."""
    history = [
        create(),
        op("claim", "r", PENDING, A, 5, invoked=20, returned=40, clock=[5], value=Claimed(5)),
    ]
    verdict = check_history(history, max_steps=1)
    assert verdict.status == "unchecked"
    assert "search budget" in (verdict.unchecked[0].reason or "")


# -- the replay clock -----------------------------------------------------------------


def test_store_clock_readings_may_go_backwards_between_operations():
    """Readings come from several hosts' clocks: a later operation may carry an
    earlier reading, and the model stamps what the store stamped."""
    later_but_behind = op(
        "claim_and_own", "r", PENDING, A, 100, None, invoked=20, returned=30, clock=[100],
        value=Activated(),
    )  # fmt: skip
    row = row_after(
        ("create", ("r", "{}"), {}, [500]),
        ("claim_and_own", ("r", PENDING, A, 100, None), {}, [100]),
    )
    assert row.created_at_ms == 500
    assert row.heartbeat_at_ms == 100
    read = op("get", "r", invoked=40, returned=50, value=row)
    assert check_history([create(at=500), later_but_behind, read]).ok


def test_an_operation_without_its_clock_readings_is_unchecked():
    """A create recorded without the store-clock reading the model needs cannot
    be replayed: the object is unchecked and the reason says why."""
    verdict = check_history([op("create", "r", "{}", invoked=0, returned=10)])
    assert verdict.status == "unchecked"
    assert "clock readings" in (verdict.unchecked[0].reason or "")


# -- objects ----------------------------------------------------------------------------


def test_runs_are_checked_as_independent_objects():
    """A violation on one run leaves the other run's verdict alone."""
    history = [
        create("r1"),
        create("r2"),
        op("get", "r1", invoked=20, returned=30, error="not_found_row"),
        op("get", "r2", invoked=20, returned=30, value=fresh("r2")),
    ]
    verdict = check_history(history)
    results = {p.key: p.result for p in verdict.partitions}
    assert results == {"r1": "violation", "r2": "linearizable"}


def test_a_lineage_is_one_object_with_its_lineage_cancel():
    """Rounds of a lineage are checked together: a lineage cancel must show on
    the root, and a read that misses it after it returned is a violation."""
    history = [
        create("root"),
        create("round", invoked=12, returned=14, lineage_id="root", round_ordinal=1),
        op("request_cancel_lineage", "round", 5, invoked=20, returned=30,
           value=CancelRequested(5)),
    ]  # fmt: skip
    (partition,) = check_history(history).partitions
    assert partition.runs == ("root", "round")
    marked = op(
        "get", "root", invoked=40, returned=50, value=fresh("root", cancel_requested_at_ms=5)
    )
    missed = attrs.evolve(marked, value=fresh("root"))
    assert check_history([*history, marked]).ok
    assert check_history([*history, missed]).status == "violation"


def test_whole_database_reads_and_unknown_methods_are_excluded_with_a_reason():
    """revision(), state() and methods this version does not know are listed as
    excluded, each with its reason; they do not fail the verdict."""
    history = [
        create(),
        op("revision", invoked=20, returned=30, value=1),
        op("frobnicate", "r", invoked=20, returned=30, value=None),
    ]
    verdict = check_history(history)
    assert verdict.ok
    reasons = {excluded.method: reason for excluded, reason in verdict.excluded}
    assert "revision counter" in reasons["revision"]
    assert reasons["frobnicate"] == "not an operation this checker knows"


def test_heartbeat_many_is_checked_as_one_heartbeat_per_run():
    """A multi-run heartbeat is split into per-run heartbeats with its interval:
    each answer must be what heartbeat alone would answer at some point."""
    owned = [
        create("r1"),
        create("r2"),
        op("claim_and_own", "r1", PENDING, A, 0, None, invoked=20, returned=30, clock=[0],
           value=Activated()),
        op("claim_and_own", "r2", PENDING, A, 0, None, invoked=20, returned=30, clock=[0],
           value=Activated()),
    ]  # fmt: skip
    both = op(
        "heartbeat_many", A, ["r1", "r2"], 5, invoked=40, returned=50, clock=[5],
        value={"r1": Updated(), "r2": Updated()},
    )  # fmt: skip
    assert check_history([*owned, both]).ok
    wrong = attrs.evolve(both, value={"r1": Updated(), "r2": FenceLost()})
    verdict = check_history([*owned, wrong])
    assert [p.key for p in verdict.violations] == ["r2"]
    refused = attrs.evolve(both, status="error", error="invalid_run", value=None)
    assert [reason for _, reason in check_history([*owned, refused]).excluded] == [
        "refused as a whole (invalid_run): nothing written"
    ]


def test_the_final_state_must_be_an_end_state_of_some_order():
    """A final-state read after everything: the store's rows, leases, facts and
    acknowledgements of the run must equal the model's after some order."""
    model = ModelRunStore(ManualClock(0))
    model.create("r", "{}")
    model.claim_and_own("r", PENDING, A, 0)
    final = model.state()
    history = [
        create(),
        op("claim_and_own", "r", PENDING, A, 0, None, invoked=20, returned=None, clock=[0]),
    ]

    def final_read(state):
        return op(
            FINAL_STATE, ("r",), invoked=100, returned=101, value=project_store_state(state, ["r"])
        )

    assert check_history([*history, final_read(final)]).ok
    lost_fact = attrs.evolve(final, facts=final.facts[:-1])
    assert check_history([*history, final_read(lost_fact)]).status == "violation"


def test_a_run_that_existed_before_recording_needs_the_initial_state():
    """initial= gives the store's state when recording began."""
    model = ModelRunStore(ManualClock(0))
    model.create("r", "{}")
    history = [op("get", "r", invoked=0, returned=5, value=model.get("r"))]
    assert check_history(history, initial=model.state()).ok
    assert check_history(history).status == "violation"


# -- shrinking and files ----------------------------------------------------------------


def test_a_violation_is_shrunk_and_written_readable_and_recheckable(tmp_path):
    """The minimal sub-history keeps the offending operation and what it needs
    (not the unrelated heartbeat); the text file shows run state only by
    digest; the history file is 0600 and checks as a violation again."""
    secret = '{"token":"s3cr3t"}'
    history = [
        op("create", "r", secret, invoked=0, returned=10, clock=[0]),
        op("claim", "r", PENDING, A, 5, invoked=30, returned=40, clock=[5], value=Claimed(5)),
        op("heartbeat", "r", A, 6, invoked=45, returned=46, clock=[6], value=FenceLost()),
        op("get", "r", invoked=47, returned=48,
           value=fresh(state=secret, claim=A, claimed_at_ms=5)),
        op("claim", "r", PENDING, B, 6, invoked=50, returned=60, clock=[6], value=Claimed(6)),
        *[op("request_cancel", "other", i, invoked=20 + i, returned=21 + i, value=NotFound())
          for i in range(5)],
    ]  # fmt: skip
    verdict = check_history(history)
    (failing,) = verdict.violations
    assert failing.key == "r"
    assert failing.minimal is not None
    assert [o.method for o in failing.minimal] == ["create", "claim", "claim"]
    text, jsonl, _timeline = write_violation(failing, tmp_path)
    report = text.read_text()
    assert "Not linearizable: object r" in report
    assert "the model answers AlreadyClaimed()" in report
    assert "s3cr3t" not in report
    assert stat.S_IMODE(os.stat(jsonl).st_mode) == 0o600
    assert "s3cr3t" in jsonl.read_text()
    assert check_history(load_history([jsonl])).status == "violation"


def test_a_shrink_without_a_culprit_never_drops_a_write_a_kept_operation_saw():
    """With no culprit to keep, the shrink may still drop reads anywhere and writes
    invoked after everything kept returned, but never the ``create`` a kept read
    observed: a lone read of a run nobody created is a violation the recording did
    not hold (it once came out as the "minimal" history of a purge race)."""
    history = [
        create(invoked=0, returned=10),
        op("get", "r", invoked=20, returned=30, value=fresh()),
        op("claim", "r", PENDING, A, 5, invoked=40, returned=50, clock=[5], value=Claimed(5)),
        op("claim", "r", PENDING, B, 6, invoked=60, returned=70, clock=[6], value=Claimed(6)),
        op("get", "r", invoked=80, returned=90, value=fresh()),
    ]  # fmt: skip
    start = make_node(initial_state(None, ["r"]))
    minimal = shrink(history, start)
    assert [o.method for o in minimal] == ["create", "claim", "claim"]
    kept = {o.id for o in minimal}
    # Every write left out was invoked after the last kept operation returned.
    assert all(o.method == "get" for o in history if o.id not in kept)
