"""The asyncio store (``runstore.aopen``): the same operations as the
synchronous store, never a blocking call on the loop's thread, and asyncio's
cancellation at every await point of a write.

Each test runs its own event loop (``asyncio.run``) on a real SQLite file or
a real PostgreSQL database; a write is held in flight by a real lock (another
connection's write lock, a row lock) or by a strategy that waits on an event,
never by sleeping.
"""

from __future__ import annotations

import asyncio
import inspect
import sqlite3
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

import runstore
from runstore import (
    AsyncAttemptStore,
    AsyncRunStore,
    ManualClock,
    OwnerId,
    PersistenceFailedError,
    RunStore,
    Updated,
)
from runstore.aio import WRITES
from runstore.attempts import AttemptStore, AttemptStoreError
from runstore.consensus import SqlConsensus

from .. import _postgres

OWNER = OwnerId("host-a", 1, "n1")


def _run(coro: Awaitable[Any]) -> Any:
    async def main() -> Any:
        return await coro

    return asyncio.run(main())


# -- one decision logic: the same operations ----------------------------------------------


def _operations(cls: type) -> set[str]:
    return {
        name
        for name, member in inspect.getmembers(cls)
        if not name.startswith("_") and inspect.isfunction(member)
    }


def test_every_run_store_operation_is_a_coroutine_with_the_same_parameters() -> None:
    sync = _operations(RunStore) - {"close"}
    ours = _operations(AsyncRunStore) - {"close"}
    assert ours == sync, (sorted(ours - sync), sorted(sync - ours))
    for name in sorted(sync):
        assert inspect.iscoroutinefunction(getattr(AsyncRunStore, name)), name
        want = inspect.signature(getattr(RunStore, name)).parameters
        got = inspect.signature(getattr(AsyncRunStore, name)).parameters
        assert [(p.name, p.kind, p.default) for p in got.values()] == [
            (p.name, p.kind, p.default) for p in want.values()
        ], name
    assert inspect.iscoroutinefunction(AsyncRunStore.close)


def test_every_attempt_operation_is_a_coroutine_with_the_same_parameters() -> None:
    sync = _operations(AttemptStore)
    ours = _operations(AsyncAttemptStore)
    assert ours == sync, (sorted(ours - sync), sorted(sync - ours))
    for name in sorted(sync - {"check_invariants"}):
        assert inspect.iscoroutinefunction(getattr(AsyncAttemptStore, name)), name
        want = inspect.signature(getattr(AttemptStore, name)).parameters
        got = inspect.signature(getattr(AsyncAttemptStore, name)).parameters
        assert [(p.name, p.kind, p.default) for p in got.values()] == [
            (p.name, p.kind, p.default) for p in want.values()
        ], name


def _admissible_calls(run: runstore.RunRow) -> dict[str, Callable[[Any], Awaitable[Any]]]:
    """One admissible call of every operation (their answers do not matter)."""
    evidence = runstore.LivenessEvidence(
        kind="same-host-pid-dead", expected_owner=OWNER, checked_at_ms=1
    )
    return {
        "create": lambda s: s.create("new", "{}"),
        "get": lambda s: s.get(run.run_id),
        "lineage": lambda s: s.lineage(run.run_id),
        "latest_round": lambda s: s.latest_round(run.run_id),
        "request_cancel": lambda s: s.request_cancel(run.run_id, 1),
        "request_cancel_lineage": lambda s: s.request_cancel_lineage(run.run_id, 1),
        "acknowledge_cancel": lambda s: s.acknowledge_cancel(run.run_id, OWNER, 1),
        "claim": lambda s: s.claim(run.run_id, run, OWNER, 1),
        "claim_and_own": lambda s: s.claim_and_own(run.run_id, run, OWNER, 1),
        "activate": lambda s: s.activate(run.run_id, OWNER, 1, run),
        "abandon_claim": lambda s: s.abandon_claim(run.run_id, OWNER, 1),
        "recover_claim": lambda s: s.recover_claim(
            run.run_id, OWNER, 1, OwnerId("host-a", 2, "n2"), 1, evidence
        ),
        "heartbeat": lambda s: s.heartbeat(run.run_id, OWNER, 1),
        "reconfirm": lambda s: s.reconfirm(run.run_id, OWNER, 1),
        "transition_owned": lambda s: s.transition_owned(run.run_id, OWNER, "completed", "{}"),
        "steal": lambda s: s.steal(run.run_id, run, OWNER, 1, evidence),
        "list_runs": lambda s: s.list_runs(),
        "claim_next": lambda s: s.claim_next(OWNER, 1),
        "claim_next_many": lambda s: s.claim_next_many(OWNER, 1, 2),
        "heartbeat_many": lambda s: s.heartbeat_many(OWNER, [run.run_id], 1),
        "purge_settled": lambda s: s.purge_settled(1),
        "compact_changes": lambda s: s.compact_changes(0),
        "ownership_facts": lambda s: s.ownership_facts(run.run_id),
        "revision": lambda s: s.revision(),
        "changes": lambda s: s.changes(0),
        "state": lambda s: s.state(),
        "check_invariants": lambda s: s.check_invariants(),
    }


def test_the_operations_marked_as_writes_are_exactly_those_a_read_only_store_refuses(
    tmp_path: Path,
) -> None:
    """``WRITES`` decides which cancelled calls wait for their answer: a write
    marked as a read would be abandoned mid-flight. A read-only store refuses
    exactly the writes, so it tells them apart for real."""
    path = tmp_path / "runs.db"
    clock = ManualClock(0)
    with runstore.open(path, clock=clock) as sync:
        sync.create("run", "{}")

    stages: dict[str, object] = {}

    async def main() -> set[str]:
        refused: set[str] = set()
        async with runstore.aopen(path, clock=clock, read_only=True) as store:
            run = await store.get("run")
            calls = _admissible_calls(run)
            assert set(calls) == _operations(RunStore) - {"close"}
            for name, call in calls.items():
                try:
                    await call(store)
                except PersistenceFailedError as error:
                    stages[name] = error.cause.get("stage")
                    refused.add(name)
        return refused

    assert _run(main()) == set(WRITES)
    assert set(stages.values()) == {"read-only"}


# -- opening -----------------------------------------------------------------------------


def test_both_ways_of_opening_work_and_closing_twice_does_nothing(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"

    async def main() -> None:
        async with runstore.aopen(path, clock=ManualClock(5)) as first:
            assert isinstance(first, AsyncRunStore)
            assert (first.dialect, first.pool_size, first.read_only) == ("sqlite", 1, False)
            await first.create("r", "{}")
        second = await runstore.aopen(path, clock=ManualClock(5))
        try:
            assert (await second.get("r")).created_at_ms == 5
        finally:
            await second.close()
            await second.close()
        with pytest.raises(PersistenceFailedError) as closed:
            await second.get("r")
        assert closed.value.cause["stage"] == "closed"

    _run(main())
    assert (path.stat().st_mode & 0o777) == 0o600


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"pool_size": 2}, "pool_size"),
        ({"pool_size": 0}, "pool_size"),
        ({"pool_size": True}, "pool_size"),
        ({"cancel_grace_s": -1}, "cancel_grace_s"),
        ({"cancel_grace_s": float("nan")}, "cancel_grace_s"),
        ({"cancel_grace_s": "5"}, "cancel_grace_s"),
    ],
)
def test_inadmissible_options_are_refused_before_anything_opens(
    tmp_path: Path, options: dict[str, Any], field: str
) -> None:
    path = tmp_path / "runs.db"
    with pytest.raises(runstore.InvalidRunError) as refused:
        runstore.aopen(path, **options)
    assert refused.value.cause["field"] == field
    assert not path.exists()


def test_an_error_opening_is_raised_by_the_await(tmp_path: Path) -> None:
    async def main() -> None:
        with pytest.raises(PersistenceFailedError) as refused:
            await runstore.aopen(tmp_path / "missing.db", migrate=False)
        assert refused.value.method == "open"

    _run(main())


# -- the event loop never waits on the database ------------------------------------------


async def _workout(store: AsyncRunStore, clock: ManualClock) -> None:
    """Every operation through the async API, the attempt store included."""
    await store.create("w", "{}")
    run = await store.get("w")
    for call in _admissible_calls(run).values():
        await call(store)
    attempts = AsyncAttemptStore(store)
    await attempts.state()
    await attempts.check_invariants()
    await store.check_invariants()


def test_the_stores_behind_refuse_every_call_on_the_loops_thread(tmp_path: Path) -> None:
    """The synchronous stores an ``AsyncRunStore`` holds refuse to run on a
    thread that runs an event loop, before writing anything; so a workout of
    every operation through the async API that passes shows that none of its
    calls ran on the loop's thread."""
    clock = ManualClock(0)

    async def main() -> None:
        async with runstore.aopen(tmp_path / "runs.db", clock=clock) as store:
            await _workout(store, clock)
            (sync,) = store.sync_stores
            revision = await store.revision()
            for blocking in (
                lambda: sync.create("x", "{}"),
                lambda: sync.get("w"),
                lambda: sync.heartbeat("w", OWNER, 1),
                lambda: sync.state(),
                lambda: AttemptStore(sync).state(),
            ):
                with pytest.raises((runstore.RunStoreError, AttemptStoreError)) as refused:
                    blocking()
                assert refused.value.cause["stage"] == "event-loop"
            assert await store.revision() == revision
            # The same store off the loop, on a thread of its own, works.
            assert await asyncio.to_thread(sync.revision) == revision

    _run(main())


class _OnTheLoop(AsyncRunStore):
    """A broken async store: it runs ``get`` on the caller's thread."""

    async def get(self, run_id: str) -> runstore.RunRow:
        return self.sync_stores[0].get(run_id)


def test_a_store_that_blocks_the_loop_is_caught_by_the_guard(tmp_path: Path) -> None:
    clock = ManualClock(0)

    async def main() -> None:
        async with runstore.aopen(tmp_path / "runs.db", clock=clock) as store:
            store.__class__ = _OnTheLoop
            with pytest.raises(runstore.RunStoreError) as refused:
                await _workout(store, clock)
            assert refused.value.cause["stage"] == "event-loop"

    _run(main())


def test_the_store_is_shared_by_many_tasks(tmp_path: Path) -> None:
    clock = ManualClock(0)

    async def main() -> None:
        async with runstore.aopen(tmp_path / "runs.db", clock=clock) as store:
            await asyncio.gather(*(store.create(f"r{i}", "{}") for i in range(40)))
            owned = await asyncio.gather(*(store.claim_next(OWNER, 10) for _ in range(40)))
            assert sorted(row.run_id for row in owned if row) == sorted(f"r{i}" for i in range(40))
            beats = await asyncio.gather(*(store.heartbeat(f"r{i}", OWNER, 20) for i in range(40)))
            assert beats == [Updated()] * 40
            assert await store.revision() == 120
            await store.check_invariants()

    _run(main())


# -- cancellation --------------------------------------------------------------------------


class _Gate(SqlConsensus):
    """``SqlConsensus`` whose heartbeat, once armed, waits for ``release``
    inside the store's write transaction (a write held in flight)."""

    def __init__(self) -> None:
        super().__init__()
        self.armed = False
        self.entered = threading.Event()
        self.release = threading.Event()

    def heartbeat(self, tx: Any, run_id: str, owner: OwnerId, now_ms: int) -> Any:
        if self.armed:
            self.entered.set()
            self.release.wait(30)
        return super().heartbeat(tx, run_id, owner, now_ms)


async def _owned(store: AsyncRunStore, run_id: str = "r") -> None:
    await store.create(run_id, "{}")
    run = await store.get(run_id)
    assert await store.claim_and_own(run_id, run, OWNER, 0) == runstore.Activated()


async def _wait_for(event: threading.Event) -> None:
    await asyncio.to_thread(event.wait, 30)
    assert event.is_set()


def test_cancelled_before_its_first_await_a_write_sends_nothing(tmp_path: Path) -> None:
    clock = ManualClock(0)

    async def main() -> None:
        async with runstore.aopen(tmp_path / "runs.db", clock=clock) as store:
            await _owned(store)
            before = await store.revision()
            task = asyncio.ensure_future(store.heartbeat("r", OWNER, 5))
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert await store.revision() == before

    _run(main())


def test_a_write_cancelled_while_queued_is_withdrawn_and_writes_nothing(tmp_path: Path) -> None:
    clock = ManualClock(0)
    gate = _Gate()

    async def main() -> None:
        async with runstore.aopen(tmp_path / "runs.db", clock=clock, consensus=gate) as store:
            await _owned(store)
            await _owned(store, "other")
            gate.armed = True
            held = asyncio.ensure_future(store.heartbeat("r", OWNER, 5))
            await _wait_for(gate.entered)
            queued = asyncio.ensure_future(store.transition_owned("other", OWNER, "completed"))
            await asyncio.sleep(0)
            queued.cancel()
            with pytest.raises(asyncio.CancelledError) as cancelled:
                await queued
            assert cancelled.value.__cause__ is None
            gate.armed = False
            gate.release.set()
            assert await held == Updated()
            assert (await store.get("other")).status == "running"

    _run(main())


@pytest.mark.parametrize("cancels", [1, 3])
def test_a_write_cancelled_in_flight_waits_for_its_answer_then_re_raises(
    tmp_path: Path, cancels: int
) -> None:
    """Cancelled while it runs (and again while it waits, shielded), the
    write is not cut short: its answer arrives, it committed, and the task
    ends with a plain ``CancelledError``."""
    clock = ManualClock(0)
    gate = _Gate()

    async def main() -> None:
        async with runstore.aopen(
            tmp_path / "runs.db", clock=clock, consensus=gate, cancel_grace_s=30
        ) as store:
            await _owned(store)
            before = await store.revision()
            gate.armed = True
            task = asyncio.ensure_future(store.heartbeat("r", OWNER, 5))
            await _wait_for(gate.entered)
            for _ in range(cancels):
                task.cancel()
                await asyncio.sleep(0)
            assert not task.done()
            gate.armed = False
            gate.release.set()
            with pytest.raises(asyncio.CancelledError) as cancelled:
                await task
            assert cancelled.value.__cause__ is None
            assert await store.revision() == before + 1
            assert (await store.get("r")).heartbeat_at_ms == 5

    _run(main())


def test_a_write_without_an_answer_in_time_ends_with_an_outcome_unknown_cause(
    tmp_path: Path,
) -> None:
    """The write's thread is held where no interrupt reaches (inside the
    strategy): after the grace, the interrupt and the grace again, the task
    ends with ``CancelledError`` caused by an outcome-unknown
    ``PersistenceFailedError``; and indeed the write commits later."""
    clock = ManualClock(0)
    gate = _Gate()

    async def main() -> None:
        async with runstore.aopen(
            tmp_path / "runs.db", clock=clock, consensus=gate, cancel_grace_s=0.01
        ) as store:
            await _owned(store)
            before = await store.revision()
            gate.armed = True
            task = asyncio.ensure_future(store.heartbeat("r", OWNER, 5))
            await _wait_for(gate.entered)
            task.cancel()
            with pytest.raises(asyncio.CancelledError) as cancelled:
                await task
            cause = cancelled.value.__cause__
            assert isinstance(cause, PersistenceFailedError)
            assert cause.outcome_unknown
            assert cause.method == "heartbeat"
            assert cause.cause["stage"] == "cancelled"
            gate.armed = False
            gate.release.set()
            # The lane finishes the write before it takes the next call.
            assert await store.revision() == before + 1

    _run(main())


def test_a_write_interrupted_after_the_grace_gives_its_error_as_the_cause(
    tmp_path: Path,
) -> None:
    """Held on the file's write lock by another connection, the write is
    interrupted once the grace has passed: it rolls back and its error, a
    definite failure, is the ``CancelledError``'s cause; nothing was written."""
    path = tmp_path / "runs.db"
    clock = ManualClock(0)

    async def main() -> None:
        async with runstore.aopen(path, clock=clock, cancel_grace_s=0.05) as store:
            await _owned(store)
            before = await store.revision()
            blocker = sqlite3.connect(path, isolation_level=None)
            try:
                blocker.execute("BEGIN IMMEDIATE")
                task = asyncio.ensure_future(store.heartbeat("r", OWNER, 5))
                await asyncio.sleep(0.2)  # the write waits on the lock meanwhile
                task.cancel()
                with pytest.raises(asyncio.CancelledError) as cancelled:
                    await task
            finally:
                blocker.execute("ROLLBACK")
                blocker.close()
            cause = cancelled.value.__cause__
            assert isinstance(cause, PersistenceFailedError), cause
            assert not cause.outcome_unknown
            assert await store.revision() == before

    _run(main())


def test_timeout_and_taskgroup_see_the_cancellation(tmp_path: Path) -> None:
    """``asyncio.timeout`` turns the re-raised ``CancelledError`` into
    ``TimeoutError`` and a ``TaskGroup`` reports the sibling's failure: both
    depend on the cancellation being re-raised, and the write still lands."""
    clock = ManualClock(0)
    gate = _Gate()

    async def main() -> None:
        async with runstore.aopen(
            tmp_path / "runs.db", clock=clock, consensus=gate, cancel_grace_s=30
        ) as store:
            await _owned(store)
            gate.armed = True
            threading.Timer(0.05, gate.release.set).start()
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.01):
                    await store.heartbeat("r", OWNER, 5)
            assert (await store.get("r")).heartbeat_at_ms == 5
            gate.release.clear()
            gate.entered.clear()

            async def fail_when_held() -> None:
                await _wait_for(gate.entered)
                threading.Timer(0.05, gate.release.set).start()
                raise LookupError("sibling")

            async def both() -> None:
                async with asyncio.TaskGroup() as tasks:
                    tasks.create_task(store.heartbeat("r", OWNER, 6))
                    tasks.create_task(fail_when_held())

            with pytest.raises(ExceptionGroup) as group:
                await both()
            assert group.group_contains(LookupError)
            assert (await store.get("r")).heartbeat_at_ms == 6

    _run(main())


def test_a_read_cancelled_in_flight_is_abandoned_at_once(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    clock = ManualClock(0)
    gate = _Gate()

    async def main() -> None:
        async with runstore.aopen(path, clock=clock, consensus=gate, cancel_grace_s=30) as store:
            await _owned(store)
            gate.armed = True
            held = asyncio.ensure_future(store.heartbeat("r", OWNER, 5))
            await _wait_for(gate.entered)
            read = asyncio.ensure_future(store.get("r"))
            await asyncio.sleep(0)
            read.cancel()
            with pytest.raises(asyncio.CancelledError):
                await read
            assert not held.done()
            gate.armed = False
            gate.release.set()
            assert await held == Updated()

    _run(main())


# -- PostgreSQL ------------------------------------------------------------------------------


def test_postgres_pool_serves_many_tasks_on_the_one_round_trip_path() -> None:
    url = _postgres.database_url()
    clock = ManualClock(0)

    async def main() -> None:
        async with runstore.aopen(url, clock=clock, pool_size=3) as store:
            assert (store.dialect, store.pool_size, store.fast_path) == ("postgresql", 3, True)
            await asyncio.gather(*(_owned(store, f"r{i}") for i in range(30)))
            beats = await asyncio.gather(*(store.heartbeat(f"r{i}", OWNER, 7) for i in range(30)))
            assert beats == [Updated()] * 30
            await _workout(store, clock)
            for sync in store.sync_stores:
                with pytest.raises(runstore.RunStoreError) as refused:
                    sync.get("r0")
                assert refused.value.cause["stage"] == "event-loop"

    _run(main())


def test_postgres_write_cancelled_behind_a_row_lock_rolls_back_with_its_error() -> None:
    """The one-round-trip heartbeat waits on a row another session locked;
    cancelled past the grace, its statement is cancelled on the server: the
    cause is that definite failure and nothing was written."""
    import psycopg

    url = _postgres.database_url()
    clock = ManualClock(0)

    async def main() -> None:
        async with runstore.aopen(url, clock=clock, pool_size=1, cancel_grace_s=0.1) as store:
            await _owned(store)
            before = await store.revision()
            with psycopg.connect(url) as locker:
                locker.execute("SELECT 1 FROM flows_runs WHERE run_id = 'r' FOR UPDATE")
                task = asyncio.ensure_future(store.heartbeat("r", OWNER, 5))
                await asyncio.sleep(0.3)
                task.cancel()
                with pytest.raises(asyncio.CancelledError) as cancelled:
                    await task
                locker.rollback()
            cause = cancelled.value.__cause__
            assert isinstance(cause, PersistenceFailedError), cause
            assert not cause.outcome_unknown
            assert await store.revision() == before
            assert await store.heartbeat("r", OWNER, 6) == Updated()

    _run(main())


# -- attempts and credentials ----------------------------------------------------------------


def test_the_async_attempt_store_is_fenced_like_the_synchronous_one(tmp_path: Path) -> None:
    from runstore.attempts import (
        Attempt,
        FenceLost,
        FinishAttempt,
        Finished,
        Inserted,
    )
    from runstore.attempts import (
        Updated as AttemptUpdated,
    )

    clock = ManualClock(0)

    async def main() -> None:
        async with runstore.aopen(tmp_path / "runs.db", clock=clock) as store:
            await _owned(store)
            attempts = AsyncAttemptStore(store, put_mode="upsert")
            assert attempts.options.put_mode == "upsert"
            record = Attempt("r", "step", 1, "running", 0, meta={})
            assert await attempts.put(record, OWNER) == Inserted()
            stranger = OwnerId("host-b", 9, "x")
            assert await attempts.put(record, stranger) == FenceLost()
            assert await attempts.heartbeat("r", "step", 1, OWNER, 3) == AttemptUpdated()
            done = FinishAttempt("r", "step", 1, "succeeded", 4)
            assert await attempts.finish(done, OWNER) == Finished()
            stored = await attempts.get(record)
            assert stored is not None
            assert stored.state == "succeeded"
            assert len(await attempts.state()) == 1
            await attempts.check_invariants(max_checkpoint_bytes=1 << 20)
            with pytest.raises(TypeError):
                AsyncAttemptStore(store.sync_stores[0])  # type: ignore[arg-type]

    _run(main())


def test_a_password_never_shows_in_the_repr_or_an_error() -> None:
    url = _postgres.database_url()
    scheme, _, rest = url.partition("://")
    user, _, where = rest.partition("@")
    secret = "hunter2-not-shown"
    with_password = f"{scheme}://{user}:{secret}@{where}"

    async def main() -> None:
        async with runstore.aopen(with_password, clock=ManualClock(0), pool_size=2) as store:
            assert secret not in repr(store)
            with pytest.raises(runstore.RunStoreError) as refused:
                await store.get("missing")
            assert secret not in str(refused.value)
            assert secret not in repr(refused.value.cause)

    _run(main())
