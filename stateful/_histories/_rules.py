"""Rules judged beside per-object linearizability: what one call promises across objects.

Checking each object (a run, or a lineage) apart is exact for operations that
touch one object, but two promises of the contract (contract.md, wave 3)
relate objects, and a per-object check cannot see them broken:

- **A ``heartbeat_many`` is one atomic operation.** Its per-run parts are
  checked on their objects each at its own instant, so a snapshot read that
  saw some of the batch's renewals and not others passes there.
  ``batch_objects`` builds, for every batch that wrote two or more runs
  while another call on their objects was in flight, one object made of the
  union of the objects of the runs it wrote, with the batch as one operation
  and each overlapping snapshot read (a ``list_runs`` page or a ``state()``)
  as one read of the whole union at one instant. The union is then searched
  like any object: a snapshot that shows the batch partly cannot be placed,
  nor can two reads, one after the other, that see it in halves.
- **``claim_next`` takes the oldest claimable run**, other than runs a
  concurrent write holds locked. ``oldest_claim_findings`` judges it as a
  property of each call that took a run ``X``, against every object ``P``
  (``X``'s own included, the call's part there set aside): when no other
  operation on ``P`` that may write overlaps the call (so no concurrent write
  can hold a row of ``P``) and none of ``P``'s operations of unknown outcome
  was invoked before the call returned, ``P``'s state just before the call
  takes effect is the same at every instant of the call. If in *every* state the object's
  earlier writes can leave it in (every order of them that respects real
  time and answers what each answered) a run of ``P`` older than ``X`` (by
  ``(created_at_ms, run_id)``, the model's order) is one
  ``ModelRunStore.claim_next_candidates`` lists for the call's statuses, the
  call passed over a run it had to take: a violation.
- **``claim_next_many`` takes the oldest claimable runs**, as many as it
  may: the same judgement, for a call that took runs ``X1 .. Xk`` (oldest
  first), of the runs other than those it took, against ``Xk`` when it took
  its ``limit`` and against any run at all when it took fewer (it had to
  take every candidate there was).

Neither rule can reject a linearizable history of a correct store: the union
object is exact (a store that applies the batch atomically has a
linearization of it), and the oldest-claim rule only judges an object whose
state during the call is fixed, by every order its history allows.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Final

import attrs
from sortedcontainers import SortedList

from runstore import RunPage, RunRow, RunStoreError, StoreState, Updated
from runstore.model._state import ModelState

from ._history import Operation
from ._spec import (
    _NEVER_LOCKS,
    EXCLUDED_READS,
    INADMISSIBLE,
    Node,
    Partition,
    Result,
    Spec,
    _Lifetimes,
    _overlap,
    _split_list_runs,
    initial_state,
    make_node,
    matches,
    state_part,
)

#: Model applications one enumeration of an object's states may spend
#: (past it the object is not judged for that call).
MAX_STATE_STEPS: Final = 20_000

#: Operations a union object for one batch may hold before it is not judged.
MAX_UNION_OPERATIONS: Final = 4_000

_NEVER: Final = 2**63
_NONE: Final[frozenset[str]] = frozenset()

#: The snapshot reads a batch must show whole or not at all.
SNAPSHOT_READS: Final = frozenset({"list_runs", "state"})


# -- heartbeat_many is atomic -------------------------------------------------------


def _batch_arguments(op: Operation) -> tuple[Any, Any, Any]:
    arguments = dict(zip(("owner", "run_ids", "now_ms"), op.args, strict=False))
    arguments.update(op.kwargs)
    return arguments.get("owner"), arguments.get("run_ids"), arguments.get("now_ms")


def _written_by_batch(op: Operation) -> list[str]:
    """The runs a ``heartbeat_many`` call may have written: those it answered
    ``Updated()`` for, or every run it named when its outcome is unknown."""
    if op.status == "error" and not op.unknown:
        return []
    _, run_ids, _ = _batch_arguments(op)
    if op.status == "ok":
        if type(op.value) is not dict:
            return []
        return [str(rid) for rid, answer in op.value.items() if isinstance(answer, Updated)]
    if not isinstance(run_ids, (list, tuple)):
        return []
    return [rid for rid in run_ids if type(rid) is str]


def _restricted(batch: Operation, written: Sequence[str]) -> Operation:
    """``batch`` as a call of the runs it wrote only: each run's answer is what ``heartbeat``
    alone would give, so the others' answers (checked on their own objects) can be left out,
    and so can their objects."""
    owner, _, now_ms = _batch_arguments(batch)
    value = batch.value
    if batch.status == "ok" and type(value) is dict:
        value = {rid: answer for rid, answer in value.items() if rid in written}
    return attrs.evolve(batch, args=(owner, list(written), now_ms), kwargs={}, value=value)


def _snapshot_part(snapshot: Operation, runs: frozenset[str]) -> Operation | None:
    """One read of the whole union ``runs`` at one instant of ``snapshot``."""
    if snapshot.method == "state" and isinstance(snapshot.value, StoreState):
        return state_part(snapshot, "union", runs, snapshot.value)
    if snapshot.method == "list_runs" and isinstance(snapshot.value, RunPage):
        split = _split_list_runs(snapshot)
        if isinstance(split, str) or split.per_object is None:
            return None
        parts = split.per_object("union", runs, runs)
        return parts[0] if parts else None
    return None


@attrs.frozen
class UnionPiece:
    """One object of a union (``BatchObject``), with the batch's and the snapshots' parts on it."""

    runs: frozenset[str]
    """The object's runs."""
    window: tuple[Operation, ...]
    """Its operations in the union's window of time, the batch's and the snapshots' parts among
    them (``crossing`` names those)."""
    whole: tuple[Operation, ...]
    """Its operations from its first one to the window's end, the same parts among them."""
    starts: tuple[Node, ...]
    """The states it may be in when the window opens."""
    crossing: Mapping[str, int]
    """The parts of the batch and of the snapshots on this object, by operation id: the index of
    the call each is part of (0 the batch, then the snapshots in ``BatchObject.snapshots``'
    order). A snapshot with no part here reads nothing of this object."""
    parts: Mapping[str, str]
    """For each of the union's own parts (its batch and snapshot reads, by id), the id of its
    part on this object (when it has one)."""


@attrs.frozen
class BatchObject:
    """The union object built to judge one ``heartbeat_many`` call's atomicity."""

    batch: Operation
    """The ``heartbeat_many`` call."""
    snapshots: tuple[Operation, ...]
    """The snapshot reads that overlapped it."""
    partition: Partition
    """The union of the objects it names, with the batch whole and each snapshot one read:
    the operations of a window of time around them."""
    starts: tuple[Node, ...]
    """The states the union may be in when the window opens (one for each way its objects'
    earlier writes can leave them); the union is a violation only if it is one from each."""
    whole: Partition
    """The same union from the objects' first operations (to the window's end): searched from
    the initial state when the window is a violation, so that the sub-history shown and
    written holds what the window's start states came from."""
    pieces: tuple[UnionPiece, ...] = ()
    """Its objects one by one, each with the batch's and the snapshots' parts on it (empty
    when the batch's outcome is unknown, or a part could not be made): the same judgement
    object by object, which proves most violations in a few model steps (see
    ``runstore.stateful._histories._linearize.cross_orders``)."""


#: Start states a union may try (combinations of its objects' states at the window's start).
MAX_UNION_STARTS: Final = 16


def _closed(ops: Sequence[Operation]) -> list[int]:
    """For each index ``k`` of ``ops`` (sorted by invocation), the latest end of ``ops[:k+1]``
    (``_NEVER`` once one of unknown outcome came: it may take effect any time later)."""
    reach = 0
    found = []
    for op in ops:
        end = _NEVER if op.unknown or op.returned_ns is None else op.returned_ns
        reach = max(reach, end)
        found.append(reach)
    return found


def _window(ops: Sequence[Operation], first: int, last: int) -> tuple[int, int]:
    """Indices ``(k, e)`` of ``ops`` (sorted by invocation) such that every operation before
    ``k`` returned before ``ops[k]`` was invoked and was invoked no later than ``first``, and
    every operation before ``e`` returned before ``ops[e]`` was invoked, which is after
    ``last``: in every order that respects real time, ``ops[:k]`` come first and ``ops[e:]``
    last. ``(0, len(ops))`` when there are no such cuts."""
    reach = _closed(ops)
    k = 0
    for index in range(1, len(ops)):
        if ops[index].invoked_ns > first:
            break
        if reach[index - 1] < ops[index].invoked_ns:
            k = index
    e = len(ops)
    for index in range(k + 1, len(ops)):
        if ops[index].invoked_ns > last and reach[index - 1] < ops[index].invoked_ns:
            e = index
            break
    return k, e


def merge_states(states: Iterable[ModelState]) -> ModelState:
    """One state holding the rows, leases, facts and acknowledgements of ``states`` (of
    disjoint objects); its revision and change feed start afresh, as ``initial_state``'s do."""
    rows: dict[str, Any] = {}
    leases: dict[str, Any] = {}
    facts: dict[str, Any] = {}
    acknowledgements: dict[str, Any] = {}
    for state in states:
        rows.update(state.rows)
        leases.update(state.leases)
        facts.update(state.facts)
        acknowledgements.update(state.acknowledgements)
    return ModelState(
        order=SortedList((row.created_at_ms, row.run_id) for row in rows.values()),
        rows=MappingProxyType(rows),
        leases=MappingProxyType(leases),
        facts=MappingProxyType(facts),
        acknowledgements=MappingProxyType(acknowledgements),
        changes=MappingProxyType({}),
        revision=0,
    )


def batch_objects(
    history: Sequence[Operation],
    partitions: Sequence[Partition],
    judged: Iterable[str],
    initial: StoreState | None = None,
    *,
    max_state_steps: int = MAX_STATE_STEPS,
) -> tuple[list[BatchObject], int]:
    """The union objects to search for every ``heartbeat_many`` of ``history``
    that wrote (or may have written) two or more runs while a snapshot read,
    or any other call on those runs' objects, overlapped it (a ``get`` of
    each of two runs, one after the other, can see a batch in halves too),
    over the objects of ``partitions`` whose keys are in
    ``judged`` (the linearizable ones), from ``initial``; also how many such
    batches were left out (an object not judged, a union past
    ``MAX_UNION_OPERATIONS``, too many start states).

    Each union holds a window of time around the batch and its snapshots: on
    each object, the operations from the last instant before them when
    everything earlier had returned (those earlier writes all come first in
    any legal order; the states they can leave the object in are enumerated
    within ``max_state_steps``) to the first such instant after them."""
    ok = set(judged)
    spec = Spec()
    owner: dict[str, Partition] = {}
    for partition in partitions:
        if partition.key == INADMISSIBLE:
            continue
        for run_id in partition.runs:
            owner[run_id] = partition
    snapshots = [
        op
        for op in history
        if op.method in SNAPSHOT_READS and op.status == "ok" and op.returned_ns is not None
    ]
    cuts: dict[str, list[tuple[int, list[Node]]]] = {}

    def states_at(partition: Partition, k: int) -> list[Node] | None:
        """The states ``partition``'s writes before index ``k`` (a closed cut) can leave it in,
        enumerated on from the latest cut met before (None past the budget)."""
        known = cuts.setdefault(
            partition.key, [(0, [make_node(initial_state(initial, partition.runs))])]
        )
        since, states = max((cut for cut in known if cut[0] <= k), key=lambda cut: cut[0])
        if since == k:
            return states
        segment = [op for op in partition.operations[since:k] if op.method not in _NEVER_LOCKS]
        found: dict[Any, Node] = {}
        for node in states:
            ends = _end_states(segment, node, spec, max_state_steps)
            if ends is None:
                return None
            for end, _ in ends:
                found.setdefault(end.key, end)
        known.append((k, list(found.values())))
        return list(found.values())

    built: list[BatchObject] = []
    skipped = 0
    for batch in history:
        if batch.method != "heartbeat_many":
            continue
        written = _written_by_batch(batch)
        if len(written) < 2:
            continue
        seen = [s for s in snapshots if _overlap(s, batch)]
        objects = {owner[rid].key: owner[rid] for rid in written if rid in owner}
        own = f"{batch.id}/"
        if not seen and not any(
            _overlap(op, batch) and not op.id.startswith(own)
            for p in objects.values()
            for op in p.operations
        ):
            continue  # alone in its time: its parts, in order, are the batch
        if not objects or any(key not in ok for key in objects):
            skipped += 1
            continue
        runs = frozenset(rid for p in objects.values() for rid in p.runs)
        prefixes = tuple(f"{op.id}/" for op in (batch, *seen))
        first = min(op.invoked_ns for op in (batch, *seen))
        last = max(op.returned_ns or _NEVER for op in (batch, *seen))
        ops: list[Operation] = []
        whole: list[Operation] = []
        choices: list[list[Node]] = []
        spans: list[tuple[Partition, list[Operation], list[Operation]]] = []
        for partition in objects.values():
            every = partition.operations
            k, e = _window(every, first, last)
            if any(op.id.startswith(prefixes) for op in every[:k]):
                k = 0
            states = states_at(partition, k) if k else None
            if not states:
                k, states = 0, [make_node(initial_state(initial, partition.runs))]
            window = [op for op in every[k:e] if not op.id.startswith(prefixes)]
            before = [op for op in every[:e] if not op.id.startswith(prefixes)]
            ops.extend(window)
            whole.extend(before)
            choices.append(states)
            spans.append((partition, window, before))
        combinations = 1
        for states in choices:
            combinations *= len(states)
        extra = [_restricted(batch, written)]
        reads: list[Operation] = []
        for snapshot in seen:
            part = _snapshot_part(snapshot, runs)
            if part is not None:
                extra.append(part)
                reads.append(snapshot)
        pieces = _pieces(batch, written, reads, extra, spans, choices)
        ops += extra
        whole += extra
        if len(ops) > MAX_UNION_OPERATIONS or combinations > MAX_UNION_STARTS:
            skipped += 1
            continue
        ops.sort(key=lambda o: (o.invoked_ns, o.id))
        partition = Partition(
            key=f"heartbeat_many {batch.id}", runs=tuple(sorted(runs)), operations=tuple(ops)
        )
        starts = tuple(
            make_node(merge_states(node.state for node in combination))
            for combination in itertools.product(*choices)
        )
        whole.sort(key=lambda o: (o.invoked_ns, o.id))
        entire = attrs.evolve(partition, operations=tuple(whole))
        built.append(BatchObject(batch, tuple(seen), partition, starts, entire, pieces))
    return built, skipped


def _pieces(
    batch: Operation,
    written: Sequence[str],
    reads: Sequence[Operation],
    extra: Sequence[Operation],
    spans: Sequence[tuple[Partition, list[Operation], list[Operation]]],
    choices: Sequence[list[Node]],
) -> tuple[UnionPiece, ...]:
    """The union's objects one by one, each with the parts of the batch and of the snapshot
    ``reads`` (whose union parts are ``extra``, the batch's first) on it; ``()`` when the
    batch's outcome is unknown (whether it took effect is then one choice for every object,
    which a search object by object would make apart) or a part cannot be made."""
    if batch.status != "ok":
        return ()
    pieces = []
    for (partition, window, before), states in zip(spans, choices, strict=True):
        runs = frozenset(partition.runs)
        mine = [rid for rid in written if rid in runs]
        crossing: dict[str, int] = {}
        parts: dict[str, str] = {}
        added: list[Operation] = []
        if mine:
            part = attrs.evolve(_restricted(batch, mine), id=f"{batch.id}/piece")
            added.append(part)
            crossing[part.id] = 0
            parts[extra[0].id] = part.id
        for index, (snapshot, union_part) in enumerate(zip(reads, extra[1:], strict=True)):
            if snapshot.method == "state" and isinstance(snapshot.value, StoreState):
                part = state_part(snapshot, "piece", runs, snapshot.value)
            elif snapshot.method == "list_runs" and isinstance(snapshot.value, RunPage):
                split = _split_list_runs(snapshot)
                if isinstance(split, str) or split.per_object is None:
                    return ()
                found = split.per_object("piece", runs, runs)
                if not found:
                    continue  # the page reads nothing of this object
                (part,) = found
            else:
                return ()
            added.append(part)
            crossing[part.id] = index + 1
            parts[union_part.id] = part.id
        pieces.append(
            UnionPiece(
                runs=runs,
                window=tuple(sorted((*window, *added), key=lambda o: (o.invoked_ns, o.id))),
                whole=tuple(sorted((*before, *added), key=lambda o: (o.invoked_ns, o.id))),
                starts=tuple(states),
                crossing=MappingProxyType(crossing),
                parts=MappingProxyType(parts),
            )
        )
    return tuple(pieces)


# -- claim_next takes the oldest ----------------------------------------------------


@attrs.frozen
class ClaimFinding:
    """A ``claim_next`` (``claim_next_many``) call that passed over an older run it had to
    take."""

    call: Operation
    """The ``claim_next`` call (it answered the run it took), or the ``claim_next_many`` call
    (it answered the runs it took)."""
    older: str
    """The oldest run of ``partition`` that was claimable throughout the call."""
    partition: Partition
    """The object that run belongs to."""
    support: tuple[tuple[Operation, Result], ...]
    """The object's writes before the call, in one order that respects real
    time, each with the model's answer (equal to the recorded one)."""
    answer: Result
    """What the model's ``claim_next`` answers on that object after them."""


@attrs.frozen
class ClaimRuleCount:
    """How many (call, object) pairs the oldest-claim rule judged and left out."""

    calls: int
    """``claim_next`` and ``claim_next_many`` calls that took a run."""
    judged: int
    """Pairs judged: the object held a live run and no write on it overlapped the call."""
    skipped: int
    """Calls beside an excluded write, and pairs whose states could not all be enumerated (the
    budget, or a replay the model could not make)."""


def _key(row: RunRow) -> tuple[int, str]:
    return (row.created_at_ms, row.run_id)


def _older_candidates(
    spec: Spec, node: Node, call: Operation, taken: tuple[int, str], took: frozenset[str] = _NONE
) -> list[str] | None:
    """The runs of ``node``'s state that ``call`` could take and that are older than ``taken``,
    other than those it ``took``, oldest first (None when the model refuses the call's
    statuses)."""
    model = spec.model
    model._state = node.state
    status = {k: v for k, v in call.kwargs.items() if k == "status"}
    try:
        candidates = model.claim_next_candidates(**status)
    except RunStoreError:
        return None
    rows = node.state.rows
    return [rid for rid in candidates if _key(rows[rid]) < taken and rid not in took]


def _claims_taken(op: Operation) -> tuple[tuple[int, str], frozenset[str]] | None:
    """For a ``claim_next`` or ``claim_next_many`` call that answered the runs it took: the key
    every run it passed over must not be older than, and the runs it took (None for any other
    operation). A batch that took fewer than its ``limit`` had to take every candidate."""
    if op.status != "ok" or op.returned_ns is None:
        return None
    if op.method == "claim_next" and isinstance(op.value, RunRow):
        return _key(op.value), frozenset((op.value.run_id,))
    if op.method != "claim_next_many" or not isinstance(op.value, list) or not op.value:
        return None
    rows = op.value
    if not all(isinstance(row, RunRow) for row in rows):
        return None
    limit = op.args[2] if len(op.args) > 2 else op.kwargs.get("limit")
    bound = _key(rows[-1]) if type(limit) is int and len(rows) >= limit else (_NEVER, "")
    return bound, frozenset(row.run_id for row in rows)


def _end_states(
    ops: Sequence[Operation], start: Node, spec: Spec, budget: int
) -> list[tuple[Node, tuple[tuple[Operation, Result], ...]]] | None:
    """Every state ``ops`` (definite writes, sorted by invocation) can leave
    ``start`` in, by an order that respects real time in which the model
    answers what each answered, each with one such order; None past
    ``budget`` model applications or when the model cannot replay one."""
    n = len(ops)
    configs: dict[tuple[Any, int], tuple[Node, int, tuple[tuple[Operation, Result], ...]]] = {
        (start.key, 0): (start, 0, ())
    }
    steps = 0
    for _ in range(n):
        grown: dict[tuple[Any, int], tuple[Node, int, tuple[tuple[Operation, Result], ...]]] = {}
        for node, mask, order in configs.values():
            unplaced = [i for i in range(n) if not mask >> i & 1]
            deadline = min(ops[i].returned_ns or _NEVER for i in unplaced)
            for i in unplaced:
                if ops[i].invoked_ns > deadline:
                    break
                steps += 1
                if steps > budget:
                    return None
                after, result = spec.apply(node, ops[i])
                if result[0] == "unreplayable":
                    return None
                if not matches(ops[i], result):
                    continue
                placed = mask | (1 << i)
                key = (after.key, placed)
                if key not in grown:
                    grown[key] = (after, placed, (*order, (ops[i], result)))
        configs = grown
        if not configs:
            return []
    return [(node, order) for node, _, order in configs.values()]


class _Timeline:
    """One linearizable object's writes, and its states along the order found."""

    def __init__(
        self, partition: Partition, order: Sequence[Operation], start: Node, spec: Spec
    ) -> None:
        self.partition = partition
        self.start = start
        # The oldest listing key each run may ever have had: its initial row's,
        # or the first clock reading of a create of it (the model stamps
        # created_at_ms with it); None when some create took no reading.
        self.oldest: tuple[int, str] | None = None
        keys = [_key(row) for row in start.state.rows.values()]
        for op in partition.operations:
            if op.method == "create" and op.args and type(op.args[0]) is str:
                if not op.clock_ms:
                    keys = []
                    self.oldest = None
                    break
                keys.append((op.clock_ms[0], op.args[0]))
        else:
            self.oldest = min(keys, default=(_NEVER, ""))
        self.writes = sorted(
            (op for op in partition.operations if op.method not in _NEVER_LOCKS),
            key=lambda op: (op.invoked_ns, op.id),
        )
        self.invoked = [op.invoked_ns for op in self.writes]
        # A write's end for the overlap test: an unknown outcome may land any time later.
        reach = 0
        self.reach: list[int] = []
        for op in self.writes:
            end = _NEVER if op.unknown or op.returned_ns is None else op.returned_ns
            reach = max(reach, end)
            self.reach.append(reach)
        position = {op.id: k for k, op in enumerate(order)}
        latest = -1
        self.latest: list[int] = []
        for op in self.writes:
            latest = max(latest, position.get(op.id, -1))
            self.latest.append(latest)
        # The states along the order, replayed only as far as a call needs them.
        self.cuts: list[tuple[int, list[tuple[Node, tuple[tuple[Operation, Result], ...]]]]] = [
            (0, [(start, ())])
        ]
        self.order = order
        self.spec = spec
        self.nodes: list[Node] = []

    def quiet_during(self, call: Operation) -> int | None:
        """How many writes precede ``call`` when none but the call's own part overlaps it (and none
        of unknown outcome was invoked before it returned); None otherwise."""
        count = bisect.bisect_left(self.invoked, call.invoked_ns)
        if count and self.reach[count - 1] > call.invoked_ns:
            return None
        end = call.returned_ns if call.returned_ns is not None else _NEVER
        own = f"{call.id}/"
        during = self.writes[count : bisect.bisect_left(self.invoked, end)]
        if any(not op.id.startswith(own) for op in during):
            return None
        return count

    def states_at(
        self, count: int, budget: int
    ) -> list[tuple[Node, tuple[tuple[Operation, Result], ...]]] | None:
        """Every state the first ``count`` writes can leave the object in (each with one legal
        order of them), when they all returned before any later write was invoked (as
        ``quiet_during`` ensures); enumerated on from the latest such count met before, within
        ``budget`` model steps a stretch (None past it)."""
        known = self.cuts
        since, states = max((cut for cut in known if cut[0] <= count), key=lambda cut: cut[0])
        if since == count:
            return states
        found: dict[Any, tuple[Node, tuple[tuple[Operation, Result], ...]]] = {}
        for node, order in states:
            ends = _end_states(self.writes[since:count], node, self.spec, budget)
            if ends is None:
                return None
            for end, more in ends:
                found.setdefault(end.key, (end, (*order, *more)))
        result = list(found.values())
        known.append((count, result))
        return result

    def state_after(self, count: int) -> Node:
        """The state after the first ``count`` writes, in the order found."""
        if count == 0 or self.latest[count - 1] < 0:
            return self.start
        wanted = self.latest[count - 1]
        while len(self.nodes) <= wanted:
            node = self.nodes[-1] if self.nodes else self.start
            self.nodes.append(self.spec.apply(node, self.order[len(self.nodes)])[0])
        return self.nodes[wanted]


def oldest_claim_findings(
    history: Sequence[Operation],
    partitions: Sequence[Partition],
    orders: Mapping[str, Sequence[Operation]],
    initial: StoreState | None,
    *,
    excluded: Sequence[tuple[Operation, str]] = (),
    max_state_steps: int = MAX_STATE_STEPS,
) -> tuple[list[ClaimFinding], ClaimRuleCount]:
    """The ``claim_next`` calls of ``history`` that passed over an older
    claimable run (see the module docstring), judged against the objects of
    ``partitions`` that were found linearizable (``orders`` holds the order
    found for each, by key), from ``initial``; with the rule's counts. A call
    that overlapped an operation the partitioning ``excluded`` and that may
    have written (it may have held rows of any object) is not judged."""
    spec = Spec()
    calls = [(op, found) for op in history if (found := _claims_taken(op)) is not None]
    findings: list[ClaimFinding] = []
    judged = skipped = 0
    if not calls:
        return findings, ClaimRuleCount(0, 0, 0)
    timelines = [
        _Timeline(p, orders[p.key], make_node(initial_state(initial, p.runs)), spec)
        for p in partitions
        if p.key in orders and p.key != INADMISSIBLE
    ]
    lifetimes = _Lifetimes(history, initial)
    writers = [
        op
        for op, _ in excluded
        if op.method not in EXCLUDED_READS and not (op.status == "error" and op.definite)
    ]
    for call, (taken, took) in calls:
        if any(
            _overlap(op, call) or (op.unknown and op.invoked_ns < (call.returned_ns or _NEVER))
            for op in writers
        ):
            skipped += 1
            continue
        alive = lifetimes.alive(call)
        for timeline in timelines:
            if not alive.intersection(timeline.partition.runs):
                continue  # every run of it settled before the call (or not yet created)
            if timeline.oldest is not None and timeline.oldest >= taken:
                continue  # no run of it was ever older than the one taken
            count = timeline.quiet_during(call)
            if count is None:
                continue
            judged += 1
            suspects = _older_candidates(spec, timeline.state_after(count), call, taken, took)
            if not suspects:
                continue
            states = timeline.states_at(count, max_state_steps)
            if not states:
                skipped += 1
                continue
            common = set(suspects)
            for node, _ in states:
                common &= set(_older_candidates(spec, node, call, taken, took) or ())
            if not common:
                continue
            older = next(rid for rid in suspects if rid in common)
            node, support = states[0]
            model = spec.model
            model._state = node.state
            # The model admits the call, then each claim it makes admits again.
            limit = call.args[2] if len(call.args) > 2 else 1
            claims = limit if type(limit) is int and 0 < limit <= 1000 else 1
            spec.clock.load(call.clock_ms[:1] * (claims + 1) + call.clock_ms)
            try:
                method = getattr(model, call.method)
                answer: Result = ("ok", method(*call.args, **call.kwargs))
            except Exception as error:
                answer = ("error", getattr(error, "code", type(error).__name__))
            findings.append(ClaimFinding(call, older, timeline.partition, support, answer))
    return findings, ClaimRuleCount(len(calls), judged, skipped)
