"""The fault seam: failures a test injects into a store's write transactions
(both backends; ``runstore.sqlite`` re-exports it under its historical names).

This is test machinery, not a user feature; its names are stable for the
state machines and the fault tests.

Usage, with ``Fault``, ``FaultPlan`` and ``RetryPolicy`` from this module (a
test usually imports them from ``runstore.sqlite``, which re-exports them)::

    plan = FaultPlan(Fault("statement", 2), Fault("commit", transient=True))
    store._install_faults(plan)              # arm; None disarms
    store._retry_policy = RetryPolicy(max_attempts=3)   # optional, smaller budget
    ...
    plan.fired     # the faults that raised, in order
    plan.unused    # the faults no attempt has taken yet

A ``FaultPlan`` is a queue. Every write *attempt* of the store (the first try
of an operation and each retry of it; a nested write does not count) takes the
next ``Fault`` from the queue, and that fault fires at most once, at its point:

- ``Fault("statement", k)``: just before the ``k``-th SQL statement (counting
  from 0) of the attempt, counting every statement run through
  ``tx.connection.execute``: the store's and a SQL strategy's. ``BEGIN`` and
  ``COMMIT`` are not counted; statements that triggers run are not counted.
- ``Fault("strategy", k)``: just after the ``k``-th strategy call of the
  attempt (counting from 0) returns, so the strategy's change has been made and
  must be undone by the rollback. It is raised as
  ``ConsensusError("persistence_failed")`` caused by the injected error, the
  way a strategy reports a storage failure.
- ``Fault("commit")``: in place of the ``COMMIT``.

``transient=True`` injects an error that looks like ``SQLITE_BUSY`` (on
PostgreSQL, like a serialization failure): the transaction manager rolls
back, waits, and replays the whole body, until the store's ``RetryPolicy``
runs out (``max_attempts`` attempts in all), then raises
``persistence_failed``. Otherwise the error looks like an I/O failure and the
operation raises ``persistence_failed`` at once. Either way the attempt
that failed is rolled back completely: no row, lease, fact or revision change.

So "fewer transient faults than the budget" (at most ``max_attempts - 1``
transient faults in the plan) gives the operation's ordinary outcome, and
``max_attempts`` of them give the error.

A fault whose point its attempt never reaches (the attempt ran fewer
statements or strategy calls, or returned without committing) does not fire;
it is used up all the same and is listed in ``plan.missed``. Reads never take
faults, and an operation that returns before opening a write transaction (an
admission error, ``LivenessUnconfirmed``, the ``claim_and_own`` pre-check)
takes none.
"""

from __future__ import annotations

import sqlite3
from collections import deque
from typing import Any, Literal, TypeAlias

import attrs

from ..consensus._types import ConsensusError

FaultPoint: TypeAlias = Literal["statement", "strategy", "commit"]

_BUSY = 5  # SQLITE_BUSY
_IOERR = 10  # SQLITE_IOERR


@attrs.frozen
class Fault:
    """One injected failure: where it fires and whether a retry may succeed.
    Building one with a ``point`` outside the three, or an ``index`` that is
    not a non-negative int, raises ``ValueError``."""

    point: FaultPoint
    """Where it fires: ``"statement"`` (a SQL statement of the operation),
    ``"strategy"`` (a consensus call) or ``"commit"``."""
    index: int = 0
    """Which one of those it fires at, counting from 0 within the attempt."""
    transient: bool = False
    """True: it fails like a busy database (``SQLITE_BUSY``), so a retry may
    succeed; False: like an I/O error, which fails the operation."""

    def __attrs_post_init__(self) -> None:
        if self.point not in ("statement", "strategy", "commit"):
            raise ValueError("a fault point is 'statement', 'strategy' or 'commit'")
        if type(self.index) is not int or self.index < 0:
            raise ValueError("a fault index is a non-negative int")


@attrs.frozen
class RetryPolicy:
    """How long the transaction manager keeps replaying a transient failure.

    An operation gets at most ``max_attempts`` attempts and never sleeps past
    ``budget_ms`` from its first attempt; between attempts it sleeps a random
    time up to ``min(max_delay_ms, base_delay_ms * 2**n)``. The default budget
    stays well under ``HEARTBEAT_WRITE_TOLERANCE_MS`` (19 000 ms), so a
    heartbeat that cannot write fails in time for its supervisor to react.
    """

    max_attempts: int = 200
    """The most attempts one operation gets, the first included."""
    budget_ms: int = 5000
    """How long after its first attempt an operation may still sleep and retry, in ms."""
    base_delay_ms: float = 1.0
    """The first backoff's upper bound, in ms; it doubles with each attempt."""
    max_delay_ms: float = 50.0
    """The largest backoff, in ms."""


class InjectedFault(sqlite3.OperationalError):
    """The error a fault raises: ``SQLITE_BUSY`` when transient, else ``SQLITE_IOERR``."""

    def __init__(self, fault: Fault) -> None:
        super().__init__("injected fault")
        self.fault = fault
        self.sqlite_errorcode = _BUSY if fault.transient else _IOERR
        self.sqlite_errorname = "SQLITE_BUSY" if fault.transient else "SQLITE_IOERR"


class FaultPlan:
    """A queue of faults; each write attempt takes the next one.

    ``FaultPlan(*faults)`` queues ``faults`` in order (anything but a
    ``Fault`` raises ``TypeError``); arm it with the store's fault seam, as
    ``run_conformance`` does with ``Capabilities(fault_injection=True)``.
    """

    def __init__(self, *faults: Fault) -> None:
        for fault in faults:
            if type(fault) is not Fault:
                raise TypeError("a FaultPlan holds Fault values")
        self._queue: deque[Fault] = deque(faults)
        self.fired: list[Fault] = []
        """The faults that fired, in order."""
        self.missed: list[Fault] = []
        """The faults taken by an attempt that never reached their point (an
        operation with fewer statements or strategy calls than the index)."""

    @property
    def unused(self) -> list[Fault]:
        """The faults no write attempt has taken yet, in order."""
        return list(self._queue)

    def __repr__(self) -> str:
        return (
            f"FaultPlan(unused={list(self._queue)!r}, fired={self.fired!r}, missed={self.missed!r})"
        )

    def _take(self) -> ArmedFault | None:
        if not self._queue:
            return None
        return ArmedFault(self, self._queue.popleft())


class ArmedFault:
    """Internal: the fault of one attempt, counting its statements and calls."""

    __slots__ = ("_plan", "done", "fault", "statements", "strategy_calls")

    def __init__(self, plan: FaultPlan, fault: Fault) -> None:
        self._plan = plan
        self.fault = fault
        self.statements = 0
        self.strategy_calls = 0
        self.done = False

    def _fire(self) -> InjectedFault:
        self.done = True
        self._plan.fired.append(self.fault)
        return InjectedFault(self.fault)

    def before_statement(self) -> None:
        if self.done or self.fault.point != "statement":
            return
        index = self.statements
        self.statements += 1
        if index == self.fault.index:
            raise self._fire()

    def after_strategy_call(self) -> None:
        if self.done or self.fault.point != "strategy":
            return
        index = self.strategy_calls
        self.strategy_calls += 1
        if index == self.fault.index:
            injected = self._fire()
            raise ConsensusError("persistence_failed", "injected strategy fault") from injected

    def before_commit(self) -> None:
        if not self.done and self.fault.point == "commit":
            raise self._fire()

    def finish(self) -> None:
        """The attempt ended; an unfired fault is recorded as missed."""
        if not self.done:
            self.done = True
            self._plan.missed.append(self.fault)


class FaultyConsensus:
    """Internal: wraps a strategy so the armed fault can fire after a call."""

    def __init__(self, inner: Any, armed: ArmedFault) -> None:
        self._inner = inner
        self._armed = armed

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._inner, name)
        if name.startswith("_") or not callable(attribute):
            return attribute
        armed = self._armed

        def call(*args: Any, **kwargs: Any) -> Any:
            result = attribute(*args, **kwargs)
            armed.after_strategy_call()
            return result

        return call
