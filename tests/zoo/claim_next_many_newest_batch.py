"""A store whose claim_next_many takes the newest claimable runs, handed back
oldest first: its batch is chosen by a subquery that orders the claimable
runs backwards (the ``ORDER BY ... DESC LIMIT n`` of a "latest n" query
copied over), and the claims then walk that set in the usual order. A
worker draining a queue in batches starves its oldest work; contract.md
(wave 3) says the oldest claimable runs.

The run-store machine lets ``claim_next_many`` take any runs the model could,
oldest first and as many as there are up to the limit (a store under
contention may skip runs others hold); this store's answers fit that, so only
a walk that compares it with the model's own batch in a sequential program
sees it."""

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

_WHERE = "WHERE r.status IN ('pending', 'suspended') AND r.claim_host_id IS NULL"
assert _WHERE in shipped.CLAIM_NEXT_PICK, "the adapter's claim_next pick changed"


def _newest(limit: int) -> str:
    """The shipped pick, kept to the ``limit`` newest claimable runs (the bug)."""
    newest = (
        f"{_WHERE} AND r.run_id IN (SELECT n.run_id FROM flows_runs AS n"
        " WHERE n.status IN ('pending', 'suspended') AND n.claim_host_id IS NULL"
        f" AND n.status IN (?3, ?4) ORDER BY n.created_at_ms DESC, n.run_id DESC LIMIT {limit})"
    )
    return shipped.CLAIM_NEXT_PICK.replace(_WHERE, newest)


class BatchTakesNewest(SqliteRunStore):
    def claim_next_many(self, owner, now_ms, limit, **kwargs):
        if type(limit) is int and 1 <= limit <= 1000:
            self._queries = queries_with(CLAIM_NEXT_PICK=_newest(limit))
        try:
            return super().claim_next_many(owner, now_ms, limit, **kwargs)
        finally:
            self.__dict__.pop("_queries", None)


def factory(clock, path):
    return open_as(BatchTakesNewest, clock)
