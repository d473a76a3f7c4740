"""A write whose commit waits for a synchronous standby: bounded, and never
reported as done when its wait was cut short.

One primary and one streaming standby made with ``pg_basebackup`` for the
whole module, both throwaway clusters on loopback; the primary names the
standby in ``synchronous_standby_names`` (``synchronous_commit=on``), and the
standby replicates through a TCP proxy the tests pause, so that the standby
stops confirming while it stays up and readable (hot standby). A commit on
the primary then waits for the standby (``pg_stat_activity.wait_event`` is
``SyncRep``), and PostgreSQL does not apply ``statement_timeout`` to that
wait.

- ``store.interrupt()`` during the wait: PostgreSQL ends the wait and
  answers the commit as done (with a WARNING), though only the primary has
  it. The store answers ``persistence_failed`` with ``outcome_unknown``
  (reason ``interrupted``), not the operation's outcome: re-reading the
  primary shows the write, the standby does not have it.
- ``statement_timeout`` set: the store cancels a commit that went unanswered
  for twice the timeout (at least a second), and answers outcome-unknown
  (reason ``statement-timeout``): the call returns, instead of waiting as
  long as the standby is away.

Both on the one-round-trip path and on the general path (``COMMIT`` sent by
itself). Once the proxy resumes, the standby confirms, and the write is on
it: that, not the primary, settles it.
"""

from __future__ import annotations

import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from runstore import (
    Activated,
    ManualClock,
    OwnerId,
    PersistenceFailedError,
    RunSnapshot,
    Transitioned,
    Updated,
)

from ._pg_faults import Node, Proxy, need_binaries

# One worker runs the whole module: its primary and standby are built once.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(120), pytest.mark.xdist_group("sync-standby")]

postgres = pytest.importorskip("runstore.postgres")

PENDING = RunSnapshot("pending", None, None)
OWNER = OwnerId("host-a", 1, "a")


class Pair:
    """The primary, its synchronous standby, and the proxy between them."""

    def __init__(self, primary: Node, standby: Node, link: Proxy) -> None:
        self.primary = primary
        self.standby = standby
        self.link = link
        self.url = primary.url("runs")

    def stall(self) -> None:
        """The standby stops confirming (it stays up and readable)."""
        self.link.pause()

    def heal(self) -> None:
        """The standby confirms again and catches up with the primary."""
        self.link.resume()
        lsn = self.primary.sql("SELECT pg_current_wal_lsn()")[0][0]
        deadline = time.monotonic() + 60
        while not self.standby.sql(f"SELECT pg_last_wal_replay_lsn() >= '{lsn}'::pg_lsn")[0][0]:
            assert time.monotonic() < deadline, "the standby never caught up"
            time.sleep(0.02)

    def waiting_for_the_standby(self) -> int:
        rows = self.primary.sql(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'", "runs"
        )
        return int(rows[0][0])

    def status_on(self, node: Node, run_id: str) -> Any:
        rows = node.sql(f"SELECT status FROM flows_runs WHERE run_id = '{run_id}'", "runs")
        return rows[0][0] if rows else None

    def heartbeat_on(self, node: Node, run_id: str) -> Any:
        rows = node.sql(f"SELECT heartbeat_at_ms FROM flows_runs WHERE run_id = '{run_id}'", "runs")
        return rows[0][0] if rows else None


@pytest.fixture(scope="module")
def pair() -> Iterator[Pair]:
    need_binaries()
    primary = Node()
    link = Proxy(primary.port)
    standby = None
    try:
        primary.sql("CREATE DATABASE runs")
        postgres.open(primary.url("runs"), clock=ManualClock(0)).close()  # migrated
        standby = Node(standby_of=primary, via=link.port)
        primary.sql("ALTER SYSTEM SET synchronous_standby_names = '*'")
        primary.sql("SELECT pg_reload_conf()")
        deadline = time.monotonic() + 60
        while primary.sql("SELECT sync_state FROM pg_stat_replication") != [("sync",)]:
            assert time.monotonic() < deadline, "the standby never became synchronous"
            time.sleep(0.05)
        yield Pair(primary, standby, link)
    finally:
        link.close()
        if standby is not None:
            standby.destroy()
        primary.destroy()


def _owned(store: Any, run_id: str) -> None:
    store.create(run_id, "{}")
    assert store.claim_and_own(run_id, PENDING, OWNER, 0) == Activated()


def _in_thread(call: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    answers: list[Any] = []

    def run() -> None:
        try:
            answers.append(call())
        except BaseException as error:
            answers.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, answers


def _until_waiting(pair: Pair, thread: threading.Thread) -> None:
    deadline = time.monotonic() + 20
    while pair.waiting_for_the_standby() == 0:
        assert thread.is_alive(), "the write returned before it waited for the standby"
        assert time.monotonic() < deadline, "the commit never waited for the standby"
        time.sleep(0.01)


def _with_statement_timeout(url: str, ms: int) -> str:
    parts = urllib.parse.urlsplit(url)
    options = urllib.parse.quote(f"-c statement_timeout={ms}", safe="")
    query = f"{parts.query}&options={options}" if parts.query else f"options={options}"
    return urllib.parse.urlunsplit(parts._replace(query=query))


@pytest.mark.parametrize("fast_path", [True, False], ids=["one-round-trip", "general"])
def test_an_interrupted_wait_for_the_standby_is_outcome_unknown(
    pair: Pair, fast_path: bool
) -> None:
    run_id = f"interrupted-{fast_path}"
    with postgres.open(pair.url, clock=ManualClock(0), fast_path=fast_path) as store:
        assert store.fast_path is fast_path
        _owned(store, run_id)
        pair.stall()
        try:
            thread, answers = _in_thread(
                lambda: store.transition_owned(run_id, OWNER, "completed", '{"done": true}')
            )
            _until_waiting(pair, thread)
            store.interrupt()  # what the supervisor does to a stuck write
            thread.join(20)
            assert not thread.is_alive()
            (error,) = answers
            assert isinstance(error, PersistenceFailedError), error
            assert error.outcome_unknown
            assert error.cause["reason"] == "interrupted"
            assert error.cause["outcome"] == "unknown"
            assert "outcome is unknown" in error.message
            assert error.__cause__ is None
            assert error.__context__ is None
            # Re-reading the primary cannot settle it: it has the write...
            assert store.get(run_id).status == "completed"
            # ... the standby, which a failover would promote, does not.
            assert pair.status_on(pair.standby, run_id) == "running"
        finally:
            pair.heal()
        # Once the standby has confirmed (it caught up), the write is settled.
        assert pair.status_on(pair.standby, run_id) == "completed"


@pytest.mark.parametrize("fast_path", [True, False], ids=["one-round-trip", "general"])
def test_statement_timeout_bounds_a_wait_for_the_standby(pair: Pair, fast_path: bool) -> None:
    run_id = f"bounded-{fast_path}"
    url = _with_statement_timeout(pair.url, 300)
    with postgres.open(url, clock=ManualClock(0), fast_path=fast_path) as store:
        _owned(store, run_id)
        pair.stall()
        try:
            started = time.monotonic()
            thread, answers = _in_thread(lambda: store.heartbeat(run_id, OWNER, 7))
            thread.join(15)
            blocked = thread.is_alive()
            if blocked:
                store.interrupt()  # without the bound: end the wait, then fail
                thread.join(20)
            assert not blocked, "the heartbeat still waited for the standby after 15 s"
            elapsed = time.monotonic() - started
            (error,) = answers
            assert isinstance(error, PersistenceFailedError), error
            assert error.outcome_unknown
            assert error.cause["reason"] == "statement-timeout"
            assert "statement_timeout" in error.message
            # The bound is twice the timeout, at least a second, from the commit's send.
            assert elapsed >= 1.0
            assert store.get(run_id).heartbeat_at_ms == 7  # the primary has it
            assert pair.heartbeat_on(pair.standby, run_id) == 0  # the standby does not
        finally:
            pair.heal()
        assert pair.heartbeat_on(pair.standby, run_id) == 7
        # A healthy standby: the same store's writes are done, not unknown.
        assert store.heartbeat(run_id, OWNER, 8) == Updated()
        assert store.transition_owned(run_id, OWNER, "completed", "{}") == Transitioned()
