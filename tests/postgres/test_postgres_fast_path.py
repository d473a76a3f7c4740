"""The PostgreSQL store's one-round-trip path.

With ``SqlConsensus`` exactly (and a writable store) every write operation
is one statement, a server-side function's call, sent as its own
transaction: one round trip (and one more for the notification that
follows a write that may wake a worker), counted here from libpq's own trace of the
messages the client sends (a round trip is a ``Sync`` of the extended
protocol or a simple ``Query``). ``claim_next`` takes one when the server
proves its row will decode (``test_postgres_claim_next_once`` covers the
rest). The general path takes a statement per
step plus ``BEGIN`` and ``COMMIT``. A strategy of one's own (a subclass
included) takes the general path, ``fast_path=True`` with one is refused,
and ``fast_path=False`` keeps the general path with ``SqlConsensus``. On
the one-round-trip path a connection lost while the operation's statement
was on its way leaves its outcome unknown, as a lost ``COMMIT`` does on the
general path.
"""

from __future__ import annotations

import signal
import tempfile
import threading
from collections.abc import Callable
from typing import Any

import pytest

from runstore import (
    Activated,
    LivenessEvidence,
    ManualClock,
    OwnerId,
    RunSnapshot,
    RunStoreError,
)
from runstore.consensus import SqlConsensus

from .. import _postgres

postgres = pytest.importorskip("runstore.postgres")
psycopg = pytest.importorskip("psycopg")

OWNER = OwnerId("host-a", 1, "nonce-a")
THIEF = OwnerId("host-b", 2, "nonce-b")
PENDING = RunSnapshot("pending", None, None)


@pytest.fixture
def url() -> str:
    return _postgres.database_url()


def round_trips(store: Any, call: Callable[[], object]) -> int:
    """How many round trips ``call`` made on the store's connection."""
    connection = store._tm.live()
    # psycopg prepares a statement on its fifth use, a round trip of its own
    # once per connection: not what is counted here.
    connection.prepare_threshold = None
    with tempfile.TemporaryFile("w+") as trace:
        connection.pgconn.trace(trace.fileno())
        try:
            call()
        finally:
            connection.pgconn.untrace()
        trace.seek(0)
        lines = [line.split("\t") for line in trace.read().splitlines()]
    # Each line: [timestamp,] direction (F: from the client), length, message.
    sent = [fields[fields.index("F") + 2] for fields in lines if "F" in fields[:2]]
    # A statement's preparation (Parse, then Sync) is made once per connection,
    # on its first use: not what is counted here either.
    trips, since = 0, []
    for message in sent:
        if message == "Query" or (message == "Sync" and since != ["Parse"]):
            trips += 1
        since = [] if message in ("Sync", "Query") else [*since, message]
    return trips


class Subclass(SqlConsensus):
    """Decides like SqlConsensus, but is not it: the general path."""


def test_which_stores_take_the_one_round_trip_path(url: str) -> None:
    clock = ManualClock(0)
    with postgres.open(url, clock=clock) as store:
        assert store.fast_path is True
    with postgres.open(url, clock=clock, fast_path=False) as store:
        assert store.fast_path is False
    with postgres.open(url, clock=clock, consensus=Subclass()) as store:
        assert store.fast_path is False
    with postgres.open(url, clock=clock, read_only=True) as store:
        assert store.fast_path is False
    with pytest.raises(RunStoreError) as caught:
        postgres.open(url, clock=clock, consensus=Subclass(), fast_path=True)
    assert caught.value.code == "invalid_run"
    assert caught.value.cause["field"] == "fast_path"


@pytest.mark.parametrize("fast_path", [True, False], ids=["one-round-trip", "general"])
def test_round_trips_per_operation(url: str, fast_path: bool) -> None:
    clock = ManualClock(0)
    with postgres.open(url, clock=clock, fast_path=fast_path) as store:
        store._tm.notify_spacing_s = 0.0  # each notification sent with its write
        for name in ("a", "b", "c", "d", "e"):
            store.create(name, "{}")
        counts = {
            "create": round_trips(store, lambda: store.create("f", "{}")),
            "claim_and_own": round_trips(
                store, lambda: store.claim_and_own("a", PENDING, OWNER, 0)
            ),
            "heartbeat": round_trips(store, lambda: store.heartbeat("a", OWNER, 5)),
            "reconfirm": round_trips(store, lambda: store.reconfirm("a", OWNER, 6)),
            "transition_owned": round_trips(
                store, lambda: store.transition_owned("a", OWNER, "running", '{"s": 1}')
            ),
            "claim": round_trips(store, lambda: store.claim("b", PENDING, OWNER, 0)),
            "activate": round_trips(store, lambda: store.activate("b", OWNER, 0, PENDING)),
            "request_cancel": round_trips(store, lambda: store.request_cancel("c", 1)),
            "acknowledge_cancel": round_trips(
                store, lambda: store.acknowledge_cancel("a", OWNER, 7)
            ),
            "heartbeat_many": round_trips(
                store, lambda: store.heartbeat_many(OWNER, ["a", "b"], 8)
            ),
            "claim_next": round_trips(store, lambda: store.claim_next(OWNER, 9)),
        }
        clock.set(40_000)
        evidence = LivenessEvidence(OWNER, 40_000, "lease-expired")
        expected = RunSnapshot("running", OWNER, 8)
        counts["steal"] = round_trips(
            store, lambda: store.steal("b", expected, THIEF, 40_000, evidence)
        )
        store.check_invariants()
    if fast_path:
        # A write that may wake a worker is followed, once it has committed,
        # by the store's NOTIFY: a round trip of its own (test_postgres_notify).
        woken = {"create", "request_cancel"}
        assert counts == {name: 2 if name in woken else 1 for name in counts}
    else:
        assert min(counts.values()) >= 3  # BEGIN, at least one statement, COMMIT
        assert counts["claim_and_own"] >= 5


_DIE_AT_COMMIT = """
CREATE FUNCTION die_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_terminate_backend(pg_backend_pid());
  PERFORM pg_sleep(5);
  RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER die_at_commit AFTER UPDATE ON flows_runs
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
  WHEN (NEW.heartbeat_at_ms = 666) EXECUTE FUNCTION die_at_commit();
"""


@pytest.mark.parametrize("fast_path", [True, False], ids=["one-round-trip", "general"])
def test_a_connection_lost_at_commit_leaves_the_outcome_unknown(url: str, fast_path: bool) -> None:
    """On both paths: persistence_failed with outcome_unknown, nothing replayed,
    and the next operation reconnects."""
    with psycopg.connect(url, autocommit=True) as raw:
        raw.execute(_DIE_AT_COMMIT)
    with postgres.open(url, clock=ManualClock(0), fast_path=fast_path) as store:
        store.create("r", "{}")
        assert store.claim_and_own("r", PENDING, OWNER, 0) == Activated()
        before = store.state()
        with pytest.raises(RunStoreError) as caught:
            store.heartbeat("r", OWNER, 666)
        assert caught.value.outcome_unknown is True
        assert "attempts" not in caught.value.cause
        assert store.state() == before  # this time the server had not committed
        assert store.heartbeat("r", OWNER, 667).__class__.__name__ == "Updated"


def test_an_idle_connection_the_server_ended_is_replaced_before_sending(url: str) -> None:
    """The one-round-trip path cannot replay a statement it sent on a dead
    connection, so it looks first: the server's farewell is read without a
    round trip and the connection replaced; the operation simply works."""
    with postgres.open(url, clock=ManualClock(0)) as store:
        store.create("r", "{}")
        assert store.claim_and_own("r", PENDING, OWNER, 0) == Activated()
        first = store._connection.info.backend_pid
        for _ in range(3):
            assert _postgres.require_server().terminate_connections(url) >= 1
            assert store.heartbeat("r", OWNER, 5).__class__.__name__ == "Updated"
        assert store._connection.info.backend_pid != first
        store.check_invariants()


def test_a_backend_that_freed_its_slot_before_closing_its_socket_is_replaced(
    url: str,
) -> None:
    """A terminated backend leaves the server's process table (its slot is
    free, it is gone from ``pg_stat_activity``) a moment before its socket is
    closed. An operation in that moment has read only the farewell, not the
    close; it waits for the close and replaces the connection. (Before that
    wait, about 1 in 75 such heartbeats was sent on the dying connection and
    failed with an unknown outcome.)"""
    server = _postgres.require_server()
    with (
        postgres.open(url, clock=ManualClock(0)) as store,
        psycopg.connect(url, autocommit=True) as watcher,
    ):
        store.create("r", "{}")
        assert store.claim_and_own("r", PENDING, OWNER, 0) == Activated()
        for _ in range(300):
            pid = store._connection.info.backend_pid
            server.admin("SELECT pg_terminate_backend(%s)", (pid,))
            gone = "SELECT count(*) FROM pg_stat_activity WHERE pid = %s"
            while watcher.execute(gone, (pid,)).fetchone()[0]:
                pass
            assert store.heartbeat("r", OWNER, 5).__class__.__name__ == "Updated"


def test_the_trace_counter_sees_round_trips(url: str) -> None:
    """The counter itself: two statements on a raw connection are two."""
    with postgres.open(url, clock=ManualClock(0)) as store:
        connection = store._tm.live()

        def two() -> None:
            psycopg.Connection.execute(connection, "SELECT 1")
            psycopg.Connection.execute(connection, "SELECT $1::int", (2,))

        assert round_trips(store, two) == 2


def test_a_statement_deallocated_behind_the_store_is_prepared_again(url: str) -> None:
    """psycopg deallocates every prepared statement of its session after a
    ROLLBACK it sees (DEALLOCATE ALL), the store's own among them: the next
    one-round-trip call prepares its statement again, and nothing runs twice."""
    clock = ManualClock(0)
    with postgres.open(url, clock=clock) as store:
        store.create("r", "{}")
        assert store.claim_and_own("r", PENDING, OWNER, 0) == Activated()
        store.heartbeat("r", OWNER, 5)
        connection = store._tm.live()
        connection.execute("BEGIN")
        connection.execute("ROLLBACK")  # psycopg's own cue to deallocate
        connection.execute("DEALLOCATE ALL")  # whether or not it had any
        before = store.revision()
        store.heartbeat("r", OWNER, 6)
        assert store.revision() == before + 1  # one write, not two
        assert store.get("r").heartbeat_at_ms == 6
        store.check_invariants()


def test_an_interruption_while_a_statement_waits_cancels_it(url: str) -> None:
    """Ctrl-C (KeyboardInterrupt) while a one-round-trip call waits for the
    server: the statement is cancelled there, the interruption propagates,
    and the store's next call runs on an idle connection."""
    clock = ManualClock(0)
    with postgres.open(url, clock=clock) as store, psycopg.connect(url) as holder:
        store.create("r", "{}")
        assert store.claim_and_own("r", PENDING, OWNER, 0) == Activated()
        holder.execute("SELECT 1 FROM flows_runs WHERE run_id = 'r' FOR UPDATE")
        main = threading.main_thread().ident
        assert main is not None
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
        timer = threading.Timer(0.5, signal.pthread_kill, (main, signal.SIGINT))
        try:
            timer.start()
            with pytest.raises(KeyboardInterrupt):
                store.heartbeat("r", OWNER, 5)  # waits for the holder's row lock
        finally:
            timer.cancel()
            signal.signal(signal.SIGINT, previous)
        holder.rollback()
        assert store.get("r").heartbeat_at_ms == 0  # cancelled, never applied
        assert store.heartbeat("r", OWNER, 6) is not None
        assert store.get("r").heartbeat_at_ms == 6
        store.check_invariants()


@pytest.mark.parametrize("how", ["run_once", "run_pipelined", "commit_bounded", "probe"])
def test_a_lean_round_trip_waits_for_the_connections_lock(url: str, how: str) -> None:
    """The round trips straight through libpq take the lock psycopg's own
    ``execute`` takes, so a statement sent on the connection from another
    thread (the store's notification sender, a test reading the connection)
    never interleaves with one on the wire ("another command is already in
    progress", or a wait for an answer that went to the other)."""
    from runstore.postgres import _tx

    with postgres.open(url, clock=ManualClock(0)) as store:
        connection = store._tm.live()
        done: list[Any] = []

        def lean() -> None:
            if how == "run_once":
                done.append(connection.run_once("SELECT 1", ()))
            elif how == "run_pipelined":
                answers: list[Any] = []
                connection.run_pipelined("SELECT $1::int", [(1,), (2,)], lambda: None, answers)
                done.append(answers)
            elif how == "commit_bounded":
                connection.commit_bounded(None)
                done.append("committed")
            else:
                _tx._probe(connection)
                done.append("probed")

        if how == "commit_bounded":
            connection.execute("BEGIN")
        with connection.lock:
            other = threading.Thread(target=lean, daemon=True)
            other.start()
            other.join(0.2)
            assert other.is_alive(), "it did not wait for the lock"
            assert not done
        other.join(10)
        expected = {
            "run_once": ([(1,)], 1),
            "run_pipelined": [([(1,)], 1), ([(2,)], 1)],
            "commit_bounded": "committed",
            "probe": "probed",
        }
        assert done == [expected[how]]
