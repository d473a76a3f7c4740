"""A store whose ``revision()`` answers from memory: the revision is noted at
the end of every read or write transaction an operation runs, and
``revision()`` returns the last one noted instead of asking the database. The
zoo's lagging ``revision()`` is this store with one write that does not note
it (``forgets``): until the next operation's transaction, ``revision()``
answers the count from before that write.

(``state()``, an introspection read, runs in a snapshot and notes nothing.)"""

from runstore.sqlite import SqliteRunStore

from ._stores import open_as

#: The introspection reads, made in one snapshot (through ``read``): no operation's.
_SNAPSHOTS = frozenset({"state", "check_invariants"})


class NotedRevision(SqliteRunStore):
    forgets: frozenset[str] = frozenset()

    def revision(self):
        noted = self.__dict__.get("_zoo_noted")
        return super().revision() if noted is None else noted


def opened(cls, clock):
    """``cls`` opened in memory, its transactions noting the revision."""
    store = open_as(cls, clock)
    tm = store._tm
    write, read = tm.write, tm.read
    revision_query = store._queries.REVISION

    def note():
        row = read("revision", lambda c: c.execute(revision_query).fetchone())
        store.__dict__["_zoo_noted"] = int(row[0])

    def noting_write(method, body):
        try:
            return write(method, body)
        finally:
            if method not in store.forgets:
                note()

    def noting_read(method, body):
        try:
            return read(method, body)
        finally:
            if method not in _SNAPSHOTS:
                note()

    tm.write, tm.read = noting_write, noting_read
    return store
