"""A store whose claim_next_many takes one run more than it was asked for: its
loop runs while the count is at most ``limit`` (``<=`` for ``<``), so a
worker asking for 2 runs owns 3 and leaves the third to go stale while
another worker could have had it; contract.md (wave 3) says up to ``limit``."""

from runstore._constants import MAXIMUM_CLAIM_BATCH
from runstore.sqlite import SqliteRunStore

from ._stores import IN_MEMORY, open_as

KIND = "store"
EXPECTED_CHECK = "OutcomeMismatch"
capabilities = IN_MEMORY


class TakesOneMore(SqliteRunStore):
    def claim_next_many(self, owner, now_ms, limit, **kwargs):
        # The bug: the bound is inclusive (kept admissible, so only the count is off).
        more = limit + 1 if type(limit) is int and 1 <= limit < MAXIMUM_CLAIM_BATCH else limit
        return super().claim_next_many(owner, now_ms, more, **kwargs)


def factory(clock, path):
    return open_as(TakesOneMore, clock)
