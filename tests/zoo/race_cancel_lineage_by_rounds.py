"""A ``request_cancel_lineage`` that cancels the rounds it read, one by one.

The bug: the store reads the lineage (``lineage``), then asks each live,
unrequested round to cancel with ``request_cancel``, each a transaction of
its own. One process at a time gets exactly the shipped answers. Under
concurrency the lineage changes between the read and the marks: a round
created meanwhile stays unmarked while an older one is marked, a round
settled meanwhile answers a miss, and a reader can see the lineage half
marked. Both backends.
"""

from __future__ import annotations

from runstore import TERMINAL_STATUSES, CancelRequested
from runstore import _boundary as admit

from . import _races

KIND = "race"


class ByRounds:
    def request_cancel_lineage(self, run_id, now_ms):
        rid, now = admit.admit_request_cancel("request_cancel_lineage", run_id, now_ms)
        marked = False
        for row in self.lineage(rid):
            if row.status not in TERMINAL_STATUSES and row.cancel_requested_at_ms is None:
                marked |= type(self.request_cancel(row.run_id, now)) is CancelRequested
        if marked:
            return CancelRequested(now)
        return super().request_cancel_lineage(run_id, now_ms)  # the shipped answer for a miss


def factory(clock, target):
    return _races.with_mistake(_races.open_target(clock, target), ByRounds)
