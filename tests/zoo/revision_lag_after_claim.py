"""A store whose ``revision()`` answers the revision its last row-changing
write noted, and whose ``claim`` (the reservation, written apart from the
takeover paths) does not note it: right after a claim ``revision()`` still
answers the count from before it, though the claim is committed and
``changes()`` lists it; the next write that changes rows puts it right.
contract.md (wave 3): an acknowledged write shows in the next ``revision()``
and ``changes()`` of any reader."""

from ._noted_revision import NotedRevision, opened
from ._stores import IN_MEMORY

KIND = "store"
EXPECTED_CHECK = "OutcomeMismatch"
capabilities = IN_MEMORY
#: The explorer's zoo: the kind of bug, and the scope and number of moves after its
#: setup at which ``explore`` finds it (tests/stateful/explore/test_explore_zoo.py).
BUG_KIND = "read-lag"
EXPLORE_SCOPE = "small"
SHORTEST = 2


class LagsAfterClaim(NotedRevision):
    forgets = frozenset({"claim"})  # the bug


def factory(clock, path):
    return opened(LagsAfterClaim, clock)
