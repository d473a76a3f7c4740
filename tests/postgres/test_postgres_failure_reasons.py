"""Each kind of PostgreSQL failure says which it is, and the supervisor treats
each as a failed write.

``persistence_failed`` carries ``cause["reason"]`` and a message in words:
the server's ``statement_timeout`` (``statement-timeout``) is told apart
from ``store.interrupt()`` (``interrupted``), though both are SQLSTATE
57014; a ``lock_timeout``; a server (or role) with no free connection slot
when the store reconnects (``too-many-connections``). A session that leaves
a transaction idle is ended by the server after
``idle_in_transaction_session_timeout``, which the store sets to 10 s unless
the URL, role or database set one, so a stuck client cannot hold a run's
lock; the ended operation is replayed on a new connection. A supervised
heartbeat that times out is a failed write: logged, tolerated, and renewed
by the next pulse that succeeds.
"""

from __future__ import annotations

import gc
import logging
import re
import threading
import time
import urllib.parse
import warnings
from typing import Any

import pytest

from runstore import (
    Activated,
    AlreadyClaimed,
    Claimed,
    ManualClock,
    OwnerId,
    RunSnapshot,
    RunStoreError,
    Updated,
)
from runstore.consensus import SqlConsensus
from runstore.ownership import LeaseLost, supervise
from runstore.sqlite import RetryPolicy

from .. import _postgres

postgres = pytest.importorskip("runstore.postgres")
psycopg = pytest.importorskip("psycopg")

OWNER = OwnerId("host-a", 1, "nonce-a")
PENDING = RunSnapshot("pending", None, None)


def with_options(url: str, options: str) -> str:
    """``url`` with libpq's ``options`` parameter set (server settings)."""
    parts = urllib.parse.urlsplit(url)
    query = urllib.parse.parse_qsl(parts.query)
    query.append(("options", options))
    text = urllib.parse.urlencode(query, quote_via=urllib.parse.quote)  # libpq: no '+'
    return urllib.parse.urlunsplit(parts._replace(query=text))


@pytest.fixture
def url() -> str:
    return _postgres.database_url()


class Slow(SqlConsensus):
    """Heartbeats run ``pg_sleep(seconds)`` first while ``seconds`` is set."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.started = threading.Event()

    def heartbeat(self, tx: Any, run_id: str, owner: OwnerId, now_ms: int) -> Any:
        if self.seconds:
            self.started.set()
            tx.connection.execute(f"SELECT pg_sleep({self.seconds})")
        return super().heartbeat(tx, run_id, owner, now_ms)


def _owned(store: Any) -> None:
    store.create("r", "{}")
    assert store.claim_and_own("r", PENDING, OWNER, 0) == Activated()


def test_a_statement_timeout_says_so(url: str) -> None:
    slow = Slow()
    target = with_options(url, "-c statement_timeout=200")
    with postgres.open(target, clock=ManualClock(0), consensus=slow) as store:
        _owned(store)
        before = store.state()
        slow.seconds = 5
        with pytest.raises(RunStoreError) as caught:
            store.heartbeat("r", OWNER, 5)
        error = caught.value
        assert error.code == "persistence_failed"
        assert error.cause["reason"] == "statement-timeout"
        assert error.cause["sqlstate"] == "57014"
        assert "statement_timeout" in error.message
        assert error.outcome_unknown is False
        slow.seconds = 0
        assert store.state() == before
        assert store.heartbeat("r", OWNER, 6) == Updated()


def test_an_interrupt_says_so(url: str) -> None:
    slow = Slow()
    with postgres.open(url, clock=ManualClock(0), consensus=slow) as store:
        _owned(store)
        slow.seconds = 30
        caught: list[BaseException] = []

        def beat() -> None:
            try:
                store.heartbeat("r", OWNER, 5)
            except BaseException as error:
                caught.append(error)

        worker = threading.Thread(target=beat)
        worker.start()
        assert slow.started.wait(10)
        for _ in range(50):
            store.interrupt()
            worker.join(0.2)
            if not worker.is_alive():
                break
        assert not worker.is_alive()
        (error,) = caught
        assert isinstance(error, RunStoreError)
        assert error.cause["reason"] == "interrupted"
        assert "interrupt()" in error.message
        # The server answered with an error: that proves a rollback.
        assert error.outcome_unknown is False


def test_a_lock_timeout_says_so(url: str) -> None:
    target = with_options(url, "-c lock_timeout=100")
    with postgres.open(target, clock=ManualClock(0)) as store:
        _owned(store)
        with psycopg.connect(url) as holder:
            holder.execute("SELECT 1 FROM flows_runs WHERE run_id = 'r' FOR UPDATE")
            with pytest.raises(RunStoreError) as caught:
                store.heartbeat("r", OWNER, 5)
        assert caught.value.cause["reason"] == "lock-timeout"
        assert "lock_timeout" in caught.value.message
        assert store.heartbeat("r", OWNER, 6) == Updated()


@pytest.fixture
def limited(url: str) -> Any:
    """A login role allowed two connections, with the grants the store needs."""
    name = urllib.parse.unquote(urllib.parse.urlsplit(url).path.lstrip("/"))
    role = f"limited_{re.sub(r'[^a-z0-9]', '_', name)}"
    server = _postgres.require_server()
    try:
        server.admin(f"CREATE ROLE {role} LOGIN CONNECTION LIMIT 2")
    except psycopg.Error:
        pytest.skip("the test server's role cannot create roles")
    with psycopg.connect(url, autocommit=True) as owner:
        owner.execute(f"GRANT USAGE ON SCHEMA public TO {role}")
        owner.execute(
            f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role}"
        )
    parts = urllib.parse.urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    try:
        yield urllib.parse.urlunsplit(parts._replace(netloc=f"{role}@{host}"))
    finally:
        server.terminate_connections(url)
        with psycopg.connect(url, autocommit=True) as owner:
            owner.execute(f"DROP OWNED BY {role}")
        server.admin(f"DROP ROLE IF EXISTS {role}")


def test_no_free_connection_slot_on_reconnect_says_so(url: str, limited: str) -> None:
    """The store's connection is ended; the slots it could reconnect into are
    taken: persistence_failed, too-many-connections. Once a slot frees up the
    store reconnects on its own."""
    with postgres.open(limited, clock=ManualClock(0)) as store:
        _owned(store)
        store._retry_policy = RetryPolicy(max_attempts=3)
        with psycopg.connect(limited) as other:
            server = _postgres.require_server()
            role = limited.split("//")[1].split("@")[0]
            others = (
                "FROM pg_stat_activity WHERE usename = %s AND pid <> %s",
                (role, other.info.backend_pid),
            )
            server.admin(f"SELECT pg_terminate_backend(pid) {others[0]}", others[1])
            # A terminated backend keeps its slot until it has left the
            # process table: wait (bounded) before taking the freed slot.
            deadline = time.monotonic() + 10
            while server.admin(f"SELECT count(*) {others[0]}", others[1])[0][0]:
                assert time.monotonic() < deadline, "the store's backend never ended"
                time.sleep(0.01)
            with psycopg.connect(limited), pytest.raises(RunStoreError) as caught:
                store.heartbeat("r", OWNER, 5)
        error = caught.value
        assert error.code == "persistence_failed"
        assert error.cause["reason"] == "too-many-connections"
        assert "no free connection slot" in error.message
        assert error.outcome_unknown is False
        assert store.heartbeat("r", OWNER, 6) == Updated()


def test_the_store_bounds_an_idle_open_transaction(url: str) -> None:
    with postgres.open(url, clock=ManualClock(0)) as store:
        row = store._connection.execute("SHOW idle_in_transaction_session_timeout").fetchone()
        assert row[0] == "10s"
    target = with_options(url, "-c idle_in_transaction_session_timeout=250")
    with postgres.open(target, clock=ManualClock(0)) as store:
        row = store._connection.execute("SHOW idle_in_transaction_session_timeout").fetchone()
        assert row[0] == "250ms"  # the URL's setting wins


class Stuck(SqlConsensus):
    """The first claim stalls in Python, its transaction open and idle."""

    def __init__(self) -> None:
        self.calls = 0
        self.stalled = threading.Event()

    def claim(self, tx: Any, run_id: str, claimant: OwnerId, now_ms: int) -> Any:
        self.calls += 1
        if self.calls == 1:
            self.stalled.set()
            time.sleep(1.5)
        return super().claim(tx, run_id, claimant, now_ms)


def test_a_stalled_transaction_is_ended_and_its_lock_released(url: str) -> None:
    """A holds the run's lock and stalls; the server ends A's session, B gets
    the run, and A's operation is replayed on a new connection and loses."""
    stuck = Stuck()
    target = with_options(url, "-c idle_in_transaction_session_timeout=250")
    with (
        postgres.open(target, clock=ManualClock(0), consensus=stuck) as a,
        postgres.open(url, clock=ManualClock(0)) as b,
    ):
        a.create("r", "{}")
        first_pid = a._connection.info.backend_pid
        answers: list[Any] = []

        def claim() -> None:
            try:
                answers.append(a.claim("r", PENDING, OWNER, 5))
            except BaseException as error:  # reported through the answers
                answers.append(error)

        worker = threading.Thread(target=claim)
        worker.start()
        assert stuck.stalled.wait(10)
        started = time.monotonic()
        assert b.claim("r", PENDING, OwnerId("host-b", 2, "b"), 5) == Claimed(5)
        assert time.monotonic() - started < 1.4  # it did not wait for A to wake
        worker.join(10)
        # Replayed on a new connection: the run is B's now.
        assert answers == [AlreadyClaimed()]
        assert a._connection.info.backend_pid != first_pid
        a.check_invariants()


def test_a_supervised_heartbeat_that_times_out_is_a_failed_write(
    url: str, caplog: pytest.LogCaptureFixture
) -> None:
    slow = Slow()
    clock = ManualClock(0)
    target = with_options(url, "-c statement_timeout=100")
    with postgres.open(target, clock=clock, consensus=slow) as store:
        _owned(store)
        slow.seconds = 5
        with (
            caplog.at_level(logging.WARNING, logger="runstore.ownership"),
            supervise(store, "r", OWNER, clock=clock) as lease,
        ):
            for now in range(1_000, 10_001, 1_000):
                clock.set(now)
                assert lease.wait_idle(10)
            assert lease.last_confirmed_ms == 0
            assert not lease.lost.is_set()
            slow.seconds = 0
            clock.set(11_000)
            assert lease.wait_idle(10)
            assert lease.last_confirmed_ms == 11_000
        failed = [r for r in caplog.records if "heartbeat write failed" in r.getMessage()]
        assert len(failed) == 1  # once per outage
        assert store.get("r").heartbeat_at_ms == 11_000


def _until_lapsed(clock: ManualClock, lease: Any, errors: list[str]) -> None:
    """Move the clock (the pulse's heartbeat waits on the lock) until the
    lease lapses, then wait for the cancelled heartbeat to return; bounded."""
    clock.set(1_000)
    deadline = time.monotonic() + 30
    while not lease.lost.is_set() and time.monotonic() < deadline:
        clock.advance(1_000)
        time.sleep(0.02)
    assert lease.lost.is_set()
    for _ in range(500):
        if errors:
            return
        time.sleep(0.01)


def test_a_heartbeat_stuck_on_a_lock_is_interrupted_when_the_lease_lapses(url: str) -> None:
    """The supervisor's bound on a stuck write: another session holds the
    run's row, the supervised heartbeat waits on it; once the write tolerance
    is spent the lease lapses and the supervisor interrupts the store, so the
    stuck statement is cancelled (reason interrupted) instead of waiting on."""
    clock = ManualClock(0)
    with postgres.open(url, clock=clock) as store:
        _owned(store)
        errors: list[str] = []
        original = store.heartbeat

        def heartbeat(run_id: str, owner: OwnerId, now_ms: int) -> Any:
            try:
                return original(run_id, owner, now_ms)
            except RunStoreError as error:
                errors.append(str(error.cause.get("reason")))
                raise

        store.heartbeat = heartbeat  # type: ignore[method-assign]
        with psycopg.connect(url) as holder:
            holder.execute("SELECT 1 FROM flows_runs WHERE run_id = 'r' FOR UPDATE")
            with (
                pytest.raises(LeaseLost) as ended,
                supervise(store, "r", OWNER, clock=clock, interrupt_thread=False) as lease,
            ):
                _until_lapsed(clock, lease, errors)
            holder.rollback()
        assert ended.value.reason == "lapsed"
        assert "interrupted" in errors
        assert store.heartbeat("r", OWNER, clock.now_ms()) == Updated()


def _stuck_at_commit(store: Any, url: str, call: Any) -> tuple[Any, float]:
    """Run ``call`` while another session holds the change log in SHARE
    mode, which every write's commit waits for (the deferred revision
    trigger appends the write's entry, after PostgreSQL disarmed
    statement_timeout): its answer (or error) and how long it took. Bounded:
    after 15 s the holder lets go."""
    answers: list[Any] = []

    def run() -> None:
        try:
            answers.append(call())
        except BaseException as error:
            answers.append(error)

    with psycopg.connect(url) as holder:
        holder.execute("LOCK TABLE flows_change_log IN SHARE MODE")
        started = time.monotonic()
        worker = threading.Thread(target=run, daemon=True)
        worker.start()
        worker.join(15)
        elapsed = time.monotonic() - started
        holder.rollback()
    worker.join(15)
    assert not worker.is_alive()
    (answer,) = answers
    return answer, elapsed


@pytest.mark.parametrize("fast_path", [True, False], ids=["one-round-trip", "general"])
def test_statement_timeout_bounds_a_commit_and_the_cancel_rolls_it_back(
    url: str, fast_path: bool
) -> None:
    """PostgreSQL does not apply statement_timeout to the commit (here stuck
    on a lock its deferred trigger takes); the store bounds the round trip
    that commits at twice the timeout (at least 1 s) and cancels it. The
    server answers with an error, which proves the rollback: outcome known.
    On the one-round-trip path the write is a create: since migration 2014
    the other one-round-trip writes append their change inside their
    statement, where statement_timeout applies (the next test)."""
    target = with_options(url, "-c statement_timeout=200")
    with postgres.open(target, clock=ManualClock(0), fast_path=fast_path) as store:
        _owned(store)
        before = store.state()
        if fast_path:
            call: Any = lambda: store.create("new", "{}")  # noqa: E731
        else:
            call = lambda: store.heartbeat("r", OWNER, 5)  # noqa: E731
        error, elapsed = _stuck_at_commit(store, url, call)
        assert elapsed < 10, "the commit waited for the lock until the holder let go"
        assert elapsed >= 1.0
        assert isinstance(error, RunStoreError), error
        assert error.cause["reason"] == "statement-timeout"
        assert error.cause["sqlstate"] == "57014"
        assert error.outcome_unknown is False
        assert store.state() == before
        assert store.heartbeat("r", OWNER, 6) == Updated()


def test_a_one_round_trip_write_waiting_on_the_change_log_is_bounded_by_the_server(
    url: str,
) -> None:
    """Migration 2014: a one-round-trip heartbeat appends its change inside
    its statement, so the server's statement_timeout cancels a wait on the
    change log there, before the store's bound on a commit would."""
    target = with_options(url, "-c statement_timeout=200")
    with postgres.open(target, clock=ManualClock(0)) as store:
        _owned(store)
        before = store.state()
        error, elapsed = _stuck_at_commit(store, url, lambda: store.heartbeat("r", OWNER, 5))
        assert isinstance(error, RunStoreError), error
        assert error.cause["reason"] == "statement-timeout"
        assert error.outcome_unknown is False
        assert elapsed < 10
        assert store.state() == before
        assert store.heartbeat("r", OWNER, 6) == Updated()


def test_an_interrupted_commit_the_server_refused_is_rolled_back(url: str) -> None:
    """store.interrupt() while the commit waits on a lock: the server answers
    the cancelled commit with an error, so it rolled back (outcome known)."""
    with postgres.open(url, clock=ManualClock(0)) as store:
        _owned(store)
        before = store.state()
        pid = store._connection.info.backend_pid
        server = _postgres.require_server()

        def interrupt_when_waiting() -> Any:
            waiting = (
                "SELECT count(*) FROM pg_stat_activity WHERE pid = %s AND wait_event_type = 'Lock'"
            )
            deadline = time.monotonic() + 10
            while server.admin(waiting, (pid,))[0][0] == 0 and time.monotonic() < deadline:
                time.sleep(0.01)
            store.interrupt()

        helper = threading.Thread(target=interrupt_when_waiting, daemon=True)
        helper.start()
        error, elapsed = _stuck_at_commit(store, url, lambda: store.heartbeat("r", OWNER, 5))
        helper.join(10)
        assert elapsed < 10
        assert isinstance(error, RunStoreError), error
        assert error.cause["reason"] == "interrupted"
        assert error.outcome_unknown is False
        assert store.state() == before


def test_a_statement_timeout_during_open_says_so(url: str) -> None:
    """open() waits for the schema's migration lock, which another session
    holds, past the URL's statement_timeout: persistence_failed, reason
    statement-timeout, and the message says so."""
    target = with_options(url, "-c statement_timeout=200")
    with psycopg.connect(url) as holder:
        holder.execute("SELECT pg_advisory_xact_lock(hashtext('runstore:' || 'fresh'))")
        with pytest.raises(RunStoreError) as caught:
            postgres.open(target, clock=ManualClock(0), schema="fresh")
    error = caught.value
    assert error.code == "persistence_failed"
    assert error.cause["stage"] == "migrate"
    assert error.cause["reason"] == "statement-timeout"
    assert "statement_timeout" in error.message


@pytest.mark.parametrize("timeout_ms", [1, 99])
def test_a_statement_timeout_too_short_for_the_store_is_refused(url: str, timeout_ms: int) -> None:
    target = with_options(url, f"-c statement_timeout={timeout_ms}")
    with pytest.raises(RunStoreError) as caught:
        postgres.open(target, clock=ManualClock(0))
    error = caught.value
    assert error.code == "persistence_failed"
    assert error.cause["reason"] in ("statement-timeout-too-short", "statement-timeout")
    if error.cause["reason"] == "statement-timeout-too-short":
        assert error.cause["statement_timeout_ms"] == timeout_ms
        assert "statement_timeout" in error.message
    # The least accepted, and none at all, open.
    postgres.open(with_options(url, "-c statement_timeout=100"), clock=ManualClock(0)).close()
    postgres.open(with_options(url, "-c statement_timeout=0"), clock=ManualClock(0)).close()


@pytest.mark.parametrize("read_only", [False, True], ids=["writable", "read-only"])
def test_a_session_whose_settings_fail_is_closed_at_once(
    url: str, read_only: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session whose first statements fail (a ``statement_timeout`` of
    1 ms cancels them now and then; here a statement that always fails) is
    closed before the open fails, not left open for the collector, whose
    ``ResourceWarning`` then fails some later test at random."""
    from runstore.postgres import _open

    postgres.open(url, clock=ManualClock(0)).close()  # migrated: read_only may open it
    failing = "SELECT pg_catalog.no_such_function()"
    monkeypatch.setattr(_open, "_READ_ONLY_SESSION" if read_only else "_WRITABLE_SESSION", failing)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            with pytest.raises(RunStoreError) as refused:
                postgres.open(url, clock=ManualClock(0), read_only=read_only)
            assert refused.value.code == "persistence_failed"
            assert refused.value.cause["stage"] == "connect"
            del refused
        gc.collect()
    leaked = [w for w in caught if issubclass(w.category, ResourceWarning)]
    assert not leaked, [str(w.message) for w in leaked]


def test_the_store_reads_its_sessions_statement_timeout(url: str) -> None:
    with postgres.open(with_options(url, "-c statement_timeout=1min"), clock=ManualClock(0)) as a:
        assert a._connection.statement_timeout_ms == 60_000
    with postgres.open(url, clock=ManualClock(0)) as b:
        assert b._connection.statement_timeout_ms == 0


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (
            'connection to server on socket "/tmp/x/.s.PGSQL.5432" failed: server closed the '
            "connection unexpectedly\n\tThis probably means the server terminated abnormally\n"
            "\tbefore or while processing the request.",
            "server-starting-or-stopping",
        ),
        (
            'connection to server at "db" (10.0.0.5), port 5432 failed: could not receive data '
            "from server: Connection reset by peer",
            "server-starting-or-stopping",
        ),
        (
            'connection to server on socket "/tmp/x/.s.PGSQL.5432" failed: FATAL:  the database '
            "system is shutting down",
            "server-starting-or-stopping",
        ),
        (
            'connection to server at "db" (10.0.0.5), port 5432 failed: Connection refused',
            "unreachable",
        ),
    ],
)
def test_a_server_going_down_while_one_connects_is_named(text: str, reason: str) -> None:
    """What libpq says when a connection is attempted while the server stops
    or restarts is a reason of the outage, never ``unknown`` (a fast restart
    once closed a new connection before its handshake: ``unknown``)."""
    from runstore.postgres._errors import connect_reason

    assert connect_reason(psycopg.OperationalError(text)) == reason
