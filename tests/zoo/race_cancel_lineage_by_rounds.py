"""A ``request_cancel_lineage`` that cancels the rounds it read, one by one.

The bug: the store reads the lineage (``lineage``), then asks each live,
unrequested round it saw to cancel with ``request_cancel``, each a
transaction of its own, and answers ``CancelRequested`` when it saw one. One
process at a time gets exactly the shipped answers. Under concurrency the
lineage changes between the read and the marks: a round that settles
meanwhile is not marked (its request answers a miss, which the store
ignores) while the next round, created meanwhile, is never asked; the call
says it marked the lineage and no live round carries the request. Both
backends.
"""

from __future__ import annotations

from runstore import TERMINAL_STATUSES, CancelRequested
from runstore import _boundary as admit

from . import _races

KIND = "race"


class ByRounds:
    def request_cancel_lineage(self, run_id, now_ms):
        rid, now = admit.admit_request_cancel("request_cancel_lineage", run_id, now_ms)
        live = [
            row.run_id
            for row in self.lineage(rid)
            if row.status not in TERMINAL_STATUSES and row.cancel_requested_at_ms is None
        ]
        if not live:
            return super().request_cancel_lineage(run_id, now_ms)  # the shipped answer for a miss
        for round_id in live:
            self.request_cancel(round_id, now)  # the bug: a miss here is ignored
        return CancelRequested(now)


def factory(clock, target):
    return _races.with_mistake(_races.open_target(clock, target), ByRounds)
