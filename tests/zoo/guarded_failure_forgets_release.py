"""A store whose transition_owned, when the owner fails a run under a
``present`` guard (giving up because cancellation was asked), releases the
ownership but does not record the ``released`` fact: the run's ownership
history ends with its owner still holding it, and replaying the facts no
longer rebuilds its owner. Every other settle records the release;
contract.md: each ownership transition appends its fact."""

from ._stores import IN_MEMORY, open_as
from ._transition import PatchedTransition

KIND = "store"
EXPECTED_CHECK = "FactReplayMismatch"
capabilities = IN_MEMORY
#: The explorer's zoo: the kind of bug, and the scope and number of moves after its
#: setup at which ``explore`` finds it (tests/stateful/explore/test_explore_zoo.py).
BUG_KIND = "state-lost"
EXPLORE_SCOPE = "small"
SHORTEST = 3


class GuardedFailureForgetsRelease(PatchedTransition):
    _giving_up = False

    @property
    def record_release(self):
        return not self._giving_up

    def transition_owned(self, run_id, owner, to_status, state_json=None, guard=None):
        # The bug: a failure under a present guard takes a branch without the fact.
        self._giving_up = (
            to_status == "failed"
            and guard is not None
            and getattr(guard, "cancel_requested", None) == "present"
        )
        try:
            return super().transition_owned(run_id, owner, to_status, state_json, guard)
        finally:
            self._giving_up = False


def factory(clock, path):
    return open_as(GuardedFailureForgetsRelease, clock)
