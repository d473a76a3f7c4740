"""Errors: misuse and infrastructure failures, never competition.

The tree::

    RunStoreError(Exception)                  .code, .method, .cause
    ├── InvalidRunError(RunStoreError, ValueError)        "invalid_run"
    ├── RunNotFoundError(RunStoreError, LookupError)      "not_found_row"
    ├── ConstraintError(RunStoreError)                    "constraint"
    ├── DecodeFailedError(RunStoreError)                  "decode_failed"
    └── PersistenceFailedError(RunStoreError)             "persistence_failed", .outcome_unknown
        └── UnsupportedDatabaseError                      (a file we must not open)

``cause`` is a payload-free dict: field names, lengths, validity flags and
timestamps that already passed validation. It never holds run state, attempt
values or driver messages, because errors reach logs and telemetry. Admission
errors are raised ``from None`` so no exception chain carries rejected text.
"""

from __future__ import annotations

from typing import Any, Literal, TypeAlias

ErrorCode: TypeAlias = Literal[
    "invalid_run", "not_found_row", "constraint", "decode_failed", "persistence_failed"
]
"""The five error codes: ``invalid_run`` (an argument breaks the contract), ``not_found_row`` (no
such run), ``constraint`` (the database refused a write), ``decode_failed`` (a stored row is
broken) and ``persistence_failed`` (storage or the strategy failed)."""
ERROR_CODES: frozenset[str] = frozenset(
    {"invalid_run", "not_found_row", "constraint", "decode_failed", "persistence_failed"}
)


class RunStoreError(Exception):
    """Raised by every store operation on misuse or infrastructure failure.

    Use ``except RunStoreError`` and branch on ``.code``; the subclasses exist
    so callers can also catch the builtin their situation suggests. Stores
    build them; a store of your own builds one as ``RunStoreError(code,
    method, text, cause)``: ``code`` an ``ErrorCode``, ``method`` the
    operation's snake-case name, ``text`` the human half of the message (never
    run state or a secret), ``cause`` the payload-free details (copied).
    """

    code: ErrorCode
    """What kind of failure, an ``ErrorCode``: branch on this."""
    method: str
    """The snake-case name of the operation that raised it (``"claim"``, ``"open"``)."""
    cause: dict[str, Any]
    """Payload-free details: field names, lengths, validity flags, reasons, SQLSTATEs;
    never run state, attempt values or a driver's message."""

    def __init__(
        self, code: ErrorCode, method: str, text: str, cause: dict[str, Any] | None = None
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
        # Keep errors picklable across processes without re-running __init__'s
        # message formatting on the formatted text.
        return (_rebuild, (type(self), self.code, self.method, self.message, self.cause))


def _rebuild(
    cls: type[RunStoreError], code: ErrorCode, method: str, message: str, cause: dict[str, Any]
) -> RunStoreError:
    error = cls.__new__(cls)
    Exception.__init__(error, message)
    error.code = code
    error.method = method
    error.cause = cause
    return error


def _invalid_text(cause: dict[str, Any]) -> str:
    """``"<argument> <rule>"`` from an admission cause, never the value."""
    field = cause.get("field")
    detail = cause.get("detail")
    if type(field) is not str or not field:
        field = "an argument"
    if type(detail) is not str or not detail:
        detail = "violates the durable contract"
    return f"{field} {detail}"


class InvalidRunError(RunStoreError, ValueError):
    """Raised by any operation when an argument breaks the durable contract.

    The message names the argument and the rule it broke (``"invalid_run:
    claim: expected must be a RunSnapshot or RunRow"``), never the value, which
    may be run state or a credential. Nothing is written. Raised ``from None``.
    Built as ``InvalidRunError(method, cause)``: ``method`` is the operation's
    name, ``cause`` the details, whose ``"field"`` names the argument and
    ``"detail"`` the rule.
    """

    def __init__(self, method: str, cause: dict[str, Any]) -> None:
        super().__init__("invalid_run", method, _invalid_text(cause), cause)


class RunNotFoundError(RunStoreError, LookupError):
    """Raised by ``get`` and ``latest_round`` when no run has the id. Built as
    ``RunNotFoundError(method, run_id)``: ``method`` is the operation's name and
    ``run_id`` the id asked for (kept as ``cause["run_id"]``)."""

    def __init__(self, method: str, run_id: str) -> None:
        super().__init__("not_found_row", method, "run was not found", {"run_id": run_id})


#: What a ``ConstraintError`` says for each named constraint of ``create``.
CONSTRAINT_TEXTS: dict[str, str] = {
    "run_id": "a run with this id already exists",
    "parent_run_id": "the parent run does not exist",
    "lineage_round": "the lineage already has a run at this round",
}


class ConstraintError(RunStoreError):
    """Raised when the database refuses a write on a constraint: a duplicate run
    id, a missing parent, a duplicate lineage round. The operation rolled back.

    ``cause["constraint"]``, when known, names which (``"run_id"``,
    ``"parent_run_id"``, ``"lineage_round"``) and the message says it in words.
    Built as ``ConstraintError(method, cause)``: ``method`` is the operation's
    name, ``cause`` the details (``"category": "constraint"`` is added).
    """

    def __init__(self, method: str, cause: dict[str, Any] | None = None) -> None:
        details = {"category": "constraint", **(cause or {})}
        text = CONSTRAINT_TEXTS.get(
            str(details.get("constraint")), "a database constraint refused the write"
        )
        super().__init__("constraint", method, text, details)


class DecodeFailedError(RunStoreError):
    """Raised by reads when a stored row breaks the schema or its invariants,
    typically because something edited it behind the store's back. Built as
    ``DecodeFailedError(method, text, cause)``: ``method`` is the operation's
    name, ``text`` says what is wrong with the row and ``cause`` which row and
    column, never its content."""

    def __init__(self, method: str, text: str, cause: dict[str, Any]) -> None:
        super().__init__("decode_failed", method, text, cause)


class PersistenceFailedError(RunStoreError):
    """Raised when storage or the consensus strategy fails. The whole operation
    rolled back and nothing it did is visible, unless ``outcome_unknown``.
    Built as ``PersistenceFailedError(method, text, cause)``: ``method`` is the
    operation's name, ``text`` the message (default "database operation
    failed") and ``cause`` the details; on PostgreSQL ``cause["reason"]`` names
    what failed (``connection-lost``, ``statement-timeout``, ...)."""

    def __init__(
        self,
        method: str,
        text: str = "database operation failed",
        cause: dict[str, Any] | None = None,
    ) -> None:
        super().__init__("persistence_failed", method, text, cause)

    @property
    def outcome_unknown(self) -> bool:
        """True when the operation may have committed (``cause["outcome"] ==
        "unknown"``): the connection to a database server was lost after the
        commit was sent, before its answer arrived; or (PostgreSQL) the store
        had cancelled the write (``interrupt()``, or its bound on a commit) and
        the server then answered that it committed, which a commit cut short
        of a synchronous standby's confirmation does, though only the primary
        has it. Such an operation is never replayed by the store; read the run
        again (``get``, ``ownership_facts``) to learn what happened, after a
        cancelled commit once the standby has confirmed (a later write
        acknowledged as done). False for every other failure, which rolled
        back whole."""
        return self.cause.get("outcome") == "unknown"


class UnsupportedDatabaseError(PersistenceFailedError):
    """Raised by ``runstore.open`` when the file must not be used: its schema is
    newer than this version, it is not a runstore database, WAL cannot be
    enabled, or SQLite is too old (PostgreSQL: too old, not UTF8, or the
    driver is missing). Built as ``UnsupportedDatabaseError(reason, cause)``:
    ``reason`` is the message's text and ``cause`` the details, whose
    ``"stage"`` says which check refused. Its ``method`` is ``"open"``."""

    def __init__(self, reason: str, cause: dict[str, Any] | None = None) -> None:
        super().__init__("open", reason, cause)
