"""A strategy that activates a claim by its claimant alone, ignoring the grant
time: a stale token from an earlier claim by the same process still works."""

from runstore.consensus import LocalConsensus
from runstore.consensus._types import Lease, Lost, Promoted

KIND = "consensus"
EXPECTED_CHECK = "OutcomeMismatch"


class IgnoresGrant(LocalConsensus):
    def activate(self, tx, run_id, owner, granted_at_ms, now_ms):
        with self._lock:
            lease = self._leases.get(run_id)
            # The bug: the grant time is not compared.
            if lease is None or lease.claim != owner:
                return Lost()
            self._put(tx, run_id, Lease(run_id, owner, granted_at_ms, now_ms, None, None))
            return Promoted()


def factory():
    return IgnoresGrant()
