"""A strategy whose batch heartbeat matches the owner by host and pid but not
by nonce, so a crashed incarnation of a process renews the lease its
restarted successor now holds: a lost fence renewed."""

from runstore.consensus import SqlConsensus
from runstore.consensus._types import Lost, Renewed
from runstore.sqlite import _lease_queries as s

KIND = "consensus"
EXPECTED_CHECK = "OutcomeMismatch"

_HOST_AND_PID = """
UPDATE flows_consensus_leases SET heartbeat_at_ms = MAX(COALESCE(heartbeat_at_ms, ?5), ?5)
WHERE run_id IN (SELECT value FROM json_each(?1)) AND owner_host_id = ?2 AND owner_pid = ?3
  AND (?4 IS NULL OR TRUE)
RETURNING run_id, heartbeat_at_ms
"""


class IgnoresNonce(SqlConsensus):
    def heartbeat_many(self, tx, run_ids, owner, now_ms):
        renewed = tx.connection.execute(
            _HOST_AND_PID, (s.ids_param(run_ids), owner.host_id, owner.pid, owner.nonce, now_ms)
        ).fetchall()
        stamps = dict(renewed)
        return {rid: Lost() if stamps.get(rid) is None else Renewed(stamps[rid]) for rid in run_ids}


def factory():
    return IgnoresNonce()
