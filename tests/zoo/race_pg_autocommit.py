"""A PostgreSQL store whose writes run each statement in its own transaction.

The bug: the transaction manager leaves the connection in autocommit mode and
never issues ``BEGIN``, so every statement of an operation commits on its
own, the weakest isolation there is. The run-row lock (``SELECT ... FOR
UPDATE``) is released the moment it is taken, the classify read and the
write it justifies see different moments, and an operation that fails
halfway (a lost strategy call, a constraint error) keeps the statements it
had already run: a lease granted for a claim that was never written, a fact
without its row change. One process at a time mostly never sees it.
"""

from __future__ import annotations

import runstore
from runstore._sql._tx import RollbackAndReturn
from runstore.postgres._errors import classify
from runstore.postgres._tx import _CLASSIFIED, Transaction

KIND = "race"


def autocommit_write(tm):
    """A ``write(method, body)`` for ``tm`` that runs the body without ``BEGIN``."""

    def write(method, body):
        with tm.lock:
            tx = Transaction(tm.live(), tm.consensus)
            try:
                result = body(tx)
            except RollbackAndReturn as early:
                return early.value  # nothing to roll back: every statement committed
            except _CLASSIFIED as failure:
                error = classify(method, failure)
            else:
                for callback in tx._commit:
                    callback()
                return result
            raise error

    return write


def factory(clock, url):
    # The bug lives in the general path's transaction manager; the one-round-trip
    # path's single statements would never reach it.
    store = runstore.open(url, clock=clock, fast_path=False)
    store._tm.write = autocommit_write(store._tm)
    return store
