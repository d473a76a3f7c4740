"""A store whose checkpoint (a ``transition_owned`` to ``running``) checks
only the ``present`` arm of the cancellation guard: a checkpoint under
``TransitionGuard("absent")`` goes through although cancellation was asked,
so a worker that writes progress only while nobody wants the run stopped
writes it anyway. The settling path keeps the whole guard; contract.md: a
guard that does not hold answers ``GuardFailed`` and writes nothing."""

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
SHORTEST = 3

_ABSENT_ARM = "(?5 IS 'absent' AND cancel_requested_at_ms IS NOT NULL) OR "
assert _ABSENT_ARM in shipped.TRANSITION_RUNNING_WRITE, "the adapter's guard changed"
# The bug: the checkpoint's guard has lost its ``absent`` arm.
_RUNNING_WRITE = shipped.TRANSITION_RUNNING_WRITE.replace(_ABSENT_ARM, "")


class CheckpointSkipsAbsent(SqliteRunStore):
    _queries = queries_with(TRANSITION_RUNNING_WRITE=_RUNNING_WRITE)


def factory(clock, path):
    return open_as(CheckpointSkipsAbsent, clock)
