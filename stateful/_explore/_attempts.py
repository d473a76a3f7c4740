"""The attempt store's own scope: walked over the reference, applied to the store under test.

An attempt scope fixes a small world for ``AttemptStore``: the runs of a run
scope (created before the walk), its owners, the attempts a move may name
(two of one step of the first run, and one of a run that does not exist), and
the two attempt stores the attempt machine builds over one database
(``insert``: the defaults; ``upsert``: ``queued`` and ``running`` in
progress, a 64-byte checkpoint cap). Its moves are every attempt operation on
finite domains (each writer: the owner of record, another process of its
host, another host; records new in progress, new settled, at and one past
the cap in two-byte text, without ``meta``, the stored one again and the
stored one with a value retyped; heartbeats a millisecond behind, at and
ahead of the stored stamp, with and without a checkpoint; finishes into
settled and in-progress states; empty, small and oversized patches) and the
run moves that change the fence (an owner taking the run, its owner releasing
it to ``pending``, suspending it or completing it). The store clock does not
move: no attempt rule reads it, and the run moves need none.

The walk is breadth-first over ``ModelRunStore`` with ``ModelAttemptStore``
over it: a node is the run state, the attempt table and the clock; the
canonical form is the run walk's (owners of one host interchangeable, times
relative to the clock) with the attempts added (their JSON values by strict
equality, their times relative to the clock). Every reference step is held
to every run and attempt invariant (``check_state``, ``check_transition``,
``check_attempt_step``, ``check_attempt_state``).

Each transition is then applied to the store under test from a state equal
to its source (a restored copy where we own the store, else a fresh store
with the shortest path replayed, as ``_replay`` does for runs), and checked
in the attempt machine's order: the attempt step invariants on the store's
step, the outcome's kind and admission (a checkpoint past its store's cap is
refused), the run invariants, the same answer, the same run state, the
attempt state invariants, the same attempts.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from types import MappingProxyType, ModuleType
from typing import Any, Final

import attrs

from runstore._clock import ManualClock
from runstore._values import OwnerId, StoreState
from runstore.attempts import (
    ABSENT,
    Absent,
    Attempt,
    AttemptId,
    AttemptOptions,
    AttemptPatch,
    AttemptStore,
    FinishAttempt,
    JsonValue,
)
from runstore.attempts._values import strict_json_key
from runstore.model import ModelAttemptStore, ModelRunStore
from runstore.model._state import ModelState

from .._base._capabilities import Capabilities
from .._base._compare import OutcomeMismatch, StateMismatch, describe_difference
from .._base._observe import LogEntry, Performed
from .._base._steps import Call, Crashed, Step, call, perform
from .._checks._attempt_invariants import (
    check_attempt_state,
    check_attempt_step,
)
from .._checks._invariants import (
    InvariantViolation,
    StoreCrashed,
    check_state,
    check_transition,
)
from .._machines._attempts import (
    CONFIGS,
    IN_PROGRESS,
    LARGEST_CAP,
    OVER_CAP_TWO_BYTE,
    AttemptStateMismatch,
    _attempt_difference,
    _over_cap,
    logged,
    perform_attempt,
    retyped,
)
from .._machines._run_store import _check_outcome_kind, _same_outcome
from .._targets._blocking import BlockingAttemptStore
from ._replay import Progress, StoreFactory, Sut, _self_check
from ._scope import MISSING_RUN, SCOPES, Scope, setup_calls, start_ms
from ._walk import Dial, _form, _shape, owner_renamings, start, view

#: The config that answers ``get`` and gives the store side's attempt table.
READER: Final = "insert"
#: A checkpoint exactly at the ``upsert`` store's 64-byte cap, in two-byte text.
AT_CAP_TWO_BYTE: Final = "\u00e9" * 31


@attrs.frozen
class AttemptScope:
    """One finite world of attempts to walk.

    ``base`` is the run scope whose runs are created before the walk and whose owners write
    (its ``owner_classes`` are the symmetry the canonical form uses); ``steps`` and
    ``numbers`` name the attempts of the first run a move may address; ``depth`` is the most
    moves after the setup.
    """

    name: str
    base: Scope
    steps: tuple[str, ...]
    numbers: tuple[int, ...]
    depth: int

    @property
    def ids(self) -> tuple[AttemptId, ...]:
        """The attempts moves name on the scope's first run."""
        run = self.base.run_ids[0]
        return tuple(AttemptId(run, step, n) for step in self.steps for n in self.numbers)


def _base(name: str, depth: int) -> Scope:
    small = SCOPES["small"]
    return Scope(
        name,
        runs=(("a", {}),),
        owners=small.owners,
        owner_classes=small.owner_classes,
        readings=(0,),
        edges=(),
        depth=depth,
        depth_k=0,
    )


ATTEMPT_SCOPES: Final[Mapping[str, AttemptScope]] = {
    # One run, the small scope's three owners, two attempts of one step: four moves deep
    # (enough for an owner to take the run, release it, another to take it, and the first
    # to write late).
    "attempts": AttemptScope(
        "attempts", _base("attempts", 4), steps=("s",), numbers=(1, 2), depth=4
    ),
    # The same world, five moves deep.
    "attempts-medium": AttemptScope(
        "attempts-medium", _base("attempts-medium", 5), steps=("s",), numbers=(1, 2), depth=5
    ),
    # The same world, two moves deep: the default test run's.
    "attempts-tiny": AttemptScope(
        "attempts-tiny", _base("attempts-tiny", 2), steps=("s",), numbers=(1, 2), depth=2
    ),
}


def attempt_scope_named(name: str) -> AttemptScope | None:
    """The attempt scope called ``name``, or None when it names none."""
    return ATTEMPT_SCOPES.get(name)


# -- moves --------------------------------------------------------------------------


def _record(ident: AttemptId, state: str, at: int, **values: Any) -> Attempt:
    return Attempt(
        ident.run_id,
        ident.step_key_digest,
        ident.attempt,
        state,
        at,
        heartbeat_at_ms=values.pop("heartbeat_at_ms", at),
        **values,
    )


def _retyped(record: Attempt) -> Attempt:
    """The stored record with its first set value of outcome, error and checkpoint retyped
    (``True`` for ``1``, ``null`` for absent, ...), else its absent outcome made null."""
    for name in ("outcome", "error", "checkpoint"):
        value = getattr(record, name)
        if value is not ABSENT:
            changes: dict[str, Any] = {name: retyped(value)}
            return attrs.evolve(record, **changes)
    return attrs.evolve(record, outcome=None)


def _puts(ident: AttemptId, stored: Attempt | None, at: int) -> list[tuple[str, Attempt]]:
    """The records a ``put`` of ``ident`` may carry, each with the config that sends it."""
    records: list[tuple[str, Attempt]] = []
    for config in CONFIGS:
        records.append((config, _record(ident, "running", at, meta={})))
        records.append(
            (config, _record(ident, "succeeded", at, finished_at_ms=at, outcome=1, meta={}))
        )
        if stored is not None:
            records.append((config, stored))
            records.append((config, _retyped(stored)))
    records.append(("upsert", _record(ident, "queued", at, checkpoint={"k": 1}, meta={})))
    records.append(("upsert", _record(ident, "running", at, checkpoint=AT_CAP_TWO_BYTE, meta={})))
    records.append(("upsert", _record(ident, "running", at, checkpoint=OVER_CAP_TWO_BYTE, meta={})))
    records.append((READER, _record(ident, "running", at, meta=ABSENT)))
    return records


def _writes(ident: AttemptId, who: OwnerId, stored: Attempt | None, at: int) -> list[Call]:
    """Every attempt write of ``ident`` by ``who`` the scope allows."""
    out: list[Call] = []
    for config, record in _puts(ident, stored, at):
        out.append(call("attempt_put", ("config", config), ("attempt", record), ("owner", who)))
    stamp = at if stored is None or stored.heartbeat_at_ms is None else stored.heartbeat_at_ms
    beats: tuple[tuple[int, JsonValue | Absent], ...] = (
        (stamp - 1, ABSENT),
        (stamp, ABSENT),
        (stamp + 1, {"k": 1.0}),
        (stamp + 1, OVER_CAP_TWO_BYTE),
    )
    finishes: tuple[tuple[str, dict[str, Any]], ...] = (
        ("succeeded", {"outcome": True}),
        ("failed", {"error": {"e": 1}}),
        ("queued", {}),
        ("running", {}),
    )
    patches = (
        AttemptPatch(),
        AttemptPatch(outcome={"p": 1}, meta=None),
        AttemptPatch(checkpoint=OVER_CAP_TWO_BYTE),
    )
    for config in CONFIGS:
        for now, checkpoint in beats:
            out.append(
                call(
                    "attempt_heartbeat",
                    ("config", config),
                    ("run_id", ident.run_id),
                    ("step_key_digest", ident.step_key_digest),
                    ("attempt", ident.attempt),
                    ("owner", who),
                    ("now_ms", now),
                    ("checkpoint", checkpoint),
                )
            )
        for state, values in finishes:
            request = FinishAttempt(
                ident.run_id, ident.step_key_digest, ident.attempt, state, at, **values
            )
            out.append(
                call("attempt_finish", ("config", config), ("finish", request), ("owner", who))
            )
        for fields in patches:
            out.append(
                call(
                    "attempt_patch",
                    ("config", config),
                    ("attempt_id", ident),
                    ("patch", fields),
                    ("owner", who),
                )
            )
    return out


def attempt_moves(
    scope: AttemptScope, runs: ModelState, attempts: Mapping[Any, Attempt], clock_ms: int
) -> list[Call]:
    """Every move the scope allows from a state (run state ``runs``, attempt table
    ``attempts``, store clock ``clock_ms``), in a fixed order (a walk is deterministic)."""
    out: list[Call] = []
    owners = scope.base.owners
    for ident in scope.ids:
        stored = attempts.get((ident.run_id, ident.step_key_digest, ident.attempt))
        out.append(call("attempt_get", ("config", READER), ("attempt_id", ident)))
        for who in owners:
            out.extend(_writes(ident, who, stored, clock_ms))
    # An attempt of a run that does not exist: each operation once.
    missing = AttemptId(MISSING_RUN, scope.steps[0], scope.numbers[0])
    first = owners[0]
    out.append(call("attempt_get", ("config", READER), ("attempt_id", missing)))
    for move in _writes(missing, first, None, clock_ms):
        config = move.get("config")
        if config == READER and move.get("checkpoint", ABSENT) is ABSENT:
            out.append(move)
    # The run moves that change the fence.
    for run_id in scope.base.run_ids:
        row = runs.rows.get(run_id)
        if row is None:
            continue
        for who in owners:
            out.append(
                call(
                    "claim_and_own",
                    ("run_id", run_id),
                    ("expected", row.snapshot),
                    ("owner", who),
                    ("now_ms", clock_ms),
                )
            )
        holder = row.owner if row.owner is not None else first
        for to_status in ("pending", "suspended", "completed"):
            out.append(
                call(
                    "transition_owned",
                    ("run_id", run_id),
                    ("owner", holder),
                    ("to_status", to_status),
                )
            )
    return out


# -- the walk -------------------------------------------------------------------------


@attrs.frozen
class AttemptNode:
    """One state of the attempt walk: the run state, the attempt table, the store clock, the
    node it was first reached from (-1 for the start), the move and the reference's answer,
    and its depth."""

    runs: ModelState
    attempts: Mapping[Any, Attempt]
    clock_ms: int
    parent: int
    move: Call | None
    outcome: Any
    depth: int

    @property
    def table(self) -> tuple[Attempt, ...]:
        """The attempts, sorted by id (as ``state()`` gives them)."""
        return tuple(self.attempts[key] for key in sorted(self.attempts))


@attrs.frozen
class AttemptReferenceFailure:
    """An invariant the reference broke on its own step (a defect of the suite)."""

    node: int
    move: Call
    outcome: Any
    check: str
    message: str


@attrs.define
class AttemptWalk:
    """The attempt graph walked so far (as ``Walk`` for runs)."""

    scope: AttemptScope
    nodes: list[AttemptNode] = attrs.field(factory=list)
    transitions: int = 0
    exhausted: bool = False
    failure: AttemptReferenceFailure | None = None
    #: Each operation and the kinds of answer it gave (outcome class or error code).
    outcomes: set[tuple[str, str]] = attrs.field(factory=set)

    @property
    def depth(self) -> int:
        """The deepest level reached."""
        return self.nodes[-1].depth if self.nodes else 0

    def path(self, index: int) -> list[tuple[Call, Any]]:
        """The moves (and the reference's answers) from the start to node ``index``."""
        out: list[tuple[Call, Any]] = []
        while index > 0:
            node = self.nodes[index]
            assert node.move is not None
            out.append((node.move, node.outcome))
            index = node.parent
        out.reverse()
        return out


def _attempt_form(record: Attempt, shift: int) -> tuple[Any, ...]:
    def at(stamp: int | None) -> int | None:
        return None if stamp is None else stamp - shift

    return (
        record.run_id,
        record.step_key_digest,
        record.attempt,
        record.state,
        at(record.started_at_ms),
        at(record.finished_at_ms),
        at(record.heartbeat_at_ms),
        *(
            strict_json_key(getattr(record, name))
            for name in ("checkpoint", "error", "outcome", "meta")
        ),
    )


class Reference:
    """The reference: a ``ModelRunStore`` and the two ``ModelAttemptStore`` over it, set to
    any node before a move is applied."""

    def __init__(self, scope: AttemptScope) -> None:
        self.model, self.dial = start(scope.base)
        self.stores = {
            name: ModelAttemptStore(self.model, **c.options()) for name, c in CONFIGS.items()
        }
        self.table = self.stores[READER]._table

    def set(self, node: AttemptNode) -> None:
        """Put the reference in ``node``'s state."""
        self.model._state = node.runs
        self.table.attempts = node.attempts
        self.dial.ms = node.clock_ms

    def apply(self, node: AttemptNode, move: Call) -> tuple[Any, ModelState, Mapping[Any, Attempt]]:
        """Apply ``move`` to the reference set to ``node``: its answer, and the run state and
        attempt table after."""
        self.set(node)
        if move.method.startswith("attempt_"):
            outcome = perform_attempt(self.stores, move)
        else:
            outcome = perform(self.model, move)
        return outcome, self.model._state, self.table.attempts


class AttemptWalker:
    """A breadth-first walk of an attempt scope over the reference, one node at a time:
    ``expand(index)`` applies every move to node ``index``, checks every run and attempt
    invariant on the reference's step, and adds each state reached for the first time."""

    def __init__(self, scope: AttemptScope, *, canonical: bool = True) -> None:
        self.reference = Reference(scope)
        self.renamings = owner_renamings(scope.base) if canonical else [{}]
        self.canonical = canonical
        self.graph = AttemptWalk(scope)
        root = AttemptNode(
            self.reference.model._state,
            MappingProxyType({}),
            self.reference.dial.ms,
            -1,
            None,
            None,
            0,
        )
        self.graph.nodes.append(root)
        self.seen = {self.key(root.runs, root.attempts, root.clock_ms)}
        #: With ``keep``: each move of the node last expanded, the reference's answer, the run
        #: state and attempt table after, and the node it first reached (-1: none).
        self.last: list[tuple[Call, Any, ModelState, Mapping[Any, Attempt], int]] = []
        check_state(view(root.runs))

    def key(self, runs: ModelState, attempts: Mapping[Any, Attempt], clock_ms: int) -> Any:
        """The canonical form of a state (its exact value with ``canonical=False``)."""
        table = tuple(
            _attempt_form(attempts[k], clock_ms if self.canonical else 0) for k in sorted(attempts)
        )
        shown = view(runs)
        if not self.canonical:
            return (shown, runs.compacted_through, clock_ms, table)
        forms = [
            (_form(shown, clock_ms, rename), runs.compacted_through) for rename in self.renamings
        ]
        least = min(forms, key=repr) if len(forms) > 1 else forms[0]
        return (least, table)

    def expand(self, index: int) -> bool:
        """Expand node ``index``; False when the reference broke an invariant (``failure``)."""
        graph, scope = self.graph, self.graph.scope
        node = graph.nodes[index]
        before = view(node.runs)
        table_before = node.table
        self.last = kept = []
        for move in attempt_moves(scope, node.runs, node.attempts, node.clock_ms):
            outcome, runs, attempts = self.reference.apply(node, move)
            graph.transitions += 1
            graph.outcomes.add((move.method, _shape(outcome)))
            after = before if runs is node.runs else view(runs)
            table = (
                table_before
                if attempts is node.attempts
                else tuple(attempts[k] for k in sorted(attempts))
            )
            try:
                reference_checks(move, outcome, before, after, table_before, table)
            except InvariantViolation as error:
                graph.failure = AttemptReferenceFailure(
                    index, move, outcome, type(error).__name__, str(error)
                )
                return False
            born = -1
            if runs is not node.runs or attempts is not node.attempts:
                key = self.key(runs, attempts, node.clock_ms)
                if key not in self.seen:
                    self.seen.add(key)
                    born = len(graph.nodes)
                    graph.nodes.append(
                        AttemptNode(
                            runs, attempts, node.clock_ms, index, move, outcome, node.depth + 1
                        )
                    )
            kept.append((move, outcome, runs, attempts, born))
        return True


def _cap(move: Call) -> int | None:
    config = CONFIGS.get(move.get("config"))
    return None if config is None else config.max_checkpoint_bytes


def reference_checks(
    move: Call,
    outcome: Any,
    before: StoreState,
    after: StoreState,
    table_before: tuple[Attempt, ...],
    table_after: tuple[Attempt, ...],
) -> None:
    """Every run and attempt invariant on one step of the reference."""
    step = Step(move, outcome)
    check_state(after)
    if not move.method.startswith("attempt_"):
        check_transition(before, after, step)
    check_attempt_step(
        table_before,
        table_after,
        step,
        runs_before=before,
        revision_before=before.revision,
        revision_after=after.revision,
        in_progress_states=IN_PROGRESS,
        max_checkpoint_bytes=_cap(move),
    )
    check_attempt_state(table_after, after, max_checkpoint_bytes=LARGEST_CAP)


def walk_attempts(
    scope: AttemptScope,
    *,
    canonical: bool = True,
    deadline: float | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> AttemptWalk:
    """Walk ``scope`` breadth-first over the reference alone, every invariant on every step,
    until exhausted, a reference failure, or ``clock()`` passes ``deadline``."""
    walker = AttemptWalker(scope, canonical=canonical)
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


# -- the store under test -------------------------------------------------------------

#: What an attempt store of ours may hold besides the data-free members of ``AttemptStore``:
#: statements, options, numbers (a planted bug's own cap, say), its run store, its queries.
_DATA_FREE = (str, int, AttemptOptions, dict, ModuleType)


class AttemptSut(Sut):
    """The store under test with the attempt stores over it (one per config), rebuilt or
    restored as ``Sut`` does; a restore also needs attempt stores that hold no data."""

    def __init__(
        self,
        factory: StoreFactory,
        capabilities: Capabilities,
        scope: AttemptScope,
        attempt_store: Callable[..., Any],
        *,
        restore: bool = True,
    ) -> None:
        super().__init__(factory, capabilities, scope.base, restore=restore)
        self.attempt_store = attempt_store
        self.attempt_stores: dict[str, Any] = {}

    def build(self, path: list[tuple[Any, Any]]) -> None:
        """A fresh store and attempt stores, the setup and ``path`` replayed."""
        self._drop()
        self.count += 1
        self.clock = ManualClock(start_ms())
        self.store = self.factory(self.clock, self.folder / f"s{self.count}.db")
        self.attempt_stores = {
            name: self.attempt_store(self.store, **config.options())
            for name, config in CONFIGS.items()
        }
        for op in setup_calls(self.scope):
            perform(self.store, op)
        for move, _ in path:
            self.move(move)

    def owned(self) -> str | None:
        """As ``Sut.owned``, and only while every attempt store is an ``AttemptStore`` holding
        nothing but statements and options (or, over an async store, an ``AsyncAttemptStore``
        behind its stand-in, holding nothing but the store, its key and its options)."""
        kind = super().owned()
        if kind is None:
            return None
        for attempts in self.attempt_stores.values():
            if isinstance(attempts, BlockingAttemptStore):
                if not attempts.holds_no_data:
                    return None
                continue
            if not isinstance(attempts, AttemptStore):
                return None
            members = vars(attempts) if hasattr(attempts, "__dict__") else {}
            if any(not isinstance(v, (*_DATA_FREE, type(self.store))) for v in members.values()):
                return None
        return kind

    def move(self, move: Any) -> Any:
        """Apply one move (an attempt call on the attempt store its config names, or a run
        call on the store)."""
        if isinstance(move, Call) and move.method.startswith("attempt_"):
            return perform_attempt(self.attempt_stores, move)
        return super().move(move)

    def attempts(self) -> tuple[Attempt, ...] | Crashed:
        """The store's attempts (``state()`` of the reader config), or what it raised."""
        try:
            shown: tuple[Attempt, ...] = tuple(self.attempt_stores[READER].state())
        except Exception as error:
            return Crashed(type(error).__name__)
        return shown


def judge_attempt_step(
    sut: AttemptSut,
    move: Call,
    model_out: Any,
    store_out: Any,
    runs_before: StoreState,
    runs_after: StoreState,
    expected_runs: StoreState,
    table_before: tuple[Attempt, ...],
    table_after: tuple[Attempt, ...] | Crashed,
    expected_table: tuple[Attempt, ...],
    model_runs_before: StoreState,
) -> tuple[str, str] | None:
    """The attempt machine's checks of one step, in its order: None when all hold, else the
    failing check's class name and message."""
    caps = sut.capabilities
    leases = caps.lease_introspection and caps.whole_state
    model_step, store_step = Step(move, model_out), Step(move, store_out)
    is_attempt = move.method.startswith("attempt_")
    try:
        if isinstance(table_after, Crashed):
            raise StoreCrashed(
                f"after {move.describe()}: the attempt store's state() raised"
                f" {table_after.exception}"
            )
        check_attempt_step(
            table_before,
            table_after,
            store_step,
            runs_before=model_runs_before,
            revision_before=runs_before.revision,
            revision_after=runs_after.revision,
            in_progress_states=IN_PROGRESS,
            max_checkpoint_bytes=_cap(move),
        )
        admission = False if is_attempt and _over_cap(move) else None
        _check_outcome_kind(model_step, store_step, admission)
        check_state(runs_after, leases=leases)
        check_transition(runs_before, runs_after, store_step, leases=leases)
        if not _same_outcome(model_out, store_out):
            raise OutcomeMismatch(
                f"{move.describe()}: reference answered {model_out!r}, store answered {store_out!r}"
            )
        if expected_runs != runs_after:
            raise StateMismatch(
                f"after {move.describe()}:\n" + describe_difference(expected_runs, runs_after)
            )
        check_attempt_state(table_after, runs_after, max_checkpoint_bytes=LARGEST_CAP)
        if expected_table != table_after:
            raise AttemptStateMismatch(
                f"after {move.describe()}:\n" + _attempt_difference(expected_table, table_after)
            )
    except AssertionError as error:
        return type(error).__name__, str(error)
    return None


@attrs.frozen
class AttemptDivergence:
    """A check that failed on the store: the program, the check, its message, and the
    reference's run state and attempts after it."""

    program: tuple[tuple[Call, Any], ...]
    check: str
    message: str
    expected_state: StoreState | None
    expected_attempts: tuple[Attempt, ...]


class AttemptReplayer:
    """Applies the transitions of an attempt walk's nodes to the store under test, a node at
    a time (``node(index, kept)``), counting what it did (``progress``)."""

    def __init__(self, graph: AttemptWalk, sut: AttemptSut) -> None:
        self.graph = graph
        self.sut = sut
        self.progress = Progress()
        self.divergence: AttemptDivergence | None = None

    def _expected(self, runs: ModelState) -> StoreState:
        return self.sut.expected(runs)

    def node(
        self, index: int, kept: list[tuple[Call, Any, ModelState, Mapping[Any, Attempt], int]]
    ) -> AttemptDivergence | None:
        """Apply every transition of node ``index`` (``kept``: the walker's expansion of it)."""
        try:
            found = self._node(index, kept)
        finally:
            self.sut.forget(index)
        node = self.graph.nodes[index]
        self.progress.depth = max(self.progress.depth, node.depth + 1)
        self.divergence = found
        return found

    def _node(
        self, index: int, kept: list[tuple[Call, Any, ModelState, Mapping[Any, Attempt], int]]
    ) -> AttemptDivergence | None:
        graph, sut, progress = self.graph, self.sut, self.progress
        node = graph.nodes[index]
        path = graph.path(index)
        deepest = graph.scope.depth
        model_before = view(node.runs)
        unchanged = sut.expected(node.runs)
        table_unchanged = node.table
        dirty = True
        before: StoreState | None = None
        table_before: tuple[Attempt, ...] | Crashed = ()
        checked_itself = False
        for move, model_out, runs, attempts, child in kept:
            if dirty:
                if sut.restore(index):
                    progress.restores += 1
                else:
                    sut.build(path)
                    progress.rebuilds += 1
                    sut.snapshot(index)
                before = sut.view(sut.store)
                table_before = sut.attempts()
                dirty = False
                if not checked_itself:
                    checked_itself = True
                    for target in (sut.store, *sut.attempt_stores.values()):
                        broken = _self_check(target)
                        if broken is not None:
                            return AttemptDivergence(
                                tuple(path), *broken, unchanged, table_unchanged
                            )
            assert before is not None
            if isinstance(table_before, Crashed):
                return AttemptDivergence(
                    tuple(path),
                    "StoreCrashed",
                    "the attempt store's state() raised",
                    unchanged,
                    table_unchanged,
                )
            progress.transitions += 1
            store_out = sut.move(move)
            after = sut.view(sut.store)
            table_after = sut.attempts()
            expected = unchanged if runs is node.runs else sut.expected(runs)
            expected_table = (
                table_unchanged
                if attempts is node.attempts
                else tuple(attempts[k] for k in sorted(attempts))
            )
            verdict = judge_attempt_step(
                sut,
                move,
                model_out,
                store_out,
                before,
                after,
                expected,
                table_before,
                table_after,
                expected_table,
                model_before,
            )
            if verdict is not None:
                return AttemptDivergence(
                    (*path, (move, model_out)), *verdict, expected, expected_table
                )
            if child >= 0 and graph.nodes[child].depth < deepest:
                sut.snapshot(child)
            dirty = runs is not node.runs or attempts is not node.attempts
            dirty = dirty or after != before or table_after != table_before
        return None


def attempt_log(scope: AttemptScope, program: tuple[tuple[Call, Any], ...]) -> tuple[LogEntry, ...]:
    """A program as the attempt machine's log: the setup's creates, then each run call and
    attempt call with the reference's answer."""
    model = ModelRunStore(clock=Dial(start_ms()))
    entries: list[LogEntry] = []
    for op in setup_calls(scope.base):
        entries.append(Performed(op, perform(model, op)))
    for move, outcome in program:
        if move.method.startswith("attempt_"):
            entries.append(logged(move, outcome))
        else:
            entries.append(Performed(move, outcome))
    return tuple(entries)


def run_attempt_walk(
    scope: AttemptScope,
    sut: AttemptSut | None,
    *,
    deadline: float | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[AttemptWalk, AttemptReplayer | None]:
    """Walk ``scope`` level by level, each node expanded on the reference and (with ``sut``)
    its transitions applied to the store under test at once, so the first failure found,
    on either side, is on a shortest program. Stops at the first failure or at ``deadline``;
    the walk says whether it was exhausted."""
    walker = AttemptWalker(scope)
    graph = walker.graph
    replayer = None if sut is None else AttemptReplayer(graph, sut)
    index = 0
    while index < len(graph.nodes):
        if graph.nodes[index].depth < scope.depth:
            if deadline is not None and clock() > deadline:
                return graph, replayer
            if not walker.expand(index):
                return graph, replayer
            if replayer is not None and replayer.node(index, walker.last) is not None:
                return graph, replayer
        index += 1
    graph.exhausted = True
    return graph, replayer
