"""The sequential specification a history is checked against: the reference model.

``Spec.apply(node, op)`` runs one recorded operation on ``ModelRunStore`` from a
given state and answers the next state and what the model said. The model's
clock is a ``ReplayClock`` that hands out the readings the real store took for
that operation, in order, so the model stamps ``created_at``, activation and
settle times and judges the skew bound exactly as the store did. Those
readings come from different processes' clocks, so between two concurrent
operations they may go backwards: ``ManualClock`` would refuse, the replay
clock does not care. A model that asks for more readings than the store took
raises ``ClockExhausted`` (the store read its clock less often than the model:
the operation cannot be replayed).

States are the model's own immutable ``ModelState`` values, shared between
search branches without copying. Each state gets a ``StateKey``: a hashable
summary with its hash computed once (rows, leases, acknowledgements, and per
run the length and a running digest of its append-only fact stream, extended
incrementally from the parent state's), which is what the search memoizes.
The revision counter and the change list are left out of the key: they count
writes across the whole database, no per-run operation reads them, and a
partition's own count means nothing.

Partitioning (P-compositionality): every per-run operation touches one run, so
runs are independent objects, except where the model relates runs: a round
names its lineage and a fork its parent. ``partition_operations`` joins run ids
related that way (by ``create`` arguments and by the initial state's rows)
into one object, so a lineage is checked as one object with its
``request_cancel_lineage``, ``lineage`` and ``latest_round`` calls. Operations
over the whole database (``revision``, ``changes``, ``check_invariants``) are
not per-object and are excluded, with that reason; a ``state()`` snapshot is
a read of every object, each at its own instant of the call (``STATE_PART``).
Multi-run operations are split by ``SPLITTERS`` (one entry per method) into
per-run sub-operations with the same interval, which is sound (it never
rejects a linearizable history) but weaker than checking their atomicity
across runs: ``heartbeat_many`` becomes one ``heartbeat`` per run id it
answered for. Its atomicity is judged apart, on the union of the objects it
touched (``runstore.stateful._histories._rules``). Methods this version does
not know are excluded with a reason, never passed silently: the verdict
lists them.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Final, Literal, TypeAlias

import attrs
from sortedcontainers import SortedList

from runstore import TERMINAL_STATUSES, RunPage, RunRow, RunStoreError, StoreState, Transitioned
from runstore._boundary import encode_cursor
from runstore._constants import MAXIMUM_PAGE_SIZE, MAXIMUM_PURGE_BATCH
from runstore.model import ModelRunStore
from runstore.model._state import ModelState

from ._history import Operation

#: The pseudo-operation that reads a partition's whole final state.
FINAL_STATE: Final = "final_state"

#: Per-run operations: the run id is the first argument.
PER_RUN: Final = frozenset(
    {
        "create",
        "get",
        "lineage",
        "latest_round",
        "request_cancel",
        "request_cancel_lineage",
        "acknowledge_cancel",
        "claim",
        "claim_and_own",
        "activate",
        "abandon_claim",
        "recover_claim",
        "heartbeat",
        "reconfirm",
        "transition_owned",
        "steal",
        "ownership_facts",
    }
)

#: The per-object parts of multi-run operations (see ``SPLITTERS``).
LIST_PART: Final = "list_runs/part"
PAGE_SHAPE: Final = "list_runs/shape"
NO_CANDIDATE: Final = "claim_next/none"
PURGE_PART: Final = "purge_settled/part"
#: One object's part of a ``state()`` snapshot: ``args`` are the object's
#: run ids, ``value`` the snapshot's rows, leases, facts and acknowledgements
#: of those runs (as ``project_store_state`` gives them).
STATE_PART: Final = "state/part"

#: Per-object parts of multi-run calls; each names its object's runs last in
#: its arguments, so a part read back from a history file finds its object.
OBJECT_PARTS: Final = frozenset({LIST_PART, NO_CANDIDATE, PURGE_PART, STATE_PART})

#: Methods whose (sub-)operations go to the object of their run id.
ROUTED: Final = PER_RUN | {"claim_next", PAGE_SHAPE}

#: Why whole-database operations are not checked per object.
EXCLUDED: Final[Mapping[str, str]] = MappingProxyType(
    {
        "revision": "reads the database-wide revision counter, which every object moves",
        "changes": "reads the database-wide change list, which every object moves",
        "state": "reads the whole database (judged per object when it answered a StoreState)",
        "check_invariants": "checks the whole database, not one object",
        "compact_changes": "drops tombstones from the change feed: no object's state, no revision",
    }
)

#: Methods that never write a row, so that excluding one of their calls (a
#: whole-database read, or a ``list_runs`` page of unknown outcome) leaves the
#: revision count checkable.
EXCLUDED_READS: Final = frozenset(
    {"revision", "changes", "state", "check_invariants", "compact_changes", "list_runs"}
)

Result: TypeAlias = tuple[Literal["ok", "error", "unreplayable"], Any]


class ClockExhausted(Exception):
    """The model asked for a store-clock reading the record does not hold."""


class ReplayClock:
    """A clock that answers the readings it was loaded with, in order."""

    def __init__(self) -> None:
        self._readings: Sequence[int] = ()
        self._next = 0
        self._replaying = False

    def load(self, readings: Sequence[int]) -> None:
        self._readings = readings
        self._next = 0
        self._replaying = True

    def now_ms(self) -> int:
        if not self._replaying:
            return 0  # the model's construction-time check of its clock
        if self._next >= len(self._readings):
            raise ClockExhausted
        reading = self._readings[self._next]
        self._next += 1
        return reading

    def sleep_until(self, deadline_ms: int) -> None:
        raise RuntimeError("the replay clock cannot wait")

    async def asleep_until(self, deadline_ms: int) -> None:
        raise RuntimeError("the replay clock cannot wait")


class StateKey:
    """A hashable summary of a ``ModelState``, hash computed once.

    The fact streams enter the hash by digest only; two keys whose hashes and
    parts agree are also compared stream by stream, so a digest collision can
    never merge two different states.
    """

    __slots__ = ("_hash", "parts", "streams")

    def __init__(self, parts: tuple[Any, ...], streams: tuple[tuple[Any, ...], ...]) -> None:
        self.parts = parts
        self.streams = streams
        self._hash = hash(parts)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, StateKey)
            and self._hash == other._hash
            and self.parts == other.parts
            and all(
                mine is theirs or mine == theirs
                for mine, theirs in zip(self.streams, other.streams, strict=True)
            )
        )


@attrs.frozen(eq=False)
class Node:
    """A specification state with its key and its fact-stream digests."""

    state: ModelState
    key: StateKey
    digests: Mapping[str, tuple[tuple[Any, ...], int]]


def _items(mapping: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted(mapping.items(), key=lambda item: item[0]))


def make_node(state: ModelState, parent: Node | None = None) -> Node:
    """The node of ``state``; fact digests are extended from ``parent``'s."""
    if parent is not None and state is parent.state:
        return parent
    digests: dict[str, tuple[tuple[Any, ...], int]] = {}
    before = parent.digests if parent is not None else {}
    for run_id, stream in state.facts.items():
        old = before.get(run_id)
        if old is not None and old[0] is stream:
            digests[run_id] = old
            continue
        start, digest = (len(old[0]), old[1]) if old is not None else (0, 0)
        for fact in stream[start:]:
            digest = hash((digest, fact))
        digests[run_id] = (stream, digest)
    ordered = sorted(digests.items(), key=lambda item: item[0])
    facts = tuple((run_id, len(d[0]), d[1]) for run_id, d in ordered)
    key = StateKey(
        (_items(state.rows), _items(state.leases), _items(state.acknowledgements), facts),
        tuple(d[0] for _, d in ordered),
    )
    return Node(state, key, MappingProxyType(digests))


def initial_state(initial: StoreState | None, runs: Iterable[str] | None = None) -> ModelState:
    """A ``ModelState`` holding ``initial``'s rows, leases, facts and
    acknowledgements (only those of ``runs`` when given)."""
    if initial is None:
        return ModelState()
    wanted = None if runs is None else set(runs)

    def keep(run_id: str) -> bool:
        return wanted is None or run_id in wanted

    facts: dict[str, tuple[Any, ...]] = {}
    for fact in initial.facts:
        if keep(fact.run_id):
            facts[fact.run_id] = (*facts.get(fact.run_id, ()), fact)
    rows = {row.run_id: row for row in initial.rows if keep(row.run_id)}
    return ModelState(
        order=SortedList((row.created_at_ms, row.run_id) for row in rows.values()),
        rows=MappingProxyType(rows),
        leases=MappingProxyType(
            {lease.run_id: lease for lease in initial.leases if keep(lease.run_id)}
        ),
        facts=MappingProxyType(facts),
        acknowledgements=MappingProxyType(
            {ack.run_id: ack for ack in initial.acknowledgements if keep(ack.run_id)}
        ),
        changes=MappingProxyType({}),
        revision=0,
    )


def project(state: ModelState, runs: Iterable[str]) -> dict[str, list[Any]]:
    """The part of a whole state that belongs to ``runs``, as the final-state
    read compares it: rows, leases, facts and acknowledgements."""
    chosen = sorted(set(runs))
    return {
        "rows": [state.rows[r] for r in chosen if r in state.rows],
        "leases": [state.leases[r] for r in chosen if r in state.leases],
        "facts": [fact for r in chosen for fact in state.facts.get(r, ())],
        "acknowledgements": [
            state.acknowledgements[r] for r in chosen if r in state.acknowledgements
        ],
    }


def project_store_state(state: StoreState, runs: Iterable[str]) -> dict[str, list[Any]]:
    """``project`` of a store's ``state()``."""
    chosen = set(runs)
    return {
        "rows": sorted((r for r in state.rows if r.run_id in chosen), key=lambda r: r.run_id),
        "leases": sorted(
            (lease for lease in state.leases if lease.run_id in chosen), key=lambda x: x.run_id
        ),
        "facts": sorted(
            (f for f in state.facts if f.run_id in chosen), key=lambda f: (f.run_id, f.position)
        ),
        "acknowledgements": sorted(
            (a for a in state.acknowledgements if a.run_id in chosen), key=lambda a: a.run_id
        ),
    }


def final_state_operations(operations: Sequence[Operation], state: StoreState) -> list[Operation]:
    """One final-state read per run (every run of ``state`` and every run a
    per-run operation names), invoked after every recorded operation returned:
    the final state must be the end state of some linearization."""
    after = max((op.returned_ns or op.invoked_ns for op in operations), default=0)
    runs = {row.run_id for row in state.rows}
    runs |= {
        op.args[0]
        for op in operations
        if op.method in PER_RUN and op.args and type(op.args[0]) is str
    }
    return [
        Operation(
            id=f"final:{index}",
            process="final",
            method=FINAL_STATE,
            args=((run_id,),),
            kwargs={},
            invoked_ns=after + 1,
            returned_ns=after + 2,
            status="ok",
            value=project_store_state(state, [run_id]),
        )
        for index, run_id in enumerate(sorted(runs))
    ]


class Spec:
    """Runs recorded operations on the reference model from given states."""

    def __init__(self) -> None:
        self.clock = ReplayClock()
        self.model = ModelRunStore(self.clock)
        self.applied = 0

    def apply(self, node: Node, op: Operation) -> tuple[Node, Result]:
        """The state after ``op`` from ``node``, and the model's answer."""
        self.applied += 1
        state = node.state
        if op.method in (FINAL_STATE, STATE_PART):
            return node, ("ok", project(state, op.args[0]))
        if op.method == PAGE_SHAPE:
            return node, ("ok", True)
        if op.method == PURGE_PART and not any(run in state.rows for run in op.args[-1]):
            # None of the object's runs is there (not created yet, or purged): a purge
            # deletes nothing here, as the model's would, without its admission and scan.
            return node, ("ok", 0)
        model = self.model
        model._state = state
        self.clock.load(op.clock_ms)
        try:
            value = self._call(model, op)
        except RunStoreError as error:
            result: Result = ("error", error.code)
        except ClockExhausted:
            return node, ("unreplayable", "the store took fewer clock readings than the model")
        except ValueError:
            # ``claim_next(choose=...)`` of a run that is not a candidate there.
            result = ("error", "not-a-candidate")
        else:
            result = ("ok", value)
        after = model._state
        return (node if after is state else make_node(after, node)), result

    @staticmethod
    def _call(model: ModelRunStore, op: Operation) -> Any:
        # A part reads (or purges) its own object's runs only, so that parts of
        # several objects stay apart when objects are searched together.
        if op.method == LIST_PART:
            upto, runs = op.args
            page = model.list_runs(**op.kwargs, limit=MAXIMUM_PAGE_SIZE)
            return tuple(
                row
                for row in page.runs
                if row.run_id in runs
                and (upto is None or (row.created_at_ms, row.run_id) <= tuple(upto))
            )
        if op.method == NO_CANDIDATE:
            (runs,) = op.args
            return [rid for rid in model.claim_next_candidates(**op.kwargs) if rid in runs]
        if op.method == PURGE_PART:
            before, _call, runs = op.args
            eligible = model.purge_candidates(before, **op.kwargs)
            purged = sorted(row.run_id for row in eligible if row.run_id in runs)
            if purged:
                # As ``purge_settled`` deletes them, but only this object's.
                draft = model._draft("purge_settled")
                for run_id in purged:
                    draft.delete_row(run_id)
                model._commit(draft)
            return len(purged)
        return getattr(model, op.method)(*op.args, **op.kwargs)


def matches(op: Operation, result: Result) -> bool:
    """Whether the model's answer is what the store answered (values by ``==``,
    errors by code)."""
    kind, payload = result
    if op.method == PURGE_PART:
        return kind == "ok"  # any count; the counts are summed per call afterwards
    if op.status == "ok":
        return kind == "ok" and bool(payload == op.value)
    if op.status == "error":
        return kind == "error" and payload == op.error
    return False


# -- partitions --------------------------------------------------------------------


def _run_id(op: Operation) -> object:
    if op.method == "claim_next":
        return op.kwargs.get("choose")
    if op.args:
        return op.args[0]
    return op.kwargs.get("run_id")


#: Per-run methods whose model call reads only its own run's row, lease, facts and
#: acknowledgement (and the call's own arguments and clock readings): from two states
#: that agree on that run, the model decides the same. ``claim_next`` with ``choose``
#: (a part of a call that may have taken that run) is one of them.
LOCAL: Final = frozenset(
    {
        "request_cancel",
        "acknowledge_cancel",
        "claim",
        "claim_and_own",
        "activate",
        "abandon_claim",
        "recover_claim",
        "heartbeat",
        "reconfirm",
        "transition_owned",
        "steal",
        "claim_next",
    }
)


def local_run(op: Operation) -> str | None:
    """The run whose part of a state alone decides what the model does with ``op``
    (see ``LOCAL``), or None when other runs may count."""
    if op.method not in LOCAL:
        return None
    run_id = _run_id(op)
    return run_id if type(run_id) is str else None


def run_view(state: ModelState, run_id: str) -> tuple[Any, Any, Any, Any]:
    """``run_id``'s row, lease, facts and acknowledgement in ``state``, the objects
    themselves (states share what an operation did not change, so two views of the
    same objects are of the same run state)."""
    return (
        state.rows.get(run_id),
        state.leases.get(run_id),
        state.facts.get(run_id),
        state.acknowledgements.get(run_id),
    )


#: ``per_object(root, runs, alive)``: an object's sub-operations of one call.
PerObject: TypeAlias = Callable[[str, frozenset[str], frozenset[str]], list[Operation]]


@attrs.frozen
class Split:
    """How one multi-run operation is checked: ``parts`` are per-run
    sub-operations (routed by their run id), and ``per_object`` builds the
    sub-operations of each object, ``per_object(root, runs, alive)`` (none
    for an object it does not concern). ``alive`` is the set of the history's
    run ids that may have existed and been live while the call ran (created,
    or held initially, before it returned, and not seen settled before it
    began, unless created again later)."""

    parts: tuple[Operation, ...] = ()
    per_object: PerObject | None = None
    #: ``"existed"``: ``alive`` holds instead every run that may have existed
    #: (settled or not) before the call returned (a definite call; any run for
    #: one of unknown outcome).
    scope: Literal["alive", "existed"] = "alive"


def _part(op: Operation, suffix: str, **changes: Any) -> Operation:
    return attrs.evolve(op, id=f"{op.id}/{suffix}", **changes)


def _refused(op: Operation) -> str | None:
    if op.status == "error" and not op.unknown:
        return f"refused as a whole ({op.error}): nothing written"
    return None


def _split_heartbeat_many(op: Operation) -> Split | str:
    """One ``heartbeat`` per run id, each with the call's interval and readings.

    An answered call splits into the per-run answers; an unknown outcome into
    unknown heartbeats; a definite error (the whole call refused, nothing
    written) is state-independent and excluded.
    """
    if len(op.args) < 3 and not op.kwargs:
        return "heartbeat_many without its arguments"
    arguments = dict(zip(("owner", "run_ids", "now_ms"), op.args, strict=False))
    arguments.update(op.kwargs)
    owner, run_ids, now_ms = (
        arguments.get("owner"),
        arguments.get("run_ids"),
        arguments.get("now_ms"),
    )
    refused = _refused(op)
    if refused is not None:
        return refused
    if op.status == "ok":
        if type(op.value) is not dict:
            return "heartbeat_many answered something other than a mapping"
        answers = list(op.value.items())
    else:
        if not isinstance(run_ids, (list, tuple)):
            return "heartbeat_many with unknown outcome and unreadable run ids"
        answers = [(run_id, None) for run_id in run_ids]
    return Split(
        tuple(
            _part(
                op,
                str(index),
                method="heartbeat",
                args=(run_id, owner, now_ms),
                kwargs={},
                value=answer,
            )
            for index, (run_id, answer) in enumerate(answers)
        )
    )


def _listing_key(row: RunRow) -> tuple[int, str]:
    return (row.created_at_ms, row.run_id)


def _page_shape_ok(page: RunPage, limit: object) -> bool:
    keys = [_listing_key(row) for row in page.runs]
    if any(a >= b for a, b in itertools.pairwise(keys)):
        return False
    if type(limit) is int and len(keys) > limit:
        return False
    if page.next is None:
        return True
    return (
        bool(keys)
        and (type(limit) is not int or len(keys) == limit)
        and (page.next == encode_cursor(*keys[-1]))
    )


def _split_list_runs(op: Operation) -> Split | str:
    """A page is a read of every object: each object's rows in the page's key
    range must be exactly the rows the model lists there (so a run that
    matched and was skipped fails its object), each at its own instant of the
    call. The page's own shape (order, limit, cursor) is checked apart."""
    refused = _refused(op)
    if refused is not None:
        return refused
    if op.status != "ok":
        return "a read of unknown outcome constrains nothing"
    page = op.value
    if not isinstance(page, RunPage) or op.args:
        return "list_runs answered something other than a page"
    query = {key: value for key, value in op.kwargs.items() if key != "limit"}
    upto = _listing_key(page.runs[-1]) if page.next is not None and page.runs else None
    parts: tuple[Operation, ...] = ()
    if not _page_shape_ok(page, op.kwargs.get("limit", 100)):
        shape = _part(op, "shape", method=PAGE_SHAPE, args=(), kwargs={}, value=False)
        parts = (attrs.evolve(shape, args=(INADMISSIBLE,)),)

    def per_object(root: str, runs: frozenset[str], alive: frozenset[str]) -> list[Operation]:
        listed = tuple(row for row in page.runs if row.run_id in runs)
        if not listed and not runs & alive:
            return []
        return [
            _part(
                op,
                root,
                method=LIST_PART,
                args=(upto, tuple(sorted(runs))),
                kwargs=query,
                value=listed,
                clock_ms=(),
            )
        ]

    return Split(parts, per_object)


def _claim_next_readings(op: Operation) -> tuple[int, ...]:
    """The model's ``claim_next`` admits the call (one reading) and then runs
    ``claim_and_own``, which admits again (another); the store reads once for
    both. The replay gives the model's second admission the first reading."""
    return op.clock_ms[:1] + op.clock_ms if op.clock_ms else ()


def _split_claim_next(op: Operation) -> Split | str:
    """A run answered: ``claim_next(choose=that run)`` on its object (any
    candidate may be taken). None: no object had a candidate, each at its
    own instant of the call. Unknown: on every live run, a ``claim_next``
    that chose it, of unknown outcome."""
    refused = _refused(op)
    if refused is not None:
        return refused
    readings = _claim_next_readings(op)
    if op.status == "ok" and isinstance(op.value, RunRow):
        chosen = {**op.kwargs, "choose": op.value.run_id}
        return Split((_part(op, "0", kwargs=chosen, clock_ms=readings),))
    if op.status == "ok" and op.value is None:
        status = {key: value for key, value in op.kwargs.items() if key == "status"}

        def none_here(root: str, runs: frozenset[str], alive: frozenset[str]) -> list[Operation]:
            if not runs & alive:
                return []
            return [
                _part(
                    op,
                    root,
                    method=NO_CANDIDATE,
                    args=(tuple(sorted(runs)),),
                    kwargs=status,
                    value=[],
                    clock_ms=(),
                )
            ]

        return Split((), none_here)
    if op.status == "ok":
        return "claim_next answered something other than a row or None"

    def each_live(root: str, runs: frozenset[str], alive: frozenset[str]) -> list[Operation]:
        return [
            _part(op, run_id, kwargs={**op.kwargs, "choose": run_id}, clock_ms=readings)
            for run_id in sorted(runs & alive)
        ]

    return Split((), each_live)


def _split_claim_next_many(op: Operation) -> Split | str:
    """Each run answered: ``claim_next(choose=that run)`` on its object, as
    ``claim_next``'s part (the batch takes each as ``claim_next`` would).
    Fewer runs than ``limit`` (none included): every object it took nothing
    from had no candidate, each at its own instant of the call (as
    ``claim_next``'s None). Unknown: on every live run, a ``claim_next`` that
    chose it, of unknown outcome. Which runs a full batch had to take is
    judged apart (``runstore.stateful._histories._rules``)."""
    refused = _refused(op)
    if refused is not None:
        return refused
    if len(op.args) < 2:
        return "claim_next_many without its owner and reading"
    limit = op.args[2] if len(op.args) > 2 else op.kwargs.get("limit")
    status = {key: value for key, value in op.kwargs.items() if key == "status"}
    readings = _claim_next_readings(op)
    if op.status == "ok":
        rows = op.value
        if not isinstance(rows, list) or not all(isinstance(row, RunRow) for row in rows):
            return "claim_next_many answered something other than a list of rows"
        parts = tuple(
            _part(
                op,
                f"took{index}",
                method="claim_next",
                args=op.args[:2],
                kwargs={**status, "choose": row.run_id},
                value=row,
                clock_ms=readings,
            )
            for index, row in enumerate(rows)
        )
        if type(limit) is int and len(rows) >= limit:
            return Split(parts)
        taken = frozenset(row.run_id for row in rows)

        def none_here(root: str, runs: frozenset[str], alive: frozenset[str]) -> list[Operation]:
            if runs & taken or not runs & alive:
                return []
            return [
                _part(
                    op,
                    root,
                    method=NO_CANDIDATE,
                    args=(tuple(sorted(runs)),),
                    kwargs=status,
                    value=[],
                    clock_ms=(),
                )
            ]

        return Split(parts, none_here)

    def each_live(root: str, runs: frozenset[str], alive: frozenset[str]) -> list[Operation]:
        return [
            _part(
                op,
                run_id,
                method="claim_next",
                args=op.args[:2],
                kwargs={**status, "choose": run_id},
                clock_ms=readings,
            )
            for run_id in sorted(runs & alive)
        ]

    return Split((), each_live)


def _split_purge_settled(op: Operation) -> Split | str:
    """Each object deletes, at its own instant of the call, every run the
    model finds eligible there; the deletions counted on all objects must sum
    to the answer (``check_history`` checks that). A call whose answer
    reached its ``limit`` may have left eligible runs behind: which ones it
    took depends on every object at once, and it is excluded."""
    refused = _refused(op)
    if refused is not None:
        return refused
    before = op.args[0] if op.args else op.kwargs.get("before_ms")
    limit = op.kwargs.get("limit", 1000)
    if op.status == "ok" and (type(op.value) is not int or op.value >= limit):
        return f"purge_settled answered {op.value!r}, its limit: which runs it took is not known"

    def per_object(root: str, runs: frozenset[str], existed: frozenset[str]) -> list[Operation]:
        if not runs & existed:
            # Every run of the object was created after the call returned: it
            # deleted none of them, as the model's purge there would.
            return []
        limits = {"limit": MAXIMUM_PURGE_BATCH}
        return [
            _part(
                op,
                root,
                method=PURGE_PART,
                args=(before, op.id, tuple(sorted(runs))),
                kwargs=limits,
                clock_ms=(),
            )
        ]

    return Split((), per_object, scope="existed")


def _split_state(op: Operation) -> Split | str:
    """A ``state()`` snapshot is a read of every object: each object's rows,
    leases, facts and acknowledgements in it must be the model's at one
    instant of the call (each object at its own instant; the database-wide
    revision and change list are not compared). Only the objects that held a
    live run while the call ran, or that the snapshot shows unsettled, are
    read (a settled object's part would add cost and little else)."""
    refused = _refused(op)
    if refused is not None:
        return refused
    if op.status != "ok":
        return "a read of unknown outcome constrains nothing"
    snapshot = op.value
    if not isinstance(snapshot, StoreState):
        return "state answered something other than a StoreState"
    live = {row.run_id for row in snapshot.rows if row.status not in TERMINAL_STATUSES}
    by_run = _SnapshotIndex(snapshot)

    def per_object(root: str, runs: frozenset[str], alive: frozenset[str]) -> list[Operation]:
        if not runs & live and not runs & alive:
            return []
        return [state_part(op, root, runs, by_run)]

    return Split((), per_object)


class _SnapshotIndex:
    """A ``StoreState``'s rows, leases, facts and acknowledgements by run id."""

    def __init__(self, snapshot: StoreState) -> None:
        self.items: dict[str, dict[str, list[Any]]] = {}
        for name in ("rows", "leases", "facts", "acknowledgements"):
            for item in getattr(snapshot, name):
                entry = self.items.setdefault(item.run_id, {})
                entry.setdefault(name, []).append(item)

    def project(self, runs: Iterable[str]) -> dict[str, list[Any]]:
        """``project_store_state`` of the snapshot for ``runs``."""
        chosen = sorted(set(runs))
        found: dict[str, list[Any]] = {}
        for name in ("rows", "leases", "facts", "acknowledgements"):
            items = [item for r in chosen for item in self.items.get(r, {}).get(name, ())]
            if name == "facts":
                items.sort(key=lambda f: (f.run_id, f.position))
            found[name] = items
        return found


def state_part(
    op: Operation, suffix: str, runs: Iterable[str], snapshot: StoreState | _SnapshotIndex
) -> Operation:
    """The read of ``runs`` in the ``state()`` call ``op`` (which answered ``snapshot``)."""
    chosen = tuple(sorted(runs))
    if isinstance(snapshot, StoreState):
        value = project_store_state(snapshot, chosen)
    else:
        value = snapshot.project(chosen)
    return _part(op, suffix, method=STATE_PART, args=(chosen,), kwargs={}, value=value, clock_ms=())


#: Multi-run operations, split into per-run and per-object sub-operations (or
#: a reason not to check them).
SPLITTERS: Final[Mapping[str, Callable[[Operation], Split | str]]] = MappingProxyType(
    {
        "heartbeat_many": _split_heartbeat_many,
        "list_runs": _split_list_runs,
        "claim_next": _split_claim_next,
        "claim_next_many": _split_claim_next_many,
        "purge_settled": _split_purge_settled,
        "state": _split_state,
    }
)


@attrs.frozen
class Partition:
    """One independent object: its run ids and its operations in invocation order."""

    key: str
    runs: tuple[str, ...]
    operations: tuple[Operation, ...]


class _Joined:
    def __init__(self) -> None:
        self.parent: dict[str, str] = {}

    def find(self, item: str) -> str:
        parent = self.parent.setdefault(item, item)
        if parent == item:
            return item
        root = self.find(parent)
        self.parent[item] = root
        return root

    def join(self, a: str, b: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            low, high = sorted((ra, rb))
            self.parent[high] = low


INADMISSIBLE: Final = "(inadmissible run id)"

_NEVER: Final = 2**63


def _settled_by(op: Operation) -> list[str]:
    """Run ids a definite answer shows settled (terminal)."""
    if op.status != "ok":
        return []
    rows: list[RunRow] = []
    if isinstance(op.value, RunRow):
        rows = [op.value]
    elif isinstance(op.value, list):
        rows = [row for row in op.value if isinstance(row, RunRow)]
    elif isinstance(op.value, RunPage):
        rows = list(op.value.runs)
    found = [row.run_id for row in rows if row.status in TERMINAL_STATUSES]
    if (
        op.method == "transition_owned"
        and isinstance(op.value, Transitioned)
        and len(op.args) > 2
        and op.args[2] in TERMINAL_STATUSES
        and type(op.args[0]) is str
    ):
        found.append(op.args[0])
    return found


class _Lifetimes:
    """When each run may have existed and been live, from the history."""

    def __init__(self, operations: Sequence[Operation], initial: StoreState | None) -> None:
        self.born: dict[str, int] = {}
        self.creates: dict[str, list[int]] = {}
        self.settled: dict[str, int] = {}
        for row in initial.rows if initial is not None else ():
            self.born[row.run_id] = -1
            if row.status in TERMINAL_STATUSES:
                self.settled[row.run_id] = -1
        for op in operations:
            if op.method == "create" and op.args and type(op.args[0]) is str:
                run_id = op.args[0]
                self.born[run_id] = min(self.born.get(run_id, _NEVER), op.invoked_ns)
                if not (op.status == "error" and op.definite):
                    # A create refused (the run exists, its parent does not) made
                    # nothing: it brings no settled run back to life.
                    self.creates.setdefault(run_id, []).append(op.invoked_ns)
            if op.definite and op.returned_ns is not None:
                for run_id in _settled_by(op):
                    self.settled[run_id] = min(self.settled.get(run_id, _NEVER), op.returned_ns)

    def existed(self, op: Operation) -> frozenset[str]:
        """The runs that may have existed before ``op`` returned (settled or not);
        every run ever created for a call of unknown outcome."""
        end = op.returned_ns if op.definite and op.returned_ns is not None else _NEVER
        return frozenset(run_id for run_id, born in self.born.items() if born < end)

    def alive(self, op: Operation) -> frozenset[str]:
        """The runs that may have existed, unsettled, while ``op`` ran."""
        end = op.returned_ns if op.returned_ns is not None else _NEVER
        found = set()
        for run_id, born in self.born.items():
            if born >= end:
                continue
            settled = self.settled.get(run_id, _NEVER)
            recreated = any(t > settled for t in self.creates.get(run_id, ()))
            if settled < op.invoked_ns and not recreated:
                continue  # settled before the call, and never created again
            found.add(run_id)
        return frozenset(found)


#: Sub-operations that never hold a run's row lock (reads, and checks of a
#: page's shape or a final state).
_NEVER_LOCKS: Final = frozenset(
    {
        "get",
        "lineage",
        "latest_round",
        "ownership_facts",
        LIST_PART,
        PAGE_SHAPE,
        NO_CANDIDATE,
        FINAL_STATE,
        STATE_PART,
    }
)


def _overlap(a: Operation, b: Operation) -> bool:
    """Whether ``a`` and ``b`` were both in flight at some instant."""
    a_end = a.returned_ns if a.returned_ns is not None else _NEVER
    b_end = b.returned_ns if b.returned_ns is not None else _NEVER
    return a.invoked_ns < b_end and b.invoked_ns < a_end


def _without_passed_over(ops: list[Operation]) -> list[Operation]:
    """An object's operations without the ``claim_next`` None reads it cannot
    judge: a store may pass over a run whose row another transaction holds
    (``FOR UPDATE SKIP LOCKED``; the protocol's "a run this caller can take"),
    and a row is only held by an operation in flight. So a None says nothing
    of an object on which some other operation that may lock a row overlapped
    the call; on any other object, it still says there was no candidate."""
    reads = [op for op in ops if op.method == NO_CANDIDATE]
    if not reads:
        return ops
    # Lockers by invocation, with the latest end so far: a read overlaps one
    # iff some locker invoked before the read ended ends after it began.
    lockers = sorted(
        (op for op in ops if op.method not in _NEVER_LOCKS), key=lambda op: op.invoked_ns
    )
    starts = [op.invoked_ns for op in lockers]
    reach: list[int] = []
    for op in lockers:
        end = op.returned_ns if op.returned_ns is not None else _NEVER
        reach.append(max(end, reach[-1]) if reach else end)
    passed_over = set()
    for read in reads:
        end = read.returned_ns if read.returned_ns is not None else _NEVER
        count = bisect.bisect_left(starts, end)
        if count and reach[count - 1] > read.invoked_ns:
            passed_over.add(id(read))
    return [op for op in ops if id(op) not in passed_over]


def partition_operations(
    operations: Iterable[Operation], initial: StoreState | None = None
) -> tuple[list[Partition], list[tuple[Operation, str]]]:
    """Split a history into independent objects; also the excluded operations
    with the reason for each."""
    joined = _Joined()
    per_object: list[tuple[str, Operation]] = []
    excluded: list[tuple[Operation, str]] = []
    for row in initial.rows if initial is not None else ():
        joined.find(row.run_id)
        for other in (row.lineage_id, row.parent_run_id):
            if other is not None:
                joined.join(row.run_id, other)
    pending = list(operations)
    queue: list[Operation] = []
    fanned: list[tuple[Operation, PerObject, str]] = []
    for op in pending:
        splitter = SPLITTERS.get(op.method)
        if splitter is None:
            queue.append(op)
            continue
        split = splitter(op)
        if isinstance(split, str):
            excluded.append((op, split))
            continue
        queue.extend(split.parts)
        if split.per_object is not None:
            fanned.append((op, split.per_object, split.scope))
    for op in queue:
        if op.method == FINAL_STATE or (op.method in OBJECT_PARTS and op.args):
            # A part written to a history file (a violation's minimal
            # sub-history) is read back as the read of the runs it names.
            runs = list(op.args[0] if op.method == FINAL_STATE else op.args[-1])
            for run_id in runs:
                joined.find(run_id)
            for a, b in itertools.pairwise(runs):
                joined.join(a, b)
            if runs:
                per_object.append((runs[0], op))
            continue
        if op.method not in ROUTED:
            excluded.append((op, EXCLUDED.get(op.method, "not an operation this checker knows")))
            continue
        run_id = _run_id(op)
        if type(run_id) is not str or (op.method == PAGE_SHAPE and run_id == INADMISSIBLE):
            per_object.append((INADMISSIBLE, op))
            continue
        joined.find(run_id)
        if op.method == "create":
            for name in ("parent_run_id", "lineage_id"):
                other = op.kwargs.get(name)
                if type(other) is str:
                    joined.join(run_id, other)
        per_object.append((run_id, op))
    members: dict[str, set[str]] = {}
    for item in list(joined.parent):
        members.setdefault(joined.find(item), set()).add(item)
    if fanned:
        lifetimes = _Lifetimes(pending, initial)
        objects = [(root, frozenset(found)) for root, found in sorted(members.items())]
        for op, build, scope in fanned:
            alive = lifetimes.existed(op) if scope == "existed" else lifetimes.alive(op)
            for root, object_runs in objects:
                per_object.extend((root, part) for part in build(root, object_runs, alive))
    groups: dict[str, list[Operation]] = {}
    for run_id, op in per_object:
        root = INADMISSIBLE if run_id == INADMISSIBLE else joined.find(run_id)
        groups.setdefault(root, []).append(op)
    for root, ops in groups.items():
        groups[root] = _without_passed_over(ops)
    partitions = [
        Partition(
            key=root,
            runs=tuple(sorted(members.get(root, set()))),
            operations=tuple(sorted(ops, key=lambda o: (o.invoked_ns, o.id))),
        )
        for root, ops in sorted(groups.items())
    ]
    return partitions, excluded
