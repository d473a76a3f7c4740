"""A store whose lineage cancellation marks every round that names the lineage
but forgets the root run itself (whose own lineage column is empty)."""

from runstore import _boundary as admit
from runstore._outcomes import CancelRequested
from runstore.sqlite import SqliteRunStore
from runstore.sqlite import _queries as q
from runstore.sqlite._store import _classify_cancellation_miss

from ._stores import IN_MEMORY, open_as

KIND = "store"
EXPECTED_CHECK = "OutcomeMismatch"
capabilities = IN_MEMORY

# The bug: membership is "rows naming the lineage" only; the root is left out.
_ROUNDS_ONLY = """
UPDATE flows_runs SET cancel_requested_at_ms = ?2
WHERE lineage_id = (SELECT COALESCE(lineage_id, run_id) FROM flows_runs WHERE run_id = ?1)
  AND cancel_requested_at_ms IS NULL
  AND status NOT IN ('completed', 'failed', 'cancelled')
RETURNING cancel_requested_at_ms
"""


class SkipsRoot(SqliteRunStore):
    def request_cancel_lineage(self, run_id, now_ms):
        method = "request_cancel_lineage"
        rid, now = admit.admit_request_cancel(method, run_id, now_ms)

        def body(tx):
            execute = tx.connection.execute
            if execute(_ROUNDS_ONLY, (rid, now)).fetchall():
                return CancelRequested(now)
            rows = execute(q.REQUEST_CANCEL_LINEAGE_MISS, (rid,)).fetchall()
            return _classify_cancellation_miss(method, rid, rows)

        return self._tm.write(method, body)


def factory(clock, path):
    return open_as(SkipsRoot, clock)
