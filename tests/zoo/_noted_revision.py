"""A store whose ``revision()`` answers from memory: each write that changed
rows notes the revision it committed, and ``revision()`` returns the last one
noted instead of asking the database (reads, and writes that changed
nothing, leave the note as it is). The zoo's lagging ``revision()`` is this
store with one write that does not note it (``forgets``): until the next
write that changes rows, ``revision()`` answers the count from before it."""

from runstore.sqlite import SqliteRunStore

from ._stores import open_as


class NotedRevision(SqliteRunStore):
    forgets: frozenset[str] = frozenset()

    def revision(self):
        noted = self.__dict__.get("_zoo_noted")
        return super().revision() if noted is None else noted


def opened(cls, clock):
    """``cls`` opened in memory, its writes noting the revision they committed."""
    store = open_as(cls, clock)
    tm = store._tm
    write, read = tm.write, tm.read
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

    tm.write = noting_write
    note()
    return store
