"""A store whose ``revision()`` answers the revision its last row-changing
write noted, and whose ``heartbeat_many`` does not note it: right after a
batch renewal ``revision()`` still answers the count from before it, though
the renewal is committed and ``changes()`` lists it; the next write that
changes rows puts it right. contract.md (wave 3): an acknowledged write shows
in the next ``revision()`` and ``changes()`` of any reader.

A batch renewal of one run reaches the state a plain ``heartbeat`` of it
reaches first, so a walk that reads a state only when it expands it never
reads after this write: the explorer reads every write back at once
(tests/stateful/explore/test_explore_reads.py). Not in ``EXPLORE_ZOO``: its
survival of the default ``run_conformance`` was not measured."""

from ._noted_revision import NotedRevision, opened
from ._stores import IN_MEMORY

KIND = "store"
EXPECTED_CHECK = "OutcomeMismatch"
capabilities = IN_MEMORY
BUG_KIND = "read-lag"
EXPLORE_SCOPE = "tiny"
SHORTEST = 3


class LagsAfterBatchRenewal(NotedRevision):
    forgets = frozenset({"heartbeat_many"})  # the bug


def factory(clock, path):
    return opened(LagsAfterBatchRenewal, clock)
