"""A strategy whose ``release_claim`` also drops the owner (the two releases
of upstream's single ``release`` merged back together)."""

from runstore.consensus import LocalConsensus

KIND = "consensus"
EXPECTED_CHECK = "LeaseMismatch"


class DropsOwner(LocalConsensus):
    def release_claim(self, tx, run_id, claimant, granted_at_ms):
        with self._lock:
            lease = self._leases.get(run_id)
            if lease is None or lease.claim != claimant or lease.claimed_at_ms != granted_at_ms:
                return
            # The bug: the whole lease goes, owner included.
            self._put(tx, run_id, None)


def factory():
    return DropsOwner()
