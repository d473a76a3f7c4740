"""The transaction manager: the one place that opens, retries and ends transactions.

- Every write runs inside ``BEGIN IMMEDIATE``, so the write lock is taken
  before the first read and "read the row, decide, write" is an atomic
  compare-and-swap (a deferred transaction that upgrades to a write fails with
  ``SQLITE_BUSY`` whatever the busy timeout).
- A transient failure (``SQLITE_BUSY``/``SQLITE_LOCKED``, directly or as the
  cause of a strategy's ``ConsensusError``) rolls the attempt back and replays
  the whole body after a jittered back-off, within the store's
  ``RetryPolicy``. SQLite's own busy handler is kept short because it is
  unfair under contention: a waiter polling on a fixed schedule can lose the
  lock to newcomers for its whole timeout.
- A write begun inside another write on the same thread becomes a savepoint
  and does not retry on its own; the outermost write retries.
- Failures are classified once: a ``RunStoreError`` passes through;
  ``sqlite3.IntegrityError`` becomes ``constraint``; every other database or
  strategy failure becomes ``persistence_failed``. Causes are payload-free and
  never carry the driver's message (it can quote bound values), and the
  classified error is raised outside the ``except`` block so no exception
  chain leads back to it.
- ``Transaction`` is the object strategies receive (``runstore.consensus``):
  ``connection``, ``dialect == "sqlite"``, ``on_commit`` and ``on_rollback``.
  Rollback callbacks run in reverse registration order. It also carries
  ``lease_queries`` (``runstore.sqlite._lease_queries``): ``SqlConsensus``
  takes its statements from the transaction, never from the backend.
- A manager built with ``read_only=True`` refuses every write before it
  begins (``persistence_failed``, ``cause["stage"] == "read-only"``); its
  reads may go through a ``Reader`` (``runstore.sqlite._readonly``), which
  may replace the connection between reads and asks for a read to be
  repeated (``FileChanged``) when the file changed under it.
"""

from __future__ import annotations

import contextlib
import random
import sqlite3
import threading
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any, Final, Literal, Protocol, TypeVar

from .._errors import ConstraintError, DecodeFailedError, PersistenceFailedError, RunStoreError
from .._sql._faults import ArmedFault, FaultPlan, FaultyConsensus, RetryPolicy
from .._sql._modes import read_only_refusal
from .._sql._tx import RollbackAndReturn as RollbackAndReturn
from .._sql._tx import refuse_on_event_loop
from .._sql._tx import run_callbacks as _run_callbacks
from ..consensus._sql import register_lease_statements
from ..consensus._types import ConsensusError
from . import _lease_queries

# A transaction that names its dialect but carries no statements (someone
# else's store) gets these from SqlConsensus.
register_lease_statements("sqlite", _lease_queries)

T = TypeVar("T")

_TRANSIENT = frozenset({5, 6})  # SQLITE_BUSY, SQLITE_LOCKED (primary codes)
_CODE_NAMES = {5: "busy", 6: "busy", 10: "io", 13: "io", 19: "constraint"}
_begin = sqlite3.Connection.execute
_UNDECODABLE = "Could not decode to UTF-8"


class Connection(sqlite3.Connection):
    """The store's connection: ``execute`` lets the fault seam count statements.

    ``statement_hook`` is None except during a write attempt that carries a
    statement fault, so the ordinary cost is one attribute test.
    """

    statement_hook: Callable[[], None] | None = None

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
        hook = self.statement_hook
        if hook is not None:
            hook()
        return super().execute(sql, parameters)


class FileChanged(Exception):
    """Internal: a database file read without SQLite's locks changed while it
    was read (or a writer appeared); the read is repeated, like a busy one."""


class Reader(Protocol):
    """How a read-only manager reads a file it cannot lock (``_readonly``)."""

    def read(self, tm: TransactionManager, body: Callable[[sqlite3.Connection], T]) -> T: ...


class Transaction:
    """One open write transaction (or savepoint), as the store and strategies see it."""

    __slots__ = ("_commit", "_connection", "_rollback", "consensus")

    dialect: Final[Literal["sqlite"]] = "sqlite"
    #: ``SqlConsensus``'s statements in this dialect, handed to it with the transaction.
    lease_queries: Final[ModuleType] = _lease_queries

    def __init__(self, connection: sqlite3.Connection, consensus: Any) -> None:
        self._connection = connection
        self._commit: list[Callable[[], None]] = []
        self._rollback: list[Callable[[], None]] = []
        #: The strategy as this attempt must call it (wrapped when a fault is armed).
        self.consensus = consensus

    @property
    def connection(self) -> sqlite3.Connection:
        return self._connection

    def on_commit(self, fn: Callable[[], None]) -> None:
        self._commit.append(fn)

    def on_rollback(self, fn: Callable[[], None]) -> None:
        self._rollback.append(fn)


#: What the manager classifies. Anything else (a defect, an AssertionError from
#: an invariant check) is rolled back and propagates unchanged.
_CLASSIFIED = (RunStoreError, sqlite3.Error, ConsensusError, FileChanged)


#: How many links of a failure's cause chain are inspected for the database
#: error behind it, counted from the failure's own cause (upstream's depth).
CAUSE_DEPTH = 8


def _sqlite_error(error: BaseException) -> sqlite3.Error | None:
    """The database error ``error`` is, or the first one among the next
    ``CAUSE_DEPTH`` links of its cause chain (a strategy may wrap the driver's
    error in several layers of its own before raising ``ConsensusError``)."""
    if isinstance(error, sqlite3.Error):
        return error
    current = error.__cause__ or error.__context__
    for _ in range(CAUSE_DEPTH):
        if current is None:
            return None
        if isinstance(current, sqlite3.Error):
            return current
        current = current.__cause__ or current.__context__
    return None


#: ``create``'s constraints by SQLite's extended result code.
_CREATE_CONSTRAINTS = {
    1555: "run_id",  # SQLITE_CONSTRAINT_PRIMARYKEY: the id is taken
    787: "parent_run_id",  # SQLITE_CONSTRAINT_FOREIGNKEY: no such parent
    2067: "lineage_round",  # SQLITE_CONSTRAINT_UNIQUE: (lineage, round) is taken
}


def is_transient(error: BaseException) -> bool:
    if isinstance(error, RunStoreError):
        return False
    if isinstance(error, FileChanged):
        return True
    found = _sqlite_error(error)
    code = getattr(found, "sqlite_errorcode", None)
    return type(code) is int and (code & 0xFF) in _TRANSIENT


def classify(method: str, error: BaseException) -> RunStoreError:
    """The payload-free ``RunStoreError`` for a failed operation."""
    if isinstance(error, RunStoreError):
        return error
    if isinstance(error, FileChanged):
        return PersistenceFailedError(
            method,
            "the database file kept changing while it was read",
            {"category": "persistence_failed", "database_code": "busy", "stage": "read-only"},
        )
    found = _sqlite_error(error)
    code = getattr(found, "sqlite_errorcode", None)
    name = getattr(found, "sqlite_errorname", None)
    cause: dict[str, Any] = {
        "error": type(found if found is not None else error).__name__,
        "sqlite_error": name if type(name) is str else None,
    }
    if isinstance(error, ConsensusError):
        cause["consensus_code"] = error.code
    if isinstance(found, sqlite3.IntegrityError):
        if method == "create" and type(code) is int and code in _CREATE_CONSTRAINTS:
            cause["constraint"] = _CREATE_CONSTRAINTS[code]
        return ConstraintError(method, {"database_code": "constraint", **cause})
    if isinstance(found, sqlite3.OperationalError) and str(found).startswith(_UNDECODABLE):
        # Stored text that is not UTF-8 (written behind the store's back). The
        # driver's message quotes the text, so only the stage is reported.
        return DecodeFailedError(
            method, "could not decode stored text", {"stage": "text-encoding", **cause}
        )
    database_code = "unknown"
    if type(code) is int:
        database_code = _CODE_NAMES.get(code & 0xFF, "unknown")
    return PersistenceFailedError(
        method,
        cause={"category": "persistence_failed", "database_code": database_code, **cause},
    )


def _lenient_text(data: bytes) -> str:
    return data.decode("utf-8", "surrogateescape")


class TransactionManager:
    """Serializes a store's use of its one connection and runs its transactions."""

    #: Refuse every call made on an event loop's thread (``runstore.aio`` sets it).
    loop_guard: bool = False

    def __init__(
        self,
        connection: Connection,
        consensus: Any,
        retry: RetryPolicy,
        *,
        read_only: bool = False,
        reader: Reader | None = None,
    ) -> None:
        self.connection = connection
        self.consensus = consensus
        self.retry = retry
        #: Every write is refused before it begins.
        self.read_only = read_only
        self.reader = reader
        self.faults: FaultPlan | None = None
        self.lock = threading.RLock()
        self._active: Transaction | None = None
        self._depth = 0
        #: How many times ``interrupt`` was called (a write stops retrying
        #: once it moves).
        self._interrupts = 0
        self._random = random.Random()

    # -- writes ---------------------------------------------------------------

    def write(self, method: str, body: Callable[[Transaction], T]) -> T:
        """Run ``body`` in one write transaction; retry transient failures."""
        if self.loop_guard:
            refuse_on_event_loop(method)
        if self.read_only:
            raise read_only_refusal(method)
        with self.lock:
            if self._active is not None:
                return self._nested(method, body)
            policy = self.retry
            started = time.monotonic()
            attempt = 0
            interrupts = self._interrupts
            while True:
                attempt += 1
                error: RunStoreError
                try:
                    return self._attempt(body)
                except RollbackAndReturn as rolled_back:
                    return rolled_back.value  # type: ignore[no-any-return]
                except _CLASSIFIED as failure:
                    if not is_transient(failure):
                        error = classify(method, failure)
                    else:
                        delay = self._delay(policy, attempt)
                        elapsed_ms = (time.monotonic() - started) * 1000
                        if (
                            attempt >= policy.max_attempts
                            or elapsed_ms + delay * 1000 > policy.budget_ms
                            or self._interrupts != interrupts
                        ):
                            # Out of budget, or interrupted while it waited
                            # for the lock: no more retries.
                            error = classify(method, failure)
                            error.cause["attempts"] = attempt
                        else:
                            time.sleep(delay)
                            continue
                # Raised here, outside the handler, so the chain ends at ``error``.
                raise error

    def _delay(self, policy: RetryPolicy, attempt: int) -> float:
        ceiling = min(policy.max_delay_ms, policy.base_delay_ms * (2 ** min(attempt, 30)))
        return self._random.uniform(0, ceiling) / 1000

    def _attempt(self, body: Callable[[Transaction], T]) -> T:
        connection = self.connection
        armed: ArmedFault | None = None
        if self.faults is not None:
            armed = self.faults._take()
        consensus = self.consensus
        if armed is not None:
            if armed.fault.point == "statement":
                connection.statement_hook = armed.before_statement
            elif armed.fault.point == "strategy":
                consensus = FaultyConsensus(consensus, armed)
        tx = Transaction(connection, consensus)
        _begin(connection, "BEGIN IMMEDIATE")
        self._active = tx
        try:
            result = body(tx)
            if armed is not None:
                armed.before_commit()
            _begin(connection, "COMMIT")
        except BaseException:
            self._active = None
            connection.statement_hook = None
            if armed is not None:
                armed.finish()
            try:
                if connection.in_transaction:
                    _begin(connection, "ROLLBACK")
            finally:
                _run_callbacks(list(reversed(tx._rollback)))
            raise
        self._active = None
        connection.statement_hook = None
        if armed is not None:
            armed.finish()
        _run_callbacks(tx._commit)
        return result

    def _nested(self, method: str, body: Callable[[Transaction], T]) -> T:
        outer = self._active
        assert outer is not None
        self._depth += 1
        name = f"runstore_{self._depth}"
        connection = self.connection
        inner = Transaction(connection, outer.consensus)
        _begin(connection, f"SAVEPOINT {name}")
        self._active = inner
        try:
            result = body(inner)
        except BaseException as failure:
            try:
                _begin(connection, f"ROLLBACK TO {name}")
                _begin(connection, f"RELEASE {name}")
            finally:
                self._active = outer
                self._depth -= 1
                _run_callbacks(list(reversed(inner._rollback)))
            if isinstance(failure, RollbackAndReturn):
                return failure.value  # type: ignore[no-any-return]
            # A transient failure must reach the outermost write, which retries.
            if isinstance(failure, _CLASSIFIED) and not is_transient(failure):
                error = classify(method, failure)
            else:
                raise
        else:
            _begin(connection, f"RELEASE {name}")
            self._active = outer
            self._depth -= 1
            outer._commit.extend(inner._commit)
            outer._rollback.extend(inner._rollback)
            return result
        raise error

    # -- reads ----------------------------------------------------------------

    def read(self, method: str, body: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``body`` on the connection outside any write transaction.

        Inside a write on the same thread it sees that transaction's changes.
        """
        if self.loop_guard:
            refuse_on_event_loop(method)
        with self.lock:
            if self._active is not None:
                return body(self.connection)
            policy = self.retry
            started = time.monotonic()
            attempt = 0
            while True:
                attempt += 1
                error: RunStoreError
                try:
                    if self.reader is not None:
                        return self.reader.read(self, body)
                    return body(self.connection)
                except _CLASSIFIED as failure:
                    delay = self._delay(policy, attempt)
                    elapsed_ms = (time.monotonic() - started) * 1000
                    if (
                        is_transient(failure)
                        and attempt < policy.max_attempts
                        and elapsed_ms + delay * 1000 <= policy.budget_ms
                    ):
                        time.sleep(delay)
                        continue
                    error = classify(method, failure)
                raise error

    def snapshot(self, method: str, body: Callable[[Transaction], T], *, keep: bool = False) -> T:
        """Run a multi-statement read in one deferred transaction (one snapshot).

        Takes no faults and changes nothing; used by ``state()`` and
        ``check_invariants()``. The body's rollback callbacks run at the end,
        unless ``keep``: then, when the body returns, its commit callbacks run
        instead, as after a write that committed (a read-only store's
        ``on_open``, whose effects live in the strategy).
        """

        def run(connection: sqlite3.Connection) -> T:
            if self._active is not None:
                return body(self._active)
            tx = Transaction(connection, self.consensus)
            # Text that is not UTF-8 comes back with its bad bytes as lone
            # surrogates, which no decoder admits: described, not refused.
            connection.text_factory = _lenient_text
            _begin(connection, "BEGIN")
            self._active = tx
            kept = False
            try:
                result = body(tx)
                kept = keep
                return result
            finally:
                self._active = None
                connection.text_factory = str
                if connection.in_transaction:
                    _begin(connection, "ROLLBACK")
                _run_callbacks(tx._commit if kept else list(reversed(tx._rollback)))

        return self.read(method, run)

    # -- lifetime -------------------------------------------------------------

    def interrupt(self) -> None:
        """Abort the statement running right now, from any thread (no lock:
        the call it aborts holds it). An idle connection is unaffected."""
        # Closed between the caller's check and this call: nothing is running.
        # A write waiting for the file's lock between its retries has no
        # statement running: the count stops its retries.
        self._interrupts += 1
        with contextlib.suppress(sqlite3.ProgrammingError):
            self.connection.interrupt()

    def close(self) -> None:
        self.connection.close()
