"""Reachable cells of the reach tables (``_reach``) that the default budget does
not reach yet: open work, listed so the tables and the reach test say so.

Regenerate with ``python -c "from runstore.stateful._reach import _main; _main()"``
(it prints this tuple last); a cell the default run now reaches must be
dropped, and a new gap is a regression of the steering.
"""

KNOWN_GAPS = (
    "claim -> SnapshotChanged when status=pending, claim=none, owner=none",
    "claim_and_own -> Activated when status=running, claim=none, owner=stale, evidence=unfit",
    "claim_and_own -> AlreadyClaimed when status=pending, claim=held, owner=none, evidence=none",
    "claim_and_own -> AlreadyClaimed when status=pending, claim=held, owner=none, evidence=unfit",
    "claim_and_own -> AlreadyClaimed when status=suspended, claim=held, owner=none, evidence=none",
    "claim_and_own -> AlreadyClaimed when status=running, claim=held, owner=fresh, evidence=none",
    "claim_and_own -> AlreadyClaimed when status=running, claim=stale, owner=fresh, evidence=none",
    "claim_and_own -> SnapshotChanged when status=pending, claim=none, owner=none, evidence=none",
    "claim_and_own -> SnapshotChanged when status=pending, claim=none, owner=none, evidence=unfit",
    "claim_and_own -> SnapshotChanged when status=suspended, claim=none, owner=none, evidence=none",
    "claim_and_own -> SnapshotChanged when status=settled, claim=none, owner=none, evidence=none",
    "steal -> NotFound when status=missing, claim=none, owner=none, evidence=unfit",
    "steal -> AlreadyClaimed when status=pending, claim=held, owner=none, evidence=unfit",
    "steal -> AlreadyClaimed when status=pending, claim=stale, owner=none, evidence=unfit",
    "steal -> AlreadyClaimed when status=running, claim=held, owner=fresh, evidence=unfit",
    "steal -> AlreadyClaimed when status=running, claim=held, owner=stale, evidence=unfit",
    "steal -> AlreadyClaimed when status=running, claim=stale, owner=fresh, evidence=unfit",
    "steal -> AlreadyClaimed when status=running, claim=stale, owner=stale, evidence=unfit",
    "steal -> HeartbeatFresh when status=running, claim=none, owner=fresh, evidence=unfit",
    "steal -> SnapshotChanged when status=pending, claim=none, owner=none, evidence=unfit",
    "steal -> SnapshotChanged when status=suspended, claim=none, owner=none, evidence=unfit",
    "steal -> SnapshotChanged when status=running, claim=none, owner=stale, evidence=fits",
    "steal -> SnapshotChanged when status=running, claim=none, owner=stale, evidence=unfit",
    "steal -> LivenessUnconfirmed when status=running, claim=none, owner=fresh, evidence=fits",
    "steal -> LivenessUnconfirmed when status=running, claim=stale, owner=fresh, evidence=fits",
    "steal -> LivenessUnconfirmed when status=running, claim=stale, owner=stale, evidence=fits",
    "steal -> raised persistence_failed",
    "activate -> Activated when status=running, claim=stale, owner=fresh",
    "activate -> SnapshotChanged when status=pending, claim=held, owner=none",
    "activate -> SnapshotChanged when status=pending, claim=stale, owner=none",
    "activate -> SnapshotChanged when status=running, claim=stale, owner=fresh",
    "abandon_claim -> raised invalid_run",
    "abandon_claim -> raised persistence_failed",
    "recover_claim -> ClaimFresh when status=running, claim=held, evidence=fits",
    "recover_claim -> ClaimChanged when status=pending, claim=held, evidence=fits",
    "recover_claim -> ClaimChanged when status=pending, claim=held, evidence=unfit",
    "recover_claim -> LivenessUnconfirmed when status=pending, claim=held, evidence=unfit",
    "recover_claim -> LivenessUnconfirmed when status=pending, claim=stale, evidence=unfit",
    "heartbeat -> FenceLost when status=pending, claim=held, owner=none",
    "transition_owned -> GuardFailed when status=running, owner=stale, cancel=no",
    "request_cancel_lineage -> CancelRequested when status=pending, cancel=asked",
    "request_cancel_lineage -> AlreadyRequested when status=settled, cancel=asked",
    "claim_next -> raised decode_failed",
)
