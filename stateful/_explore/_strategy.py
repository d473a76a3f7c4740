"""The walk at a strategy's own interface: ``ModelConsensus`` against a ``Consensus``.

Through the store adapter a strategy is only asked what the store's own row
rules let through: the store checks the snapshot, the staleness cutoff and the
evidence before it asks the strategy, so a strategy that gets one of those
wrong is masked. This walk drives the strategy directly, as the strategy
machine (``ConsensusComparison``) does, but over every program of a small
world instead of a sample.

A strategy scope (``STRATEGY_SCOPES``) fixes the runs the strategy arbitrates,
the owners (three live processes, two of them on one host, and a crashed
earlier incarnation of the first, which only renews, guards and lets go),
the callers' readings (offsets from the walk's clock), the edges around
each staleness cutoff, the evidence choices and the depth. A node of the walk
is the reference's lease of each run and the clock; the moves from a node are
every strategy call of the scope resolved against those leases (the current
claim token and one a millisecond off; evidence about the lease's owner or
claimant of each kind, about another incarnation, and checked a millisecond
early; readings at the clock, at the skew allowance ahead, and on each side
of the owner's and the claimant's staleness cutoffs), a claim and its
activation in one transaction, rolled-back transactions, and clock moves.

The canonical form keeps every lease time as its distance from the clock and
identifies the two owners of one host (the walk keeps the first state that
reached a form, so a move of the crashed incarnation meets the owner it is an
incarnation of). Each transition is applied to the strategy from a state equal
to its source: a fresh strategy from the factory, hosted in a fresh in-memory
SQLite store, with the shortest program to the source replayed; or, where the
strategy is ours (``SqlConsensus`` with its lease table in the host's
database, ``LocalConsensus`` with its leases in memory, or a subclass of them
that keeps no member of its own), a copy of the source state put back. After
each transaction the checks are the machine's, in its order: the lease
invariants on the reference, the answers, a rolled-back transaction leaving
no trace, and every run's ``lease()`` equal to the reference's.

``depth_k``: every program of up to that many moves is also run without
deduplication, each on a fresh strategy, since a strategy may keep memory the
leases do not show.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any, Final

import attrs

from runstore._clock import ManualClock
from runstore._constants import HEARTBEAT_SKEW_ALLOWANCE_MS, HEARTBEAT_STALE_AFTER_MS
from runstore._values import Lease, LivenessEvidence, OwnerId, StoreState
from runstore.consensus._types import Consensus
from runstore.model import ModelConsensus, model_transaction

from .._base._compare import LeaseMismatch, OutcomeMismatch, RollbackLeak
from .._base._domain import START_MS
from .._base._observe import ClockSet, LogEntry, Transacted
from .._base._steps import Call, call
from .._checks._invariants import InvariantViolation, check_leases
from .._machines._consensus import CONSENSUS_RUNS, invoke
from ._scope import KINDS, evidence, owner
from ._walk import owner_renamings

STALE: Final = HEARTBEAT_STALE_AFTER_MS
SKEW: Final = HEARTBEAT_SKEW_ALLOWANCE_MS

#: The evidence choices of a steal or a recovery: each kind about the lease's owner (or
#: claimant), the fitting kind about another incarnation, and the fitting kind checked a
#: millisecond early.
EVIDENCE: Final = (*KINDS, "wrong-owner", "late")


@attrs.frozen
class Transact:
    """One transaction at the strategy interface: ``calls`` in order, rolled back at the end
    when ``rollback``."""

    calls: tuple[Call, ...]
    rollback: bool = False

    def describe(self) -> str:
        """The transaction as one line of a program."""
        text = "; ".join(op.describe() for op in self.calls)
        return f"(rolled back) {text}" if self.rollback else text


@attrs.frozen
class Advance:
    """Move the walk's clock to ``ms`` (the readings callers give follow it)."""

    ms: int

    def describe(self) -> str:
        """The move as one line of a program."""
        return f"clock -> {self.ms}"


StrategyMove = Transact | Advance


@attrs.frozen
class StrategyScope:
    """One finite world of a strategy walk.

    ``runs`` the strategy arbitrates (each a row of the host store); ``owners``
    claim, steal, activate, recover and release; ``ghosts`` (crashed earlier
    incarnations) only renew, guard and let go; ``owner_classes`` groups owners
    (indexes into ``owners``) that are interchangeable; ``readings`` are offsets
    of a caller's ``now_ms`` from the clock; ``edges`` the offsets from a
    staleness cutoff (a stamp plus 30 000 ms) at which a steal or a recovery
    reads and the clock may move to; ``ticks`` plain clock steps; ``depth``
    the most moves; ``depth_k`` the depth of the pass without deduplication;
    ``evidence`` the evidence choices; ``rollbacks`` whether rolled-back
    transactions and a claim with its activation in one transaction are moves.
    """

    name: str
    runs: tuple[str, ...]
    owners: tuple[OwnerId, ...]
    ghosts: tuple[OwnerId, ...]
    owner_classes: tuple[tuple[int, ...], ...]
    readings: tuple[int, ...]
    edges: tuple[int, ...]
    depth: int
    depth_k: int
    evidence: tuple[str, ...] = EVIDENCE
    ticks: tuple[int, ...] = (1000,)
    rollbacks: bool = True


_H1P1, _H1P2, _H2P1 = owner("h1", 1), owner("h1", 2), owner("h2", 1)
#: The first owner's earlier incarnation (its process crashed and restarted).
_GHOST = OwnerId(_H1P1.host_id, _H1P1.pid, "n-1")

STRATEGY_SCOPES: Final = {
    "tiny": StrategyScope(
        "tiny",
        runs=("a",),
        owners=(_H1P1, _H2P1),
        ghosts=(),
        owner_classes=((0,), (1,)),
        readings=(0, SKEW),
        edges=(0, 1),
        depth=3,
        depth_k=1,
        evidence=("lease-expired", "same-host-pid-dead", "cross-host-unreachable-stale"),
    ),
    "small": StrategyScope(
        "small",
        runs=("a", "b"),
        owners=(_H1P1, _H1P2, _H2P1),
        ghosts=(_GHOST,),
        owner_classes=((0, 1), (2,)),
        readings=(0, SKEW),
        edges=(-1, 0, 1),
        depth=3,
        depth_k=1,
    ),
    "medium": StrategyScope(
        "medium",
        runs=("a", "b"),
        owners=(_H1P1, _H1P2, _H2P1),
        ghosts=(_GHOST,),
        owner_classes=((0, 1), (2,)),
        readings=(0, SKEW),
        edges=(-1, 0, 1),
        depth=4,
        depth_k=2,
    ),
}
STRATEGY_SCOPES["large"] = attrs.evolve(STRATEGY_SCOPES["medium"], name="large", depth=5)

Leases = tuple[Lease | None, ...]


def strategy_scope(name: str) -> StrategyScope:
    """The strategy scope called ``name`` (the same names as the store scopes)."""
    try:
        return STRATEGY_SCOPES[name]
    except KeyError:
        raise ValueError(f"unknown scope {name!r}") from None


# -- moves ------------------------------------------------------------------------


def _edge_readings(scope: StrategyScope, stamp: int | None) -> list[int]:
    return [] if stamp is None else [stamp + STALE + edge for edge in scope.edges]


def _unique(values: list[int]) -> list[int]:
    return sorted(set(values))


def strategy_moves(scope: StrategyScope, leases: Leases, clock_ms: int) -> list[StrategyMove]:
    """Every move the scope allows from ``leases`` (the reference's, one per run of the scope)
    with the clock at ``clock_ms``, in a fixed order (so a walk is deterministic)."""
    out: list[StrategyMove] = []
    owners, ghosts = scope.owners, scope.ghosts
    readings = [clock_ms + offset for offset in scope.readings]
    for run_id, lease in zip(scope.runs, leases, strict=True):
        holder = lease.owner if lease is not None else None
        claimant = lease.claim if lease is not None else None
        token = (
            lease.claimed_at_ms
            if lease is not None and lease.claimed_at_ms is not None
            else clock_ms
        )
        tokens = (token, token - 1)
        steal_at = _unique(
            readings + _edge_readings(scope, None if lease is None else lease.heartbeat_at_ms)
        )
        recover_at = _unique(
            readings + _edge_readings(scope, None if lease is None else lease.claimed_at_ms)
        )
        subject = holder if holder is not None else owners[0]
        stale = claimant if claimant is not None else owners[0]
        rollback = scope.rollbacks
        for who in owners:
            for now in readings:
                out.append(
                    _one(call("claim", ("run_id", run_id), ("claimant", who), ("now_ms", now)))
                )
            for now in steal_at:
                for selector in scope.evidence:
                    proof = evidence(selector, subject, who, now, owners[0])
                    out.append(_one(_steal(run_id, who, now, proof)))
            for granted_at in tokens:
                for now in readings:
                    out.append(_one(_activate(run_id, who, granted_at, now)))
                out.append(
                    _one(
                        call(
                            "release_claim",
                            ("run_id", run_id),
                            ("claimant", who),
                            ("granted_at_ms", granted_at),
                        )
                    )
                )
            for now in recover_at:
                for selector in scope.evidence:
                    proof = evidence(selector, stale, who, now, owners[0])
                    out.append(_one(_recover(run_id, stale, token, who, now, proof)))
            # The wrong token once, with evidence that fits, at the cutoff's far side.
            now = recover_at[-1]
            out.append(_one(_recover(run_id, stale, token - 1, who, now, _fit(stale, who, now))))
            if rollback:
                # Each change that a commit would make, rolled back instead.
                now = clock_ms
                out.append(
                    _undone(call("claim", ("run_id", run_id), ("claimant", who), ("now_ms", now)))
                )
                for at in steal_at[-1:]:
                    proof = LivenessEvidence(subject, at, "lease-expired")
                    out.append(_undone(_steal(run_id, who, at, proof)))
                out.append(_undone(_activate(run_id, who, token, now)))
                out.append(
                    _undone(
                        call(
                            "release_claim",
                            ("run_id", run_id),
                            ("claimant", who),
                            ("granted_at_ms", token),
                        )
                    )
                )
                at = recover_at[-1]
                proof = LivenessEvidence(stale, at, "lease-expired")
                out.append(_undone(_recover(run_id, stale, token, who, at, proof)))
                for method in ("heartbeat", "reconfirm"):
                    out.append(_undone(_renew(method, run_id, who, now)))
                out.append(_undone(call("release_ownership", ("run_id", run_id), ("owner", who))))
                # A claim and its activation in one transaction, committed and rolled back.
                both = (
                    call("claim", ("run_id", run_id), ("claimant", who), ("now_ms", now)),
                    _activate(run_id, who, now, now),
                )
                out.append(Transact(both))
                out.append(Transact(both, rollback=True))
        for who in (*owners, *ghosts):
            for now in readings:
                for method in ("heartbeat", "reconfirm"):
                    out.append(_one(_renew(method, run_id, who, now)))
            out.append(_one(call("release_ownership", ("run_id", run_id), ("owner", who))))
            out.append(_one(call("guard", ("run_id", run_id), ("owner", who))))
    batch = sorted(scope.runs)
    for who in (*owners, *ghosts):
        for now in readings:
            out.append(
                _one(call("heartbeat_many", ("run_ids", batch), ("owner", who), ("now_ms", now)))
            )
    out.extend(_advances(scope, leases, clock_ms))
    return out


def _fit(subject: OwnerId, observer: OwnerId, now: int) -> LivenessEvidence:
    """The evidence kind ``observer`` can give about ``subject`` at ``now``, other than
    ``lease-expired``."""
    same = subject.host_id == observer.host_id
    return LivenessEvidence(
        subject, now, "same-host-pid-dead" if same else "cross-host-unreachable-stale"
    )


def _one(op: Call) -> Transact:
    return Transact((op,))


def _undone(op: Call) -> Transact:
    return Transact((op,), rollback=True)


def _steal(run_id: str, who: OwnerId, now: int, proof: LivenessEvidence | None) -> Call:
    return call(
        "steal", ("run_id", run_id), ("claimant", who), ("now_ms", now), ("evidence", proof)
    )


def _activate(run_id: str, who: OwnerId, granted_at: int, now: int) -> Call:
    return call(
        "activate",
        ("run_id", run_id),
        ("owner", who),
        ("granted_at_ms", granted_at),
        ("now_ms", now),
    )


def _recover(
    run_id: str,
    stale: OwnerId,
    granted_at: int,
    observer: OwnerId,
    now: int,
    proof: LivenessEvidence | None,
) -> Call:
    return call(
        "recover",
        ("run_id", run_id),
        ("stale_claimant", stale),
        ("granted_at_ms", granted_at),
        ("observer", observer),
        ("now_ms", now),
        ("evidence", proof),
    )


def _renew(method: str, run_id: str, who: OwnerId, now: int) -> Call:
    return call(method, ("run_id", run_id), ("owner", who), ("now_ms", now))


def _advances(scope: StrategyScope, leases: Leases, clock_ms: int) -> list[StrategyMove]:
    targets: set[int] = {clock_ms + step for step in scope.ticks}
    for lease in leases:
        if lease is None:
            continue
        for stamp in (lease.heartbeat_at_ms, lease.claimed_at_ms):
            for at in _edge_readings(scope, stamp):
                if at > clock_ms:
                    targets.add(at)
    return [Advance(ms) for ms in sorted(targets)]


# -- the reference side -------------------------------------------------------------


def reference_step(
    scope: StrategyScope, leases: Leases, move: Transact
) -> tuple[tuple[Any, ...], Leases]:
    """``ModelConsensus``'s answers to ``move`` from ``leases``, and the leases after it."""
    model = ModelConsensus()
    model._leases = {lease.run_id: lease for lease in leases if lease is not None}
    with model_transaction() as tx:
        answers = tuple(invoke(model, tx, op) for op in move.calls)
        if move.rollback:
            tx.rollback_only()
    after = tuple(model._leases.get(run_id) for run_id in scope.runs)
    return answers, after


def _lease_form(lease: Lease | None, clock_ms: int, rename: dict[OwnerId, OwnerId]) -> Any:
    if lease is None:
        return None

    def who(value: OwnerId | None) -> Any:
        if value is None:
            return None
        renamed = rename.get(value, value)
        return (renamed.host_id, renamed.pid, renamed.nonce)

    def at(value: int | None) -> int | None:
        return None if value is None else value - clock_ms

    return (
        who(lease.owner),
        at(lease.granted_at_ms),
        at(lease.heartbeat_at_ms),
        who(lease.claim),
        at(lease.claimed_at_ms),
    )


def canonical(leases: Leases, clock_ms: int, renamings: list[dict[OwnerId, OwnerId]]) -> Any:
    """The canonical form of ``leases`` with the clock at ``clock_ms``: lease times as
    distances from the clock, the least image under renaming owners of one class."""
    forms = [
        tuple(_lease_form(lease, clock_ms, rename) for lease in leases) for rename in renamings
    ]
    return min(forms, key=repr) if len(forms) > 1 else forms[0]


@attrs.frozen
class StrategyNode:
    """A state of the walk: the reference's leases (one per run of the scope), the clock, the
    node first reached from (-1 for the start), the move and the reference's answers, and the
    depth."""

    leases: Leases
    clock_ms: int
    parent: int
    move: StrategyMove | None
    answers: tuple[Any, ...] | None
    depth: int


# -- the strategy under test ---------------------------------------------------------


class _RollBack(Exception):
    """Raised inside a transaction body to roll it back on purpose."""


class Hosted:
    """A strategy under test, hosted in an in-memory SQLite store whose write transactions it
    is called in (the host's rows are ``CONSENSUS_RUNS``, as the strategy machine's), rebuilt
    fresh or restored from a copy where the strategy is ours."""

    def __init__(
        self,
        factory: Callable[[], Any],
        scope: StrategyScope,
        *,
        restore: bool,
        host: Callable[[Any], Any] | None = None,
    ) -> None:
        self.factory = factory
        self.host_factory = host
        self.scope = scope
        self.restore_allowed = restore
        self.host: Any = None
        self.strategy: Any = None
        self.kind: str | None = None
        self.copies: dict[int, Any] = {}

    def close(self) -> None:
        """Close the host store."""
        if self.host is not None:
            host, self.host = self.host, None
            host.close()

    def fresh(self) -> None:
        """A fresh strategy from the factory in a fresh host."""
        import runstore

        self.close()
        self.strategy = self.factory()
        try:
            shaped = isinstance(self.strategy, Consensus)
        except TypeError:
            shaped = False
        if not shaped:
            from .._checks._invariants import StrategyShapeViolation

            raise StrategyShapeViolation(
                f"{type(self.strategy).__name__} does not satisfy runstore.consensus.Consensus"
            )
        if self.host_factory is None:
            self.host = runstore.open(":memory:", clock=ManualClock(0), consensus=self.strategy)
        else:
            self.host = self.host_factory(self.strategy)
        for run_id in CONSENSUS_RUNS:
            self.host.create(run_id, "{}")
        self.kind = self._owned()

    def _owned(self) -> str | None:
        """``"local"`` or ``"sql"`` when the strategy's state can be copied and put back."""
        if not self.restore_allowed:
            return None
        from runstore.consensus import LocalConsensus, SqlConsensus
        from runstore.sqlite import SqliteRunStore

        strategy = self.strategy
        if isinstance(strategy, LocalConsensus) and set(vars(strategy)) <= {"_leases", "_lock"}:
            return "local"
        if (
            isinstance(strategy, SqlConsensus)
            and not vars(strategy)
            and isinstance(self.host, SqliteRunStore)
        ):
            return "sql"
        return None

    def apply(self, move: Transact) -> list[Any]:
        """Make ``move``'s calls in one write transaction of the host (rolled back when the
        move says so): the strategy's answers, a ``ConsensusError`` as ``Refused(code)``."""
        answers: list[Any] = []
        strategy = self.strategy

        def body(tx: Any) -> None:
            answers.extend(invoke(strategy, tx, op) for op in move.calls)
            if move.rollback:
                raise _RollBack

        with contextlib.suppress(_RollBack):
            self.host._write("consensus", body)
        return answers

    def leases(self) -> Leases:
        """The strategy's lease of each run of the scope."""
        runs, strategy = self.scope.runs, self.strategy

        def body(tx: Any) -> Leases:
            return tuple(strategy.lease(tx, run_id) for run_id in runs)

        taken: Leases = self.host._write("lease", body)
        return taken

    def snapshot(self, index: int) -> None:
        """Copy the strategy's state as node ``index``'s (only where it is ours)."""
        if self.kind == "local":
            self.copies[index] = dict(self.strategy._leases)
        elif self.kind == "sql":
            from ._replay import _sqlite_copy

            self.copies[index] = _sqlite_copy(self.host)

    def restore(self, index: int) -> bool:
        """Put node ``index``'s copy back; False when there is none."""
        taken = self.copies.get(index)
        if taken is None or self.host is None:
            return False
        if self.kind == "local":
            with self.strategy._lock:
                self.strategy._leases = dict(taken)
        else:
            from ._replay import _sqlite_restore

            _sqlite_restore(self.host, taken)
        return True

    def forget(self, index: int) -> None:
        """Drop node ``index``'s copy."""
        self.copies.pop(index, None)


@attrs.frozen
class StrategyDivergence:
    """A check that failed at the strategy interface: the program (moves with the reference's
    answers), the check's class name and message, and the reference's leases after it."""

    program: tuple[tuple[StrategyMove, Any], ...]
    check: str
    message: str
    leases: Leases


def judge(
    move: Transact,
    before_model: Leases,
    after_model: Leases,
    want: tuple[Any, ...],
    got: list[Any],
    before: Leases,
    after: Leases,
) -> tuple[str, str] | None:
    """The strategy machine's checks of one transaction, in its order: None when all hold."""
    try:
        try:
            check_leases(before_model, after_model, move.calls)
        except InvariantViolation as error:
            return "ReferenceInvariantViolation", f"{type(error).__name__}: {error}"
        for op, expected, answered in zip(move.calls, want, got, strict=True):
            if expected != answered:
                raise OutcomeMismatch(
                    f"{op.describe()}: reference answered {expected!r}, strategy answered"
                    f" {answered!r}"
                )
        if move.rollback and after != before:
            raise RollbackLeak(
                f"after a rolled-back {[op.method for op in move.calls]}: leases were"
                f" {before!r}, now {after!r}"
            )
        if after != after_model:
            raise LeaseMismatch(
                f"after {[op.describe() for op in move.calls]}: reference leases"
                f" {after_model!r}, strategy leases {after!r}"
            )
    except AssertionError as error:
        return type(error).__name__, str(error)
    return None


@attrs.define
class StrategyWalk:
    """What a strategy walk did: its nodes (breadth-first), the transitions checked on the
    reference and applied to the strategy, whether it was exhausted (the pass without
    deduplication included), fresh strategies built and copies restored, the programs of the
    pass without deduplication, and the divergence, if any."""

    scope: StrategyScope
    nodes: list[StrategyNode] = attrs.field(factory=list)
    transitions: int = 0
    exhausted: bool = False
    rebuilds: int = 0
    restores: int = 0
    programs: int = 0
    divergence: StrategyDivergence | None = None

    @property
    def depth(self) -> int:
        """The deepest level reached."""
        return self.nodes[-1].depth if self.nodes else 0

    def path(self, index: int) -> list[tuple[StrategyMove, Any]]:
        """The moves (and the reference's answers) from the start to node ``index``."""
        out: list[tuple[StrategyMove, Any]] = []
        while index > 0:
            node = self.nodes[index]
            assert node.move is not None
            out.append((node.move, node.answers))
            index = node.parent
        out.reverse()
        return out


def _replay(hosted: Hosted, path: list[tuple[StrategyMove, Any]]) -> None:
    hosted.fresh()
    for move, _ in path:
        if isinstance(move, Transact):
            hosted.apply(move)


def walk_strategy(
    factory: Callable[[], Any] | None,
    scope: StrategyScope,
    *,
    deadline: float | None = None,
    clock: Callable[[], float] = time.monotonic,
    restore: bool = True,
    depth_k: int | None = None,
    host: Callable[[Any], Any] | None = None,
) -> StrategyWalk:
    """Walk ``scope`` breadth-first over ``ModelConsensus`` and, when ``factory`` is given,
    apply every transition to a strategy it builds, from a state equal to the transition's
    source; then every program of up to ``depth_k`` moves (None: the scope's) without
    deduplication. Stops at the first divergence (on a shortest program) or at ``deadline``
    (by ``clock``). ``host(strategy)`` opens the store whose transactions the strategy is
    called in (None: an in-memory SQLite store); a SQL strategy's copies are restored only
    on SQLite, and replayed elsewhere."""
    graph = StrategyWalk(scope)
    renamings = owner_renamings(scope)
    start = tuple(None for _ in scope.runs)
    graph.nodes.append(StrategyNode(start, START_MS, -1, None, None, 0))
    seen = {canonical(start, START_MS, renamings)}
    hosted = None if factory is None else Hosted(factory, scope, restore=restore, host=host)
    try:
        index = 0
        while index < len(graph.nodes):
            node = graph.nodes[index]
            if node.depth < scope.depth:
                if deadline is not None and clock() > deadline:
                    return graph
                found = _expand(graph, index, node, hosted, renamings, seen)
                if hosted is not None:
                    hosted.forget(index)
                if found is not None:
                    graph.divergence = found
                    return graph
            index += 1
        k = scope.depth_k if depth_k is None else depth_k
        if hosted is not None and k > 0:
            done = _programs(graph, hosted, k, deadline, clock)
            if not done or graph.divergence is not None:
                return graph
        graph.exhausted = True
        return graph
    finally:
        if hosted is not None:
            hosted.close()


def _expand(
    graph: StrategyWalk,
    index: int,
    node: StrategyNode,
    hosted: Hosted | None,
    renamings: list[dict[OwnerId, OwnerId]],
    seen: set[Any],
) -> StrategyDivergence | None:
    scope = graph.scope
    deepest = scope.depth
    dirty = True
    path: list[tuple[StrategyMove, Any]] | None = None
    before: Leases = node.leases
    for move in strategy_moves(scope, node.leases, node.clock_ms):
        graph.transitions += 1
        if isinstance(move, Advance):
            after_model, answers, clock_after = node.leases, None, move.ms
        else:
            answers, after_model = reference_step(scope, node.leases, move)
            clock_after = node.clock_ms
        child = -1
        if after_model != node.leases or clock_after != node.clock_ms:
            key = canonical(after_model, clock_after, renamings)
            if key not in seen:
                seen.add(key)
                child = len(graph.nodes)
                graph.nodes.append(
                    StrategyNode(after_model, clock_after, index, move, answers, node.depth + 1)
                )
        if hosted is None:
            continue
        if isinstance(move, Advance):
            # The strategy reads no clock: a clock move changes nothing of it, and the
            # state it reaches is copied from this one (where the strategy is ours).
            copies = hosted.restore_allowed and (hosted.host is None or hosted.kind is not None)
            if copies and child >= 0 and graph.nodes[child].depth < deepest:
                if dirty:
                    path, before = _rebuild(graph, index, hosted, path)
                    dirty = False
                hosted.snapshot(child)
            continue
        if dirty:
            path, before = _rebuild(graph, index, hosted, path)
            dirty = False
        graph.transitions += 1
        assert answers is not None
        try:
            got = hosted.apply(move)
            after = hosted.leases()
        except Exception as error:
            program = (*(path or graph.path(index)), (move, answers))
            return StrategyDivergence(
                tuple(program),
                "StrategyCrashed",
                f"{move.describe()}: the strategy raised {type(error).__name__}",
                after_model,
            )
        verdict = judge(move, node.leases, after_model, answers, got, before, after)
        if verdict is not None:
            program = (*(path or graph.path(index)), (move, answers))
            return StrategyDivergence(tuple(program), verdict[0], verdict[1], after_model)
        if child >= 0 and graph.nodes[child].depth < deepest:
            hosted.snapshot(child)
        dirty = after != before
    return None


def _rebuild(
    graph: StrategyWalk,
    index: int,
    hosted: Hosted,
    path: list[tuple[StrategyMove, Any]] | None,
) -> tuple[list[tuple[StrategyMove, Any]], Leases]:
    """Bring the strategy to node ``index``'s state (restore, else replay): the path and the
    strategy's leases there."""
    path = graph.path(index) if path is None else path
    if hosted.host is not None and hosted.restore(index):
        graph.restores += 1
    else:
        _replay(hosted, path)
        graph.rebuilds += 1
        hosted.snapshot(index)
    return path, hosted.leases()


def _programs(
    graph: StrategyWalk,
    hosted: Hosted,
    k: int,
    deadline: float | None,
    clock: Callable[[], float],
) -> bool:
    """Every program of up to ``k`` moves on a fresh strategy each (no deduplication); False
    when the deadline came first. A divergence is recorded on ``graph``."""
    scope = graph.scope
    stack: list[tuple[Leases, int, list[tuple[StrategyMove, Any]]]] = [
        (graph.nodes[0].leases, START_MS, [])
    ]
    while stack:
        leases, clock_ms, path = stack.pop()
        for move in strategy_moves(scope, leases, clock_ms):
            if deadline is not None and clock() > deadline:
                return False
            if isinstance(move, Advance):
                after_model, answers, clock_after = leases, None, move.ms
            else:
                answers, after_model = reference_step(scope, leases, move)
                clock_after = clock_ms
                _replay(hosted, path)
                graph.rebuilds += 1
                graph.programs += 1
                graph.transitions += 1
                before = hosted.leases()
                try:
                    got = hosted.apply(move)
                    after = hosted.leases()
                except Exception as error:
                    graph.divergence = StrategyDivergence(
                        (*path, (move, answers)),
                        "StrategyCrashed",
                        f"{move.describe()}: the strategy raised {type(error).__name__}",
                        after_model,
                    )
                    return True
                verdict = judge(move, leases, after_model, answers, got, before, after)
                if verdict is not None:
                    graph.divergence = StrategyDivergence(
                        (*path, (move, answers)), verdict[0], verdict[1], after_model
                    )
                    return True
            if len(path) + 1 < k:
                stack.append((after_model, clock_after, [*path, (move, answers)]))
    return True


# -- reports --------------------------------------------------------------------------


def strategy_log(program: tuple[tuple[StrategyMove, Any], ...]) -> tuple[LogEntry, ...]:
    """A program as the strategy machine's log (for the summary and the regression file)."""
    entries: list[LogEntry] = []
    for move, answers in program:
        if isinstance(move, Advance):
            entries.append(ClockSet(move.ms))
        else:
            entries.append(Transacted(move.calls, tuple(answers), move.rollback))
    return tuple(entries)


def expected_state(scope: StrategyScope, leases: Leases) -> StoreState:
    """The reference's leases as the ``StoreState`` a strategy failure carries."""
    del scope
    kept = tuple(lease for lease in leases if lease is not None)
    return StoreState(rows=(), leases=kept, facts=(), revision=0, changes=())
