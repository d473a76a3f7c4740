"""An ``activate`` whose transaction the sqlite3 driver begins (deferred).

The bug: every write of the store begins with ``BEGIN IMMEDIATE`` except
activation, left to the driver's default transaction handling ("activation
only finishes a takeover"). Its classify read and the strategy's lease read
then run before the driver's ``BEGIN``, outside the transaction. A displaced
owner that was paused past staleness and wakes in the middle of the
takeover renews its heartbeat between those reads and the write: the
claimant activates over a fresh heartbeat, and the zombie's renewal is lost.
SQLite only.
"""

from __future__ import annotations

from . import _races

KIND = "race"


def factory(clock, path):
    store = _races.open_file(clock, path)
    shipped = store._tm.write
    deferred = _races.deferred_write(store._tm, "driver")

    def write(method, body):
        return (deferred if method == "activate" else shipped)(method, body)

    store._tm.write = write
    return store
