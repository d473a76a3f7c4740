"""A store whose ``heartbeat``/``reconfirm`` admit the caller's ``now_ms``
without the skew bound: an owner whose clock runs far ahead renews its lease
into the future."""

from runstore import _boundary as admit
from runstore.consensus._types import Lost
from runstore.sqlite import SqliteRunStore
from runstore.sqlite import _queries as q
from runstore.sqlite._store import _FENCE_LOST, _NOT_FOUND, _UPDATED

from ._stores import IN_MEMORY, open_as

KIND = "store"
EXPECTED_CHECK = "OutcomeMismatch"
capabilities = IN_MEMORY


class NoSkewCheck(SqliteRunStore):
    def _renew(self, method, run_id, owner, now_ms):
        # The bug: a plain timestamp check where the lease rule (skew bound) belongs.
        rid = admit.admit_identifier(method, "run_id", run_id)
        who = admit.admit_owner(method, "owner", owner)
        now = admit.admit_timestamp(method, "now_ms", now_ms)

        def body(tx):
            consensus = tx.consensus
            renew = consensus.heartbeat if method == "heartbeat" else consensus.reconfirm
            outcome = renew(tx, rid, who, now)
            execute = tx.connection.execute
            if type(outcome) is not Lost:
                stamp = outcome.heartbeat_at_ms
                if execute(q.RENEW_WRITE, (rid, who.host_id, who.pid, who.nonce, stamp)).fetchone():
                    return _UPDATED
            exists = execute(q.RUN_EXISTS, (rid,)).fetchone()
            return _NOT_FOUND if exists is None else _FENCE_LOST

        return self._tm.write(method, body)


def factory(clock, path):
    return open_as(NoSkewCheck, clock)
