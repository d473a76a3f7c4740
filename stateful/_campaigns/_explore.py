"""``explore``: walk a whole small scope, for the model and for a store or a strategy.

``explore`` resolves what is under test (a built-in target name, a store
factory or a consensus factory, as ``runstore fuzz`` takes them), walks the
scope's graph over the reference model breadth-first (every invariant in every
reachable state), applies every transition of the graph to the system under
test from a state equal to its source, and reports an ``Exploration``. A
failure is reported as the shortest program that shows it, and written as a
regression file like ``runstore fuzz`` writes.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

import attrs

from .._base._capabilities import FULL_STORE, Capabilities
from .._base._observe import Failure
from .._explore import _workers
from .._explore._attempts import attempt_scope_named
from .._explore._replay import Replayer, Sut, log_of, programs
from .._explore._scope import Scope, scope_named
from .._explore._strategy import STRATEGY_SCOPES as _STRATEGY_SCOPES
from .._explore._walk import walker_for
from .._explore._workers import Workers, walk_levels, worker_count
from .._targets._blocking import attempt_store_over, blocking_factory
from .._targets._builtin import (
    Target,
    capability_overrides,
    consensus_target,
    load_factory,
    sqlite_store_factory,
    store_target,
)
from .._targets._probe import builds_async_stores
from ._fuzz import resolve_target
from ._regression import write_regression
from ._summary import program_lines


@attrs.frozen
class Counterexample:
    """The shortest program that breaks a check, as ``explore`` found it.

    ``program`` is the program as readable steps, one a line (clock moves and
    calls, run state values left out); ``check`` is the name of the check that
    failed (``OutcomeMismatch``, ``StateMismatch``, or an invariant's class name
    such as ``StealWithoutStaleness``); ``path`` is the regression file written
    for it, or None when no folder was given.
    """

    program: str
    """The program, one step a line, with no run state values."""
    check: str
    """The failing check's class name (``OutcomeMismatch``, ``StateMismatch``, an invariant's)."""
    path: Path | None = None
    """The regression file written for the program, or None."""
    message: str = ""
    """What the check said (the two sides' answers or states, without run state values)."""
    target: str = ""
    """The name of what was under test."""


@attrs.frozen
class Exploration:
    """What one ``explore`` call did and found.

    ``exhausted`` is True when every state of the scope was reached and every
    transition from it checked (a walk cut short by time, or stopped at a
    failure, is not exhausted); ``states`` and ``transitions`` count what was
    walked (canonical states, and transitions checked on the model and, when
    something else is under test, applied to it); ``depth`` is the deepest
    level of the breadth-first walk reached; ``elapsed_s`` the seconds it took;
    ``failure`` the shortest counterexample, or None.
    """

    exhausted: bool
    """Whether the whole scope was walked (and every transition checked)."""
    states: int
    """Canonical states reached."""
    transitions: int
    """Transitions checked."""
    depth: int
    """The deepest breadth-first level reached (the length of the longest shortest program)."""
    elapsed_s: float
    """Seconds the exploration took, by its clock."""
    failure: Counterexample | None = None
    """The shortest failing program, or None."""
    scope: str = "small"
    """The scope walked."""
    target: str = ""
    """The name of what was under test."""
    programs: int = 0
    """Programs run without deduplication (the depth-k pass; 0 when there was none)."""
    programs_depth: int = 0
    """The depth k of the pass without deduplication (0 when there was none)."""
    rebuilds: int = 0
    """Fresh stores built from the factory (with the setup and a program replayed)."""
    restores: int = 0
    """Source states restored from a copy instead of rebuilt (stores we own; see
    ``explore``'s ``restore``)."""
    parts: tuple[Exploration, ...] = ()
    """The walks this one joins, in the order made, when there are several: for a strategy,
    the walk at its own interface, then the walk through the SQLite adapter (empty for one
    walk). The counts above are their sums, ``depth`` their deepest."""
    attempts: Exploration | None = None
    """The walk of the attempt store's own scope that followed this one (``explore``'s
    ``attempts``), or None when there was none. ``exhausted`` and ``failure`` above already
    count it."""

    @property
    def clean(self) -> bool:
        """Exhausted with no failure: the verdict ``runstore explore`` exits 0 on."""
        return self.exhausted and self.failure is None

    def describe(self) -> str:
        """One paragraph: the scope, how far the walk got, and the verdict."""
        if self.exhausted:
            how = "exhausted"
        elif self.failure is not None:
            how = "stopped at the first failure (a shortest program)"
        else:
            how = "NOT exhausted (time ran out)"
        text = (
            f"scope {self.scope} on {self.target or 'the model'}: {how}; "
            f"{self.states} states, {self.transitions} transitions, depth {self.depth}, "
            f"{self.elapsed_s:.1f} s"
        )
        if self.programs:
            text += f"; {self.programs} programs up to depth {self.programs_depth} without dedup"
        if self.rebuilds or self.restores:
            text += f"; {self.rebuilds} fresh stores, {self.restores} restores"
        for part in self.parts:
            text += "\n  " + part.describe().partition("\n")[0]
        if self.attempts is not None:
            text += "\n" + self.attempts.describe()
        elif self.failure is not None:
            text += f"\n{self.failure.check}:\n{self.failure.program}"
            if self.failure.path is not None:
                text += f"\nregression file: {self.failure.path}"
        return text


def explore(
    *,
    target: str | None = None,
    store_factory: Callable[..., Any] | None = None,
    consensus_factory: Callable[[], Any] | None = None,
    scope: str = "small",
    seconds: float | None = None,
    out: Path | str | None = None,
    capabilities: Capabilities | None = None,
    attempts: bool | None = None,
    depth_k: int | None = None,
    clock: Callable[[], float] = time.monotonic,
    restore: bool = True,
    attempt_store: Callable[..., Any] | str | None = None,
    interface: bool = True,
    workers: int | None = None,
) -> Exploration:
    """Walk ``scope`` exhaustively over the reference model and, when something is under
    test, apply every transition of the walk to it and compare.

    What is under test is at most one of: ``target``, a built-in target name as ``runstore
    fuzz --target`` takes it (``model``, ``sqlite-sql``, ``sqlite-file-local``,
    ``postgres-sql``, ...) or a ``MODULE:FACTORY`` string naming a store factory;
    ``store_factory``, called ``store_factory(clock, path)`` as ``run_conformance`` calls it;
    ``consensus_factory``, called with no arguments, whose strategy is put inside the SQLite
    adapter. With none of them the model alone is walked (its invariants in every state).

    ``scope`` is ``"small"``, ``"medium"``, ``"lineage"`` or ``"large"`` (the docs page "What
    exhaustive exploration proves" lists each), or ``"attempts"``: the attempt store's own scope
    alone. ``seconds`` bounds the wall time (None: no bound); when
    it runs out first the result says how far the walk got and is not exhausted.
    ``out`` is the folder the shortest counterexample's regression file is written to (None:
    none written). ``capabilities`` overrides what the store under test can do (by default
    the target's, or ``Capabilities()`` for a factory). ``attempts`` also walks the attempt
    store's own scope (``"attempts"``) after the run scope, with the attempt stores built over
    the store under test (True: always, ``ValueError`` when none can be built over it; False:
    never; None: for every scope but ``"tiny"`` when an attempt store can be built over the
    store, or over the model alone); its result is the ``attempts`` member of the answer,
    and it counts in ``exhausted`` and ``failure``. ``attempt_store`` builds the attempt
    stores under test, called ``attempt_store(store, **options)`` (or a ``MODULE:FACTORY``
    string naming it; None: ``runstore.attempts.AttemptStore``, or over an async store its
    ``AsyncAttemptStore``). ``depth_k`` is the
    depth of the extra pass that runs every program without deduplication (None: the
    scope's own; 0: no such pass). ``clock`` is read for the time budget (seconds, as
    ``time.monotonic``). ``restore`` lets the walk restore a copy of each source state
    instead of replaying its shortest program on a fresh store, where the store is one of
    this library's SQLite or PostgreSQL stores over ``SqlConsensus`` or ``LocalConsensus``
    (False: always a fresh store and the replay; any other store is always replayed). On a
    store just restored or rebuilt the reads come first, and every write is read back at
    once (``revision``, ``changes``, ``list_runs``, ``get``).

    A strategy (``consensus_factory``, or a target naming one) is walked twice: first at its
    own ``Consensus`` interface against ``ModelConsensus``, over the strategy scope of the
    same name (the adapter checks snapshots, cutoffs and evidence itself, so a strategy bug
    on one of those rules is only seen there), then inside the SQLite adapter; the result
    joins both (``parts``), and a failure of the first ends the exploration. ``interface``
    False skips the first walk.

    ``workers`` is the number of worker processes that replay a store rebuilt by replay
    (None: one per core; 1: none). Workers are used for a store the walk cannot copy (or
    any with ``restore=False``) whose factory they can import by name: a ``MODULE:FACTORY``
    string, a module-level function, or a built-in SQLite target; for every scope but
    ``"tiny"``, and only with the default ``clock``. Each worker builds its own stores from
    the factory, so the factory is called in several processes at once; the result is the
    one a walk in one process gives.

    Returns an ``Exploration``; a divergence or a broken invariant is its ``failure`` (the
    shortest program), not an exception. Raises ``ValueError`` for a bad argument (an unknown
    target or scope, two things under test) and lets the factory's own errors through.
    """
    if interface and scope in _STRATEGY_SCOPES:
        strategy = _resolve(target, store_factory, consensus_factory, capabilities)
        if strategy is not None and strategy.kind == "consensus":
            return _both(
                strategy,
                scope,
                seconds,
                out,
                depth_k,
                clock,
                restore,
                target,
                {"attempts": attempts, "attempt_store": attempt_store},
            )
    return _run(
        target=target,
        store_factory=store_factory,
        consensus_factory=consensus_factory,
        scope=scope,
        seconds=seconds,
        out=None if out is None else Path(out),
        capabilities=capabilities,
        attempts=attempts,
        depth_k=depth_k,
        clock=clock,
        restore=restore,
        attempt_store=attempt_store,
        workers=workers,
    )


def _both(
    strategy: Target,
    scope: str,
    seconds: float | None,
    out: Path | str | None,
    depth_k: int | None,
    clock: Callable[[], float],
    restore: bool,
    target: str | None,
    adapter_options: dict[str, Any],
) -> Exploration:
    """A strategy's two walks: at its own interface, then (unless that failed or ran out of
    time) through the SQLite adapter with the time left and ``adapter_options`` (the attempt
    scope's); joined."""
    from ._explore_strategy import ADAPTER, explore_interface

    factory = strategy.consensus_factory
    assert factory is not None
    began = clock()
    folder = None if out is None else Path(out)
    walked = explore_interface(
        factory,
        name=strategy.name,
        spec=strategy.spec,
        scope=scope,
        deadline=None if seconds is None else began + seconds,
        clock=clock,
        out=folder,
        restore=restore,
        depth_k=depth_k,
    )
    graph = walked.graph
    counterexample = None
    if walked.failure is not None:
        counterexample = Counterexample(
            program=program_text(walked.failure),
            check=walked.failure.check,
            path=walked.path,
            message=walked.failure.error.partition(": ")[2],
            target=walked.target,
        )
    first = Exploration(
        exhausted=graph.exhausted and counterexample is None,
        states=len(graph.nodes),
        transitions=graph.transitions,
        depth=graph.depth,
        elapsed_s=walked.elapsed_s,
        failure=counterexample,
        scope=walked.scope,
        target=walked.target,
        programs=graph.programs,
        programs_depth=walked.k if graph.programs else 0,
        rebuilds=graph.rebuilds,
        restores=graph.restores,
    )
    if not first.exhausted:
        return _joined(strategy.name, (first,))
    second = explore(
        target=target,
        consensus_factory=None if target is not None else factory,
        scope=scope,
        seconds=None if seconds is None else max(0.0, seconds - (clock() - began)),
        out=folder,
        capabilities=strategy.capabilities,
        depth_k=depth_k,
        clock=clock,
        restore=restore,
        interface=False,
        **adapter_options,
    )
    second = attrs.evolve(second, target=f"{strategy.name} ({ADAPTER})")
    return _joined(strategy.name, (first, second))


def _joined(name: str, parts: tuple[Exploration, ...]) -> Exploration:
    """One ``Exploration`` of ``parts`` (the walks of one strategy, in the order made):
    exhausted when every part was, the counts summed, the first failure, and the last
    part's walk of the attempt scope, if it made one."""
    failure = next((part.failure for part in parts if part.failure is not None), None)
    return Exploration(
        exhausted=all(part.exhausted for part in parts) and failure is None,
        states=sum(part.states for part in parts),
        transitions=sum(part.transitions for part in parts),
        depth=max(part.depth for part in parts),
        elapsed_s=sum(part.elapsed_s for part in parts),
        failure=failure,
        scope=parts[0].scope,
        target=name,
        programs=sum(part.programs for part in parts),
        programs_depth=max(part.programs_depth for part in parts),
        rebuilds=sum(part.rebuilds for part in parts),
        restores=sum(part.restores for part in parts),
        parts=parts,
        attempts=parts[-1].attempts,
    )


def _spec_of(factory: Any) -> str | None:
    """``module:qualname`` of a factory importable by that name, else None."""
    module = getattr(factory, "__module__", None)
    name = getattr(factory, "__qualname__", None)
    if not module or not name or "<" in name or module == "__main__":
        return None
    return f"{module}:{name}"


def _resolve(
    target: str | None,
    store_factory: Callable[..., Any] | None,
    consensus_factory: Callable[[], Any] | None,
    capabilities: Capabilities | None,
) -> Target | None:
    """What is under test, as a ``Target`` (None: the model alone)."""
    given = sum(x is not None for x in (target, store_factory, consensus_factory))
    if given > 1:
        raise ValueError("explore takes one of target, store_factory and consensus_factory")
    if target is not None:
        if target == "model":
            return None
        resolved = resolve_target(target)
        if resolved.kind == "consensus" and resolved.consensus_factory is not None:
            # No move of a scope reopens the store: the adapter in memory is enough.
            factory = sqlite_store_factory(resolved.consensus_factory, file=False)
            resolved = attrs.evolve(resolved, store_factory=factory)
    elif store_factory is not None:
        name = getattr(store_factory, "__qualname__", "store")
        resolved = Target(
            name,
            blocking_factory(store_factory),
            FULL_STORE,
            None,
            spec=_spec_of(store_factory),
            kind="store",
        )
    elif consensus_factory is not None:
        name = getattr(consensus_factory, "__qualname__", "strategy")
        resolved = Target(
            name,
            sqlite_store_factory(consensus_factory, file=False),
            Capabilities(reopen=False, fault_injection=True),
            consensus_factory,
            spec=_spec_of(consensus_factory),
            kind="consensus",
        )
    else:
        return None
    if capabilities is not None:
        resolved = attrs.evolve(resolved, capabilities=capabilities)
    return resolved


_STATE_ARGUMENT = re.compile(r"state_json=(?:'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")")


def program_text(failure: Failure) -> str:
    """The failing program, one step a line, run state values left out."""
    lines = program_lines(failure, width=10_000)
    return "\n".join(_STATE_ARGUMENT.sub("state_json=...", line) for line in lines)


def _run(
    *,
    target: str | None,
    store_factory: Callable[..., Any] | None,
    consensus_factory: Callable[[], Any] | None,
    scope: str,
    seconds: float | None,
    out: Path | None,
    capabilities: Capabilities | None,
    attempts: bool | None,
    depth_k: int | None,
    clock: Callable[[], float],
    restore: bool = True,
    attempt_store: Callable[..., Any] | str | None = None,
    workers: int | None = None,
) -> Exploration:
    from ._explore_attempts import attempt_exploration, attempts_supported

    attempt_factory: Callable[..., Any] | None = (
        load_factory(attempt_store) if isinstance(attempt_store, str) else attempt_store
    )
    if attempt_scope_named(scope) is not None:
        begun = clock()
        return _attempt_result(
            attempt_exploration(
                scope,
                _resolve(target, store_factory, consensus_factory, capabilities),
                attempt_store=attempt_factory,
                deadline=None if seconds is None else begun + seconds,
                clock=clock,
                out=out,
                restore=restore,
            )
        )
    chosen = scope_named(scope)
    under_test = _resolve(target, store_factory, consensus_factory, capabilities)
    began = clock()
    deadline = None if seconds is None else began + seconds
    walk_attempts = attempts
    if attempts is not False:
        supported = attempts_supported(under_test, attempt_factory or attempt_store_over)
        if attempts and not supported:
            raise ValueError(
                f"no attempt store can be built over {under_test and under_test.name}:"
                " the attempt scope needs an SQL store of ours (or attempt_store)"
            )
        walk_attempts = supported and (attempts or chosen.name != "tiny")
    result = _run_scope(chosen, under_test, deadline, out, depth_k, clock, restore, began, workers)
    if walk_attempts and result.failure is None and (result.exhausted):
        walked = _attempt_result(
            attempt_exploration(
                "attempts",
                under_test,
                attempt_store=attempt_factory,
                deadline=deadline,
                clock=clock,
                out=out,
                restore=restore,
            )
        )
        result = attrs.evolve(
            result,
            exhausted=result.exhausted and walked.exhausted,
            failure=walked.failure,
            elapsed_s=clock() - began,
            attempts=walked,
        )
    return result


def _attempt_result(walked: Any) -> Exploration:
    """An attempt walk (``_explore_attempts.AttemptWalked``) as an ``Exploration``."""
    counterexample = None
    failure = walked.failure
    if failure is not None:
        counterexample = Counterexample(
            program=program_text(failure),
            check=failure.check,
            path=walked.path,
            message=failure.error.partition(": ")[2],
            target=walked.target,
        )
    return Exploration(
        exhausted=walked.exhausted,
        states=walked.states,
        transitions=walked.transitions,
        depth=walked.depth,
        elapsed_s=walked.elapsed_s,
        failure=counterexample,
        scope=walked.scope,
        target=walked.target,
        rebuilds=walked.rebuilds,
        restores=walked.restores,
    )


def _run_scope(
    chosen: Scope,
    under_test: Target | None,
    deadline: float | None,
    out: Path | None,
    depth_k: int | None,
    clock: Callable[[], float],
    restore: bool,
    began: float,
    workers: int | None = None,
) -> Exploration:
    """The run scope's walk (and its application to ``under_test``)."""
    name = "model" if under_test is None else under_test.name
    # The scope's walk over the reference, shared with the process's other walks of it.
    walker = walker_for(chosen)
    graph = walker.graph
    sut = None
    if under_test is not None and under_test.store_factory is not None:
        sut = Sut(under_test.store_factory, under_test.capabilities, chosen, restore=restore)
    failure: Failure | None = None
    k = 0
    replayer = None if sut is None else Replayer(graph, sut)
    programs_done = True
    rebuilds = 0
    pool = None
    try:
        pool = _workers_for(under_test, sut, clock, workers, chosen)
        if replayer is not None and pool is not None:
            graph.exhausted = walk_levels(walker, replayer, pool, deadline, clock)
            reached = graph.depth if graph.exhausted else replayer.progress.depth
            node = graph.nodes[min(len(graph.nodes) - 1, _first_at(graph, reached))]
        index = 0
        # Level by level, the model's expansion of a node and its transitions on the store
        # together: the first failure found is on a shortest program, whichever side.
        while pool is None and index < len(graph.nodes):
            node = graph.nodes[index]
            if replayer is not None and replayer.later(node.depth):
                break
            if node.depth < chosen.depth:
                if deadline is not None and clock() > deadline:
                    break
                if not walker.expand(index, keep=replayer is not None):
                    break
                diverged = (
                    None if replayer is None else replayer.node(index, walker.last, walker.born)
                )
                if diverged is not None:
                    break
            index += 1
        else:
            if pool is None and (replayer is None or not replayer.later(chosen.depth + 1)):
                graph.exhausted = True
        transitions, depth = graph.transitions, graph.depth if graph.exhausted else node.depth
        if replayer is not None:
            progress = replayer.progress
            transitions += progress.transitions
            rebuilds += progress.rebuilds
            k = chosen.depth_k if depth_k is None else depth_k
            if graph.exhausted and progress.divergence is None and k > 0 and sut is not None:
                more = programs(graph, sut, k, deadline=deadline, clock=clock)
                transitions += more.transitions
                rebuilds += more.rebuilds
                if more.divergence is not None:
                    progress.divergence = more.divergence
                programs_done = more.done
                progress.programs = more.programs
    finally:
        if pool is not None:
            pool.close()
        if sut is not None:
            sut.close()
    exhausted = graph.exhausted and programs_done
    programs_run = 0 if replayer is None else replayer.progress.programs
    if graph.failure is not None:
        found = graph.failure
        program = (*graph.path(found.node), (found.move, found.outcome))
        failure = Failure(
            machine="store",
            target=name,
            log=log_of(chosen, program),
            expected_state=None,
            error=f"ReferenceInvariantViolation: {found.check}: {found.message}",
            check="ReferenceInvariantViolation",
        )
    elif replayer is not None and replayer.progress.divergence is not None:
        found_on = replayer.progress.divergence
        failure = Failure(
            machine="store",
            target=name,
            log=log_of(chosen, found_on.program),
            expected_state=found_on.expected_state,
            error=f"{found_on.check}: {found_on.message}",
            check=found_on.check,
        )
    counterexample = None
    if failure is not None:
        path = None
        if out is not None:
            path = _write(failure, out, under_test)
        counterexample = Counterexample(
            program=program_text(failure),
            check=failure.check,
            path=path,
            message=failure.error.partition(": ")[2],
            target=name,
        )
    return Exploration(
        exhausted=exhausted and failure is None,
        states=len(graph.nodes),
        transitions=transitions,
        depth=depth,
        elapsed_s=clock() - began,
        failure=counterexample,
        scope=chosen.name,
        target=name,
        programs=programs_run,
        programs_depth=k if programs_run else 0,
        rebuilds=rebuilds,
        restores=0 if replayer is None else replayer.progress.restores,
    )


def _first_at(graph: Any, depth: int) -> int:
    """The index of the first node of ``depth`` (or the last node, when none is so deep)."""
    for index, node in enumerate(graph.nodes):
        if node.depth >= depth:
            return index
    return len(graph.nodes) - 1


def _workers_for(
    under_test: Target | None,
    sut: Sut | None,
    clock: Callable[[], float],
    workers: int | None,
    chosen: Scope,
) -> Workers | None:
    """Worker processes for the walk, where they pay: a store rebuilt by replay (one that is
    not ours, or ours with ``restore=False``) whose factory a worker can import by name (a
    ``MODULE:FACTORY`` spec, or a built-in SQLite target), more than one worker asked for
    (None: one per core), a scope other than ``tiny``, and the time budget read from
    ``time.monotonic`` (the workers read it too). Else None: the walk stays in this process."""
    if under_test is None or sut is None or chosen.name in _workers.IN_ONE_PROCESS:
        return None
    if clock is not time.monotonic or worker_count(workers) < 2:
        return None
    spec = under_test.spec
    if under_test.kind == "builtin":
        spec = under_test.name if under_test.name.startswith("sqlite") else None
    if spec is None or under_test.capabilities.postgres_server:
        return None
    sut.build([])
    replayed = sut.owned() is None
    sut._drop()
    if not replayed:
        return None
    return Workers(spec, under_test.capabilities, chosen, worker_count(workers))


def _write(failure: Failure, out: Path, under_test: Target | None) -> Path | None:
    """The regression file of ``failure`` in ``out`` (None when the store under test cannot
    be named in a file: a factory defined inside a function)."""
    if under_test is None:
        return write_regression(failure, out, kind="reference")
    if under_test.kind in ("store", "consensus") and under_test.spec is None:
        return None
    caps = under_test.capabilities
    return write_regression(
        failure,
        out,
        spec=under_test.spec,
        kind="consensus" if under_test.kind == "consensus" else "store",
        whole_state=caps.whole_state,
        leases=caps.lease_introspection,
        faults=False,
        stand_in=under_test.store_factory is not None
        and builds_async_stores(under_test.store_factory),
    )


def main_explore(args: Any, stream: TextIO | None = None) -> int:
    """``runstore explore`` with parsed arguments: print the exploration and return the exit
    status (0 exhausted clean, 1 a failure, 3 the time ran out first). A usage error (an
    unknown target, a bad capability) is raised as ``ValueError`` (exit 2); so is a target
    that cannot run here, and an error the factory raises."""
    out = sys.stdout if stream is None else stream
    overrides = capability_overrides(getattr(args, "capabilities", None))
    target: Target | None = None
    if args.store:
        target = store_target(args.store)
    elif args.consensus:
        target = consensus_target(args.consensus)
    elif args.target and args.target != "model":
        target = resolve_target(args.target)
    spec = None if target is None else (target.spec or target.name)
    capabilities = None
    if target is not None and overrides:
        capabilities = attrs.evolve(target.capabilities, **overrides)
    out.write(
        f"explore: scope {args.scope} on {spec or 'the model'}"
        + (f", {args.seconds:g} s at most" if args.seconds is not None else "")
        + "\n"
    )
    out.flush()
    try:
        # The attempt scope after a run scope: as explore decides, unless --no-attempts.
        attempt_options: dict[str, Any] = {
            "attempts": False if getattr(args, "no_attempts", False) else None,
            "attempt_store": getattr(args, "attempt_store", None),
        }
        if args.consensus:
            result = explore(
                consensus_factory=load_factory(args.consensus),
                scope=args.scope,
                seconds=args.seconds,
                out=args.out,
                capabilities=capabilities,
                **attempt_options,
            )
        else:
            result = explore(
                target=spec,
                scope=args.scope,
                seconds=args.seconds,
                out=args.out,
                capabilities=capabilities,
                **attempt_options,
            )
    except ValueError:
        raise
    except Exception as error:
        raise ValueError(f"the harness failed: {type(error).__name__}: {error}") from None
    out.write(result.describe() + "\n")
    if result.failure is not None:
        if result.failure.path is None:
            out.write("explore: no regression file (the factory cannot be imported by name)\n")
        return 1
    if not result.exhausted:
        walked = result.attempts if result.attempts is not None else result
        out.write(
            f"explore: time ran out first: {walked.states} states, {walked.transitions}"
            f" transitions, depth {walked.depth} of {_depth_of(walked.scope)}"
            + (" of the attempt scope" if result.attempts is not None else "")
            + "\n"
        )
        return 3
    return 0


def _depth_of(scope: str) -> int:
    """The depth of the run or attempt scope called ``scope``."""
    attempt_scope = attempt_scope_named(scope)
    return scope_named(scope).depth if attempt_scope is None else attempt_scope.depth
