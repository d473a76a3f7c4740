"""Helpers for the zoo's broken stores: each is the SQLite adapter with one
method replaced by a patched copy."""

import runstore
from runstore.stateful import Capabilities

#: In-memory stores: no reopen; the adapter's fault seam is there.
IN_MEMORY = Capabilities(reopen=False, fault_injection=True)


def open_as(cls, clock):
    """``runstore.open(":memory:")`` with the store's class swapped for ``cls``."""
    store = runstore.open(":memory:", clock=clock)
    store.__class__ = cls
    return store
