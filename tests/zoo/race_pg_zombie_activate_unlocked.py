"""A PostgreSQL ``activate`` that does not lock the run row first.

The bug: every write of an existing run locks its row first (``SELECT ...
FOR UPDATE``) except activation ("the claim already fences it"), and its
UPDATE names the claim only, not the snapshot the caller saw ("the classify
read just checked it"). Under READ COMMITTED the classify read sees the row
as it was when that statement began: a displaced owner that was paused past
staleness and wakes in the middle of the takeover renews its heartbeat
meanwhile, and the claimant activates over the fresh heartbeat (a snapshot
that has moved), overwriting the zombie's renewal.
"""

from __future__ import annotations

import threading

import runstore
from runstore.postgres import PostgresRunStore

from . import _races

KIND = "race"

_activating = threading.local()


class ActivatesUnlocked(PostgresRunStore):
    _queries = _races.activation_by_claim(PostgresRunStore._queries)

    def activate(self, *args, **kwargs):
        _activating.on = True
        try:
            return super().activate(*args, **kwargs)
        finally:
            _activating.on = False

    def _lock(self, tx, run_id):
        if not getattr(_activating, "on", False):
            super()._lock(tx, run_id)  # the bug: activation skips it


def factory(clock, url):
    # The bug lives in the general path's Python (``_lock``).
    store = runstore.open(url, clock=clock, fast_path=False)
    store.__class__ = ActivatesUnlocked
    return store
