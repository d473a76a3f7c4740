"""A new lineage round against a concurrent purge of its root, on PostgreSQL.

``lineage_id`` has no foreign key, so a round being created used to lock
nothing on its root: a purge that had judged the root (no live round) and
locked it could delete it after the round committed, leaving a lineage with
a live round and no root (found by the torture's lineage workload). Now a
round takes a key-share lock on its root, as a child's foreign key does on
its parent, on both paths (the one-round-trip statement and the general
one). Two interleavings, each checked with real sessions:

- a purge holds the root: the round's create waits for it and lands after
  it (the root gone, the round created: legal, since the purge came first);
- a round's create holds the root: the purge waits for it, and keeps the
  root when the round commits.

A purge also waits for any other write holding a settled run (a
``heartbeat_many``'s row lock) and then deletes it, as the model's purge
deletes every eligible run.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from runstore import ManualClock, OwnerId, RunSnapshot

from .. import _postgres

postgres = pytest.importorskip("runstore.postgres")
psycopg = pytest.importorskip("psycopg")

from runstore.postgres import _fused, _queries  # noqa: E402

OWNER = OwnerId("host-purge", 1, "purge")
PENDING = RunSnapshot("pending", None, None)


@pytest.fixture(params=[True, False], ids=["one-round-trip", "general"])
def setup(request: pytest.FixtureRequest) -> Iterator[tuple[Any, str, ManualClock]]:
    url = _postgres.database_url()
    clock = ManualClock(1_000_000)
    store = postgres.open(url, clock=clock, fast_path=request.param)
    assert (store._fused is not None) is request.param  # the path under test
    yield store, url, clock
    store.close()


def _settled_root(store: Any, clock: ManualClock, run_id: str) -> int:
    """A completed run; the purge cutoff that makes it purgeable."""
    store.create(run_id, "{}")
    store.claim_and_own(run_id, PENDING, OWNER, clock.now_ms())
    store.transition_owned(run_id, OWNER, "completed")
    clock.advance(100_000)
    return clock.now_ms()


def _waiting_on_lock(url: str, pid: int) -> bool:
    with psycopg.connect(url, autocommit=True) as look:
        row = look.execute(
            "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,)
        ).fetchone()
    return row is not None and row[0] == "Lock"


def test_a_round_waits_for_a_purge_holding_its_root(
    setup: tuple[Any, str, ManualClock],
) -> None:
    store, url, clock = setup
    cutoff = _settled_root(store, clock, "root")
    purge = psycopg.connect(url, autocommit=False)
    try:
        chosen = purge.execute(
            _queries.PURGE_CANDIDATES.replace("$1::bigint", "%s").replace("$2::bigint", "%s"),
            (cutoff, 100),
        ).fetchall()
        assert [row[0] for row in chosen] == ["root"]
        done: list[BaseException | None] = []

        def create_round() -> None:
            try:
                store.create("round-1", "{}", lineage_id="root", round_ordinal=1)
                done.append(None)
            except BaseException as error:  # reported below
                done.append(error)

        store_pid = _store_backend_pid(store)
        creator = threading.Thread(target=create_round)
        creator.start()
        # The store's session must come to wait for the root's lock (a
        # condition polled, not a lease timing): without the lock the round
        # is created at once.
        deadline = time.monotonic() + 30
        while not _waiting_on_lock(url, store_pid):
            assert not done, f"the round was created while a purge held its root: {done}"
            assert time.monotonic() < deadline, "the create neither waited nor finished"
            time.sleep(0.01)
        for statement in (_queries.PURGE_STATE, _queries.PURGE_RUNS):
            purge.execute(statement.replace("$1::text[]", "%s"), (["root"],))
        purge.commit()
        creator.join(30)
        assert done == [None]
    finally:
        purge.close()
    # The purge came first; the round landed after it, of a root now gone.
    assert {row.run_id for row in store.state().rows} == {"round-1"}
    store.check_invariants()


@pytest.mark.parametrize("ending", ["commit", "rollback"])
def test_a_purge_waits_for_a_round_being_created_under_its_root(
    setup: tuple[Any, str, ManualClock], ending: str
) -> None:
    """The purge waits for the create; a committed round keeps the root (the
    purge's recheck sees it), a rolled-back one leaves it purgeable."""
    store, url, clock = setup
    cutoff = _settled_root(store, clock, "root")
    statement = _fused.CREATE if store._fused is not None else _queries.CREATE_RUN
    values: tuple[Any, ...] = ("round-1", clock.now_ms(), None, "root", 1)
    if store._fused is not None:
        values = (*values, "{}")
    params = {f"p{n}": value for n, value in enumerate(values, start=1)}
    creating = psycopg.connect(url, autocommit=False)
    try:
        creating.execute(_named(statement, len(values)), params)
        if store._fused is None:  # the general path's second statement
            creating.execute(_named(_queries.CREATE_STATE, 2), {"p1": "round-1", "p2": "{}"})
        purged = _purge_in_thread(store, url, cutoff + 1)
        getattr(creating, ending)()
    finally:
        creating.close()
    assert purged() == (0 if ending == "commit" else 1)
    store.check_invariants()


def test_a_purge_waits_for_a_write_holding_a_settled_run_then_deletes_it(
    setup: tuple[Any, str, ManualClock],
) -> None:
    """A write holding a settled run's row (as heartbeat_many's lock does)
    makes the purge wait, not pass over it: the run is deleted once the write
    ends, as the model's purge deletes every eligible run. (A purge that
    skipped held runs was flagged by the torture: a heartbeat_many on settled
    runs overlapped it and the runs stayed.)"""
    store, url, clock = setup
    cutoff = _settled_root(store, clock, "done")
    holding = psycopg.connect(url, autocommit=False)
    try:
        holding.execute(_queries.LOCK_RUNS.replace("$1::text[]", "%s"), (["done"],))
        purged = _purge_in_thread(store, url, cutoff + 1)
        holding.commit()
    finally:
        holding.close()
    assert purged() == 1
    assert store.state().rows == ()


def _purge_in_thread(store: Any, url: str, before_ms: int) -> Any:
    """Start ``purge_settled`` on a thread and return once its session waits
    for a lock (a condition polled, not a lease timing); call the result for
    the purge's answer."""
    pid = _store_backend_pid(store)
    answers: list[Any] = []

    def purge() -> None:
        try:
            answers.append(store.purge_settled(before_ms))
        except BaseException as error:  # reported by the caller
            answers.append(error)

    worker = threading.Thread(target=purge)
    worker.start()
    deadline = time.monotonic() + 30
    while not _waiting_on_lock(url, pid):
        assert not answers, f"the purge did not wait for the held row: {answers}"
        assert time.monotonic() < deadline, "the purge neither waited nor finished"
        time.sleep(0.01)

    def answer() -> Any:
        worker.join(30)
        assert len(answers) == 1
        return answers[0]

    return answer


def _named(statement: str, count: int) -> str:
    """A statement's ``$n::type`` placeholders as psycopg's ``%(pn)s::type``."""
    for n in range(count, 0, -1):
        statement = statement.replace(f"${n}::", f"%(p{n})s::")
    return statement


def _store_backend_pid(store: Any) -> int:
    """The server process of the store's session (its one connection), read
    from the connection as it is: never ``live()``, whose probe reads the
    socket and, called from this thread while the store's own thread waits
    for an answer between two statements of its operation, could take that
    answer away (the operation then failed with DuplicatePreparedStatement,
    a test race, 4 runs in 12)."""
    return int(store._tm.connection.info.backend_pid)
