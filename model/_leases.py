"""Reference lease arithmetic: one pure function per consensus decision.

Every function takes the run's current lease (``None`` when the run has none)
and returns the strategy's answer together with the lease that results. No
function mutates anything, reads a clock or keeps state, so the model store and
``ModelConsensus`` apply exactly the same rules, and a caller that discards
the returned lease has changed nothing.

A lease holds an owner (with the grant time that made it owner and its latest
heartbeat) and at most one pending claim (with its grant time). A lease with
neither is pruned: the functions return ``None`` for it. Staleness is judged
against the caller's ``now_ms`` with strict cutoffs: a heartbeat or claim
exactly ``HEARTBEAT_STALE_AFTER_MS`` old is still fresh.
"""

from __future__ import annotations

import attrs

from runstore._constants import HEARTBEAT_STALE_AFTER_MS
from runstore._values import Lease, LivenessEvidence, OwnerId
from runstore.consensus._types import (
    Cleared,
    Granted,
    GrantOutcome,
    Lost,
    Promoted,
    PromoteOutcome,
    RecoverOutcome,
    Rejected,
    Renewed,
    RenewOutcome,
)


def matches_evidence(
    expected_owner: OwnerId, observer: OwnerId, now_ms: int, evidence: LivenessEvidence
) -> bool:
    """Whether ``evidence`` speaks about ``expected_owner`` at exactly ``now_ms``,
    from a vantage point its kind allows for ``observer``.

    ``same-host-pid-dead`` can only be observed from the owner's own host,
    ``cross-host-unreachable-stale`` only from another host, and
    ``lease-expired`` from anywhere (the staleness cutoff is checked by the
    caller's predicate, not here).
    """
    if evidence.expected_owner != expected_owner or evidence.checked_at_ms != now_ms:
        return False
    if evidence.kind == "same-host-pid-dead":
        return expected_owner.host_id == observer.host_id
    if evidence.kind == "cross-host-unreachable-stale":
        return expected_owner.host_id != observer.host_id
    return evidence.kind == "lease-expired"


def is_stale(stamp_ms: int, now_ms: int) -> bool:
    """Whether a heartbeat or claim stamped at ``stamp_ms`` is stale at ``now_ms``."""
    return stamp_ms < now_ms - HEARTBEAT_STALE_AFTER_MS


def pruned(lease: Lease) -> Lease | None:
    """``lease``, or ``None`` when it holds neither an owner nor a claim."""
    if lease.owner is None and lease.claim is None:
        return None
    return lease


def holds(lease: Lease | None, owner: OwnerId) -> bool:
    """Whether ``owner`` is the lease's owner (a pending claim is not a lease)."""
    return lease is not None and lease.owner == owner


def _with_claim(lease: Lease | None, run_id: str, claimant: OwnerId, now_ms: int) -> Lease:
    if lease is None:
        return Lease(run_id, None, None, None, claimant, now_ms)
    return attrs.evolve(lease, claim=claimant, claimed_at_ms=now_ms)


def _without_claim(lease: Lease) -> Lease | None:
    return pruned(attrs.evolve(lease, claim=None, claimed_at_ms=None))


def claim(
    lease: Lease | None, run_id: str, claimant: OwnerId, now_ms: int
) -> tuple[GrantOutcome, Lease | None]:
    """Reserve an unowned, unclaimed run for ``claimant`` at ``now_ms``."""
    if lease is not None and lease.claim is not None:
        return Rejected("already_claimed"), lease
    if lease is not None and lease.owner is not None:
        return Rejected("owner_held"), lease
    return Granted(now_ms), _with_claim(lease, run_id, claimant, now_ms)


def steal(
    lease: Lease | None,
    run_id: str,
    claimant: OwnerId,
    now_ms: int,
    evidence: LivenessEvidence,
) -> tuple[GrantOutcome, Lease | None]:
    """Claim a run whose owner is ``evidence.expected_owner`` and is stale."""
    if not matches_evidence(evidence.expected_owner, claimant, now_ms, evidence):
        return Rejected("evidence_invalid"), lease
    if lease is not None and lease.claim is not None:
        return Rejected("already_claimed"), lease
    if lease is None or lease.owner is None or lease.owner != evidence.expected_owner:
        return Rejected("evidence_invalid"), lease
    if lease.heartbeat_at_ms is None or not is_stale(lease.heartbeat_at_ms, now_ms):
        # A lease without a heartbeat gives no proof of staleness.
        return Rejected("owner_live"), lease
    return Granted(now_ms), _with_claim(lease, run_id, claimant, now_ms)


def activate(
    lease: Lease | None, owner: OwnerId, granted_at_ms: int, now_ms: int
) -> tuple[PromoteOutcome, Lease | None]:
    """Turn the exact claim ``(owner, granted_at_ms)`` into ownership.

    The grant is spent: presenting it again answers ``Lost``.
    """
    if lease is None or lease.claim != owner or lease.claimed_at_ms != granted_at_ms:
        return Lost(), lease
    return Promoted(), Lease(lease.run_id, owner, granted_at_ms, now_ms, None, None)


def heartbeat(
    lease: Lease | None, owner: OwnerId, now_ms: int
) -> tuple[RenewOutcome, Lease | None]:
    """Renew the owner's stamp to ``max(old, now_ms)``; pending claims are ignored."""
    if lease is None or lease.owner != owner:
        return Lost(), lease
    stamp = now_ms if lease.heartbeat_at_ms is None else max(lease.heartbeat_at_ms, now_ms)
    return Renewed(stamp), attrs.evolve(lease, heartbeat_at_ms=stamp)


def reconfirm(
    lease: Lease | None, owner: OwnerId, now_ms: int
) -> tuple[RenewOutcome, Lease | None]:
    """``heartbeat``, but ``Lost`` while any claim is pending on the lease."""
    if lease is not None and lease.claim is not None:
        return Lost(), lease
    return heartbeat(lease, owner, now_ms)


def recover(
    lease: Lease | None,
    stale_claimant: OwnerId,
    granted_at_ms: int,
    observer: OwnerId,
    now_ms: int,
    evidence: LivenessEvidence,
) -> tuple[RecoverOutcome, Lease | None]:
    """Clear the exact claim ``(stale_claimant, granted_at_ms)`` once it is stale."""
    if not matches_evidence(stale_claimant, observer, now_ms, evidence):
        return Rejected("evidence_invalid"), lease
    if lease is None or lease.claim != stale_claimant or lease.claimed_at_ms != granted_at_ms:
        return Rejected("claim_changed"), lease
    if not is_stale(granted_at_ms, now_ms):
        return Rejected("claim_fresh"), lease
    return Cleared(), _without_claim(lease)


def release_claim(lease: Lease | None, claimant: OwnerId, granted_at_ms: int) -> Lease | None:
    """Drop exactly the claim ``(claimant, granted_at_ms)``; ownership is never touched.

    Any other claim (or none) leaves the lease as it is.
    """
    if lease is None or lease.claim != claimant or lease.claimed_at_ms != granted_at_ms:
        return lease
    return _without_claim(lease)


def release_ownership(lease: Lease | None, owner: OwnerId) -> Lease | None:
    """If ``owner`` holds the lease, drop its ownership and any pending claim.

    When ``owner`` does not hold it, the lease is returned unchanged.
    """
    if not holds(lease, owner):
        return lease
    return None
