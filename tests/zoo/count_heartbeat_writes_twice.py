"""A heartbeat that writes its run row twice (a "touch" before the renewal).

The bug: ``heartbeat`` runs the renewal twice in a row, as a store that
first touched the row to take its lock and then wrote it again would. Both
writes land in the same state (the heartbeat never moves backwards, and the
second finds the owner it just renewed), the answer is the same, and no
per-run read can tell: only the database-wide revision counter, which goes
up by two, shows it. The torture's final revision check must catch it.
"""

from __future__ import annotations

from runstore.sqlite import SqliteRunStore

from . import _races

KIND = "count"


class HeartbeatWritesTwice(SqliteRunStore):
    def heartbeat(self, run_id, owner, now_ms):
        super().heartbeat(run_id, owner, now_ms)
        return super().heartbeat(run_id, owner, now_ms)


def factory(clock, path):
    store = _races.open_file(clock, path)
    store.__class__ = HeartbeatWritesTwice
    return store
