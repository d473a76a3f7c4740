"""A store whose heartbeat_many renews the leases and answers Updated, but
whose row write only counts the runs it was given instead of updating them:
the answer says written, the run rows (and revisions) never moved."""

from runstore.sqlite import SqliteRunStore

from ._queries import queries_with
from ._stores import IN_MEMORY, open_as

KIND = "store"
EXPECTED_CHECK = "LeaseRowDisagreement"
capabilities = IN_MEMORY

# The bug: a SELECT where the UPDATE belongs (same parameters, same count).
_COUNTS_ONLY = "SELECT count(*) FROM json_each(?1) WHERE (?2 IS NULL OR ?3 OR ?4 OR ?5 OR 1)"


class SkipsRows(SqliteRunStore):
    _queries = queries_with(RENEW_MANY_WRITE=_COUNTS_ONLY)


def factory(clock, path):
    return open_as(SkipsRows, clock)
