"""``explore``'s attempt walk: the attempt store's own scope, for the model and for a store.

``attempt_exploration`` walks an attempt scope (``_explore._attempts``) over
``ModelRunStore`` with ``ModelAttemptStore`` and, when a store is under test,
applies every transition to the attempt stores built over it (``AttemptStore``,
or the attempt store factory given), and reports an ``AttemptWalked`` that
``explore`` turns into an ``Exploration`` like the run walk's. A failure is the
shortest program, written as a regression file like ``runstore fuzz`` writes
for the attempt machine.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from runstore._clock import ManualClock
from runstore.attempts import AttemptStoreError

from .._base._observe import Failure
from .._explore._attempts import (
    AttemptSut,
    attempt_log,
    attempt_scope_named,
    run_attempt_walk,
)
from .._targets._blocking import ATTEMPT_STORE_OVER, attempt_store_over
from .._targets._builtin import Target
from .._targets._probe import builds_async_stores
from ._regression import write_regression


def _spec_of(factory: Any) -> str | None:
    module = getattr(factory, "__module__", None)
    name = getattr(factory, "__qualname__", None)
    if not module or not name or "<" in name or module == "__main__":
        return None
    return f"{module}:{name}"


@attrs.frozen
class AttemptWalked:
    """What an attempt walk did: as ``Exploration`` counts it, with the failure (the
    attempt machine's ``Failure`` of the shortest program) and its regression file."""

    exhausted: bool
    states: int
    transitions: int
    depth: int
    elapsed_s: float
    scope: str
    target: str
    rebuilds: int
    restores: int
    failure: Failure | None
    path: Path | None


def attempts_supported(under_test: Target | None, attempt_store: Callable[..., Any]) -> bool:
    """Whether an attempt store can be built over the store under test (the model alone:
    always): builds one store from the factory and the attempt store over it."""
    if under_test is None:
        return True
    factory = under_test.store_factory
    if factory is None:
        return False
    folder = Path(tempfile.mkdtemp(prefix="runstore-explore-probe-"))
    store = None
    try:
        store = factory(ManualClock(0), folder / "probe.db")
        attempt_store(store)
    except AttemptStoreError as error:
        if error.code == "invalid_attempt":
            return False
        raise
    finally:
        if store is not None and callable(getattr(store, "close", None)):
            store.close()
        shutil.rmtree(folder, ignore_errors=True)
    return True


def attempt_exploration(
    scope: str,
    under_test: Target | None,
    *,
    attempt_store: Callable[..., Any] | None,
    deadline: float | None,
    clock: Callable[[], float],
    out: Path | None,
    restore: bool,
) -> AttemptWalked:
    """Walk the attempt scope ``scope`` (and apply it to ``under_test``)."""
    chosen = attempt_scope_named(scope)
    if chosen is None:
        raise ValueError(f"unknown attempt scope {scope!r}")
    factory = attempt_store_over if attempt_store is None else attempt_store
    began = clock()
    name = "model" if under_test is None else under_test.name
    sut = None
    if under_test is not None and under_test.store_factory is not None:
        sut = AttemptSut(
            under_test.store_factory, under_test.capabilities, chosen, factory, restore=restore
        )
    try:
        graph, replayer = run_attempt_walk(chosen, sut, deadline=deadline, clock=clock)
    finally:
        if sut is not None:
            sut.close()
    failure: Failure | None = None
    if graph.failure is not None:
        found = graph.failure
        program = (*graph.path(found.node), (found.move, found.outcome))
        failure = Failure(
            machine="attempts",
            target=name,
            log=attempt_log(chosen, program),
            expected_state=None,
            error=f"ReferenceInvariantViolation: {found.check}: {found.message}",
            check="ReferenceInvariantViolation",
        )
    elif replayer is not None and replayer.divergence is not None:
        diverged = replayer.divergence
        failure = Failure(
            machine="attempts",
            target=name,
            log=attempt_log(chosen, diverged.program),
            expected_state=diverged.expected_state,
            error=f"{diverged.check}: {diverged.message}",
            check=diverged.check,
            expected_attempts=diverged.expected_attempts,
        )
    path = None
    if failure is not None and out is not None:
        path = _write(failure, out, under_test, attempt_store)
    progress = None if replayer is None else replayer.progress
    transitions = graph.transitions + (0 if progress is None else progress.transitions)
    return AttemptWalked(
        exhausted=graph.exhausted and failure is None,
        states=len(graph.nodes),
        transitions=transitions,
        depth=graph.depth,
        elapsed_s=clock() - began,
        scope=chosen.name,
        target=name,
        rebuilds=0 if progress is None else progress.rebuilds,
        restores=0 if progress is None else progress.restores,
        failure=failure,
        path=path,
    )


def _write(
    failure: Failure,
    out: Path,
    under_test: Target | None,
    attempt_store: Callable[..., Any] | None,
) -> Path | None:
    """The regression file of an attempt failure (None when what is under test cannot be
    named in a file: a factory defined inside a function)."""
    if under_test is None:
        return write_regression(failure, out, kind="reference")
    attempt_spec = None if attempt_store is None else _spec_of(attempt_store)
    if under_test.kind in ("store", "consensus") and under_test.spec is None:
        return None
    if attempt_store is not None and attempt_spec is None:
        return None
    caps = under_test.capabilities
    stand_in = under_test.store_factory is not None and builds_async_stores(
        under_test.store_factory
    )
    if stand_in and attempt_store is None:
        # An async store's attempt stores: the file builds them as the walk did.
        attempt_spec = ATTEMPT_STORE_OVER
    return write_regression(
        failure,
        out,
        spec=under_test.spec,
        kind="consensus" if under_test.kind == "consensus" else "store",
        whole_state=caps.whole_state,
        leases=caps.lease_introspection,
        faults=False,
        attempt_spec=attempt_spec,
        stand_in=stand_in,
    )
