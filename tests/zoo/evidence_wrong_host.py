"""A strategy whose evidence check accepts ``same-host-pid-dead`` from an
observer on another host (a pid can only be probed on its own host)."""

from runstore._constants import HEARTBEAT_STALE_AFTER_MS
from runstore.consensus import LocalConsensus
from runstore.consensus._types import Granted, Lease, Rejected

KIND = "consensus"
EXPECTED_CHECK = "OutcomeMismatch"


def _matches(expected_owner, observer, now_ms, evidence):
    if evidence.expected_owner != expected_owner or evidence.checked_at_ms != now_ms:
        return False
    if evidence.kind == "cross-host-unreachable-stale":
        return expected_owner.host_id != observer.host_id
    # The bug: same-host-pid-dead is taken from any host.
    return evidence.kind in ("same-host-pid-dead", "lease-expired")


class WrongHost(LocalConsensus):
    def steal(self, tx, run_id, claimant, now_ms, evidence):
        with self._lock:
            if not _matches(evidence.expected_owner, claimant, now_ms, evidence):
                return Rejected("evidence_invalid")
            lease = self._leases.get(run_id)
            if lease is not None and lease.claim is not None:
                return Rejected("already_claimed")
            if lease is None or lease.owner is None or lease.owner != evidence.expected_owner:
                return Rejected("evidence_invalid")
            if lease.heartbeat_at_ms is None or (
                lease.heartbeat_at_ms >= now_ms - HEARTBEAT_STALE_AFTER_MS
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
    return WrongHost()
