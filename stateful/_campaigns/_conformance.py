"""``run_conformance``: the one call a third party makes to check its store or
its consensus strategy against the reference model."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable

import attrs
from hypothesis import settings as Settings
from hypothesis.stateful import RuleBasedStateMachine, run_state_machine_as_test

from .._base import _observe
from .._base._capabilities import FULL_STORE, Capabilities
from .._base._compare import LeaseMismatch, OutcomeMismatch, RollbackLeak, StateMismatch
from .._checks._attempt_invariants import ATTEMPT_INVARIANTS
from .._checks._invariants import INVARIANTS, ReferenceInvariantViolation
from .._checks._opening import opening_check_for, sqlite_store_consensus
from .._machines._attempts import AttemptStateMismatch, attempt_comparison_for
from .._machines._consensus import ConsensusFactory, consensus_comparison_for
from .._machines._run_store import StoreFactory, comparison_for
from .._targets._blocking import blocking_factory
from .._targets._builtin import raw_writer_for, sqlite_store_factory
from .._targets._probe import attempt_store_for
from ._budget import EXPLORE_SECONDS, WALL_SECONDS, chosen_settings, shrinking_within
from ._summary import summarize


class ConformanceError(AssertionError):
    """A conformance run ended in something other than a check's failure: an
    exception escaping the store outside an operation (its factory, ``close``
    or ``state()``), or a failure Hypothesis could not reproduce (a flaky
    store). Raised from the original, so a test runner reports a failure."""


def conformance_machines(
    *,
    store_factory: StoreFactory | None = None,
    consensus_factory: ConsensusFactory | None = None,
    capabilities: Capabilities = FULL_STORE,
) -> list[type[RuleBasedStateMachine]]:
    """The machine classes ``run_conformance`` runs, in order, for the same ``store_factory``,
    ``consensus_factory`` and ``capabilities``: run them yourself with Hypothesis's
    ``run_state_machine_as_test`` to choose settings per machine. Raises ``TypeError`` when
    neither factory is given."""
    if store_factory is None and consensus_factory is None:
        raise TypeError("run_conformance needs a store_factory, a consensus_factory, or both")
    machines: list[type[RuleBasedStateMachine]] = []
    if consensus_factory is not None:
        name = getattr(consensus_factory, "__qualname__", "strategy")
        machines.append(consensus_comparison_for(consensus_factory, capabilities, name=name))
        if store_factory is None:
            # The strategy inside the SQLite adapter, on a file: the adapter
            # offers state(), its fault seam and reopening.
            in_adapter = attrs.evolve(capabilities, whole_state=True, fault_injection=True)
            factory = sqlite_store_factory(consensus_factory, file=in_adapter.reopen)
            machines.append(
                comparison_for(
                    factory, in_adapter, name=f"sqlite+{name}", raw_writer=raw_writer_for(factory)
                )
            )
            machines.append(
                attempt_comparison_for(
                    factory,
                    in_adapter,
                    name=f"sqlite+{name}+attempts",
                    raw_writer=raw_writer_for(factory),
                )
            )
            machines.append(opening_check_for(consensus_factory, name=f"sqlite+{name}+opening"))
    if store_factory is not None:
        # An async store factory's stores are driven through the synchronous stand-in.
        store_factory = blocking_factory(store_factory)
        name = getattr(store_factory, "__qualname__", "store")
        machines.append(
            comparison_for(
                store_factory,
                capabilities,
                name=name,
                raw_writer=raw_writer_for(store_factory),
            )
        )
        attempt_store = attempt_store_for(store_factory)
        if attempt_store is not None:
            # Attempts live in the SQL store's database: the same store again,
            # with attempt rules interleaved (an async store's attempt store
            # is the async one, behind the stand-in too).
            machines.append(
                attempt_comparison_for(
                    store_factory,
                    capabilities,
                    name=f"{name}+attempts",
                    raw_writer=raw_writer_for(store_factory),
                    attempt_store=attempt_store,
                )
            )
            opened_with = sqlite_store_consensus(store_factory)
            if opened_with is not None:
                # runstore.open built the store: its opening contract too.
                machines.append(opening_check_for(opened_with, name=f"{name}+opening"))
        if capabilities.server_clock:
            from .._checks._server_clock import server_clock_check_for
            from .._targets._postgres import server_now_ms

            machines.append(
                server_clock_check_for(store_factory, server_now_ms, name=f"{name}+server-clock")
            )
        if capabilities.postgres_server:
            from .._checks._pg_session import schema_option_check_for, session_loss_check_for

            machines.append(session_loss_check_for(store_factory, name=f"{name}+session"))
            machines.append(schema_option_check_for(name=f"{name}+schema"))
    return machines


def run_conformance(
    *,
    store_factory: StoreFactory | None = None,
    consensus_factory: ConsensusFactory | None = None,
    capabilities: Capabilities = FULL_STORE,
    settings: Settings | None = None,
    explore: bool | None = None,
) -> None:
    """Check a store, a consensus strategy, or both against the reference model.

    ``store_factory(clock, path)`` builds the store under test on the shared
    ``ManualClock``; after a simulated crash it is called again with the same
    ``path`` to reopen. It may be an async store factory: a coroutine
    function (``async def factory(clock, path) -> AsyncRunStore``), or a
    function answering an awaitable of a store (``lambda clock, path:
    runstore.aopen(path, clock=clock)``) or an async store itself. An async
    store (one whose operations are coroutines) is driven through a
    synchronous stand-in that runs each call on a private event loop of its
    own and hands back what it answered or raised, unchanged; over
    ``runstore.aopen``'s stores the fault seam (``fault_injection``) and the
    attempt machine (over ``AsyncAttemptStore``) work as on the SQL stores.
    ``consensus_factory()`` builds a fresh strategy: it is compared with
    ``ModelConsensus`` at the strategy interface and, unless a
    ``store_factory`` is also given, inside the SQLite adapter against
    ``ModelRunStore``. When the store under test is the SQLite adapter (a
    ``runstore.sqlite.SqliteRunStore``, as every strategy is put inside), the
    run-store machine runs a second time with ``AttemptStore`` rules
    interleaved, against ``ModelAttemptStore``, and then the opening check
    (``OpeningCheck``) runs ``runstore.open`` on files of its own with that
    strategy: modes, read-only stores, refusals, racing openers.
    ``capabilities`` says what the store can do (see ``Capabilities``).

    ``settings`` replaces the default budget; so does ``HYPOTHESIS_PROFILE``
    when it is set (``ci``, ``dev`` or ``deep``, see ``load_profile``). The
    default budget (its examples and steps per machine: "Budgets and
    profiles" in the conformance guide) is derandomized, keeps no example
    database, and takes three to eight minutes for a store or a strategy on
    a two-core machine busy with other work (measured: 180 to 480 s at loads
    8 to 15), less on a quieter or faster one.

    Whatever the settings (given, a profile's or the default budget), the
    verdict does not depend on the machine's speed or load: every machine
    runs with no deadline and no too-slow health check (Hypothesis's default
    deadline, 200 ms, would judge a whole program against the clock), and the
    first failure is the one reported. Shrinking it is cut at what is left
    of five minutes per store or strategy under test, counted from the call
    (at least 20 s), so a failing run ends about then, shrunk as far as time
    allowed.

    ``explore`` says whether the small scope is also walked exhaustively (see
    ``explore``, and "What exhaustive exploration proves" in the docs): every
    state of two runs and three owners within three moves, each transition
    applied to the store (or to the SQLite adapter over the strategy) and
    compared; a strategy is first walked at its own interface, against
    ``ModelConsensus``, over the small strategy scope; where the store under
    test is one of this library's SQL stores (every strategy is put inside
    one), the attempt store's own scope follows (one run, three owners, two
    attempts, four moves deep, the attempt stores over the store). None (the
    default) walks them under the default budget only, not with ``settings``
    or a profile; True always; False never. It runs after
    the machines pass, within 1 800 s per store or strategy under test; a walk
    that is not exhausted by then fails the run with ``ConformanceError``
    saying how far it got (a partial walk is never a pass), and a failure it
    finds is raised as the failing check (``OutcomeMismatch``,
    ``StateMismatch``, an invariant's class) with the shortest program.

    Returns when everything conforms. When something does not, raises the
    failing check (an ``AssertionError`` subclass named for the invariant or
    comparison) with the shrunk program printed by Hypothesis and a
    one-screen summary added as a note: the machine, the program, the check,
    and both sides' values. Anything else that ends the run is raised as
    ``ConformanceError``, also an ``AssertionError``.
    """
    machines = conformance_machines(
        store_factory=store_factory,
        consensus_factory=consensus_factory,
        capabilities=capabilities,
    )
    under_test = (store_factory is not None) + (consensus_factory is not None)
    deadline = time.monotonic() + WALL_SECONDS * under_test
    defaults = False
    observer = _observe.current()
    own = observer is None
    if observer is None:
        observer = _observe.Observer()
    with _observe.observing(observer) if own else contextlib.nullcontext():
        for machine in machines:
            chosen, defaults = chosen_settings(machine, settings)
            failures_before = observer.failures
            try:
                with shrinking_within(deadline):
                    run_state_machine_as_test(machine, settings=chosen)
            except AssertionError as error:
                if observer.failures > failures_before and observer.last_failure is not None:
                    error.add_note(summarize(observer.last_failure))
                raise
            except Exception as error:
                summary = f"{machine.__name__}: {type(error).__name__}: {error}"
                if observer.failures > failures_before and observer.last_failure is not None:
                    summary += "\n" + summarize(observer.last_failure)
                raise ConformanceError(summary) from error
    if explore or (explore is None and defaults):
        _explored(store_factory, consensus_factory, capabilities)


def _explored(
    store_factory: StoreFactory | None,
    consensus_factory: ConsensusFactory | None,
    capabilities: Capabilities,
) -> None:
    """Walk the small scope for each factory under test; raise its failure, or
    ``ConformanceError`` when it was not exhausted within ``EXPLORE_SECONDS``."""
    from ._explore import Exploration
    from ._explore import explore as walk_scope

    runs: list[Callable[[], Exploration]] = []
    if consensus_factory is not None:
        strategy = consensus_factory

        def strategy_walk() -> Exploration:
            return walk_scope(consensus_factory=strategy, seconds=EXPLORE_SECONDS)

        runs.append(strategy_walk)
    if store_factory is not None:
        store = store_factory

        def store_walk() -> Exploration:
            return walk_scope(
                store_factory=store, capabilities=capabilities, seconds=EXPLORE_SECONDS
            )

        runs.append(store_walk)
    for run in runs:
        result = run()
        found = result.failure
        if found is not None:
            kind = _CHECKS.get(found.check, ConformanceError)
            walked = result.scope if result.attempts is None else result.attempts.scope
            raise kind(
                f"exhaustive exploration of the {walked} scope on {found.target or result.target}:"
                f" {found.check}"
                f" on the shortest program ({len(found.program.splitlines())} steps,"
                f" setup included):\n{found.program}\n{found.message}"
            )
        if not result.exhausted:
            cut = result if result.attempts is None else result.attempts
            raise ConformanceError(
                f"the {cut.scope} scope was not exhausted within {EXPLORE_SECONDS:g} s on"
                f" {result.target}: {cut.states} states, {cut.transitions} transitions,"
                f" depth {cut.depth} reached; a partial walk is never a pass"
            )


_CHECKS: dict[str, type[AssertionError]] = {
    cls.__name__: cls
    for cls in (
        *INVARIANTS,
        *ATTEMPT_INVARIANTS,
        OutcomeMismatch,
        StateMismatch,
        LeaseMismatch,
        RollbackLeak,
        AttemptStateMismatch,
        ReferenceInvariantViolation,
    )
}
