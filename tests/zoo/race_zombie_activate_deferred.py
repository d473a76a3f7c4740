"""An activation that trusts a classify read taken outside its transaction.

The bug: every write of the store begins with ``BEGIN IMMEDIATE`` except
activation, left to the driver's default transaction handling ("activation
only finishes a takeover"), and its UPDATE names the claim only, not the
snapshot the caller saw ("the classify read just checked it"). Each change
alone is harmless; together, the classify read and the strategy's lease read
run before the driver's ``BEGIN``, outside the transaction, and nothing
checks again. A displaced owner that was paused past staleness and wakes in
the middle of the takeover renews its heartbeat between those reads and the
write: the claimant activates over a fresh heartbeat (the snapshot it
claimed with has moved), and the zombie's renewal is overwritten. SQLite
only.
"""

from __future__ import annotations

from . import _races

KIND = "race"


class ActivatesByClaim:
    pass


def factory(clock, path):
    store = _races.with_mistake(_races.open_file(clock, path), ActivatesByClaim)
    type(store)._queries = _races.activation_by_claim(type(store)._queries)
    shipped = store._tm.write
    deferred = _races.deferred_write(store._tm, "driver")

    def write(method, body):
        return (deferred if method == "activate" else shipped)(method, body)

    store._tm.write = write
    return store
