"""A PostgreSQL store that never locks the run row before its compare-and-swap.

The bug: the shared SQL core locks the run row (``LOCK_RUN``, ``SELECT ...
FOR UPDATE``) first in every write of an existing run; this store skips it
("the guarded UPDATE re-checks its predicate anyway"). Under READ COMMITTED
each statement sees what was committed when it started, so the classify
query's verdict can be stale by the time the lease is written: two claimants
both read a pending, unclaimed run, the second waits on the first's lease
row, finds the lease taken, and reports the loss it classified before the
race ("the snapshot changed") instead of "already claimed"; an UPDATE whose
row changed meanwhile misses, and facts go to positions read before the
race. One process at a time never sees it.
"""

from __future__ import annotations

import runstore
from runstore.postgres import PostgresRunStore

KIND = "race"


class WithoutRowLock(PostgresRunStore):
    def _lock(self, tx, run_id):
        pass  # the bug: no SELECT ... FOR UPDATE of the run row


def factory(clock, url):
    # The bug lives in the general path's Python (``_lock``); the one-round-trip
    # path's server functions would take the lock themselves and hide it.
    store = runstore.open(url, clock=clock, fast_path=False)
    store.__class__ = WithoutRowLock
    return store
