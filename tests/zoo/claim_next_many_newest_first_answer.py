"""A store whose claim_next_many takes the right runs but answers them newest
first: it collects the claimed rows on a stack (``insert(0, row)``), so a
worker that works through its batch in the order given starts with the
youngest; contract.md (wave 3) says oldest first."""

from runstore.sqlite import SqliteRunStore

from ._stores import IN_MEMORY, open_as

KIND = "store"
EXPECTED_CHECK = "OutcomeMismatch"
capabilities = IN_MEMORY


class AnswersNewestFirst(SqliteRunStore):
    def claim_next_many(self, *args, **kwargs):
        taken = super().claim_next_many(*args, **kwargs)
        stack = []
        for row in taken:
            stack.insert(0, row)  # the bug
        return stack


def factory(clock, path):
    return open_as(AnswersNewestFirst, clock)
