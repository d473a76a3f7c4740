"""A store whose ``revision()`` answers the revision its last row-changing
write noted, and whose ``request_cancel`` (a one-column UPDATE, written apart
from the owner's operations) does not note it: right after a cancellation
request ``revision()`` still answers the count from before it, though the
request is committed and ``changes()`` lists it; the next write that changes
rows puts it right. contract.md (wave 3): an acknowledged write shows in the
next ``revision()`` and ``changes()`` of any reader."""

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


class LagsAfterRequest(NotedRevision):
    forgets = frozenset({"request_cancel"})  # the bug


def factory(clock, path):
    return opened(LagsAfterRequest, clock)
