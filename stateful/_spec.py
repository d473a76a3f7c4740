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
over the whole database (``revision``, ``changes``, ``state``,
``check_invariants``) are not per-object and are excluded, with that reason.
Multi-run operations are split by ``SPLITTERS`` (one entry per method) into
per-run sub-operations with the same interval, which is sound (it never
rejects a linearizable history) but weaker than checking their atomicity
across runs: ``heartbeat_many`` becomes one ``heartbeat`` per run id it
answered for. Methods this version does not know are excluded with a reason,
never passed silently: the verdict lists them.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Final, Literal, TypeAlias

import attrs

from runstore import RunStoreError, StoreState
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

#: Why whole-database reads are not checked per object.
EXCLUDED: Final[Mapping[str, str]] = MappingProxyType(
    {
        "revision": "reads the database-wide revision counter, which every object moves",
        "changes": "reads the database-wide change list, which every object moves",
        "state": "reads the whole database (the torture checks it as a final state per object)",
        "check_invariants": "checks the whole database, not one object",
        "list_runs": "a page over many runs; not checked yet (see the guide)",
        "claim_next": "chooses among many runs; not checked yet (see the guide)",
        "purge_settled": "deletes across many runs; not checked yet (see the guide)",
    }
)

#: Excluded methods that never write (so the revision count can still be checked).
EXCLUDED_READS: Final = frozenset({"revision", "changes", "state", "check_invariants"})

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
        if op.method == FINAL_STATE:
            return node, ("ok", project(state, op.args[0]))
        model = self.model
        model._state = state
        self.clock.load(op.clock_ms)
        try:
            value = getattr(model, op.method)(*op.args, **op.kwargs)
        except RunStoreError as error:
            result: Result = ("error", error.code)
        except ClockExhausted:
            return node, ("unreplayable", "the store took fewer clock readings than the model")
        else:
            result = ("ok", value)
        after = model._state
        return (node if after is state else make_node(after, node)), result


def matches(op: Operation, result: Result) -> bool:
    """Whether the model's answer is what the store answered (values by ``==``,
    errors by code)."""
    kind, payload = result
    if op.status == "ok":
        return kind == "ok" and bool(payload == op.value)
    if op.status == "error":
        return kind == "error" and payload == op.error
    return False


# -- partitions --------------------------------------------------------------------


def _run_id(op: Operation) -> object:
    if op.args:
        return op.args[0]
    return op.kwargs.get("run_id")


def _split_heartbeat_many(op: Operation) -> list[Operation] | str:
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
    if op.status == "error" and not op.unknown:
        return f"refused as a whole ({op.error}): nothing written"
    if op.status == "ok":
        if type(op.value) is not dict:
            return "heartbeat_many answered something other than a mapping"
        answers = list(op.value.items())
    else:
        if not isinstance(run_ids, (list, tuple)):
            return "heartbeat_many with unknown outcome and unreadable run ids"
        answers = [(run_id, None) for run_id in run_ids]
    parts = []
    for index, (run_id, answer) in enumerate(answers):
        parts.append(
            attrs.evolve(
                op,
                id=f"{op.id}/{index}",
                method="heartbeat",
                args=(run_id, owner, now_ms),
                kwargs={},
                value=answer,
            )
        )
    return parts


#: Multi-run operations, split into per-run sub-operations (or a reason not to).
SPLITTERS: Final[Mapping[str, Callable[[Operation], list[Operation] | str]]] = MappingProxyType(
    {"heartbeat_many": _split_heartbeat_many}
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
    for op in pending:
        splitter = SPLITTERS.get(op.method)
        if splitter is None:
            queue.append(op)
            continue
        parts = splitter(op)
        if isinstance(parts, str):
            excluded.append((op, parts))
        else:
            queue.extend(parts)
    for op in queue:
        if op.method == FINAL_STATE:
            runs = list(op.args[0])
            for run_id in runs:
                joined.find(run_id)
            for a, b in itertools.pairwise(runs):
                joined.join(a, b)
            if runs:
                per_object.append((runs[0], op))
            continue
        if op.method not in PER_RUN:
            excluded.append((op, EXCLUDED.get(op.method, "not an operation this checker knows")))
            continue
        run_id = _run_id(op)
        if type(run_id) is not str:
            per_object.append((INADMISSIBLE, op))
            continue
        joined.find(run_id)
        if op.method == "create":
            for name in ("parent_run_id", "lineage_id"):
                other = op.kwargs.get(name)
                if type(other) is str:
                    joined.join(run_id, other)
        per_object.append((run_id, op))
    groups: dict[str, list[Operation]] = {}
    members: dict[str, set[str]] = {}
    for run_id, op in per_object:
        root = INADMISSIBLE if run_id == INADMISSIBLE else joined.find(run_id)
        groups.setdefault(root, []).append(op)
    for item in list(joined.parent):
        members.setdefault(joined.find(item), set()).add(item)
    partitions = [
        Partition(
            key=root,
            runs=tuple(sorted(members.get(root, set()))),
            operations=tuple(sorted(ops, key=lambda o: (o.invoked_ns, o.id))),
        )
        for root, ops in sorted(groups.items())
    ]
    return partitions, excluded
