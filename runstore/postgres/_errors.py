"""PostgreSQL failures, classified by SQLSTATE into the store's error codes.

The same codes as on SQLite:

===========================  ==========================  ====================
SQLSTATE                     ``database_code``           error code
===========================  ==========================  ====================
class 23 (integrity)         ``constraint``              ``constraint``
40001, 40P01                 ``busy`` (retried)          ``persistence_failed``
class 08, a lost connection  ``connection``              ``persistence_failed``
class 53 (resources)         ``resource``                ``persistence_failed``
57014 (cancelled, timeout)   ``interrupted``             ``persistence_failed``
class 57 otherwise, 58       ``io``                      ``persistence_failed``
anything else                ``unknown``                 ``persistence_failed``
===========================  ==========================  ====================

PostgreSQL's messages quote row values ("Failing row contains ...", "Key
(run_id)=(...)") and sometimes parameters, and run state may hold
credentials. So a cause carries only the SQLSTATE, the constraint and table
names (schema, never data) and the class of the Python exception, never the
message, its detail, hint, context or the statement.

A ``persistence_failed`` cause also names a ``reason`` and the message says
it in words, so an operator can tell the failures apart without the server's
text: ``statement-timeout`` (the server's ``statement_timeout``) from
``interrupted`` (``store.interrupt()``), both SQLSTATE 57014;
``lock-timeout``; ``idle-in-transaction-timeout``; ``too-many-connections``
(the server's ``max_connections``, or a pooler's pool, is exhausted);
``connection-lost``; ``server-shutting-down``; ``read-only-server`` (a
standby); ``serialization-failure`` and ``deadlock`` (once retries ran out);
``disk-full``; ``out-of-memory``; ``insufficient-privilege`` (SQLSTATE
42501: the store names the grants its role lacks, see ``_grants``); and for a
failed reconnection the reasons ``open`` gives (``unreachable``,
``authentication-failed``, ...).

A write during which the store sent a cancel (``store.interrupt()``, or its
own bound on a commit's wait, see ``_tx``) and which the server then answered
as committed is outcome-unknown (``cancelled_outcome``): PostgreSQL answers
a commit whose wait for a synchronous standby was cancelled as committed (its
WARNING, which follows ``lc_messages``, is never read), though only the
primary has it. Only an error proves that it rolled back.
"""

from __future__ import annotations

from typing import Any, Final

import psycopg

from .._errors import ConstraintError, PersistenceFailedError, RunStoreError
from .._sql._faults import InjectedFault
from ..consensus._types import ConsensusError
from ._fused_sql import WRITE_INVARIANT

#: Serialization failure and deadlock: the whole transaction is replayed.
TRANSIENT_STATES: Final = frozenset({"40001", "40P01"})

#: The server ended the session (FATAL): what was open rolled back.
SESSION_ENDED_STATES: Final = frozenset({"25P03", "57P01", "57P02", "57P03"})

#: ``create``'s constraints by PostgreSQL's constraint names (see ``_migrations``).
_CREATE_CONSTRAINTS: Final = {
    "flows_runs_pkey": "run_id",
    "flows_runs_parent_run_id_fkey": "parent_run_id",
    "flows_runs_lineage_idx": "lineage_round",
}

CAUSE_DEPTH: Final = 8


def database_error(error: BaseException) -> BaseException | None:
    """The driver error (or injected fault) ``error`` is, or the first among
    the next ``CAUSE_DEPTH`` links of its cause chain."""
    if isinstance(error, (psycopg.Error, InjectedFault)):
        return error
    current = error.__cause__ or error.__context__
    for _ in range(CAUSE_DEPTH):
        if current is None:
            return None
        if isinstance(current, (psycopg.Error, InjectedFault)):
            return current
        current = current.__cause__ or current.__context__
    return None


def sqlstate(error: BaseException | None) -> str | None:
    state = getattr(error, "sqlstate", None)
    return state if type(state) is str and len(state) == 5 else None


def is_transient(error: BaseException, *, connection_lost: bool = False) -> bool:
    """Whether replaying the whole transaction may succeed: a serialization
    failure, a deadlock, an injected transient fault, or (when the caller says
    the connection was lost before anything was committed) a lost connection."""
    if isinstance(error, RunStoreError):
        return False
    found = database_error(error)
    if isinstance(found, InjectedFault):
        return found.fault.transient
    state = sqlstate(found)
    if state in TRANSIENT_STATES:
        return True
    if not connection_lost:
        return False
    # The session is gone and its transaction with it (the server ended it:
    # a shutdown, an idle-in-transaction timeout, or the link dropped).
    return isinstance(found, psycopg.OperationalError) or state in SESSION_ENDED_STATES


def database_code(state: str | None, error: BaseException | None) -> str:
    if isinstance(error, InjectedFault):
        return "busy" if error.fault.transient else "io"
    if state is None:
        # libpq reports a dropped connection without a SQLSTATE.
        return "connection" if isinstance(error, psycopg.OperationalError) else "unknown"
    if state in TRANSIENT_STATES:
        return "busy"
    if state.startswith("23"):
        return "constraint"
    if state == "57014":
        return "interrupted"
    family = state[:2]
    if family == "08" or state in ("57P01", "57P02", "57P03", "25P03"):
        return "connection"
    if family == "53":
        return "resource"
    if family in ("57", "58"):
        return "io"
    return "unknown"


#: Why a connection could not be made, by SQLSTATE when the server sent one,
#: else by a phrase of libpq's message (the message itself is never passed
#: on: it names hosts, users and databases).
CONNECT_STATES: Final = {
    "28P01": "authentication-failed",
    "28000": "authentication-failed",
    "3D000": "database-missing",
    "42501": "insufficient-privilege",
    "53300": "too-many-connections",
    "57P03": "server-starting-or-stopping",
}
_CONNECT_PHRASES: Final = (
    ("password authentication failed", "authentication-failed"),
    ("authentication failed", "authentication-failed"),
    ("no password supplied", "authentication-failed"),
    ("does not exist", "database-missing"),
    ("permission denied", "insufficient-privilege"),
    ("too many clients", "too-many-connections"),
    ("too many connections", "too-many-connections"),
    ("remaining connection slots are reserved", "too-many-connections"),
    ("the database system is", "server-starting-or-stopping"),
    # A server that is stopping (or crashing) may take the connection and
    # close it, or reset it, before it answers the handshake.
    ("server closed the connection unexpectedly", "server-starting-or-stopping"),
    ("connection reset by peer", "server-starting-or-stopping"),
    ("timeout expired", "timeout"),
    ("could not translate host name", "host-unknown"),
    ("connection refused", "unreachable"),
    ("no such file or directory", "unreachable"),
    ("server is in hot standby mode", "read-only-server"),
    ("session is read-only", "read-only-server"),
    ("invalid integer value", "invalid-option"),
    ("invalid port number", "invalid-option"),
    ("invalid connection option", "invalid-option"),
    ("ssl", "ssl"),
)
CONNECT_TEXTS: Final = {
    "authentication-failed": "authentication failed",
    "database-missing": "the database (or role) does not exist",
    "insufficient-privilege": (
        "permission denied: the role may not connect to the database (it needs CONNECT "
        "on it, and LOGIN)"
    ),
    "invalid-option": (
        "a connection option has a value libpq does not accept (a port that is not a "
        "number, say; PGPORT and the other PG* variables count too)"
    ),
    "too-many-connections": (
        "the server has no free connection slot (its max_connections, or a pooler's "
        "pool, is exhausted)"
    ),
    "server-starting-or-stopping": "the server is starting up or shutting down",
    "timeout": "the connection timed out",
    "host-unknown": "the host name is unknown",
    "unreachable": "the server could not be reached",
    "read-only-server": "every server named accepts only read-only sessions",
    "ssl": "the SSL negotiation failed",
    "unknown": "the server refused or could not be reached",
}


def connect_reason(error: BaseException) -> str:
    """Why connecting failed (a key of ``CONNECT_TEXTS`` or ``REASON_TEXTS``),
    never libpq's text. A statement the store runs as it connects (its session
    settings) fails for the reasons any statement does (``statement-timeout``)."""
    state = sqlstate(error)
    if state in CONNECT_STATES:
        return CONNECT_STATES[state]
    if state == "57014":
        return "statement-timeout"
    if state in _REASONS:
        return _REASONS[state]
    text = str(error).lower()
    for phrase, reason in _CONNECT_PHRASES:
        if phrase in text:
            return reason
    return "unknown"


class ReconnectFailed(Exception):
    """Raised by the transaction manager when replacing a lost connection
    failed; caused by the driver's error, so the retry logic still sees a
    lost connection. ``reason`` is ``connect_reason``'s."""

    def __init__(self, reason: str) -> None:
        super().__init__("reconnect failed")
        self.reason = reason


#: The reason a failure gets, by SQLSTATE (57014 is decided by the caller).
_REASONS: Final = {
    "40001": "serialization-failure",
    "40P01": "deadlock",
    "55P03": "lock-timeout",
    "25P03": "idle-in-transaction-timeout",
    "53300": "too-many-connections",
    "53100": "disk-full",
    "53200": "out-of-memory",
    "57P01": "server-shutting-down",
    "57P02": "server-shutting-down",
    "57P03": "server-shutting-down",
    "25006": "read-only-server",
    "42501": "insufficient-privilege",
}

#: What the message says for each reason.
REASON_TEXTS: Final = {
    "statement-timeout": (
        "the statement ran longer than the server's statement_timeout and was cancelled"
    ),
    "interrupted": "the running statement was cancelled by store.interrupt()",
    "lock-timeout": "a lock wait ran longer than the server's lock_timeout",
    "idle-in-transaction-timeout": (
        "the server ended the session: its transaction sat idle longer than "
        "idle_in_transaction_session_timeout"
    ),
    "too-many-connections": CONNECT_TEXTS["too-many-connections"],
    "connection-lost": (
        "the connection to the database server was lost; the store reconnects on its next operation"
    ),
    "server-shutting-down": (
        "the database server is shutting down, restarting or recovering; the store "
        "reconnects on its next operation"
    ),
    "read-only-server": (
        "the server accepts only read-only transactions (a standby, or "
        "default_transaction_read_only)"
    ),
    "serialization-failure": "a serialization failure outlasted the retry budget",
    "deadlock": "a deadlock outlasted the retry budget",
    "disk-full": "the database server's disk is full",
    "out-of-memory": "the database server ran out of memory",
    "insufficient-privilege": (
        "permission denied: the store's role lacks a privilege it needs (docs/guides/"
        'postgresql.md, "Grant what the store needs", lists the grants)'
    ),
    "injected": "an injected fault failed the operation",
    "unknown": "database operation failed",
}

UNKNOWN_OUTCOME_TEXT: Final = (
    "the connection was lost after the commit was sent, so the operation may or may "
    "not have committed (outcome unknown); it was not replayed: read the run to learn "
    "what happened"
)


#: What the message of an outcome-unknown write says, by why the store sent
#: a cancel while it was under way (``cancelled_outcome``).
CANCELLED_TEXTS: Final = {
    "interrupted": (
        "store.interrupt() cancelled the operation while it was under way, and the server "
        "then answered that it committed; PostgreSQL answers so for a commit whose wait for "
        "a synchronous standby was cancelled, which only the primary has, so the outcome is "
        'unknown: reading the primary cannot settle it (docs/guides/fleet.md, "Failover to '
        'a standby")'
    ),
    "statement-timeout": (
        "the commit went unanswered for twice the session's statement_timeout (PostgreSQL "
        "does not apply it to a commit, nor to its wait for a synchronous standby), so the "
        "store cancelled it, and the server then answered that it committed, which only the "
        "primary may have, so the outcome is unknown: reading the primary cannot settle it "
        '(docs/guides/fleet.md, "Failover to a standby")'
    ),
}


def reason_text(reason: str) -> str:
    """What a message says for ``reason``."""
    return REASON_TEXTS.get(reason) or CONNECT_TEXTS.get(reason) or REASON_TEXTS["unknown"]


def failure_reason(error: BaseException, *, interrupted: bool = False) -> str:
    """The ``reason`` of a failed operation (a key of ``REASON_TEXTS`` or
    ``CONNECT_TEXTS``). ``interrupted``: ``store.interrupt()`` was called
    during the operation, so a cancellation (57014) was that and not the
    server's ``statement_timeout``."""
    if isinstance(error, ReconnectFailed):
        return error.reason
    found = database_error(error)
    if isinstance(found, InjectedFault):
        return "injected"
    state = sqlstate(found)
    if state == "57014":
        return "interrupted" if interrupted else "statement-timeout"
    if state in _REASONS:
        return _REASONS[state]
    if state is None and isinstance(found, psycopg.OperationalError):
        return "connection-lost"
    if state is not None and state.startswith("08"):
        return "connection-lost"
    return "unknown"


def classify(method: str, error: BaseException, *, interrupted: bool = False) -> RunStoreError:
    """The payload-free ``RunStoreError`` for a failed operation."""
    if isinstance(error, RunStoreError):
        if isinstance(error, PersistenceFailedError) and "reason" not in error.cause:
            # Raised by the shared core (a guarded write that missed its row,
            # a closed or read-only store): its stage is its reason.
            error.cause["reason"] = error.cause.get("stage", "unknown")
        return error
    found = database_error(error)
    state = sqlstate(found)
    code = database_code(state, found)
    if isinstance(error, ReconnectFailed):
        code = "resource" if error.reason == "too-many-connections" else "connection"
    cause: dict[str, Any] = {
        "error": type(found if found is not None else error).__name__,
        "sqlstate": state,
    }
    diag = getattr(found, "diag", None)
    constraint = getattr(diag, "constraint_name", None) if diag is not None else None
    table = getattr(diag, "table_name", None) if diag is not None else None
    if type(constraint) is str:
        cause["constraint_name"] = constraint
    if type(table) is str:
        cause["table_name"] = table
    if isinstance(error, ConsensusError):
        cause["consensus_code"] = error.code
    if code == "constraint":
        if method == "create" and constraint in _CREATE_CONSTRAINTS:
            cause["constraint"] = _CREATE_CONSTRAINTS[constraint]
        return ConstraintError(method, {"database_code": "constraint", **cause})
    if state == WRITE_INVARIANT:
        # A one-statement operation's guarded write missed its row.
        return PersistenceFailedError(
            method,
            "guarded update missed a row it had admitted",
            {"stage": "write-invariant", "reason": "write-invariant", "sqlstate": state},
        )
    reason = failure_reason(error, interrupted=interrupted)
    text = reason_text(reason)
    if isinstance(error, ReconnectFailed):
        text = f"could not reconnect to the database server: {reason_text(reason)}"
    return PersistenceFailedError(
        method,
        text,
        {"category": "persistence_failed", "database_code": code, "reason": reason, **cause},
    )


def unknown_outcome(method: str, error: BaseException) -> RunStoreError:
    """The error of an operation whose commit was sent on a connection that
    was then lost: ``outcome_unknown`` is true, and it is never replayed."""
    classified = classify(method, error)
    cause = {**classified.cause, "outcome": "unknown", "reason": "connection-lost"}
    return PersistenceFailedError(method, UNKNOWN_OUTCOME_TEXT, cause)


def cancelled_outcome(method: str, reason: str) -> PersistenceFailedError:
    """The error of a write that the server answered as committed after the
    store had sent it a cancel (``reason``: ``interrupted`` for
    ``store.interrupt()``, ``statement-timeout`` for the store's own bound on
    the commit): ``outcome_unknown`` is true, and it is never replayed."""
    cause = {
        "category": "persistence_failed",
        "database_code": "interrupted",
        "reason": reason,
        "outcome": "unknown",
        "sqlstate": None,
    }
    return PersistenceFailedError(method, CANCELLED_TEXTS[reason], cause)
