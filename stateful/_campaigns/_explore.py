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

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from .._base._capabilities import Capabilities


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

    @property
    def clean(self) -> bool:
        """Exhausted with no failure: the verdict ``runstore explore`` exits 0 on."""
        return self.exhausted and self.failure is None

    def describe(self) -> str:
        """One paragraph: the scope, how far the walk got, and the verdict."""
        how = "exhausted" if self.exhausted else "NOT exhausted (time ran out)"
        text = (
            f"scope {self.scope} on {self.target or 'the model'}: {how}; "
            f"{self.states} states, {self.transitions} transitions, depth {self.depth}, "
            f"{self.elapsed_s:.1f} s"
        )
        if self.programs:
            text += f"; {self.programs} programs up to depth {self.programs_depth} without dedup"
        if self.failure is not None:
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
) -> Exploration:
    """Walk ``scope`` exhaustively over the reference model and, when something is under
    test, apply every transition of the walk to it and compare.

    What is under test is at most one of: ``target``, a built-in target name as ``runstore
    fuzz --target`` takes it (``model``, ``sqlite-sql``, ``sqlite-file-local``,
    ``postgres-sql``, ...) or a ``MODULE:FACTORY`` string naming a store factory;
    ``store_factory``, called ``store_factory(clock, path)`` as ``run_conformance`` calls it;
    ``consensus_factory``, called with no arguments, whose strategy is put inside the SQLite
    adapter. With none of them the model alone is walked (its invariants in every state).

    ``scope`` is ``"small"``, ``"medium"`` or ``"large"`` (the docs page "What exhaustive
    exploration proves" lists each). ``seconds`` bounds the wall time (None: no bound); when
    it runs out first the result says how far the walk got and is not exhausted.
    ``out`` is the folder the shortest counterexample's regression file is written to (None:
    none written). ``capabilities`` overrides what the store under test can do (by default
    the target's, or ``Capabilities()`` for a factory). ``attempts`` also walks the attempt
    store's own small scope (None: when the store is the SQLite adapter). ``depth_k`` is the
    depth of the extra pass that runs every program without deduplication (None: the
    scope's own; 0: no such pass). ``clock`` is read for the time budget (seconds, as
    ``time.monotonic``).

    Returns an ``Exploration``; a divergence or a broken invariant is its ``failure`` (the
    shortest program), not an exception. Raises ``ValueError`` for a bad argument (an unknown
    target or scope, two things under test) and lets the factory's own errors through.
    """
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
    )


def _run(**options: Any) -> Exploration:
    raise NotImplementedError("explore: the walk lands next (issue 25)")
