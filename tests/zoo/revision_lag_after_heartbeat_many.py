"""A store whose ``revision()`` answers the revision its last transaction
noted, and whose ``heartbeat_many`` (one set-based statement, written after
the rest) does not note it: right after a batch renewal ``revision()`` still
answers the count from before it, though the renewed rows are committed and
``changes()`` lists them. contract.md (wave 3): an acknowledged write shows in
the next ``revision()`` and ``changes()`` of any reader."""

from ._noted_revision import NotedRevision, opened
from ._stores import IN_MEMORY

KIND = "store"
EXPECTED_CHECK = "OutcomeMismatch"
capabilities = IN_MEMORY
#: The explorer's zoo: the kind of bug, and the scope and number of moves after its
#: setup at which ``explore`` finds it (tests/stateful/explore/test_explore_zoo.py).
BUG_KIND = "read-lag"
EXPLORE_SCOPE = "small"
SHORTEST = 3


class LagsAfterBatch(NotedRevision):
    forgets = frozenset({"heartbeat_many"})  # the bug


def factory(clock, path):
    return opened(LagsAfterBatch, clock)
