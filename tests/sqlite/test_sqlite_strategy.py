"""The strategy is authoritative, and takes part in the store's transaction.

Upstream's OwnershipTransitions "strategy is authoritative" cases, made by
editing ``flows_consensus_leases`` behind the store (so ``SqlConsensus``
itself disagrees with the row) or by a double that loses on purpose:

- where the strategy refuses what the row admitted, the answer is the
  row-classified loss (contract.md, Decided here 3);
- where ``claim_and_own`` changed the lease and then lost a later strategy
  call, the whole operation rolls back: no lease change, no fact, no row
  write, no revision (Decided here 1);
- a strategy that fails is ``persistence_failed`` with nothing changed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from runstore import (
    Activated,
    ClaimChanged,
    Claimed,
    ClaimLost,
    FenceLost,
    LivenessEvidence,
    ManualClock,
    NotFound,
    RunSnapshot,
    RunStoreError,
    SnapshotChanged,
    Transitioned,
)
from runstore.consensus import ConsensusError, Lease, Lost, Rejected, SqlConsensus
from runstore.sqlite import SqliteRunStore

from .._sqlite import OTHER, OWNER, PENDING, THIRD, logical_dump, open_store, raw


class Double:
    """SqlConsensus, except for the methods given as overrides."""

    def __init__(self, **overrides: Callable[..., Any]) -> None:
        self.inner = SqlConsensus()
        self.overrides = overrides

    def __getattr__(self, name: str) -> Any:
        if name in self.overrides:
            override = self.overrides[name]
            return lambda *args: override(self.inner, *args)
        return getattr(self.inner, name)


@pytest.fixture(params=["memory", "file"])
def where(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def opened(where: str, tmp_path: Path) -> Iterator[Callable[..., SqliteRunStore]]:
    stores: list[SqliteRunStore] = []

    def make(clock: ManualClock, consensus: Any = None) -> SqliteRunStore:
        folder = tmp_path / f"s{len(stores)}"
        folder.mkdir()
        store = open_store(where, clock, folder, consensus)
        stores.append(store)
        return store

    yield make
    for store in stores:
        store.close()


def _lease_edit(store: SqliteRunStore, sql: str, *params: Any) -> None:
    raw(store).execute(sql, params)


def test_a_claim_the_lease_refuses_is_the_rows_loss(
    opened: Callable[..., SqliteRunStore], clock: ManualClock
) -> None:
    """The row admits a claim, the lease already holds one: SnapshotChanged, nothing written."""
    store = opened(clock)
    store.create("run", "{}")
    _lease_edit(
        store,
        "INSERT INTO flows_consensus_leases (run_id, claim_host_id, claim_pid, claim_nonce, "
        "claimed_at_ms) VALUES ('run', ?, ?, ?, 0)",
        THIRD.host_id,
        THIRD.pid,
        THIRD.nonce,
    )
    before = logical_dump(store)
    assert store.claim("run", PENDING, OWNER, 0) == SnapshotChanged()
    assert store.claim_and_own("run", PENDING, OWNER, 0) == SnapshotChanged()
    assert logical_dump(store) == before


def test_a_steal_refused_by_a_live_lease_is_the_rows_loss(
    opened: Callable[..., SqliteRunStore], clock: ManualClock
) -> None:
    """The row looks stale but the lease is fresh: the steal loses as the row
    classifies it, and nothing is written."""
    store = opened(clock)
    store.create("run", "{}")
    assert store.claim_and_own("run", PENDING, OWNER, 0) == Activated()
    clock.set(40_000)
    _lease_edit(store, "UPDATE flows_consensus_leases SET heartbeat_at_ms = 39000")
    before = logical_dump(store)
    evidence = LivenessEvidence(OWNER, 40_000, "lease-expired")
    assert store.steal("run", store.get("run"), OTHER, 40_000, evidence) == SnapshotChanged()
    assert store.claim_and_own("run", store.get("run"), OTHER, 40_000, evidence) == (
        SnapshotChanged()
    )
    assert logical_dump(store) == before


def test_a_recovery_the_lease_refuses_is_claim_changed(
    opened: Callable[..., SqliteRunStore], clock: ManualClock
) -> None:
    """The row still shows the stale claim, the lease a different one: ClaimChanged."""
    store = opened(clock)
    store.create("run", "{}")
    assert store.claim("run", PENDING, OTHER, 0) == Claimed(0)
    clock.set(40_000)
    _lease_edit(store, "UPDATE flows_consensus_leases SET claimed_at_ms = 1")
    before = logical_dump(store)
    evidence = LivenessEvidence(OTHER, 40_000, "lease-expired")
    assert store.recover_claim("run", OTHER, 0, THIRD, 40_000, evidence) == ClaimChanged()
    assert logical_dump(store) == before


def test_a_transition_the_guard_refuses_is_fence_lost(
    opened: Callable[..., SqliteRunStore], clock: ManualClock
) -> None:
    """The row names the owner, the lease another: FenceLost, the row untouched."""
    store = opened(clock)
    store.create("run", "{}")
    assert store.claim_and_own("run", PENDING, OWNER, 0) == Activated()
    _lease_edit(store, "UPDATE flows_consensus_leases SET owner_nonce = 'someone-else'")
    before = logical_dump(store)
    assert store.transition_owned("run", OWNER, "completed", '{"done":1}') == FenceLost()
    assert logical_dump(store) == before


def test_a_renewed_lease_over_a_row_not_owned_is_fence_lost_or_not_found(
    opened: Callable[..., SqliteRunStore], clock: ManualClock
) -> None:
    """The lease renews, but the row is not the owner's (FenceLost) or is gone (NotFound)."""
    store = opened(clock)
    store.create("run", "{}")
    for run_id in ("run", "ghost"):
        _lease_edit(
            store,
            "INSERT INTO flows_consensus_leases (run_id, owner_host_id, owner_pid, owner_nonce, "
            "granted_at_ms, heartbeat_at_ms) VALUES (?, ?, ?, ?, 0, 0)",
            run_id,
            OWNER.host_id,
            OWNER.pid,
            OWNER.nonce,
        )
    assert store.heartbeat("run", OWNER, 5) == FenceLost()
    assert store.reconfirm("run", OWNER, 5) == FenceLost()
    assert store.heartbeat("ghost", OWNER, 5) == NotFound()
    assert store.get("run").heartbeat_at_ms is None


def test_an_activation_the_strategy_no_longer_holds_clears_the_claim(
    opened: Callable[..., SqliteRunStore], clock: ManualClock
) -> None:
    """activate: the strategy answers Lost, so the row's claim is cleared and the
    claim reported lost; no fact is recorded."""
    store = opened(clock, Double(activate=lambda inner, *args: Lost()))
    store.create("run", "{}")
    assert store.claim("run", PENDING, OTHER, 0) == Claimed(0)
    revision = store.revision()
    facts = store.ownership_facts("run")
    assert store.activate("run", OTHER, 0, PENDING) == ClaimLost()
    row = store.get("run")
    assert row.claim is None
    assert row.claimed_at_ms is None
    assert row.status == "pending"
    assert store.revision() == revision + 1
    assert store.ownership_facts("run") == facts


def test_a_grant_then_a_lost_activation_rolls_claim_and_own_back_whole(
    opened: Callable[..., SqliteRunStore], clock: ManualClock
) -> None:
    """Decided here 1: the lease was granted, then activation lost: no lease,
    no fact, no row write, same revision."""
    store = opened(clock, Double(activate=lambda inner, *args: Lost()))
    store.create("run", "{}")
    before = logical_dump(store)
    assert store.claim_and_own("run", PENDING, OWNER, 0) == SnapshotChanged()
    assert logical_dump(store) == before
    assert store.state().leases == ()


def test_a_re_own_that_cannot_re_grant_rolls_back_whole(
    opened: Callable[..., SqliteRunStore], clock: ManualClock
) -> None:
    """Decided here 1: re-owning released the lease, then the re-grant was
    refused: the owner keeps its lease and no 'released' fact stays."""
    refuse = {"on": False}

    def claim(inner: SqlConsensus, *args: Any) -> Any:
        return Rejected("unavailable") if refuse["on"] else inner.claim(*args)

    store = opened(clock, Double(claim=claim))
    store.create("run", "{}")
    assert store.claim_and_own("run", PENDING, OWNER, 0) == Activated()
    clock.set(40_000)
    refuse["on"] = True
    before = logical_dump(store)
    assert store.claim_and_own("run", store.get("run"), OWNER, 40_000) == SnapshotChanged()
    assert logical_dump(store) == before
    (lease,) = store.state().leases
    assert lease == Lease("run", OWNER, 0, 0, None, None)


def test_the_deliberate_clean_up_of_a_moved_snapshot_still_commits(
    opened: Callable[..., SqliteRunStore], clock: ManualClock
) -> None:
    """activate with a snapshot that moved gives its claim back and records it."""
    store = opened(clock)
    store.create("run", "{}")
    assert store.claim("run", PENDING, OTHER, 0) == Claimed(0)
    revision = store.revision()
    moved = RunSnapshot("suspended", None, None)
    assert store.activate("run", OTHER, 0, moved) == SnapshotChanged()
    assert store.get("run").claim is None
    assert store.state().leases == ()
    assert store.revision() == revision + 1
    assert store.ownership_facts("run")[-1].transition == "released"
    store.check_invariants()


@pytest.mark.parametrize("method", ["claim", "activate", "heartbeat", "guard", "release_ownership"])
def test_a_failing_strategy_is_persistence_failed_and_changes_nothing(
    opened: Callable[..., SqliteRunStore], clock: ManualClock, method: str
) -> None:
    """A strategy raising ConsensusError('persistence_failed') anywhere rolls the
    operation back and surfaces as persistence_failed."""
    failing = {"on": False}

    def fail(inner: SqlConsensus, *args: Any) -> Any:
        if failing["on"]:
            raise ConsensusError("persistence_failed", "the lease service is down")
        return getattr(inner, method)(*args)

    store = opened(clock, Double(**{method: fail}))
    store.create("run", "{}")
    store.create("owned", "{}")
    assert store.claim_and_own("owned", PENDING, OWNER, 0) == Activated()
    failing["on"] = True
    before = logical_dump(store)
    calls = {
        "claim": lambda: store.claim_and_own("run", PENDING, OWNER, 0),
        "activate": lambda: store.claim_and_own("run", PENDING, OWNER, 0),
        "heartbeat": lambda: store.heartbeat("owned", OWNER, 5),
        "guard": lambda: store.transition_owned("owned", OWNER, "completed"),
        "release_ownership": lambda: store.transition_owned("owned", OWNER, "completed"),
    }
    with pytest.raises(RunStoreError) as caught:
        calls[method]()
    assert caught.value.code == "persistence_failed"
    assert caught.value.cause["consensus_code"] == "persistence_failed"
    assert logical_dump(store) == before


def test_a_strategy_defect_propagates_after_rolling_back(
    opened: Callable[..., SqliteRunStore], clock: ManualClock
) -> None:
    """An exception that is not a ConsensusError is a defect: rolled back, re-raised."""

    def broken(inner: SqlConsensus, *args: Any) -> Any:
        inner.release_ownership(*args)
        raise ZeroDivisionError

    store = opened(clock, Double(release_ownership=broken))
    store.create("run", "{}")
    assert store.claim_and_own("run", PENDING, OWNER, 0) == Activated()
    before = logical_dump(store)
    with pytest.raises(ZeroDivisionError):
        store.transition_owned("run", OWNER, "suspended")
    assert logical_dump(store) == before
    assert store.transition_owned("run", OWNER, "running") == Transitioned()
