"""A ``purge_settled`` that chooses its runs before its write transaction.

The bug: the store asks ``purge_candidates`` (a read of its own) which runs
are settled and finished before the cutoff, then deletes exactly those in a
write transaction, without choosing again inside it ("they are settled, and
settled runs stay settled"). A suspended run is settled but not final: an
owner can claim and resume it between the read and the delete, and the
purge then deletes a running run (and one whose new round was just
created). One process at a time never sees it. Both backends.
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
