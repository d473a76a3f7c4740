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
"""

from __future__ import annotations

from typing import Any, Final

import psycopg

from .._errors import ConstraintError, PersistenceFailedError, RunStoreError
from .._sql._faults import InjectedFault
from ..consensus._types import ConsensusError

#: Serialization failure and deadlock: the whole transaction is replayed.
TRANSIENT_STATES: Final = frozenset({"40001", "40P01"})

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
    if sqlstate(found) in TRANSIENT_STATES:
        return True
    return connection_lost and isinstance(found, psycopg.OperationalError)


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
    if family == "08" or state in ("57P01", "57P02", "57P03"):
        return "connection"
    if family == "53":
        return "resource"
    if family in ("57", "58"):
        return "io"
    return "unknown"


def classify(method: str, error: BaseException) -> RunStoreError:
    """The payload-free ``RunStoreError`` for a failed operation."""
    if isinstance(error, RunStoreError):
        return error
    found = database_error(error)
    state = sqlstate(found)
    code = database_code(state, found)
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
    return PersistenceFailedError(
        method, cause={"category": "persistence_failed", "database_code": code, **cause}
    )
