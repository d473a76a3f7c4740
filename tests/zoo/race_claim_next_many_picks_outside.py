"""A ``claim_next_many`` built from one read and a ``claim_and_own`` per run.

The bug: the store picks the ``limit`` oldest claimable runs with a plain
read, then takes each with ``claim_and_own`` and its current snapshot, and
leaves out a run whose take loses ("someone else got it"). One process at a
time gets the shipped answers. Under concurrency two callers pick the same
runs: the loser answers fewer runs than its ``limit`` while others were
claimable all along, and takes them in several transactions, so the batch
is not the oldest claimable runs at any one instant. Both backends.
"""

from __future__ import annotations

from runstore import Activated, RunStoreError
from runstore import _boundary as admit

from . import _races

KIND = "race"

_PICK = """
SELECT run_id FROM flows_runs
WHERE status IN ('pending', 'suspended') AND claim_host_id IS NULL
ORDER BY created_at_ms, run_id LIMIT {limit}
"""


class BatchPicksOutside:
    def claim_next_many(self, owner, now_ms, limit, *, status=admit.CLAIMABLE_STATUSES):
        who, now, size, statuses = admit.admit_claim_next_many(
            owner, now_ms, limit, status, self._clock
        )
        if set(statuses) != {"pending", "suspended"}:
            return super().claim_next_many(owner, now_ms, limit, status=status)
        pick = _PICK.format(limit=int(size))
        picked = self._tm.read("claim_next_many", lambda c: c.execute(pick).fetchall())
        taken = []
        for (run_id,) in picked:
            try:
                row = self.get(run_id)
            except RunStoreError:
                continue
            if type(self.claim_and_own(run_id, row.snapshot, who, now)) is Activated:
                taken.append(self.get(run_id))
            # The bug: a run someone else got is left out, and nothing is picked in its place.
        return taken


def factory(clock, target):
    return _races.with_mistake(_races.open_target(clock, target), BatchPicksOutside)
