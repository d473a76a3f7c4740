"""A store that never lets the cancellation guard refuse a failure: settling
a run as ``failed`` skips the guard ("a failure must always be recorded"),
so a worker that reports failure only while nobody asked to cancel (guard
``absent``) settles the run as failed over a cancellation request. Every
other status keeps the guard; contract.md: a guard that does not hold
answers ``GuardFailed`` and writes nothing."""

from runstore.sqlite import SqliteRunStore
from runstore.sqlite import _queries as shipped

from ._queries import queries_with
from ._stores import IN_MEMORY, open_as

KIND = "store"
EXPECTED_CHECK = "OutcomeMismatch"
capabilities = IN_MEMORY
#: The explorer's zoo: the kind of bug, and the scope and number of moves after its
#: setup at which ``explore`` finds it (tests/stateful/explore/test_explore_zoo.py).
BUG_KIND = "fencing"
EXPLORE_SCOPE = "small"
SHORTEST = 2

_GUARDED = "AND NOT ((?5 IS 'absent'"
assert _GUARDED in shipped.TRANSITION_SETTLE_WRITE, "the adapter's settle changed"
# The bug: the guard does not apply when the run settles as failed.
_SETTLE_WRITE = shipped.TRANSITION_SETTLE_WRITE.replace(
    _GUARDED, "AND NOT (?6 IS NOT 'failed' AND ((?5 IS 'absent'"
).rstrip()
assert _SETTLE_WRITE.endswith("IS NULL))"), _SETTLE_WRITE
_SETTLE_WRITE += ")\n"


class FailedSkipsGuard(SqliteRunStore):
    _queries = queries_with(TRANSITION_SETTLE_WRITE=_SETTLE_WRITE)


def factory(clock, path):
    return open_as(FailedSkipsGuard, clock)
