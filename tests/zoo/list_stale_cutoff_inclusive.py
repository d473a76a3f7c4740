"""A store whose ``list_runs(stale_at=...)`` counts a heartbeat exactly
``HEARTBEAT_STALE_AFTER_MS`` old as stale (``<=`` where the rule says strictly
older): at the cutoff it offers a takeover candidate that ``steal`` and
``claim_and_own`` will then refuse as fresh. Only the listing's filter is
wrong; the takeover paths keep ``<``."""

from runstore.sqlite import SqliteRunStore
from runstore.sqlite import _queries as shipped

from ._queries import queries_with
from ._stores import IN_MEMORY, open_as

KIND = "store"
EXPECTED_CHECK = "OutcomeMismatch"
capabilities = IN_MEMORY
#: The explorer's zoo: the kind of bug, and the scope and number of moves after its
#: setup at which ``explore`` finds it (tests/stateful/explore/test_explore_zoo.py).
BUG_KIND = "read-order"
EXPLORE_SCOPE = "tiny"
SHORTEST = 3

assert shipped.LIST_STALE.endswith("r.heartbeat_at_ms < ?4"), "the adapter's filter changed"
# The bug: ``<=`` at the staleness cutoff.
_INCLUSIVE = shipped.LIST_STALE.replace("< ?4", "<= ?4")


class StaleInclusive(SqliteRunStore):
    _queries = queries_with(LIST_STALE=_INCLUSIVE)


def factory(clock, path):
    return open_as(StaleInclusive, clock)
