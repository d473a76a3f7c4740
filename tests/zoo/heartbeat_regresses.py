"""A strategy whose heartbeat stores the caller's time instead of the larger
of the old and new stamps, so a late, older heartbeat moves the lease back."""

from runstore.consensus import SqlConsensus
from runstore.consensus._types import Lost, Renewed
from runstore.sqlite._lease_queries import _OWNER_IS

KIND = "consensus"
EXPECTED_CHECK = "OutcomeMismatch"

_NOT_MONOTONIC = f"""
UPDATE flows_consensus_leases SET heartbeat_at_ms = ?5
WHERE run_id = ?1 AND {_OWNER_IS}
RETURNING heartbeat_at_ms
"""


class Regresses(SqlConsensus):
    def heartbeat(self, tx, run_id, owner, now_ms):
        renewed = tx.connection.execute(
            _NOT_MONOTONIC, (run_id, owner.host_id, owner.pid, owner.nonce, now_ms)
        ).fetchone()
        return Lost() if renewed is None else Renewed(renewed[0])


def factory():
    return Regresses()
