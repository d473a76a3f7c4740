"""Waking workers on PostgreSQL: the store's NOTIFY and ``open_listener()``.

What is sent is counted exactly, with no timing: an ``Observer`` listens on
the channel with a connection of its own; after each step a sentinel
notification is committed from a third connection, and PostgreSQL delivers
a channel's notifications in commit order, so what arrives before the
sentinel is what the step sent (a store sends its notification before the
call returns).

- A create, a release to ``suspended``, an ``abandon_claim``, a
  ``recover_claim`` and a cancellation request each send exactly one, on
  both paths (one round trip and the general path); a heartbeat, a
  checkpoint, a claim, a repeated request and reads send none; a request
  over a lineage of three rounds sends one.
- Two schemas of one database have their own channels; ``notify=False``
  sends nothing. Notifications of one store are spaced: one due sooner is
  held back, and sent by the next write, a sender thread or the close, one
  for all the writes held back (the other tests turn the spacing off, so
  that each step sends its own).
- The notification is not inside the write's transaction: on a cluster that
  names a synchronous standby that does not exist, a transaction that wrote
  and notified waits at commit for it, holding the database's notify lock;
  a store (its session committing locally) still commits its create, and
  its own notification gives up on the lock without failing the write.
- ``PostgresListener``: wakes on a create, a release to suspended and a
  cancellation request; a killed connection is replaced and ``wait``
  answers True once (and sleeps out its timeout, False, while the database
  refuses connections); ``close()`` wakes a waiter.

Each check is shown to catch a planted store: one whose create does not
notify, and one that notifies inside the write's transaction.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import runstore
from runstore import (
    Abandoned,
    Activated,
    Claimed,
    InvalidRunError,
    LivenessEvidence,
    ManualClock,
    OwnerId,
    PersistenceFailedError,
    Recovered,
    RunSnapshot,
    Transitioned,
)
from runstore._sql._store import SqlRunStore
from runstore.stateful._targets._postgres import URL_VARIABLE
from runstore.worker import Wakeup

from .. import _postgres
from ._pg_faults import Node, need_binaries

postgres = pytest.importorskip("runstore.postgres")
psycopg = pytest.importorskip("psycopg")
from psycopg import sql  # noqa: E402

from runstore.postgres._notify import (  # noqa: E402
    NOTIFY_LOCK_TIMEOUT_MS,
    NOTIFY_SPACING_MS,
    channel_for,
)

PENDING = RunSnapshot("pending", None, None)
OWNER = OwnerId("host-a", 101, "owner-a")
OBSERVER = OwnerId("host-a", 202, "owner-b")
STALE_MS = 31_000
#: A bound on waiting for what must come (never reached when all is well).
PATIENCE_S = 30.0


class Observer:
    """Counts the notifications on ``channel`` that each step sends."""

    def __init__(self, url: str, channel: str) -> None:
        self.channel = channel
        self.listening = psycopg.connect(url, autocommit=True)
        self.listening.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
        self.sending = psycopg.connect(url, autocommit=True)

    def sent_by(self, step: Callable[[], Any]) -> list[Any]:
        """The notifications committed by ``step`` (all of them, before it returned)."""
        step()
        return self.collect()

    def collect(self) -> list[Any]:
        """The notifications committed since the last ``collect``."""
        self.sending.execute("SELECT pg_notify(%s, 'sentinel')", (self.channel,))
        seen = []
        for notification in self.listening.notifies(timeout=PATIENCE_S):
            if notification.payload == "sentinel":
                return seen
            seen.append(notification)
        raise AssertionError("the sentinel notification never arrived")

    def count(self, step: Callable[[], Any]) -> int:
        return len(self.sent_by(step))

    def close(self) -> None:
        self.listening.close()
        self.sending.close()


@pytest.fixture
def url() -> str:
    return _postgres.database_url()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(1_000)


@pytest.fixture
def observer(url: str) -> Iterator[Observer]:
    watching = Observer(url, channel_for("public"))
    yield watching
    watching.close()


def _open(url: str, clock: ManualClock, *, spaced: bool = False, **options: Any) -> Any:
    """A store; unless ``spaced``, one whose notifications are not held back
    for spacing (``test_notifications_are_spaced`` covers that), so each step
    sends its own."""
    store = postgres.open(url, clock=clock, **options)
    assert store.notify_channel == channel_for(store.schema)
    if not spaced:
        store._tm.notify_spacing_s = 0.0
    return store


# -- what each write sends ---------------------------------------------------------


def wakes_by_operation(store: Any, clock: ManualClock, observer: Observer) -> dict[str, int]:
    """How many notifications each step of a run's life sends, by step."""
    count = observer.count
    now = clock.now_ms
    sent: dict[str, int] = {}
    sent["create"] = count(lambda: store.create("r1", "{}"))
    sent["claim_and_own"] = count(
        lambda: _expect(store.claim_and_own("r1", PENDING, OWNER, now()), Activated)
    )
    sent["heartbeat"] = count(lambda: store.heartbeat("r1", OWNER, now()))
    sent["checkpoint"] = count(
        lambda: _expect(store.transition_owned("r1", OWNER, "running", '{"a":1}'), Transitioned)
    )
    sent["reads"] = count(
        lambda: (
            store.get("r1"),
            store.list_runs(),
            store.claim_next(OBSERVER, now()),
            store.revision(),
            store.state(),
        )
    )
    sent["suspend"] = count(
        lambda: _expect(store.transition_owned("r1", OWNER, "suspended"), Transitioned)
    )
    sent["request_cancel"] = count(lambda: store.request_cancel("r1", now()))
    sent["request_cancel again"] = count(lambda: store.request_cancel("r1", now()))
    count(lambda: store.create("r2", "{}"))
    sent["claim"] = count(lambda: _expect(store.claim("r2", PENDING, OWNER, now()), Claimed))
    sent["abandon_claim"] = count(
        lambda: _expect(store.abandon_claim("r2", OWNER, now()), Abandoned)
    )
    claimed_at = now()
    count(lambda: store.claim("r2", PENDING, OWNER, claimed_at))
    clock.advance(STALE_MS)
    proof = LivenessEvidence(OWNER, now(), "same-host-pid-dead")
    sent["recover_claim"] = count(
        lambda: _expect(
            store.recover_claim("r2", OWNER, claimed_at, OBSERVER, now(), proof), Recovered
        )
    )
    for parent, run_id, ordinal in ((None, "l1", 1), ("l1", "l2", 2), ("l2", "l3", 3)):
        options = {"parent_run_id": parent, "lineage_id": "l", "round_ordinal": ordinal}
        count(lambda: store.create(run_id, "{}", **options))  # noqa: B023 - called at once
    sent["request_cancel_lineage"] = count(lambda: store.request_cancel_lineage("l3", now()))
    return sent


def _expect(outcome: Any, kind: type) -> Any:
    assert type(outcome) is kind, outcome
    return outcome


EXPECTED = {
    "create": 1,
    "claim_and_own": 0,
    "heartbeat": 0,
    "checkpoint": 0,
    "reads": 0,
    "suspend": 1,
    "request_cancel": 1,
    "request_cancel again": 0,
    "claim": 0,
    "abandon_claim": 1,
    "recover_claim": 1,
    "request_cancel_lineage": 1,
}


@pytest.mark.parametrize("fast_path", [True, False], ids=["one-round-trip", "general-path"])
def test_each_write_that_may_wake_a_worker_sends_one_notification(
    url: str, clock: ManualClock, observer: Observer, fast_path: bool
) -> None:
    with _open(url, clock, fast_path=fast_path) as store:
        assert store.fast_path is fast_path
        assert wakes_by_operation(store, clock, observer) == EXPECTED
        # Sent on the store's own connection, after the write.
        pid = store._connection.info.backend_pid
        assert [n.pid for n in observer.sent_by(lambda: store.create("r9", "{}"))] == [pid]
        assert [n.payload for n in observer.sent_by(lambda: store.create("r10", "{}"))] == [""]


class NoWakeOnCreate(postgres.PostgresRunStore):
    """Planted: a create that does not notify."""

    create = SqlRunStore.create


def test_a_create_that_does_not_notify_is_caught(
    url: str, clock: ManualClock, observer: Observer
) -> None:
    with _open(url, clock) as store:
        store.__class__ = NoWakeOnCreate
        sent = wakes_by_operation(store, clock, observer)
    assert sent != EXPECTED
    assert sent["create"] == 0


def test_a_write_nested_in_another_notifies_once_the_outer_commits(
    url: str, clock: ManualClock, observer: Observer
) -> None:
    """A create inside another write (a savepoint) leaves its notification to
    the outer write, sent once that commits; one for both creates."""
    with _open(url, clock) as store:
        tm = store._tm

        def two_creates(tx: Any) -> None:
            store.create("n1", "{}")
            store.create("n2", "{}")
            assert tm._wake_pending

        assert observer.count(lambda: tm.write("nested", two_creates)) == 1
        assert not tm._wake_pending


def test_notifications_are_spaced_and_one_covers_the_writes_held_back(
    url: str, clock: ManualClock, observer: Observer
) -> None:
    """A notification due sooner than the spacing after the last is held back;
    the next write sends it once due (a heartbeat too), or the sender thread
    does, or the store's close: one for all the writes held back."""
    with _open(url, clock, spaced=True) as store:
        tm = store._tm
        assert tm.notify_spacing_s == NOTIFY_SPACING_MS / 1000
        tm.notify_spacing_s = 3600.0
        assert observer.count(lambda: store.create("s1", "{}")) == 1
        assert observer.count(lambda: store.create("s2", "{}")) == 0  # held back
        assert observer.count(lambda: store.create("s3", "{}")) == 0
        store.claim_and_own("s1", PENDING, OWNER, clock.now_ms())
        assert tm._wake_pending
        tm.notify_spacing_s = 0.0
        # The next write, a heartbeat, sends the held-back one: one for both.
        assert observer.count(lambda: store.heartbeat("s1", OWNER, clock.now_ms())) == 1
        assert not tm._wake_pending
        assert observer.count(lambda: store.heartbeat("s1", OWNER, clock.now_ms())) == 0
        # With no write after it, the sender thread sends it when due.
        tm.notify_spacing_s = 3600.0
        assert observer.count(lambda: store.create("s4", "{}")) == 0
        assert tm._sender is not None
        assert tm._sender.is_alive()
        tm.notify_spacing_s = 0.0
        tm._sender_due.set()  # the spacing changed: look again
        _until(lambda: not tm._wake_pending, "the sender never sent it")
        assert observer.count(lambda: None) == 1
        # Held back when the store closes: sent then.
        tm.notify_spacing_s = 3600.0
        store.create("s5", "{}")
        assert tm._wake_pending
    assert observer.count(lambda: None) == 1
    assert tm._sender is not None
    tm._sender.join(PATIENCE_S)
    assert not tm._sender.is_alive()


def test_notify_false_sends_nothing_and_a_read_only_store_never_notifies(
    url: str, clock: ManualClock, observer: Observer
) -> None:
    with _open(url, clock, notify=False) as quiet:
        assert not quiet.notifies
        assert observer.count(lambda: quiet.create("q1", "{}")) == 0
        quiet.claim_and_own("q1", PENDING, OWNER, clock.now_ms())
        assert observer.count(lambda: quiet.transition_owned("q1", OWNER, "suspended")) == 0
        assert observer.count(lambda: quiet.request_cancel("q1", clock.now_ms())) == 0
        # A quiet store still listens: others notify.
        with quiet.open_listener() as listener, _open(url, clock) as loud:
            loud.create("q2", "{}")
            assert listener.wait(PATIENCE_S)
    with _open(url, clock, read_only=True) as reader:
        assert not reader.notifies
        with reader.open_listener() as listener:
            assert not listener.wait(0)
    with pytest.raises(InvalidRunError):
        postgres.open(url, clock=clock, notify=1)


def test_two_schemas_do_not_wake_each_other(url: str, clock: ManualClock) -> None:
    with (
        _open(url, clock, schema="alpha") as alpha,
        _open(url, clock, schema="beta") as beta,
    ):
        assert alpha.notify_channel == "runstore:alpha"
        assert beta.notify_channel == "runstore:beta"
        watch_alpha = Observer(url, alpha.notify_channel)
        watch_beta = Observer(url, beta.notify_channel)

        def sent(step: Callable[[], Any]) -> tuple[int, int]:
            step()
            return len(watch_alpha.collect()), len(watch_beta.collect())

        try:
            assert sent(lambda: beta.create("b1", "{}")) == (0, 1)
            assert sent(lambda: alpha.create("a1", "{}")) == (1, 0)
            assert sent(lambda: beta.request_cancel("b1", clock.now_ms())) == (0, 1)
        finally:
            watch_alpha.close()
            watch_beta.close()


def test_a_long_schema_name_gets_a_digest_channel() -> None:
    short = "s" * 54
    assert channel_for(short) == "runstore:" + short
    long_a, long_b = "s" * 55, "s" * 54 + "t"
    assert channel_for(long_a).startswith("runstore#")
    assert len(channel_for(long_a).encode()) == 63
    assert channel_for(long_a) != channel_for(long_b)
    wide = "é" * 27  # 54 bytes
    assert channel_for(wide) == "runstore:" + wide
    assert channel_for(wide + "é").startswith("runstore#")


# -- the notification is not inside the write's transaction ---------------------------


class NotifiesInsideTheTransaction(postgres.PostgresRunStore):
    """Planted: the create's NOTIFY is sent inside its write transaction."""

    def create(self, run_id: str, state_json: str, **options: Any) -> None:
        channel = self.notify_channel

        def body(tx: Any) -> None:
            SqlRunStore.create(self, run_id, state_json, **options)  # a savepoint
            tx.connection.execute("SELECT pg_catalog.pg_notify($1, '')", (channel,))

        self._tm.write("create", body)


@pytest.fixture(scope="module")
def ghost_standby() -> Iterator[Node]:
    """A cluster whose commits (``synchronous_commit=on``) wait for a synchronous
    standby that does not exist; a session that commits ``local`` waits for none."""
    need_binaries()
    node = Node(settings={"synchronous_standby_names": "ghost", "max_connections": "20"})
    try:
        local = node.url(options="-c synchronous_commit=local")
        with psycopg.connect(local, autocommit=True) as admin:
            admin.execute("CREATE DATABASE runs")
        with psycopg.connect(node.url("runs", options="-c synchronous_commit=local")) as setup:
            setup.execute("CREATE TABLE blocker (x int)")
        yield node
    finally:
        node.destroy()


def commits_while_the_notify_lock_is_held(node: Node, planted: bool) -> str | None:
    """None when a store's create commits while another session holds the
    database's notify lock (waiting at its commit, which notified, for the
    ghost standby); else what happened instead."""
    local = node.url("runs", options="-c synchronous_commit=local")
    admin = psycopg.connect(local, autocommit=True)
    blocker = psycopg.connect(node.url("runs"), autocommit=True)  # commits wait for "ghost"
    blocker_pid = blocker.info.backend_pid
    holder = threading.Thread(target=_notify_and_wait, args=(blocker,), daemon=True)
    store = postgres.open(local, clock=ManualClock(1_000), schema=f"s{int(planted)}")
    if planted:
        store.__class__ = NotifiesInsideTheTransaction
    run_id = f"run-{time.monotonic_ns()}"
    answer: list[Any] = []
    writer = threading.Thread(target=_create, args=(store, run_id, answer), daemon=True)
    try:
        holder.start()
        _until(lambda: _wait_event(admin, blocker_pid) == "SyncRep", "the blocker never waited")
        store_pid = store._connection.info.backend_pid
        writer.start()
        verdict = None
        while verdict is None:
            if _visible(admin, store.schema, run_id):
                verdict = "committed"
            elif _waits_for_a_lock(admin, store_pid) and not _visible(admin, store.schema, run_id):
                verdict = "the create's commit waits for the notify lock"
            elif not writer.is_alive() and not _visible(admin, store.schema, run_id):
                verdict = f"the create ended without committing: {answer}"
            else:
                time.sleep(0.005)
        if verdict != "committed":
            return verdict
        writer.join(PATIENCE_S)
        if writer.is_alive():
            return "the create never returned"
        if answer != [None]:
            return f"the create answered {answer}"
        # Its notification gave up on the lock; the write stands.
        if store._tm.notifications_failed != 1:
            return f"{store._tm.notifications_failed} notifications failed, not 1"
        return None
    finally:
        admin.execute("SELECT pg_cancel_backend(%s)", (blocker_pid,))  # ends the wait
        for thread in (holder, writer):
            if thread.ident is not None:
                thread.join(PATIENCE_S)
        store.close()
        blocker.close()
        admin.close()


def _notify_and_wait(blocker: Any) -> None:
    # A transaction that wrote and notified: at commit it takes the notify
    # lock, then waits for the ghost standby (a notification alone writes no
    # WAL, and waits for nothing). Cancelled at the end: PostgreSQL then
    # answers the commit with a warning.
    blocker.execute("BEGIN")
    blocker.execute("INSERT INTO blocker VALUES (1)")
    blocker.execute("NOTIFY somebody_else")
    blocker.execute("COMMIT")


def _create(store: Any, run_id: str, answer: list[Any]) -> None:
    try:
        answer.append(store.create(run_id, "{}"))
    except PersistenceFailedError as error:
        answer.append(error.cause.get("reason"))


def _until(condition: Callable[[], bool], failure: str) -> None:
    deadline = time.monotonic() + PATIENCE_S
    while not condition():
        assert time.monotonic() < deadline, failure
        time.sleep(0.01)


def _wait_event(admin: Any, pid: int) -> str | None:
    row = admin.execute("SELECT wait_event FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()
    return None if row is None else row[0]


def _waits_for_a_lock(admin: Any, pid: int) -> bool:
    rows = admin.execute(
        "SELECT 1 FROM pg_locks WHERE pid = %s AND NOT granted AND locktype = 'object'", (pid,)
    ).fetchall()
    return bool(rows)


def _visible(admin: Any, schema: str, run_id: str) -> bool:
    statement = sql.SQL("SELECT 1 FROM {}.flows_runs WHERE run_id = %s").format(
        sql.Identifier(schema)
    )
    return admin.execute(statement, (run_id,)).fetchone() is not None


def test_the_notification_is_sent_after_the_commit_not_inside_it(ghost_standby: Node) -> None:
    assert NOTIFY_LOCK_TIMEOUT_MS <= 1_000  # the create below waits that long once
    assert commits_while_the_notify_lock_is_held(ghost_standby, planted=False) is None


def test_a_notification_inside_the_write_transaction_is_caught(ghost_standby: Node) -> None:
    verdict = commits_while_the_notify_lock_is_held(ghost_standby, planted=True)
    assert verdict == "the create's commit waits for the notify lock"


# -- the listener ---------------------------------------------------------------------


def test_a_listener_wakes_on_create_release_and_cancel_request(
    url: str, clock: ManualClock
) -> None:
    with _open(url, clock) as store, store.open_listener() as listener:
        assert isinstance(listener, Wakeup)  # what a Worker waits on
        assert listener.channel == store.notify_channel
        assert not listener.wait(0)
        store.create("w1", "{}")
        assert listener.wait(PATIENCE_S)
        assert not listener.wait(0)  # drained
        store.claim_and_own("w1", PENDING, OWNER, clock.now_ms())
        store.heartbeat("w1", OWNER, clock.now_ms())
        store.get("w1")
        store.transition_owned("w1", OWNER, "suspended")
        assert listener.wait(PATIENCE_S)
        store.request_cancel("w1", clock.now_ms())
        assert listener.wait(PATIENCE_S)
        for index in range(5):  # many writes, one answer
            store.create(f"many-{index}", "{}")
        with psycopg.connect(url, autocommit=True) as other:
            other.execute(sql.SQL("NOTIFY {}").format(sql.Identifier(store.notify_channel)))
        assert listener.wait(PATIENCE_S)
        assert not listener.wait(0)


def test_a_listener_whose_connection_is_killed_reconnects(url: str, clock: ManualClock) -> None:
    server = _postgres.require_server()
    database = psycopg.conninfo.conninfo_to_dict(url)["dbname"]
    with _open(url, clock) as store, store.open_listener() as listener:

        def kill() -> None:
            pid = listener._connection.info.backend_pid
            server.admin("SELECT pg_terminate_backend(%s)", (pid,))

        kill()
        assert listener.wait(PATIENCE_S)  # replaced: work may have been missed
        assert not listener.wait(0)
        store.create("k1", "{}")
        assert listener.wait(PATIENCE_S)  # listening again
        # While the database refuses connections, wait sleeps out its timeout.
        server.admin(f'ALTER DATABASE "{database}" WITH ALLOW_CONNECTIONS false')
        try:
            server.admin(
                "SELECT pg_terminate_backend(%s)", (listener._connection.info.backend_pid,)
            )
            assert not listener.wait(0.05)
            assert not listener.wait(0.05)
        finally:
            server.admin(f'ALTER DATABASE "{database}" WITH ALLOW_CONNECTIONS true')
        assert listener.wait(PATIENCE_S)
        store.create("k2", "{}")
        assert listener.wait(PATIENCE_S)


def test_close_wakes_a_waiting_listener_and_later_waits_answer_false(
    url: str, clock: ManualClock
) -> None:
    with _open(url, clock) as store:
        listener = store.open_listener()
        answers: list[bool] = []
        waiter = threading.Thread(target=lambda: answers.append(listener.wait(PATIENCE_S * 10)))
        waiter.start()
        listener.close()
        waiter.join(PATIENCE_S)
        assert not waiter.is_alive()
        assert answers == [False]
        assert listener.closed
        assert not listener.wait(1)
        listener.close()  # twice: nothing
        store.close()
        with pytest.raises(PersistenceFailedError) as closed:
            store.open_listener()
        assert closed.value.cause["stage"] == "closed"


def test_a_sqlite_store_has_no_listener(tmp_path: Path) -> None:
    """On SQLite the worker polls: the store offers nothing to listen to."""
    with runstore.open(tmp_path / "runs.db") as store:
        assert not hasattr(store, "open_listener")


@pytest.mark.parametrize("timeout", [-1, float("nan"), float("inf"), "1", True, None])
def test_wait_refuses_a_timeout_that_is_not_a_finite_number(
    url: str, clock: ManualClock, timeout: Any
) -> None:
    with _open(url, clock) as store, store.open_listener() as listener:
        with pytest.raises(InvalidRunError) as refused:
            listener.wait(timeout)
        assert refused.value.cause["field"] == "timeout_s"


def test_a_listener_never_shows_the_password(url: str, clock: ManualClock) -> None:
    secret = "hunter2-very-secret"
    if os.environ.get(URL_VARIABLE):
        pytest.skip("the throwaway cluster trusts any password; another server may not")
    with_password = url.replace("postgresql://runstore@", f"postgresql://runstore:{secret}@")
    assert secret in with_password
    with _open(with_password, clock) as store, store.open_listener() as listener:
        assert secret not in repr(listener)
        assert secret not in repr(store)
