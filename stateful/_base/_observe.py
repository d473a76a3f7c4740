"""Watching machines run: counts, deadlines and the program of a failing example.

Every machine records what it did as a list of log entries (clock moves,
calls with the reference model's answer, attempt calls with the attempt
store they went to, reopens, faults). When an
``Observer`` is installed with ``observing(...)``, machines report each
example and step to it, and hand it their log when a check fails, so the
fuzzer can print progress, stop at a deadline and write a regression file.
Without an observer the machines only keep their own log.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import attrs

from runstore._values import StoreState
from runstore.attempts import Attempt

from ._steps import Call


@attrs.frozen
class ClockSet:
    """The shared store clock moved to ``ms``."""

    ms: int


@attrs.frozen
class Performed:
    """``call`` was made; the reference answered ``expected``."""

    call: Call
    expected: Any


@attrs.frozen
class Reopened:
    """The store was closed without ceremony and opened again on the same path."""


@attrs.frozen
class Faulted:
    """``call`` was made with the fault ``plan`` armed; the reference answered
    ``expected`` (a non-transient fault changes nothing and raises)."""

    plan: Any
    call: Call
    expected: Any


@attrs.frozen
class Transacted:
    """Strategy ``calls`` made in one transaction (rolled back when
    ``rollback``); the reference answered ``expected``, one per call."""

    calls: tuple[Call, ...]
    expected: tuple[Any, ...]
    rollback: bool


@attrs.frozen
class AttemptPerformed:
    """The attempt ``call`` (an ``AttemptStore`` method) was made on the attempt
    store built with the options named ``config``, with the fault ``plan``
    armed when there is one; the reference answered ``expected``."""

    config: str
    call: Call
    expected: Any
    plan: tuple[Any, ...] | None = None


LogEntry = ClockSet | Performed | Reopened | Faulted | Transacted | AttemptPerformed


@attrs.frozen
class Failure:
    """One failing example as a machine saw it.

    ``machine`` is ``"store"``, ``"consensus"`` or ``"attempts"``; the attempt
    machine also gives the attempts the reference holds (``expected_attempts``).
    """

    machine: str
    target: str
    log: tuple[LogEntry, ...]
    expected_state: StoreState | None
    error: str
    check: str
    setup: tuple[str, ...] = ()
    expected_attempts: tuple[Attempt, ...] | None = None


class CampaignOver(BaseException):
    """Raised (as a ``BaseException``, so Hypothesis lets it through) at the
    start of an example when an observer's deadline has passed; ends the
    running campaign at once.

    The example it is raised in has drawn nothing and run no step. Hypothesis
    may still report it as something else (a ``FlakyStrategyDefinition``
    raised while it propagates, when earlier examples drew more); the
    campaign recognises either by ``Observer.stopped`` and discards the cut
    example (see ``stopped_by``).
    """


def stopped_by(error: BaseException) -> bool:
    """Whether ``error`` is a ``CampaignOver``, or was raised while one
    propagated (it is in the chain of causes and contexts)."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, CampaignOver):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


@attrs.define
class Observer:
    """Counts examples, steps and failures; keeps the shortest failing program.

    ``deadline`` is a reading of ``clock`` (``time.monotonic`` unless a test
    injects another): an example that starts after it raises
    ``CampaignOver`` and sets ``stopped``.
    """

    deadline: float | None = None
    progress: Callable[[Observer], None] | None = None
    progress_every_s: float = 5.0
    examples: int = 0
    steps: int = 0
    failures: int = 0
    first_failure_example: int | None = None
    failure: Failure | None = None
    last_failure: Failure | None = None
    #: Failing executions seen when the deadline cut the shrinking of one.
    cut_after: int | None = None
    #: Failing executions by the check that fired.
    checks: dict[str, int] = attrs.field(factory=dict)
    #: The time source of ``deadline``, ``started`` and ``elapsed``.
    clock: Callable[[], float] = time.monotonic
    #: An example was cut: ``CampaignOver`` was raised at its start.
    stopped: bool = False
    started: float = attrs.field(default=attrs.Factory(lambda self: self.clock(), takes_self=True))
    _last_progress: float = attrs.field(
        default=attrs.Factory(lambda self: self.clock(), takes_self=True)
    )

    @property
    def elapsed(self) -> float:
        return self.clock() - self.started

    def example_started(self) -> None:
        if self.deadline is not None and self.clock() >= self.deadline:
            if self.failures and self.cut_after is None:
                # The deadline ended the campaign while a failure was being
                # shrunk (Hypothesis then reports the shortest program so far).
                self.cut_after = self.failures
            self.stopped = True
            raise CampaignOver
        self.examples += 1
        self._tick()

    def step(self) -> None:
        self.steps += 1

    def failed(self, failure: Failure) -> None:
        self.failures += 1
        self.checks[failure.check] = self.checks.get(failure.check, 0) + 1
        if self.first_failure_example is None:
            self.first_failure_example = self.examples
        self.last_failure = failure
        if self.failure is None or len(failure.log) <= len(self.failure.log):
            self.failure = failure

    def _tick(self) -> None:
        now = self.clock()
        if self.progress is not None and now - self._last_progress >= self.progress_every_s:
            self._last_progress = now
            self.progress(self)


_current: Observer | None = None


def current() -> Observer | None:
    """The installed observer, if any."""
    return _current


@contextmanager
def observing(observer: Observer) -> Iterator[Observer]:
    """Install ``observer`` for the duration of the block."""
    global _current
    previous, _current = _current, observer
    try:
        yield observer
    finally:
        _current = previous


def say(text: str | Callable[[], str]) -> None:
    """``hypothesis.note(text)`` inside a test whose notes will be shown (the
    final replay of a failure, or verbose runs); nothing otherwise. Pass a
    callable to build the text only when it will be shown."""
    from hypothesis import note
    from hypothesis.control import currently_in_test_context, should_note

    if not currently_in_test_context() or not should_note():
        return
    note(text() if callable(text) else text)
