"""The invariants of the operations that work across runs fire on steps that break them.

``UnclaimableTaken`` (``claim_next`` took a claimed, owned or settled run),
``SettledPurgeViolation`` (a purge took a live run, a run with a live round or
a child, a run finished too late, or skipped older ones), ``TombstoneLost`` (a
deletion left the feed other than by compaction), ``PageWalkBroken`` (a page
walk repeated or skipped a run), and the fence of ``heartbeat_many``
(``UnfencedWriteAccepted``). Each is shown firing on a hand-made step and,
where a zoo store plants the bug, on that store's own step; the reference
model's histories with these operations pass them all.
"""

from __future__ import annotations

import attrs
import pytest

from runstore import (
    Activated,
    FenceLost,
    ManualClock,
    OwnerId,
    RunChange,
    RunPage,
    RunSnapshot,
    StoreState,
    Updated,
)
from runstore.model import ModelRunStore
from runstore.stateful import (
    Call,
    Judge,
    PageWalkBroken,
    SettledPurgeViolation,
    Step,
    TombstoneLost,
    UnclaimableTaken,
    UnfencedWriteAccepted,
    check_page_walk,
    check_state,
    check_transition,
)

from ...zoo import claim_next_takes_claimed, purge_ignores_live_round

A = OwnerId("h1", 1, "n0")
B = OwnerId("h2", 1, "n0")
PENDING = RunSnapshot("pending", None, None)


def step(method: str, outcome: object, **arguments: object) -> Step:
    return Step(Call(method, tuple(arguments.items())), outcome)


def settled(store: ModelRunStore, clock: ManualClock, run_id: str) -> None:
    assert store.claim_and_own(run_id, store.get(run_id).snapshot, A, clock.now_ms()) == (
        Activated()
    )
    store.transition_owned(run_id, A, "completed")


def test_claim_next_taking_a_claimed_run_fires() -> None:
    clock = ManualClock(1_000)
    store = ModelRunStore(clock)
    store.create("a", "{}")
    store.claim("a", PENDING, B, 1_000)
    before = store.state()
    taken = attrs.evolve(
        store.get("a"), status="running", owner=A, heartbeat_at_ms=1_000, claim=None
    )
    with pytest.raises(UnclaimableTaken):
        check_transition(before, before, step("claim_next", taken, owner=A, now_ms=1_000))


def test_the_zoo_claim_next_that_clears_a_claim_trips_unclaimable_taken() -> None:
    clock = ManualClock(1_000)
    store = claim_next_takes_claimed.factory(clock, None)
    judge = Judge(store)
    judge.call("create", "a", "{}")
    judge.call("claim", "a", PENDING, B, 1_000)
    with pytest.raises(UnclaimableTaken):
        judge.call("claim_next", A, 1_000)


def test_purging_a_settled_round_of_a_live_lineage_fires() -> None:
    clock = ManualClock(1_000)
    store = ModelRunStore(clock)
    store.create("root", "{}")
    store.create("round-2", "{}", lineage_id="root", round_ordinal=2)
    settled(store, clock, "root")
    before = store.state()
    after = attrs.evolve(
        before,
        rows=tuple(row for row in before.rows if row.run_id != "root"),
        facts=tuple(fact for fact in before.facts if fact.run_id != "root"),
        revision=before.revision + 1,
        changes=(*before.changes[1:], RunChange("root", before.revision + 1, True)),
    )
    with pytest.raises(SettledPurgeViolation):
        check_transition(before, after, step("purge_settled", 1, before_ms=5_000))


def test_the_zoo_purge_without_the_lineage_rule_trips_settled_purge_violation() -> None:
    clock = ManualClock(1_000)
    store = purge_ignores_live_round.factory(clock, None)
    judge = Judge(store)
    judge.call("create", "root", "{}")
    judge.call("create", "round-2", "{}", lineage_id="root", round_ordinal=2)
    judge.call("claim_and_own", "root", PENDING, A, 1_000)
    judge.call("transition_owned", "root", A, "completed")
    clock.advance(5)
    with pytest.raises(SettledPurgeViolation):
        judge.call("purge_settled", clock.now_ms())


def test_a_purge_that_skips_the_oldest_or_miscounts_fires() -> None:
    clock = ManualClock(1_000)
    store = ModelRunStore(clock)
    for run_id in ("x", "y"):
        store.create(run_id, "{}")
    settled(store, clock, "x")
    clock.advance(10)
    settled(store, clock, "y")
    before = store.state()
    # "y" finished later than "x": a limit of one must take "x".
    kept_x = attrs.evolve(
        before,
        rows=tuple(row for row in before.rows if row.run_id != "y"),
        facts=tuple(fact for fact in before.facts if fact.run_id != "y"),
        revision=before.revision + 1,
        changes=(
            *(change for change in before.changes if change.run_id != "y"),
            RunChange("y", before.revision + 1, True),
        ),
    )
    with pytest.raises(SettledPurgeViolation):
        check_transition(before, kept_x, step("purge_settled", 1, before_ms=99_999, limit=1))
    with pytest.raises(SettledPurgeViolation):
        check_transition(before, kept_x, step("purge_settled", 2, before_ms=99_999))


def test_a_tombstone_lost_outside_compaction_fires() -> None:
    clock = ManualClock(1_000)
    store = ModelRunStore(clock)
    for run_id in ("a", "b"):
        store.create(run_id, "{}")
    settled(store, clock, "a")
    clock.advance(1)
    assert store.purge_settled(clock.now_ms()) == 1
    before = store.state()
    forgotten = attrs.evolve(
        before, changes=tuple(change for change in before.changes if not change.deleted)
    )
    with pytest.raises(TombstoneLost):
        check_transition(before, forgotten, step("changes", [], after_revision=0))
    # Compaction may drop it, at or below its cutoff only.
    tomb = next(change for change in before.changes if change.deleted)
    check_transition(before, forgotten, step("compact_changes", 1, through_revision=tomb.revision))
    with pytest.raises(TombstoneLost):
        check_transition(
            before, forgotten, step("compact_changes", 1, through_revision=tomb.revision - 1)
        )


def test_compaction_dropping_a_live_entry_fires() -> None:
    clock = ManualClock(1_000)
    store = ModelRunStore(clock)
    store.create("a", "{}")
    before = store.state()
    dropped = attrs.evolve(before, changes=())
    with pytest.raises(TombstoneLost):
        check_transition(before, dropped, step("compact_changes", 0, through_revision=9))


def test_a_page_walk_that_repeats_or_skips_fires() -> None:
    clock = ManualClock(1_000)
    store = ModelRunStore(clock)
    for run_id in ("a", "b", "c"):
        store.create(run_id, "{}")
    rows = store.list_runs().runs
    first, rest = RunPage(rows[:2], "x"), RunPage(rows[2:], None)
    check_page_walk([first, rest], [["a", "b", "c"], ["a", "b", "c"]])
    with pytest.raises(PageWalkBroken):
        check_page_walk([first, RunPage(rows[1:], None)], [["a", "b", "c"]] * 2)
    with pytest.raises(PageWalkBroken):
        check_page_walk([RunPage(rows[:1], "x"), rest], [["a", "b", "c"]] * 2)


def test_heartbeat_many_renewing_a_run_of_another_owner_fires() -> None:
    clock = ManualClock(1_000)
    store = ModelRunStore(clock)
    store.create("a", "{}")
    store.claim_and_own("a", PENDING, B, 1_000)
    before = store.state()
    with pytest.raises(UnfencedWriteAccepted):
        check_transition(
            before,
            before,
            step("heartbeat_many", {"a": Updated()}, owner=A, run_ids=["a"], now_ms=1_000),
        )
    moved = attrs.evolve(
        before,
        rows=(attrs.evolve(before.rows[0], heartbeat_at_ms=1_500),),
        revision=before.revision + 1,
        changes=(RunChange("a", before.revision + 1, False),),
    )
    with pytest.raises(UnfencedWriteAccepted):
        check_transition(
            before,
            moved,
            step("heartbeat_many", {"a": FenceLost()}, owner=A, run_ids=["a"], now_ms=1_500),
        )


def test_the_models_histories_with_these_operations_pass_every_invariant() -> None:
    clock = ManualClock(1_000)
    store = ModelRunStore(clock)
    judge = Judge(store, reference=True)
    for run_id in ("a", "b", "c"):
        clock.advance(1)
        judge.call("create", run_id, "{}")
    judge.call("create", "fork", "{}", parent_run_id="a")
    judge.call("claim", "b", PENDING, B, clock.now_ms())
    taken = judge.call("claim_next", A, clock.now_ms())
    assert taken.run_id == "a"
    judge.call("heartbeat_many", A, ["c", "a", "b", "never"], clock.now_ms() + 1)
    judge.call("transition_owned", "a", A, "completed")
    clock.advance(10)
    assert judge.call("purge_settled", clock.now_ms()) == 0  # "fork" names "a"
    assert judge.call("claim_next", A, clock.now_ms()).run_id == "c"
    judge.call("transition_owned", "c", A, "failed")
    clock.advance(10)
    assert judge.call("purge_settled", clock.now_ms()) == 1
    judge.call("list_runs", limit=1)
    revision = store.revision()
    assert judge.call("compact_changes", revision) == 1
    judge.call("create", "c", "{}")
    state: StoreState = store.state()
    check_state(state)
