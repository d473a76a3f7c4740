"""A strategy that treats a heartbeat exactly 30 000 ms old as stale (``<=``
where the rule says strictly older). The store's own row predicate still says
``<``, so only the strategy-level comparison sees it."""

from runstore._constants import HEARTBEAT_STALE_AFTER_MS
from runstore.consensus import LocalConsensus
from runstore.consensus._local import _evidence_matches
from runstore.consensus._types import Granted, Lease, Rejected

KIND = "consensus"
EXPECTED_CHECK = "OutcomeMismatch"


class CutoffInclusive(LocalConsensus):
    def steal(self, tx, run_id, claimant, now_ms, evidence):
        with self._lock:
            if not _evidence_matches(evidence.expected_owner, claimant, now_ms, evidence):
                return Rejected("evidence_invalid")
            lease = self._leases.get(run_id)
            if lease is not None and lease.claim is not None:
                return Rejected("already_claimed")
            if lease is None or lease.owner is None or lease.owner != evidence.expected_owner:
                return Rejected("evidence_invalid")
            # The bug: ``>`` where it must be ``>=`` (exactly 30 000 ms is still fresh).
            if lease.heartbeat_at_ms is None or (
                lease.heartbeat_at_ms > now_ms - HEARTBEAT_STALE_AFTER_MS
            ):
                return Rejected("owner_live")
            self._put(
                tx,
                run_id,
                Lease(
                    run_id,
                    lease.owner,
                    lease.granted_at_ms,
                    lease.heartbeat_at_ms,
                    claimant,
                    now_ms,
                ),
            )
            return Granted(now_ms)


def factory():
    return CutoffInclusive()
