"""A deferred transaction whose retry re-runs only the writes of its body.

The store begins its writes with ``BEGIN`` (deferred). On SQLite that alone
is safe: the snapshot is taken at the first read, and a transaction whose
snapshot went stale cannot upgrade to a write (``SQLITE_BUSY``), so replaying
the whole body reads afresh (``deferred_begin_full_replay`` is that store,
and passes). The bug is an "optimization" of the retry: the SELECTs of the
first attempt are kept and served again to the retry, which re-runs only the
statements that write. The retry then decides on the row as it was before
the other process's commit that made it fail: the strategy refuses the grant,
and the loss reported is the stale one.
"""

from __future__ import annotations

from . import _races

KIND = "race"


class _KeepsReads:
    """The connection a retry sees: SELECTs answered from the first attempt."""

    def __init__(self, connection, kept):
        self._connection = connection
        self._kept = kept

    def execute(self, sql, parameters=()):
        if not sql.lstrip().upper().startswith("SELECT"):
            return self._connection.execute(sql, parameters)
        key = (sql, tuple(parameters))
        if key not in self._kept:
            self._kept[key] = self._connection.execute(sql, parameters).fetchall()
        return _Rows(self._kept[key])

    def __getattr__(self, name):
        return getattr(self._connection, name)


class _Rows:
    def __init__(self, rows):
        self._rows = list(rows)

    def fetchone(self):
        return self._rows.pop(0) if self._rows else None

    def fetchall(self):
        rows, self._rows = self._rows, []
        return rows


def factory(clock, path):
    store = _races.open_file(clock, path)
    kept = {}

    def connection_for(connection, attempt):
        if attempt == 1:
            kept.clear()
        return _KeepsReads(connection, kept)

    store._tm.write = _races.deferred_write(store._tm, "explicit", connection_for)
    return store
