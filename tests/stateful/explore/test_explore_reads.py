"""Reads first, and every write read back (issue 25): a store can carry state
the model does not, such as a ``revision()`` that lags behind one write.

A walk that reads a state only when it expands it misses a lag on a path
into a state it already walked (or into its deepest level, never expanded).
The explorer applies the reads first to a store just restored or rebuilt,
and reads every write back at once (``revision()``, ``changes()`` after the
revision before it, ``list_runs()``, ``get`` of each run), whether or not its
state is new to the walk.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from runstore.stateful import explore
from runstore.stateful._explore._scope import SCOPES
from runstore.stateful._explore._walk import Walker


def _entry(name: str) -> ModuleType:
    return importlib.import_module(f"tests.zoo.{name}")


def _moves(program: str) -> list[str]:
    return [line for line in program.splitlines() if line and not line.startswith("create(")]


def test_a_batch_renewal_reaches_a_state_a_plain_renewal_reached_first() -> None:
    """The premise of the zoo entry below: in the tiny scope, after ``claim_and_own``, the
    ``heartbeat_many`` of the one run reaches no state the walk has not reached by then
    (the plain ``heartbeat`` before it in the move order reaches the same one)."""
    walker = Walker(SCOPES["tiny"])
    assert walker.expand(0, keep=True)
    graph = walker.graph
    owned = next(
        i
        for i, node in enumerate(graph.nodes)
        if node.move is not None and node.move.method == "claim_and_own"
    )
    assert walker.expand(owned, keep=True)
    assert walker.last is not None
    batch = [
        (move, born)
        for (move, _, state, _), born in zip(walker.last, walker.born, strict=True)
        if getattr(move, "method", "") == "heartbeat_many" and state is not graph.nodes[owned].state
    ]
    assert batch, "no heartbeat_many changed the state"
    assert all(born == -1 for _, born in batch)


def test_a_read_lagging_a_write_into_a_walked_state_is_found() -> None:
    """``revision_lag_after_heartbeat_many``: found in the tiny scope as its shortest
    program, the batch renewal read back at once (a second or two)."""
    module = _entry("revision_lag_after_heartbeat_many")
    result = explore(
        store_factory=module.factory, capabilities=module.capabilities, scope="tiny", depth_k=0
    )
    assert result.failure is not None, result.describe()
    assert result.failure.check == module.EXPECTED_CHECK
    moves = _moves(result.failure.program)
    assert len(moves) == module.SHORTEST, result.failure.program
    assert moves[-2].startswith("heartbeat_many(")
    assert moves[-1].startswith("revision()")


def test_the_lag_is_not_a_false_alarm_on_the_shipped_store() -> None:
    """The same walk over the shipped store (the zoo entry without its bug) is clean."""
    from tests.zoo._noted_revision import NotedRevision, opened

    def factory(clock, path):  # type: ignore[no-untyped-def]
        return opened(NotedRevision, clock)

    module = _entry("revision_lag_after_heartbeat_many")
    result = explore(
        store_factory=factory, capabilities=module.capabilities, scope="tiny", depth_k=0
    )
    assert result.clean, result.describe()
