"""A store whose claim_next treats a pending claim as abandoned: its pick
forgets the claim condition, and it clears the claim it finds (row and lease)
before taking the run, so a claimant's reservation is taken from under it."""

from runstore.sqlite import SqliteRunStore
from runstore.sqlite import _queries as shipped

from ._queries import queries_with
from ._stores import IN_MEMORY, open_as

KIND = "store"
EXPECTED_CHECK = "UnclaimableTaken"
capabilities = IN_MEMORY

# The shipped pick without its claim condition (and so without the claimable
# index, which holds only unclaimed runs).
_ANY_CLAIM = shipped.CLAIM_NEXT_PICK.replace("INDEXED BY flows_runs_claimable_idx", "").replace(
    "AND r.claim_host_id IS NULL", ""
)
_CLAIM_OF = (
    "SELECT claim_host_id, claim_pid, claim_nonce, claimed_at_ms FROM flows_runs WHERE run_id = ?1"
)
_CLEAR = """
UPDATE flows_runs SET claim_host_id = NULL, claim_pid = NULL, claim_nonce = NULL,
  claimed_at_ms = NULL WHERE run_id = ?1
"""


class TakesClaimed(SqliteRunStore):
    _queries = queries_with(CLAIM_NEXT_PICK=_ANY_CLAIM)
    _next = False

    def claim_next(self, *args, **kwargs):
        self._next = True
        try:
            return super().claim_next(*args, **kwargs)
        finally:
            self._next = False

    def claim_next_many(self, *args, **kwargs):
        # The same pick serves the batch claim, with the same bug.
        self._next = True
        try:
            return super().claim_next_many(*args, **kwargs)
        finally:
            self._next = False

    def _claim_and_own_in(self, tx, rid, previous, who, now, proof, params, *rest):
        if self._next:
            host, pid, nonce, token = tx.connection.execute(_CLAIM_OF, (rid,)).fetchone()
            if host is not None:
                from runstore import OwnerId

                tx.consensus.release_claim(tx, rid, OwnerId(host, pid, nonce), token)
                tx.connection.execute(_CLEAR, (rid,))
        return super()._claim_and_own_in(tx, rid, previous, who, now, proof, params, *rest)


def factory(clock, path):
    return open_as(TakesClaimed, clock)
