"""A strategy whose ``reconfirm`` renews the lease while a thief's claim is
pending, exactly like ``heartbeat``."""

from runstore.consensus import SqlConsensus

KIND = "consensus"
EXPECTED_CHECK = "OutcomeMismatch"


class Reconfirms(SqlConsensus):
    def reconfirm(self, tx, run_id, owner, now_ms):
        # The bug: the pending-claim condition is gone.
        return self.heartbeat(tx, run_id, owner, now_ms)


def factory():
    return Reconfirms()
