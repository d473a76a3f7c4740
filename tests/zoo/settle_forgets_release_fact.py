"""A store that releases the run when it settles or suspends but records no
``released`` fact, so replaying the facts no longer rebuilds the owner."""

from ._stores import IN_MEMORY, open_as
from ._transition import PatchedTransition

KIND = "store"
EXPECTED_CHECK = "FactReplayMismatch"
capabilities = IN_MEMORY


class ForgetsFact(PatchedTransition):
    record_release = False  # the bug


def factory(clock, path):
    return open_as(ForgetsFact, clock)
