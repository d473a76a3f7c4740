"""Linearizability of recorded histories against the reference model.

``check_history(operations)`` asks, for every independent object of the
history (a run, or a lineage with its rounds: ``runstore.stateful._histories._spec``),
whether the object's operations can be put in one order that respects real
time (an operation that returned before another was invoked comes first) and
in which the reference model, run one operation at a time, answers exactly
what each operation answered: outcomes compared with ``==`` (reads by value,
run state included), errors by ``RunStoreError.code``. Checking objects
separately is exact (P-compositionality: a history is linearizable iff each
object's sub-history is).

The search is Wing and Gong's, with Lowe's memoization: walk the calls that
may go next (those invoked before the earliest unfinished return), try each on
the model, and go deeper when the model agrees and the pair (model state, set
of operations placed) was not met before; when an operation's return is
reached before it was placed, undo the last placement. A partition whose
search empties is linearizable; one whose search backtracks past its first
operation is a violation.

Operations of unknown outcome (a ``persistence_failed`` error, or no return
at all because the process died) may take effect at any point after they were
invoked, with any answer, or never: they have no return to force them, and
the search succeeds once every operation of known outcome is placed. Those
that cannot change state (reads, and calls the model refuses or loses at that
point) are skipped rather than placed. Each of them can double the search, so
a partition with more than ``max_unknown`` of them that could write is not
searched: it is reported ``unchecked`` with the count, never passed. A search
that runs past ``max_steps`` model applications is reported ``unchecked``
too, and so is an operation the model cannot replay (no store-clock reading
recorded where the model needs one).

A violation is shrunk to a minimal offending sub-history of its object
(operations dropped one chunk at a time while the rest stays
non-linearizable), and explained: the longest legal order found and what the
model would answer for each operation that could have gone next.

Beside the objects, ``check_history`` judges the rules that span objects
(``runstore.stateful._histories._rules``): every ``heartbeat_many`` a
snapshot read overlapped is searched again on the union of the objects it
names, as one operation, and every ``claim_next`` that took a run is checked
against every object whose state was fixed while it ran. Their violations are
``PartitionVerdict``s like any object's, listed in ``HistoryVerdict.rules``.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final, Literal, TypeAlias

import attrs

from runstore import RunRow, StoreState

from ._history import Operation
from ._rules import (
    BatchObject,
    ClaimFinding,
    UnionPiece,
    batch_objects,
    oldest_claim_findings,
)
from ._spec import (
    EXCLUDED_READS,
    FINAL_STATE,
    PURGE_PART,
    SPLITTERS,
    STATE_PART,
    Node,
    Partition,
    Result,
    Spec,
    final_state_operations,
    initial_state,
    local_run,
    make_node,
    matches,
    partition_operations,
    run_view,
)

Verdict: TypeAlias = Literal["linearizable", "violation", "unchecked"]

#: Operations of unknown outcome that may write, per object, before it is left unchecked.
MAX_UNKNOWN: Final = 24
#: Model applications per object before its search is abandoned as unchecked.
MAX_STEPS: Final = 5_000_000
#: Sub-history checks the shrinker may spend on one violation.
MAX_SHRINK_CHECKS: Final = 2000
#: Seconds the shrinker may spend on one violation (then its best so far is kept).
MAX_SHRINK_SECONDS: Final = 30.0

_READS: Final = frozenset(
    {"get", "lineage", "latest_round", "ownership_facts", FINAL_STATE, STATE_PART}
)


@attrs.frozen
class Explanation:
    """Why a (minimal) sub-history is not linearizable, as far as the search saw.

    ``order``: the longest prefix of a legal order the search found, each
    operation with the model's answer (equal to the recorded one). ``blocked``:
    every operation that could have gone next after it, with what the model
    would have answered there instead of what was recorded.
    """

    order: tuple[tuple[Operation, Result], ...]
    """The longest prefix of a legal order the search found: each operation with the model's answer.
    """
    blocked: tuple[tuple[Operation, Result], ...]
    """Every operation that could have gone next, with what the model would have answered there."""


@attrs.frozen
class PartitionVerdict:
    """The verdict on one independent object (a run, or a lineage).

    ``result`` is ``"linearizable"``, ``"violation"`` or ``"unchecked"``
    (``reason`` says why: too many operations of unknown outcome, the search
    budget, an operation the model cannot replay). ``explored`` counts the
    distinct (state, placed set) pairs the search met, ``steps`` the model
    applications. On a violation ``minimal`` is the shrunk offending
    sub-history and ``explanation`` describes it; when linearizable,
    ``revisions`` counts the row writes of the linearization found.
    """

    key: str
    """The object's key: a run id, or a lineage's."""
    runs: tuple[str, ...]
    """The run ids the object covers."""
    result: Verdict
    """``"linearizable"``, ``"violation"`` or ``"unchecked"``."""
    reason: str | None
    """Why it is unchecked (or what the violation is), else None."""
    history: tuple[Operation, ...]
    """The object's operations, in invocation order."""
    unknown: int
    """How many of them have an unknown outcome."""
    explored: int
    """The distinct (state, placed set) pairs the search met."""
    steps: int
    """How many times the search applied the model."""
    minimal: tuple[Operation, ...] | None = None
    """On a violation, the shrunk offending sub-history; else None."""
    explanation: Explanation | None = None
    """On a violation, why ``minimal`` is not linearizable; else None."""
    search_seconds: float = 0.0
    """Time spent searching."""
    shrink_seconds: float = 0.0
    """Time spent shrinking a violation."""
    revisions: int | None = None
    """Row writes of the linearization found (None unless linearizable)."""
    purged: Mapping[str, int] = attrs.field(factory=dict)
    """Runs each ``purge_settled`` call (by id) deleted here in that linearization."""
    linearization: tuple[Operation, ...] | None = None
    """When linearizable, the order found (operations of unknown outcome that took no effect in it
    left out); else None."""

    @property
    def unplaced(self) -> tuple[Operation, ...]:
        """On a violation, the operations of ``minimal`` (or of the whole object when it was not
        shrunk) that the longest legal order found could not place; else ``()``."""
        if self.result != "violation":
            return ()
        ops = self.minimal if self.minimal is not None else self.history
        placed = {op.id for op, _ in self.explanation.order} if self.explanation else set()
        return tuple(op for op in ops if op.id not in placed)


@attrs.frozen
class RuleVerdict:
    """The verdict on one rule judged beside the objects (``HistoryVerdict.rules``).

    ``rule`` names it: ``"heartbeat_many is atomic"`` or ``"claim_next takes the oldest"``.
    ``judged`` counts the cases it searched (union objects, or pairs of a call and an object
    with an older run claimable in one state), ``skipped`` those it left out (a search budget,
    an object that was not linearizable). Each violation is a ``PartitionVerdict`` whose
    ``minimal`` holds the operations shown and whose ``explanation`` says why.
    """

    rule: str
    """The rule's name."""
    judged: int
    """Cases the rule judged."""
    skipped: int
    """Cases it left out (``reason`` of the summary line says why they can be)."""
    violations: tuple[PartitionVerdict, ...] = ()
    """The cases that broke the rule."""


@attrs.frozen
class RevisionCheck:
    """Whether the counts that span objects fit the history: the database's
    final revision and the answers of ``purge_settled``.

    Every row write (insert, update, delete) raises the database-wide
    revision by one, and the model counts them the same way. So once every
    object is linearizable, ``final - initial`` must equal the sum over
    objects of the row writes of *some* linearization of each, and each
    ``purge_settled`` answer the sum of the runs its parts deleted on every
    object in those same linearizations. ``found`` is the row-write sum of
    the linearizations the search happened to find; when any count differs,
    each object's achievable counts are enumerated (operations of unknown
    outcome, which may have written or not, make several achievable) and
    ``result`` says whether the recorded counts are one of their sums.
    ``result`` is ``"ok"``, ``"violation"`` (a write the history does not
    account for, one it claims that never happened, a purge count that does
    not add up) or ``"unchecked"`` (``reason`` says why: an object not
    linearizable, an excluded operation that may write, the enumeration's
    budget). ``final`` is None when only purge answers were checked (no
    final state was given).
    """

    result: Literal["ok", "violation", "unchecked"]
    initial: int
    final: int | None
    found: int | None
    reason: str | None = None


@attrs.frozen
class HistoryVerdict:
    """The verdict on a whole history: one ``PartitionVerdict`` per object.

    ``status`` is ``"violation"`` if any object is one, else ``"unchecked"``
    if any object could not be checked, else ``"linearizable"``; ``ok`` is
    True only for ``"linearizable"``. ``excluded`` lists the operations that
    were not checked, each with the reason (whole-database reads, methods this
    version does not know).
    """

    partitions: tuple[PartitionVerdict, ...]
    """One ``PartitionVerdict`` per independent object."""
    excluded: tuple[tuple[Operation, str], ...]
    """The operations not checked, each with the reason."""
    operations: int
    """How many operations the history held."""
    seconds: float
    """How long the whole check took."""
    revision: RevisionCheck | None = None
    """The check of the counts that span objects (the final revision, ``purge_settled``'s answers),
    or None when there was nothing to check."""
    rules: tuple[RuleVerdict, ...] = ()
    """The rules judged across objects (a ``heartbeat_many`` is atomic, ``claim_next`` takes the
    oldest), each with its violations."""

    @property
    def status(self) -> Verdict:
        """``"violation"`` if any object (or the revision check) is one, else ``"unchecked"`` if
        any could not be checked, else ``"linearizable"``."""
        revision = self.revision.result if self.revision is not None else None
        if revision == "violation" or any(p.result == "violation" for p in self.partitions):
            return "violation"
        if any(rule.violations for rule in self.rules):
            return "violation"
        if revision == "unchecked" or any(p.result == "unchecked" for p in self.partitions):
            return "unchecked"
        return "linearizable"

    @property
    def ok(self) -> bool:
        """True only when ``status`` is ``"linearizable"``."""
        return self.status == "linearizable"

    @property
    def violations(self) -> tuple[PartitionVerdict, ...]:
        """The objects whose verdict is a violation, then each violation of a rule."""
        found = tuple(p for p in self.partitions if p.result == "violation")
        return found + tuple(v for rule in self.rules for v in rule.violations)

    @property
    def unchecked(self) -> tuple[PartitionVerdict, ...]:
        """The objects that could not be checked."""
        return tuple(p for p in self.partitions if p.result == "unchecked")

    @property
    def checked_operations(self) -> int:
        """Operations in objects that were searched to a verdict."""
        return sum(len(p.history) for p in self.partitions if p.result != "unchecked")

    @property
    def explored(self) -> int:
        """The (state, placed set) pairs the search met, over every object."""
        return sum(p.explored for p in self.partitions)

    @property
    def search_seconds(self) -> float:
        """Time spent searching (shrinking and explaining violations left out)."""
        return sum(p.search_seconds for p in self.partitions)

    @property
    def operations_per_second(self) -> float:
        """Operations checked per second of search."""
        seconds = self.search_seconds
        return self.checked_operations / seconds if seconds > 0 else float("inf")

    @property
    def worst_explored(self) -> int:
        """The largest search (distinct pairs met) of any one object."""
        return max((p.explored for p in self.partitions), default=0)

    def summary(self) -> str:
        """A few lines: the verdict, counts, and each violation or unchecked object."""
        lines = [
            f"{self.status}: {self.operations} operations in {len(self.partitions)} objects, "
            f"{len(self.excluded)} excluded; searched in {self.search_seconds:.2f} s "
            f"({self.operations_per_second:,.0f} operations/s, largest search "
            f"{self.worst_explored} states), {self.seconds:.2f} s in all"
        ]
        for p in self.partitions:
            if p.result == "violation":
                size = len(p.minimal) if p.minimal is not None else len(p.history)
                lines.append(
                    f"  violation on {p.key} (runs {', '.join(p.runs)}): "
                    f"{len(p.history)} operations, minimal offending sub-history {size}"
                )
            elif p.result == "unchecked":
                lines.append(f"  unchecked {p.key}: {p.reason}")
        for rule in self.rules:
            lines.append(
                f"  rule {rule.rule}: {rule.judged} judged, {rule.skipped} left out, "
                f"{len(rule.violations)} violations"
            )
            for v in rule.violations:
                lines.append(f"    violation: {v.reason}")
        check = self.revision
        if check is not None:
            if check.result == "ok" and check.final is not None:
                counted = check.final - check.initial
                lines.append(f"  revision: {counted} row writes, as the history accounts for")
            elif check.result == "ok":
                lines.append("  counts: every purge_settled answer adds up")
            elif (
                check.result == "violation"
                and check.final is not None
                and not (check.reason or "").startswith("purge_settled")
            ):
                counted = check.final - check.initial
                lines.append(
                    f"  revision violation: the database counted {counted} row writes "
                    f"(revision {check.initial} to {check.final}); {check.reason}"
                )
            elif check.result == "violation":
                lines.append(f"  counts violation: {check.reason}")
            else:
                lines.append(f"  revision unchecked: {check.reason}")
        return "\n".join(lines)


@attrs.frozen
class _Search:
    result: Verdict
    reason: str | None
    explored: int
    steps: int
    order: tuple[int, ...]
    #: Row writes (revisions) of the linearization found, when one was.
    revisions: int | None = None
    #: Runs each ``purge_settled`` part deleted in it (see ``_tally_slots``).
    tally: tuple[int, ...] = ()


def _may_write(op: Operation) -> bool:
    return op.method not in _READS


def _search(
    ops: Sequence[Operation],
    start: Node,
    spec: Spec,
    *,
    max_steps: int,
    track: bool = False,
    collect: set[tuple[int, tuple[int, ...]]] | None = None,
    count_revisions: bool = True,
    max_revisions: int | None = None,
) -> _Search:
    """Wing-Gong with memoization over ``ops`` (one object) from ``start``.

    ``order`` is the linearization found, or with ``track`` the deepest
    partial one on a violation. With ``collect`` the search does not stop at
    the first linearization: it adds the row-write count (revisions) and the
    tally of every linearization it finds to ``collect`` and goes on until it
    has seen them all (both are then part of the memoized state, and an
    operation of unknown outcome may be placed whenever the model commits
    it, even without changing anything but the counter); its result is
    ``"linearizable"`` when it found any. Since both only grow along an
    order, the collecting search prunes the orders no sum can use: a
    ``purge_settled`` part deleting more runs than its call answered, and
    (given ``max_revisions``) more row writes than that. Without
    ``count_revisions`` it collects 0 for every count (the revision is then
    left out of the memoized state).
    """
    n = len(ops)
    definite = [op.definite for op in ops]
    slots = {i: k for k, i in enumerate(_tally_slots(ops))}
    # The most each tallied part may delete in a collected order: its call's answer.
    caps = {i: answer for i in slots if (answer := _answer(ops[i])) is not None}
    # The tally kept sparse: (slot, runs deleted) for the parts placed that deleted
    # any, in slot order. Most parts delete nothing; a dense tuple of every part
    # rebuilt and hashed at each step made the collecting search quadratic in the
    # number of purge calls.
    tally: tuple[tuple[int, int], ...] = ()

    def dense(sparse: tuple[tuple[int, int], ...]) -> tuple[int, ...]:
        counts = [0] * len(slots)
        for slot, purged in sparse:
            counts[slot] = purged
        return tuple(counts)

    position = [0] * n
    counts = [0, 0]
    for i in range(n):
        kind = 0 if definite[i] else 1
        position[i] = counts[kind]
        counts[kind] += 1
    remaining = counts[0]
    events: list[tuple[int, int, int]] = []
    for i, op in enumerate(ops):
        events.append((op.invoked_ns, 0, 2 * i))
        if definite[i]:
            returned = op.returned_ns
            assert returned is not None
            events.append((returned, 1, 2 * i + 1))
    events.sort()
    head = 2 * n
    nxt = [-1] * (2 * n + 1)
    prv = [-1] * (2 * n + 1)
    last = head
    for _, _, entry_id in events:
        nxt[last] = entry_id
        prv[entry_id] = last
        last = entry_id

    # An operation of unknown outcome that changed nothing from some state changes
    # nothing from any state that holds its run's same row, lease, facts and
    # acknowledgement (``local_run``): it is not tried again there. Without this a
    # call left pending early (a claim_next part on a run long settled) is applied
    # again after every placement for the rest of the object's history.
    local = [None if definite[i] else local_run(op) for i, op in enumerate(ops)]
    inert: dict[int, tuple[Any, ...]] = {}
    cache: set[tuple[Any, ...]] = set()
    # Placements as a linked list of frames (op, node before it, frame below,
    # tally before it), so the deepest partial order is kept in O(1).
    top: tuple[int, Node, Any, tuple[tuple[int, int], ...]] | None = None
    depth = 0
    best: tuple[int, Node, Any, tuple[tuple[int, int], ...]] | None = None
    best_depth = 0
    node = start
    placed_definite = 0
    placed_unknown = 0
    steps = 0
    entry = nxt[head]
    base_revision = start.state.revision
    while True:
        if remaining == 0:
            revisions = node.state.revision - base_revision if count_revisions else 0
            if collect is None:
                found = _order(top)
                return _Search(
                    "linearizable", None, len(cache), steps, found, revisions, dense(tally)
                )
            collect.add((revisions, dense(tally)))
            entry = -1  # recorded: backtrack as if this order had failed
        if entry != -1 and not entry & 1:
            i = entry >> 1
            run = local[i]
            if run is not None:
                view = run_view(node.state, run)
                seen = inert.get(i)
                if seen is not None and all(a is b for a, b in zip(seen, view, strict=True)):
                    entry = nxt[entry]
                    continue
            steps += 1
            if steps > max_steps:
                return _Search(
                    "unchecked",
                    f"search budget exhausted ({max_steps} model steps)",
                    len(cache),
                    steps,
                    (),
                )
            op = ops[i]
            after, result = spec.apply(node, op)
            if definite[i]:
                if result[0] == "unreplayable":
                    return _Search(
                        "unchecked", f"{op.id} {op.method}: {result[1]}", len(cache), steps, ()
                    )
                agrees = matches(op, result)
            elif collect is not None:
                agrees = after is not node and (count_revisions or after.key != node.key)
            else:
                agrees = after is not node and after.key != node.key
            if run is not None and (after is node or (collect is None and not agrees)):
                inert[i] = run_view(node.state, run)
            if agrees and collect is not None:
                over = i in caps and int(result[1]) > caps[i]
                beyond = (
                    max_revisions is not None
                    and after.state.revision - base_revision > max_revisions
                )
                agrees = not (over or beyond)
            if agrees:
                if definite[i]:
                    new_definite = placed_definite | (1 << position[i])
                    new_unknown = placed_unknown
                else:
                    new_definite = placed_definite
                    new_unknown = placed_unknown | (1 << position[i])
                new_tally = tally
                slot = slots.get(i)
                if slot is not None and int(result[1]):
                    new_tally = tuple(sorted((*tally, (slot, int(result[1])))))
                low = ((new_definite + 1) & ~new_definite).bit_length() - 1
                key: tuple[Any, ...] = (after.key, low, new_definite >> low, new_unknown)
                if collect is not None:
                    counted = after.state.revision if count_revisions else 0
                    key = (*key, counted, new_tally)
                before = len(cache)
                cache.add(key)
                if len(cache) != before:
                    top = (i, node, top, tally)
                    depth += 1
                    node = after
                    tally = new_tally
                    placed_definite = new_definite
                    placed_unknown = new_unknown
                    # Lift the call (and the return) out of the list.
                    c = 2 * i
                    p, q = prv[c], nxt[c]
                    nxt[p] = q
                    if q != -1:
                        prv[q] = p
                    if definite[i]:
                        r = c + 1
                        p, q = prv[r], nxt[r]
                        nxt[p] = q
                        if q != -1:
                            prv[q] = p
                        remaining -= 1
                    if track and depth > best_depth:
                        best, best_depth = top, depth
                    entry = nxt[head]
                    continue
            entry = nxt[entry]
            continue
        # An operation's return came before it was placed: undo the last placement.
        if top is None:
            if collect:
                return _Search("linearizable", None, len(cache), steps, ())
            return _Search("violation", None, len(cache), steps, _order(best))
        i, node, top, tally = top
        depth -= 1
        c = 2 * i
        if definite[i]:
            r = c + 1
            p, q = prv[r], nxt[r]
            nxt[p] = r
            if q != -1:
                prv[q] = r
            placed_definite &= ~(1 << position[i])
            remaining += 1
        else:
            placed_unknown &= ~(1 << position[i])
        p, q = prv[c], nxt[c]
        nxt[p] = c
        if q != -1:
            prv[q] = c
        entry = nxt[c]


def _tally_slots(ops: Sequence[Operation]) -> list[int]:
    """The positions of the definite ``purge_settled`` parts, whose deletion
    counts a linearization tallies (to sum them per call afterwards)."""
    return [i for i, op in enumerate(ops) if op.method == PURGE_PART and op.definite]


def _answer(op: Operation) -> int | None:
    """What a tallied ``purge_settled`` part's call answered (None: no count)."""
    value = op.value
    return value if type(value) is int else None


def _order(frame: tuple[int, Node, Any, Any] | None) -> tuple[int, ...]:
    order = []
    while frame is not None:
        order.append(frame[0])
        frame = frame[2]
    return tuple(reversed(order))


def _prepare(ops: Iterable[Operation]) -> list[Operation]:
    """Validate intervals and drop unknown reads (they can never constrain)."""
    kept = []
    for op in ops:
        if op.definite and (op.returned_ns is None or op.returned_ns < op.invoked_ns):
            raise ValueError(f"operation {op.id} returns before it is invoked")
        if op.unknown and not _may_write(op):
            continue
        kept.append(op)
    return kept


def _call_of(op: Operation) -> tuple[str, str | None, int]:
    """The call an operation (or a part of a multi-run call) belongs to: one client
    thread invokes one call at a time."""
    return (op.process, op.thread, op.invoked_ns)


def search_partition(
    ops: Sequence[Operation],
    start: Node,
    *,
    spec: Spec | None = None,
    max_unknown: int = MAX_UNKNOWN,
    max_steps: int = MAX_STEPS,
) -> _Search:
    """One object's verdict (no shrinking)."""
    prepared = _prepare(ops)
    # Calls, not parts: the parts of one call of unknown outcome on this object (a
    # claim_next that may have taken any of a lineage's rounds) are one call that
    # took effect or not.
    unknown = len({_call_of(op) for op in prepared if op.unknown})
    if unknown > max_unknown:
        return _Search(
            "unchecked",
            f"too many operations of unknown outcome ({unknown} > {max_unknown})",
            0,
            0,
            (),
        )
    return _search(prepared, start, spec or Spec(), max_steps=max_steps)


def _unseen_drops(whole: Sequence[Operation], kept: Sequence[Operation]) -> bool:
    """Whether no write of ``whole`` left out of ``kept`` can have been observed by
    an operation of ``kept``: each was invoked after every kept operation of known
    outcome returned. (A kept operation of unknown outcome is checked by nothing,
    and any linearization of ``whole`` still orders the kept definite ones before
    every such write.)"""
    ids = {op.id for op in kept}
    last = max(
        (op.returned_ns for op in kept if op.definite and op.returned_ns is not None),
        default=None,
    )
    if last is None:
        return True
    return all(op.invoked_ns > last for op in whole if op.id not in ids and _may_write(op))


def shrink(
    ops: Sequence[Operation],
    start: Node,
    *,
    culprits: Sequence[tuple[Operation, Result, Sequence[Operation]]] = (),
    max_steps: int = MAX_STEPS,
    max_checks: int = MAX_SHRINK_CHECKS,
    max_seconds: float = MAX_SHRINK_SECONDS,
    judge: Callable[[Sequence[Operation]], Verdict | None] | None = None,
) -> tuple[Operation, ...]:
    """A small sub-history of ``ops`` (a violation) that is still a violation.

    Dropping operations freely tends to drop the ones that made the state the
    offending operation needed (a ``create``, say), leaving a trivial
    violation about a run that does not exist. So the shrink keeps a
    *culprit*: an operation the search could not place after its deepest
    legal order, with what the model answered for it there (``culprits``
    holds each candidate, that answer, and the order's operations, its
    support). A sub-history is kept only when it still holds the culprit, is
    a violation, is linearizable without the culprit, and its own deepest
    legal order ends where the model gives the culprit that same answer: the
    same disagreement, with less around it. The shortest such prefix (by
    invocation) is taken first, then chunks and single operations are
    dropped. With no culprit that works, a sub-history is kept only when it
    is a violation and the writes it drops could not have been seen by what it
    keeps: each dropped write was invoked after every kept operation of known
    outcome had returned (reads, which change nothing, may be dropped
    anywhere). Such a sub-history is linearizable whenever the whole is, so it
    cannot be a violation the recording did not hold: dropping the ``create``
    that a kept read observed, say, is never taken. Past ``max_checks``
    searches or ``max_seconds`` the smallest sub-history found so far is
    returned (still a violation, maybe not minimal). ``judge``, when given,
    decides each sub-history instead of a search from ``start`` (None:
    undecided).
    """
    spec = Spec()
    budget = [max_checks]
    deadline = time.perf_counter() + max_seconds

    def verdict(candidate: Sequence[Operation]) -> Verdict | None:
        if budget[0] <= 0 or time.perf_counter() > deadline:
            return None
        budget[0] -= 1
        if judge is not None:
            return judge(candidate)
        return _search(candidate, start, spec, max_steps=max_steps).result

    def reduce(
        current: list[Operation], culprit: Operation | None, answer: Result | None = None
    ) -> tuple[Operation, ...]:
        whole = list(current)

        def accept(candidate: list[Operation]) -> bool:
            if not candidate or (culprit is not None and culprit not in candidate):
                return False
            if culprit is None and not _unseen_drops(whole, candidate):
                return False
            if verdict(candidate) != "violation":
                return False
            if culprit is None:
                return True
            if verdict([o for o in candidate if o is not culprit]) != "linearizable":
                return False
            if budget[0] <= 0:
                return False
            budget[0] -= 1
            blocked = explain(candidate, start, spec).blocked
            return any(op is culprit and result == answer for op, result in blocked)

        low = 1 if culprit is None else current.index(culprit) + 1
        high = len(current)
        while low < high:
            middle = (low + high) // 2
            if accept(current[:middle]):
                high = middle
            else:
                low = middle + 1
        if high < len(current) and accept(current[:high]):
            current = current[:high]
        chunk = max(1, len(current) // 2)
        while budget[0] > 0:
            changed = False
            index = 0
            while index < len(current):
                candidate = current[:index] + current[index + chunk :]
                if accept(candidate):
                    current = candidate
                    changed = True
                else:
                    index += chunk
            if chunk > 1:
                chunk //= 2
            elif not changed:
                break
        return tuple(current)

    prepared = _prepare(ops)
    order = {op.id: index for index, op in enumerate(prepared)}
    for culprit, answer, support in culprits:
        chosen = {op.id for op in support} | {culprit.id}
        candidate = [op for op in prepared if op.id in chosen]
        if culprit.id in order and verdict(candidate) == "violation":
            return reduce(candidate, culprit, answer)
    return reduce(prepared, None)


def explain(
    ops: Sequence[Operation], start: Node, spec: Spec | None = None, *, max_steps: int = MAX_STEPS
) -> Explanation:
    """The longest legal order the search finds over ``ops`` (within ``max_steps`` model
    applications: past them, the empty order) and, after it, what the model answers for each
    operation that could go next."""
    spec = spec or Spec()
    prepared = _prepare(ops)
    found = _search(prepared, start, spec, max_steps=max_steps, track=True)
    node = start
    order = []
    for i in found.order:
        node, result = spec.apply(node, prepared[i])
        order.append((prepared[i], result))
    placed = set(found.order)
    rest = [op for i, op in enumerate(prepared) if i not in placed]
    deadline = min((op.returned_ns for op in rest if op.definite and op.returned_ns), default=None)
    blocked = []
    for op in rest:
        if deadline is None or op.invoked_ns <= deadline:
            blocked.append((op, spec.apply(node, op)[1]))
    return Explanation(tuple(order), tuple(blocked))


def check_partition(
    partition: Partition,
    initial: StoreState | None = None,
    *,
    max_unknown: int = MAX_UNKNOWN,
    max_steps: int = MAX_STEPS,
    shrink_violations: bool = True,
    start: Node | None = None,
) -> PartitionVerdict:
    """The verdict on one object, searched from ``start`` (by default the object's part of
    ``initial``)."""
    started = time.perf_counter()
    if start is None:
        start = make_node(initial_state(initial, partition.runs))
    found = search_partition(
        partition.operations, start, max_unknown=max_unknown, max_steps=max_steps
    )
    searched = time.perf_counter()
    unknown = sum(1 for op in partition.operations if op.unknown)
    minimal = explanation = None
    if found.result == "violation" and shrink_violations:
        whole = explain(partition.operations, start)
        support = [op for op, _ in whole.order]
        culprits = [(op, result, support) for op, result in whole.blocked if op.definite]
        minimal = shrink(partition.operations, start, culprits=culprits, max_steps=max_steps)
        explanation = explain(minimal, start)
    return PartitionVerdict(
        key=partition.key,
        runs=partition.runs,
        result=found.result,
        reason=found.reason,
        history=partition.operations,
        unknown=unknown,
        explored=found.explored,
        steps=found.steps,
        minimal=minimal,
        explanation=explanation,
        search_seconds=searched - started,
        shrink_seconds=time.perf_counter() - searched,
        revisions=found.revisions,
        purged=_purged(partition.operations, found.tally),
        linearization=_linearization(partition.operations, found),
    )


def _linearization(ops: Sequence[Operation], found: _Search) -> tuple[Operation, ...] | None:
    if found.result != "linearizable":
        return None
    prepared = _prepare(ops)
    return tuple(prepared[i] for i in found.order)


def _purged(ops: Sequence[Operation], tally: tuple[int, ...]) -> dict[str, int]:
    """``tally`` (aligned with the definite purge parts of ``ops`` as
    prepared) by the id of the ``purge_settled`` call each part belongs to."""
    prepared = _prepare(ops)
    calls = [str(prepared[i].args[1]) for i in _tally_slots(prepared)]
    return dict(zip(calls, tally, strict=False)) if tally else {}


def check_history(
    operations: Iterable[Operation],
    *,
    initial: StoreState | None = None,
    final: StoreState | None = None,
    max_unknown: int = MAX_UNKNOWN,
    max_steps: int = MAX_STEPS,
    shrink: bool = True,
    max_shrunk: int | None = None,
) -> HistoryVerdict:
    """Check a recorded history for linearizability against the reference model.

    ``operations``: the records (``load_history(paths)``,
    ``HistoryRecorder.operations()``, or built by hand with ``operation``).
    ``initial``: the store's ``state()`` when recording began (default: an
    empty store). ``final``: the store's ``state()`` read after every client
    stopped, if you have it: each run's final rows, lease, facts and
    acknowledgement are then checked as a read that follows every operation,
    and the final database revision as ``verdict.revision`` (a
    ``RevisionCheck``). ``max_unknown`` and ``max_steps`` bound each object's
    search (past them the object is ``unchecked``); ``shrink`` shrinks each
    violation to a minimal offending sub-history (only the first
    ``max_shrunk`` of them, when given). Returns a ``HistoryVerdict``; it
    never raises on a violation.
    """
    started = time.perf_counter()
    history = list(operations)
    if final is not None:
        history += final_state_operations(history, final)
    partitions, excluded = partition_operations(history, initial)
    verdicts: list[PartitionVerdict] = []
    for partition in partitions:
        shrunk = sum(1 for v in verdicts if v.minimal is not None)
        verdicts.append(
            check_partition(
                partition,
                initial,
                max_unknown=max_unknown,
                max_steps=max_steps,
                shrink_violations=shrink and (max_shrunk is None or shrunk < max_shrunk),
            )
        )
    revision = None
    purges = any(
        p.method == PURGE_PART and p.definite for part in partitions for p in part.operations
    )
    if final is not None or purges:
        revision = check_counts(partitions, verdicts, excluded, initial, final, max_steps=max_steps)
    rules = judge_rules(
        history,
        partitions,
        verdicts,
        initial,
        excluded=excluded,
        max_unknown=max_unknown,
        max_steps=max_steps,
        shrink=shrink,
        max_shrunk=None
        if max_shrunk is None
        else max(0, max_shrunk - sum(1 for v in verdicts if v.minimal is not None)),
    )
    return HistoryVerdict(
        partitions=tuple(verdicts),
        excluded=tuple(excluded),
        operations=sum(len(p.operations) for p in partitions),
        seconds=time.perf_counter() - started,
        revision=revision,
        rules=rules,
    )


#: Model steps the union objects of one history may spend together: twice the
#: objects' own searches, at least ``MIN_RULE_STEPS`` and at most ``MAX_RULE_STEPS``.
MAX_RULE_STEPS: Final = 1_000_000
MIN_RULE_STEPS: Final = 60_000

#: The rules ``judge_rules`` judges, by name.
BATCH_RULE: Final = "heartbeat_many is atomic"
CLAIM_RULE: Final = "claim_next takes the oldest"


def judge_rules(
    history: Sequence[Operation],
    partitions: Sequence[Partition],
    verdicts: Sequence[PartitionVerdict],
    initial: StoreState | None,
    *,
    excluded: Sequence[tuple[Operation, str]] = (),
    max_unknown: int = MAX_UNKNOWN,
    max_steps: int = MAX_STEPS,
    max_rule_steps: int = MAX_RULE_STEPS,
    shrink: bool = True,
    max_shrunk: int | None = None,
) -> tuple[RuleVerdict, ...]:
    """The rules that span objects (``runstore.stateful._histories._rules``), judged over
    ``history`` whose ``partitions`` got ``verdicts`` (and whose ``excluded`` operations were
    left out of them), from ``initial``; ``max_unknown``, ``max_steps`` and ``shrink`` as
    ``check_history`` takes them for each union object (``max_shrunk``: how many of their
    violations may be shrunk), and ``max_rule_steps`` the most model steps all union objects
    may spend together (twice the objects' own searches, at least ``MIN_RULE_STEPS``;
    smallest first, the rest are left out)."""
    orders = {v.key: v.linearization for v in verdicts if v.linearization is not None}
    unions, left_out = batch_objects(history, partitions, orders, initial)
    judged = 0
    batch_violations: list[PartitionVerdict] = []
    # Smallest first, within one budget of model steps for them all: twice what
    # the objects' own searches took (at least MIN_RULE_STEPS), at most max_rule_steps.
    remaining = [min(max_rule_steps, max(MIN_RULE_STEPS, 2 * sum(v.steps for v in verdicts)))]
    spec = Spec()
    for union in sorted(unions, key=lambda u: len(u.partition.operations) * len(u.starts)):
        shrinkable = max_shrunk is None or len(batch_violations) < max_shrunk
        shrinking = shrink and shrinkable
        verdict = _judge_union(
            union, initial, spec, remaining, max_unknown=max_unknown, shrinking=shrinking
        )
        if verdict is None:
            left_out += 1
            continue
        if verdict.result == "violation":
            reads = [s.id for s in union.snapshots]
            shown = ", ".join(reads[:3]) + (f" and {len(reads) - 3} more" if len(reads) > 3 else "")
            reason = (
                f"{union.batch.id} heartbeat_many of {', '.join(verdict.runs)}: the snapshot "
                f"reads {shown} cannot all show it whole or not at all"
            )
            batch_violations.append(attrs.evolve(verdict, reason=reason))
        if verdict.result == "unchecked":
            left_out += 1
        else:
            judged += 1
    findings, counts = oldest_claim_findings(
        history, partitions, orders, initial, excluded=excluded
    )
    claim_violations = [_claim_verdict(finding) for finding in findings]
    return (
        RuleVerdict(BATCH_RULE, judged, left_out, tuple(batch_violations)),
        RuleVerdict(CLAIM_RULE, counts.judged, counts.skipped, tuple(claim_violations)),
    )


#: Model steps one union object's search may take (past it the union is left out).
MAX_UNION_STEPS: Final = 200_000
#: Model steps of a union's first, brief search (most unions with a legal order show it).
FIRST_UNION_STEPS: Final = 20_000
#: Model steps one object's enumeration of the orders of a batch and its snapshots may take.
MAX_CROSS_STEPS: Final = 50_000
#: Model steps a sub-history of a union may take to be decided while it is shrunk, when its
#: objects one by one do not already prove it a violation.
MAX_SHRINK_UNION_STEPS: Final = 5_000
#: Model steps the shrinking of one union's violation may take in all.
MAX_SHRINK_UNION_TOTAL: Final = 200_000
#: The most calls (the batch and its snapshots) whose orders are matched across objects.
MAX_CROSSING: Final = 6


def cross_orders(
    ops: Sequence[Operation],
    crossing: Mapping[str, int],
    start: Node,
    spec: Spec,
    budget: list[int],
) -> set[tuple[int, ...]] | None:
    """Every order in which the operations of ``crossing`` (ids, each with the index of the call
    it is part of) can come in a legal order of ``ops`` (one object's) from ``start``, as tuples
    of those indices; None once ``budget[0]`` model applications are spent (it is decreased)
    or when the model cannot replay an operation.

    Any legal order of a union of objects, restricted to one of them, is a legal order of that
    object in which the batch and each snapshot come in the union's order. So when no order of
    the calls fits every object at once (``fits_every_object``), the union is a violation: a
    proof in the objects' own steps, where a search of the union meets every interleaving of
    their concurrent calls. The converse does not hold (real time orders the objects' own
    calls among themselves too), so a union this does not prove is searched."""
    prepared = sorted(_prepare(ops), key=lambda op: (op.invoked_ns, op.id))
    n = len(prepared)
    definite = [op.definite for op in prepared]
    tags = [crossing.get(op.id, -1) for op in prepared]
    every = 0
    for i in range(n):
        if definite[i]:
            every |= 1 << i
    returns = sorted((op.returned_ns or 0, i) for i, op in enumerate(prepared) if definite[i])
    found: set[tuple[int, ...]] = set()
    seen: set[tuple[Any, int, tuple[int, ...]]] = set()
    stack: list[tuple[Node, int, tuple[int, ...]]] = [(start, 0, ())]
    while stack:
        node, placed, order = stack.pop()
        if placed & every == every:
            found.add(order)
            continue
        deadline = next(end for end, i in returns if not placed >> i & 1)
        for i in range(n):
            if placed >> i & 1:
                continue
            op = prepared[i]
            if op.invoked_ns > deadline:
                break
            budget[0] -= 1
            if budget[0] < 0:
                return None
            after, result = spec.apply(node, op)
            if definite[i]:
                if result[0] == "unreplayable":
                    return None
                if not matches(op, result):
                    continue
            elif after is node or after.key == node.key:
                continue
            grown = (*order, tags[i]) if tags[i] >= 0 else order
            key = (after.key, placed | 1 << i, grown)
            if key in seen:
                continue
            seen.add(key)
            stack.append((after, placed | 1 << i, grown))
    return found


def fits_every_object(
    calls: int, objects: Sequence[tuple[frozenset[int], set[tuple[int, ...]]]]
) -> bool:
    """Whether one order of ``calls`` calls (indices ``0 .. calls-1``) is, restricted to each
    object's calls (the first of each pair), one of its orders (the second)."""
    for order in itertools.permutations(range(calls)):
        if all(tuple(c for c in order if c in mine) in fits for mine, fits in objects):
            return True
    return False


def _proved_by_pieces(
    pieces: Sequence[tuple[UnionPiece, Sequence[Operation], Node]],
    calls: int,
    spec: Spec,
    budget: list[int],
) -> bool | None:
    """Whether the union of ``pieces`` (each with the operations to take and its start) is a
    violation by ``cross_orders``: True when no order of the ``calls`` fits every object, False
    when one does (the union may still be a violation), None past ``budget``."""
    objects = []
    for piece, ops, start in pieces:
        mine = {op.id for op in ops}
        crossing = {i: c for i, c in piece.crossing.items() if i in mine}
        fits = cross_orders(ops, crossing, start, spec, budget)
        if fits is None:
            return None
        if not fits:
            return True  # this object alone cannot place the batch and its reads
        objects.append((frozenset(crossing.values()), fits))
    return not fits_every_object(calls, objects)


def _judge_union(
    union: BatchObject,
    initial: StoreState | None,
    spec: Spec,
    remaining: list[int],
    *,
    max_unknown: int,
    shrinking: bool,
) -> PartitionVerdict | None:
    """The verdict on one union object of the batch rule, or None when it is left out (the
    budget ``remaining``, which it decreases, spent).

    The union is a violation only if it is one from each state it may start in. Its objects
    one by one (``cross_orders``) prove most violations in their own steps; a union they do not
    prove is searched whole, within ``MAX_UNION_STEPS``. A violation is then shown from the
    objects' first calls (so that it checks again on its own), proved the same way, and shrunk
    with sub-histories decided the same way (or by a search of ``MAX_SHRINK_UNION_STEPS``)."""
    started = time.perf_counter()
    calls = 1 + len(union.snapshots)
    fast = bool(union.pieces) and calls <= MAX_CROSSING
    spent = 0
    verdict: PartitionVerdict | None = None
    for index, start in enumerate(union.starts):
        if remaining[0] <= 0:
            return None
        # A legal order, when there is one, is most often found in a few steps.
        verdict = check_partition(
            union.partition,
            initial,
            max_unknown=max_unknown,
            max_steps=min(FIRST_UNION_STEPS, remaining[0]),
            shrink_violations=False,
            start=start,
        )
        remaining[0] -= verdict.steps
        spent += verdict.steps
        if verdict.result == "linearizable":
            return verdict
        if verdict.result == "violation":
            continue
        if fast:
            combination = _combination(union.pieces, index)
            budget = [min(remaining[0], MAX_CROSS_STEPS)]
            before = budget[0]
            nodes = zip(union.pieces, combination, strict=True)
            pieces = [(p, p.window, node) for p, node in nodes]
            found = _proved_by_pieces(pieces, calls, spec, budget)
            remaining[0] -= before - max(0, budget[0])
            spent += before - max(0, budget[0])
            if found:
                verdict = None
                continue
        verdict = check_partition(
            union.partition,
            initial,
            max_unknown=max_unknown,
            max_steps=min(MAX_UNION_STEPS, remaining[0]),
            shrink_violations=False,
            start=start,
        )
        remaining[0] -= verdict.steps
        spent += verdict.steps
        if verdict.result != "violation":
            return verdict
    whole = union.whole
    origin = make_node(initial_state(initial, whole.runs))
    firsts = [make_node(initial_state(initial, p.runs)) for p in union.pieces]
    allowance = [MAX_SHRINK_UNION_TOTAL]

    def judge(candidate: Sequence[Operation]) -> Verdict | None:
        if allowance[0] <= 0:
            return None
        if fast:
            kept = {op.id for op in candidate}
            pieces = []
            for piece, first in zip(union.pieces, firsts, strict=True):
                ops = [
                    op
                    for op in piece.whole
                    if op.id in kept
                    or (op.id in piece.crossing and _union_part(piece, op.id) in kept)
                ]
                pieces.append((piece, ops, first))
            budget = [min(allowance[0], MAX_CROSS_STEPS)]
            before = budget[0]
            found = _proved_by_pieces(pieces, calls, spec, budget)
            allowance[0] -= before - max(0, budget[0])
            if found:
                return "violation"
        steps = min(allowance[0], MAX_SHRINK_UNION_STEPS)
        searched = _search(_prepare(candidate), origin, spec, max_steps=steps)
        allowance[0] -= searched.steps
        return None if searched.result == "unchecked" else searched.result

    batch_id = union.batch.id
    split = SPLITTERS["heartbeat_many"]

    def judge_shrunk(candidate: Sequence[Operation]) -> Verdict | None:
        # The same disagreement, not any: the sub-history must break the rule while
        # each object passes alone, with the batch in parts (one heartbeat per run,
        # each at its own instant) and each snapshot its read of the object, as the
        # objects' own checks pass them: so it keeps the calls the snapshots' answers
        # come from, and is judged by the rule again when read back.
        batch = next((op for op in candidate if op.id == batch_id), None)
        if batch is None or judge(candidate) != "violation":
            return None
        parts = split(batch)
        if isinstance(parts, str):
            return None
        kept = {op.id for op in candidate}
        for piece, first in zip(union.pieces, firsts, strict=True):
            alone = [
                op
                for op in piece.whole
                if (op.id in kept and op.id not in piece.crossing)
                or (
                    op.id in piece.crossing
                    and piece.crossing[op.id] > 0
                    and _union_part(piece, op.id) in kept
                )
            ]
            alone += [part for part in parts.parts if part.args and part.args[0] in piece.runs]
            alone.sort(key=lambda o: (o.invoked_ns, o.id))
            if allowance[0] <= 0:
                return None
            steps = min(allowance[0], MAX_SHRINK_UNION_STEPS)
            searched = _search(_prepare(alone), first, spec, max_steps=steps)
            allowance[0] -= searched.steps
            if searched.result != "linearizable":
                return None
        return "violation"

    entire = judge(whole.operations)
    if entire != "violation":
        if verdict is None:
            # Proved from every start state, but not from the objects' beginnings within
            # the budget: shown as the window, unshrunk.
            return PartitionVerdict(
                key=union.partition.key,
                runs=union.partition.runs,
                result="violation",
                reason=None,
                history=union.partition.operations,
                unknown=sum(1 for op in union.partition.operations if op.unknown),
                explored=0,
                steps=spent,
                search_seconds=time.perf_counter() - started,
            )
        return verdict
    searched = time.perf_counter()
    minimal = None
    if shrinking and fast:
        minimal = shrink(whole.operations, origin, judge=judge_shrunk)
        if judge_shrunk(minimal) != "violation":
            minimal = None  # no sub-history judged so within the budget: shown whole
    return PartitionVerdict(
        key=whole.key,
        runs=whole.runs,
        result="violation",
        reason=None,
        history=whole.operations,
        unknown=sum(1 for op in whole.operations if op.unknown),
        explored=0,
        steps=spent,
        minimal=minimal,
        explanation=None
        if minimal is None
        else explain(minimal, origin, spec, max_steps=MAX_UNION_STEPS),
        search_seconds=searched - started,
        shrink_seconds=time.perf_counter() - searched,
    )


def _union_part(piece: UnionPiece, part_id: str) -> str | None:
    """The id of the union's own part whose part on ``piece`` is ``part_id``."""
    for union_id, mine in piece.parts.items():
        if mine == part_id:
            return union_id
    return None


def _combination(pieces: Sequence[UnionPiece], index: int) -> tuple[Node, ...]:
    """The ``index``-th combination of the pieces' start states, in the order of
    ``itertools.product`` (the order of ``BatchObject.starts``)."""
    return tuple(itertools.product(*(p.starts for p in pieces)))[index]


def _claim_verdict(finding: ClaimFinding) -> PartitionVerdict:
    """A ``claim_next`` that passed over an older run, as a verdict: the object's writes before
    the call in one legal order, and the call, which cannot go after them."""
    call = finding.call
    ops = (*(op for op, _ in finding.support), call)
    if isinstance(call.value, RunRow):
        took = [call.value.run_id]
    elif isinstance(call.value, list):  # claim_next_many's runs
        took = [row.run_id for row in call.value if isinstance(row, RunRow)]
    else:
        took = []
    taken = ", ".join(took) or "?"
    reason = (
        f"{call.id} {call.method} took {taken} while the older {finding.older} was claimable "
        "throughout the call, with no concurrent write on it"
    )
    return PartitionVerdict(
        key=f"{call.method} {call.id}",
        runs=tuple(sorted({*finding.partition.runs, *took})),
        result="violation",
        reason=reason,
        history=ops,
        unknown=0,
        explored=0,
        steps=0,
        minimal=ops,
        explanation=Explanation(finding.support, ((call, finding.answer),)),
    )


#: Achievable revision totals kept while summing over objects, before giving up.
MAX_REVISION_SUMS: Final = 100_000


def check_counts(
    partitions: Sequence[Partition],
    verdicts: Sequence[PartitionVerdict],
    excluded: Sequence[tuple[Operation, str]],
    initial: StoreState | None,
    final: StoreState | None,
    *,
    max_steps: int = MAX_STEPS,
) -> RevisionCheck:
    """The ``RevisionCheck`` of a history whose objects were judged (see there)."""
    first = initial.revision if initial is not None else 0
    last = final.revision if final is not None else None
    calls = sorted(
        {
            (str(op.args[1]), op.value)
            for partition in partitions
            for op in partition.operations
            if op.method == PURGE_PART and op.definite
        }
    )
    answers = tuple(int(answer) for _, answer in calls)
    index = {call: k for k, (call, _) in enumerate(calls)}

    def unchecked(reason: str, found: int | None = None) -> RevisionCheck:
        return RevisionCheck("unchecked", first, last, found, reason)

    if any(v.result != "linearizable" for v in verdicts):
        return unchecked("not every object is linearizable")
    writers = [
        op
        for op, _ in excluded
        if op.method not in EXCLUDED_READS and not (op.status == "error" and op.definite)
    ]
    if writers and last is not None:
        return unchecked(
            f"{len(writers)} excluded operations may have written ({writers[0].method})"
        )
    counted = last - first if last is not None else 0
    found = sum(v.revisions or 0 for v in verdicts) if last is not None else 0
    tallies = [0] * len(calls)
    for verdict in verdicts:
        for call, purged in verdict.purged.items():
            tallies[index[call]] += purged
    if found == counted and tuple(tallies) == answers:
        return RevisionCheck("ok", first, last, found if last is not None else None)
    # The linearizations found disagree: enumerate what each object could count.
    spec = Spec()

    def slots_of(partition: Partition) -> tuple[list[Operation], list[int]]:
        prepared = _prepare(partition.operations)
        return prepared, [index[str(prepared[i].args[1])] for i in _tally_slots(prepared)]

    def enumerated(partition: Partition) -> _Counts | RevisionCheck:
        """Each object's achievable (revisions, deletions per call it has a part of), pruned
        to what a sum can use: every count is at least 0, so no object's share of a call
        exceeds its answer nor its row writes the counted total."""
        start = make_node(initial_state(initial, partition.runs))
        prepared, slots = slots_of(partition)
        options: set[tuple[int, tuple[int, ...]]] = set()
        search = _search(
            prepared,
            start,
            spec,
            max_steps=max_steps,
            collect=options,
            count_revisions=last is not None,
            max_revisions=counted if last is not None else None,
        )
        if search.result == "unchecked":
            return unchecked(f"enumerating {partition.key}'s counts: {search.reason}", found)
        mine = tuple(sorted(set(slots)))
        where = {call: j for j, call in enumerate(mine)}
        widened = set()
        for revisions, tally in options:
            vector = [0] * len(mine)
            for slot, purged in zip(slots, tally, strict=True):
                vector[where[slot]] += purged
            if all(vector[j] <= answers[call] for j, call in enumerate(mine)):
                widened.add((revisions, tuple(vector)))
        if not widened:
            reason = (
                f"no order of {partition.key} keeps each purge_settled part within its call's "
                "answer" + (f" and its row writes within {counted}" if last is not None else "")
            )
            counts = found if last is not None else None
            return RevisionCheck("violation", first, last, counts, reason)
        return mine, widened

    def as_found(partition: Partition, verdict: PartitionVerdict) -> _Counts:
        """The one count of the linearization the object's search found."""
        _, slots = slots_of(partition)
        mine = tuple(sorted(set(slots)))
        vector = tuple(verdict.purged.get(calls[call][0], 0) for call in mine)
        revisions = (verdict.revisions or 0) if last is not None else 0
        return mine, {(revisions, vector)}

    # Objects whose count may differ from one order to another are enumerated first: those
    # with calls of unknown outcome, and those where a purge deleted runs (which part did
    # may vary). The others keep the count found; only when no sum adds up that way is every
    # object enumerated (exact, as every sum is then tried).
    def varies(partition: Partition, verdict: PartitionVerdict) -> bool:
        return any(op.unknown for op in partition.operations) or any(verdict.purged.values())

    first_pass = [varies(p, v) for p, v in zip(partitions, verdicts, strict=True)]
    objects: list[_Counts] = []
    for partition, verdict, vary in zip(partitions, verdicts, first_pass, strict=True):
        counts = enumerated(partition) if vary else as_found(partition, verdict)
        if isinstance(counts, RevisionCheck):
            return counts
        objects.append(counts)
    total = counted if last is not None else None
    if not all(first_pass) and _counts_add_up(objects, answers, total):
        return RevisionCheck("ok", first, last, found if last is not None else None)
    for k, (partition, vary) in enumerate(zip(partitions, first_pass, strict=True)):
        if not vary:
            counts = enumerated(partition)
            if isinstance(counts, RevisionCheck):
                return counts
            objects[k] = counts
    total = counted if last is not None else None
    adds_up = _counts_add_up(objects, answers, total)
    if adds_up is None:
        return unchecked("too many achievable counts to enumerate", found)
    if adds_up:
        return RevisionCheck("ok", first, last, found if last is not None else None)
    reason = _count_reason(objects, calls, answers, total)
    return RevisionCheck("violation", first, last, found if last is not None else None, reason)


#: One object's achievable counts: the calls it has ``purge_settled`` parts of (by index), and
#: its (revisions, deletions per one of those calls) pairs.
_Counts: TypeAlias = tuple[tuple[int, ...], set[tuple[int, tuple[int, ...]]]]


def _counts_add_up(
    objects: Sequence[_Counts], answers: Sequence[int], counted: int | None
) -> bool | None:
    """Whether one achievable pair per object sums to ``counted`` row writes (any, when None)
    with each call's deletions summing to its answer; None when the partial sums outgrow
    ``MAX_REVISION_SUMS``.

    The objects are added one at a time, keeping the distinct partial sums: only of the
    calls an added object and one still to come have parts of (a call no later object has a
    part of must already add up, and is then dropped), each within what the answer allows
    (at most the answer, at least the answer less what the later objects can still
    delete), and a total that the later objects can still bring to ``counted`` without
    passing it. Every count is at least 0, so no sum this drops could have added up.
    """
    closing = {call: n for n, (mine, _) in enumerate(objects) for call in mine}
    rest_revisions = sum(max(r for r, _ in options) for _, options in objects)
    rest = [0] * len(answers)
    for mine, options in objects:
        for j, call in enumerate(mine):
            rest[call] += max(vector[j] for _, vector in options)
    active: tuple[int, ...] = ()
    sums: set[tuple[int, tuple[int, ...]]] = {(0, ())}
    for n, (mine, options) in enumerate(objects):
        rest_revisions -= max(r for r, _ in options)
        for j, call in enumerate(mine):
            rest[call] -= max(vector[j] for _, vector in options)
        merged = tuple(sorted({*active, *mine}))
        place = {call: k for k, call in enumerate(merged)}
        from_active = [place[call] for call in active]
        from_mine = [place[call] for call in mine]
        kept = [k for k, call in enumerate(merged) if closing[call] != n]
        low = [answers[call] - rest[call] for call in merged]
        high = [answers[call] for call in merged]
        grown: set[tuple[int, tuple[int, ...]]] = set()
        for total, partial in sums:
            for revisions, vector in options:
                added = total + revisions
                if counted is not None and (added > counted or added + rest_revisions < counted):
                    continue
                whole = [0] * len(merged)
                for k, x in zip(from_active, partial, strict=True):
                    whole[k] = x
                for k, x in zip(from_mine, vector, strict=True):
                    whole[k] += x
                if all(lo <= x <= hi for x, lo, hi in zip(whole, low, high, strict=True)):
                    grown.add((added, tuple(whole[k] for k in kept)))
        if len(grown) > MAX_REVISION_SUMS:
            return None
        if not grown:
            return False
        sums = grown
        active = tuple(merged[k] for k in kept)
    return True


def _reachable(choices: Iterable[set[int]]) -> int:
    """The sums of one number from each of ``choices``, as a bit set."""
    reach = 1
    for numbers in choices:
        grown = 0
        for number in numbers:
            grown |= reach << number
        reach = grown
    return reach


def _count_reason(
    objects: Sequence[_Counts],
    calls: Sequence[tuple[str, object]],
    answers: Sequence[int],
    counted: int | None,
) -> str:
    """Why no sum of the objects' achievable counts adds up: the row-write totals they
    reach nearest ``counted``, when it is not one of them, else the calls whose answer no
    sum of their own parts reaches (or "not all at once")."""
    if counted is not None:
        reach = _reachable({r for r, _ in options} for _, options in objects)
        if not reach >> counted & 1:
            totals = [t for t in range(reach.bit_length()) if reach >> t & 1]
            near = sorted(totals, key=lambda t: (abs(t - counted), t))[:3]
            return f"the history accounts for {', '.join(map(str, sorted(near)))}" + (
                " (nearest)" if len(totals) > len(near) else ""
            )
    wrong = []
    for k, (call, _) in enumerate(calls):
        parts = (
            {vector[mine.index(k)] for _, vector in options}
            for mine, options in objects
            if k in mine
        )
        if not _reachable(parts) >> answers[k] & 1:
            wrong.append(f"{call} answered {answers[k]}")
    return "purge_settled answers no linearization accounts for: " + (
        ", ".join(wrong[:3]) or "not all at once"
    )
