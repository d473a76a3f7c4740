"""Shared fixtures for the ported upstream cases ("golden traces").

The golden tests are the third witness between the reference model and the
SQLite adapter: every expected value in them is derived from contract.md and
the seed (upstream-semantics.md §4 and §9.2), never copied from a store's
output. This module holds only the vocabulary they share: three owners, the
pending snapshot, evidence builders, the two-step activation most cases start
from, and checks that the lease and the run row agree.

Owners: ``OWNER_A`` and ``OWNER_B`` share a host (so same-host evidence applies
between them); ``OWNER_C`` lives on another host.
"""

from __future__ import annotations

from runstore import (
    Activated,
    Claimed,
    Lease,
    LivenessEvidence,
    ManualClock,
    OwnerId,
    OwnershipFact,
    RunRow,
    RunSnapshot,
    RunStore,
)

OWNER_A = OwnerId("host-a", 101, "owner-a")
OWNER_B = OwnerId("host-a", 202, "owner-b")
OWNER_C = OwnerId("host-b", 303, "owner-c")

PENDING = RunSnapshot("pending", None, None)

STALE_AFTER_MS = 30_000
SKEW_MS = 10_000


def stale_evidence(
    expected_owner: OwnerId, claimant: OwnerId, checked_at_ms: int
) -> LivenessEvidence:
    """Evidence of the kind the guide recipe picks for this host relation."""
    kind = (
        "same-host-pid-dead"
        if expected_owner.host_id == claimant.host_id
        else "cross-host-unreachable-stale"
    )
    return LivenessEvidence(expected_owner, checked_at_ms, kind)


def lease_expired(expected_owner: OwnerId, checked_at_ms: int) -> LivenessEvidence:
    """Host-neutral evidence: the lease itself is past the cutoff."""
    return LivenessEvidence(expected_owner, checked_at_ms, "lease-expired")


def activate_new(store: RunStore, clock: ManualClock, run_id: str, owner: OwnerId) -> RunRow:
    """Create a run and take it with claim + activate at the store clock's time.

    Afterwards the run is running under ``owner`` with heartbeat, start time and
    lease grant all equal to ``clock.now_ms()``.
    """
    store.create(run_id, "{}")
    pending = store.get(run_id)
    now = clock.now_ms()
    assert store.claim(run_id, pending.snapshot, owner, now) == Claimed(now)
    assert store.activate(run_id, owner, now, pending.snapshot) == Activated()
    row = store.get(run_id)
    assert row.status == "running"
    assert row.owner == owner
    assert row.heartbeat_at_ms == now
    return row


def lease_of(store: RunStore, run_id: str) -> Lease | None:
    """The strategy's lease for ``run_id`` as the store's whole state shows it."""
    found = [lease for lease in store.state().leases if lease.run_id == run_id]
    assert len(found) <= 1, f"more than one lease for {run_id!r}"
    return found[0] if found else None


def assert_lease_agrees(store: RunStore, run_id: str) -> None:
    """contract.md "Decided here" 2: the lease and the run row agree.

    No lease means no owner and no claim on the row; a lease's owner and
    heartbeat equal the row's, and its claim and claim time equal the row's.
    An empty lease is pruned (upstream-semantics.md §5.4, release/recover).
    """
    row = store.get(run_id)
    lease = lease_of(store, run_id)
    if lease is None:
        assert row.owner is None, f"{run_id}: row has an owner but no lease"
        assert row.claim is None, f"{run_id}: row has a claim but no lease"
        return
    assert lease.owner is not None or lease.claim is not None, f"{run_id}: empty lease kept"
    assert lease.owner == row.owner, f"{run_id}: lease owner {lease.owner} != row {row.owner}"
    assert lease.heartbeat_at_ms == row.heartbeat_at_ms, f"{run_id}: heartbeats differ"
    assert lease.claim == row.claim, f"{run_id}: lease claim {lease.claim} != row {row.claim}"
    assert lease.claimed_at_ms == row.claimed_at_ms, f"{run_id}: claim times differ"


def fact(
    run_id: str, transition: str, owner: OwnerId, granted_at_ms: int | None, position: int
) -> OwnershipFact:
    """An expected ownership fact (keeps the expected lists short)."""
    return OwnershipFact(run_id, transition, owner, granted_at_ms, position)  # type: ignore[arg-type]


def replay(facts: list[OwnershipFact]) -> tuple[OwnerId | None, tuple[OwnerId, int] | None]:
    """Rebuild (owner, claim) from a run's facts by contract.md's replay rule.

    ``claimed``/``stolen(X, t)`` sets the claim to (X, t); ``activated(X, t)``
    makes X owner and clears the claim; ``released(X, None)`` clears the owner
    and any claim; ``released(X, t)`` and ``expired(X, t)`` clear the claim.
    """
    owner: OwnerId | None = None
    claim: tuple[OwnerId, int] | None = None
    for position, item in enumerate(facts, start=1):
        assert item.position == position, f"fact positions not dense: {facts}"
        if item.transition in ("claimed", "stolen"):
            assert item.granted_at_ms is not None
            claim = (item.owner, item.granted_at_ms)
        elif item.transition == "activated":
            owner, claim = item.owner, None
        elif item.transition == "released" and item.granted_at_ms is None:
            owner, claim = None, None
        else:
            claim = None
    return owner, claim


def assert_facts_replay_to_row(store: RunStore, run_id: str) -> None:
    """Replaying the run's facts rebuilds the row's owner and claim."""
    row = store.get(run_id)
    owner, claim = replay(store.ownership_facts(run_id))
    assert owner == row.owner
    row_claim = None if row.claim is None else (row.claim, row.claimed_at_ms)
    assert claim == row_claim
