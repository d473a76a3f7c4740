"""A ``claim`` that classifies the row before its write transaction begins.

The bug: the compare-and-swap's read (is the run pending, unclaimed, still
the caller's snapshot?) runs as a plain read, and only the write is put in
the transaction, without repeating the predicate ("we just checked"). Between
the two another process can claim or own the run. The strategy, consulted
inside the transaction, still refuses the second grant, so the fence holds,
but the loser reports the loss it read before the race ("the snapshot
changed") instead of the one that is true when it runs ("already claimed",
"heartbeat fresh"), and the fact it appends goes to a position read before
the race. One process at a time never sees it; two claimants on one pending
run do, within seconds.
"""

from __future__ import annotations

from runstore import Claimed, NotFound
from runstore import _boundary as admit
from runstore._constants import HEARTBEAT_STALE_AFTER_MS
from runstore.consensus import Granted
from runstore.sqlite import SqliteRunStore

from . import _races

KIND = "race"

_CLASSIFY = """
SELECT status IN ('pending', 'suspended') AND status = ?2 AND owner_host_id IS ?3
         AND owner_pid IS ?4 AND owner_nonce IS ?5 AND heartbeat_at_ms IS ?6
         AND claim_host_id IS NULL,
       CASE WHEN claim_host_id IS NOT NULL THEN 'already_claimed'
            WHEN status = 'running' AND heartbeat_at_ms >= ?7 THEN 'heartbeat_fresh'
            ELSE 'snapshot_changed' END,
       (SELECT COALESCE(MAX(position), 0) FROM flows_ownership_facts WHERE run_id = ?1)
FROM flows_runs WHERE run_id = ?1
"""
_WRITE = """
UPDATE flows_runs SET claim_host_id = ?2, claim_pid = ?3, claim_nonce = ?4, claimed_at_ms = ?5
WHERE run_id = ?1
"""
_FACT = """
INSERT INTO flows_ownership_facts
  (run_id, position, transition, owner_host_id, owner_pid, owner_nonce, granted_at_ms)
VALUES (?1, ?2, 'claimed', ?3, ?4, ?5, ?6)
"""


class ClassifiesBeforeBegin(SqliteRunStore):
    def claim(self, run_id, expected, claimant, now_ms):
        rid, snapshot, who, now = admit.admit_claim(run_id, expected, claimant, now_ms, self._clock)
        owner = snapshot.owner
        params = (
            rid,
            snapshot.status,
            None if owner is None else owner.host_id,
            None if owner is None else owner.pid,
            None if owner is None else owner.nonce,
            snapshot.heartbeat_at_ms,
            now - HEARTBEAT_STALE_AFTER_MS,
        )
        # The bug: the classify read runs before (outside) the write transaction.
        row = self._tm.read("claim", lambda c: c.execute(_CLASSIFY, params).fetchone())
        if row is None:
            return NotFound()
        admissible, loss, last = row
        if not admissible:
            return _races.LOSSES[loss]

        def body(tx):
            grant = tx.consensus.claim(tx, rid, who, now)
            if type(grant) is not Granted:
                return _races.LOSSES[loss]
            granted = grant.granted_at_ms
            execute = tx.connection.execute
            execute(_WRITE, (rid, who.host_id, who.pid, who.nonce, granted))
            execute(_FACT, (rid, last + 1, who.host_id, who.pid, who.nonce, granted))
            return Claimed(granted)

        return self._tm.write("claim", body)


def factory(clock, path):
    store = _races.open_file(clock, path)
    store.__class__ = ClassifiesBeforeBegin
    return store
