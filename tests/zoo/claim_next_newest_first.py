"""A store whose claim_next takes the newest claimable run instead of the
oldest: its pick orders the claimable index backwards (the ``ORDER BY ...
DESC`` of a "latest" query copied over). A single worker draining a queue
starves its oldest work; contract.md (wave 3) says claim_next takes the
oldest claimable run at the linearization point.

No check of today's default run states that order: the run-store machine lets
``claim_next`` take any run the model could (a store under contention may skip
runs others hold), so only a walk that compares it with the model's own pick
in a sequential program sees it."""

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
SHORTEST = 1

_ORDER = "ORDER BY r.created_at_ms, r.run_id LIMIT 1"
assert _ORDER in shipped.CLAIM_NEXT_PICK, "the adapter's claim_next pick changed"
# The bug: newest first.
_NEWEST = shipped.CLAIM_NEXT_PICK.replace(
    _ORDER, "ORDER BY r.created_at_ms DESC, r.run_id DESC LIMIT 1"
)


class ClaimsNewest(SqliteRunStore):
    _queries = queries_with(CLAIM_NEXT_PICK=_NEWEST)


def factory(clock, path):
    return open_as(ClaimsNewest, clock)
