"""``ConsensusComparison``: a strategy against ``ModelConsensus``, call by call.

The strategy under test is driven at the strategy interface, inside real write
transactions of an in-memory SQLite store that hosts it (so strategies that
keep their leases in the store's database work), while ``ModelConsensus`` runs
the same calls inside ``model_transaction()``. After every transaction the
machine compares the answers (values with ``==``; a raised ``ConsensusError``
by its code) and, with lease introspection, every run's ``lease()``.

Some transactions are rolled back on purpose, alone or with two calls in
them: the strategy must then hold exactly the leases it held before
(``on_rollback`` for strategies that keep state outside the database). Strategy
bugs that the store's own row checks would mask (a guard that always passes,
an activation that ignores the grant time) are visible here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import attrs
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

from runstore._clock import ManualClock
from runstore._values import Lease, RunRow, StoreState
from runstore.consensus._types import Consensus, ConsensusError, Granted
from runstore.model import ModelConsensus, model_transaction

from .._base import _observe
from .._base._capabilities import FULL_STORE, Capabilities
from .._base._compare import LeaseMismatch, OutcomeMismatch, RollbackLeak
from .._base._domain import (
    ACTORS,
    ADVANCES,
    CLAIMANTS,
    CLAIMERS,
    EDGE_DELTAS,
    EVIDENCE,
    OFFSETS,
    PROCESS_COUNT,
    RECOVER_TIMES,
    RENEW_TIMES,
    START_MS,
    TIMES,
    TOKENS,
    World,
)
from .._base._observe import ClockSet, Failure, LogEntry, Transacted, say
from .._base._programs import programs_independent_of_callers_code
from .._base._steps import Call, call
from .._checks._invariants import (
    InvariantViolation,
    ReferenceInvariantViolation,
    StrategyShapeViolation,
    check_leases,
)

#: The runs the strategy arbitrates (each exists as a row in the host store).
CONSENSUS_RUNS = ("a", "b", "c")

ConsensusFactory = Callable[[], Any]


@attrs.frozen
class Refused:
    """A strategy call raised ``ConsensusError`` with ``code``."""

    code: str


class _RollBack(Exception):
    """Raised inside a transaction body to roll it back on purpose."""


def invoke(strategy: Any, tx: Any, op: Call) -> Any:
    """Call ``strategy.<op.method>(tx, *args)``; a ``ConsensusError`` becomes
    ``Refused(code)``; ``guard`` answers ``None`` when it passes."""
    args = [value for _, value in op.arguments]
    try:
        if op.method == "heartbeat_many" and not callable(getattr(strategy, op.method, None)):
            # The batch is optional; what it must answer is each run's heartbeat.
            run_ids, owner, now_ms = args
            return {rid: strategy.heartbeat(tx, rid, owner, now_ms) for rid in run_ids}
        return getattr(strategy, op.method)(tx, *args)
    except ConsensusError as error:
        return Refused(str(error.code))


def _lease_row(lease: Lease) -> RunRow:
    """A run row standing for a lease, so the ``World`` selectors can read it."""
    return RunRow(
        run_id=lease.run_id,
        status="running" if lease.owner is not None else "pending",
        created_at_ms=0,
        started_at_ms=None,
        finished_at_ms=None,
        owner=lease.owner,
        heartbeat_at_ms=lease.heartbeat_at_ms if lease.owner is not None else None,
        claim=lease.claim,
        claimed_at_ms=lease.claimed_at_ms,
        parent_run_id=None,
        cancel_requested_at_ms=None,
        lineage_id=None,
        round_ordinal=None,
        state_json="{}",
    )


#: What happens between a steal and its activation.
MEANWHILE = ("nothing", "heartbeat", "reconfirm", "release_ownership", "release_claim")
TAKEOVER_EDGES = (1, 1, 0, -1)

RUNS = st.sampled_from(CONSENSUS_RUNS)
FREE = st.sampled_from(("claimable", "claimable", *CONSENSUS_RUNS))
OWNED = st.sampled_from(("running", "running", *CONSENSUS_RUNS))
CLAIMED = st.sampled_from(("claimed", "claimed", *CONSENSUS_RUNS))
ANY = st.sampled_from(("claimed", "running", *CONSENSUS_RUNS))
PROCESSES = st.sampled_from(tuple(range(PROCESS_COUNT)))
SINGLE_CALLS = (
    "claim",
    "steal",
    "activate",
    "heartbeat",
    "reconfirm",
    "recover",
    "release_claim",
    "release_ownership",
)


class ConsensusComparison(RuleBasedStateMachine):
    """``ModelConsensus`` against ``consensus_factory()``'s strategy.

    A Hypothesis state machine (build one with ``consensus_comparison_for``;
    ``run_conformance`` runs it). Each rule makes one or two strategy calls inside a real
    write transaction of an in-memory SQLite store that hosts the strategy (the model's inside
    ``model_transaction()``), then compares the answers and, with lease introspection, every
    run's ``lease()``; some transactions roll back on purpose. The strategy must satisfy the
    ``Consensus`` protocol (else ``StrategyShapeViolation``).

    Rules draw selectors as ``RunStoreComparison``'s do: ``run`` is one of the runs ``a``,
    ``b``, ``c`` or a run in a condition (free, owned, claimed); ``actor`` (and ``stale``,
    ``thief``, ``claimant``, ``observer``, ``process``) a process, the run's owner or
    claimant, or a ghost; ``at`` a reading aimed at the staleness and skew edges; ``evidence``
    the evidence made; ``token`` the grant time presented.
    """

    budget_kind: ClassVar[str] = "strategy"
    """Which default budget ``run_conformance`` gives this machine: ``"strategy"``."""

    consensus_factory: ClassVar[ConsensusFactory | None] = None
    """The factory of the strategy under test (set by ``consensus_comparison_for``)."""
    capabilities: ClassVar[Capabilities] = FULL_STORE
    """What the strategy under test can do (set by ``consensus_comparison_for``)."""
    target: ClassVar[str] = "strategy"
    """The name reports give the strategy under test."""

    def __init__(self) -> None:
        programs_independent_of_callers_code()
        super().__init__()
        observer = _observe.current()
        if observer is not None:
            observer.example_started()
        factory = type(self).consensus_factory
        if factory is None:
            raise TypeError(f"{type(self).__name__} has no consensus_factory")
        import runstore

        self.clock = ManualClock(START_MS)
        """The clock the readings are drawn against, a ``ManualClock``."""
        self.world = World(self.clock, run_ids=CONSENSUS_RUNS)
        """The program's world: processes, offsets, incarnations and the selectors' resolution."""
        self.log: list[LogEntry] = []
        """Every transaction made so far, for the failure summary and the regression file."""
        self.model = ModelConsensus()
        """The reference, a ``ModelConsensus``."""
        self.strategy = factory()
        """The strategy under test."""
        # What a store checks by shape, and what a caller checks with
        # isinstance(): every method of runstore.consensus.Consensus.
        try:
            shaped = isinstance(self.strategy, Consensus)
        except TypeError as error:  # the protocol is not checkable at run time
            message = f"isinstance(strategy, Consensus) raised: {error}"
            raise StrategyShapeViolation(message) from None
        if not shaped:
            raise StrategyShapeViolation(
                f"{type(self.strategy).__name__} does not satisfy runstore.consensus.Consensus"
            )
        self.host = runstore.open(":memory:", clock=ManualClock(0), consensus=self.strategy)
        """The in-memory SQLite store whose write transactions the strategy is called in."""
        for run_id in CONSENSUS_RUNS:
            self.host.create(run_id, "{}")
        self.model_leases = self._model_leases()
        """The reference's lease of each run after the last transaction."""
        self.strategy_leases = self._strategy_leases()
        """The strategy's lease of each run after the last transaction."""
        self._observe()

    def teardown(self) -> None:
        """Close the host store."""
        self.host.close()

    # -- leases ------------------------------------------------------------------------

    def _model_leases(self) -> tuple[Lease | None, ...]:
        with model_transaction() as tx:
            return tuple(self.model.lease(tx, run_id) for run_id in CONSENSUS_RUNS)

    def _strategy_leases(self) -> tuple[Lease | None, ...]:
        if not self.capabilities.lease_introspection:
            return ()

        def body(tx: Any) -> tuple[Lease | None, ...]:
            return tuple(self.strategy.lease(tx, run_id) for run_id in CONSENSUS_RUNS)

        leases: tuple[Lease | None, ...] = self.host._write("lease", body)
        return leases

    def _observe(self) -> None:
        self.world.rows = {
            lease.run_id: _lease_row(lease) for lease in self.model_leases if lease is not None
        }

    # -- one transaction on both sides -----------------------------------------------------

    def _transact(self, calls: Sequence[Call], *, rollback: bool = False) -> list[Any]:
        expected: list[Any] = []
        with model_transaction() as tx:
            expected.extend(invoke(self.model, tx, op) for op in calls)
            if rollback:
                tx.rollback_only()
        actual: list[Any] = []

        def body(tx: Any) -> None:
            actual.extend(invoke(self.strategy, tx, op) for op in calls)
            if rollback:
                raise _RollBack

        with contextlib.suppress(_RollBack):
            self.host._write("consensus", body)
        self.log.append(Transacted(tuple(calls), tuple(expected), rollback))
        observer = _observe.current()
        if observer is not None:
            observer.step()

        def shown() -> str:
            lines = []
            for op, want, got in zip(calls, expected, actual, strict=True):
                line = f"{op.describe()} -> {want!r}"
                if want != got:
                    line += f"  [strategy: {got!r}]"
                lines.append(("(rolled back) " if rollback else "") + line)
            return "\n".join(lines)

        say(shown)
        before = self.strategy_leases
        model_before = self.model_leases
        self.model_leases = self._model_leases()
        self.strategy_leases = self._strategy_leases()
        self._observe()
        try:
            # The reference first: an invariant its leases break is the suite's
            # defect, and must never be reported against the strategy.
            try:
                check_leases(model_before, self.model_leases, calls)
            except InvariantViolation as error:
                raise ReferenceInvariantViolation.of(error) from None
            for op, want, got in zip(calls, expected, actual, strict=True):
                if want != got:
                    raise OutcomeMismatch(
                        f"{op.describe()}: reference answered {want!r}, strategy answered {got!r}"
                    )
            if self.capabilities.lease_introspection:
                if rollback and self.strategy_leases != before:
                    raise RollbackLeak(
                        f"after a rolled-back {[op.method for op in calls]}: leases were "
                        f"{before!r}, now {self.strategy_leases!r}"
                    )
                if self.strategy_leases != self.model_leases:
                    raise LeaseMismatch(
                        f"after {[op.describe() for op in calls]}: reference leases "
                        f"{self.model_leases!r}, strategy leases {self.strategy_leases!r}"
                    )
        except AssertionError as error:
            if observer is not None:
                observer.failed(self._failure(error))
            raise
        return actual

    def _failure(self, error: AssertionError) -> Failure:
        leases = tuple(lease for lease in self.model_leases if lease is not None)
        return Failure(
            machine="consensus",
            target=self.target,
            log=tuple(self.log),
            expected_state=StoreState(rows=(), leases=leases, facts=(), revision=0, changes=()),
            error=f"{type(error).__name__}: {error}",
            check=type(error).__name__,
            setup=CONSENSUS_RUNS,
        )

    def _set_clock(self, ms: int) -> None:
        if ms > self.clock.now_ms():
            self.clock.set(ms)
            self.log.append(ClockSet(ms))

    def _at(self, selector: str, run: str, who: Any) -> int:
        now = self.world.time(selector, run, who)
        if selector.startswith(("hb", "claim")):
            self._set_clock(now - self.world.offset(who))
        return now

    # -- building calls --------------------------------------------------------------------

    def _build(
        self,
        method: str,
        run: str,
        actor: object,
        at: str,
        token: str,
        evidence: str,
        observer: int,
    ) -> Call:
        """One strategy call built from selectors (unused ones are ignored)."""
        run = self.world.run(run)
        who = self.world.actor(actor, run)
        if method in ("claim", "heartbeat", "reconfirm"):
            role = "claimant" if method == "claim" else "owner"
            return call(method, ("run_id", run), (role, who), ("now_ms", self._at(at, run, who)))
        if method == "steal":
            now = self._at(at, run, who)
            row = self.world.row(run)
            subject = row.owner if row is not None else None
            proof = self.world.evidence(evidence, subject, who, now)
            if proof is None:
                proof = self.world.evidence("fit", subject, who, now)
            return call(
                method, ("run_id", run), ("claimant", who), ("now_ms", now), ("evidence", proof)
            )
        if method == "activate":
            return call(
                method,
                ("run_id", run),
                ("owner", who),
                ("granted_at_ms", self.world.token(token, run)),
                ("now_ms", self.world.reading(who)),
            )
        if method == "recover":
            witness = self.world.process(observer)
            now = self._at(at, run, witness)
            proof = self.world.evidence(evidence, who, witness, now)
            if proof is None:
                proof = self.world.evidence("fit", who, witness, now)
            return call(
                method,
                ("run_id", run),
                ("stale_claimant", who),
                ("granted_at_ms", self.world.token(token, run)),
                ("observer", witness),
                ("now_ms", now),
                ("evidence", proof),
            )
        if method == "release_claim":
            return call(
                method,
                ("run_id", run),
                ("claimant", who),
                ("granted_at_ms", self.world.token(token, run)),
            )
        if method in ("release_ownership", "guard"):
            return call(method, ("run_id", run), ("owner", who))
        raise ValueError(method)

    # -- rules -------------------------------------------------------------------------------

    @initialize(offsets=st.tuples(*[st.sampled_from(OFFSETS[:6])] * PROCESS_COUNT))
    def setup(self, offsets: tuple[int, ...]) -> None:
        """Give each process its clock offset (``offsets``, one per process; strategies take any
        reading)."""
        self.world.offsets = offsets

    @rule(run=FREE, actor=st.sampled_from(CLAIMERS), at=st.sampled_from(TIMES))
    def claim(self, run: str, actor: object, at: str) -> None:
        """``claim`` of the free ``run`` by ``actor`` at ``at``."""
        self._transact([self._build("claim", run, actor, at, "claim", "fit", 0)])

    @rule(
        run=OWNED,
        actor=st.sampled_from(CLAIMERS),
        at=st.sampled_from(TIMES),
        evidence=st.sampled_from(EVIDENCE),
    )
    def steal(self, run: str, actor: object, at: str, evidence: str) -> None:
        """``steal`` of the owned ``run`` by ``actor`` at ``at`` with ``evidence`` about its
        owner."""
        self._transact([self._build("steal", run, actor, at, "claim", evidence, 0)])

    @rule(run=CLAIMED, actor=st.sampled_from(CLAIMANTS), token=st.sampled_from(TOKENS))
    def activate(self, run: str, actor: object, token: str) -> None:
        """``activate`` of the claimed ``run`` by ``actor`` with the grant time ``token``."""
        self._transact([self._build("activate", run, actor, "reading", token, "fit", 0)])

    @rule(
        run=OWNED,
        actor=st.sampled_from(ACTORS),
        at=st.sampled_from(RENEW_TIMES),
        method=st.sampled_from(("heartbeat", "reconfirm")),
    )
    def renew(self, run: str, actor: object, at: str, method: str) -> None:
        """``heartbeat`` or ``reconfirm`` (``method``) of the owned ``run`` by ``actor`` at
        ``at``."""
        self._transact([self._build(method, run, actor, at, "claim", "fit", 0)])

    @rule(
        run=CLAIMED,
        stale=st.sampled_from(CLAIMANTS),
        token=st.sampled_from(TOKENS),
        observer=PROCESSES,
        at=st.sampled_from(RECOVER_TIMES),
        evidence=st.sampled_from(EVIDENCE),
    )
    def recover(
        self, run: str, stale: object, token: str, observer: int, at: str, evidence: str
    ) -> None:
        """``recover`` of the claim on ``run`` held by ``stale`` with the grant time ``token``,
        by the process ``observer`` at ``at`` with ``evidence`` about the claimant."""
        self._transact([self._build("recover", run, stale, at, token, evidence, observer)])

    @rule(run=CLAIMED, actor=st.sampled_from(CLAIMANTS), token=st.sampled_from(TOKENS))
    def release_claim(self, run: str, actor: object, token: str) -> None:
        """``release_claim`` of the claim on ``run`` by ``actor`` with the grant time ``token``."""
        self._transact([self._build("release_claim", run, actor, "reading", token, "fit", 0)])

    @rule(run=OWNED, actor=st.sampled_from(ACTORS))
    def release_ownership(self, run: str, actor: object) -> None:
        """``release_ownership`` of the owned ``run`` by ``actor``."""
        self._transact([self._build("release_ownership", run, actor, "reading", "claim", "", 0)])

    @precondition(lambda self: callable(getattr(self.strategy, "heartbeat_many", None)))
    @rule(
        runs=st.lists(st.sampled_from(CONSENSUS_RUNS), unique=True, min_size=1),
        actor=st.sampled_from(ACTORS),
        at=st.sampled_from(RENEW_TIMES),
    )
    def heartbeat_many(self, runs: list[str], actor: object, at: str) -> None:
        """The strategy's optional batch renewal of ``runs`` (in run id order, as the store
        passes them) by ``actor`` at ``at``: it answers for each run what ``heartbeat`` alone
        would, in batches whose leases are all held, all lost, or mixed."""
        anchor = self.world.run(runs[0])
        who = self.world.actor(actor, anchor)
        run_ids = sorted(self.world.run(run) for run in runs)
        op = call(
            "heartbeat_many",
            ("run_ids", run_ids),
            ("owner", who),
            ("now_ms", self._at(at, anchor, who)),
        )
        self._transact([op])

    @rule(run=OWNED, actor=st.sampled_from(ACTORS))
    def guard(self, run: str, actor: object) -> None:
        """``guard`` of the owned ``run`` for ``actor``: passes only for the holder, else
        ``fence_lost``."""
        self._transact([self._build("guard", run, actor, "reading", "claim", "", 0)])

    @rule(
        run=FREE,
        method=st.sampled_from(SINGLE_CALLS),
        actor=st.sampled_from(CLAIMANTS),
        token=st.sampled_from(TOKENS),
        commit=st.booleans(),
    )
    def claim_then(self, run: str, method: str, actor: object, token: str, commit: bool) -> None:
        """Two calls in one transaction: a claim of the free ``run`` by a process, then
        ``method`` by ``actor`` with the grant time ``token`` (by default on that fresh
        claim), committed when ``commit``, else rolled back."""
        run = self.world.run(run)
        who = self.world.process(0)
        now = self.clock.now_ms()
        first = call("claim", ("run_id", run), ("claimant", who), ("now_ms", now))
        # Resolve the second call's selectors as if the claim were already made.
        seen = self.world.rows
        self.world.rows = {**seen, run: _lease_row(Lease(run, None, None, None, who, now))}
        try:
            second = self._build(method, run, actor, "reading", token, "fit", 1)
        finally:
            self.world.rows = seen
        self._transact([first, second], rollback=not commit)

    @rule(
        run=ANY,
        method=st.sampled_from(SINGLE_CALLS),
        actor=st.sampled_from(ACTORS),
        at=st.sampled_from(TIMES),
        token=st.sampled_from(TOKENS),
        evidence=st.sampled_from(EVIDENCE),
    )
    def rolled_back(
        self, run: str, method: str, actor: object, at: str, token: str, evidence: str
    ) -> None:
        """One call of ``method`` on ``run`` by ``actor`` at ``at`` (with ``token`` and
        ``evidence`` where it takes them) in a transaction that then rolls back: no lease may
        change."""
        self._transact([self._build(method, run, actor, at, token, evidence, 2)], rollback=True)

    @rule(
        run=OWNED,
        thief=PROCESSES,
        evidence=st.sampled_from(("fit", "lease-expired")),
        edge=st.sampled_from(TAKEOVER_EDGES),
        meanwhile=st.sampled_from(MEANWHILE),
    )
    def takeover(self, run: str, thief: int, evidence: str, edge: int, meanwhile: str) -> None:
        """At the owner's staleness edge of ``run`` (``edge``: one past, on, or one before), the
        process ``thief`` steals with ``evidence``; ``meanwhile`` the owner may heartbeat,
        reconfirm or let go, or the thief may give up; then the thief activates."""
        run = self.world.run(run)
        row = self.world.row(run)
        if row is None or row.owner is None:
            # Nobody owns it yet: let another process take it first.
            self.own(run, (thief + 1) % PROCESS_COUNT, "none")
            row = self.world.row(run)
        if row is None or row.owner is None or row.heartbeat_at_ms is None:
            return
        self._set_clock(row.heartbeat_at_ms + 30_000 + edge)
        now = self.clock.now_ms()
        who = self.world.process(thief)
        owner = row.owner
        proof = self.world.evidence(evidence, owner, who, now)
        steal = call(
            "steal", ("run_id", run), ("claimant", who), ("now_ms", now), ("evidence", proof)
        )
        self._transact([steal])
        if meanwhile in ("heartbeat", "reconfirm"):
            self._transact([call(meanwhile, ("run_id", run), ("owner", owner), ("now_ms", now))])
        elif meanwhile == "release_ownership":
            self._transact([call(meanwhile, ("run_id", run), ("owner", owner))])
        elif meanwhile == "release_claim":
            self._transact(
                [call(meanwhile, ("run_id", run), ("claimant", who), ("granted_at_ms", now))]
            )
        promote = call(
            "activate", ("run_id", run), ("owner", who), ("granted_at_ms", now), ("now_ms", now)
        )
        self._transact([promote])

    @rule(
        run=FREE,
        process=PROCESSES,
        heartbeat=st.sampled_from(("none", "once", "late")),
    )
    def own(self, run: str, process: int, heartbeat: str) -> None:
        """The process ``process`` claims the free ``run`` and activates its grant (each in its
        own transaction), then, as ``heartbeat`` says, heartbeats (``"once"``), heartbeats and
        then sees an older pulse arrive late (``"late"``), or does not (``"none"``)."""
        run = self.world.run(run)
        who = self.world.process(process)
        now = self.world.reading(who)
        claimed = self._transact(
            [call("claim", ("run_id", run), ("claimant", who), ("now_ms", now))]
        )
        grant = claimed[0]
        if not isinstance(grant, Granted):
            return
        activate = call(
            "activate",
            ("run_id", run),
            ("owner", who),
            ("granted_at_ms", grant.granted_at_ms),
            ("now_ms", now),
        )
        self._transact([activate])
        if heartbeat != "none":
            renew = call("heartbeat", ("run_id", run), ("owner", who), ("now_ms", now + 1000))
            self._transact([renew])
        if heartbeat == "late":
            late = call("heartbeat", ("run_id", run), ("owner", who), ("now_ms", now + 1))
            self._transact([late])

    @rule(
        run=FREE,
        claimant=PROCESSES,
        observer=PROCESSES,
        edge=st.sampled_from(EDGE_DELTAS),
        rollback=st.booleans(),
    )
    def recover_dead_claim(
        self, run: str, claimant: int, observer: int, edge: int, rollback: bool
    ) -> None:
        """The process ``claimant`` claims ``run`` and crashes; at its claim's staleness edge
        (``edge``: one past, on, or one before) the process ``observer`` recovers the claim,
        rolled back when ``rollback``."""
        run = self.world.run(run)
        who = self.world.process(claimant)
        now = self.clock.now_ms()
        claimed = self._transact(
            [call("claim", ("run_id", run), ("claimant", who), ("now_ms", now))]
        )
        if not isinstance(claimed[0], Granted):
            return
        self.world.restart(claimant)
        witness = self.world.process(observer)
        at = now + 30_000 + edge
        self._set_clock(at)
        recover = call(
            "recover",
            ("run_id", run),
            ("stale_claimant", who),
            ("granted_at_ms", now),
            ("observer", witness),
            ("now_ms", at),
            ("evidence", self.world.evidence("fit", who, witness, at)),
        )
        self._transact([recover], rollback=rollback)

    @rule(ms=st.sampled_from(ADVANCES))
    def advance(self, ms: int) -> None:
        """Move the clock ``ms`` forward."""
        self._set_clock(self.clock.now_ms() + ms)

    @rule(process=PROCESSES)
    def restart_process(self, process: int) -> None:
        """The process ``process`` crashes and starts again with a new nonce: its old identity is
        now a ghost."""
        say(f"process {process} restarts as {self.world.restart(process)!r}")


def consensus_comparison_for(
    consensus_factory: ConsensusFactory,
    capabilities: Capabilities = FULL_STORE,
    *,
    name: str = "strategy",
) -> type[ConsensusComparison]:
    """A ``ConsensusComparison`` subclass for ``consensus_factory`` (called with no arguments for
    a fresh strategy each program), with its ``capabilities``, named ``name`` in reports."""
    namespace: dict[str, Any] = {
        "consensus_factory": staticmethod(consensus_factory),
        "capabilities": capabilities,
        "target": name,
    }
    safe = "".join(ch if ch.isalnum() else "_" for ch in name)
    return type(f"ConsensusComparison_{safe}", (ConsensusComparison,), namespace)
