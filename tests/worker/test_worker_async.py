"""``AsyncWorker``: the reference worker on an asyncio store (issue 29), with ``Worker``'s rules.

Each test runs a real loop (``asyncio.run``) over a real SQLite file opened with
``runstore.aopen`` (one over PostgreSQL) and a ``ManualClock``: nothing sleeps on lease
time. The store's own synchronous stores refuse every call made on the loop's thread, so
each test that passes also shows that the worker, its fleet supervisor and its handlers'
jobs made none there.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

import runstore
from runstore import (
    Activated,
    AsyncAttemptStore,
    AsyncRunStore,
    InvalidRunError,
    LivenessEvidence,
    ManualClock,
    OwnerId,
    PersistenceFailedError,
)
from runstore.ownership import HEARTBEAT_INTERVAL_MS, HEARTBEAT_STALE_AFTER_MS
from runstore.worker import ATTEMPT_STEP, AsyncJob, AsyncWorker, Worker, WorkerEvent

from .. import _postgres

ME = OwnerId("host-w", 4242, "worker-nonce")
SECRET = "sk-live-5ecret-in-the-error"
START = 1_000_000
WAIT_S = 20.0


class Running:
    """An ``AsyncWorker`` running as a task of the test's loop; ``events`` collects its
    events (``on_event`` is called on the loop)."""

    def __init__(self, store: Any, handler: Any, clock: ManualClock, **options: Any) -> None:
        self.events: asyncio.Queue[WorkerEvent] = asyncio.Queue()
        self.seen: list[WorkerEvent] = []
        options.setdefault("poll_interval_s", 0.05)
        options.setdefault("owner", ME)
        self.worker = AsyncWorker(
            store, handler, clock=clock, on_event=self.events.put_nowait, **options
        )
        self.task = asyncio.ensure_future(self.worker.run())

    async def wait_for(self, kind: str, run_id: str | None = None) -> WorkerEvent:
        """The next event of ``kind`` (for ``run_id``), waiting for progress."""
        for event in self.seen:
            if event.kind == kind and (run_id is None or event.run_id == run_id):
                self.seen.remove(event)
                return event
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WAIT_S
        while True:
            if self.task.done():
                self.task.result()  # the worker failed: say how
            try:
                event = await asyncio.wait_for(self.events.get(), deadline - loop.time())
            except TimeoutError:
                raise AssertionError(f"no {kind} event for {run_id}; saw {self.seen}") from None
            if event.kind == kind and (run_id is None or event.run_id == run_id):
                return event
            self.seen.append(event)

    async def stop(self, grace_s: float = 0.0) -> None:
        await asyncio.wait_for(self.worker.stop(grace_s), WAIT_S)
        assert self.task.done()
        self.task.result()

    def drained(self) -> list[WorkerEvent]:
        out = list(self.seen)
        self.seen.clear()
        while not self.events.empty():
            out.append(self.events.get_nowait())
        return out


def run(main: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(main())  # type: ignore[arg-type]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START)


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "runs.db"


def take_over(path: Path, clock: ManualClock, run_id: str, peer: OwnerId) -> None:
    """A peer on another host takes ``run_id`` from the worker, as after a pause: the row
    is made stale behind the worker's back (raw SQL, another connection), then taken."""
    stale = clock.now_ms() - HEARTBEAT_STALE_AFTER_MS - 1
    with runstore.open(path, clock=clock) as other:
        other._write(
            "test",
            lambda tx: [
                tx.connection.execute(statement, (stale, run_id))
                for statement in (
                    "UPDATE flows_runs SET heartbeat_at_ms = ?1 WHERE run_id = ?2",
                    "UPDATE flows_consensus_leases SET heartbeat_at_ms = ?1 WHERE run_id = ?2",
                )
            ],
        )
        now = clock.now_ms()
        evidence = LivenessEvidence(ME, now, "cross-host-unreachable-stale")
        assert other.claim_and_own(run_id, other.get(run_id), peer, now, evidence) == (Activated())


# -- endings -----------------------------------------------------------------------------


def test_returned_json_completes_runs_with_handlers_as_tasks(
    path: Path, clock: ManualClock
) -> None:
    """Three runs, two handler tasks at a time: each checkpoint is fenced, each return
    completes its run with the text returned, and at most two handlers ran at once."""

    async def main() -> None:
        async with runstore.aopen(path, clock=clock) as store:
            for i in range(3):
                await store.create(f"r{i}", json.dumps({"n": i}))
            running_now: list[str] = []
            most = 0

            async def handler(job: AsyncJob) -> str:
                nonlocal most
                running_now.append(job.run_id)
                most = max(most, len(running_now))
                state = json.loads(job.state_json)
                await job.checkpoint(json.dumps({"n": state["n"], "step": 1}))
                assert job.state_json == json.dumps({"n": state["n"], "step": 1})
                await asyncio.sleep(0)
                running_now.remove(job.run_id)
                return json.dumps({"done": state["n"]})

            running = Running(store, handler, clock, concurrency=2)
            for _ in range(3):
                assert (await running.wait_for("settled")).status == "completed"
            await running.stop()
            for i in range(3):
                row = await store.get(f"r{i}")
                assert (row.status, row.state_json, row.owner) == (
                    "completed",
                    json.dumps({"done": i}),
                    None,
                )
            assert 1 <= most <= 2
            await store.check_invariants()

    run(main)


def test_a_raising_handler_fails_the_run_with_an_attempt_record_of_its_type_and_site(
    path: Path, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> None:
        async with runstore.aopen(path, clock=clock) as store:
            await store.create("r1", '{"step": 0}')

            async def handler(job: AsyncJob) -> str:
                await job.checkpoint('{"step": 1}')
                raise RuntimeError(f"token {SECRET} rejected")

            running = Running(store, handler, clock)
            settled = await running.wait_for("settled", "r1")
            await running.stop()
            assert (settled.status, settled.reason, settled.error_type) == (
                "failed",
                "handler_raised",
                "RuntimeError",
            )
            row = await store.get("r1")
            assert (row.status, row.state_json) == ("failed", '{"step": 1}')
            (attempt,) = await AsyncAttemptStore(store).state()
            assert (attempt.run_id, attempt.step_key_digest, attempt.state) == (
                "r1",
                ATTEMPT_STEP,
                "failed",
            )
            assert isinstance(attempt.error, dict)
            assert (attempt.error["type"], attempt.error["reason"]) == (
                "RuntimeError",
                "handler_raised",
            )
            assert attempt.error["site"]["function"] == "handler"
            assert attempt.error["site"]["file"].endswith("test_worker_async.py")
            assert SECRET not in json.dumps(attempt.error) + json.dumps(attempt.meta)
            assert SECRET not in repr(settled)

    caplog.set_level(logging.DEBUG)
    run(main)
    assert SECRET not in caplog.text


def test_a_cancellation_request_settles_the_run_cancelled(path: Path, clock: ManualClock) -> None:
    """The handler sees the request (``await job.cancel_requested()``) and returns early:
    the guarded completion fails, the worker acknowledges and settles ``cancelled``."""

    async def main() -> None:
        async with runstore.aopen(path, clock=clock) as store:
            await store.create("r1", "{}")
            asked = asyncio.Event()

            async def handler(job: AsyncJob) -> str:
                assert not await job.cancel_requested()
                await asked.wait()
                assert await job.cancel_requested()
                return '{"partial": true}'

            running = Running(store, handler, clock)
            await running.wait_for("taken", "r1")
            await store.request_cancel("r1", clock.now_ms())
            asked.set()
            settled = await running.wait_for("settled", "r1")
            await running.stop()
            assert (settled.status, settled.reason) == ("cancelled", "cancel_requested")
            row = await store.get("r1")
            assert (row.status, row.state_json) == ("cancelled", '{"partial": true}')

    run(main)


# -- takeovers and losses --------------------------------------------------------------


def test_a_crashed_owners_run_is_taken_over_with_evidence_once_stale(
    path: Path, clock: ManualClock
) -> None:
    """A run whose owner on another host died is taken over with
    ``cross-host-unreachable-stale`` evidence once its lease is stale; the handler sees
    the takeover and the run's last checkpoint."""
    crashed = OwnerId("host-x", 77, "crashed")

    async def main() -> None:
        async with runstore.aopen(path, clock=clock) as store:
            await store.create("r1", '{"step": 0}')
            row = await store.get("r1")
            assert await store.claim_and_own("r1", row, crashed, clock.now_ms()) == Activated()
            assert (
                await store.transition_owned("r1", crashed, "running", '{"step": 3}')
                == runstore.Transitioned()
            )
            seen: list[tuple[str | None, str]] = []

            async def handler(job: AsyncJob) -> str:
                seen.append((job.takeover, job.state_json))
                return '{"step": 4}'

            running = Running(store, handler, clock)
            clock.advance(HEARTBEAT_STALE_AFTER_MS + 1)
            taken = await running.wait_for("taken_over", "r1")
            settled = await running.wait_for("settled", "r1")
            await running.stop()
            assert taken.evidence == "cross-host-unreachable-stale"
            assert taken.previous_owner == crashed
            assert settled.status == "completed"
            assert seen == [("cross-host-unreachable-stale", '{"step": 3}')]
            assert (await store.get("r1")).state_json == '{"step": 4}'

    run(main)


def test_a_run_taken_by_a_peer_cancels_its_handler_and_nothing_is_written(
    path: Path, clock: ManualClock
) -> None:
    peer = OwnerId("host-p", 7, "peer")

    async def main() -> None:
        async with runstore.aopen(path, clock=clock) as store:
            await store.create("r1", '{"v": 0}')
            started, cancelled = asyncio.Event(), asyncio.Event()

            async def handler(job: AsyncJob) -> str:
                started.set()
                try:
                    await asyncio.sleep(WAIT_S)
                except asyncio.CancelledError:
                    cancelled.set()
                    raise
                return '{"v": "from the displaced owner"}'

            running = Running(store, handler, clock)
            await started.wait()
            await asyncio.to_thread(take_over, path, clock, "r1", peer)
            clock.advance(HEARTBEAT_INTERVAL_MS)  # the fleet's next pulse finds the fence gone
            lost = await running.wait_for("lost", "r1")
            # Cancelled by the loss itself, while the worker runs on (not by its stop).
            await asyncio.wait_for(cancelled.wait(), WAIT_S)
            assert running.worker.held() == []
            await running.stop()
            assert lost.reason == "lease_lost"
            row = await store.get("r1")
            assert (row.status, row.owner, row.state_json) == ("running", peer, '{"v": 0}')
            assert [event.kind for event in running.drained()] == ["taken"]

    run(main)


# -- timeouts and stopping ---------------------------------------------------------------


def test_a_handler_past_its_timeout_fails_its_run_and_is_cancelled(
    path: Path, clock: ManualClock
) -> None:
    async def main() -> None:
        async with runstore.aopen(path, clock=clock) as store:
            await store.create("r1", '{"v": 0}')
            started, cancelled = asyncio.Event(), asyncio.Event()

            async def handler(job: AsyncJob) -> str:
                started.set()
                try:
                    await asyncio.sleep(WAIT_S)
                except asyncio.CancelledError:
                    cancelled.set()
                    raise
                return "{}"

            running = Running(store, handler, clock, handler_timeout_ms=5_000)
            await started.wait()
            clock.advance(5_001)
            settled = await running.wait_for("settled", "r1")
            # Cancelled by the timeout, while the worker runs on (not by its stop).
            await asyncio.wait_for(cancelled.wait(), WAIT_S)
            await running.stop()
            assert (settled.status, settled.reason) == ("failed", "handler_timeout")
            assert (await store.get("r1")).status == "failed"

    run(main)


def test_stop_lets_handlers_finish_within_the_grace_then_suspends_the_rest(
    path: Path, clock: ManualClock
) -> None:
    """``await stop(10)``: a handler that returns within the grace completes its run; one
    still running when the grace ends on the clock is suspended (a fenced write) and its
    task cancelled; ``stop`` returns once ``run()`` has."""

    async def main() -> None:
        async with runstore.aopen(path, clock=clock) as store:
            await store.create("quick", "{}")
            await store.create("slow", "{}")
            release_quick = asyncio.Event()
            both = asyncio.Event()
            started: list[str] = []
            cancelled: list[str] = []

            async def handler(job: AsyncJob) -> str:
                started.append(job.run_id)
                if len(started) == 2:
                    both.set()
                try:
                    if job.run_id == "quick":
                        await release_quick.wait()
                        return '{"quick": true}'
                    await asyncio.sleep(WAIT_S)
                except asyncio.CancelledError:
                    cancelled.append(job.run_id)
                    raise
                return "{}"

            running = Running(store, handler, clock, concurrency=2)
            await both.wait()
            stopper = asyncio.ensure_future(running.worker.stop(10.0))
            await asyncio.sleep(0)  # the stop is recorded: the grace ends 10 s from now
            release_quick.set()
            settled = await running.wait_for("settled", "quick")
            assert settled.status == "completed"
            assert not stopper.done()
            clock.advance(10_001)
            suspended = await running.wait_for("suspended", "slow")
            await asyncio.wait_for(stopper, WAIT_S)
            assert running.task.done()
            assert suspended.reason == "grace_expired"
            assert cancelled == ["slow"]
            assert (await store.get("slow")).status == "suspended"
            assert (await store.get("quick")).status == "completed"

    run(main)


# -- what the worker admits ----------------------------------------------------------------


def test_each_worker_refuses_the_other_kind_of_store_and_a_blocking_handler(
    path: Path, clock: ManualClock
) -> None:
    async def handler(job: AsyncJob) -> str:
        return "{}"

    async def main() -> None:
        async with runstore.aopen(path, clock=clock) as store:
            with pytest.raises(InvalidRunError) as refused:
                Worker(store, lambda job: "{}")
            assert "AsyncWorker" in refused.value.cause["detail"]
            with pytest.raises(InvalidRunError) as refused:
                AsyncWorker(store, lambda job: "{}")
            assert refused.value.cause["field"] == "handler"
            with pytest.raises(InvalidRunError):
                AsyncWorker(store, handler, concurrency=0)
            worker = AsyncWorker(store, handler)
            with pytest.raises(InvalidRunError):
                await worker.stop(-1)

    run(main)
    with runstore.open(":memory:", clock=clock) as sync:
        with pytest.raises(InvalidRunError) as refused:
            AsyncWorker(sync, handler)
        assert "Worker" in refused.value.cause["detail"]


def test_a_blocking_store_call_on_the_loop_is_refused_so_these_tests_would_see_one(
    path: Path, clock: ManualClock
) -> None:
    """The planted bug the tests above would catch: a handler that writes through the
    synchronous store on the loop's thread is refused (``stage="event-loop"``), nothing is
    written, and the worker leaves the run to its lease as for any storage failure."""

    async def main() -> None:
        async with runstore.aopen(path, clock=clock) as store:
            await store.create("r1", '{"v": 0}')
            refusals: list[PersistenceFailedError] = []

            async def handler(job: AsyncJob) -> str:
                try:
                    store.sync_stores[0].transition_owned(job.run_id, job.owner, "running", "{}")
                except PersistenceFailedError as error:
                    refusals.append(error)
                    raise
                return "{}"

            running = Running(store, handler, clock)
            lost = await running.wait_for("lost", "r1")
            await running.stop()
            assert lost.reason == "storage_failed"
            assert [error.cause["stage"] for error in refusals] == ["event-loop"]
            assert (await store.get("r1")).state_json == '{"v": 0}'

    run(main)


# -- PostgreSQL ----------------------------------------------------------------------------


def test_postgres_pool_runs_handlers_at_once_and_takes_over_a_crashed_owners_run(
    clock: ManualClock,
) -> None:
    """On a pool of two connections, four handler tasks complete eight runs, one of them
    taken over from a crashed owner once stale."""
    url = _postgres.database_url()
    crashed = OwnerId("host-x", 77, "crashed")

    async def main() -> None:
        async with runstore.aopen(url, clock=clock, pool_size=2) as store:
            assert isinstance(store, AsyncRunStore)
            for i in range(8):
                await store.create(f"r{i}", "{}")
            row = await store.get("r0")
            assert await store.claim_and_own("r0", row, crashed, clock.now_ms()) == Activated()
            clock.advance(HEARTBEAT_STALE_AFTER_MS + 1)

            async def handler(job: AsyncJob) -> str:
                await job.checkpoint('{"half": true}')
                return json.dumps({"run": job.run_id})

            running = Running(store, handler, clock, concurrency=4)
            taken = await running.wait_for("taken_over", "r0")
            statuses = [(await running.wait_for("settled")).status for _ in range(8)]
            await running.stop()
            assert taken.evidence == "cross-host-unreachable-stale"
            assert statuses == ["completed"] * 8
            for i in range(8):
                done = await store.get(f"r{i}")
                assert (done.status, done.state_json) == ("completed", json.dumps({"run": f"r{i}"}))
            await store.check_invariants()

    run(main)
