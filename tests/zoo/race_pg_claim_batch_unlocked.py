"""A PostgreSQL ``claim_next_many`` whose batch is chosen without a lock.

The bug: in its one write transaction the store chooses the batch with
``claim_next``'s pick query for ``limit`` rows but without its locking
clause (no ``FOR UPDATE SKIP LOCKED``: "we lock each run as we take it"),
then locks each chosen run in turn, reads it again, and takes it when it is
still claimable. A run a concurrent caller took meanwhile is left out, and
nothing is chosen in its place. One process at a time gets the shipped
answers. Under concurrency two callers choose the same oldest runs at the
same instant; the second waits on the first's row locks, finds those runs
claimed once it gets them, and answers fewer runs than its ``limit`` (often
none) while other runs were claimable all along, where the shipped store's
pick skips the locked rows and takes the next ones. PostgreSQL only (on
SQLite a write transaction holds the whole database, so nobody takes a run
between the choice and the take).
"""

from __future__ import annotations

from runstore import _boundary as admit

from . import _races

KIND = "race"

#: ``claim_next``'s pick query, for a batch and without its locking clause.
_LOCKING = "FOR UPDATE OF r SKIP LOCKED"
_ONE_ROW = "LIMIT 1"


class BatchPickedUnlocked:
    def claim_next_many(self, owner, now_ms, limit, *, status=admit.CLAIMABLE_STATUSES):
        # Imported here: the module also opens (unused) under older trees.
        from runstore._constants import HEARTBEAT_STALE_AFTER_MS
        from runstore._sql._store import _ACTIVATED, _activated_row

        q = self._queries
        who, now, size, statuses = admit.admit_claim_next_many(
            owner, now_ms, limit, status, self._clock
        )
        wanted = (statuses[0], statuses[-1])
        cutoff = now - HEARTBEAT_STALE_AFTER_MS
        pick = q.CLAIM_NEXT_PICK.replace(_LOCKING, "").replace(_ONE_ROW, f"LIMIT {int(size)}")
        again = q.CLAIM_NEXT_PICK.replace(_LOCKING, "").replace(
            "AND (r.created_at_ms, r.run_id) > ($1::bigint, $2::text)",
            "AND r.run_id = $1::text AND ($2::text IS NULL OR TRUE)",
        )
        if pick == q.CLAIM_NEXT_PICK or again == pick:
            raise AssertionError("CLAIM_NEXT_PICK's text changed")

        def body(tx):
            execute = tx.connection.execute
            # The bug: the batch is chosen by a read that locks and skips nothing.
            chosen = [row[0] for row in execute(pick, (-1, "", *wanted)).fetchall()]
            taken = []
            for rid in chosen:
                self._lock(tx, rid)
                row = execute(again, (rid, None, *wanted)).fetchone()
                if row is None:
                    continue  # someone else took it; nothing is chosen in its place
                params = (rid, row[1], None, None, None, None, cutoff)
                last = row[18] if len(row) > 18 else None
                outcome = self._claim_and_own_in(tx, rid, None, who, now, None, params, last)
                if outcome is not _ACTIVATED:
                    continue
                taken.append(_activated_row("claim_next_many", row, who, now))
            return taken

        return self._tm.write("claim_next_many", body)


def factory(clock, target):
    return _races.with_mistake(_races.open_target(clock, target), BatchPickedUnlocked)
