"""A store that settles or suspends a run without clearing a pending claim on
the row, while the strategy (releasing the ownership) drops it: lease and row
disagree."""

from ._stores import IN_MEMORY, open_as
from ._transition import PatchedTransition

KIND = "store"
EXPECTED_CHECK = "LeaseRowDisagreement"
capabilities = IN_MEMORY


class KeepsClaim(PatchedTransition):
    keep_claim = True  # the bug


def factory(clock, path):
    return open_as(KeepsClaim, clock)
