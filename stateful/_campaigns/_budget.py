"""The budget ``run_conformance`` uses when it is given no ``settings``.

A third party runs ``run_conformance(store_factory=...)`` and reads the
verdict; the budget is designed for that call, not for a developer's loop:

- **Deterministic**: derandomized and without an example database, so a CI
  verdict repeats run after run on the same code.
- **Sized per machine**, by what one example costs and what it takes to reach
  the rare cells (see ``_reach``): the strategy machine is cheap and runs
  many short programs; the run-store and attempt machines run longer ones.
- **Bounded in time**: the examples alone take three to eight minutes for
  a store or a strategy (which gets the strategy machine as well as the
  adapter machines) on a 2-core machine busy with other work (measured: 180
  to 480 s at loads 8 to 15; docs/guides/conformance.md has the figures);
  shrinking a failure is cut at what is left of five minutes
  (``WALL_SECONDS``), so a failing run ends within that, shrunk as far as
  time allowed.

The default budget also walks the small scope exhaustively (``explore``),
after the machines pass, within ``EXPLORE_SECONDS`` per store or strategy
under test; a run with ``settings=`` or a profile does not, unless asked
(``run_conformance(..., explore=True)``).

``HYPOTHESIS_PROFILE``, when set, replaces the budget with that profile
(``ci``, ``dev`` or ``deep``); ``settings=`` replaces it too. Whichever
settings a machine runs under, ``judged_settings`` makes the verdict
independent of the machine's speed and of its load: no deadline, no
too-slow health check, and the first failure reported (Hypothesis does not
go on generating to look for others). ``shrinking_within`` cuts the
shrinking of every run, not only the default budget's.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator

import attrs
from hypothesis import HealthCheck, Phase
from hypothesis import settings as Settings
from hypothesis.stateful import RuleBasedStateMachine

from .._base._profiles import profile_settings

#: A failing default run ends within this many seconds, shrinking included.
WALL_SECONDS = 300.0
#: Shrinking always gets at least this long, however late the failure.
MIN_SHRINK_SECONDS = 20.0
#: The small scope's exhaustive exploration gets this long per store or strategy under
#: test; a walk not exhausted within it fails the run (a partial walk is never a pass).
EXPLORE_SECONDS = 1800.0


@attrs.frozen
class Budget:
    """Examples per machine and steps per example."""

    examples: int
    steps: int


#: The default budget of each machine kind.
DEFAULT_BUDGETS: dict[str, Budget] = {
    "strategy": Budget(examples=400, steps=60),
    "store": Budget(examples=200, steps=80),
    "attempts": Budget(examples=200, steps=80),
    # Each step is a scenario of its own (a few opens); a held lock costs
    # 0.3 s of real time.
    "opening": Budget(examples=12, steps=12),
    # Short programs: every move of the clock is judged at once, and a
    # measurement schedule is a few steps deep.
    "server-clock": Budget(examples=40, steps=12),
    # Each example is a fresh database; ending a session waits for the
    # server (tens of ms), and every schema open migrates a new schema.
    "pg-session": Budget(examples=8, steps=12),
    "pg-schema": Budget(examples=5, steps=8),
}


def machine_kind(machine: type[RuleBasedStateMachine]) -> str:
    """``"strategy"``, ``"attempts"``, ``"opening"``, ``"server-clock"``,
    ``"pg-session"``, ``"pg-schema"`` or ``"store"``: which budget a machine
    gets. Each machine class names its own kind (``budget_kind``, inherited
    by its subclasses); a machine that names none is sized as a store
    machine."""
    kind: str = getattr(machine, "budget_kind", "store")
    return kind


def default_settings(machine: type[RuleBasedStateMachine], *, shrink: bool = True) -> Settings:
    """The settings of the default budget for ``machine`` (without the shrink
    phase when ``shrink`` is false: to measure detection alone)."""
    budget = DEFAULT_BUDGETS[machine_kind(machine)]
    phases = [Phase.explicit, Phase.generate, Phase.target]
    return Settings(
        max_examples=budget.examples,
        stateful_step_count=budget.steps,
        derandomize=True,
        database=None,
        deadline=None,
        print_blob=False,
        report_multiple_bugs=False,
        suppress_health_check=[HealthCheck.too_slow],
        phases=[*phases, Phase.shrink] if shrink else phases,
    )


def judged_settings(settings: Settings) -> Settings:
    """``settings`` as ``run_conformance`` runs a machine under them: the
    same examples, steps, phases and seed, with no deadline, the too-slow
    health check off, and only the first failure reported.

    A verdict about a store must not depend on how fast the machine is or
    what else runs on it: Hypothesis's default deadline (200 ms) is for a
    whole program here, which a clean store exceeds on a busy machine; and a
    run that reports several failures goes on generating after the first
    one and shrinks each it found, where ``run_conformance`` raises one
    failure anyway.
    """
    suppressed = list(settings.suppress_health_check)
    if HealthCheck.too_slow not in suppressed:
        suppressed.append(HealthCheck.too_slow)
    return Settings(
        settings, deadline=None, suppress_health_check=suppressed, report_multiple_bugs=False
    )


def chosen_settings(
    machine: type[RuleBasedStateMachine], settings: Settings | None
) -> tuple[Settings, bool]:
    """The settings ``run_conformance`` runs ``machine`` under, and whether
    they are the default budget: ``settings`` when given, else the profile
    named by ``HYPOTHESIS_PROFILE`` when that is set (read, not loaded: the
    process's other tests keep theirs), else the default; each as
    ``judged_settings`` makes it."""
    if settings is not None:
        return judged_settings(settings), False
    profile = os.environ.get("HYPOTHESIS_PROFILE")
    if profile:
        return judged_settings(profile_settings(profile)), False
    return default_settings(machine), True


class _WhatIsLeft:
    """Stands for Hypothesis's shrinking allowance: added to the shrinker's
    start time (``perf_counter() + allowance``), it gives a deadline at what
    is left of the wall budget then, and never less than the minimum."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline

    def __radd__(self, started: float) -> float:
        left = max(MIN_SHRINK_SECONDS, self.deadline - time.monotonic())
        return started + min(left, 300.0)


@contextlib.contextmanager
def shrinking_within(deadline: float) -> Iterator[None]:
    """Cut Hypothesis's shrinking at ``deadline`` (``time.monotonic``), or
    ``MIN_SHRINK_SECONDS`` after it starts if that is later.

    Hypothesis bounds shrinking by a module-level allowance (five minutes)
    added to the time shrinking starts; for the block it is replaced by one
    that reads what is left of the budget at that moment.
    """
    try:
        from hypothesis.internal.conjecture import engine
    except ImportError:  # pragma: no cover - a Hypothesis without that module
        yield
        return
    previous = getattr(engine, "MAX_SHRINKING_SECONDS", None)
    if not isinstance(previous, int):  # pragma: no cover - another Hypothesis
        yield
        return
    engine.MAX_SHRINKING_SECONDS = _WhatIsLeft(deadline)  # type: ignore[assignment]
    try:
        yield
    finally:
        engine.MAX_SHRINKING_SECONDS = previous
