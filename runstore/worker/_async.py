"""``AsyncWorker``: the reference worker on an asyncio store, its handlers coroutines.

The same rules as ``Worker`` (the package docstring), from the same decisions
(``_steps``, awaited here by ``arun_steps``): it claims with ``claim_next`` /
``claim_next_many``, takes stale runs over with evidence, keeps every held run's
lease with one fleet supervisor (``supervise_many``'s ``async with`` face, on
this loop), and settles each run under the fence. What differs is where things
run: one loop, a task for the finding loop and one task per held run (at most
``concurrency``), no thread of its own. A lost lease cancels the handler's task
(its ``async with fleet.ahold`` raises ``LeaseLost``); a handler past its
timeout, or still running when the grace ends, is cancelled after the worker
wrote the run's end.

May import: ``runstore.ownership`` and the core modules (the asyncio store is
handed in; its attempt store comes from ``_options``).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import random
import signal
from collections.abc import Awaitable, Callable
from typing import Any

from .._clock import Clock
from .._constants import HEARTBEAT_INTERVAL_MS
from .._errors import InvalidRunError, RunStoreError
from .._values import OwnerId, RunRow
from ..ownership import Fleet, LeaseLost, supervise_many
from ..ownership._core import coroutine_methods
from ._job import AsyncJob, EventKind, PollingWakeup, Wakeup, WorkerEvent, backoff_s
from ._options import STORE_METHODS, admit_options, attempt_store, emit
from ._steps import (
    Ending,
    Steps,
    arun_steps,
    claim_steps,
    complete_steps,
    fail_steps,
    scan_steps,
    state_steps,
    suspend_steps,
    take_over_steps,
    too_many_takeovers_steps,
    verdict,
)
from ._steps import type_name as _type_name

logger = logging.getLogger("runstore.worker")

_POLL_FLOOR_S = 0.05


class _Held:
    """A run the worker holds: its job, the task running its handler, how it ended."""

    __slots__ = ("done", "ended_by_worker", "job", "lost_reported", "task")

    def __init__(self, job: AsyncJob) -> None:
        self.job = job
        self.task: asyncio.Task[None] | None = None
        self.done = False
        # Set when the worker itself ended the run (grace or timeout): the handler's
        # task writes nothing more.
        self.ended_by_worker = False
        self.lost_reported = False


def _is_coroutine_function(handler: object) -> bool:
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
        getattr(handler, "__call__", None)  # noqa: B004 - an instance with an async __call__
    )


class AsyncWorker:
    """The reference worker for asyncio: take runs, keep their leases, await the
    handler, settle under the fence. See the package docstring for the rules,
    which are ``Worker``'s.

    ``AsyncWorker(store, handler, *, owner=None, host_id=None, concurrency=1,
    clock=None, max_takeovers=3, handler_timeout_ms=None, poll_interval_s=1.0,
    scan_interval_ms=HEARTBEAT_INTERVAL_MS, wakeup=None, on_event=None,
    attempts=True)``:

    - ``store``: an asyncio run store (``runstore.aopen``'s ``AsyncRunStore``, or
      any store whose operations are coroutine functions); a blocking one is
      refused (``InvalidRunError``: use ``Worker``);
    - ``handler``: a coroutine function, awaited as ``handler(job)`` with an
      ``AsyncJob`` in a task of its own: it returns the final state (JSON text) to
      complete the run, or raises to fail it;
    - ``concurrency``: how many runs it holds (and handler tasks it runs) at most,
      all on the loop that runs ``run()``; the store's connections (an
      ``AsyncRunStore``'s ``pool_size``) are what lets their calls run at once;
    - ``wakeup``: a ``Wakeup`` whose blocking ``wait`` is run in a thread to wake
      an idle worker; by default the store's ``open_listener()`` when it has one,
      else polling with jittered backoff (no thread);
    - ``on_event``: called on the loop with every ``WorkerEvent``; it must not block;
    - ``attempts``: write a failure's attempt record where the store keeps
      attempts (an ``AsyncAttemptStore`` over an ``AsyncRunStore``);
    - ``owner``, ``host_id``, ``clock``, ``max_takeovers``, ``handler_timeout_ms``,
      ``poll_interval_s`` and ``scan_interval_ms``: as ``Worker``'s.

    ``await worker.run()`` works until ``stop``; ``await worker.stop(grace_s)``
    ends it. A handler's task is cancelled when its run's lease is lost, when its
    timeout passes (after the run was failed) and when the grace ends (after the
    run was suspended): a handler lets that ``CancelledError`` propagate.
    """

    def __init__(
        self,
        store: Any,
        handler: Callable[[AsyncJob], Awaitable[object]],
        *,
        owner: OwnerId | None = None,
        host_id: str | None = None,
        concurrency: int = 1,
        clock: Clock | None = None,
        max_takeovers: int = 3,
        handler_timeout_ms: int | None = None,
        poll_interval_s: float = 1.0,
        scan_interval_ms: int = HEARTBEAT_INTERVAL_MS,
        wakeup: Wakeup | None = None,
        on_event: Callable[[WorkerEvent], object] | None = None,
        attempts: bool = True,
    ) -> None:
        options = admit_options(
            "AsyncWorker",
            store,
            handler,
            owner=owner,
            host_id=host_id,
            concurrency=concurrency,
            clock=clock,
            max_takeovers=max_takeovers,
            handler_timeout_ms=handler_timeout_ms,
            poll_interval_s=poll_interval_s,
            scan_interval_ms=scan_interval_ms,
        )
        blocking = sorted(set(STORE_METHODS) - set(coroutine_methods(store, STORE_METHODS)))
        if blocking:
            detail = (
                "an asyncio store (runstore.aopen), whose operations are coroutine functions;"
                f" these are not: {', '.join(blocking)} (use Worker for a blocking store)"
            )
            raise InvalidRunError("AsyncWorker", {"field": "store", "detail": detail})
        if not _is_coroutine_function(handler):
            raise InvalidRunError(
                "AsyncWorker",
                {"field": "handler", "detail": "must be a coroutine function (async def)"},
            )
        self._owner = options.owner
        self._store = store
        self._handler = handler
        self._concurrency = options.concurrency
        self._clock: Clock = options.clock
        self._max_takeovers = options.max_takeovers
        self._handler_timeout_ms = options.handler_timeout_ms
        self._poll_interval_s = options.poll_interval_s
        self._scan_interval_ms = options.scan_interval_ms
        self._wakeup_given = wakeup
        self._on_event = on_event
        self._attempts: Any = attempt_store(store) if attempts else None
        self._targets: dict[str, Any] = {
            "store": store,
            "attempts": self._attempts,
            "worker": self,
        }
        self._held: dict[str, _Held] = {}
        self._kick = asyncio.Event()
        self._scan_moved = asyncio.Event()
        self._stopped = asyncio.Event()
        self._stopping = False
        self._grace_deadline_ms: int | None = None
        self._running = False
        self._rng = random.Random()
        self._fleet: Fleet | None = None
        self._can_batch = callable(getattr(store, "claim_next_many", None))
        self._next_scan_ms = 0
        self._scan_pending = True

    # -- what callers see ------------------------------------------------------------

    @property
    def owner(self) -> OwnerId:
        """The worker's ``OwnerId``: the owner of record of every run it holds."""
        return self._owner

    def held(self) -> list[str]:
        """The ids of the runs the worker holds now, sorted."""
        return sorted(rid for rid, held in self._held.items() if not held.job.lost)

    async def stop(self, grace_s: float = 30.0) -> None:
        """Stop taking work and wait until ``run()`` has returned: it waits up to
        ``grace_s`` seconds on the worker's clock for the handlers of held runs to
        return, suspends (fenced) every run still held, cancels their handlers and
        returns. A second call can only shorten the grace. Called from one of the
        worker's own handlers, or while ``run()`` is not running, it returns at
        once (the stop stands)."""
        self._request_stop(grace_s)
        current = asyncio.current_task()
        own = any(held.task is current for held in self._held.values())
        if self._running and not own:
            await self._stopped.wait()

    def _request_stop(self, grace_s: float) -> None:
        if type(grace_s) not in (int, float) or not grace_s >= 0:
            raise InvalidRunError(
                "AsyncWorker.stop", {"field": "grace_s", "detail": "must be >= 0"}
            )
        deadline = self._clock.now_ms() + int(grace_s * 1000)
        self._stopping = True
        if self._grace_deadline_ms is None or deadline < self._grace_deadline_ms:
            self._grace_deadline_ms = deadline
        self._kick.set()

    def install_signal_handlers(self, grace_s: float = 30.0) -> None:
        """On the running loop (Unix): SIGTERM and SIGINT stop the worker with
        ``grace_s``; a second signal stops it with no grace (suspend what is held at
        once)."""
        loop = asyncio.get_running_loop()

        def handle() -> None:
            self._request_stop(0 if self._stopping else grace_s)

        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, handle)

    async def run(self) -> None:
        """Take and run work until ``stop``; then finish or suspend what is held and
        return. Store failures while looking for work are logged and retried after a
        backoff; they never end the loop."""
        if self._running:
            raise RuntimeError("a worker runs once at a time")
        self._running = True
        self._stopped.clear()
        self._next_scan_ms = self._clock.now_ms()
        self._scan_pending = True
        wakeup = self._open_wakeup()
        try:
            async with supervise_many(
                self._store, self._owner, clock=self._clock, on_lost=self._on_lost
            ) as fleet:
                self._fleet = fleet
                helpers = [asyncio.ensure_future(self._tick())]
                if wakeup is not None:
                    helpers.append(asyncio.ensure_future(self._listen(wakeup)))
                try:
                    await self._loop()
                    await self._drain()
                finally:
                    for helper in helpers:
                        helper.cancel()
                    await asyncio.gather(*helpers, return_exceptions=True)
                    await self._cancel_handlers()
        finally:
            self._running = False
            self._stopped.set()
            if wakeup is not None:
                try:
                    wakeup.close()
                except Exception as error:  # pragma: no cover - a listener that fails to close
                    logger.warning("closing the wakeup failed (%s)", _type_name(error))

    # -- finding work ------------------------------------------------------------------

    async def _loop(self) -> None:
        idle_s = 0.0
        while not self._stopping:
            await self._check_timeouts()
            try:
                found = await self._find_work()
            except RunStoreError as error:
                logger.warning(
                    "looking for work failed (%s); retrying", error.code, extra={"code": error.code}
                )
                found = False
            if found:
                idle_s = 0.0
                continue
            idle_s = backoff_s(idle_s, _POLL_FLOOR_S, self._poll_interval_s, self._rng)
            # A real-time wait between polls; a handler ending, a stop, a due scan or
            # a notification ends it early.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._kick.wait(), idle_s)
            self._kick.clear()

    def _active(self) -> int:
        return sum(1 for held in self._held.values() if not held.done)

    async def _find_work(self) -> bool:
        now = self._clock.now_ms()
        if now >= self._next_scan_ms:
            # Due: the next free slot looks at stale runs before it takes a claimable
            # one, so a backlog cannot starve takeovers.
            self._next_scan_ms = now + self._scan_interval_ms
            self._scan_pending = True
            self._scan_moved.set()
        free = self._concurrency - self._active()
        if free <= 0:
            return False
        taken = 0
        if self._scan_pending:
            self._scan_pending = False
            taken, more = await self._run(
                scan_steps(self._owner, self._clock.now_ms(), free),
            )
            if more:
                self._scan_pending = True
        if free - taken > 0:
            taken += await self._take_claimable(free - taken)
        return taken > 0

    async def _take_claimable(self, free: int) -> int:
        now = self._clock.now_ms()
        rows = await self._run(claim_steps(self._owner, now, free, can_batch=self._can_batch))
        started = 0
        for row in rows:
            held = await self._prepare_safely(row, now)
            if held is not None:
                self._start(held)
                started += 1
        return started

    async def _prepare_safely(self, row: RunRow, now: int) -> _Held | None:
        try:
            return await self._prepare(row, now, takeover=None, previous=None)
        except RunStoreError as error:
            # The run is ours but not started: its lease goes stale and this
            # worker's own scan takes it back (``own_stale``).
            logger.warning(
                "starting %s failed (%s)", row.run_id, error.code, extra={"run_id": row.run_id}
            )
            return None

    async def _take_over(self, row: RunRow, now: int) -> bool:
        """Take over the stale run ``row`` and start its handler (``scan_steps``' call)."""
        if row.owner == self._owner:
            # Our own run went stale. While a handler here still holds it and has not
            # lost it, the supervisor decides; otherwise whatever held it must write
            # nothing more (the fence cannot tell this owner's grants apart).
            stale = self._held.get(row.run_id)
            if stale is not None and not stale.done:
                if not stale.job.lost:
                    return False
                stale.ended_by_worker = True
            if stale is not None:
                stale.job._lost.set()
        found = await self._run(take_over_steps(row, self._owner, now))
        if found is None:
            return False
        taken, kind, previous = found
        held = await self._prepare(taken, now, takeover=kind, previous=previous)
        if held is None:
            return False  # ended at once (taken over too often): its slot is free
        self._start(held)
        return True

    # -- holding work ------------------------------------------------------------------

    async def _run(self, steps: Steps[Any]) -> Any:
        return await arun_steps(steps, self._targets)

    async def _prepare(
        self, row: RunRow, now: int, *, takeover: str | None, previous: OwnerId | None
    ) -> _Held | None:
        """Register a run just taken (its event, its supervision); None when it was
        ended at once instead (taken over too often)."""
        state = await self._run(state_steps(row))
        job = AsyncJob(self._store, row.run_id, self._owner, state, takeover, now)
        held = _Held(job)
        self._held[row.run_id] = held
        try:
            if takeover is None:
                self._emit("taken", row.run_id)
            else:
                self._emit(
                    "taken_over",
                    row.run_id,
                    evidence=takeover if takeover != "own_stale" else None,
                    previous_owner=previous,
                )
                if await self._run(too_many_takeovers_steps(row.run_id, self._max_takeovers)):
                    await self._fail(held, reason="too_many_takeovers", error=None)
                    self._finish(held)
                    return None
        except BaseException:
            # Not started: the run is left to its lease, and this worker's own scan
            # takes it back once stale (``own_stale``).
            self._finish(held)
            raise
        assert self._fleet is not None
        self._fleet.add(row.run_id)
        return held

    def _start(self, held: _Held) -> None:
        held.task = asyncio.ensure_future(self._execute(held))
        held.task.add_done_callback(lambda _: self._kick.set())

    async def _execute(self, held: _Held) -> None:
        job = held.job
        fleet = self._fleet
        assert fleet is not None
        try:
            error: Exception | None = None
            result: object = None
            try:
                async with fleet.ahold(job.run_id):
                    result = await self._handler(job)
            except asyncio.CancelledError:
                if not held.ended_by_worker:
                    raise  # cancelled from outside the worker: the run is left to its lease
                task = asyncio.current_task()
                if task is not None:
                    task.uncancel()  # the worker's own cancellation, after it ended the run
                return
            except Exception as raised:
                error = raised
            decision = verdict(error, ended_by_worker=held.ended_by_worker, lost=job.lost)
            if decision.action == "complete":
                ending = await self._run(
                    complete_steps(
                        job, self._owner, result, self._clock, attempts=self._attempts is not None
                    )
                )
                self._report(held, ending)
            elif decision.action == "fail":
                await self._fail(held, reason=decision.reason or "handler_raised", error=error)
            elif decision.action == "lose":
                self._lose(held, decision.reason or "lease_lost")
        except RunStoreError as error:
            # The settling write itself failed (storage, outcome unknown): the run
            # stays running under this owner until its lease lapses and a peer (or
            # this worker) takes it over.
            logger.warning(
                "settling %s failed (%s)",
                job.run_id,
                error.code,
                extra={"run_id": job.run_id, "code": error.code},
            )
        finally:
            self._finish(held)

    def _finish(self, held: _Held) -> None:
        held.done = True
        if self._held.get(held.job.run_id) is held:
            # Only the current holding: a handler cut off earlier must not end the
            # supervision of the run this worker took back since.
            del self._held[held.job.run_id]
            if self._fleet is not None:
                self._fleet.discard(held.job.run_id)
        self._kick.set()

    async def _fail(self, held: _Held, *, reason: str, error: BaseException | None) -> None:
        """Settle ``failed`` keeping the last checkpoint, after the attempt record."""
        steps = fail_steps(
            held.job,
            self._owner,
            self._clock,
            reason=reason,
            error=error,
            attempts=self._attempts is not None,
        )
        self._report(held, await self._run(steps))

    def _report(self, held: _Held, ending: Ending) -> None:
        """Say how a run's end went: its event, or the run lost."""
        run_id = held.job.run_id
        if ending.kind == "lost":
            self._lose(held, ending.reason or "fence_lost")
        elif ending.kind == "settled":
            self._emit(
                "settled",
                run_id,
                status=ending.status,
                reason=ending.reason,
                error_type=ending.error_type,
            )
        else:
            self._emit("suspended", run_id, reason=ending.reason)

    def _lose(self, held: _Held, reason: str) -> None:
        """The run is someone else's now: say so once (unless the worker itself
        ended it), write nothing."""
        held.job._lost.set()
        if held.lost_reported or held.ended_by_worker:
            return
        held.lost_reported = True
        self._emit("lost", held.job.run_id, reason=reason)
        self._kick.set()

    def _on_lost(self, error: LeaseLost) -> None:
        # The fleet, on the loop: it has already cancelled the handler's task.
        run_id = error.run_id
        held = self._held.get(run_id) if run_id is not None else None
        if held is not None:
            self._lose(held, "lease_lost")
        self._kick.set()

    async def _check_timeouts(self) -> None:
        limit = self._handler_timeout_ms
        if limit is None:
            return
        now = self._clock.now_ms()
        late = [
            held
            for held in self._held.values()
            if not held.done
            and not held.ended_by_worker
            and not held.job.lost
            and now - held.job.taken_at_ms > limit
        ]
        for held in late:
            held.ended_by_worker = True
        for held in late:
            if self._fleet is not None:
                self._fleet.discard(held.job.run_id)
            try:
                await self._fail(held, reason="handler_timeout", error=None)
            except RunStoreError as error:
                logger.warning("failing %s failed (%s)", held.job.run_id, error.code)
            held.job._lost.set()
            if held.task is not None:
                held.task.cancel(msg="runstore: the handler ran past its timeout")

    # -- stopping ----------------------------------------------------------------------

    async def _drain(self) -> None:
        """Wait out the grace for held runs, then suspend the rest and cancel their
        handlers."""
        while True:
            open_runs = [h for h in self._held.values() if not h.done and not h.job.lost]
            deadline = self._grace_deadline_ms
            if not open_runs:
                return
            if deadline is not None and self._clock.now_ms() >= deadline:
                for held in open_runs:
                    held.ended_by_worker = True
                break
            await self._wait_for_change(deadline)
            await self._check_timeouts()
        for held in open_runs:
            job = held.job
            if self._fleet is not None:
                self._fleet.discard(job.run_id)
            job._lost.set()
            try:
                ending = await self._run(suspend_steps(job.run_id, self._owner))
            except RunStoreError as error:
                logger.warning("suspending %s failed (%s)", job.run_id, error.code)
            else:
                if ending.kind == "suspended":
                    self._emit("suspended", job.run_id, reason=ending.reason)
                else:
                    self._emit("lost", job.run_id, reason=ending.reason)
            if held.task is not None:
                held.task.cancel(msg="runstore: the worker's grace ended")

    async def _wait_for_change(self, deadline: int | None) -> None:
        """Until a handler ends, the grace is shortened (a stop), the clock reaches
        the grace's end, or (for timeouts) one poll interval of real time passes."""
        self._kick.clear()
        waits: list[asyncio.Future[Any]] = [asyncio.ensure_future(self._kick.wait())]
        if deadline is not None:
            waits.append(asyncio.ensure_future(self._clock.asleep_until(deadline)))
        try:
            await asyncio.wait(
                waits, timeout=self._poll_interval_s, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            for wait in waits:
                wait.cancel()
            await asyncio.gather(*waits, return_exceptions=True)

    async def _cancel_handlers(self) -> None:
        """Cancel the handler tasks still running and wait for them to end."""
        tasks = [h.task for h in list(self._held.values()) if h.task is not None]
        for held in list(self._held.values()):
            if held.task is not None and not held.task.done():
                held.ended_by_worker = True
                held.task.cancel(msg="runstore: the worker stopped")
        if tasks:
            await asyncio.wait(tasks)

    # -- waking up ---------------------------------------------------------------------

    def _open_wakeup(self) -> Wakeup | None:
        if self._wakeup_given is not None:
            return self._wakeup_given
        opener = getattr(self._store, "open_listener", None)
        if callable(opener):
            try:
                listener: Wakeup = opener()
                return listener
            except RunStoreError as error:
                logger.warning("listening for work failed (%s); polling instead", error.code)
        return None

    async def _listen(self, wakeup: Wakeup) -> None:
        if isinstance(wakeup, PollingWakeup):
            return  # nothing to listen to: the loop's own backoff polls
        while not self._stopping:
            try:
                notified = await asyncio.to_thread(wakeup.wait, self._poll_interval_s)
            except Exception as error:
                logger.warning("waiting for work failed (%s)", _type_name(error))
                await asyncio.sleep(self._poll_interval_s)
                continue
            if notified:
                self._kick.set()

    async def _tick(self) -> None:
        """Wake the loop when a takeover scan is due, on the worker's clock."""
        while not self._stopping:
            due = self._next_scan_ms
            await self._clock.asleep_until(due)
            self._kick.set()
            if self._next_scan_ms == due:
                # Until the loop has scanned and set the next scan's time.
                self._scan_moved.clear()
                await self._scan_moved.wait()

    # -- events ------------------------------------------------------------------------

    def _emit(self, kind: EventKind, run_id: str, **details: Any) -> None:
        emit(self._owner, self._clock, self._on_event, kind, run_id, **details)

    def __repr__(self) -> str:
        return f"AsyncWorker(owner={self._owner!r}, concurrency={self._concurrency})"
