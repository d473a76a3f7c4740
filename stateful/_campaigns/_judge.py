"""``Judge``: the suite's per-step checks, for the regression files it writes.

A regression file replays a failing program as plain calls. Asserting each
answer and the final state is not enough: a failure that only an invariant
catches (a store whose answers and state match the reference's while its
lease and row disagree, or whose step breaks a transition invariant) would
then pass with the bug still there. So every call of a regression file goes
through a ``Judge``, which makes it, reads the store's state afterwards, and
runs the same invariants the machine ran on that step (``check_state``,
``check_transition``, and for attempt calls the attempt invariants), in the
machine's order. The file fails exactly when the original failure recurs.

``Judge(..., reference=True)`` replays a suite defect (a program on which the
reference model broke an invariant) against the reference model itself: a
failure there is raised as ``ReferenceInvariantViolation``.
"""

from __future__ import annotations

import inspect
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from runstore._values import Lease, StoreState
from runstore.attempts import AttemptStore
from runstore.model import ModelRunStore

from .._base._compare import public_state, without_leases
from .._base._domain import RUN_IDS
from .._base._steps import Call, Step, perform
from .._checks._attempt_invariants import (
    AttemptInvariantViolation,
    check_attempt_state,
    check_attempt_step,
)
from .._checks._invariants import (
    InvariantViolation,
    ReferenceInvariantViolation,
    check_leases,
    check_state,
    check_transition,
)
from .._machines._attempts import perform_attempt


def _named(owner: type, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Call:
    """``method(*args, **kwargs)`` as a ``Call``, its arguments named as the
    reference's own signature names them (the names the invariants read)."""
    bound = inspect.signature(getattr(owner, method)).bind(None, *args, **kwargs)
    pairs = tuple((k, v) for k, v in bound.arguments.items() if k != "self")
    return Call(method, pairs, frozenset(kwargs))


class Judge:
    """Makes each call of a regression file and checks it as the machine did.

    ``Judge(store, *, whole_state=True, leases=True, reference=False, attempts=None,
    in_progress_states=(), caps=None, largest_cap=None)``: ``store`` is the store under
    judgement; ``whole_state`` and ``leases`` are its capabilities (compare whole states; include
    leases); ``reference`` says ``store`` is the reference model, so a broken invariant is a
    ``ReferenceInvariantViolation``; ``attempts`` maps each attempt store's configuration name to
    the store; ``in_progress_states`` are their in-progress states, ``caps`` their checkpoint
    caps by name and ``largest_cap`` the largest of them.
    """

    def __init__(
        self,
        store: Any,
        *,
        whole_state: bool = True,
        leases: bool = True,
        reference: bool = False,
        attempts: Mapping[str, Any] | None = None,
        in_progress_states: Collection[str] = (),
        caps: Mapping[str, int] | None = None,
        largest_cap: int | None = None,
    ) -> None:
        self.store = store
        """The store under judgement (replaced by ``reopened``)."""
        self.whole_state = whole_state
        """Whether whole states are compared (``Capabilities.whole_state``)."""
        self.leases = leases
        """Whether leases are included (``Capabilities.lease_introspection``)."""
        self.reference = reference
        """Whether ``store`` is the reference model."""
        self.attempts = attempts
        """The attempt stores by configuration name, or None."""
        self.in_progress_states = in_progress_states
        """The attempt stores' in-progress states."""
        self.caps = dict(caps or {})
        """Each attempt store's checkpoint cap, by configuration name."""
        self.largest_cap = largest_cap
        """The largest checkpoint cap of any attempt store, or None."""
        self.state = self._view()
        """The store's state after the last step judged."""
        self.attempt_state = self._attempts()
        """The attempts after the last step judged."""

    # -- views ---------------------------------------------------------------------

    def _view(self) -> StoreState:
        store = self.store
        state: StoreState = store.state() if self.whole_state else public_state(store, RUN_IDS)
        return state if self.leases else without_leases(state)

    def _attempts(self) -> tuple[Any, ...]:
        if not self.attempts:
            return ()
        first = next(iter(self.attempts.values()))
        return tuple(first.state())

    def _check(self, fn: Any, *args: Any, **kwargs: Any) -> None:
        try:
            fn(*args, **kwargs)
        except (InvariantViolation, AttemptInvariantViolation) as error:
            if self.reference:
                raise ReferenceInvariantViolation.of(error) from None
            raise

    def _runs(self, step: Step) -> None:
        before, self.state = self.state, self._view()
        leases = self.leases and self.whole_state
        self._check(check_state, self.state, leases=leases)
        self._check(check_transition, before, self.state, step, leases=leases)

    # -- calls ---------------------------------------------------------------------

    def call(self, method: str, /, *args: Any, **kwargs: Any) -> Any:
        """Make ``store.<method>(*args, **kwargs)``, the operation ``method`` with ``args`` and
        ``kwargs``; check the step; return the outcome (a ``Raised`` when it raised
        ``RunStoreError``)."""
        op = _named(ModelRunStore, method, args, kwargs)
        outcome = perform(self.store, op)
        self._runs(Step(op, outcome))
        return outcome

    def made(self, method: str, outcome: Any, /, **arguments: Any) -> Any:
        """Check a step made outside the judge (a raw edit): the operation ``method``, with
        ``arguments`` by name, answered ``outcome``; return ``outcome``."""
        self._runs(Step(Call(method, tuple(arguments.items())), outcome))
        return outcome

    def reopened(self, store: Any, attempts: Mapping[str, Any] | None = None) -> Any:
        """The store was closed without ceremony and opened again as ``store`` (with ``attempts``,
        its attempt stores, when it has them): check that nothing committed was lost. Returns
        ``store``."""
        self.store = store
        if attempts is not None:
            self.attempts = attempts
        self._runs(Step(Call("reopen"), None))
        return store

    def attempt(self, config: str, method: str, /, *args: Any, **kwargs: Any) -> Any:
        """Make ``attempts[config].<method>(*args, **kwargs)`` (``method`` with ``args`` and
        ``kwargs`` on the attempt store named ``config``) and check it as the attempt machine
        does: attempt step, run step, attempt state. Returns the outcome."""
        assert self.attempts is not None, "this judge has no attempt stores"
        named = _named(AttemptStore, method, args, kwargs)
        op = Call(f"attempt_{method}", (("config", config), *named.arguments), named.keywords)
        runs_before, revision_before = self.state, self.store.revision()
        before = self.attempt_state
        outcome = perform_attempt(self.attempts, op)
        self.attempt_state = self._attempts()
        step = Step(op, outcome)
        self._check(
            check_attempt_step,
            before,
            self.attempt_state,
            step,
            runs_before=runs_before,
            revision_before=revision_before,
            revision_after=self.store.revision(),
            in_progress_states=self.in_progress_states,
            max_checkpoint_bytes=self.caps.get(config),
        )
        self._runs(step)
        if self.largest_cap is not None:
            self._check(
                check_attempt_state,
                self.attempt_state,
                self.state,
                max_checkpoint_bytes=self.largest_cap,
            )
        return outcome


def judge_leases(
    before: Iterable[Lease | None],
    after: Iterable[Lease | None],
    calls: Iterable[Any] = (),
    *,
    reference: bool = False,
) -> None:
    """The strategy machine's lease invariants for one transaction of a regression file: the leases
    ``before`` and ``after`` it, and its ``calls`` (``(method, args)`` pairs or ``Call`` values).
    Raises the broken invariant (a ``ReferenceInvariantViolation`` when ``reference`` says the
    leases are the reference model's); returns None when all hold."""
    ops = [op if isinstance(op, Call) else Call(op[0], (("run_id", op[1][0]),)) for op in calls]
    try:
        check_leases(before, after, ops)
    except InvariantViolation as error:
        if reference:
            raise ReferenceInvariantViolation.of(error) from None
        raise
