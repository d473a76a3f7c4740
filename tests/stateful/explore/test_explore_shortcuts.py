"""The explorer's shortcuts hide nothing: a step whose states and answer are exactly the
reference's is not checked again (``judge``'s ``reference_before``), and a scope's walk over
the reference is made once per process (``SharedWalker``)."""

from __future__ import annotations

from pathlib import Path

import pytest

import runstore
from runstore import ManualClock
from runstore._values import StoreState
from runstore.sqlite import SqliteRunStore
from runstore.stateful import explore
from runstore.stateful._checks._invariants import InvariantViolation
from runstore.stateful._explore import _replay, _walk
from runstore.stateful._explore._scope import SCOPES
from runstore.stateful._explore._walk import SharedWalker, Walker, walker_for

TINY = SCOPES["tiny"]


def test_exactly_tells_apart_what_equality_does_not() -> None:
    """``exactly`` is ``==`` with the same type at every level, and a dict's keys in the same
    order: ``True == 1`` and ``1 == 1.0`` hold, but they are not exactly equal."""
    exactly = _replay.exactly
    assert exactly(True, True)
    assert exactly((1, "a", None), (1, "a", None))
    assert not exactly(True, 1)
    assert not exactly(1, 1.0)
    assert not exactly([1], (1,))
    assert exactly({"a": 1, "b": 2}, {"a": 1, "b": 2})
    assert not exactly({"a": 1, "b": 2}, {"b": 2, "a": 1})
    shown = StoreState(rows=(), leases=(), facts=(), revision=1, changes=())
    assert exactly(shown, StoreState(rows=(), leases=(), facts=(), revision=1, changes=()))
    assert not exactly(shown, StoreState(rows=(), leases=(), facts=(), revision=True, changes=()))

    class Other:
        def __eq__(self, other: object) -> bool:
            return True

        __hash__ = object.__hash__

    # A type it does not know is exactly equal to nothing but itself.
    assert not exactly(Other(), Other())


class AcknowledgesWithOne(SqliteRunStore):
    """A planted bug: ``acknowledge_cancel`` answers ``1`` where the contract says ``True``
    (equal by ``==``, and the outcome comparison passes it); the revision invariant counts
    only a ``True`` answer as a row write, so it sees the revision move without one."""

    def acknowledge_cancel(self, run_id, owner, now_ms):  # type: ignore[no-untyped-def]
        answer = super().acknowledge_cancel(run_id, owner, now_ms)
        return 1 if answer is True else answer


def acknowledges_with_one(clock: ManualClock, path: Path) -> SqliteRunStore:
    store = runstore.open(":memory:", clock=clock)
    store.__class__ = AcknowledgesWithOne
    return store


def test_an_answer_equal_but_not_exactly_is_checked_in_full(monkeypatch) -> None:
    """The planted ``1`` for ``True`` is caught by the revision invariant on the tiny scope
    (a store we restore, whose states are the reference's: the shortcut's case). With the
    shortcut's exact comparison loosened to ``==``, the same walk passes it: the exactness is
    what keeps the check."""
    found = explore(store_factory=acknowledges_with_one, scope="tiny", depth_k=0)
    assert found.failure is not None, found.describe()
    assert found.failure.check == "RevisionMismatch", found.describe()
    assert found.restores > 0

    monkeypatch.setattr(_replay, "exactly", lambda a, b: a == b)
    loosened = explore(store_factory=acknowledges_with_one, scope="tiny", depth_k=0)
    assert loosened.clean, loosened.describe()


def test_the_shortcut_leaves_the_counts_as_they_were(monkeypatch) -> None:
    """With the shortcut and without it (``exactly`` never true), the tiny scope's walk of
    a shipped store gives the same verdict, states, transitions and restores."""
    taken = explore(target="sqlite-sql", scope="tiny", depth_k=0)
    monkeypatch.setattr(_replay, "exactly", lambda a, b: False)
    checked = explore(target="sqlite-sql", scope="tiny", depth_k=0)
    assert taken.clean
    assert checked.clean
    counts = (taken.states, taken.transitions, taken.restores, taken.rebuilds, taken.depth)
    assert counts == (
        checked.states,
        checked.transitions,
        checked.restores,
        checked.rebuilds,
        checked.depth,
    )


def _walked(walker: Walker | SharedWalker, keep: bool = True) -> tuple[object, ...]:
    graph = walker.graph
    kept = []
    index = 0
    while index < len(graph.nodes):
        if graph.nodes[index].depth < graph.scope.depth:
            assert walker.expand(index, keep=keep)
            kept.append((walker.last, list(walker.born)))
        index += 1
    return (tuple(graph.nodes), graph.transitions, frozenset(graph.outcomes), kept)


def test_a_shared_walk_is_the_walk_made_afresh() -> None:
    """The tiny scope's walk taken from the process's recording (twice) is the one a fresh
    ``Walker`` makes: the same nodes, transitions, answers' kinds, moves and births."""
    fresh = _walked(Walker(TINY))
    first = walker_for(TINY)
    assert isinstance(first, SharedWalker)
    assert _walked(first) == fresh
    assert _walked(walker_for(TINY)) == fresh
    # An evolved scope (not the one SCOPES defines) is walked afresh.
    import attrs

    assert isinstance(walker_for(attrs.evolve(TINY, depth=2)), Walker)


def test_a_planted_rule_is_not_taken_from_a_recording(monkeypatch) -> None:
    """A bug planted in the walk's rules after the scope was recorded (here ``check_state``
    failing on every state with a revision past 2) is found: the recording is not used."""
    _walked(walker_for(TINY))
    real = _walk.check_state

    def broken(state: StoreState, **options: bool) -> None:
        if state.revision > 2:
            raise InvariantViolation("planted")
        real(state, **options)

    monkeypatch.setattr(_walk, "check_state", broken)
    walker = walker_for(TINY)
    graph = walker.graph
    index, ok = 0, True
    while ok and index < len(graph.nodes):
        if graph.nodes[index].depth < TINY.depth:
            ok = walker.expand(index)
        index += 1
    assert not ok
    assert graph.failure is not None
    assert graph.failure.message == "planted"


@pytest.mark.parametrize("keep", [True, False])
def test_a_shared_walk_cut_short_goes_on_where_it_stopped(keep: bool) -> None:
    """A walk of the recording stopped early (a replay's failure, a deadline) leaves the
    recording able to go on: the next walk takes the recorded expansions, then makes the
    rest, and both equal a fresh walk's."""
    _walk._RECORDINGS.pop(TINY.name, None)
    first = walker_for(TINY)
    for index in range(3):
        assert first.expand(index, keep=keep)
    fresh = _walked(Walker(TINY))
    assert _walked(walker_for(TINY)) == fresh
