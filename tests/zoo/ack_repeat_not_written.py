"""A store that answers a repeated cancel acknowledgement with True without
writing the row again, so the revision does not move (the contract counts a
repeat as a row write)."""

from runstore import _boundary as admit
from runstore.sqlite import SqliteRunStore
from runstore.sqlite._decode import acknowledgement_json

from ._stores import IN_MEMORY, open_as

KIND = "store"
EXPECTED_CHECK = "RevisionMismatch"
capabilities = IN_MEMORY

_OWNED = (
    "run_id = ?1 AND status = 'running' AND owner_host_id = ?2 AND owner_pid = ?3 "
    "AND owner_nonce = ?4 AND cancel_requested_at_ms IS NOT NULL"
)
_FIRST_ONLY = f"""
UPDATE flows_runs SET cancel_acknowledgement_json = ?5
WHERE {_OWNED} AND cancel_acknowledgement_json IS NULL
RETURNING 1
"""
_ALREADY = f"SELECT 1 FROM flows_runs WHERE {_OWNED}"


class QuietRepeat(SqliteRunStore):
    def acknowledge_cancel(self, run_id, owner, now_ms):
        rid, who, now = admit.admit_acknowledge_cancel(run_id, owner, now_ms)
        params = (rid, who.host_id, who.pid, who.nonce, acknowledgement_json(now, who))

        def body(tx):
            execute = tx.connection.execute
            if execute(_FIRST_ONLY, params).fetchall():
                return True
            # The bug: a repeat is answered from a read, with no row write.
            return execute(_ALREADY, params[:4]).fetchone() is not None

        return self._tm.write("acknowledge_cancel", body)


def factory(clock, path):
    return open_as(QuietRepeat, clock)
