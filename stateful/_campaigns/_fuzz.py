"""Fuzzing campaigns: ``runstore fuzz`` and ``runstore replay``.

A campaign runs the conformance machines against one or more targets in
randomized batches until its time (shrinking included) or its example budget
is spent, printing a progress line (examples, steps, elapsed, failures) every
few seconds. Hypothesis keeps its example database in a directory per target,
so a failure found once is replayed first the next time. On a failure the
shrunk program is written as a self-contained pytest file (see
``_regression``), ready for ``tests/regressions/``.

Each target runs under every machine that fits it, in turn, one batch each:
the run-store machine (a store factory), the strategy machine (a strategy
factory) and the attempt machine (a store factory that builds SQL adapter
stores, the stores ``AttemptStore`` runs over, or ``runstore.aopen``'s async
stores over them, with ``AsyncAttemptStore``).

Targets: the built-in ones (``sqlite-sql``, ``sqlite-local``,
``sqlite-file-sql``, ``sqlite-file-local``, ``model``, ``postgres-sql``, and
the async stores ``sqlite-async`` and ``postgres-async``), a strategy factory
``--consensus MODULE:FACTORY`` (run alone and inside the SQLite adapter), or a
store factory ``--store MODULE:FACTORY`` (an async one too: its stores are
driven through the synchronous stand-in). ``--target MODULE:FACTORY`` tells
the two apart by the factory's signature (no parameters: a strategy).
"""

from __future__ import annotations

import inspect
import os
import random
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import Any, TextIO

import attrs
from hypothesis import HealthCheck, Phase, seed, settings
from hypothesis.database import DirectoryBasedExampleDatabase
from hypothesis.stateful import RuleBasedStateMachine, get_state_machine_test

from .._base._observe import Failure, Observer, observing, stopped_by
from .._base._profiles import load_profile
from .._machines import _reach
from .._machines._attempts import attempt_comparison_for
from .._machines._consensus import consensus_comparison_for
from .._machines._run_store import comparison_for
from .._targets._blocking import ATTEMPT_STORE_OVER, attempt_store_over
from .._targets._builtin import (
    BUILTIN_TARGETS,
    Target,
    capability_overrides,
    consensus_target,
    load_factory,
    raw_writer_for,
    store_target,
    with_capabilities,
)
from .._targets._probe import attempt_store_for, builds_async_stores, open_refusal
from ._regression import is_suite_defect, suite_defect_invariant, write_regression

#: The targets a campaign without ``--target`` rotates through.
DEFAULT_TARGETS = ("sqlite-sql", "sqlite-local", "sqlite-file-sql", "sqlite-file-local")
BATCH_EXAMPLES = 20
#: The fewest examples a time-budgeted batch runs (see ``_examples_that_fit``).
MIN_BATCH_EXAMPLES = 5
#: Share of a time budget reserved for shrinking a failure found late.
SHRINK_RESERVE = 0.15


def resolve_target(name: str) -> Target:
    """A built-in target by name, or ``MODULE:FACTORY`` (kind by signature)."""
    if name in BUILTIN_TARGETS:
        from .._targets._builtin import check_available

        check_available(BUILTIN_TARGETS[name])  # a PostgreSQL target needs a server
        return BUILTIN_TARGETS[name]
    if ":" not in name:
        known = ", ".join(sorted(BUILTIN_TARGETS))
        raise ValueError(f"unknown target {name!r}; use one of {known} or MODULE:FACTORY")
    factory = load_factory(name)
    try:
        parameters = len(inspect.signature(factory).parameters)
    except (TypeError, ValueError):
        parameters = 0
    return consensus_target(name) if parameters == 0 else store_target(name)


def machines_for(
    target: Target, *, attempt_store: Callable[..., Any] | None = None
) -> list[type[RuleBasedStateMachine]]:
    """The machines that put ``target`` under test, in rotation order: the
    run-store machine, the strategy machine, the attempt machine.

    With ``attempt_store`` (an attempt store factory, called as
    ``attempt_store(store, **options)``), the attempt store is what is under
    test: only the attempt machine runs, over ``target``'s stores.
    """
    machines: list[type[RuleBasedStateMachine]] = []
    factory = target.store_factory
    if attempt_store is None:
        if factory is not None:
            machines.append(
                comparison_for(
                    factory,
                    target.capabilities,
                    name=target.name,
                    raw_writer=raw_writer_for(factory),
                )
            )
        if target.consensus_factory is not None:
            machines.append(
                consensus_comparison_for(
                    target.consensus_factory, target.capabilities, name=target.name
                )
            )
    # AttemptStore over a SQL store; over an async store, its AsyncAttemptStore.
    fitting = None if factory is None else attempt_store_for(factory)
    if factory is not None and fitting is not None:
        machines.append(
            attempt_comparison_for(
                factory,
                target.capabilities,
                name=target.name,
                raw_writer=raw_writer_for(factory),
                attempt_store=fitting if attempt_store is None else attempt_store,
            )
        )
    return machines


def _examples_that_fit(observer: Observer, seconds_left: float) -> int:
    """How many examples to run in the next batch so that it ends within
    ``seconds_left``, judged by the average cost of the examples so far
    (batch overheads included), and never fewer than
    ``MIN_BATCH_EXAMPLES``: each batch is a new Hypothesis run, whose first
    example is always its simplest program (a few steps), so batches of one
    would run that program over and over. A batch that then overruns the
    deadline is cut at its next example (``campaign_target``)."""
    if observer.examples == 0:
        return BATCH_EXAMPLES
    per_example = observer.elapsed / observer.examples
    if per_example <= 0:
        return BATCH_EXAMPLES
    fit = int(seconds_left / per_example)
    return max(MIN_BATCH_EXAMPLES, min(BATCH_EXAMPLES, fit))


def _database_key(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)


def _settings(
    database: DirectoryBasedExampleDatabase, examples: int, *, shrink: bool = True
) -> settings:
    phases = [Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink]
    return settings(
        max_examples=examples,
        database=database,
        derandomize=False,
        deadline=None,
        print_blob=False,  # its @reproduce_failure hint cannot work from the CLI
        report_multiple_bugs=False,
        suppress_health_check=list(HealthCheck),
        phases=phases if shrink else phases[:-1],
    )


class _Progress:
    def __init__(self, stream: TextIO, label: str) -> None:
        self.stream = stream
        self.label = label

    def __call__(self, observer: Observer) -> None:
        self.stream.write(
            f"fuzz {self.label}: {observer.examples} examples, {observer.steps} steps, "
            f"{observer.elapsed:.0f}s elapsed, {observer.failures} failures\n"
        )
        self.stream.flush()


@attrs.frozen
class TargetResult:
    """What a campaign on one target found.

    ``shrink`` is ``"finished"``, ``"cut by the time budget"``, ``"skipped"``
    (shrinking off) or ``""`` (nothing to shrink). ``failures`` counts every
    failing execution, shrink attempts included; ``checks`` counts them by
    the check that fired.
    """

    target: Target
    examples: int
    steps: int
    failures: int = 0
    found: Failure | None = None
    path: Path | None = None
    shrink: str = ""
    checks: tuple[tuple[str, int], ...] = ()
    seconds: float = 0.0

    @property
    def suite_defect(self) -> bool:
        return self.found is not None and is_suite_defect(self.found)


def fuzz_target(target: Target, **options: Any) -> Path | None:
    """Run one campaign (see ``campaign_target``); return the regression file
    written, if it failed."""
    return campaign_target(target, **options).path


def campaign_target(
    target: Target,
    *,
    seconds: float | None,
    examples: int | None,
    seed_value: int | None,
    db_dir: Path,
    out_dir: Path,
    stream: TextIO,
    attempt_store: str | None = None,
    shrink: bool = True,
    clock: Callable[[], float] = time.monotonic,
) -> TargetResult:
    """Run one campaign and say what it found.

    ``attempt_store`` (``MODULE:FACTORY``) puts that attempt store under test
    in place of ``AttemptStore``, with the attempt machine alone. Without
    ``shrink`` the first failing program is written as it was found.

    The end of the time budget (``seconds``, read on ``clock``) is never a
    failure. Examples run in batches (one Hypothesis run each), sized by what
    an example has cost so far so that a batch ends before generation should
    stop; the campaign stops between batches. When a batch overruns anyway
    (the machine got slower, or a batch's least size did not fit), the first
    example to start after the deadline is cut before it draws anything and
    discarded, and the campaign reports what ran. A failure found late is
    shrunk until the deadline.
    """
    attempt_factory = None if attempt_store is None else load_factory(attempt_store)
    machines = machines_for(target, attempt_store=attempt_factory)
    if not machines:
        raise ValueError(f"target {target.name!r} has nothing to put under test")
    under_test = target.name if attempt_store is None else f"{target.name}+{attempt_store}"
    database = DirectoryBasedExampleDatabase(str(db_dir / _database_key(under_test)))
    started = clock()
    deadline = None if seconds is None else started + seconds
    stop_generating = None if seconds is None else started + seconds * (1 - SHRINK_RESERVE)
    progress = _Progress(stream, target.name)
    observer = Observer(deadline=deadline, progress=progress, clock=clock)
    error: BaseException | None = None
    cut = False
    batch = 0
    with observing(observer):
        while True:
            if examples is not None and observer.examples >= examples:
                break
            size = BATCH_EXAMPLES
            if examples is not None:
                size = max(1, min(size, examples - observer.examples))
            if stop_generating is not None:
                now = clock()
                if now >= stop_generating:
                    break
                size = min(size, _examples_that_fit(observer, stop_generating - now))
            machine = machines[batch % len(machines)]
            test = get_state_machine_test(
                machine, settings=_settings(database, size, shrink=shrink)
            )
            if seed_value is not None:
                test = seed(seed_value * 100_003 + batch)(test)
            batch += 1
            try:
                test()
            except BaseException as failure:
                if observer.stopped and stopped_by(failure):
                    # The deadline passed inside a batch: the example that
                    # started after it drew nothing and ran no step, and is
                    # discarded. Whatever Hypothesis made of the stop (a
                    # FlakyStrategyDefinition, when the examples before it
                    # drew more) is not a finding.
                    cut = observer.failures > 0
                    break
                if not isinstance(failure, Exception):
                    raise  # KeyboardInterrupt and the like
                error = failure
                break
    progress(observer)
    found: Failure | None = observer.last_failure if error is not None else observer.failure
    result = TargetResult(
        target,
        observer.examples,
        observer.steps,
        observer.failures,
        checks=tuple(sorted(observer.checks.items())),
        seconds=observer.elapsed,
    )
    if found is None:
        if error is not None:
            # A failure the machines did not record (a defect in the harness or
            # an exception escaping the store): report it as it is.
            stream.write(f"fuzz {target.name}: FAILED ({type(error).__name__}: {error})\n")
            raise error
        stream.write(f"fuzz {target.name}: clean\n")
        return result
    if error is not None:
        # Hypothesis's notes: the falsifying program as machine rules. Its
        # ``@reproduce_failure`` hint cannot work from the command line (the
        # summary gives the ``runstore fuzz --seed`` line instead).
        notes = [
            str(n) for n in getattr(error, "__notes__", []) if "reproduce_failure" not in str(n)
        ]
        if notes:
            stream.write("\n".join(notes) + "\n")
    label = "SUITE DEFECT" if is_suite_defect(found) else "FAILED"
    stream.write(f"fuzz {target.name}: {label} {found.error.splitlines()[0]}\n")
    # The whole failure, so a log that outlives the regression file still says it.
    for line in found.error.splitlines()[1:]:
        stream.write(f"fuzz {target.name}:   {line}\n")
    caps = target.capabilities
    attempt_spec = attempt_store
    if attempt_spec is None and any(
        getattr(machine, "attempt_store_factory", None) is attempt_store_over
        for machine in machines
    ):
        # An async store's attempt stores: the file builds them as the machine did.
        attempt_spec = ATTEMPT_STORE_OVER
    path = write_regression(
        found,
        out_dir,
        spec=target.spec,
        kind="consensus" if target.kind == "consensus" else "store",
        whole_state=caps.whole_state,
        leases=caps.lease_introspection,
        faults=caps.fault_injection,
        seed=seed_value,
        attempt_spec=attempt_spec,
        stand_in=target.store_factory is not None and builds_async_stores(target.store_factory),
    )
    if not shrink:
        state = "skipped"
    elif cut or observer.cut_after is not None:
        state = "cut by the time budget"
    else:
        state = "finished"
    return attrs.evolve(result, found=found, path=path, shrink=state)


def _explain_count(result: TargetResult) -> str:
    """Why ``failures`` failing executions gave one file."""
    if result.failures <= 1:
        return "1 failing execution, 1 file"
    by_check = ", ".join(f"{check} {count}" for check, count in result.checks)
    return (
        f"{result.failures} failing executions ({by_check}): the campaign stops at its first "
        "failure and shrinks it, and every shrink attempt that still fails counts; one "
        "file holds the shortest program"
    )


def replay_line(target: Target, seed_value: int, extra: Sequence[str] = ()) -> str:
    """The command line that runs ``target``'s campaign again with its seed."""
    if target.kind == "builtin":
        which = f"--target {target.name}"
    elif target.kind == "consensus":
        which = f"--consensus {target.spec}"
    else:
        which = f"--store {target.spec}"
    return " ".join(["runstore fuzz", which, *extra, f"--seed {seed_value}"])


def summarize(
    results: Sequence[TargetResult], seed_value: int, stream: TextIO, extra: Sequence[str] = ()
) -> None:
    """Say once, at the end, what the campaign found."""
    examples = sum(r.examples for r in results)
    steps = sum(r.steps for r in results)
    found = [r for r in results if r.found is not None]
    stream.write(
        f"\nfuzz summary: {len(results)} target(s), {examples} examples, {steps} steps, "
        f"seed {seed_value}: "
        + ("nothing found\n" if not found else f"{len(found)} target(s) failed\n")
    )
    for result in results:
        name = result.target.name
        if result.found is None:
            stream.write(f"  {name}: clean ({result.examples} examples, {result.steps} steps)\n")
            continue
        first = result.found.error.splitlines()[0]
        if result.suite_defect:
            stream.write(
                f"  {name}: SUITE DEFECT, not a failure of the store under test: the "
                f"reference model broke {suite_defect_invariant(result.found)} on its own "
                f"history ({first}); please report it\n"
            )
        else:
            stream.write(f"  {name}: FAILED {first}\n")
        if result.found.check == "CommittedStateLost" and result.target.capabilities.reopen:
            stream.write(
                "    (a store that cannot be reopened on its path, such as an in-memory one,"
                " declares Capabilities(reopen=False) as its factory's or module's"
                " `capabilities`, or is fuzzed with --no-reopen)\n"
            )
        stream.write(f"    shrinking: {result.shrink}\n")
        stream.write(f"    {_explain_count(result)}\n")
        stream.write(f"    file written: {result.path}\n")
        stream.write(f"    replay the file: runstore replay {result.path}\n")
        stream.write(f"    replay the campaign: {replay_line(result.target, seed_value, extra)}\n")
    stream.flush()


def run_campaign(
    targets: Sequence[Target],
    *,
    minutes: float | None = None,
    examples: int | None = None,
    seed_value: int | None = None,
    db_dir: Path = Path(".runstore-fuzz/db"),
    out_dir: Path = Path(".runstore-fuzz/out"),
    stream: TextIO | None = None,
    attempt_store: str | None = None,
    extra: Sequence[str] = (),
    clock: Callable[[], float] = time.monotonic,
) -> int:
    """Fuzz each target in turn, sharing the time budget (one minute when
    neither budget is given), then print one summary; 0 when all ran clean,
    1 when any failed (a regression file was written for each). Each target
    gets an equal share of the time budget, whatever the targets before it
    did with theirs; the end of a share is never a failure. Without a
    seed, one is chosen and printed, so every campaign can be replayed. With
    ``attempt_store`` (``MODULE:FACTORY``) that attempt store is under test,
    over each target's stores, in place of ``AttemptStore``. ``extra`` are
    the command-line options the replay line repeats. ``clock`` is the time
    source of the budget (seconds; ``time.monotonic`` unless a test injects
    another)."""
    stream = sys.stdout if stream is None else stream
    if minutes is None and examples is None:
        minutes = 1.0
    if seed_value is None:
        seed_value = random.SystemRandom().randrange(1, 2**31)
        stream.write(f"fuzz: seed {seed_value} (chosen at random)\n")
    seconds = None if minutes is None else minutes * 60 / max(1, len(targets))
    results: list[TargetResult] = []
    for target in targets:
        results.append(
            campaign_target(
                target,
                seconds=seconds,
                examples=examples,
                seed_value=seed_value,
                db_dir=db_dir,
                out_dir=out_dir,
                stream=stream,
                attempt_store=attempt_store,
                clock=clock,
            )
        )
    summarize(results, seed_value, stream, extra)
    return 1 if any(r.found is not None for r in results) else 0


def _unusable_folder(folder: Path) -> str | None:
    """Why files cannot be written in ``folder`` (made when it is missing),
    or ``None``: the nearest part of it that exists must be a folder this
    process may write."""
    existing = folder
    while not existing.exists() and existing.parent != existing:
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is not a folder"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{existing} is not writable by this process"
    return None


def _check_can_start(targets: Sequence[Target], *, db_dir: Path, out_dir: Path) -> None:
    """Refuse, with one line (``ValueError``), a campaign that could not keep
    its example database or write a regression file, or whose store factory
    cannot open a store at all: those are not findings about the store."""
    for folder, option in ((db_dir, "--db"), (out_dir, "--out")):
        problem = _unusable_folder(folder)
        if problem is not None:
            raise ValueError(f"cannot use {folder} ({option}): {problem}")
    for target in targets:
        if target.kind == "store" and target.store_factory is not None:
            refusal = open_refusal(target.store_factory)
            if refusal is not None:
                raise ValueError(f"cannot open a store of {target.name}: {refusal}")


def main_fuzz(args: Any, stream: TextIO | None = None) -> int:
    """``runstore fuzz`` with parsed arguments. ``HYPOTHESIS_PROFILE`` (``ci``,
    ``dev``, ``deep``), when set, is loaded first: its settings (``deep``'s
    100 steps per example, say) apply to every batch, under the campaign's own
    budget, database and seeds."""
    profile = os.environ.get("HYPOTHESIS_PROFILE")
    if profile:
        load_profile(profile)
        (sys.stdout if stream is None else stream).write(f"fuzz: Hypothesis profile {profile}\n")
    overrides = capability_overrides(
        getattr(args, "capabilities", None), no_reopen=getattr(args, "no_reopen", False)
    )
    targets: list[Target]
    if args.store:
        targets = [store_target(args.store)]
    elif args.consensus:
        targets = [consensus_target(args.consensus)]
    elif args.target:
        targets = [resolve_target(args.target)]
    else:
        targets = [BUILTIN_TARGETS[name] for name in DEFAULT_TARGETS]
    targets = [with_capabilities(target, overrides) for target in targets]
    _check_can_start(targets, db_dir=Path(args.db), out_dir=Path(args.out))
    extra: list[str] = []
    if getattr(args, "attempt_store", None):
        extra.append(f"--attempt-store {args.attempt_store}")
    if overrides:
        spec = ",".join(f"{k}={str(v).lower()}" for k, v in overrides.items())
        extra.append(f"--capabilities {spec}")
    if args.examples is not None:
        extra.append(f"--examples {args.examples}")
    elif args.minutes is not None:
        extra.append(f"--minutes {args.minutes:g}")
    reach = _reach.Reach()
    with _reach.recording(reach) if getattr(args, "coverage", False) else nullcontext():
        status = run_campaign(
            targets,
            minutes=args.minutes,
            examples=args.examples,
            seed_value=args.seed,
            db_dir=Path(args.db),
            out_dir=Path(args.out),
            stream=stream,
            attempt_store=getattr(args, "attempt_store", None),
            extra=extra,
        )
    if getattr(args, "coverage", False):
        out = sys.stdout if stream is None else stream
        out.write("\nreach (run-store machine; the reference's answers by prior situation):\n\n")
        out.write(_reach.reach_tables(reach))
        missed = _reach.gaps(reach)
        out.write(
            f"\nreach: {len(_reach.reachable_cells()) - len(missed)} of "
            f"{len(_reach.reachable_cells())} reachable cells reached\n"
        )
        for cell in missed:
            out.write(f"  not reached: {_reach.describe_cell(cell)}\n")
        out.flush()
    return status
