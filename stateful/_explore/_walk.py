"""The breadth-first walk of a scope over the reference model, and canonical states.

A node of the walk is a committed ``ModelState`` and the store clock. From each
node of depth below the scope's, every move of the scope is applied to a
``ModelRunStore`` set to that node, and every invariant of the suite is checked
on the reference's own step (``check_state`` on the state it reached,
``check_transition`` on the step), as the machines check it. A state reached
for the first time (by its canonical form) becomes a node one level deeper,
remembering the move and the node it came from: breadth-first, so the path to
a node is a shortest program that reaches it.

The canonical form identifies states that behave alike:

- time is kept relative to the store clock: every timestamp of the state
  (created, started, finished, heartbeat, claim, cancellation, grant,
  acknowledgement) as its distance from the clock, so every returned
  timestamp keeps its relation to every cutoff and to every other timestamp;
  the model's rules read only such differences;
- owners of one class (the same host) are interchangeable: the form is the
  set of the state's images under the permutations within each class (its
  orbit: equal for two states exactly when one is a renaming of the other);
- revisions, facts, statuses, state texts and the change feed are kept as
  they are.

``canonical=False`` keys a state by its exact value and clock instead (the
unabstracted walk a test compares with).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

import attrs

from runstore._values import OwnerId, StoreState
from runstore.model import ModelRunStore
from runstore.model._state import ModelState

from .._base._steps import Call, Raised, Step, perform
from .._checks._invariants import InvariantViolation, check_state, check_transition
from ._scope import Move, Scope, Tick, at_depth, moves, setup_calls, start_ms


class Dial:
    """A store clock the walk sets to any reading (back as well as forward)."""

    def __init__(self, ms: int) -> None:
        self.ms = ms

    def now_ms(self) -> int:
        """The reading last set."""
        return self.ms

    def sleep_until(self, deadline_ms: int) -> None:
        """Move the reading on to ``deadline_ms`` (no waiting: the walk owns time)."""
        self.ms = max(self.ms, deadline_ms)

    async def asleep_until(self, deadline_ms: int) -> None:
        """As ``sleep_until``, for a task."""
        self.sleep_until(deadline_ms)


@attrs.frozen
class Node:
    """One state of the walk: the model's committed state, the store clock, the node it was
    first reached from (``-1`` for the start), the move that reached it and the reference's
    answer, and its depth (the length of the shortest program)."""

    state: ModelState
    clock_ms: int
    parent: int
    move: Move | None
    outcome: Any
    depth: int


@attrs.frozen
class ReferenceFailure:
    """An invariant the reference model broke on its own step (a defect of the suite)."""

    node: int
    move: Move
    outcome: Any
    check: str
    message: str


@attrs.define
class Walk:
    """The graph walked so far: its nodes in breadth-first order, how many transitions were
    checked, whether it was exhausted, and a reference failure if one stopped it."""

    scope: Scope
    nodes: list[Node] = attrs.field(factory=list)
    transitions: int = 0
    exhausted: bool = False
    failure: ReferenceFailure | None = None
    outcomes: set[tuple[str, str]] = attrs.field(factory=set)

    @property
    def depth(self) -> int:
        """The deepest level reached."""
        return self.nodes[-1].depth if self.nodes else 0

    def path(self, index: int) -> list[tuple[Move, Any]]:
        """The moves (and the reference's answers) from the start to node ``index``."""
        out: list[tuple[Move, Any]] = []
        while index > 0:
            node = self.nodes[index]
            assert node.move is not None
            out.append((node.move, node.outcome))
            index = node.parent
        out.reverse()
        return out

    def levels(self) -> Iterator[tuple[int, list[int]]]:
        """Each depth and the indexes of its nodes, shallowest first."""
        for depth, group in itertools.groupby(
            range(len(self.nodes)), lambda i: self.nodes[i].depth
        ):
            yield depth, list(group)


def view(state: ModelState) -> StoreState:
    """A model state as the ``StoreState`` ``ModelRunStore.state()`` gives."""
    store = ModelRunStore(clock=Dial(0))
    store._state = state
    shown: StoreState = store.state()
    return shown


def start(scope: Scope) -> tuple[ModelRunStore, Dial]:
    """A model store with the scope's runs created, and its clock."""
    dial = Dial(start_ms())
    model = ModelRunStore(clock=dial)
    for op in setup_calls(scope):
        outcome = perform(model, op)
        if isinstance(outcome, Raised):
            raise AssertionError(f"the scope's setup failed on the reference: {op.describe()}")
    return model, dial


# -- canonical form ---------------------------------------------------------------


class _OwnerClasses(Protocol):
    """A scope's owners and the classes of interchangeable ones (indexes into ``owners``)."""

    @property
    def owners(self) -> tuple[OwnerId, ...]: ...

    @property
    def owner_classes(self) -> tuple[tuple[int, ...], ...]: ...


def owner_renamings(scope: _OwnerClasses) -> list[dict[OwnerId, OwnerId]]:
    """Every renaming of owners within their classes (the identity first): the run walk's,
    the attempt walk's and the strategy walk's canonical forms all identify states so."""
    per_class = [
        [dict(zip(group, image, strict=True)) for image in itertools.permutations(group)]
        for group in scope.owner_classes
    ]
    out = []
    for choice in itertools.product(*per_class):
        mapping: dict[OwnerId, OwnerId] = {}
        for part in choice:
            for a, b in part.items():
                mapping[scope.owners[a]] = scope.owners[b]
        out.append(mapping)
    return out


def _form(value: Any, shift: int, rename: Mapping[OwnerId, OwnerId]) -> Any:
    if isinstance(value, OwnerId):
        renamed = rename.get(value, value)
        return (renamed.host_id, renamed.pid, renamed.nonce)
    if isinstance(value, tuple):
        return tuple(_form(item, shift, rename) for item in value)
    if attrs.has(type(value)):
        out = []
        for field in attrs.fields(type(value)):
            item = getattr(value, field.name)
            if field.name.endswith("_at_ms") and type(item) is int:
                out.append(item - shift)
            else:
                out.append(_form(item, shift, rename))
        return tuple(out)
    return value


def canonical_key(
    scope: Scope, state: ModelState, clock_ms: int, renamings: list[dict[OwnerId, OwnerId]]
) -> Any:
    """The canonical form of ``state`` with the store clock at ``clock_ms``."""
    shown = view(state)
    forms = [(_form(shown, clock_ms, rename), state.compacted_through) for rename in renamings]
    # The set of a state's images under every renaming is the same for every state of its
    # class (the renamings form a group), and differs between classes.
    return frozenset(forms) if len(forms) > 1 else forms[0]


def exact_key(scope: Scope, state: ModelState, clock_ms: int, renamings: Any) -> Any:
    """A state's exact value and clock (no abstraction)."""
    del scope, renamings
    return (view(state), state.compacted_through, clock_ms)


# -- the walk ---------------------------------------------------------------------


def apply(model: ModelRunStore, dial: Dial, node: Node, move: Move) -> tuple[Any, ModelState, int]:
    """Apply ``move`` to the model set to ``node``: the answer, the state and the clock after."""
    model._state = node.state
    dial.ms = node.clock_ms
    if isinstance(move, Tick):
        return None, node.state, move.ms
    outcome = perform(model, move)
    return outcome, model._state, node.clock_ms


class Walker:
    """A breadth-first walk of ``scope`` over the reference model, one node at a time.

    ``expand(index)`` applies every move of the scope to node ``index``, checks every
    invariant on every step (``check_state``, ``check_transition``) and adds each state
    reached for the first time as a node one level deeper; ``graph`` is the walk so far.
    ``canonical=False`` keys states by their exact value (the unabstracted walk)."""

    def __init__(self, scope: Scope, *, canonical: bool = True) -> None:
        self.model, self.dial = start(scope)
        self.renamings = owner_renamings(scope) if canonical else [{}]
        self.key_of = canonical_key if canonical else exact_key
        self.graph = Walk(scope)
        root = Node(self.model._state, self.dial.ms, -1, None, None, 0)
        self.graph.nodes.append(root)
        self.seen = {self.key_of(scope, root.state, root.clock_ms, self.renamings)}
        self.last: list[tuple[Move, Any, ModelState, StoreState | None]] | None = None
        #: With ``keep``: for each move of ``last``, the node it first reached (-1: none).
        self.born: list[int] = []
        check_state(view(root.state))

    def expand(self, index: int, *, keep: bool = False) -> bool:
        """Expand node ``index``; False when the reference broke an invariant (``failure``).
        With ``keep``, ``last`` holds every move of the node with the reference's answer, the
        state it reached and that state's view (None for a clock move), for a replay to reuse."""
        graph, scope = self.graph, self.graph.scope
        node = graph.nodes[index]
        before = view(node.state)
        kept: list[tuple[Move, Any, ModelState, StoreState | None]] = []
        born: list[int] = []
        self.last = kept if keep else None
        self.born = born
        for move in moves(at_depth(scope, node.depth), node.state, node.clock_ms):
            outcome, after_state, after_clock = apply(self.model, self.dial, node, move)
            graph.transitions += 1
            after: StoreState | None = None
            if isinstance(move, Call):
                graph.outcomes.add((move.method, _shape(outcome)))
                after = before if after_state is node.state else view(after_state)
                try:
                    if after is not before:  # the node's own state was checked when reached
                        check_state(after)
                    check_transition(before, after, Step(move, outcome))
                except InvariantViolation as error:
                    graph.failure = ReferenceFailure(
                        index, move, outcome, type(error).__name__, str(error)
                    )
                    return False
            if keep:
                kept.append((move, outcome, after_state, after))
                born.append(-1)
            if after_state is node.state and after_clock == node.clock_ms:
                continue
            key = self.key_of(scope, after_state, after_clock, self.renamings)
            if key in self.seen:
                continue
            self.seen.add(key)
            if keep:
                born[-1] = len(graph.nodes)
            graph.nodes.append(Node(after_state, after_clock, index, move, outcome, node.depth + 1))
        return True


@attrs.frozen
class _Expanded:
    """What one expansion of a recorded walk did: the nodes it added, the transitions it
    checked, the answers' kinds it saw first, every move with its answer, state and view
    (``Walker.last``), the node each move first reached (``Walker.born``), and the
    reference's failure when it broke an invariant there."""

    nodes: tuple[Node, ...]
    transitions: int
    outcomes: tuple[tuple[str, str], ...]
    last: list[tuple[Move, Any, ModelState, StoreState | None]]
    born: list[int]
    failure: ReferenceFailure | None


@attrs.define
class _Recording:
    """A scope's walk made once in this process (``master``), each expansion recorded in
    the order made, and the objects the walk's rules were when it began (``rules``)."""

    master: Walker
    rules: tuple[Any, ...]
    expanded: dict[int, _Expanded] = attrs.field(factory=dict)


#: The scopes whose walk is recorded once per process, and the recordings made.
SHARED_SCOPES: frozenset[str] = frozenset({"tiny", "small"})
_RECORDINGS: dict[str, _Recording] = {}


def _rules() -> tuple[Any, ...]:
    """Every object the walk's outcome depends on: the members of the reference model's
    modules and classes, of the invariants, of the scopes' moves and of this module. A test
    that plants a bug in any of them (``monkeypatch.setattr``) changes one of them, and its
    walk is not taken from a recording (which holds them, so none is collected and its id
    taken by another)."""
    import sys

    from runstore.model import ModelRunStore

    from .._base import _steps
    from .._checks import _invariants
    from . import _scope

    modules = [
        module
        for name, module in sorted(sys.modules.items())
        if module is not None and (name == "runstore.model" or name.startswith("runstore.model."))
    ]
    modules += [_invariants, _scope, _steps, sys.modules[__name__]]
    out: list[Any] = []
    for module in modules:
        out.extend(vars(module).values())
    for cls in ModelRunStore.__mro__:
        out.extend(vars(cls).values())
    return tuple(out)


class SharedWalker:
    """A ``Walker`` of one of ``SHARED_SCOPES`` whose expansions are made once per process:
    the first walk of the scope records each expansion (with every move's answer, state and
    view), and a later walk of the same scope takes the recorded expansion instead of
    making it again; an expansion no walk has made yet is made by the recording's walker
    and recorded. The graph, the counts, the answers' kinds, ``last``, ``born`` and the
    reference's failure are the ones ``Walker`` gives: the walk is deterministic, and a
    recording is used only while every rule it was made with (``_rules``) is the same
    object. Expansions are asked for in the order ``Walker``'s are (increasing indexes)."""

    def __init__(self, scope: Scope) -> None:
        rules = _rules()
        recording = _RECORDINGS.get(scope.name)
        if (
            recording is None
            or len(recording.rules) != len(rules)
            or not all(map(_same, recording.rules, rules))
        ):
            recording = _Recording(Walker(scope), rules)
            _RECORDINGS[scope.name] = recording
        self.recording = recording
        root = recording.master.graph.nodes[0]
        self.graph = Walk(scope)
        self.graph.nodes.append(root)
        self.last: list[tuple[Move, Any, ModelState, StoreState | None]] | None = None
        self.born: list[int] = []

    def expand(self, index: int, *, keep: bool = False) -> bool:
        """As ``Walker.expand``."""
        recording, graph = self.recording, self.graph
        done = recording.expanded.get(index)
        if done is None:
            master = recording.master
            if len(master.graph.nodes) != len(graph.nodes) or master.graph.failure is not None:
                raise AssertionError("a shared walk expanded out of order")
            seen = set(master.graph.outcomes)
            transitions = master.graph.transitions
            ok = master.expand(index, keep=True)
            assert master.last is not None
            done = _Expanded(
                tuple(master.graph.nodes[len(graph.nodes) :]),
                master.graph.transitions - transitions,
                tuple(master.graph.outcomes - seen),
                master.last,
                master.born,
                None if ok else master.graph.failure,
            )
            recording.expanded[index] = done
        graph.nodes.extend(done.nodes)
        graph.transitions += done.transitions
        graph.outcomes.update(done.outcomes)
        self.last = done.last if keep else None
        self.born = done.born
        if done.failure is not None:
            graph.failure = done.failure
            return False
        return True


def _same(a: Any, b: Any) -> bool:
    return a is b


def walker_for(scope: Scope) -> Walker | SharedWalker:
    """The canonical walker of ``scope``: shared within the process (``SharedWalker``) for
    one of ``SHARED_SCOPES`` as ``SCOPES`` defines it, else a fresh ``Walker``."""
    from ._scope import SCOPES

    if scope.name in SHARED_SCOPES and SCOPES.get(scope.name) is scope:
        return SharedWalker(scope)
    return Walker(scope)


def walk(
    scope: Scope,
    *,
    canonical: bool = True,
    deadline: float | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Walk:
    """Walk ``scope`` breadth-first over the reference model, checking every invariant on
    every step, until every state within the scope's depth was expanded (``exhausted``), the
    reference broke an invariant (``failure``), or ``clock()`` passed ``deadline``."""
    walker = Walker(scope, canonical=canonical)
    graph = walker.graph
    index = 0
    while index < len(graph.nodes):
        if graph.nodes[index].depth < scope.depth:
            if deadline is not None and clock() > deadline:
                return graph
            if not walker.expand(index):
                return graph
        index += 1
    graph.exhausted = True
    return graph


def _shape(outcome: Any) -> str:
    """An answer's kind: the outcome class, or the error's code."""
    if isinstance(outcome, Raised):
        return f"raised {outcome.code}"
    return type(outcome).__name__
