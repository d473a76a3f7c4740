"""A PostgreSQL store that takes a connection lost during COMMIT for a rollback.

The bug: the transaction manager replays a transaction whose connection
broke, as it should while the body runs (nothing was committed), but also
when the connection broke once ``COMMIT`` was sent ("no answer, so it did
not commit; try again on a fresh connection"). The server may have
committed it before the connection went: the replay then meets the
operation's own work and answers as if someone else had done it (a claim
finds the run already claimed, a settle finds the fence lost, a create finds
the run there), or writes it twice.

Only the answer to ``COMMIT`` matters, a window of one round trip at the end
of each write: a server restart rarely lands in it (the store takes the
general path, ``BEGIN ... COMMIT``, so no single statement commits by
itself), while lost acknowledgements aimed at commits open it every time.
"""

from __future__ import annotations

import runstore

KIND = "race"


def factory(clock, url):
    # The bug lives in the general path's transaction manager; the one-round-trip
    # path's statements are each their own commit and never reach it.
    store = runstore.open(url, clock=clock, fast_path=False)
    tm = store._tm
    shipped = tm._verdict

    def verdict(method, failure, sent, *rest):
        return shipped(method, failure, False, *rest)  # the bug: a sent COMMIT is not trusted

    tm._verdict = verdict
    return store
