"""Operations as data: one call to a store, and what it answered.

The differential machines describe every operation they perform as a ``Call``
(an operation name and its arguments, by name, in the operation's order) and
apply it to each side with ``perform``, which returns the outcome value or a
``Raised`` describing the ``RunStoreError``. Two sides agree on a step when the
results compare equal with ``==``. The invariants read the same ``Step``
values, and the fuzzer renders them back into plain API calls.

This module needs neither Hypothesis nor pytest.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from runstore._errors import RunStoreError


@attrs.frozen
class Raised:
    """An operation raised ``RunStoreError``: its ``code`` and ``method``.

    ``field`` (the admission field, when the error names one) is carried for
    the reader but left out of comparisons: the contract pins codes and method
    names. ``cause`` (a copy of the error's ``cause``) is left out of
    comparisons and of the repr too; only the checks that know what failed
    (an injected fault, a row broken on purpose) read it.
    """

    code: str
    """The error's ``code`` (``invalid_run``, ``persistence_failed``, ...)."""
    method: str
    """The error's ``method``: the operation that raised it."""
    field: str | None = attrs.field(default=None, eq=False)
    """The admission field the error names (``cause["field"]``), if any; not compared."""
    cause: Mapping[str, Any] = attrs.field(factory=dict, eq=False, repr=False)
    """A copy of the error's ``cause``; neither compared nor shown."""


@attrs.frozen
class Crashed:
    """An operation raised something other than ``RunStoreError``: a defect."""

    exception: str
    message: str = attrs.field(default="", eq=False)


@attrs.frozen
class Call:
    """One operation: ``method`` with ``arguments`` as ``(name, value)`` pairs.

    Keyword-only arguments are listed in ``keywords``; the rest are passed
    positionally in order.
    """

    method: str
    """The operation's name, as the ``RunStore`` protocol spells it."""
    arguments: tuple[tuple[str, Any], ...] = ()
    """The arguments as ``(name, value)`` pairs, in the operation's order."""
    keywords: frozenset[str] = frozenset()
    """The names among ``arguments`` that are passed by keyword."""

    def get(self, name: str, default: Any = None) -> Any:
        """The argument called ``name``, or ``default``."""
        for key, value in self.arguments:
            if key == name:
                return value
        return default

    @property
    def run_id(self) -> Any:
        """The call's ``run_id`` argument, or None when it has none."""
        return self.get("run_id")

    def describe(self) -> str:
        """A compact one-line rendering for notes."""
        parts = [f"{k}={v!r}" for k, v in self.arguments]
        return f"{self.method}({', '.join(parts)})"


def call(method: str, /, *positional: tuple[str, Any], **keywords: Any) -> Call:
    """Build a ``Call`` from ``(name, value)`` pairs and keyword arguments.

    Keyword arguments whose value is ``None`` are left out, so the operation
    sees its own default.
    """
    kept = {k: v for k, v in keywords.items() if v is not None}
    return Call(method, (*positional, *kept.items()), frozenset(kept))


@attrs.frozen
class Step:
    """A performed call and its result, as the invariants see it."""

    call: Call
    """The ``Call`` that was made."""
    outcome: Any
    """What it answered: an outcome value, a ``Raised``, or what the operation returned."""

    @property
    def method(self) -> str:
        """The name of the operation the step made."""
        return self.call.method

    def get(self, name: str, default: Any = None) -> Any:
        """The step's argument called ``name``, or ``default`` when the call has none."""
        return self.call.get(name, default)

    @property
    def raised(self) -> bool:
        """Whether the operation raised (a ``Raised`` or a crash) rather than answered."""
        return isinstance(self.outcome, Raised | Crashed)


def _field_of(error: RunStoreError) -> str | None:
    field = cause_of(error).get("field")
    return field if isinstance(field, str) else None


def cause_of(error: Exception) -> dict[str, Any]:
    """A copy of ``error.cause`` (empty when it is not a mapping)."""
    cause = getattr(error, "cause", None)
    return dict(cause) if isinstance(cause, Mapping) else {}


def perform(target: object, op: Call) -> Any:
    """Apply ``op`` to ``target`` and return the outcome or a ``Raised``/``Crashed``.

    Only ``Exception`` is caught: ``KeyboardInterrupt`` and friends propagate.
    """
    method = getattr(target, op.method)
    args = [v for k, v in op.arguments if k not in op.keywords]
    kwargs = {k: v for k, v in op.arguments if k in op.keywords}
    try:
        return method(*args, **kwargs)
    except RunStoreError as error:
        return Raised(str(error.code), str(error.method), _field_of(error), cause_of(error))
    except Exception as error:
        return Crashed(type(error).__name__, str(error)[:200])
