"""An in-memory strategy that forgets to register undo work with the
transaction: a rolled-back operation leaves its lease change behind (what
upstream's in-memory layer did)."""

from runstore.consensus import LocalConsensus

KIND = "consensus"
EXPECTED_CHECK = "RollbackLeak"


class NoUndo(LocalConsensus):
    def _put(self, tx, run_id, lease):
        # The bug: the change is made but no undo is registered with ``tx``.
        if lease is None or (lease.owner is None and lease.claim is None):
            self._leases.pop(run_id, None)
        else:
            self._leases[run_id] = lease


def factory():
    return NoUndo()
