"""``SessionLossCheck`` and ``SchemaOptionCheck``: what a PostgreSQL store
promises about its server session and about the schema it opens.

**Session loss.** The server may end an idle session at any time (an
administrator's ``pg_terminate_backend``, a restart, an idle timeout). The
store's next operation must still give its ordinary answer: a lost connection
is replaced before anything is sent on it, so even an operation that is one
statement and one round trip (the fast path, which cannot replay a statement
it sent) never ends in ``persistence_failed`` with an unknown outcome. The
machine drives a store built by ``postgres_store_factory`` (whichever path
the factory chose) and ``ModelRunStore`` on one ``ManualClock`` through
``create``, ``claim_and_own``, ``heartbeat``, ``transition_owned`` and
``get``, and now and then ends every session the store has with the server
(from the suite's admin connection, waiting, bounded, until those backends
have left ``pg_stat_activity``, and a moment more for their sockets to
close), once or several times in a row with an operation after each. Every
answer must equal the reference's (``SessionLossMishandled`` for the first
operation after a loss, ``SessionOutcomeMismatch`` otherwise) and after
every step the stores' states must agree, leases left out
(``SessionStateMismatch``).

**Another session.** Now and then a session of another client on the same
schema (its lock waits and open transaction bounded) holds what the store
needs:

- It locks the later of two runs while the store's ``heartbeat_many`` locks
  the earlier and waits, then asks for the earlier: a deadlock. The machine
  sets the database's ``deadlock_timeout`` to ``STORE_DEADLOCK_TIMEOUT`` (and
  ends the store's session once, so its next one has it) and the other
  session's to 2 s, so the store, which waited first, is the one the server
  aborts. The store must replay the write and answer as the reference does
  (``DeadlockNotReplayed``).
- It holds a run's row while a second store, opened on the same schema with
  ``options=-cstatement_timeout=300`` in its URL, heartbeats the run: that
  must fail with ``persistence_failed``, reason ``statement-timeout``, and a
  message naming ``statement_timeout`` (``StatementTimeoutMisreported``).
- It holds a run's row while the store heartbeats the run on a thread of its
  own; ``store.interrupt()`` from the machine's thread must end the wait
  within 3 s with reason ``interrupted`` (``InterruptMisreported``).
- It holds ``flows_runs`` in ACCESS EXCLUSIVE mode while the store's ``get``
  waits, and the server ends the waiting session: the read must be replayed
  on a new connection and answer as the reference does
  (``ReadLossMishandled``).

**The schema option.** ``runstore.postgres.open`` takes the schema from its
``schema=`` keyword or from a ``schema`` URL parameter (created when
missing), or else from the search path's current schema, which the URL's
``options=-csearch_path=NAME`` sets (then the schema must exist already).
A name is 1 to 63 UTF-8 bytes without NUL; anything else is refused with
``invalid_run`` naming the field ``schema``, and so is a keyword and a URL
parameter naming different schemas (the same name twice is accepted). The
machine opens stores on a fresh database of the suite's server every way
above, with names that need quoting, names of exactly 63 bytes (ASCII and
multi-byte) and of 64, and the empty name. A refusal must be the documented
one and an acceptance must be due (``SchemaRefusalMismatch``); an accepted
store must name the schema asked for and list exactly the runs created
through stores on that schema, never another schema's
(``SchemaMisselected``); and it must work: ``create`` then ``get``
(``SchemaStoreBroken``).
"""

from __future__ import annotations

import contextlib
import functools
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, Final

from hypothesis import note
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from runstore import ManualClock, OwnerId, RunStoreError
from runstore.model import ModelRunStore

from .._base._compare import describe_difference, without_leases
from .._base._programs import programs_independent_of_callers_code
from .._base._steps import Call, Raised, call, perform
from ._server_clock import close_in_folder


class PgSessionViolation(AssertionError):
    """Base of every failure of the PostgreSQL session and schema machines;
    the subclass names the check."""


class SessionLossMishandled(PgSessionViolation):
    """The first operation after the server ended the store's idle session
    answered other than the reference (typically ``persistence_failed`` with
    an unknown outcome: the statement was sent on the dead connection)."""


class SessionOutcomeMismatch(PgSessionViolation):
    """An operation on a store whose session was not just ended answered
    other than the reference."""


class SessionStateMismatch(PgSessionViolation):
    """After a step, the store's state (leases left out) differs from the
    reference's."""


class DeadlockNotReplayed(PgSessionViolation):
    """A write that the server aborted to break a deadlock with another
    session answered other than the reference: it must be replayed, and no
    deadlock or serialization error (nor anything else) reaches the caller."""


class StatementTimeoutMisreported(PgSessionViolation):
    """A write blocked past the server's ``statement_timeout`` did not fail
    with ``persistence_failed``, reason ``statement-timeout``, and a message
    naming ``statement_timeout``."""


class InterruptMisreported(PgSessionViolation):
    """A write blocked on a lock and cancelled by ``store.interrupt()`` from
    another thread did not fail with ``persistence_failed``, reason
    ``interrupted``, or did not return at all."""


class ReadLossMishandled(PgSessionViolation):
    """A read whose session the server ended while the read waited for a lock
    answered other than the reference (it must be replayed on a new
    connection)."""


class SchemaRefusalMismatch(PgSessionViolation):
    """An open was refused that the schema option allows, or accepted that it
    refuses, or refused other than with ``invalid_run`` on ``schema``."""


class SchemaMisselected(PgSessionViolation):
    """An accepted store names another schema than the one asked for, or
    lists runs created on another schema (or misses its own)."""


class SchemaStoreBroken(PgSessionViolation):
    """An accepted store could not ``create`` a run and ``get`` it back."""


PG_SESSION_CHECKS: tuple[type[PgSessionViolation], ...] = (
    SessionLossMishandled,
    SessionOutcomeMismatch,
    SessionStateMismatch,
    DeadlockNotReplayed,
    StatementTimeoutMisreported,
    InterruptMisreported,
    ReadLossMishandled,
    SchemaRefusalMismatch,
    SchemaMisselected,
    SchemaStoreBroken,
)
"""Every check class of the session and schema machines, each a ``PgSessionViolation``: catch or
list them by class."""

# -- session loss -----------------------------------------------------------------

RUNS: Final = ("r0", "r1", "r2")
OWNERS: Final = (OwnerId("pg-session-a", 1, "n0"), OwnerId("pg-session-b", 2, "n0"))
#: Forward moves of the store clock (the last is past any lease).
MOVES: Final = (1, 1_000, 120_000)
SETTLE_TO: Final = ("running", "suspended", "completed", "failed")
#: What follows the end of a session (mostly writes: a read may be replayed).
FOLLOW_UPS: Final = ("heartbeat", "claim_and_own", "transition_owned", "create", "get")
#: How long a terminated backend may take to leave ``pg_stat_activity``.
GONE_WITHIN_S: Final = 5.0
#: After that, how long its socket is given to close on the client's side.
CLOSE_GRACE_S: Final = 0.05

_BACKENDS: Final = (
    "SELECT pid FROM pg_catalog.pg_stat_activity "
    "WHERE datname = %s AND pid <> pg_catalog.pg_backend_pid()"
)


def _database(url: str) -> str:
    return urllib.parse.unquote(urllib.parse.urlsplit(url).path.lstrip("/"))


def end_sessions(server: Any, database: str) -> int:
    """End every session on ``database`` but the admin's, and wait (bounded)
    until those backends have left ``pg_stat_activity``; how many there were."""
    pids = [int(row[0]) for row in server.admin(_BACKENDS, (database,))]
    for pid in pids:
        server.admin("SELECT pg_catalog.pg_terminate_backend(%s)", (pid,))
    wait_gone(server, database, pids)
    time.sleep(CLOSE_GRACE_S)
    return len(pids)


def wait_gone(server: Any, database: str, pids: list[int]) -> None:
    """Wait (bounded by ``GONE_WITHIN_S``) until terminated backends have left
    ``pg_stat_activity``."""
    deadline = time.monotonic() + GONE_WITHIN_S
    while pids:
        left = {int(row[0]) for row in server.admin(_BACKENDS, (database,))}
        pids = [pid for pid in pids if pid in left]
        if pids and time.monotonic() > deadline:
            raise TimeoutError(f"backends {pids} outlived pg_terminate_backend")
        if pids:
            time.sleep(0.005)


# -- another session holds what the store needs ------------------------------------

#: Pairs of runs a deadlock is staged on (``heartbeat_many`` locks them in order).
PAIRS: Final = (("r0", "r1"), ("r0", "r2"), ("r1", "r2"))
#: The store's ``deadlock_timeout`` (set on its database): its wait is the one
#: checked first, so the store is the session the server aborts.
STORE_DEADLOCK_TIMEOUT: Final = "100ms"
#: The ``statement_timeout`` of the second store (its URL's ``options``).
STATEMENT_TIMEOUT_MS: Final = 300
#: Bounds of the other session: a lock wait, and a transaction left open.
OTHER_LOCK_TIMEOUT: Final = "5s"
OTHER_IDLE_TIMEOUT: Final = "8s"
OTHER_DEADLOCK_TIMEOUT: Final = "2s"
#: How long a staged wait or an operation on its thread may take.
WAIT_S: Final = 10.0
#: How long an interrupted operation may take to return.
INTERRUPT_RETURNS_WITHIN_S: Final = 3.0
#: How many times a deadlock is staged before the step gives up (the other
#: session is the victim only when the store's wait began too long before).
DEADLOCK_TRIES: Final = 3

_LOCK_ROW: Final = "SELECT 1 FROM flows_runs WHERE run_id = %s FOR UPDATE"
_LOCK_TABLE: Final = "LOCK TABLE flows_runs IN ACCESS EXCLUSIVE MODE"
_WAITING_ON: Final = (
    "SELECT pid FROM pg_catalog.pg_stat_activity "
    "WHERE datname = %s AND %s = ANY(pg_catalog.pg_blocking_pids(pid))"
)


def _identifier(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class OnThread:
    """One call on a thread of its own (the store blocked on a lock)."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self._fn = fn
        self._box: list[Any] = []
        self._thread = threading.Thread(target=self._run, name="pg-session-op", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._box.append(("value", self._fn()))
        except BaseException as error:  # handed to the machine's thread
            self._box.append(("error", error))

    def done(self) -> bool:
        return not self._thread.is_alive()

    def wait(self, seconds: float) -> bool:
        """Whether the call returned within ``seconds``."""
        self._thread.join(seconds)
        return self.done()

    def result(self) -> Any:
        """What the call returned (re-raising what it raised); bounded."""
        if not self.wait(WAIT_S):
            raise TimeoutError(f"the store's operation did not return within {WAIT_S} s")
        kind, value = self._box[0]
        if kind == "error":
            raise value
        return value


class OtherSession:
    """A session of another client on the store's database and schema (a
    report, an operator's script): locks rows or tables in a transaction of
    its own, every wait bounded."""

    def __init__(self, server: Any, database: str, schema: str) -> None:
        import psycopg

        from .._targets._postgres import with_database

        self.database = database
        self.connection = psycopg.connect(with_database(server.url, database), autocommit=True)
        execute = self.connection.execute
        execute(f"SET search_path TO {_identifier(schema)}")
        execute(f"SET lock_timeout = '{OTHER_LOCK_TIMEOUT}'")
        execute(f"SET idle_in_transaction_session_timeout = '{OTHER_IDLE_TIMEOUT}'")
        with contextlib.suppress(psycopg.Error):
            # Longer than the store's, so the store is a deadlock's victim
            # (a superuser's setting; refused, it stays the server's).
            execute(f"SET deadlock_timeout = '{OTHER_DEADLOCK_TIMEOUT}'")
        self.pid = int(self.connection.info.backend_pid)
        execute("BEGIN")

    def lock_row(self, run: str) -> None:
        self.connection.execute(_LOCK_ROW, (run,))

    def lock_table(self) -> None:
        self.connection.execute(_LOCK_TABLE)

    def waiting(self, server: Any, op: OnThread) -> list[int]:
        """The backends waiting for this session's locks, once there is one
        (none if ``op`` returned first); bounded by ``WAIT_S``."""
        deadline = time.monotonic() + WAIT_S
        while True:
            pids = [int(row[0]) for row in server.admin(_WAITING_ON, (self.database, self.pid))]
            if pids or op.done():
                return pids
            if time.monotonic() > deadline:
                raise TimeoutError(f"the store did not wait for the other session in {WAIT_S} s")
            time.sleep(0.002)

    def close(self) -> None:
        """End the transaction (releasing its locks) and the session."""
        import psycopg

        try:
            self.connection.execute("ROLLBACK")
        except psycopg.Error:
            pass  # the server ended it already (the idle-in-transaction bound)
        finally:
            self.connection.close()


class SessionLossCheck(RuleBasedStateMachine):
    """The session-loss machine; ``session_loss_check_for`` binds a factory.

    It drives a PostgreSQL store of the suite's own target and the reference model side by
    side while the server ends the store's idle sessions between operations, breaks a deadlock
    by aborting the store's statement, cancels a statement on ``statement_timeout``, and ends
    a session waiting on a lock: the first operation after each must be replayed or reported
    as the contract says, and the states (leases left out) must agree after every step. In its
    rules ``run`` is one of a few run ids and ``owner`` one of a few owners.
    """

    budget_kind: ClassVar[str] = "pg-session"
    """Which default budget ``run_conformance`` gives this machine: ``"pg-session"``."""

    store_factory: ClassVar[Callable[..., Any]]
    """Opens the store under test: ``store_factory(clock, path)``."""

    def __init__(self) -> None:
        programs_independent_of_callers_code()
        super().__init__()
        from .._targets import _postgres

        self.server = _postgres.server()
        """The suite's PostgreSQL server."""
        self.folder = Path(tempfile.mkdtemp(prefix="runstore-pg-session-"))
        """The program's folder, removed at teardown."""
        self.clock = ManualClock(1_000)
        """The store clock both sides share."""
        self.model = ModelRunStore(clock=self.clock)
        """The reference, a ``ModelRunStore``."""
        self.store: Any = None
        """The store under test."""
        self.store = type(self).store_factory(self.clock, self.folder / "store")
        self.database = _database(self._url())
        """The name of the store's database."""
        self.lost = False
        """Whether the server ended the store's sessions since its last operation."""
        self.timed: Any = None
        """A second store on the same schema whose URL sets ``statement_timeout``, once needed."""
        self._lower_deadlock_timeout()

    def _lower_deadlock_timeout(self) -> None:
        """Sessions on the store's database look for a deadlock after
        ``STORE_DEADLOCK_TIMEOUT``; the store's session is ended once so that
        its next one has it (a server that refuses keeps its own setting)."""
        import psycopg

        try:
            self.server.admin(
                f"ALTER DATABASE {_identifier(self.database)} "
                f"SET deadlock_timeout = '{STORE_DEADLOCK_TIMEOUT}'"
            )
        except psycopg.Error as error:
            note(f"deadlock_timeout left as it is ({type(error).__name__})")
            return
        self._end()

    def _url(self) -> str:
        # The store's URL (password removed), as the factory opened it.
        return str(self.store._url)

    def teardown(self) -> None:
        """Close the store (and the second store with a statement timeout, if one was opened) and
        remove the folder."""
        try:
            if self.timed is not None:
                self.timed.close()
        finally:
            close_in_folder(self.store, self.folder)

    def _do(self, op: Call) -> Any:
        expected = perform(self.model, op)
        actual = perform(self.store, op)
        after_loss, self.lost = self.lost, False
        note(f"{op.describe()} -> {actual!r}{' (after a session loss)' if after_loss else ''}")
        if actual != expected:
            check = SessionLossMishandled if after_loss else SessionOutcomeMismatch
            when = "the first operation after the server ended the session" if after_loss else ""
            raise check(
                f"{op.describe()}{': ' + when if when else ''}: reference {expected!r} / "
                f"store {actual!r}"
            )
        return actual

    @initialize(created=st.integers(min_value=1, max_value=len(RUNS)))
    def create_runs(self, created: int) -> None:
        """Start with the first ``created`` runs of the machine's few, the first of them owned."""
        for run in RUNS[:created]:
            self.create(run)
        self.claim_and_own(RUNS[0], OWNERS[0])

    # -- operations -------------------------------------------------------------

    @rule(run=st.sampled_from(RUNS))
    def create(self, run: str) -> None:
        """``create`` of ``run``, judged against the reference."""
        self._do(call("create", ("run_id", run), ("state_json", "{}")))

    @rule(run=st.sampled_from(RUNS), owner=st.sampled_from(OWNERS))
    def claim_and_own(self, run: str, owner: OwnerId) -> None:
        """``claim_and_own`` of ``run`` by ``owner`` with its current row, judged against the
        reference."""
        row = perform(self.model, call("get", ("run_id", run)))
        if isinstance(row, Raised):
            return
        self._do(
            call(
                "claim_and_own",
                ("run_id", run),
                ("expected", row),
                ("owner", owner),
                ("now_ms", self.clock.now_ms()),
            )
        )

    @rule(run=st.sampled_from(RUNS), owner=st.sampled_from(OWNERS))
    def heartbeat(self, run: str, owner: OwnerId) -> None:
        """``heartbeat`` of ``run`` by ``owner``, judged against the reference."""
        self._heartbeat(run, owner)

    def _heartbeat(self, run: str, owner: OwnerId) -> None:
        self._do(
            call("heartbeat", ("run_id", run), ("owner", owner), ("now_ms", self.clock.now_ms()))
        )

    @rule(run=st.sampled_from(RUNS), owner=st.sampled_from(OWNERS), to=st.sampled_from(SETTLE_TO))
    def transition_owned(self, run: str, owner: OwnerId, to: str) -> None:
        """``transition_owned`` of ``run`` by ``owner`` to ``to``, judged against the reference."""
        self._do(call("transition_owned", ("run_id", run), ("owner", owner), ("to_status", to)))

    @rule(run=st.sampled_from(RUNS))
    def get(self, run: str) -> None:
        """``get`` of ``run``, judged against the reference."""
        self._do(call("get", ("run_id", run)))

    @rule(ms=st.sampled_from(MOVES))
    def advance(self, ms: int) -> None:
        """Move the clock ``ms`` forward."""
        self.clock.advance(ms)

    # -- the server ends the session ----------------------------------------------

    @rule(
        then=st.sampled_from(FOLLOW_UPS),
        run=st.sampled_from(RUNS),
        owner=st.sampled_from(OWNERS),
    )
    def end_session(self, then: str, run: str, owner: OwnerId) -> None:
        """The server ends the store's idle session(s); then one operation, ``then``
        (``claim_and_own``, ``transition_owned``, a heartbeat, a read, ...) on ``run`` by
        ``owner``, judged against the reference in the same step."""
        self._end()
        self._follow_up(then, run, owner)

    @rule(
        times=st.integers(min_value=2, max_value=4),
        then=st.sampled_from(FOLLOW_UPS),
        run=st.sampled_from(RUNS),
        owner=st.sampled_from(OWNERS),
    )
    def end_sessions_in_a_row(self, times: int, then: str, run: str, owner: OwnerId) -> None:
        """Sessions ended ``times`` times, each followed by the operation ``then`` on ``run`` by
        ``owner``."""
        for _ in range(times):
            self._end()
            self._follow_up(then, run, owner)

    def _end(self) -> None:
        ended = end_sessions(self.server, self.database)
        note(f"the server ended {ended} session(s)")
        self.lost = True

    def _follow_up(self, then: str, run: str, owner: OwnerId) -> None:
        if then == "claim_and_own":
            self.claim_and_own(run, owner)
        elif then == "transition_owned":
            self.transition_owned(run, owner, "running")
        elif then == "create":
            self.create(run)
        elif then == "get":
            self.get(run)
        else:
            self._heartbeat(run, owner)

    # -- another session holds what the store needs ---------------------------------

    def _other(self) -> OtherSession:
        return OtherSession(self.server, self.database, str(self.store.schema))

    def _ensure(self, run: str) -> None:
        if isinstance(perform(self.model, call("get", ("run_id", run))), Raised):
            self.create(run)

    def _timed_store(self) -> Any:
        if self.timed is None:
            import runstore.postgres

            from .._targets._postgres import with_database

            url = with_parameter(
                with_database(self.server.url, self.database),
                "options",
                f"-cstatement_timeout={STATEMENT_TIMEOUT_MS}",
            )
            self.timed = runstore.postgres.open(
                url,
                clock=self.clock,
                consensus=self.store.consensus,
                schema=self.store.schema,
                fast_path=self.store.fast_path,
            )
        return self.timed

    @rule(pair=st.sampled_from(PAIRS), owner=st.sampled_from(OWNERS))
    def deadlock(self, pair: tuple[str, str], owner: OwnerId) -> None:
        """Another session locks the later run of ``pair``; the store's ``heartbeat_many`` for
        ``owner`` locks the earlier one and waits for the later; the other session then asks
        for the earlier one. The server breaks the deadlock by aborting the store's statement,
        and the store must replay it and answer as the reference does."""
        import psycopg

        first, second = pair
        for run in pair:
            self._ensure(run)
        for _ in range(DEADLOCK_TRIES):
            op = call(
                "heartbeat_many",
                ("owner", owner),
                ("run_ids", pair),
                ("now_ms", self.clock.now_ms()),
            )
            expected = perform(self.model, op)
            victim = "store"
            other = self._other()
            try:
                other.lock_row(second)
                pending = OnThread(functools.partial(perform, self.store, op))
                if not other.waiting(self.server, pending):
                    victim = "nobody (the store did not wait)"
                else:
                    try:
                        other.lock_row(first)
                    except psycopg.errors.DeadlockDetected:
                        victim = "the other session"
            finally:
                other.close()
            actual = pending.result()
            self.lost = False
            note(f"{op.describe()} -> {actual!r} (a deadlock; its victim: {victim})")
            if actual != expected:
                raise DeadlockNotReplayed(
                    f"{op.describe()}, aborted by the server to break a deadlock with "
                    f"another session: reference {expected!r} / store {actual!r}"
                )
            if victim != "the other session":
                return
        raise RuntimeError(
            f"the store was not the deadlock's victim in {DEADLOCK_TRIES} tries: its "
            "wait was checked before the other session waited"
        )

    @rule(run=st.sampled_from(RUNS), owner=st.sampled_from(OWNERS))
    def statement_timeout(self, run: str, owner: OwnerId) -> None:
        """Another session holds ``run``'s row; a store whose URL sets ``statement_timeout``
        heartbeats it for ``owner`` and waits until the server cancels the statement. It must
        fail with ``persistence_failed`` and reason ``statement-timeout``."""
        self._ensure(run)
        store = self._timed_store()
        now = self.clock.now_ms()
        other = self._other()
        try:
            other.lock_row(run)
            pending = OnThread(lambda: store.heartbeat(run, owner, now))
            returned = pending.wait(WAIT_S)
        finally:
            other.close()
        what = f"heartbeat({run!r}) waiting for a row past statement_timeout"
        if not returned:
            raise StatementTimeoutMisreported(f"{what} did not return within {WAIT_S} s")
        self._reported(what, pending, "statement-timeout", StatementTimeoutMisreported)

    @rule(run=st.sampled_from(RUNS), owner=st.sampled_from(OWNERS))
    def interrupt(self, run: str, owner: OwnerId) -> None:
        """Another session holds ``run``'s row; the store's heartbeat for ``owner`` waits for it,
        and ``store.interrupt()`` from this thread must end the wait: ``persistence_failed``,
        reason ``interrupted``."""
        self._ensure(run)
        now = self.clock.now_ms()
        other = self._other()
        try:
            other.lock_row(run)
            pending = OnThread(lambda: self.store.heartbeat(run, owner, now))
            waited = bool(other.waiting(self.server, pending))
            self.store.interrupt()
            returned = pending.wait(INTERRUPT_RETURNS_WITHIN_S)
        finally:
            other.close()
        what = f"heartbeat({run!r}) interrupted while it waited for a row"
        if not returned:
            pending.wait(WAIT_S)
            raise InterruptMisreported(
                f"{what} did not return within {INTERRUPT_RETURNS_WITHIN_S} s"
            )
        if not waited:
            raise InterruptMisreported(f"{what}: it never waited for the row another session held")
        self._reported(what, pending, "interrupted", InterruptMisreported)

    def _reported(
        self, what: str, pending: OnThread, reason: str, check: type[PgSessionViolation]
    ) -> None:
        try:
            answer = pending.result()
        except RunStoreError as error:
            note(f"{what}: {error.code} {error.cause.get('reason')!r}: {error}")
            said = "statement_timeout" if reason == "statement-timeout" else "interrupt()"
            if (
                error.code != "persistence_failed"
                or error.cause.get("reason") != reason
                or said not in str(error)
            ):
                raise check(
                    f"{what}: {error.code}, reason {error.cause.get('reason')!r} ({error}); "
                    f"expected persistence_failed, reason {reason!r}, a message naming {said}"
                ) from error
            return
        raise check(f"{what} answered {answer!r}; expected persistence_failed ({reason})")

    @rule(run=st.sampled_from(RUNS))
    def read_cut_off(self, run: str) -> None:
        """Another session holds ``flows_runs`` in ACCESS EXCLUSIVE mode, so the store's ``get``
        of ``run`` waits; the server then ends the store's session. The read must be replayed
        on a new connection once the table is free, and answer as the reference does."""
        op = call("get", ("run_id", run))
        expected = perform(self.model, op)
        other = self._other()
        try:
            other.lock_table()
            pending = OnThread(lambda: perform(self.store, op))
            waiting = other.waiting(self.server, pending)
            for pid in waiting:
                self.server.admin("SELECT pg_catalog.pg_terminate_backend(%s)", (pid,))
            wait_gone(self.server, self.database, waiting)
        finally:
            other.close()
        actual = pending.result()
        self.lost = False
        ended = "its session ended while it waited" if waiting else "it never waited"
        note(f"{op.describe()} -> {actual!r} ({ended})")
        if actual != expected:
            raise ReadLossMishandled(
                f"{op.describe()}, {ended}: reference {expected!r} / store {actual!r}"
            )

    @invariant()
    def states_agree(self) -> None:
        """After every step the store's state equals the reference's, leases left out."""
        if self.store is None:
            return
        expected = without_leases(self.model.state())
        actual = without_leases(self.store.state())
        if actual != expected:
            raise SessionStateMismatch(describe_difference(expected, actual))


def session_loss_check_for(
    store_factory: Callable[..., Any], *, name: str = "store"
) -> type[SessionLossCheck]:
    """A ``SessionLossCheck`` subclass named for ``name`` over ``store_factory``, called as
    ``store_factory(clock, path)`` and building a PostgreSQL store on the suite's server (the
    suite's own PostgreSQL target does)."""
    return type(
        f"SessionLossCheck[{name}]",
        (SessionLossCheck,),
        {"store_factory": staticmethod(store_factory)},
    )


# -- the schema option --------------------------------------------------------------

#: Names a rule opens with. Each needs quoting or sits at the length limit
#: (63 UTF-8 bytes) or one past it, except the first two.
NAMES: Final = (
    "rs_alpha",
    "rs_beta",
    "Mixed Case",
    'say "hi"',
    "s" * 63,
    "ü" * 31 + "x",
    "s" * 64,
    "ü" * 32,
    "",
)
#: Names that ``options=-csearch_path=`` can carry as users write them.
SEARCH_PATH_NAMES: Final = ("rs_alpha", "rs_beta", "Mixed Case", 'say "hi"')


def admissible(name: str) -> bool:
    """Whether the schema option accepts ``name`` (the documented rule)."""
    return 0 < len(name.encode("utf-8")) <= 63 and "\x00" not in name


def with_parameter(url: str, key: str, value: str) -> str:
    """``url`` with ``key=value`` added to its query, percent-encoded."""
    joiner = "&" if urllib.parse.urlsplit(url).query else "?"
    return f"{url}{joiner}{key}={urllib.parse.quote(value, safe='')}"


def search_path_option(name: str) -> str:
    """``-csearch_path=NAME`` with ``NAME`` as an identifier, quoted as needed,
    and spaces escaped for libpq's ``options``."""
    if name.isidentifier() and name == name.lower():
        ident = name
    else:
        ident = '"' + name.replace('"', '""') + '"'
    return "-csearch_path=" + ident.replace("\\", "\\\\").replace(" ", "\\ ")


class SchemaOptionCheck(RuleBasedStateMachine):
    """The schema-option machine, on a fresh database of the suite's server.

    It opens stores with ``schema=``, with the URL's ``schema`` parameter, with both (the same
    name, or two different ones: refused) and with the URL's ``options=-csearch_path=NAME``,
    using names that need quoting, names of exactly 63 UTF-8 bytes and of 64, and the empty
    name. Refusals must be ``invalid_run`` on ``schema`` exactly where the documented rule
    refuses; an accepted store must be on the schema asked for, list exactly the runs created
    on that schema, and create and read a run. ``name`` in its rules is one of those names.
    """

    budget_kind: ClassVar[str] = "pg-schema"
    """Which default budget ``run_conformance`` gives this machine: ``"pg-schema"``."""

    def __init__(self) -> None:
        programs_independent_of_callers_code()
        super().__init__()
        from .._targets import _postgres

        self.server = _postgres.server()
        """The suite's PostgreSQL server."""
        self.url = self.server.fresh_database()
        """The fresh database's URL."""
        self.clock = ManualClock(1_000)
        """The clock the stores are opened with."""
        self.schemas: dict[str, set[str]] = {"public": set()}
        """The schemas that exist, with the runs created on each."""
        self.open_stores: dict[str, Any] = {}
        """The store open on each schema."""
        self.serial = 0
        """How many runs were created (each gets the next number)."""

    def teardown(self) -> None:
        """Close every store opened and drop the database."""
        try:
            for store in self.open_stores.values():
                store.close()
        finally:
            self.server.drop(self.url)

    def _open(self, how: str, url: str, expected: str | None, **options: Any) -> None:
        """Open; ``expected`` is the schema the store must be on, or None when
        the open must be refused with ``invalid_run`` on ``schema``."""
        import runstore

        what = f"open by {how}"
        try:
            store: Any = runstore.open(url, clock=self.clock, **options)
        except RunStoreError as error:
            field = error.cause.get("field")
            note(f"{what}: refused {error.code} {field!r}")
            if expected is not None:
                raise SchemaRefusalMismatch(
                    f"{what}, expected on schema {expected!r}, was refused: {error.code} "
                    f"({error.cause!r})"
                ) from error
            if error.code != "invalid_run" or field != "schema":
                raise SchemaRefusalMismatch(
                    f"{what} was refused with {error.code} on {field!r}; expected invalid_run "
                    f"on 'schema' ({error.cause!r})"
                ) from error
            return
        note(f"{what}: accepted on {store.schema!r}")
        if expected is None:
            store.close()
            raise SchemaRefusalMismatch(f"{what} was accepted (schema {store.schema!r})")
        if store.schema != expected:
            store.close()
            raise SchemaMisselected(f"{what}: the store is on {store.schema!r}, not {expected!r}")
        previous = self.open_stores.pop(expected, None)
        if previous is not None:
            previous.close()
        self.open_stores[expected] = store
        runs = self.schemas.setdefault(expected, set())
        self._listed(expected, store, what)
        self.serial += 1
        run_id = f"run{self.serial}"
        try:
            store.create(run_id, "{}")
            row = store.get(run_id)
        except RunStoreError as error:
            raise SchemaStoreBroken(f"{what} on {expected!r}: {error}") from error
        if row.run_id != run_id or row.status != "pending":
            raise SchemaStoreBroken(f"{what} on {expected!r}: get answered {row!r}")
        runs.add(run_id)

    def _listed(self, schema: str, store: Any, what: str) -> None:
        listed = {row.run_id for row in store.list_runs(limit=1000).runs}
        if listed != self.schemas[schema]:
            raise SchemaMisselected(
                f"{what}: the store on {schema!r} lists {sorted(listed)}, but the runs "
                f"created on it are {sorted(self.schemas[schema])}"
            )

    @rule(name=st.sampled_from(NAMES))
    def by_keyword(self, name: str) -> None:
        """Open with the ``schema=`` keyword set to ``name``."""
        self._open(f"schema={name!r}", self.url, name if admissible(name) else None, schema=name)

    @rule(name=st.sampled_from(NAMES))
    def by_url_parameter(self, name: str) -> None:
        """Open with the URL's ``schema`` parameter set to ``name``."""
        url = with_parameter(self.url, "schema", name)
        self._open(f"the URL's schema={name!r}", url, name if admissible(name) else None)

    @rule(name=st.sampled_from(NAMES))
    def by_keyword_and_url(self, name: str) -> None:
        """Open with the ``schema=`` keyword and the URL's ``schema`` parameter both set to
        ``name``: accepted."""
        url = with_parameter(self.url, "schema", name)
        expected = name if admissible(name) else None
        self._open(f"schema={name!r} and the URL's", url, expected, schema=name)

    @rule(first=st.sampled_from(NAMES[:4]), second=st.sampled_from(NAMES[:4]))
    def by_differing_names(self, first: str, second: str) -> None:
        """Open with the ``schema=`` keyword set to ``first`` and the URL's parameter set to
        ``second``: refused unless they are the same name."""
        url = with_parameter(self.url, "schema", second)
        expected = first if first == second else None
        self._open(f"schema={first!r} and the URL's {second!r}", url, expected, schema=first)

    @rule(name=st.sampled_from(SEARCH_PATH_NAMES))
    def by_search_path(self, name: str) -> None:
        """Open with ``options=-csearch_path=NAME`` for ``name``: the schema must exist (it is
        not created), else ``persistence_failed`` at stage ``schema``."""
        import runstore

        url = with_parameter(self.url, "options", search_path_option(name))
        what = f"open by options={search_path_option(name)!r}"
        if name in self.schemas:
            self._open(what, url, name)
            return
        try:
            store: Any = runstore.open(url, clock=self.clock)
        except RunStoreError as error:
            note(f"{what}: refused {error.code} ({error.cause.get('stage')})")
            if error.code != "persistence_failed" or error.cause.get("stage") != "schema":
                raise SchemaRefusalMismatch(
                    f"{what}, naming no existing schema, was refused with {error.code} "
                    f"({error.cause!r}); expected persistence_failed at stage 'schema'"
                ) from error
            return
        store.close()
        raise SchemaRefusalMismatch(
            f"{what} was accepted on {store.schema!r}, though that schema does not exist"
        )

    @rule()
    def stores_apart(self) -> None:
        """Every open store lists only the runs of its own schema."""
        for schema, store in self.open_stores.items():
            self._listed(schema, store, "later")


#: The schema machine for a factory's server (it builds its own stores).
def schema_option_check_for(*, name: str = "store") -> type[SchemaOptionCheck]:
    """A ``SchemaOptionCheck`` subclass named for the store under test, ``name`` (the machine
    builds its own stores on the suite's server)."""
    return type(f"SchemaOptionCheck[{name}]", (SchemaOptionCheck,), {})
