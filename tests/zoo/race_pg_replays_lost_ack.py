"""A PostgreSQL store that replays a write whose commit was not answered.

The bug: when the connection drops after a write was sent and before its
answer arrived (``persistence_failed`` with ``outcome_unknown``), the store
reconnects and runs the operation again, as if the first attempt had surely
failed ("connection errors are transient"). If the first attempt committed,
the replay meets its own work: a claim answers ``AlreadyClaimed`` for the
claim it made, a create fails on the run it created, a heartbeat stamps
twice. Without lost acknowledgements aimed at commits this needs a server
restart to land exactly there.
"""

from __future__ import annotations

import runstore
from runstore import PersistenceFailedError
from runstore.postgres import PostgresRunStore

KIND = "race"

_WRITES = (
    "create",
    "claim",
    "claim_and_own",
    "activate",
    "abandon_claim",
    "recover_claim",
    "heartbeat",
    "reconfirm",
    "transition_owned",
    "steal",
    "request_cancel",
    "request_cancel_lineage",
    "acknowledge_cancel",
    "claim_next",
    "heartbeat_many",
    "purge_settled",
)


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
