"""A ``purge_settled`` that chooses its runs before its write transaction.

The bug: the store asks ``purge_candidates`` (a read of its own) which runs
are settled and finished before the cutoff, then deletes exactly those in a
write transaction, without choosing again inside it ("they are final, and
final runs stay final"). A run's status stays, but whether it may be
deleted does not: between the read and the delete another purge may delete
a run's last children (the parent, now eligible, is left, where the model's
purge at that instant takes it), or a fork may name a chosen run as its
parent, or a new live round join its lineage (the chosen run must then be
kept: a run with a child fails the delete on the foreign key, a run of a
live lineage is deleted). One process at a time never sees it. Both
backends.
"""

from __future__ import annotations

from runstore import _boundary as admit
from runstore._sql._store import _count

from . import _races

KIND = "race"


class ChosenBefore:
    def purge_settled(self, before_ms, *, limit=1000):
        q = self._queries
        cutoff, size = admit.admit_purge_settled(before_ms, limit)
        # The bug: the candidates come from a read outside the write transaction.
        chosen = sorted(row.run_id for row in self.purge_candidates(cutoff, limit=size))
        if not chosen:
            return 0

        def body(tx):
            execute = tx.connection.execute
            ids = q.ids_param(chosen)
            for statement in (q.PURGE_ATTEMPTS, q.PURGE_FACTS, q.PURGE_STATE, q.PURGE_LEASES):
                execute(statement, (ids,))
            return int(_count(execute(q.PURGE_RUNS, (ids,))))

        return self._tm.write("purge_settled", body)


def factory(clock, target):
    return _races.with_mistake(_races.open_target(clock, target), ChosenBefore)
