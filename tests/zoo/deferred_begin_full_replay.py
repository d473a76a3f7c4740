"""A control, not a bug: deferred ``BEGIN`` with the whole body replayed.

SQLite takes a deferred transaction's snapshot at its first read and refuses
to upgrade a stale snapshot to a write (``SQLITE_BUSY``); replaying the whole
body on that failure reads afresh. Slower under contention than ``BEGIN
IMMEDIATE`` and liable to run out of retries, but linearizable: the torture
must pass it, which shows it does not flag a store for doing things
differently.
"""

from __future__ import annotations

from . import _races

KIND = "control"


def factory(clock, path):
    store = _races.open_file(clock, path)
    store._tm.write = _races.deferred_write(store._tm, "explicit")
    return store
