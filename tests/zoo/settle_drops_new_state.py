"""A store that writes the new state only for a running-to-running
transition and silently drops it when the run settles or suspends."""

from ._stores import IN_MEMORY, open_as
from ._transition import PatchedTransition

KIND = "store"
EXPECTED_CHECK = "StateNotPreserved"
capabilities = IN_MEMORY


class DropsState(PatchedTransition):
    write_state_when_settling = False  # the bug


def factory(clock, path):
    return open_as(DropsState, clock)
