"""A PostgreSQL store that replays a settle whose commit was not answered.

The bug: when the connection drops after ``transition_owned`` was sent and
before its answer arrived (``persistence_failed`` with ``outcome_unknown``),
the store reconnects and runs it again, as if the first attempt had surely
failed ("a settle must not be lost"). If the first attempt committed, the
replay meets its own work: the run is no longer owned, and the call answers
``FenceLost`` for the settle it made (or settles twice over a state written
since). Without lost acknowledgements aimed at commits this needs a server
restart to land during a settle.
"""

from __future__ import annotations

import runstore
from runstore import PersistenceFailedError
from runstore.postgres import PostgresRunStore

KIND = "race"

_WRITES = ("transition_owned",)


def _replaying(name):
    def method(self, *args, **kwargs):
        shipped = getattr(super(ReplaysLostAck, self), name)
        try:
            return shipped(*args, **kwargs)
        except PersistenceFailedError as error:
            if not error.outcome_unknown:
                raise
            return shipped(*args, **kwargs)  # the bug: the first attempt may have committed

    method.__name__ = name
    return method


class ReplaysLostAck(PostgresRunStore):
    pass


for _name in _WRITES:
    setattr(ReplaysLostAck, _name, _replaying(_name))


def factory(clock, url):
    store = runstore.open(url, clock=clock)
    store.__class__ = ReplaysLostAck
    return store
