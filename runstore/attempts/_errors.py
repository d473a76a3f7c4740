"""``AttemptStoreError``: misuse and infrastructure failures of an attempt store.

A root of its own, separate from ``RunStoreError`` (the original has two error
types too), so ``except RunStoreError`` never swallows an attempt failure by
accident. Codes:

- ``invalid_attempt``: an argument or an option breaks the contract; nothing
  was written; raised ``from None``;
- ``constraint``: the database refused the write on a constraint;
- ``decode_failed``: a stored attempt row is malformed (edited behind the
  store's back); the message names the column, never its content;
- ``persistence_failed``: storage failed; the operation rolled back;
- ``unknown``: anything else, including a run-store failure of another kind.

``cause`` is a payload-free dict: field and column names, fixed complaints,
lengths. It never holds attempt values, run state or driver messages, because
errors reach logs and telemetry.
"""

from __future__ import annotations

from typing import Any, Literal, TypeAlias

from .. import _telemetry

AttemptErrorCode: TypeAlias = Literal[
    "invalid_attempt", "constraint", "decode_failed", "persistence_failed", "unknown"
]
"""The attempt store's error codes: ``invalid_attempt``, ``constraint``, ``decode_failed``,
``persistence_failed`` and ``unknown``."""
ATTEMPT_ERROR_CODES: frozenset[str] = frozenset(
    {"invalid_attempt", "constraint", "decode_failed", "persistence_failed", "unknown"}
)


@_telemetry.store_error
class AttemptStoreError(Exception):
    """Raised by every attempt-store operation (and by building a store with
    invalid options) on misuse or infrastructure failure.

    Branch on ``.code``; ``.method`` is the operation (``put``, ``get``,
    ``heartbeat``, ``finish``, ``patch``, or ``options`` for construction).
    Built as ``AttemptStoreError(code, method, text, cause)``: ``code`` an
    ``AttemptErrorCode``, ``method`` the operation, ``text`` the human half of
    the message (never a value), ``cause`` the payload-free details (copied).
    """

    code: AttemptErrorCode
    """What kind of failure, an ``AttemptErrorCode``: branch on this."""
    method: str
    """The operation that raised it: ``put``, ``get``, ``heartbeat``, ``finish``,
    ``patch``, ``state``, ``check_invariants``, or ``options`` when building the store."""
    cause: dict[str, Any]
    """Payload-free details: field and column names, fixed complaints, lengths;
    never attempt values, run state or a driver's message."""

    def __init__(
        self,
        code: AttemptErrorCode,
        method: str,
        text: str,
        cause: dict[str, Any] | None = None,
    ) -> None:
        self.code = code
        self.method = method
        self.cause = dict(cause or {})
        super().__init__(f"{code}: {method}: {text}")

    @property
    def message(self) -> str:
        """The message, ``"<code>: <method>: <text>"``."""
        return str(self.args[0])

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, cause={self.cause!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        # Picklable across processes without re-formatting the message.
        return (_rebuild, (type(self), self.code, self.method, self.message, self.cause))


def _rebuild(
    cls: type[AttemptStoreError],
    code: AttemptErrorCode,
    method: str,
    message: str,
    cause: dict[str, Any],
) -> AttemptStoreError:
    error = cls.__new__(cls)
    Exception.__init__(error, message)
    error.code = code
    error.method = method
    error.cause = cause
    return error
