"""A store whose claim_next prefers fresh work: it takes the oldest pending
run before any suspended one, however much older the suspended run is (its
pick orders by status first). contract.md (wave 3): claim_next takes the
oldest claimable run of the statuses asked (pending and suspended by
default), so a suspended run waiting longer is passed over.

No check of today's default run states that order: the run-store machine lets
``claim_next`` take any run the model could."""

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
EXPLORE_SCOPE = "small"
SHORTEST = 3

_ORDER = "ORDER BY r.created_at_ms, r.run_id LIMIT 1"
assert _ORDER in shipped.CLAIM_NEXT_PICK, "the adapter's claim_next pick changed"
# The bug: pending runs first, then by age.
_PENDING_FIRST = shipped.CLAIM_NEXT_PICK.replace(
    _ORDER, "ORDER BY r.status = 'suspended', r.created_at_ms, r.run_id LIMIT 1"
)


class PendingFirst(SqliteRunStore):
    _queries = queries_with(CLAIM_NEXT_PICK=_PENDING_FIRST)


def factory(clock, path):
    return open_as(PendingFirst, clock)
