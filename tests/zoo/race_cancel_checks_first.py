"""A ``request_cancel`` that checks the run with a read, then marks it by id.

The bug: inside its write, the store first reads the run (is it live, and not
yet asked to cancel?) and then writes the cancellation time with an UPDATE that
guards against a second request but no longer against a settled run ("we
just checked"), instead of the shipped single guarded UPDATE. On SQLite the
transaction is left to the sqlite3 driver, which begins it just before the
UPDATE, so the read runs outside it; on PostgreSQL
the read takes no row lock, and under READ COMMITTED the UPDATE does not
re-check it. Between the read and the write the owner can settle the run:
the settled run then carries a cancellation request, which no order of the
calls explains. The window is a few microseconds wide. Both backends.
"""

from __future__ import annotations

from runstore import TERMINAL_STATUSES, CancelRequested
from runstore import _boundary as admit

from . import _races

KIND = "race"

_READ = {
    "sqlite": "SELECT status, cancel_requested_at_ms FROM flows_runs WHERE run_id = ?1",
    "postgresql": "SELECT status, cancel_requested_at_ms FROM flows_runs WHERE run_id = $1",
}
_MISS = object()


class ChecksFirst:
    def request_cancel(self, run_id, now_ms):
        rid, now = admit.admit_request_cancel("request_cancel", run_id, now_ms)
        read = _READ[self.dialect]
        # The bug: the write's guard on the status is dropped, the read stands for it.
        write = self._queries.REQUEST_CANCEL_WRITE.rsplit(" AND status", 1)[0]

        def body(tx):
            row = tx.connection.execute(read, (rid,)).fetchone()
            if row is None or row[0] in TERMINAL_STATUSES or row[1] is not None:
                return _MISS
            if tx.connection.execute(write, (rid, now)).rowcount:
                return CancelRequested(now)
            return _MISS

        if self.dialect == "sqlite":
            answer = _races.deferred_write(self._tm, "driver")("request_cancel", body)
        else:
            answer = self._tm.write("request_cancel", body)
        if answer is _MISS:
            return super().request_cancel(run_id, now_ms)  # the shipped answer for a miss
        return answer


def factory(clock, target):
    return _races.with_mistake(_races.open_target(clock, target), ChecksFirst)
