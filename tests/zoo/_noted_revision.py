"""A store whose ``revision()`` answers from memory: it returns the revision
last noted instead of asking the database. A note is taken at the end of
every write that changed rows, and of every transaction that goes through the
store's generic helpers (``_write`` and ``_read``, the attempt store's path);
the run operations' own reads, and writes that changed nothing, leave it as it
is. The zoo's lagging ``revision()`` is this store with one write that does
not take its note (``forgets``): until the next note, ``revision()`` answers
the count from before that write."""

from runstore.sqlite import SqliteRunStore

from ._stores import open_as


class NotedRevision(SqliteRunStore):
    forgets: frozenset[str] = frozenset()

    def revision(self):
        noted = self.__dict__.get("_zoo_noted")
        return super().revision() if noted is None else noted


def opened(cls, clock):
    """``cls`` opened in memory, taking its notes of the revision."""
    store = open_as(cls, clock)
    tm = store._tm
    write, read = tm.write, tm.read
    helper_write, helper_read = store._write, store._read
    revision_query = store._queries.REVISION

    def note():
        row = read("revision", lambda c: c.execute(revision_query).fetchone())
        store.__dict__["_zoo_noted"] = int(row[0])

    def noting_write(method, body):
        changed = tm.connection.total_changes
        try:
            return write(method, body)
        finally:
            if tm.connection.total_changes != changed and method not in store.forgets:
                note()

    def helper(through):
        def noting(method, body):
            try:
                return through(method, body)
            finally:
                note()

        return noting

    tm.write = noting_write
    store._write, store._read = helper(helper_write), helper(helper_read)
    note()
    return store
