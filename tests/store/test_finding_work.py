"""Finding work, renewing many leases, purging: ``list_runs``, ``claim_next``,
``heartbeat_many``, ``purge_settled``, ``purge_candidates`` and
``compact_changes`` on every store.

The model defines them (``runstore.model.ModelRunStore``); every store that
offers them must answer the same. A store that does not offer an operation yet
is skipped for it, with the reason.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest

from runstore import (
    Activated,
    Claimed,
    FenceLost,
    LivenessEvidence,
    ManualClock,
    NotFound,
    OwnerId,
    RunChange,
    RunPage,
    RunSnapshot,
    RunStore,
    RunStoreError,
    Updated,
)

from .._stores import STORE_FACTORIES

A = OwnerId("host-a", 1, "a1")
B = OwnerId("host-b", 2, "b1")
PENDING = RunSnapshot("pending", None, None)
STALE = 30_000


def needs(store: RunStore, *names: str) -> None:
    for name in names:
        if not callable(getattr(store, name, None)):
            pytest.skip(f"{type(store).__name__} does not offer {name} yet")


def own(store: Any, run_id: str, owner: OwnerId, now: int) -> None:
    row = store.get(run_id)
    assert store.claim_and_own(run_id, row.snapshot, owner, now) == Activated()


def settle(store: Any, clock: ManualClock, run_id: str, status: str = "completed") -> None:
    own(store, run_id, A, clock.now_ms())
    assert type(store.transition_owned(run_id, A, status)).__name__ == "Transitioned"


def keys(page: RunPage) -> list[str]:
    return [row.run_id for row in page.runs]


def walk(store: Any, **filters: Any) -> list[str]:
    found: list[str] = []
    after = None
    while True:
        page = store.list_runs(after=after, **filters)
        found += keys(page)
        if page.next is None:
            return found
        after = page.next


def refused(call: Callable[[], object], field: str) -> None:
    with pytest.raises(RunStoreError) as caught:
        call()
    assert caught.value.code == "invalid_run"
    assert caught.value.cause["field"] == field


# -- list_runs ---------------------------------------------------------------------


def test_an_empty_store_lists_one_empty_last_page(store: RunStore) -> None:
    """No runs: no rows and no cursor."""
    needs(store, "list_runs")
    assert store.list_runs() == RunPage((), None)  # type: ignore[attr-defined]


def test_runs_are_listed_oldest_first_then_by_id(store: Any, clock: ManualClock) -> None:
    """The order is (created_at_ms, run_id): the creation time first, ids by code point."""
    needs(store, "list_runs")
    clock.set(10)
    for run_id in ("b", "é", "a", "B"):
        store.create(run_id, "{}")
    clock.set(5_000)
    store.create("0-later", "{}")
    assert keys(store.list_runs()) == ["B", "a", "b", "é", "0-later"]


def test_pages_chain_by_cursor_and_the_last_page_says_so(store: Any, clock: ManualClock) -> None:
    """limit caps a page; next resumes after its last row; an exact fit ends
    without an empty extra page."""
    needs(store, "list_runs")
    for number in range(4):
        clock.advance(1)
        store.create(f"r{number}", "{}")
    first = store.list_runs(limit=2)
    assert keys(first) == ["r0", "r1"]
    assert first.next is not None
    second = store.list_runs(limit=2, after=first.next)
    assert keys(second) == ["r2", "r3"]
    assert second.next is None
    assert walk(store, limit=3) == ["r0", "r1", "r2", "r3"]
    assert walk(store, limit=1) == ["r0", "r1", "r2", "r3"]


def test_a_run_matching_throughout_a_walk_is_listed_exactly_once(
    store: Any, clock: ManualClock
) -> None:
    """Writes between pages (heartbeats, claims, new runs) never repeat or skip
    a run that matched the whole time; new runs join at the end."""
    needs(store, "list_runs")
    for number in range(6):
        clock.advance(1)
        store.create(f"r{number}", "{}")
    own(store, "r0", A, clock.now_ms())
    seen: list[str] = []
    page = store.list_runs(limit=2)
    seen += keys(page)
    store.heartbeat("r0", A, clock.now_ms())
    own(store, "r3", B, clock.now_ms())
    clock.advance(1)
    store.create("late", "{}")
    while page.next is not None:
        page = store.list_runs(limit=2, after=page.next)
        seen += keys(page)
        store.heartbeat("r0", A, clock.now_ms())
    assert seen == ["r0", "r1", "r2", "r3", "r4", "r5", "late"]


def test_rows_come_without_state_unless_asked(store: Any) -> None:
    """state_json is None by default; with_state=True gives exactly what get gives."""
    needs(store, "list_runs")
    store.create("r", '{"secret": "sk-123"}')
    (bare,) = store.list_runs().runs
    assert bare.state_json is None
    assert "sk-123" not in repr(bare)
    (full,) = store.list_runs(with_state=True).runs
    assert full == store.get("r")
    assert full.state_json == '{"secret": "sk-123"}'
    import attrs

    assert attrs.evolve(full, state_json=None) == bare


def test_status_filters_take_one_or_several(store: Any, clock: ManualClock) -> None:
    needs(store, "list_runs")
    for run_id in ("p", "r", "s", "c"):
        store.create(run_id, "{}")
    own(store, "r", A, clock.now_ms())
    own(store, "s", A, clock.now_ms())
    store.transition_owned("s", A, "suspended")
    settle(store, clock, "c", "failed")
    assert walk(store, status="running") == ["r"]
    assert walk(store, status=("pending", "suspended")) == ["p", "s"]
    assert walk(store, status=["failed"]) == ["c"]
    assert walk(store, status=frozenset({"completed"})) == []


def test_claimable_stale_and_claim_stale_filters(store: Any, clock: ManualClock) -> None:
    """claimable: pending/suspended with no claim; stale: running with a heartbeat
    older than the cutoff; claim_stale: a claim granted before the cutoff."""
    needs(store, "list_runs")
    clock.set(100_000)
    for run_id in ("free", "claimed", "owned", "old"):
        store.create(run_id, "{}")
    assert store.claim("claimed", PENDING, B, 100_000) == Claimed(100_000)
    own(store, "owned", A, 100_000)
    own(store, "old", A, 60_000 + 10_000)  # a reading behind the clock
    now = 100_000
    assert walk(store, claimable_at=now) == ["free"]
    # 70 000 < 100 000 - 30 000 is false: exactly at the edge is fresh.
    assert walk(store, stale_at=now) == []
    assert walk(store, stale_at=now + 1) == ["old"]
    assert walk(store, stale_at=now + STALE + 1) == ["old", "owned"]
    assert walk(store, claim_stale_at=now + STALE) == []
    assert walk(store, claim_stale_at=now + STALE + 1) == ["claimed"]
    assert walk(store, claimable_at=now, status="suspended") == []


def test_cancel_requested_means_requested_and_not_acknowledged(
    store: Any, clock: ManualClock
) -> None:
    needs(store, "list_runs")
    for run_id in ("quiet", "asked", "seen"):
        store.create(run_id, "{}")
    own(store, "seen", A, clock.now_ms())
    store.request_cancel("asked", clock.now_ms())
    store.request_cancel("seen", clock.now_ms())
    assert store.acknowledge_cancel("seen", A, clock.now_ms()) is True
    assert walk(store, cancel_requested=True) == ["asked"]
    assert walk(store, cancel_requested=False) == ["quiet", "seen"]


def test_lineage_and_parent_filters(store: Any, clock: ManualClock) -> None:
    """lineage_id lists the lineage's rounds (as lineage() does); parent_run_id the forks."""
    needs(store, "list_runs")
    store.create("root", "{}")
    clock.advance(1)
    store.create("round-2", "{}", lineage_id="root", round_ordinal=2)
    clock.advance(1)
    store.create("fork", "{}", parent_run_id="root")
    store.create("other", "{}")
    assert walk(store, lineage_id="root") == ["root", "round-2"]
    assert sorted(walk(store, lineage_id="root")) == sorted(r.run_id for r in store.lineage("root"))
    assert walk(store, parent_run_id="root") == ["fork"]
    assert walk(store, lineage_id="nobody") == []
    assert walk(store, lineage_id="root", status="pending", parent_run_id="root") == []


def test_list_runs_refuses_bad_filters_and_writes_nothing(store: Any) -> None:
    needs(store, "list_runs")
    store.create("r", "{}")
    before = store.state()
    refused(lambda: store.list_runs(status="done"), "status")
    refused(lambda: store.list_runs(status=()), "status")
    refused(lambda: store.list_runs(status=("running", 3)), "status")
    refused(lambda: store.list_runs(limit=0), "limit")
    refused(lambda: store.list_runs(limit=1001), "limit")
    refused(lambda: store.list_runs(limit=True), "limit")
    refused(lambda: store.list_runs(after="rs1.garbage"), "after")
    refused(lambda: store.list_runs(after=123), "after")
    refused(lambda: store.list_runs(stale_at=-1), "stale_at")
    refused(lambda: store.list_runs(claimable_at=1.5), "claimable_at")
    refused(lambda: store.list_runs(cancel_requested=1), "cancel_requested")
    refused(lambda: store.list_runs(lineage_id=""), "lineage_id")
    refused(lambda: store.list_runs(with_state=1), "with_state")
    assert store.state() == before


# -- claim_next ----------------------------------------------------------------------


def test_claim_next_takes_the_oldest_unclaimed_run(store: Any, clock: ManualClock) -> None:
    """It claims and activates as claim_and_own would, and returns the row with state."""
    needs(store, "claim_next")
    store.create("young", "{}")
    clock.advance(5)
    store.create("old", '{"n": 1}')  # created later, so younger: "young" is the oldest
    revision = store.revision()
    row = store.claim_next(A, clock.now_ms())
    assert row is not None
    assert row.run_id == "young"
    assert row == store.get("young")
    assert (row.status, row.owner, row.heartbeat_at_ms) == ("running", A, clock.now_ms())
    assert [fact.transition for fact in store.ownership_facts("young")] == ["claimed", "activated"]
    assert store.revision() == revision + 1
    second = store.claim_next(B, clock.now_ms())
    assert second is not None
    assert second.run_id == "old"
    assert second.state_json == '{"n": 1}'
    assert store.claim_next(A, clock.now_ms()) is None


def test_claim_next_skips_claimed_owned_and_settled_runs(store: Any, clock: ManualClock) -> None:
    needs(store, "claim_next")
    for run_id in ("claimed", "owned", "done", "suspended", "free"):
        clock.advance(1)
        store.create(run_id, "{}")
    store.claim("claimed", PENDING, B, clock.now_ms())
    own(store, "owned", B, clock.now_ms())
    settle(store, clock, "done")
    own(store, "suspended", B, clock.now_ms())
    store.transition_owned("suspended", B, "suspended")
    clock.advance(100_000)  # staleness does not matter: running runs are never taken
    only_suspended = store.claim_next(A, clock.now_ms(), status="suspended")
    assert only_suspended is not None
    assert only_suspended.run_id == "suspended"
    row = store.claim_next(A, clock.now_ms())
    assert row is not None
    assert row.run_id == "free"
    assert store.claim_next(A, clock.now_ms()) is None


def test_claim_next_with_nothing_to_take_writes_nothing(store: Any, clock: ManualClock) -> None:
    needs(store, "claim_next")
    store.create("r", "{}")
    own(store, "r", A, clock.now_ms())
    before = store.state()
    assert store.claim_next(B, clock.now_ms()) is None
    assert store.state() == before


def test_claim_next_of_a_run_whose_state_is_corrupt_raises_and_writes_nothing(
    store: Any, clock: ManualClock
) -> None:
    """The row it would return does not decode: decode_failed, nothing claimed."""
    needs(store, "claim_next")
    from runstore.stateful._targets._builtin import raw_writer_for

    store.create("r", "{}")
    writer = raw_writer_for(lambda clock, path: store)
    assert writer is not None
    assert writer(store, "r", '{"v":"\\ud800"}') is True
    before = store.state()
    with pytest.raises(RunStoreError) as caught:
        store.claim_next(A, clock.now_ms())
    assert (caught.value.code, caught.value.method) == ("decode_failed", "claim_next")
    assert store.state() == before
    writer(store, "r", "{}")  # healed, so the fixture's invariant check passes


def test_claim_next_admits_owner_reading_and_statuses(store: Any, clock: ManualClock) -> None:
    needs(store, "claim_next")
    store.create("r", "{}")
    before = store.state()
    refused(lambda: store.claim_next(("h", 1, "n"), 0), "owner")
    refused(lambda: store.claim_next(A, clock.now_ms() + 10_001), "now_ms")
    refused(lambda: store.claim_next(A, 0, status="running"), "status")
    refused(lambda: store.claim_next(A, 0, status=()), "status")
    assert store.state() == before


# -- heartbeat_many --------------------------------------------------------------------


def _fleet(store: Any, clock: ManualClock) -> None:
    """A's runs a1, a2 and a3 (a3 then stolen by B), B's b1, a pending run, a settled run."""
    clock.set(100_000)
    for run_id in ("a1", "a2", "a3", "b1", "pending", "done"):
        store.create(run_id, "{}")
    for run_id in ("a1", "a2", "a3"):
        own(store, run_id, A, 100_000)
    own(store, "b1", B, 100_000)
    settle(store, clock, "done")
    clock.set(140_000)
    evidence = LivenessEvidence(A, 140_000, "cross-host-unreachable-stale")
    stale = store.get("a3").snapshot
    assert store.claim_and_own("a3", stale, B, 140_000, evidence) == Activated()
    store.heartbeat("a2", A, 139_000)


def test_heartbeat_many_answers_each_run_as_heartbeat_alone(
    store: Any, clock: ManualClock, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Each answer, the resulting state and the revisions equal heartbeats
    one by one in run id order on an identical store."""
    needs(store, "heartbeat_many")
    twin_clock = ManualClock(0)
    twin_path = tmp_path / "twin"
    twin_path.mkdir()
    twin = STORE_FACTORIES[request.node.callspec.params["store"]](twin_clock, twin_path)
    try:
        _fleet(store, clock)
        _fleet(twin, twin_clock)
        ids = ["pending", "a3", "a1", "missing", "b1", "done", "a2"]
        answers = store.heartbeat_many(A, ids, 140_500)
        assert list(answers) == ids
        expected = {run_id: twin.heartbeat(run_id, A, 140_500) for run_id in sorted(ids)}
        assert answers == {run_id: expected[run_id] for run_id in ids}
        assert answers["a1"] == answers["a2"] == Updated()
        assert answers["a3"] == answers["b1"] == answers["pending"] == FenceLost()
        assert answers["missing"] == NotFound()
        assert store.state() == twin.state()
    finally:
        twin.close()


def test_heartbeat_many_of_nothing_answers_nothing(store: Any, clock: ManualClock) -> None:
    needs(store, "heartbeat_many")
    store.create("r", "{}")
    before = store.state()
    assert store.heartbeat_many(A, [], clock.now_ms()) == {}
    assert store.heartbeat_many(A, ("r",), clock.now_ms()) == {"r": FenceLost()}
    assert store.state() == before


def test_heartbeat_many_refuses_the_whole_call_on_one_bad_id(
    store: Any, clock: ManualClock
) -> None:
    needs(store, "heartbeat_many")
    _fleet(store, clock)
    before = store.state()
    refused(lambda: store.heartbeat_many(A, ["a1", "a1"], 140_000), "run_ids")
    refused(lambda: store.heartbeat_many(A, ["a1", ""], 140_000), "run_ids")
    refused(lambda: store.heartbeat_many(A, "a1", 140_000), "run_ids")
    refused(lambda: store.heartbeat_many(A, {"a1"}, 140_000), "run_ids")
    refused(lambda: store.heartbeat_many(("h", 1, "n"), ["a1"], 140_000), "owner")
    refused(lambda: store.heartbeat_many(A, ["a1"], 150_001), "now_ms")
    assert store.state() == before


# -- purge_settled and compact_changes ----------------------------------------------------


def test_purge_settled_deletes_old_settled_runs_and_leaves_tombstones(
    store: Any, clock: ManualClock
) -> None:
    """Terminal runs finished strictly before the cutoff go, with their facts;
    each deletion takes a revision and leaves a tombstone; live runs stay."""
    needs(store, "purge_settled")
    for run_id in ("keep-live", "old", "edge", "new"):
        store.create(run_id, '{"k": 1}')
    clock.set(1_000)
    settle(store, clock, "old")
    clock.set(2_000)
    settle(store, clock, "edge", "cancelled")
    clock.set(3_000)
    settle(store, clock, "new", "failed")
    revision = store.revision()
    assert store.purge_settled(2_000) == 1
    assert store.revision() == revision + 1
    assert sorted(row.run_id for row in store.state().rows) == ["edge", "keep-live", "new"]
    with pytest.raises(RunStoreError) as caught:
        store.get("old")
    assert caught.value.code == "not_found_row"
    assert store.ownership_facts("old") == []
    assert store.changes(revision) == [RunChange("old", revision + 1, True)]
    assert store.purge_settled(2_001) == 1
    assert store.purge_settled(1_000_000) == 1
    assert [row.run_id for row in store.state().rows] == ["keep-live"]
    assert store.purge_settled(1_000_000) == 0


def test_purge_settled_takes_the_oldest_first_up_to_the_limit(
    store: Any, clock: ManualClock
) -> None:
    needs(store, "purge_settled")
    for run_id in ("z", "y", "x"):
        store.create(run_id, "{}")
    for at, run_id in ((10, "y"), (20, "z"), (30, "x")):
        clock.set(at)
        settle(store, clock, run_id)
    revision = store.revision()
    assert store.purge_settled(100, limit=2) == 2
    assert [row.run_id for row in store.state().rows] == ["x"]
    # The batch's deletions are numbered in run id order.
    assert store.changes(revision) == [
        RunChange("y", revision + 1, True),
        RunChange("z", revision + 2, True),
    ]


def test_a_live_lineage_round_keeps_the_whole_lineage(store: Any, clock: ManualClock) -> None:
    needs(store, "purge_settled")
    store.create("root", "{}")
    store.create("round-2", "{}", lineage_id="root", round_ordinal=2)
    settle(store, clock, "root")
    clock.advance(10)
    assert store.purge_settled(clock.now_ms()) == 0
    settle(store, clock, "round-2")
    clock.advance(10)
    assert store.purge_settled(clock.now_ms()) == 2
    assert store.lineage("root") == []


def test_a_parent_waits_for_its_children(store: Any, clock: ManualClock) -> None:
    """A run that any run names as parent is not purged; its children go first."""
    needs(store, "purge_settled")
    store.create("parent", "{}")
    store.create("child", "{}", parent_run_id="parent")
    settle(store, clock, "parent")
    clock.advance(10)
    assert store.purge_settled(clock.now_ms()) == 0
    settle(store, clock, "child")
    clock.advance(10)
    assert store.purge_settled(clock.now_ms()) == 1
    assert [row.run_id for row in store.state().rows] == ["parent"]
    assert store.purge_settled(clock.now_ms()) == 1
    assert store.state().rows == ()


def test_a_purged_id_can_be_created_again(store: Any, clock: ManualClock) -> None:
    """The tombstone gives way to a live entry; the fact stream starts again at 1."""
    needs(store, "purge_settled")
    store.create("r", "{}")
    settle(store, clock, "r")
    clock.advance(1)
    assert store.purge_settled(clock.now_ms()) == 1
    store.create("r", '{"again": true}')
    assert store.get("r").status == "pending"
    assert store.changes(0) == [RunChange("r", store.revision(), False)]
    own(store, "r", B, clock.now_ms())
    assert [fact.position for fact in store.ownership_facts("r")] == [1, 2]


def test_purge_settled_deletes_the_runs_attempts(store: Any, clock: ManualClock) -> None:
    needs(store, "purge_settled")
    from runstore.attempts import Attempt, AttemptId
    from runstore.model import ModelAttemptStore, ModelRunStore

    attempts: Any
    if isinstance(store, ModelRunStore):
        attempts = ModelAttemptStore(store)
    else:
        from runstore.attempts import AttemptStore

        attempts = AttemptStore(store)
    store.create("r", "{}")
    own(store, "r", A, clock.now_ms())
    attempts.put(Attempt("r", "step", 1, "running", 0, meta={}), A)
    store.transition_owned("r", A, "completed")
    clock.advance(1)
    assert store.purge_settled(clock.now_ms()) == 1
    store.create("r", "{}")
    assert attempts.get(AttemptId("r", "step", 1)) is None


def test_compact_changes_drops_old_tombstones_only(store: Any, clock: ManualClock) -> None:
    needs(store, "purge_settled", "compact_changes")
    for run_id in ("a", "b", "live"):
        store.create(run_id, "{}")
    settle(store, clock, "a")
    settle(store, clock, "b")
    clock.advance(1)
    assert store.purge_settled(clock.now_ms()) == 2
    revision = store.revision()
    tombstones = [change for change in store.changes(0) if change.deleted]
    assert [change.run_id for change in tombstones] == ["a", "b"]
    assert store.compact_changes(tombstones[0].revision) == 1
    assert [change.run_id for change in store.changes(0)] == ["live", "b"]
    assert store.compact_changes(revision) == 1
    assert [change.run_id for change in store.changes(0)] == ["live"]
    assert store.revision() == revision
    store.check_invariants()


def test_purge_candidates_lists_what_purge_settled_then_takes(
    store: Any, clock: ManualClock
) -> None:
    """Batch after batch, ``purge_candidates`` answers exactly the runs the
    next ``purge_settled`` with the same arguments deletes, in its order
    (oldest finished first, then run id), as rows without state, and writes
    nothing: over plain runs, a lineage held by a live round, a settled
    lineage, a parent waiting for its child, and runs finished too late."""
    needs(store, "purge_settled", "purge_candidates")
    for run_id in ("p-2", "p-1", "p-3", "live", "late"):
        store.create(run_id, '{"secret": 1}')
    store.create("held-root", "{}")
    store.create("held-2", "{}", lineage_id="held-root", round_ordinal=2)
    store.create("held-3", "{}", lineage_id="held-root", round_ordinal=3)
    store.create("done-root", "{}")
    store.create("done-2", "{}", lineage_id="done-root", round_ordinal=2)
    store.create("parent", "{}")
    store.create("child", "{}", parent_run_id="parent")
    for at, run_id in (
        (100, "p-1"),
        (100, "p-3"),
        (110, "held-root"),
        (120, "parent"),
        (130, "done-2"),
        (140, "p-2"),
        (150, "held-2"),
        (160, "done-root"),
        (170, "child"),
        (900, "late"),
    ):
        clock.set(at)
        settle(store, clock, run_id)
    cutoff = 500
    assert [row.run_id for row in store.purge_candidates(cutoff)] == [
        "p-1",
        "p-3",
        "done-2",
        "p-2",
        "done-root",
        "child",
    ]
    batches: list[list[str]] = []
    while True:
        before = store.state()
        listed = store.purge_candidates(cutoff, limit=2)
        assert store.state() == before  # nothing written
        for row in listed:
            assert row.state_json is None
            assert row == attrs.evolve(store.get(row.run_id), state_json=None)
        revision = store.revision()
        assert store.purge_settled(cutoff, limit=2) == len(listed)
        deleted = [change.run_id for change in store.changes(revision) if change.deleted]
        assert sorted(deleted) == sorted(row.run_id for row in listed)
        if not listed:
            break
        batches.append([row.run_id for row in listed])
    assert batches == [["p-1", "p-3"], ["done-2", "p-2"], ["done-root", "child"], ["parent"]]
    left = sorted(row.run_id for row in store.state().rows)
    assert left == ["held-2", "held-3", "held-root", "late", "live"]


def test_purge_and_compact_admit_their_arguments(store: Any) -> None:
    needs(store, "purge_settled", "compact_changes")
    store.create("r", "{}")
    before = store.state()
    refused(lambda: store.purge_settled(-1), "before_ms")
    refused(lambda: store.purge_settled(10, limit=0), "limit")
    refused(lambda: store.purge_settled(10, limit=10_001), "limit")
    if callable(getattr(store, "purge_candidates", None)):
        refused(lambda: store.purge_candidates(-1), "before_ms")
        refused(lambda: store.purge_candidates(10, limit=10_001), "limit")
        with pytest.raises(RunStoreError) as caught:
            store.purge_candidates(10, limit=0)
        assert caught.value.method == "purge_candidates"
    refused(lambda: store.compact_changes(True), "through_revision")
    refused(lambda: store.compact_changes(1, limit=None), "limit")
    assert store.state() == before
