"""A store whose transition_owned drops the new state when the owner
suspends a run under a ``present`` guard (parking it because cancellation
was asked): the status is written, the checkpoint it was handed is not. Every
other transition keeps its state; contract.md: a transition with
``state_json`` writes it with the status, in one transaction."""

from ._stores import IN_MEMORY, open_as
from ._transition import PatchedTransition

KIND = "store"
EXPECTED_CHECK = "StateNotPreserved"
capabilities = IN_MEMORY
#: The explorer's zoo: the kind of bug, and the scope and number of moves after its
#: setup at which ``explore`` finds it (tests/stateful/explore/test_explore_zoo.py).
BUG_KIND = "state-lost"
EXPLORE_SCOPE = "small"
SHORTEST = 3


class GuardedSuspendDropsState(PatchedTransition):
    _parking = False

    @property
    def write_state_when_settling(self):
        return not self._parking

    def transition_owned(self, run_id, owner, to_status, state_json=None, guard=None):
        # The bug: a guarded suspend takes the branch that writes no state.
        self._parking = (
            to_status == "suspended"
            and guard is not None
            and getattr(guard, "cancel_requested", None) == "present"
        )
        try:
            return super().transition_owned(run_id, owner, to_status, state_json, guard)
        finally:
            self._parking = False


def factory(clock, path):
    return open_as(GuardedSuspendDropsState, clock)
