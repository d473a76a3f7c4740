"""The PostgreSQL transaction manager: the one place that opens, retries and
ends transactions on the store's connection.

The connection is in autocommit mode and this manager issues ``BEGIN`` and
``COMMIT`` itself, as the SQLite one does:

- A write runs in ``BEGIN ISOLATION LEVEL READ COMMITTED``; the store locks
  the run row first (``LOCK_RUN``), so each run's compare-and-swap is
  serialized whatever the strategy does, and writers on different runs do
  not wait for each other (the revision counter is taken at commit, by a
  deferred trigger).
- A snapshot read (``state()``, ``check_invariants()``) runs in
  ``REPEATABLE READ READ ONLY``: one snapshot for all its statements.
- A transient failure (serialization failure 40001, deadlock 40P01, an
  injected transient fault, or the connection lost before ``COMMIT`` was
  sent) rolls back and replays the whole body after a jittered back-off,
  within the store's ``RetryPolicy``; a lost connection is replaced first.
  A connection lost after ``COMMIT`` was sent is not replayed: the
  operation may or may not have committed, and it raises
  ``persistence_failed`` with ``cause["outcome"] == "unknown"``.
- A write during which the store sent a cancel (``interrupt()``, or the
  bound below) is outcome-unknown when the server answers it as committed
  (``cancelled_outcome``): PostgreSQL answers a commit whose wait for a
  synchronous standby was cancelled as committed, with a WARNING, though
  only the primary has it. Only an error proves a rollback.
- PostgreSQL disarms ``statement_timeout`` before a commit, so a commit
  waiting for a synchronous standby that stopped answering waits for ever.
  The round trip that commits (the one-round-trip statement, or ``COMMIT``)
  is therefore bounded by the store: when its answer has not come within
  twice the session's ``statement_timeout`` (at least ``MINIMUM_BOUND_MS``;
  read when connecting, ``Connection.statement_timeout_ms``; none when it
  is 0), the store cancels it and waits for the answer.
- A transaction that a swallowed error aborted is never "committed":
  PostgreSQL would silently roll it back, so it raises instead.
- A write begun inside another write on the same thread is a savepoint.
- ``once_many`` sends several one-statement writes together in libpq's
  pipeline mode (``Connection.run_pipelined``: one write to the server, a
  ``Sync`` after each statement, so each is its own transaction and a
  refused one fails alone). An entry answers as ``once`` would: its rows,
  or its error; one that ``once`` would replay, or one never sent, is left
  to the caller to run by itself. A lost connection leaves every entry not
  yet answered outcome-unknown, and a cancel sent during the batch every
  entry answered as committed (an ``AsyncRunStore`` lane sends the renewals
  waiting on it this way).
- ``wake()``, called by the store after a write that may wake a worker has
  committed, sends the store's ``NOTIFY`` as a statement of its own once no
  transaction is open (``_notify``); writes that commit before it share
  one, and notifications are at least ``notify_spacing_s`` apart (one due
  sooner is held back, then sent by the next write or a sender thread).
- Failures are classified by ``_errors.classify`` (SQLSTATE only, never the
  server's message) and raised outside the ``except`` block, so no exception
  chain leads back to the driver's error.
- A manager built with ``read_only=True`` refuses every write before it
  begins (``persistence_failed``, ``cause["stage"] == "read-only"``); its
  connections are also read-only sessions (``default_transaction_read_only``,
  set by ``open``'s ``connect``).

``Transaction`` is what strategies receive: ``connection`` (the
``psycopg.Connection``, whose ``execute`` takes ``$1``-style parameters),
``dialect == "postgresql"``, ``on_commit`` and ``on_rollback``; it also
carries ``lease_queries`` (``runstore.postgres._lease_queries``), the
statements ``SqlConsensus`` runs on it.
"""

from __future__ import annotations

import contextlib
import functools
import random
import select
import threading
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any, Concatenate, Final, Literal, ParamSpec, TypeVar

import psycopg
from psycopg import abc as adapt_abc
from psycopg import pq
from psycopg.adapt import PyFormat, Transformer

from .._errors import PersistenceFailedError, RunStoreError
from .._sql._faults import ArmedFault, FaultPlan, FaultyConsensus, InjectedFault, RetryPolicy
from .._sql._modes import read_only_refusal
from .._sql._tx import RollbackAndReturn, refuse_on_event_loop
from .._sql._tx import run_callbacks as _run_callbacks
from ..consensus._sql import register_lease_statements
from ..consensus._types import ConsensusError
from . import _lease_queries, _notify
from ._clock_check import LEASE_METHODS, ClockCheck
from ._errors import (
    ReconnectFailed,
    cancelled_outcome,
    classify,
    connect_reason,
    is_transient,
    unknown_outcome,
)
from ._fused_sql import DECODE_FIRST
from ._grants import grants_text, missing_grants

# A transaction that names its dialect but carries no statements (someone
# else's store) gets these from SqlConsensus.
register_lease_statements("postgresql", _lease_queries)

T = TypeVar("T")

_raw = psycopg.Connection.execute
_TEXT: Final = (PyFormat.TEXT,)
_TUPLES_OK: Final = pq.ExecStatus.TUPLES_OK
_COMMAND_OK: Final = pq.ExecStatus.COMMAND_OK
_FATAL_ERROR: Final = pq.ExecStatus.FATAL_ERROR
_PIPELINE_SYNC: Final = pq.ExecStatus.PIPELINE_SYNC
_IDLE: Final = pq.TransactionStatus.IDLE
_ACTIVE: Final = pq.TransactionStatus.ACTIVE
_FAILED: Final = pq.TransactionStatus.INERROR

#: The least bound on a round trip that commits (see the module docstring).
MINIMUM_BOUND_MS: Final = 1_000

#: What the manager classifies; anything else is a defect and propagates.
_CLASSIFIED = (RunStoreError, psycopg.Error, ConsensusError, InjectedFault, ReconnectFailed)


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _holding_lock(
    method: Callable[Concatenate[Connection, _P], _R],
) -> Callable[Concatenate[Connection, _P], _R]:
    """``method`` of a ``Connection``, run holding the connection's lock."""

    @functools.wraps(method)
    def locked(self: Connection, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        with self.lock:
            return method(self, *args, **kwargs)

    return locked


class Connection(psycopg.Connection[Any]):
    """The store's connection: ``execute`` lets the fault seam count statements.

    Its round trips straight through libpq (``run_once``, ``run_pipelined``,
    ``commit_bounded``) hold the connection's lock, as psycopg's own
    ``execute`` does: nothing else sent on the connection (a statement of
    psycopg's API from another thread) can interleave with them on the wire.
    """

    statement_hook: Callable[[], None] | None = None
    #: The session's ``statement_timeout`` in ms (0: none), read as ``open``'s
    #: ``connect`` sets the session up; it bounds the round trips that commit.
    statement_timeout_ms = 0
    #: Set by a bounded round trip that outlived its bound and was cancelled.
    overdue = False

    def execute(
        self,
        query: Any,
        params: Any = None,
        *,
        prepare: bool | None = None,
        binary: bool = False,
    ) -> Any:
        hook = self.statement_hook
        if hook is not None:
            hook()
        return super().execute(query, params, prepare=prepare, binary=binary)

    # -- one statement, straight through libpq ---------------------------------

    _lean_names: dict[str, bytes] | None = None
    _lean_loader: adapt_abc.Transformer | None = None
    _lean_serial = 0

    def commit_bound(self) -> float | None:
        """The deadline (``time.monotonic()``) of a round trip that commits,
        sent now: twice ``statement_timeout``, at least ``MINIMUM_BOUND_MS``;
        None without a ``statement_timeout``."""
        timeout = self.statement_timeout_ms
        if timeout <= 0:
            return None
        return time.monotonic() + max(2 * timeout, MINIMUM_BOUND_MS) / 1000

    @_holding_lock
    def commit_bounded(self, deadline: float | None) -> None:
        """Send ``COMMIT`` and wait for its answer; past ``deadline``, cancel
        it (``overdue``) and wait on. Errors as ``execute`` raises them."""
        pgconn = self.pgconn
        self.overdue = False
        try:
            pgconn.send_query(b"COMMIT")
            self._lean_result(pgconn, deadline)
        except (psycopg.Error, OSError):
            raise
        except BaseException:
            self._lean_interrupted(pgconn)
            raise

    @_holding_lock
    def run_once(
        self, statement: str, params: tuple[Any, ...], deadline: float | None = None
    ) -> tuple[list[Any], int]:
        """Run ``statement`` by itself on this autocommit connection: its rows
        and row count, as ``execute(...).fetchall()`` and ``rowcount`` give.

        The one-round-trip operations' path. It sends the statement through
        the connection's libpq handle, prepared once per connection by name
        (a round trip of its own, on first use), with parameters dumped and
        rows loaded by psycopg's own adapters, and waits for the answer in a
        loop of its own. psycopg's cursor does the same with several times
        the client's CPU (measured: about 25 us a call against 65; see
        docs/guides/fleet.md, "How fast"). The errors are psycopg's: a failed
        statement raises what ``execute`` would (``error_from_result``), and
        a lost connection raises from libpq's wrapper as it would there. An
        interruption while waiting (KeyboardInterrupt) cancels the statement
        and propagates, as with psycopg (``_lean_interrupted``). Past
        ``deadline`` (``time.monotonic()``) the statement is cancelled and
        its answer awaited (``overdue``).
        """
        self.overdue = False
        names, loader = self._lean_setup()
        pgconn = self.pgconn
        try:
            values = loader.dump_sequence(params, _TEXT * len(params))
            result = None
            for _ in range(2):
                name = self._lean_prepared(pgconn, names, statement)
                pgconn.send_query_prepared(name, values)
                try:
                    result = self._lean_result(pgconn, deadline)
                    break
                except psycopg.errors.InvalidSqlStatementName:
                    # psycopg deallocates every prepared statement of the
                    # session after a ROLLBACK it sees (DEALLOCATE ALL), and a
                    # pooler may hand out another session: the statement did
                    # not run. Prepare it again, or at last send it unnamed.
                    names.clear()
            if result is None:
                pgconn.send_query_params(statement.encode(), values)
                result = self._lean_result(pgconn, deadline)
        except (psycopg.Error, OSError):
            raise
        except BaseException:
            self._lean_interrupted(pgconn)
            raise
        return self._lean_answer(loader, result)

    def _lean_setup(self) -> tuple[dict[str, bytes], adapt_abc.Transformer]:
        names = self._lean_names
        loader = self._lean_loader
        if names is None or loader is None:
            names = self._lean_names = {}
            loader = self._lean_loader = Transformer(self)
        return names, loader

    def _lean_prepared(self, pgconn: Any, names: dict[str, bytes], statement: str) -> bytes:
        """The name ``statement`` is prepared under on this session, preparing
        it first (a round trip of its own) when it is not yet."""
        name = names.get(statement)
        if name is None:
            self._lean_serial += 1
            name = f"_runstore_{self._lean_serial}".encode()
            pgconn.send_prepare(name, statement.encode())
            self._lean_result(pgconn)
            names[statement] = name
        return name

    @staticmethod
    def _lean_answer(loader: adapt_abc.Transformer, result: Any) -> tuple[list[Any], int]:
        if result.status == _TUPLES_OK:
            loader.set_pgresult(result)
            return loader.load_rows(0, result.ntuples, tuple), result.ntuples
        tuples = result.command_tuples
        return [], -1 if tuples is None else tuples

    @_holding_lock
    def run_pipelined(
        self,
        statement: str,
        batch: list[tuple[Any, ...]],
        bound: Callable[[], float | None],
        answers: list[tuple[list[Any], int] | psycopg.Error],
    ) -> None:
        """Run ``statement`` once per parameter tuple of ``batch``, each by
        itself on this autocommit connection (its own transaction), all sent
        at once in libpq's pipeline mode: one write to the server, which runs
        them in order and answers each. Appended to ``answers`` as they come,
        per entry: its rows and row count (as ``run_once`` gives), or the
        error the server answered it with (that entry did not commit; the
        others are untouched: a ``Sync`` follows each).

        The wait for each answer is bounded as ``run_once``'s is: ``bound()``
        gives the deadline, taken afresh as each answer arrives; past it the
        statement running is cancelled (``overdue``) and the answers are
        awaited. A lost connection raises (what libpq's wrapper raises):
        the entries not yet answered may have committed. Anything else that
        interrupts the wait closes the connection, for the same reason."""
        self.overdue = False
        names, loader = self._lean_setup()
        pgconn = self.pgconn
        name = self._lean_prepared(pgconn, names, statement)
        blocking = not pgconn.nonblocking
        try:
            if blocking:
                pgconn.nonblocking = 1
            pgconn.enter_pipeline_mode()
            for params in batch:
                pgconn.send_query_prepared(name, loader.dump_sequence(params, _TEXT * len(params)))
                pgconn.pipeline_sync()
            descriptor = pgconn.socket
            deadline = bound()
            while pgconn.flush():
                # Read while the write waits, so neither side's buffer blocks the other.
                self._lean_wait(descriptor, True, deadline, also_read=True)
                pgconn.consume_input()
            for _ in batch:
                result = self._pipelined_result(pgconn, descriptor, deadline)
                if result.status == _FATAL_ERROR:
                    answers.append(
                        psycopg.errors.error_from_result(result, encoding=self.info.encoding)
                    )
                elif result.status in (_TUPLES_OK, _COMMAND_OK):
                    answers.append(self._lean_answer(loader, result))
                else:
                    raise psycopg.InterfaceError(
                        f"unexpected result in a pipeline: {pq.ExecStatus(result.status).name}"
                    )
                if self._pipelined_result(pgconn, descriptor, deadline, end=True) is not None:
                    raise psycopg.InterfaceError("more than one result of one statement")
                sync = self._pipelined_result(pgconn, descriptor, deadline)
                if sync.status != _PIPELINE_SYNC:
                    raise psycopg.InterfaceError("a pipeline's answer out of step")
                deadline = bound()
            pgconn.exit_pipeline_mode()
            if blocking:
                pgconn.nonblocking = 0
        except BaseException:
            # Where the pipeline stopped is unknown: the session is not reused
            # (a lost one is closed already).
            self.close()
            raise

    def _pipelined_result(
        self, pgconn: Any, descriptor: int, deadline: float | None, *, end: bool = False
    ) -> Any:
        """The next result of a pipeline (None: the end of an entry's results)."""
        while pgconn.is_busy():
            self._lean_wait(descriptor, False, deadline)
            pgconn.consume_input()
        result = pgconn.get_result()
        if result is None and not end:
            raise psycopg.InterfaceError("a pipeline's answer out of step")
        return result

    def _lean_interrupted(self, pgconn: Any) -> None:
        """After an interruption (KeyboardInterrupt) while a statement runs:
        ask the server to cancel it and wait for the end, as psycopg's own
        wait does, so the connection is idle again; close it if that fails.
        The statement may have committed before the cancel arrived."""
        try:
            if pgconn.transaction_status == _ACTIVE:
                self.cancel_safe(timeout=5.0)
                with contextlib.suppress(psycopg.Error):  # canceled, as asked
                    self._lean_result(pgconn)
        except BaseException:
            self.close()
            return
        if pgconn.transaction_status != _IDLE:
            self.close()

    def _lean_result(self, pgconn: Any, deadline: float | None = None) -> Any:
        """The one result of what was just sent, once the server is ready
        again; past ``deadline``, the statement is cancelled first."""
        descriptor = pgconn.socket
        while pgconn.flush():
            self._lean_wait(descriptor, True, deadline)
        results = []
        while True:
            while pgconn.is_busy():
                self._lean_wait(descriptor, False, deadline)
                pgconn.consume_input()
            result = pgconn.get_result()
            if result is None:
                break
            results.append(result)
        for result in results:
            if result.status == _FATAL_ERROR:
                raise psycopg.errors.error_from_result(result, encoding=self.info.encoding)
        if len(results) != 1 or results[0].status not in (_TUPLES_OK, _COMMAND_OK):
            statuses = [pq.ExecStatus(result.status).name for result in results]
            raise psycopg.InterfaceError(f"unexpected results of one statement: {statuses}")
        return results[0]

    def _lean_wait(
        self, descriptor: int, writing: bool, deadline: float | None, *, also_read: bool = False
    ) -> None:
        """Wait until the socket is ready (for writing, or with ``also_read``
        for either); once ``deadline`` has passed with no answer, ask the
        server to cancel the statement (once: ``overdue``) and wait on for
        the answer, which says whether it committed."""
        if writing:
            sockets: tuple[list[int], list[int]] = ([descriptor] if also_read else [], [descriptor])
        else:
            sockets = ([descriptor], [])
        if deadline is None or self.overdue:
            select.select(*sockets, [])
            return
        ready = select.select(*sockets, [], max(0.0, deadline - time.monotonic()))
        if ready[0] or ready[1]:
            return
        self.overdue = True
        with contextlib.suppress(psycopg.Error):  # the server could not be asked
            self.cancel_safe(timeout=5.0)


class Transaction:
    """One open write transaction (or savepoint), as the store and strategies see it."""

    __slots__ = ("_commit", "_connection", "_rollback", "consensus")

    dialect: Final[Literal["postgresql"]] = "postgresql"
    #: ``SqlConsensus``'s statements in this dialect, handed to it with the transaction.
    lease_queries: Final[ModuleType] = _lease_queries

    def __init__(self, connection: Connection, consensus: Any) -> None:
        self._connection = connection
        self._commit: list[Callable[[], None]] = []
        self._rollback: list[Callable[[], None]] = []
        #: The strategy as this attempt must call it (wrapped when a fault is armed).
        self.consensus = consensus

    @property
    def connection(self) -> psycopg.Connection[Any]:
        return self._connection

    def on_commit(self, fn: Callable[[], None]) -> None:
        self._commit.append(fn)

    def on_rollback(self, fn: Callable[[], None]) -> None:
        self._rollback.append(fn)


#: How long an idle connection that was sent something waits for the close
#: that follows a server's farewell (see ``_probe``).
_FAREWELL_GRACE_S: Final = 0.05


def _probe(connection: Connection) -> None:
    """Read what an idle connection has been sent, without a round trip: a
    server that ended the session (a restart, a shutdown, a terminated
    backend) has sent its farewell and closed the socket, and reading that
    marks the connection lost, so it is replaced before a statement is sent
    rather than found dead after (when a one-statement operation's outcome
    would be unknown).

    The farewell and the close are not one event: a backend leaves the
    server's process table (its connection slot is free) before its socket
    is closed. An idle connection that has been sent anything is therefore
    given ``_FAREWELL_GRACE_S`` for the close to follow; a healthy one that
    was sent something else (a notice) costs that wait once and stays."""
    with connection.lock:  # as a round trip would (see ``Connection``)
        if connection.info.transaction_status != _IDLE:
            return
        try:
            descriptor = connection.fileno()
            wait = 0.0
            for _ in range(4):
                readable, _, _ = select.select([descriptor], [], [], wait)
                if not readable:
                    return
                connection.pgconn.consume_input()
                wait = _FAREWELL_GRACE_S
        except (psycopg.Error, OSError, ValueError):
            connection.close()


def _cancel(connection: Connection) -> None:
    try:
        connection.cancel_safe(timeout=5.0)
    except psycopg.Error:
        return  # the server could not be asked; nothing is running there


def _is_lost(connection: Connection | None) -> bool:
    return connection is None or connection.closed or connection.broken


class TransactionManager:
    """Serializes a store's use of its connection, replacing it when it is lost."""

    #: Refuse every call made on an event loop's thread (``runstore.aio`` sets it).
    loop_guard: bool = False

    def __init__(
        self,
        connection: Connection,
        connect: Callable[[], Connection],
        consensus: Any,
        retry: RetryPolicy,
        *,
        read_only: bool = False,
    ) -> None:
        self._connect = connect
        self.connection: Connection | None = connection
        self.consensus = consensus
        self.retry = retry
        #: Every write is refused before it begins.
        self.read_only = read_only
        self.faults: FaultPlan | None = None
        self.lock = threading.RLock()
        self.closed = False
        self._active: Transaction | None = None
        self._depth = 0
        self._random = random.Random()
        #: Measures the store clock against the server's before lease writes.
        self.clock_check: ClockCheck | None = None
        #: Set by ``interrupt()``; tells a cancellation from a statement timeout.
        self._interrupted = False
        #: Cancel requests ``interrupt()`` sent that may still be travelling.
        self._cancels: list[threading.Thread] = []
        #: Set when this operation's commit outlived its bound and was cancelled.
        self._overdue = False
        #: The store's schema, for naming the grants its role lacks.
        self.schema: str | None = None
        #: The channel ``wake`` notifies on; None when the store does not notify.
        self.notify_channel: str | None = None
        #: A write that may wake a worker committed since the last notification.
        self._wake_pending = False
        #: Notifications sent, and those that failed (lost; polling covers them).
        self.notifications_sent = 0
        self.notifications_failed = 0
        #: The least time between two notifications (``_notify``); when the last
        #: was sent (``time.monotonic()``); the sender of held-back ones.
        self.notify_spacing_s = _notify.NOTIFY_SPACING_MS / 1000
        self._last_wake = float("-inf")
        self._sender: threading.Thread | None = None
        self._sender_due = threading.Event()
        self._sender_armed = False
        #: Statements sent in pipelines by ``once_many`` (a count for tests).
        self.sent_together = 0

    def connect_new(self) -> Connection:
        """A new connection set up as the store's are (a listener's)."""
        return self._connect()

    def live(self) -> Connection:
        """The connection, reconnected first when the last one was lost (or
        when the server is found to have ended it while it sat idle)."""
        connection = self.connection
        if connection is not None and not _is_lost(connection):
            _probe(connection)
        if _is_lost(connection):
            if connection is not None:
                connection.close()
            self.connection = None
            failure: ReconnectFailed | None = None
            try:
                self.connection = connection = self._connect()
            except psycopg.Error as error:
                failure = ReconnectFailed(connect_reason(error))
                failure.__cause__ = error  # read by is_transient, never raised past us
            if failure is not None:
                raise failure
        assert connection is not None
        return connection

    # -- writes ---------------------------------------------------------------

    def write(self, method: str, body: Callable[[Transaction], T]) -> T:
        """Run ``body`` in one write transaction; replay transient failures."""
        if self.loop_guard:
            refuse_on_event_loop(method)
        if self.read_only:
            refusal = read_only_refusal(method)
            refusal.cause["reason"] = "read-only"
            raise refusal
        with self.lock:
            if self._active is not None:
                return self._nested(method, body)
            self._check_open(method)
            self._begin_operation()
            policy = self.retry
            started = time.monotonic()
            attempt = 0
            while True:
                attempt += 1
                error: RunStoreError | None = None
                sent = [False]
                try:
                    result = self._attempt(method, body, sent)
                except RollbackAndReturn as rolled_back:
                    return rolled_back.value  # type: ignore[no-any-return]
                except _CLASSIFIED as failure:
                    error = self._verdict(method, failure, sent[0], policy, attempt, started)
                else:
                    error = self._unsettled(method)
                    if error is None:
                        if self._wake_pending:
                            self._wake_when_due()  # a nested write's, or one held back
                        return result
                if error is not None:
                    # Raised here, outside the handler, so the chain ends at ``error``.
                    raise error

    # -- waking workers -------------------------------------------------------

    def wake(self) -> None:
        """After a write that committed and may wake a worker: notify the
        store's channel (``_notify``), in a statement of its own, never in a
        transaction. Never raises: the write had committed, and a lost
        notification costs a waiting worker one polling interval.

        Coalesced: the flag is set after the commit and cleared just before
        a notification is sent, so one notification covers every write that
        committed before it, of every thread sharing this store. Inside
        another write on this thread, that write sends it once it has
        committed. And notifications are at least ``notify_spacing_s``
        apart: one due sooner is held back, then sent by the store's next
        write once due, or else by a sender thread at the due time (started
        on first need), or when the store closes."""
        if self.notify_channel is None:
            return
        self._wake_pending = True
        with self.lock:
            if self._active is None:
                self._wake_when_due()

    def _wake_when_due(self) -> None:
        """Send the pending notification now if it is due; else have the
        sender thread send it when due (signalled once per notification held
        back: a stream of writes does not wake it at each). Holding the lock,
        outside any transaction."""
        if not self._wake_pending or self._active is not None:
            return
        if time.monotonic() >= self._last_wake + self.notify_spacing_s:
            self._send_wake()
            return
        if self._sender_armed:
            return  # the sender already waits for its time
        self._sender_armed = True
        sender = self._sender
        if sender is None or not sender.is_alive():
            sender = self._sender = threading.Thread(
                target=self._send_held_back, name="runstore-notify", daemon=True
            )
            sender.start()
        self._sender_due.set()

    def _send_held_back(self) -> None:
        """The sender thread: sends a held-back notification once it is due
        (when no write of the store has sent it first)."""
        due = self._sender_due
        while not self.closed:
            due.wait()
            due.clear()
            while self._wake_pending and not self.closed:
                delay = self._last_wake + self.notify_spacing_s - time.monotonic()
                if delay > 0:
                    due.wait(delay)  # set again: the spacing may have changed
                    due.clear()
                    continue
                with self.lock:
                    self._wake_when_due()

    def _send_wake(self) -> None:
        channel = self.notify_channel
        if not self._wake_pending or channel is None or self.closed:
            return
        self._wake_pending = False
        self._sender_armed = False
        self._last_wake = time.monotonic()
        connection = self.connection
        if _is_lost(connection) or connection is None:
            self.notifications_failed += 1
            return
        if connection.info.transaction_status != _IDLE:
            self.notifications_failed += 1
            return
        try:
            connection.run_once(_notify.NOTIFY, (channel,), connection.commit_bound())
        except (psycopg.Error, OSError):
            # A lost connection is replaced by the next operation.
            self.notifications_failed += 1
            return
        self.notifications_sent += 1

    def once(
        self,
        method: str,
        statement: str,
        params: tuple[Any, ...],
        *,
        run_id: str | None = None,
        check: Callable[[list[Any]], T] | None = None,
        unproven: str | None = None,
    ) -> tuple[list[Any], int] | None:
        """Run one statement as its own transaction (autocommit: one round
        trip); its rows and row count. None when the caller must take the
        general path instead: inside another write on this thread (a
        savepoint), or with a fault plan armed (the fault seam counts the
        general path's statements).

        Transient failures replay the statement within the ``RetryPolicy``,
        as ``write`` replays a body. The server commits with the statement,
        so a connection lost once it was sent leaves the outcome unknown
        (``outcome_unknown``), never replayed; a connection found dead
        before sending (``_probe``) is replaced first.

        With ``check``, the statement runs inside ``BEGIN`` (sent with it, in
        one pipelined round trip) and ``check(rows)`` must return before
        ``COMMIT`` is sent (a second round trip): an answer that must be
        decoded before it may commit (``claim_next``'s row); the answer is then
        ``([check(rows)], -1)``. What ``check`` raises rolls the statement back
        and propagates.

        With ``check`` and ``unproven``, ``statement`` commits by itself (one
        round trip) when the server can prove that ``check`` will accept its
        rows, and otherwise fails with SQLSTATE ``DECODE_FIRST``, having
        written nothing; ``unproven`` is then run as ``check`` demands (two
        more round trips)."""
        if self.loop_guard:
            refuse_on_event_loop(method)
        if self.read_only:
            refusal = read_only_refusal(method)
            refusal.cause["reason"] = "read-only"
            raise refusal
        with self.lock:
            if self._active is not None or self.faults is not None:
                return None
            self._check_open(method)
            self._begin_operation()
            policy = self.retry
            started = time.monotonic()
            attempt = 0
            while True:
                attempt += 1
                error: RunStoreError | None = None
                sent = False
                sent_box = [False]
                answer: tuple[list[Any], int]
                try:
                    connection = self.live()
                    clock_check = self.clock_check
                    if clock_check is not None and method in LEASE_METHODS:
                        clock_check.verify(method, connection)
                    if check is not None and unproven is None:
                        answer = self._checked(connection, statement, params, check, sent_box)
                    else:
                        sent = True
                        try:
                            rows, count = connection.run_once(
                                statement, params, connection.commit_bound()
                            )
                            self._overdue = connection.overdue
                        except psycopg.Error as refused:
                            if (
                                check is None
                                or unproven is None
                                or refused.sqlstate != DECODE_FIRST
                            ):
                                raise
                            # Rolled back with the statement: nothing was written.
                            sent = False
                            answer = self._checked(connection, unproven, params, check, sent_box)
                        else:
                            answer = ([check(rows)], -1) if check is not None else (rows, count)
                except _CLASSIFIED as failure:
                    sent = sent or sent_box[0]
                    error = self._verdict(method, failure, sent, policy, attempt, started)
                else:
                    error = self._unsettled(method)
                    if error is None:
                        if self._wake_pending:
                            self._wake_when_due()  # one held back
                        return answer
                if error is not None:
                    if run_id is not None and error.cause.get("stage") == "write-invariant":
                        error.cause["run_id"] = run_id
                    raise error

    def once_many(
        self, method: str, statement: str, batch: list[tuple[Any, ...]], run_ids: list[str]
    ) -> list[tuple[list[Any], int] | RunStoreError | None] | None:
        """``once(method, statement, params)`` for every ``params`` of
        ``batch``, sent together (``Connection.run_pipelined``): per entry its
        rows and row count, the error ``once`` would raise, or None where the
        caller must run that entry by itself (``once``, then the general
        path): a failure that ``once`` would replay, which did not commit.
        ``run_ids`` names each entry's run, as ``once``'s ``run_id`` does.
        None for the whole batch where ``once`` would return None or refuse
        (the caller then runs each entry by itself, which says why).

        Each entry commits or rolls back by itself. A connection lost on the
        way leaves every entry not yet answered outcome-unknown, as ``once``
        does for its one; a cancel sent during the batch (``interrupt()``,
        the bound on an answer) leaves every entry answered as committed
        outcome-unknown (``_unsettled``)."""
        if self.read_only or self.closed:
            return None
        if self.loop_guard:
            refuse_on_event_loop(method)
        with self.lock:
            if self._active is not None or self.faults is not None:
                return None
            self._begin_operation()
            try:
                connection = self.live()
                clock_check = self.clock_check
                if clock_check is not None and method in LEASE_METHODS:
                    clock_check.verify(method, connection)
            except _CLASSIFIED:
                return None  # nothing was sent: each entry runs (and is replayed) by itself
            answered: list[tuple[list[Any], int] | psycopg.Error] = []
            failure: BaseException | None = None
            self.sent_together += len(batch)
            try:
                connection.run_pipelined(statement, batch, connection.commit_bound, answered)
            except _CLASSIFIED as failed:
                failure = failed
            self._overdue = connection.overdue
            # As ``_verdict`` has it: a failure on a connection lost once the
            # statement was sent leaves its outcome unknown. Only a failure
            # before the pipeline (preparing the statement) leaves the
            # connection, and then nothing was sent: each entry runs by itself.
            lost = _is_lost(self.connection)
            answers: list[tuple[list[Any], int] | RunStoreError | None] = []
            for answer in answered:
                if not isinstance(answer, psycopg.Error):
                    answers.append(self._unsettled(method) or answer)
                elif lost:
                    answers.append(unknown_outcome(method, answer))
                elif isinstance(answer, psycopg.errors.InvalidSqlStatementName):
                    connection._lean_names = None  # it did not run (see ``run_once``)
                    answers.append(None)
                elif is_transient(answer):
                    answers.append(None)  # rolled back: ``once`` replays it
                else:
                    error = classify(method, answer, interrupted=self._interrupted)
                    if error.cause.get("stage") == "write-invariant":
                        error.cause["run_id"] = run_ids[len(answers)]
                    answers.append(self._explained(error))
            if failure is not None:
                for _ in batch[len(answered) :]:
                    answers.append(unknown_outcome(method, failure) if lost else None)
            if self._wake_pending:
                self._wake_when_due()
            return answers

    def _checked(
        self,
        connection: Connection,
        statement: str,
        params: tuple[Any, ...],
        check: Callable[[list[Any]], Any],
        sent: list[bool],
    ) -> tuple[list[Any], int]:
        try:
            with connection.pipeline():
                _raw(connection, "BEGIN ISOLATION LEVEL READ COMMITTED")
                rows = _raw(connection, statement, params).fetchall()
            result = check(rows)
            if connection.info.transaction_status == _FAILED:
                raise PersistenceFailedError(
                    "commit",
                    "the transaction was aborted by an earlier error",
                    {"stage": "aborted-transaction"},
                )
            sent[0] = True
            connection.commit_bounded(connection.commit_bound())
            self._overdue = connection.overdue
        except BaseException:
            self._end(connection)
            raise
        return [result], -1

    def _check_open(self, method: str) -> None:
        if self.closed:
            raise PersistenceFailedError(
                method, "the store is closed", {"stage": "closed", "reason": "closed"}
            )

    def _begin_operation(self) -> None:
        """Before an operation: no cancel of an earlier one is still on its
        way, and none was sent during this one yet."""
        self._settle_cancels()
        self._interrupted = False
        self._overdue = False

    def _unsettled(self, method: str) -> RunStoreError | None:
        """The error of a write the server answered as committed although the
        store had sent it a cancel (``interrupt()``, or the bound on its
        commit), which may have cut its commit short of a synchronous
        standby: outcome unknown. None when no cancel was sent."""
        if self._interrupted:
            return cancelled_outcome(method, "interrupted")
        if self._overdue:
            return cancelled_outcome(method, "statement-timeout")
        return None

    def _explained(self, error: RunStoreError) -> RunStoreError:
        """A missing privilege (42501) with the grants the role lacks named
        (asked of the server on the idle connection); anything else as it is."""
        cause = error.cause
        if cause.get("reason") != "insufficient-privilege" or "missing_grants" in cause:
            return error
        connection = self.connection
        missing = None
        if connection is not None:
            missing = missing_grants(connection, self.schema, read_only=self.read_only)
        return PersistenceFailedError(
            error.method, grants_text(missing), {**cause, "missing_grants": missing or []}
        )

    def _verdict(
        self,
        method: str,
        failure: BaseException,
        sent: bool,
        policy: RetryPolicy,
        attempt: int,
        started: float,
    ) -> RunStoreError | None:
        """What a failed attempt of ``write`` or ``once`` ends with: the error
        to raise, or None once the jittered wait before its replay is over.
        A connection lost after the work was sent leaves the outcome unknown
        (never replayed); a lasting failure is classified at once; a
        transient one is replayed within the policy's attempts and time."""
        lost = _is_lost(self.connection)
        if lost and sent:
            return unknown_outcome(method, failure)
        if not is_transient(failure, connection_lost=lost):
            return self._explained(classify(method, failure, interrupted=self._interrupted))
        delay = self._delay(policy, attempt)
        elapsed_ms = (time.monotonic() - started) * 1000
        if attempt >= policy.max_attempts or elapsed_ms + delay * 1000 > policy.budget_ms:
            error = classify(method, failure, interrupted=self._interrupted)
            error.cause["attempts"] = attempt
            return error
        time.sleep(delay)
        return None

    def _delay(self, policy: RetryPolicy, attempt: int) -> float:
        ceiling = min(policy.max_delay_ms, policy.base_delay_ms * (2 ** min(attempt, 30)))
        return self._random.uniform(0, ceiling) / 1000

    def _attempt(self, method: str, body: Callable[[Transaction], T], sent: list[bool]) -> T:
        connection = self.live()
        check = self.clock_check
        if check is not None and method in LEASE_METHODS:
            check.verify(method, connection)
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
        try:
            _raw(connection, "BEGIN ISOLATION LEVEL READ COMMITTED")
            self._active = tx
            result = body(tx)
            if armed is not None:
                armed.before_commit()
            if connection.info.transaction_status == _FAILED:
                # A statement failed and the body went on: PostgreSQL would
                # turn this COMMIT into a silent ROLLBACK.
                raise PersistenceFailedError(
                    "commit",
                    "the transaction was aborted by an earlier error",
                    {"stage": "aborted-transaction"},
                )
            sent[0] = True
            connection.commit_bounded(connection.commit_bound())
            self._overdue = connection.overdue
        except BaseException:
            self._active = None
            connection.statement_hook = None
            if armed is not None:
                armed.finish()
            try:
                self._end(connection)
            finally:
                _run_callbacks(list(reversed(tx._rollback)))
            raise
        self._active = None
        connection.statement_hook = None
        if armed is not None:
            armed.finish()
        _run_callbacks(tx._commit)
        return result

    def _end(self, connection: Connection) -> None:
        """Roll back whatever is open; a lost connection has nothing to end."""
        if _is_lost(connection) or connection.info.transaction_status == _IDLE:
            return
        try:
            _raw(connection, "ROLLBACK")
        except psycopg.Error:
            # The connection broke while rolling back: the server ends the
            # transaction with the session; the next operation reconnects.
            connection.close()

    def _nested(self, method: str, body: Callable[[Transaction], T]) -> T:
        outer = self._active
        assert outer is not None
        self._depth += 1
        name = f"runstore_{self._depth}"
        connection = outer._connection
        inner = Transaction(connection, outer.consensus)
        _raw(connection, f"SAVEPOINT {name}")
        self._active = inner
        try:
            result = body(inner)
        except BaseException as failure:
            try:
                if not _is_lost(connection):
                    _raw(connection, f"ROLLBACK TO {name}")
                    _raw(connection, f"RELEASE {name}")
            finally:
                self._active = outer
                self._depth -= 1
                _run_callbacks(list(reversed(inner._rollback)))
            if isinstance(failure, RollbackAndReturn):
                return failure.value  # type: ignore[no-any-return]
            # A transient failure must reach the outermost write, which retries.
            if isinstance(failure, _CLASSIFIED) and not is_transient(
                failure, connection_lost=_is_lost(connection)
            ):
                error = classify(method, failure)
            else:
                raise
        else:
            _raw(connection, f"RELEASE {name}")
            self._active = outer
            self._depth -= 1
            outer._commit.extend(inner._commit)
            outer._rollback.extend(inner._rollback)
            return result
        raise error

    # -- reads ----------------------------------------------------------------

    def read(self, method: str, body: Callable[[Connection], T]) -> T:
        """Run ``body`` on the connection outside any write transaction (each
        statement its own snapshot). Inside a write on the same thread it sees
        that transaction's changes."""
        if self.loop_guard:
            refuse_on_event_loop(method)
        with self.lock:
            if self._active is not None:
                return body(self._active._connection)
            self._check_open(method)
            self._begin_operation()
            policy = self.retry
            started = time.monotonic()
            attempt = 0
            while True:
                attempt += 1
                error: RunStoreError
                try:
                    return body(self.live())
                except _CLASSIFIED as failure:
                    lost = _is_lost(self.connection)
                    delay = self._delay(policy, attempt)
                    elapsed_ms = (time.monotonic() - started) * 1000
                    if (
                        is_transient(failure, connection_lost=lost)
                        and attempt < policy.max_attempts
                        and elapsed_ms + delay * 1000 <= policy.budget_ms
                    ):
                        time.sleep(delay)
                        continue
                    error = classify(method, failure, interrupted=self._interrupted)
                raise self._explained(error)

    def snapshot(self, method: str, body: Callable[[Transaction], T], *, keep: bool = False) -> T:
        """Run a multi-statement read in one ``REPEATABLE READ READ ONLY``
        transaction (one snapshot). Takes no faults and changes nothing. The
        body's rollback callbacks run at the end, unless ``keep``: then, when
        the body returns, its commit callbacks run instead (a read-only
        store's ``on_open``, whose effects live in the strategy)."""
        if self.loop_guard:
            refuse_on_event_loop(method)

        def run(connection: Connection) -> T:
            if self._active is not None:
                return body(self._active)
            tx = Transaction(connection, self.consensus)
            _raw(connection, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            self._active = tx
            kept = False
            try:
                result = body(tx)
                kept = keep
                return result
            finally:
                self._active = None
                self._end(connection)
                _run_callbacks(tx._commit if kept else list(reversed(tx._rollback)))

        return self.read(method, run)

    # -- lifetime ---------------------------------------------------------------

    def interrupt(self) -> None:
        """Cancel the statement running right now, from any thread (no lock:
        the call it cancels holds it). An idle connection is unaffected.

        Returns at once: the cancel request travels on a connection of its
        own from a daemon thread, so a caller (the supervisor's event loop)
        never waits on a server it cannot reach (a partition)."""
        connection = self.connection
        if self.closed or connection is None or connection.closed:
            return
        self._interrupted = True
        sender = threading.Thread(
            target=_cancel, args=(connection,), name="runstore-interrupt", daemon=True
        )
        self._cancels.append(sender)
        sender.start()

    def _settle_cancels(self) -> None:
        """Wait for cancel requests still on their way (each bounded by its
        5 s timeout), so none lands on a later operation's statement."""
        while self._cancels:
            self._cancels.pop().join(6.0)

    def close(self) -> None:
        with self.lock:
            if self.closed:
                return
            if self._wake_pending and self._active is None:
                self._send_wake()  # held back: sent now, not lost
            self.closed = True
            self._sender_due.set()  # the sender thread ends
            connection, self.connection = self.connection, None
            if connection is not None:
                connection.close()
