"""A ``heartbeat_many`` that renews its runs one transaction at a time.

The bug: each run's lease is renewed by ``heartbeat`` in a transaction of its
own, one after another. Every answer is the one ``heartbeat`` alone gives, so
no single call looks wrong; but the batch is no longer one atomic operation
(contract.md, wave 3): a snapshot read running meanwhile (``list_runs``,
``changes``, ``state``) can show some of the batch's renewals and not others.
Only a checker that judges snapshot reads against whole batches sees it.
Both backends.
"""

from __future__ import annotations

from runstore import _boundary as admit

from . import _races

KIND = "race"


class OneByOne:
    def heartbeat_many(self, owner, run_ids, now_ms):
        who, ids, now = admit.admit_heartbeat_many(owner, run_ids, now_ms, self._clock)
        answers = {rid: self.heartbeat(rid, who, now) for rid in sorted(ids)}
        return {rid: answers[rid] for rid in ids}


def factory(clock, target):
    return _races.with_mistake(_races.open_target(clock, target), OneByOne)
