"""A ``claim_next`` built from a read and a ``claim_and_own``.

The bug: the store picks the oldest claimable run with a plain read, then
takes it with ``claim_and_own`` and its current snapshot, and answers None
("nothing to claim") when that loses. One process at a time gets the shipped
answers. Under concurrency two callers pick the same run: the loser answers
None while another run was claimable all along, and a run older than the
one taken can become claimable between the pick and the take, so the call
does not take the oldest at any instant. Both backends.
"""

from __future__ import annotations

from runstore import Activated, RunStoreError
from runstore import _boundary as admit

from . import _races

KIND = "race"

_PICK = """
SELECT run_id FROM flows_runs
WHERE status IN ('pending', 'suspended') AND claim_host_id IS NULL
ORDER BY created_at_ms, run_id LIMIT 1
"""


class PicksOutside:
    def claim_next(self, owner, now_ms, *, status=admit.CLAIMABLE_STATUSES):
        who, now, statuses = admit.admit_claim_next(owner, now_ms, status, self._clock)
        if set(statuses) != {"pending", "suspended"}:
            return super().claim_next(owner, now_ms, status=status)
        picked = self._tm.read("claim_next", lambda c: c.execute(_PICK).fetchone())
        if picked is None:
            return None
        try:
            row = self.get(picked[0])
        except RunStoreError:
            return None
        if type(self.claim_and_own(row.run_id, row.snapshot, who, now)) is not Activated:
            return None  # the bug: "someone else got it, so there is nothing to claim"
        return self.get(row.run_id)


def factory(clock, target):
    return _races.with_mistake(_races.open_target(clock, target), PicksOutside)
