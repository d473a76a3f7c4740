"""A store that lets the sqlite3 driver begin its transactions (deferred).

The bug: instead of ``BEGIN IMMEDIATE``, the connection keeps the driver's
default transaction handling, which issues a deferred ``BEGIN`` just before
the first INSERT, UPDATE or DELETE. Every write still runs in a transaction,
commits and rolls back whole, and a single process cannot tell the
difference. But each operation's classify SELECT (claim, claim_and_own,
steal, activate, recover_claim, and the strategy's guard read in
transition_owned) now runs before that ``BEGIN``, outside the transaction, so
its verdict can be stale by the time the write lock is taken: a loser
reports the loss it read before the race, and facts go to positions read
before it (a constraint error).
"""

from __future__ import annotations

from . import _races

KIND = "race"


def factory(clock, path):
    store = _races.open_file(clock, path)
    store._tm.write = _races.deferred_write(store._tm, "driver")
    return store
