"""``claim_next_many``: up to ``limit`` of the oldest claimable runs, claimed
and activated in one transaction, oldest first, on every store (the model
and each adapter, PostgreSQL on both of its paths).

The model defines it (``runstore.model.ModelRunStore``); each store must
answer the same, write the same rows (one revision each) and facts, and
refuse bad input before writing anything. Under concurrency (real threads,
each with its own store and connection) two callers never take the same run.
"""

from __future__ import annotations

from typing import Any

import pytest

from runstore import ManualClock, OwnerId, RunSnapshot, RunStoreError

from .._stores import GENERAL_PATH_FACTORIES, STORE_FACTORIES
from .test_finding_work import needs, own, refused, settle

A = OwnerId("host-a", 1, "a1")
B = OwnerId("host-b", 2, "b1")
PENDING = RunSnapshot("pending", None, None)
EVERY_STORE = sorted(STORE_FACTORIES) + sorted(GENERAL_PATH_FACTORIES)

pytestmark = pytest.mark.parametrize("store", EVERY_STORE, indirect=True)


def _queue(store: Any, clock: ManualClock, *run_ids: str) -> None:
    """Create ``run_ids`` in that order, one millisecond apart."""
    for run_id in run_ids:
        store.create(run_id, f'{{"id": "{run_id}"}}')
        clock.advance(1)


def test_it_takes_the_oldest_runs_up_to_the_limit_oldest_first(
    store: Any, clock: ManualClock
) -> None:
    """Each run is claimed and activated as claim_next would take it, one revision and the
    facts ``claimed``, ``activated`` each; the rows come back as ``get`` then reads them."""
    needs(store, "claim_next_many")
    _queue(store, clock, "r3", "r1", "r2", "r0")  # ids out of creation order on purpose
    revision = store.revision()
    now = clock.now_ms()
    taken = store.claim_next_many(A, now, 3)
    assert [row.run_id for row in taken] == ["r3", "r1", "r2"]
    assert taken == [store.get(run_id) for run_id in ("r3", "r1", "r2")]
    for row in taken:
        assert (row.status, row.owner, row.heartbeat_at_ms, row.claim) == ("running", A, now, None)
        assert row.state_json == f'{{"id": "{row.run_id}"}}'
        assert [f.transition for f in store.ownership_facts(row.run_id)] == [
            "claimed",
            "activated",
        ]
    assert store.revision() == revision + 3
    assert [c.run_id for c in store.changes(revision)] == ["r3", "r1", "r2"]
    assert [row.run_id for row in store.claim_next_many(B, now, 1000)] == ["r0"]
    assert store.claim_next_many(A, now, 5) == []


def test_it_skips_claimed_owned_and_settled_runs_and_honours_status(
    store: Any, clock: ManualClock
) -> None:
    needs(store, "claim_next_many")
    _queue(store, clock, "claimed", "owned", "done", "suspended", "free", "later")
    store.claim("claimed", PENDING, B, clock.now_ms())
    own(store, "owned", B, clock.now_ms())
    settle(store, clock, "done")
    own(store, "suspended", B, clock.now_ms())
    store.transition_owned("suspended", B, "suspended")
    clock.advance(100_000)  # staleness does not matter: running runs are never taken
    now = clock.now_ms()
    assert [row.run_id for row in store.claim_next_many(A, now, 5, status="suspended")] == [
        "suspended"
    ]
    assert [row.run_id for row in store.claim_next_many(A, now, 5, status="pending")] == [
        "free",
        "later",
    ]
    assert store.claim_next_many(A, now, 5) == []


def test_with_nothing_to_take_it_writes_nothing(store: Any, clock: ManualClock) -> None:
    needs(store, "claim_next_many")
    _queue(store, clock, "r")
    own(store, "r", A, clock.now_ms())
    before = store.state()
    assert store.claim_next_many(B, clock.now_ms(), 10) == []
    assert store.state() == before


def test_one_run_whose_state_is_corrupt_refuses_the_whole_call(
    store: Any, clock: ManualClock
) -> None:
    """The third run it would take does not decode: decode_failed, and the two before it
    are not claimed either."""
    needs(store, "claim_next_many")
    from runstore.stateful._targets._builtin import raw_writer_for

    _queue(store, clock, "a", "b", "c", "d")
    writer = raw_writer_for(lambda clock, path: store)
    assert writer is not None
    assert writer(store, "c", '{"v":"\\ud800"}') is True
    before = store.state()
    with pytest.raises(RunStoreError) as caught:
        store.claim_next_many(A, clock.now_ms(), 3)
    assert (caught.value.code, caught.value.method) == ("decode_failed", "claim_next_many")
    assert store.state() == before
    # Asked for fewer, it never reaches the broken run.
    assert [row.run_id for row in store.claim_next_many(A, clock.now_ms(), 2)] == ["a", "b"]
    writer(store, "c", "{}")  # healed, so the fixture's invariant check passes


def test_it_admits_owner_reading_limit_and_statuses(store: Any, clock: ManualClock) -> None:
    needs(store, "claim_next_many")
    _queue(store, clock, "r")
    before = store.state()
    now = clock.now_ms()
    refused(lambda: store.claim_next_many(("h", 1, "n"), now, 1), "owner")
    refused(lambda: store.claim_next_many(A, now + 10_001, 1), "now_ms")
    for limit in (0, -1, 1001, 2.0, True, "3", None):
        refused(lambda limit=limit: store.claim_next_many(A, now, limit), "limit")
    refused(lambda: store.claim_next_many(A, now, 1, status="running"), "status")
    refused(lambda: store.claim_next_many(A, now, 1, status=()), "status")
    assert store.state() == before
    assert len(store.claim_next_many(A, now, 1000)) == 1  # the bound itself is admitted
