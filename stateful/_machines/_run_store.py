"""``RunStoreComparison``: the reference model and a store, side by side.

Each rule builds one operation from abstract choices (see ``_domain``), applies
it to ``ModelRunStore`` and to the store under test, and then checks, in this
order: the fence invariants of the store's new state and of its step; the
same for the model; that both answered the same (outcome values with ``==``,
errors by code and method); and that both hold the same whole state. Both
sides share one ``ManualClock``, moved only by rules.

A concrete comparison is a subclass naming its ``store_factory`` and
``capabilities``; ``comparison_for`` builds one.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import attrs
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    multiple,
    precondition,
    rule,
)

from runstore._clock import ManualClock
from runstore._outcomes import Activated, Claimed
from runstore._values import Lease, OwnerId, RunPage, RunRow, StoreState, TransitionGuard
from runstore.model import ModelRunStore

from .._base import _observe
from .._base._capabilities import FULL_STORE, Capabilities
from .._base._compare import (
    OutcomeMismatch,
    StateMismatch,
    describe_difference,
    public_state,
    without_leases,
)
from .._base._domain import (
    ACTORS,
    ADVANCES,
    CLAIMABLE_RUNS,
    CLAIMANTS,
    CLAIMED_RUNS,
    CLAIMERS,
    EDGE_DELTAS,
    EVIDENCE,
    EXPECTED,
    GUARDS,
    OFFSETS,
    PROCESS_COUNT,
    RECOVER_TIMES,
    RENEW_TIMES,
    RUN_IDS,
    RUN_OPTIONS,
    RUNNING_RUNS,
    START_MS,
    STATE_TEXTS,
    TIMES,
    TO_STATUSES,
    TOKENS,
    World,
    fresh,
)
from .._base._observe import ClockSet, Failure, Faulted, LogEntry, Performed, Reopened, say
from .._base._programs import programs_independent_of_callers_code
from .._base._steps import Call, Crashed, Raised, Step, call, perform
from .._checks._edits import column_edit_for, copyable, judge_column_edit
from .._checks._faults import (
    FAULT_BUDGET,
    FAULT_OPERATIONS,
    FAULTS,
    expected_fault_cause,
    fault_plan,
    fault_retry_policy,
    faulted_call,
    fired_faults,
    plan_faults,
)
from .._checks._invariants import (
    AdmissionViolation,
    InvariantViolation,
    ReferenceInvariantViolation,
    StoreCrashed,
    StoreInvariantsFailed,
    check_cause,
    check_page_walk,
    check_state,
    check_transition,
)
from .._checks._malformed import (
    EDGE_CASES,
    FINDING_WORK_MALFORMED_CASES,
    MALFORMED_CASES,
    SKEW_ALLOWANCE_MS,
    malformed_call,
    refused,
)
from .._targets._blocking import blocking_factory
from . import _reach
from ._steering import Steering
from ._tour import Tour

T = TypeVar("T")

StoreFactory = Callable[[ManualClock, Path], Any]

#: Texts a raw edit behind the store's back may leave in ``state_json``: each
#: is refused by admission, so reads of that run must fail with ``decode_failed``.
CORRUPT_TEXTS = ('{"v":"\\ud800"}', "[" * 130 + "]" * 130, '{"n":1e400}')

#: What happens between a steal and its activation.
INTERLEAVINGS = ("nothing", "heartbeat", "reconfirm", "suspended", "completed", "abandon")

RUN = st.sampled_from(RUN_IDS)
CLAIMABLE = st.sampled_from(CLAIMABLE_RUNS)
RUNNING = st.sampled_from(RUNNING_RUNS)
CLAIMED = st.sampled_from(CLAIMED_RUNS)
PROCESSES = st.sampled_from(tuple(range(PROCESS_COUNT)))

#: Single-use grant tokens: ``(run_id, claimant, claimed_at_ms)``.
Grant = tuple[str, OwnerId, int]

#: ``list_runs`` filters by name (``_listing`` turns one into keywords).
LISTINGS = (
    "all",
    "all",
    "pending",
    "running",
    "live",
    "settled",
    "claimable",
    "claimable-suspended",
    "stale-now",
    "stale-later",
    "claim-stale-later",
    "cancel-waiting",
    "cancel-not-waiting",
    "lineage",
    "parent",
)
PAGE_LIMITS = (1, 2, 3, 100)
#: ``claim_next``'s statuses (None: its default).
CLAIM_STATUSES: tuple[Any, ...] = (None, None, "pending", "suspended", ("suspended", "pending"))
#: ``claim_next_many``'s limits: small ones that leave runs behind, every run, and one refused.
CLAIM_LIMITS: tuple[int, ...] = (1, 2, 2, 3, 1000, 0)
#: A run id no run ever has, for ``heartbeat_many``'s missing runs.
MISSING_RUN = "never"
PURGE_LIMITS = (1000, 1000, 1, 2)
#: The calls of the admission table the ``malformed`` rule makes, in the table's order.
_ADMISSION_CASES = MALFORMED_CASES + EDGE_CASES


@attrs.define
class PageWalk:
    """A ``list_runs`` walk under way: its filters, the next cursor, the pages
    read, and the runs that matched when each page was read."""

    filters: dict[str, Any]
    after: str | None = None
    pages: list[RunPage] = attrs.field(factory=list)
    matching: list[list[str]] = attrs.field(factory=list)


class RunStoreComparison(Tour, Steering, RuleBasedStateMachine):
    """``ModelRunStore`` against ``store_factory``'s store, step by step.

    A Hypothesis state machine (build one for your factory with ``comparison_for``;
    ``run_conformance`` runs it). Every rule makes the same call on both sides, compares the
    answers (outcome values with ``==``, errors by code and method), then compares the states
    and checks the fence invariants on both; a difference raises the failing check, an
    ``AssertionError`` subclass.

    Rules draw *selectors* rather than raw values, resolved against the reference model's
    current state, so a printed program reads as intent and shrinks well: ``run`` is a run id
    (``a``, ``b``, ``lin``, ``lin-2``, ``fork``) or a run in a condition (``"claimable"``,
    ``"running"``, ``"claimed"``); ``actor`` (and ``claimant``, ``observer``, ``thief``,
    ``worker``, ``process``) is one of six processes (0 to 5, three hosts of two pids), the
    run's ``"owner"`` or ``"claimant"``, or a ``"ghost"`` (a crashed incarnation);
    ``expected`` is the snapshot passed (``"row"`` as read now, ``"as-row"`` the ``RunRow``
    itself, ``"stale"``, ``"pending"``, ``"malformed"``); ``at`` is the caller's reading (its
    own clock, or aimed at a heartbeat's or claim's staleness edge and the skew bound:
    ``"hb+1"``, ``"claim-1"``, ``"skew+1"``, ...); ``evidence`` is the evidence made
    (``"fit"``, one a millisecond off, a wrong kind or owner, ``"none"``); ``token`` is the
    claim token (the real one, one off, an old one).
    """

    budget_kind: ClassVar[str] = "store"
    """Which default budget ``run_conformance`` gives this machine: ``"store"``."""

    store_factory: ClassVar[StoreFactory | None] = None
    """The factory of the store under test (set by ``comparison_for``)."""
    capabilities: ClassVar[Capabilities] = Capabilities()
    """What the store under test can do (set by ``comparison_for``)."""
    target: ClassVar[str] = "store"
    """The name reports give the store under test."""
    raw_writer: ClassVar[Callable[[Any, str, str], bool] | None] = None
    """How to edit a row's state behind the store's back, or None (the corruption rule is off)."""

    grants = Bundle("grants")
    """The Hypothesis bundle of claims granted in this program: ``(run, claimant, token)``."""

    def __init__(self) -> None:
        programs_independent_of_callers_code()
        super().__init__()
        observer = _observe.current()
        if observer is not None:
            observer.example_started()
        factory = type(self).store_factory
        if factory is None:
            raise TypeError(f"{type(self).__name__} has no store_factory")
        self.clock = ManualClock(START_MS)
        """The store clock both sides share, a ``ManualClock``; rules move it."""
        self.world = World(self.clock)
        """The program's world: processes, their offsets and incarnations, and the selectors'
        resolution."""
        self.log: list[LogEntry] = []
        """Every step made so far, for the failure summary and the regression file."""
        self.tmp = Path(tempfile.mkdtemp(prefix="runstore-stateful-"))
        """The program's own folder, removed at teardown."""
        self.path = self.tmp / "store.db"
        """The path the store factory is given (inside ``tmp``)."""
        self.model = ModelRunStore(clock=self.clock)
        """The reference, a ``ModelRunStore`` on ``clock``."""
        self.store: Any = self._open_store()
        """The store under test."""
        self.open = True
        """Whether ``store`` is open (False during a crash's reopen)."""
        # (owner, model grant, store grant) per run, after a reopen rebuilt a lease.
        self.aliases: dict[str, tuple[OwnerId, int | None, int | None]] = {}
        """Grant times a reopen rebuilt from a row's heartbeat, by run id: ``(owner, model grant,
        store grant)``."""
        self.walk: PageWalk | None = None
        """The ``list_runs`` walk under way, or None."""
        self.failed = False
        """True once a check failed in this program."""
        self.corrupted = False
        """True once a row was corrupted on purpose."""
        self.column_edits = 0
        """How many column edits ``corrupt_row`` made (each picks the next kind)."""
        self.model_state = self._model_view()
        """The reference's state after the last step."""
        self.store_state = self._store_view()
        """The store's state after the last step, as the capabilities let it be read."""
        self.world.observe(self.model_state)

    def _open_store(self) -> Any:
        factory = type(self).store_factory
        assert factory is not None
        store = factory(self.clock, self.path)
        if self.capabilities.fault_injection:
            # Transient faults are replayed at once, within a budget of three.
            store._retry_policy = fault_retry_policy()
        return store

    def teardown(self) -> None:
        """End the program: unless a check already failed or rows were corrupted on purpose, run
        the store's own ``check_invariants`` and the tour of rare situations, then close the
        store and remove its folder."""
        try:
            if self.open:
                try:
                    if not (self.failed or self.corrupted):
                        self._store_checks_itself()
                        self._tour_last()
                finally:
                    self.store.close()
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def _store_checks_itself(self) -> None:
        """At the end of a program that passed every check, the store's own
        ``check_invariants()`` (when it has one) must pass too (skipped once
        corrupt rows were planted on purpose), after the reach tour
        (``_tour``) has been made."""
        self._tour()
        for check in self._self_checks():
            self._self_check(check)

    def _self_checks(self) -> list[Callable[[], None]]:
        """The stores' own ``check_invariants``, each a call with no arguments."""
        check = getattr(self.store, "check_invariants", None)
        return [check] if callable(check) else []

    def _self_check(self, check: Callable[[], None]) -> None:
        try:
            check()
        except AssertionError as error:
            failure: AssertionError = StoreInvariantsFailed(
                f"the store's own check_invariants() failed at the end of a program "
                f"that passed every check: {_clipped(str(error))}"
            )
        except Exception as error:
            failure = StoreCrashed(
                f"check_invariants() raised {type(error).__name__}, "
                "where only AssertionError may report a broken invariant"
            )
        else:
            return
        observer = _observe.current()
        if observer is not None:
            observer.failed(self._failure(failure))
        raise failure

    # -- views ---------------------------------------------------------------------

    def _view(self, target: Any) -> StoreState:
        caps = self.capabilities
        state = target.state() if caps.whole_state else public_state(target, RUN_IDS)
        if not caps.lease_introspection:
            state = without_leases(state)
        return state

    def _model_view(self) -> StoreState:
        caps = self.capabilities
        if caps.whole_state:
            state: StoreState = self.model.state()
        else:
            state = public_state(self.model, RUN_IDS)
        return state if caps.lease_introspection else without_leases(state)

    def _store_view(self) -> StoreState:
        return self._view(self.store)

    def _forget_aliases(self, step: Step) -> None:
        """An alias holds for the grant a reopen rebuilt, and only while it
        lasts: not once the owner has let the run go, nor after a new
        activation (a later grant by the same owner at the same time as the
        rebuilt one would otherwise be read back as the alias)."""
        held = {(lease.run_id, lease.owner) for lease in self.model_state.leases}
        renewed = step.call.run_id if isinstance(step.outcome, Activated) else None
        self.aliases = {
            run: alias
            for run, alias in self.aliases.items()
            if (run, alias[0]) in held and run != renewed
        }

    def _aliased(self, state: StoreState) -> StoreState:
        """The model's state as the store may legitimately report it after a
        reopen rebuilt leases (an owner's grant time read back as its heartbeat)."""
        if not self.aliases or not state.leases:
            return state
        leases = []
        for lease in state.leases:
            alias = self.aliases.get(lease.run_id)
            if alias is not None and (lease.owner, lease.granted_at_ms) == alias[:2]:
                lease = attrs.evolve(lease, granted_at_ms=alias[2])
            leases.append(lease)
        return attrs.evolve(state, leases=tuple(leases))

    # -- the differential step -----------------------------------------------------

    def _do(self, op: Call, *, admission: bool | None = None) -> Any:
        """Apply ``op`` to both sides and run every check; with ``admission``,
        the suite's own verdict on the input too (True: it must be admitted,
        False: refused with ``invalid_run``)."""
        model_out = perform(self.model, op)
        store_out = perform(self.store, op)
        self.log.append(Performed(op, model_out))
        ahead = _reading_ahead(op, self.clock.now_ms())
        if admission is None and ahead is not None and ahead > SKEW_ALLOWANCE_MS:
            admission = False  # past the allowance: refused, whatever else is wrong
        self._settle(
            Step(op, model_out),
            Step(op, store_out),
            admission=admission,
            at_bound=ahead == SKEW_ALLOWANCE_MS,
        )
        return model_out

    def _settle(
        self,
        model_step: Step,
        store_step: Step,
        *,
        admission: bool | None = None,
        at_bound: bool = False,
    ) -> None:
        before_model, before_store = self.model_state, self.store_state
        _reach.record(model_step.call, model_step.outcome, before_model, self.clock.now_ms())
        self.model_state = self._model_view()
        self.store_state = self._store_view()
        self.world.observe(self.model_state)
        if self.aliases:
            self._forget_aliases(model_step)
        observer = _observe.current()
        if observer is not None:
            observer.step()

        def shown() -> str:
            text = f"{model_step.call.describe()} -> {model_step.outcome!r}"
            if store_step.outcome != model_step.outcome:
                text += f"  [store: {store_step.outcome!r}]"
            return text

        say(shown)
        caps = self.capabilities
        leases = caps.lease_introspection and caps.whole_state
        try:
            # The reference first: an invariant it breaks is the suite's defect,
            # and must never be reported against the store.
            check_reference(before_model, self.model_state, model_step, leases=leases)
            _check_outcome_kind(model_step, store_step, admission, at_bound=at_bound)
            check_state(self.store_state, leases=leases)
            check_transition(before_store, self.store_state, store_step, leases=leases)
            if not _same_outcome(model_step.outcome, store_step.outcome):
                raise OutcomeMismatch(
                    f"{model_step.call.describe()}: reference answered "
                    f"{model_step.outcome!r}, store answered {store_step.outcome!r}"
                )
            expected = self._aliased(self.model_state)
            if expected != self.store_state:
                say(f"reference state: {expected!r}")
                say(f"store state: {self.store_state!r}")
                raise StateMismatch(
                    f"after {model_step.call.describe()}:\n"
                    + describe_difference(expected, self.store_state)
                )
        except AssertionError as error:
            self.failed = True
            if observer is not None:
                observer.failed(self._failure(error))
            raise

    def _judged(self, check: Callable[[], T]) -> T:
        """``check()``, a check outside the differential step: its failure is
        reported like a step's (the program, both sides) and ends the program."""
        try:
            return check()
        except AssertionError as error:
            self.failed = True
            observer = _observe.current()
            if observer is not None:
                observer.failed(self._failure(error))
            raise

    def _failure(self, error: AssertionError) -> Failure:
        return Failure(
            machine="store",
            target=self.target,
            log=tuple(self.log),
            expected_state=self._aliased(self.model_state),
            error=f"{type(error).__name__}: {error}",
            check=type(error).__name__,
        )

    def _at(self, selector: str, run: str, who: OwnerId) -> int:
        """Resolve a time selector; for a staleness edge, first move the store
        clock forward so that ``who``'s own reading is that edge."""
        now = self.world.time(selector, run, who)
        if selector.startswith(("hb", "claim")):
            self._set_clock(now - self.world.offset(who))
        return now

    def _owned(self, run: str, process: int) -> RunRow | None:
        """The run's row, after ``process`` took ownership of it if it was
        pending or suspended and unclaimed (so a scenario can start anywhere)."""
        row = self.world.row(run)
        if row is not None and row.status in ("pending", "suspended") and row.claim is None:
            self._do(
                call(
                    "claim_and_own",
                    ("run_id", run),
                    ("expected", row.snapshot),
                    ("owner", self.world.process(process)),
                    ("now_ms", self.clock.now_ms()),
                )
            )
            row = self.world.row(run)
        return row

    def _with_evidence(
        self, run: str, actor: object, expected: str, at: str, evidence: str
    ) -> tuple[str, OwnerId, int, Any, Any]:
        """The arguments of a takeover attempt: run, actor, reading, snapshot, evidence."""
        run = self.world.run(run)
        who = self.world.actor(actor, run)
        now = self._at(at, run, who)
        snapshot = self.world.expected(expected, run)
        proof = self.world.evidence(evidence, _subject(snapshot, self.world, run), who, now)
        return run, who, now, snapshot, proof

    def _set_clock(self, ms: int) -> None:
        if ms > self.clock.now_ms():
            self.clock.set(ms)
            self.log.append(ClockSet(ms))
            say(f"clock -> {ms}")

    # -- setup -----------------------------------------------------------------------

    @initialize(
        offsets=st.tuples(*[st.sampled_from(OFFSETS)] * PROCESS_COUNT),
        more=st.lists(st.sampled_from(("lin-2", "fork")), unique=True, max_size=2),
    )
    def setup(self, offsets: tuple[int, ...], more: list[str]) -> None:
        """Give each process its clock offset (``offsets``, one per process, at and around the
        skew allowance) and create the runs ``a``, ``b`` and ``lin``, and those ``more`` names
        (``lin-2``, the lineage's second round; ``fork``, a child of ``a``)."""
        self.world.offsets = offsets
        say(f"owner clock offsets: {offsets}")
        for run_id in ("a", "b", "lin", *more):
            options = RUN_OPTIONS[run_id]
            self._do(call("create", ("run_id", run_id), ("state_json", STATE_TEXTS[0]), **options))

    # -- creation and reads ----------------------------------------------------------

    @rule(
        run=RUN,
        variant=st.sampled_from(("plain", "round-2", "orphan", "self-parent")),
        state=st.sampled_from(STATE_TEXTS),
    )
    def create(self, run: str, variant: str, state: str) -> None:
        """``create`` the run ``run`` with ``state`` (one of a few JSON texts, NUL escapes and
        astral characters included) in the ``variant`` asked: ``"plain"`` (its usual options),
        ``"round-2"`` (a second round of ``lin``), ``"orphan"`` (a parent that does not exist)
        or ``"self-parent"``. Creating an id twice answers ``constraint`` on both sides."""
        options: dict[str, Any] = dict(RUN_OPTIONS[run])
        if variant == "round-2":
            options = {"lineage_id": "lin", "round_ordinal": 2}
        elif variant == "orphan":
            options = {"parent_run_id": "nobody"}
        elif variant == "self-parent":
            options = {"parent_run_id": run}
        self._do(call("create", ("run_id", run), ("state_json", state), **options))

    @rule(
        run=RUN,
        what=st.sampled_from(("get", "lineage", "latest_round", "ownership_facts", "changes")),
    )
    def read(self, run: str, what: str) -> None:
        """A read of ``run``: ``what`` is ``get``, ``lineage``, ``latest_round``,
        ``ownership_facts`` or ``changes`` (after a revision a little behind)."""
        if what == "changes":
            revision = max(0, self.model_state.revision - 2)
            self._do(call("changes", ("after_revision", revision)))
        else:
            self._do(call(what, ("run_id", run)))

    # -- claims and ownership --------------------------------------------------------

    @rule(
        target=grants,
        run=CLAIMABLE,
        actor=st.sampled_from(CLAIMERS),
        expected=st.sampled_from(EXPECTED),
        at=st.sampled_from(TIMES),
    )
    def claim(self, run: str, actor: object, expected: str, at: str) -> Any:
        """``claim`` of ``run`` by ``actor`` with the snapshot ``expected`` at ``at``; a granted
        claim goes to the ``grants`` bundle for a later activation or abandonment."""
        run = self.world.run(run)
        who = self.world.actor(actor, run)
        now = self._at(at, run, who)
        snapshot = self.world.expected(expected, run)
        out = self._do(
            call(
                "claim",
                ("run_id", run),
                ("expected", snapshot),
                ("claimant", who),
                ("now_ms", now),
            )
        )
        return _grant(run, who, out)

    @rule(
        run=st.sampled_from((*CLAIMABLE_RUNS, "running", "running")),
        actor=st.sampled_from(CLAIMERS),
        expected=st.sampled_from(EXPECTED),
        at=st.sampled_from(TIMES),
        evidence=st.sampled_from(EVIDENCE),
    )
    def claim_and_own(self, run: str, actor: object, expected: str, at: str, evidence: str) -> None:
        """``claim_and_own`` of ``run`` by ``actor`` with the snapshot ``expected`` at ``at``,
        with ``evidence`` about the run's owner (or none)."""
        run, who, now, snapshot, proof = self._with_evidence(run, actor, expected, at, evidence)
        self._do(
            call(
                "claim_and_own",
                ("run_id", run),
                ("expected", snapshot),
                ("owner", who),
                ("now_ms", now),
                evidence=proof,
            )
        )

    @rule(
        target=grants,
        run=RUNNING,
        actor=st.sampled_from(CLAIMERS),
        expected=st.sampled_from(EXPECTED),
        at=st.sampled_from(TIMES),
        evidence=st.sampled_from(EVIDENCE),
    )
    def steal(self, run: str, actor: object, expected: str, at: str, evidence: str) -> Any:
        """``steal`` of ``run`` by ``actor`` with the snapshot ``expected`` at ``at`` and
        ``evidence`` about its owner; a granted claim goes to the ``grants`` bundle."""
        run, who, now, snapshot, proof = self._with_evidence(run, actor, expected, at, evidence)
        out = self._do(
            call(
                "steal",
                ("run_id", run),
                ("expected", snapshot),
                ("claimant", who),
                ("now_ms", now),
                ("evidence", proof),
            )
        )
        return _grant(run, who, out)

    @rule(
        run=CLAIMED,
        actor=st.sampled_from(CLAIMANTS),
        token=st.sampled_from(TOKENS),
        expected=st.sampled_from(EXPECTED),
    )
    def activate(self, run: str, actor: object, token: str, expected: str) -> None:
        """``activate`` of ``run``'s claim by ``actor`` with the claim token ``token`` and the
        snapshot ``expected``."""
        run = self.world.run(run)
        who = self.world.actor(actor, run)
        self._do(
            call(
                "activate",
                ("run_id", run),
                ("claimant", who),
                ("claimed_at_ms", self.world.token(token, run)),
                ("expected", self.world.expected(expected, run)),
            )
        )

    @rule(grant=consumes(grants), expected=st.sampled_from(("row", "stale", "as-row")))
    def activate_grant(self, grant: Grant, expected: str) -> None:
        """``activate`` of a claim this program was granted (``grant``, taken from the bundle:
        run, claimant and token), with the snapshot ``expected`` (``"row"``, ``"stale"`` or
        ``"as-row"``)."""
        run, who, token = grant
        self._do(
            call(
                "activate",
                ("run_id", run),
                ("claimant", who),
                ("claimed_at_ms", token),
                ("expected", self.world.expected(expected, run)),
            )
        )

    @rule(run=CLAIMED, actor=st.sampled_from(CLAIMANTS), token=st.sampled_from(TOKENS))
    def abandon_claim(self, run: str, actor: object, token: str) -> None:
        """``abandon_claim`` of ``run``'s claim by ``actor`` with the token ``token``."""
        run = self.world.run(run)
        who = self.world.actor(actor, run)
        self._do(
            call(
                "abandon_claim",
                ("run_id", run),
                ("claimant", who),
                ("claimed_at_ms", self.world.token(token, run)),
            )
        )

    @rule(grant=consumes(grants))
    def abandon_grant(self, grant: Grant) -> None:
        """``abandon_claim`` of a claim this program was granted (``grant``, taken from the
        bundle)."""
        run, who, token = grant
        self._do(
            call("abandon_claim", ("run_id", run), ("claimant", who), ("claimed_at_ms", token))
        )

    @rule(
        run=CLAIMED,
        stale=st.sampled_from(CLAIMANTS),
        token=st.sampled_from(TOKENS),
        observer=PROCESSES,
        at=st.sampled_from(RECOVER_TIMES),
        evidence=st.sampled_from(EVIDENCE),
    )
    def recover_claim(
        self, run: str, stale: object, token: str, observer: int, at: str, evidence: str
    ) -> None:
        """``recover_claim`` of ``run``'s claim as held by ``stale`` with the token ``token``, by
        the process ``observer`` at ``at`` with ``evidence`` about the claimant."""
        run = self.world.run(run)
        claimant = self.world.actor(stale, run)
        who = self.world.process(observer)
        now = self._at(at, run, who)
        proof = self.world.evidence(evidence, claimant, who, now)
        self._do(
            call(
                "recover_claim",
                ("run_id", run),
                ("stale_claimant", claimant),
                ("claimed_at_ms", self.world.token(token, run)),
                ("observer", who),
                ("now_ms", now),
                ("evidence", proof),
            )
        )

    @rule(
        run=RUNNING,
        actor=st.sampled_from(ACTORS),
        at=st.sampled_from(RENEW_TIMES),
        method=st.sampled_from(("heartbeat", "reconfirm")),
    )
    def renew(self, run: str, actor: object, at: str, method: str) -> None:
        """``heartbeat`` or ``reconfirm`` (``method``) of ``run`` by ``actor`` at ``at`` (its
        reading, behind, or at the skew bound)."""
        run = self.world.run(run)
        who = self.world.actor(actor, run)
        now = self._at(at, run, who)
        self._do(call(method, ("run_id", run), ("owner", who), ("now_ms", now)))

    @rule(
        run=RUNNING,
        actor=st.sampled_from(ACTORS),
        to_status=st.sampled_from(TO_STATUSES),
        state=st.sampled_from((None, None, *STATE_TEXTS)),
        guard=st.sampled_from(GUARDS),
    )
    def transition_owned(
        self, run: str, actor: object, to_status: str, state: str | None, guard: str | None
    ) -> None:
        """``transition_owned`` of ``run`` by ``actor`` to ``to_status`` (``pending`` included,
        which is refused), with new state ``state`` or none, under ``guard`` (``"absent"``,
        ``"present"``, none, or a malformed one)."""
        run = self.world.run(run)
        who = self.world.actor(actor, run)
        self._do(
            call(
                "transition_owned",
                ("run_id", run),
                ("owner", who),
                ("to_status", fresh(to_status)),
                state_json=state,
                guard=None if guard is None else TransitionGuard(guard),  # type: ignore[arg-type]
            )
        )

    # -- cancellation ------------------------------------------------------------------

    @rule(
        run=RUN,
        lineage=st.booleans(),
        at=st.sampled_from((0, -1, 1, 50_000, -200_000)),
    )
    def request_cancel(self, run: str, lineage: bool, at: int) -> None:
        """``request_cancel``, or ``request_cancel_lineage`` when ``lineage``, of ``run`` at the
        store clock plus ``at`` (no skew bound applies; a negative time is refused)."""
        method = "request_cancel_lineage" if lineage else "request_cancel"
        self._do(call(method, ("run_id", run), ("now_ms", self.clock.now_ms() + at)))

    @rule(run=RUNNING, actor=st.sampled_from(ACTORS), at=st.sampled_from((0, 1, -1)))
    def acknowledge_cancel(self, run: str, actor: object, at: int) -> None:
        """``acknowledge_cancel`` of ``run`` by ``actor`` at the store clock plus ``at``."""
        run = self.world.run(run)
        who = self.world.actor(actor, run)
        self._do(
            call(
                "acknowledge_cancel",
                ("run_id", run),
                ("owner", who),
                ("now_ms", self.clock.now_ms() + at),
            )
        )

    @rule(
        run=RUNNING,
        acknowledgements=st.sampled_from((1, 2, 0)),
        guard=st.sampled_from(("present", "absent", None)),
        to_status=st.sampled_from(("cancelled", "completed", "suspended")),
    )
    def cancellation(
        self, run: str, acknowledgements: int, guard: str | None, to_status: str
    ) -> None:
        """Someone asks to cancel the running ``run``; its owner acknowledges
        ``acknowledgements`` times (0 to 2: the first acknowledgement is kept, a repeat still
        writes) and settles it as ``to_status`` under ``guard`` (a required cancellation
        request, a forbidden one, or none)."""
        run = self.world.run(run)
        row = self._owned(run, 0)
        owner = self.world.actor("owner", run)
        now = self.clock.now_ms()
        self._do(call("request_cancel", ("run_id", run), ("now_ms", now)))
        for tick in range(acknowledgements):
            self._do(
                call(
                    "acknowledge_cancel",
                    ("run_id", run),
                    ("owner", owner),
                    ("now_ms", now + tick),
                )
            )
        if row is None or row.owner is None:
            return
        self._do(
            call(
                "transition_owned",
                ("run_id", run),
                ("owner", owner),
                ("to_status", fresh(to_status)),
                guard=None if guard is None else TransitionGuard(guard),  # type: ignore[arg-type]
            )
        )

    # -- composite rules for rare races ----------------------------------------------

    @rule(run=CLAIMABLE, actor=PROCESSES)
    def claim_and_activate(self, run: str, actor: int) -> None:
        """A claim of ``run`` by the process ``actor`` with the current snapshot, then its
        activation."""
        run = self.world.run(run)
        who = self.world.process(actor)
        snapshot = self.world.expected("row", run)
        out = self._do(
            call(
                "claim",
                ("run_id", run),
                ("expected", snapshot),
                ("claimant", who),
                ("now_ms", self.clock.now_ms()),
            )
        )
        if isinstance(out, Claimed):
            self._do(
                call(
                    "activate",
                    ("run_id", run),
                    ("claimant", who),
                    ("claimed_at_ms", out.claimed_at_ms),
                    ("expected", snapshot),
                )
            )

    @rule(
        run=RUNNING,
        thief=PROCESSES,
        evidence=st.sampled_from(("fit", "lease-expired", "fit", "fit-1")),
        meanwhile=st.sampled_from(INTERLEAVINGS),
        edge=st.sampled_from((1, 1, 0, -1)),
    )
    def takeover(self, run: str, thief: int, evidence: str, meanwhile: str, edge: int) -> None:
        """Move the clock to the staleness edge of the running ``run`` (``edge``: one past it, on
        it, or one before), have the process ``thief`` steal it with ``evidence``;
        ``meanwhile`` the old owner may heartbeat, reconfirm, suspend or settle, or the thief
        may give up; then the thief activates."""
        run = self.world.run(run)
        row = self._owned(run, (thief + 1) % PROCESS_COUNT)
        if row is None or row.owner is None or row.heartbeat_at_ms is None:
            return
        self._set_clock(row.heartbeat_at_ms + 30_000 + edge)
        now = self.clock.now_ms()
        who = self.world.process(thief)
        snapshot = row.snapshot
        proof = self.world.evidence(evidence, row.owner, who, now)
        out = self._do(
            call(
                "steal",
                ("run_id", run),
                ("expected", snapshot),
                ("claimant", who),
                ("now_ms", now),
                ("evidence", proof),
            )
        )
        if not isinstance(out, Claimed):
            return
        owner = row.owner
        if meanwhile in ("heartbeat", "reconfirm"):
            self._do(call(meanwhile, ("run_id", run), ("owner", owner), ("now_ms", now)))
        elif meanwhile in ("suspended", "completed"):
            self._do(
                call(
                    "transition_owned",
                    ("run_id", run),
                    ("owner", owner),
                    ("to_status", meanwhile),
                    state_json='{"settled":"meanwhile"}',
                )
            )
        elif meanwhile == "abandon":
            self._do(
                call(
                    "abandon_claim",
                    ("run_id", run),
                    ("claimant", who),
                    ("claimed_at_ms", out.claimed_at_ms),
                )
            )
            # The old owner is still the owner (contract.md, Decided here 2b).
            self._do(call("heartbeat", ("run_id", run), ("owner", owner), ("now_ms", now)))
        self._do(
            call(
                "activate",
                ("run_id", run),
                ("claimant", who),
                ("claimed_at_ms", out.claimed_at_ms),
                ("expected", snapshot),
            )
        )
        if meanwhile in ("suspended", "completed"):
            # A claim left on a released run would make it unclaimable.
            self._do(
                call(
                    "claim",
                    ("run_id", run),
                    ("expected", self.world.expected("row", run)),
                    ("claimant", self.world.process((thief + 1) % PROCESS_COUNT)),
                    ("now_ms", now),
                )
            )

    @rule(run=RUNNING, gap=st.sampled_from((1, 1000, 15_000)))
    def delayed_pulse(self, run: str, gap: int) -> None:
        """The owner of ``run`` heartbeats, then an older pulse (sent ``gap`` ms earlier) arrives
        late: it is ``Updated`` but never moves the stamp back."""
        run = self.world.run(run)
        row = self.world.row(run)
        if row is None or row.owner is None:
            return
        owner = row.owner
        now = self.world.reading(owner)
        self._do(call("heartbeat", ("run_id", run), ("owner", owner), ("now_ms", now)))
        self._do(
            call("heartbeat", ("run_id", run), ("owner", owner), ("now_ms", max(0, now - gap)))
        )

    @rule(
        run=CLAIMABLE,
        claimant=PROCESSES,
        observer=PROCESSES,
        edge=st.sampled_from(EDGE_DELTAS),
    )
    def recover_dead_claim(self, run: str, claimant: int, observer: int, edge: int) -> None:
        """The process ``claimant`` claims ``run`` and crashes before activating; later the
        process ``observer`` clears the stale claim at its staleness edge (``edge``: one past
        it, on it, or one before)."""
        run = self.world.run(run)
        who = self.world.process(claimant)
        out = self._do(
            call(
                "claim",
                ("run_id", run),
                ("expected", self.world.expected("row", run)),
                ("claimant", who),
                ("now_ms", self.clock.now_ms()),
            )
        )
        if not isinstance(out, Claimed):
            return
        self.world.restart(claimant)
        witness = self.world.process(observer)
        self._set_clock(out.claimed_at_ms + 30_000 + edge)
        now = self.clock.now_ms()
        self._do(
            call(
                "recover_claim",
                ("run_id", run),
                ("stale_claimant", who),
                ("claimed_at_ms", out.claimed_at_ms),
                ("observer", witness),
                ("now_ms", now),
                ("evidence", self.world.evidence("fit", who, witness, now)),
            )
        )

    # -- finding work, batch renewal, purging -------------------------------------------

    def _listing(self, name: str) -> dict[str, Any]:
        """The keywords of the ``list_runs`` filter called ``name``, read now."""
        now = self.clock.now_ms()
        later = now + 30_001
        filters: dict[str, dict[str, Any]] = {
            "all": {},
            "pending": {"status": "pending"},
            "running": {"status": "running"},
            "live": {"status": ("running", "pending", "suspended")},
            "settled": {"status": ["completed", "failed", "cancelled"]},
            "claimable": {"claimable_at": now},
            "claimable-suspended": {"claimable_at": now, "status": "suspended"},
            "stale-now": {"stale_at": now},
            "stale-later": {"stale_at": later},
            "claim-stale-later": {"claim_stale_at": later},
            "cancel-waiting": {"cancel_requested": True},
            "cancel-not-waiting": {"cancel_requested": False},
            "lineage": {"lineage_id": "lin"},
            "parent": {"parent_run_id": "a"},
        }
        return filters[name]

    @precondition(lambda self: self.capabilities.finding_work)
    @rule(
        listing=st.sampled_from(LISTINGS),
        limit=st.sampled_from(PAGE_LIMITS),
        with_state=st.booleans(),
        resume=st.booleans(),
    )
    def list_page(self, listing: str, limit: int, with_state: bool, resume: bool) -> None:
        """A page of ``list_runs`` with the filters ``listing`` names, ``limit`` rows and
        ``with_state``; with ``resume``, the next page of the walk under way (other rules
        write between its pages). When a walk ends, a run that matched at every page must have
        been listed once, in order."""
        walk = self.walk
        if not (resume and walk is not None and walk.after is not None):
            walk = self.walk = PageWalk(self._listing(listing))
        op = call("list_runs", limit=limit, after=walk.after, with_state=with_state, **walk.filters)
        out = self._do(op)
        if not isinstance(out, RunPage):
            self.walk = None
            return
        everything = self.model.list_runs(limit=1000, **walk.filters)
        walk.pages.append(out)
        walk.matching.append([row.run_id for row in everything.runs])
        walk.after = out.next
        if out.next is None:
            self.walk = None
            self._judged(lambda: check_page_walk(walk.pages, walk.matching))

    @precondition(lambda self: self.capabilities.finding_work)
    @rule(
        actor=st.sampled_from((*range(PROCESS_COUNT), "ghost")),
        statuses=st.sampled_from(CLAIM_STATUSES),
        at=st.sampled_from(("reading", "reading", "behind", "skew", "skew+1")),
    )
    def claim_next(self, actor: object, statuses: Any, at: str) -> None:
        """``claim_next`` by ``actor`` at ``at`` over ``statuses``: the store may take any run
        the model could (the oldest unless others hold it); the model then takes the same one."""
        who = self.world.actor(actor, "a")
        now = self.world.time(at, "a", who)
        self._claim_next(call("claim_next", ("owner", who), ("now_ms", now), status=statuses))

    def _claim_next(self, op: Call) -> Any:
        """Apply ``claim_next`` to the store first, then to the model told to
        take the run the store took when the model could take it too."""
        statuses = op.get("status")
        try:
            candidates = (
                self.model.claim_next_candidates()
                if statuses is None
                else self.model.claim_next_candidates(status=statuses)
            )
        except Exception:  # an inadmissible status: both sides refuse it
            candidates = []
        store_out = perform(self.store, op)
        model_op = op
        if isinstance(store_out, RunRow) and store_out.run_id in candidates:
            model_op = Call(
                op.method, (*op.arguments, ("choose", store_out.run_id)), op.keywords | {"choose"}
            )
        model_out = perform(self.model, model_op)
        self.log.append(Performed(op, model_out))
        self._settle(Step(op, model_out), Step(op, store_out))
        return model_out

    @precondition(lambda self: self.capabilities.finding_work and self.capabilities.batch_claiming)
    @rule(
        actor=st.sampled_from((*range(PROCESS_COUNT), "ghost")),
        limit=st.sampled_from(CLAIM_LIMITS),
        statuses=st.sampled_from(CLAIM_STATUSES),
        at=st.sampled_from(("reading", "reading", "behind", "skew", "skew+1")),
    )
    def claim_next_many(self, actor: object, limit: int, statuses: Any, at: str) -> None:
        """``claim_next_many`` by ``actor`` at ``at`` taking up to ``limit`` runs of
        ``statuses``: the store may take any runs the model could (the oldest unless others
        hold them), oldest first and as many as there are up to ``limit``; the model then takes
        the same ones."""
        who = self.world.actor(actor, "a")
        now = self.world.time(at, "a", who)
        self._claim_next_many(
            call(
                "claim_next_many",
                ("owner", who),
                ("now_ms", now),
                ("limit", limit),
                status=statuses,
            )
        )

    def _claim_next_many(self, op: Call) -> Any:
        """Apply ``claim_next_many`` to the store first, then to the model told to take the
        runs the store took when the model could take them too (distinct candidates, oldest
        first, as many as it would take); anything else the model is not told, so it takes the
        oldest and the outcomes differ."""
        statuses = op.get("status")
        try:
            candidates = (
                self.model.claim_next_candidates()
                if statuses is None
                else self.model.claim_next_candidates(status=statuses)
            )
        except Exception:  # an inadmissible status: both sides refuse it
            candidates = []
        store_out = perform(self.store, op)
        model_op = op
        limit = op.get("limit")
        if (
            isinstance(store_out, list)
            and all(isinstance(row, RunRow) for row in store_out)
            and type(limit) is int
            and len(store_out) == min(limit, len(candidates))
        ):
            taken = [row.run_id for row in store_out]
            place = {rid: index for index, rid in enumerate(candidates)}
            if all(rid in place for rid in taken) and [place[rid] for rid in taken] == sorted(
                {place[rid] for rid in taken}
            ):
                model_op = Call(
                    op.method, (*op.arguments, ("choose", taken)), op.keywords | {"choose"}
                )
        model_out = perform(self.model, model_op)
        self.log.append(Performed(op, model_out))
        self._settle(Step(op, model_out), Step(op, store_out))
        return model_out

    @precondition(lambda self: self.capabilities.finding_work)
    @rule(
        actor=st.sampled_from(ACTORS),
        runs=st.lists(
            st.sampled_from((*RUN_IDS, MISSING_RUN)), unique=True, min_size=0, max_size=6
        ),
        at=st.sampled_from(RENEW_TIMES),
    )
    def heartbeat_many(self, actor: object, runs: list[str], at: str) -> None:
        """``heartbeat_many`` by ``actor`` at ``at`` over ``runs``, run ids in every state (owned
        by the caller or not, claimed, settled, missing), keys in the order asked."""
        anchor = self.world.run("running")
        who = self.world.actor(actor, anchor)
        now = self._at(at, anchor, who)
        # Distinct well-formed ids, a handful: admitted unless the reading
        # runs past the skew allowance (which ``_do`` holds to a refusal).
        within = now - self.clock.now_ms() <= SKEW_ALLOWANCE_MS
        op = call("heartbeat_many", ("owner", who), ("run_ids", runs), ("now_ms", now))
        self._do(op, admission=True if within else None)

    @precondition(lambda self: self.capabilities.finding_work)
    @rule(
        back=st.sampled_from((0, 0, 1, 1000, -1)),
        limit=st.sampled_from(PURGE_LIMITS),
    )
    def purge(self, back: int, limit: int) -> None:
        """``purge_settled`` of runs finished before now (minus ``back`` ms), up to ``limit``."""
        before = max(0, self.clock.now_ms() - back)
        self._do(
            call("purge_settled", ("before_ms", before), limit=None if limit == 1000 else limit)
        )

    @precondition(lambda self: self.capabilities.finding_work)
    @rule(back=st.sampled_from((0, 0, 1, 2, 5)), limit=st.sampled_from(PURGE_LIMITS))
    def compact(self, back: int, limit: int) -> None:
        """``compact_changes`` through the current revision (minus ``back``), up to ``limit``."""
        through = max(0, self.model_state.revision - back)
        self._do(
            call(
                "compact_changes",
                ("through_revision", through),
                limit=None if limit == 1000 else limit,
            )
        )

    @precondition(lambda self: self.capabilities.finding_work)
    @rule(run=CLAIMABLE, claimant=PROCESSES, worker=PROCESSES, activate=st.booleans())
    def claim_next_racing_a_claim(
        self, run: str, claimant: int, worker: int, activate: bool
    ) -> None:
        """The process ``claimant`` claims ``run`` (and, with ``activate``, activates it) while
        the process ``worker`` asks ``claim_next`` before and after: the claimed run is never
        taken twice."""
        run = self.world.run(run)
        who = self.world.process(claimant)
        snapshot = self.world.expected("row", run)
        now = self.clock.now_ms()
        out = self._do(
            call(
                "claim", ("run_id", run), ("expected", snapshot), ("claimant", who), ("now_ms", now)
            )
        )
        worker_id = self.world.process(worker)
        self._claim_next(call("claim_next", ("owner", worker_id), ("now_ms", now)))
        if activate and isinstance(out, Claimed):
            self._do(
                call(
                    "activate",
                    ("run_id", run),
                    ("claimant", who),
                    ("claimed_at_ms", out.claimed_at_ms),
                    ("expected", snapshot),
                )
            )
        self._claim_next(call("claim_next", ("owner", worker_id), ("now_ms", now)))

    @precondition(lambda self: self.capabilities.finding_work)
    @rule(run=CLAIMABLE, process=PROCESSES, ghost_first=st.booleans())
    def heartbeat_many_after_restart(self, run: str, process: int, ghost_first: bool) -> None:
        """The process ``process`` owns ``run`` and restarts: its new incarnation (same host and
        pid, a new nonce) must not renew what the crashed one held with ``heartbeat_many``
        over every run; the crashed one still can. ``ghost_first`` says which renews first."""
        run = self.world.run(run)
        self._owned(run, process)
        ghost = self.world.process(process)
        successor = self.world.restart(process)
        self._set_clock(self.clock.now_ms() + 1_000)
        now = self.clock.now_ms()
        order = (ghost, successor) if ghost_first else (successor, ghost)
        for who in order:
            self._do(
                call("heartbeat_many", ("owner", who), ("run_ids", list(RUN_IDS)), ("now_ms", now))
            )
            now += 1

    @precondition(lambda self: self.capabilities.finding_work)
    @rule(run=RUNNING, thief=PROCESSES, settle=st.sampled_from(("completed", "failed", None)))
    def purge_during_takeover(self, run: str, thief: int, settle: str | None) -> None:
        """The stale running ``run`` is stolen by the process ``thief``; before the thief
        activates, its old owner may settle it (``settle``: ``completed``, ``failed`` or not
        at all) and a purge runs (a live lineage round, a claimed or a running run is never
        purged); then the activation."""
        run = self.world.run(run)
        row = self._owned(run, (thief + 1) % PROCESS_COUNT)
        if row is None or row.owner is None or row.heartbeat_at_ms is None:
            return
        self._set_clock(row.heartbeat_at_ms + 30_001)
        now = self.clock.now_ms()
        who = self.world.process(thief)
        proof = self.world.evidence("fit", row.owner, who, now)
        out = self._do(
            call(
                "steal",
                ("run_id", run),
                ("expected", row.snapshot),
                ("claimant", who),
                ("now_ms", now),
                ("evidence", proof),
            )
        )
        if settle is not None:
            self._do(
                call(
                    "transition_owned", ("run_id", run), ("owner", row.owner), ("to_status", settle)
                )
            )
        self._set_clock(now + 1)
        self._do(call("purge_settled", ("before_ms", self.clock.now_ms())))
        if isinstance(out, Claimed):
            self._do(
                call(
                    "activate",
                    ("run_id", run),
                    ("claimant", who),
                    ("claimed_at_ms", out.claimed_at_ms),
                    ("expected", row.snapshot),
                )
            )

    # -- time, crashes, corruption, malformed input ------------------------------------

    @rule(ms=st.sampled_from(ADVANCES))
    def advance(self, ms: int) -> None:
        """Move the store clock ``ms`` forward (a second, a millisecond, or up to the staleness
        edges)."""
        self._set_clock(self.clock.now_ms() + ms)

    @rule(
        run=st.sampled_from(("running", "claimed", *RUN_IDS)),
        edge=st.sampled_from(("hb", "claim")),
        delta=st.sampled_from(EDGE_DELTAS),
    )
    def advance_to_edge(self, run: str, edge: str, delta: int) -> None:
        """Land the store clock on ``run``'s staleness edge for ``edge`` (``"hb"``: its
        heartbeat, ``"claim"``: its claim), ``stamp + 30000``, plus ``delta`` (one either
        side, or on it)."""
        run = self.world.run(run)
        row = self.world.row(run)
        stamp = None
        if row is not None:
            stamp = row.heartbeat_at_ms if edge == "hb" else row.claimed_at_ms
        if stamp is not None:
            self._set_clock(stamp + 30_000 + delta)

    @rule(process=PROCESSES)
    def restart_process(self, process: int) -> None:
        """The process ``process`` crashes (it stops heartbeating) and starts again with a new
        nonce: its old identity is now a ghost."""
        say(f"process {process} restarts as {self.world.restart(process)!r}")

    @precondition(lambda self: self.capabilities.reopen)
    @rule()
    def crash_store(self) -> None:
        """Close the store without ceremony and open it again on the same path."""
        self.store.close()
        self.open = False
        self.store = self._open_store()
        self.open = True
        self.log.append(Reopened())
        self._learn_aliases()
        op = Call("reopen")
        self._settle(Step(op, None), Step(op, None))

    def _learn_aliases(self) -> None:
        """Accept an owner's grant time that a reopen rebuilt from the row's
        heartbeat (the lease backfill rule); anything else must match.

        Each reopen rebuilds the leases again, so the aliases are learned anew:
        one an earlier reopen taught may no longer hold (the row's heartbeat
        has moved since, possibly onto the model's own grant time).
        """
        self.aliases = {}
        reopened = {lease.run_id: lease for lease in self._store_view().leases}
        rows = {row.run_id: row for row in self.model_state.rows}
        for lease in self.model_state.leases:
            other: Lease | None = reopened.get(lease.run_id)
            row = rows.get(lease.run_id)
            if (
                other is not None
                and row is not None
                and lease.owner is not None
                and other.owner == lease.owner
                and other.granted_at_ms != lease.granted_at_ms
                and other.granted_at_ms == row.heartbeat_at_ms
            ):
                self.aliases[lease.run_id] = (lease.owner, lease.granted_at_ms, other.granted_at_ms)

    @precondition(lambda self: self.raw_writer is not None and self.capabilities.whole_state)
    @rule(run=RUN, text=st.sampled_from(CORRUPT_TEXTS))
    def corrupt_row(self, run: str, text: str) -> None:
        """Write ``text`` as ``run``'s state behind the store's back (mirrored in the model):
        reads of that run must then fail with ``decode_failed``. First, on a copy of a SQLite
        adapter's file, break another column of the row, one that fits it: reads of the copy
        must refuse it and the store's own check must flag it."""
        row = self.world.row(run)
        if row is not None and copyable(self.store, self.path):
            edit = column_edit_for(row, self.column_edits)
            self.column_edits += 1
            factory = type(self).store_factory
            assert factory is not None
            now = self.clock.now_ms()
            self._judged(lambda: judge_column_edit(factory, self.path, now, row, edit))
        self._raw_write(run, text)
        self._do(call("get", ("run_id", run)))

    def _raw_write(self, run: str, text: str) -> None:
        """Write ``text`` as the run's state behind the store's back (and the
        model's)."""
        writer = type(self).raw_writer
        assert writer is not None
        self.corrupted = True
        op = call("raw_write_state", ("run_id", run), ("text", text))
        model_out = self.model.raw_write_state(run, text)
        store_out = writer(self.store, run, text)
        self.log.append(Performed(op, model_out))
        self._settle(Step(op, model_out), Step(op, store_out))

    @precondition(lambda self: self.capabilities.fault_injection)
    @rule(op=st.sampled_from(FAULT_OPERATIONS), fault=st.sampled_from(FAULTS))
    def faulted(self, op: str, fault: str) -> None:
        """The write ``op`` with the fault plan ``fault`` armed: a lasting failure (at a
        statement, in the strategy, at commit) must raise ``persistence_failed`` and leave no
        trace; transient ones within the retry budget must not change the outcome; as many as
        the budget must raise. A raised error's cause must say what failed."""
        self._faulted(faulted_call(op, self.world, self.clock.now_ms()), fault)

    def _faulted(self, built: Call, fault: str) -> None:
        """``built`` with the fault plan ``fault`` armed, judged as ``faulted`` says."""
        plan = fault_plan(fault)
        self.store._install_faults(plan)
        try:
            store_out = perform(self.store, built)
        finally:
            self.store._install_faults(None)
        fired = self._judged(lambda: fired_faults(plan, fault))
        lasting = any(not f.transient for f in fired) or (
            sum(f.transient for f in fired) >= FAULT_BUDGET
        )
        say(f"fault plan {fault!r}: fired {fired!r}")
        if lasting:
            model_out: Any = Raised("persistence_failed", built.method)
        else:
            model_out = perform(self.model, built)
        self.log.append(Faulted(plan_faults(fault), built, model_out))
        self._settle(Step(built, model_out), Step(built, store_out))
        if lasting:
            shown = f"{built.describe()} under fault plan {fault!r} (fired {fired!r})"
            self._judged(lambda: check_cause(store_out, expected_fault_cause(fired), shown))

    @rule(case=st.sampled_from(_ADMISSION_CASES))
    def malformed(self, case: str) -> None:
        """The call of the admission table ``case`` turned by the program's length so far (the
        case that many places after it, wrapping): one inadmissible argument (both sides refuse
        it with ``invalid_run`` and change nothing), or one exactly at one of the contract's
        limits, or a state admission must walk (both sides admit it, on a run that does not
        exist, so nothing changes). Under a derandomized budget the draws of a case out of some
        sixty repeat, and a third of the table went unasked in a whole default run (a planted
        admission bug that one case shows went unseen); the turn spreads the same draws over
        the table, and a program still makes the same calls each time it runs."""
        turned = (_ADMISSION_CASES.index(case) + len(self.log)) % len(_ADMISSION_CASES)
        case = _ADMISSION_CASES[turned]
        self._do(malformed_call(case, self.world), admission=case in EDGE_CASES)

    @precondition(lambda self: self.capabilities.finding_work)
    @rule(case=st.sampled_from(FINDING_WORK_MALFORMED_CASES))
    def malformed_finding_work(self, case: str) -> None:
        """``malformed`` for the operations that work across runs: the call ``case`` names, with
        one inadmissible argument."""
        self._do(malformed_call(case, self.world), admission=False)


def check_reference(
    before: StoreState, after: StoreState, step: Step, *, leases: bool = True
) -> None:
    """Every invariant, on the reference model's own state and step; a failure
    is raised as ``ReferenceInvariantViolation`` (a defect of the suite)."""
    try:
        check_state(after, leases=leases)
        check_transition(before, after, step, leases=leases)
    except InvariantViolation as error:
        raise ReferenceInvariantViolation.of(error) from None


#: The operations whose ``now_ms`` is a lease reading, held to the allowance.
_LEASE_READINGS = frozenset(
    {
        "claim",
        "claim_and_own",
        "recover_claim",
        "heartbeat",
        "reconfirm",
        "steal",
        "claim_next",
        "heartbeat_many",
    }
)


def _clipped(text: str, width: int = 400) -> str:
    """``text`` cut to ``width`` characters (an argument may be a state of
    200 000 characters), saying how long it was."""
    return text if len(text) <= width else f"{text[:width]}...({len(text)} characters)"


def _reading_ahead(op: Call, clock_ms: int) -> int | None:
    """How far a lease operation's reading runs ahead of the store clock
    (None: not a lease operation, or a reading that is not a timestamp)."""
    if op.method not in _LEASE_READINGS:
        return None
    now_ms = op.get("now_ms")
    if type(now_ms) is not int or now_ms < 0:
        return None
    return now_ms - clock_ms


def _check_outcome_kind(
    model_step: Step, store_step: Step, admission: bool | None, *, at_bound: bool = False
) -> None:
    """The store raised only its own error type, and (with ``admission``)
    admitted or refused the input as contract.md says; a reading exactly at
    the skew allowance (``at_bound``) is never the reason for a refusal. The
    reference is held to the same verdicts, as the suite's defect when it
    alone misses."""
    store_out, model_out = store_step.outcome, model_step.outcome
    if not (isinstance(store_out, Crashed) or admission is not None or at_bound):
        return
    shown = _clipped(store_step.call.describe())
    if isinstance(store_out, Crashed):
        raise StoreCrashed(
            f"{shown}: the store raised {store_out.exception} ({store_out.message}),"
            " where only its own error type may escape"
        )
    if at_bound:
        for side, out in (("store", store_out), ("reference", model_out)):
            if refused(out) and getattr(out, "field", None) == "now_ms":
                kind = AdmissionViolation if side == "store" else ReferenceInvariantViolation
                raise kind(
                    f"{shown}: a reading exactly at the skew allowance must be admitted; "
                    f"the {side} refused it ({out!r})"
                )
    if admission is None:
        return
    wanted = "admitted" if admission else "refused by admission"
    if refused(store_out) == admission:
        raise AdmissionViolation(
            f"{shown}: contract.md's limits say {wanted}; the store answered {store_out!r}"
        )
    if refused(model_out) == admission or isinstance(model_out, Crashed):
        raise ReferenceInvariantViolation(
            f"{shown}: contract.md's limits say {wanted}; the reference answered {model_out!r}"
        )


def _same_outcome(model: Any, store: Any) -> bool:
    """Outcomes agree: equal, and a mapping's keys in the same order (the
    order ``heartbeat_many`` promises)."""
    if model != store:
        return False
    if isinstance(model, dict) and isinstance(store, dict):
        return list(model) == list(store)
    return True


def _grant(run: str, who: OwnerId, out: object) -> Any:
    if isinstance(out, Claimed):
        return (run, who, out.claimed_at_ms)
    return multiple()


def _subject(snapshot: object, world: World, run: str) -> OwnerId | None:
    """Whom evidence should speak about: the expected snapshot's owner, else
    the run's owner."""
    owner = getattr(snapshot, "owner", None)
    if isinstance(owner, OwnerId):
        return owner
    row = world.row(run)
    return None if row is None else row.owner


def comparison_for(
    store_factory: StoreFactory,
    capabilities: Capabilities = FULL_STORE,
    *,
    name: str = "store",
    raw_writer: Callable[[Any, str, str], bool] | None = None,
) -> type[RunStoreComparison]:
    """A ``RunStoreComparison`` subclass for ``store_factory`` (called ``store_factory(clock,
    path)``; an async store factory's stores are driven through the synchronous stand-in; see
    ``run_conformance``), with its ``capabilities``, named ``name`` in reports.
    ``raw_writer(store, run_id, text)``, when given, writes a run's state behind the store's
    back and answers whether a row was written; it switches on the corruption rule."""
    namespace: dict[str, Any] = {
        "store_factory": staticmethod(blocking_factory(store_factory)),
        "capabilities": capabilities,
        "target": name,
        "raw_writer": None if raw_writer is None else staticmethod(raw_writer),
    }
    safe = "".join(ch if ch.isalnum() else "_" for ch in name)
    return type(f"RunStoreComparison_{safe}", (RunStoreComparison,), namespace)
