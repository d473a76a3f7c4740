"""A store that never lets the cancellation guard refuse a completion that
carries its result: ``transition_owned(..., "completed", state_json=...)``
settles whatever the guard says ("a finished result must not be lost"), so a
worker that completes only while nobody asked to cancel (guard ``absent``)
completes over a cancellation request, and one that requires a request
(``present``) completes without one. A completion without a state, and every
other status, keep the guard; contract.md: a guard that does not hold answers
``GuardFailed`` and writes nothing."""

from runstore import _boundary as admit
from runstore.sqlite import SqliteRunStore

from ._stores import IN_MEMORY, open_as

KIND = "store"
EXPECTED_CHECK = "OutcomeMismatch"
capabilities = IN_MEMORY
#: The explorer's zoo: the kind of bug, and the scope and number of moves after its
#: setup at which ``explore`` finds it (tests/stateful/explore/test_explore_zoo.py).
BUG_KIND = "fencing"
EXPLORE_SCOPE = "small"
SHORTEST = 2


class ResultSkipsGuard(SqliteRunStore):
    def transition_owned(self, run_id, owner, to_status, state_json=None, guard=None):
        admit.admit_transition_owned(run_id, owner, to_status, state_json, guard)
        if to_status == "completed" and state_json is not None:
            guard = None  # the bug
        return super().transition_owned(run_id, owner, to_status, state_json, guard)


def factory(clock, path):
    return open_as(ResultSkipsGuard, clock)
