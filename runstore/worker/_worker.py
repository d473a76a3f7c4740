"""``Worker``: finds runs, holds them under one fleet supervisor, runs the
handler on each in a thread, and writes each run's end under the fence.

Its decisions are ``_steps``' (shared with ``AsyncWorker``), run here on the
blocking store by ``run_steps``; this module owns the threads: the finding
loop, the handler slots and their permits, the wakeup and the scan ticker."""

from __future__ import annotations

import logging
import queue
import random
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

from .._clock import Clock
from .._constants import HEARTBEAT_INTERVAL_MS
from .._errors import InvalidRunError, RunStoreError
from .._values import OwnerId, RunRow
from ..ownership import LeaseLost, supervise_many
from ..ownership._core import coroutine_methods
from ._job import EventKind, Job, PollingWakeup, Wakeup, WorkerEvent, backoff_s
from ._options import STORE_METHODS, admit_options, attempt_store, emit
from ._steps import (
    Ending,
    claim_steps,
    complete_steps,
    fail_steps,
    run_steps,
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
    """A run the worker holds: its job, its thread, and how it ended."""

    __slots__ = ("abandoned", "done", "ended_by_worker", "job", "lost_reported")

    def __init__(self, job: Job) -> None:
        self.job = job
        self.done = False
        # Set when the worker gave up on the handler's thread (its run was lost or
        # ended by the worker while the handler ran): a new thread took the slot.
        self.abandoned = False
        # Set when the worker itself ended the run (grace or timeout): the handler
        # thread must write nothing more.
        self.ended_by_worker = False
        self.lost_reported = False


class Worker:
    """The reference worker loop: take runs, keep their leases, run the handler,
    settle under the fence. See the package docstring for the rules.

    ``Worker(store, handler, *, owner=None, host_id=None, concurrency=1,
    clock=None, max_takeovers=3, handler_timeout_ms=None, poll_interval_s=1.0,
    scan_interval_ms=HEARTBEAT_INTERVAL_MS, wakeup=None, on_event=None,
    attempts=True)``:

    - ``store``: any run store (SQLite, PostgreSQL, the model);
    - ``handler``: called as ``handler(job)`` with a ``Job``, in a thread of its own;
    - ``owner``: the worker's ``OwnerId``; by default this host's name (or
      ``host_id``), this process's pid and a fresh nonce;
    - ``host_id``: the host name to use when ``owner`` is not given;
    - ``concurrency``: how many runs it holds (and handlers it runs) at most;
    - ``clock``: the ``Clock`` for leases, scans, grace and timeouts (by
      default the store's ``clock`` when it has one, else ``SystemClock()``);
    - ``max_takeovers``: a run taken over more often than this (its
      ``stolen`` ownership facts) is settled ``failed`` instead of run again;
    - ``handler_timeout_ms``: ``None`` (no limit) or how long a handler may run
      before the worker fails its run;
    - ``poll_interval_s``: the longest idle wait, in real seconds, between two
      looks for claimable runs (the waits back off from 50 ms with jitter);
    - ``scan_interval_ms``: how often, on ``clock``, stale runs and abandoned
      claims are looked for (once per heartbeat interval by default);
    - ``wakeup``: a ``Wakeup``; by default the store's ``open_listener()`` when it
      has one (PostgreSQL), else polling;
    - ``on_event``: called with every ``WorkerEvent`` (from the worker's threads;
      it must not block); events are also logged on ``runstore.worker``;
    - ``attempts``: write a failure's attempt record (``runstore.attempts``)
      where the store keeps attempts;
    - ``slot_store``: ``None`` (every slot shares ``store``), or a function that
      opens another store of the same database on the same clock: each handler
      slot then opens one for its own checkpoints, claims and endings, and
      closes it when the slot ends. One store serializes its callers on its
      connection, so on PostgreSQL this is what lets several slots commit at
      once.
    """

    def __init__(
        self,
        store: Any,
        handler: Callable[[Job], object],
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
        slot_store: Callable[[], Any] | None = None,
    ) -> None:
        options = admit_options(
            "Worker",
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
        if coroutine_methods(store, STORE_METHODS):
            detail = "an asyncio store (its operations are coroutine functions): use AsyncWorker"
            raise InvalidRunError("Worker", {"field": "store", "detail": detail})
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
        self._attempts: Any = None
        if attempts:
            self._attempts = attempt_store(store)
        self._lock = threading.Condition()
        self._held: dict[str, _Held] = {}
        self._kick = threading.Event()
        self._stopping = False
        self._grace_deadline_ms: int | None = None
        self._running = False
        self._rng = random.Random()
        self._fleet: Any = None
        self._can_batch = callable(getattr(store, "claim_next_many", None))
        self._next_scan_ms = 0
        self._scan_pending = True
        # One permit per handler slot. Whoever takes a run holds a permit for it
        # until the run's end is written; a slot thread that ends a run keeps its
        # permit and claims its next run itself (no hand-off through the loop).
        self._slots = threading.Semaphore(concurrency)
        self._inbox: queue.SimpleQueue[_Held | None] = queue.SimpleQueue()
        self._slot_threads = 0
        if slot_store is not None and not callable(slot_store):
            raise InvalidRunError(
                "Worker", {"field": "slot_store", "detail": "must be None or callable"}
            )
        self._slot_store = slot_store
        # A slot thread's own store and attempt store (``slot_store``).
        self._local = threading.local()

    # -- what callers see ------------------------------------------------------------

    @property
    def owner(self) -> OwnerId:
        """The worker's ``OwnerId``: the owner of record of every run it holds."""
        return self._owner

    def held(self) -> list[str]:
        """The ids of the runs the worker holds now, sorted."""
        with self._lock:
            return sorted(rid for rid, held in self._held.items() if not held.job.lost)

    def stop(self, grace_s: float = 30.0) -> None:
        """Stop taking work; returns at once (safe from a signal handler and from any
        thread). ``run()`` then waits up to ``grace_s`` seconds on the worker's clock
        for the handlers of held runs to return, suspends (fenced) every run still
        held, and returns. A second call can only shorten the grace."""
        if type(grace_s) not in (int, float) or grace_s < 0:
            raise InvalidRunError("Worker.stop", {"field": "grace_s", "detail": "must be >= 0"})
        deadline = self._clock.now_ms() + int(grace_s * 1000)
        with self._lock:
            self._stopping = True
            if self._grace_deadline_ms is None or deadline < self._grace_deadline_ms:
                self._grace_deadline_ms = deadline
            self._lock.notify_all()
        self._kick.set()

    def install_signal_handlers(self, grace_s: float = 30.0) -> None:
        """From the main thread: SIGTERM and SIGINT call ``stop(grace_s)``; a second
        signal calls ``stop(0)`` (suspend what is held at once).

        ``grace_s``: the grace, in seconds, that the first signal gives the held runs."""

        def handle(signum: int, frame: FrameType | None) -> None:
            self.stop(0 if self._stopping else grace_s)

        signal.signal(signal.SIGTERM, handle)
        signal.signal(signal.SIGINT, handle)

    def run(self) -> None:
        """Take and run work until ``stop``; then finish or suspend what is held and
        return. Store failures while looking for work are logged and retried
        after a backoff; they never end the loop."""
        with self._lock:
            if self._running:
                raise RuntimeError("a worker runs once at a time")
            self._running = True
        wakeup = self._open_wakeup()
        listener = threading.Thread(
            target=self._listen, args=(wakeup,), name="runstore-worker-wakeup", daemon=True
        )
        ticker = threading.Thread(target=self._tick, name="runstore-worker-scan", daemon=True)
        self._next_scan_ms = self._clock.now_ms()
        self._scan_pending = True
        try:
            with supervise_many(
                self._store, self._owner, clock=self._clock, on_lost=self._on_lost
            ) as fleet:
                self._fleet = fleet
                listener.start()
                ticker.start()
                for _ in range(self._concurrency):
                    self._start_slot_thread()
                self._loop()
                self._drain()
        finally:
            with self._lock:
                idle_threads = self._slot_threads
            for _ in range(idle_threads):
                self._inbox.put(None)
            with self._lock:
                self._running = False
                self._lock.notify_all()
            self._kick.set()
            try:
                wakeup.close()
            except Exception as error:  # pragma: no cover - a listener that fails to close
                logger.warning("closing the wakeup failed (%s)", _type_name(error))

    # -- finding work ------------------------------------------------------------------

    def _loop(self) -> None:
        idle_s = 0.0
        while True:
            with self._lock:
                if self._stopping:
                    return
            self._check_timeouts()
            try:
                found = self._find_work()
            except RunStoreError as error:
                logger.warning(
                    "looking for work failed (%s); retrying", error.code, extra={"code": error.code}
                )
                found = False
            if found:
                idle_s = 0.0
                continue
            idle_s = backoff_s(idle_s, _POLL_FLOOR_S, self._poll_interval_s, self._rng)
            self._kick.wait(idle_s)
            self._kick.clear()

    def _acquire_slots(self) -> int:
        """Take every free slot's permit (without waiting); how many were free."""
        free = 0
        while free < self._concurrency and self._slots.acquire(blocking=False):
            free += 1
        return free

    def _find_work(self) -> bool:
        now = self._clock.now_ms()
        if now >= self._next_scan_ms:
            # Due: the next slot that frees looks at stale runs before it takes a
            # claimable one, so a backlog cannot starve takeovers.
            self._next_scan_ms = now + self._scan_interval_ms
            self._scan_pending = True
        free = self._acquire_slots()
        if free <= 0:
            return False
        taken = 0
        try:
            if self._scan_pending:
                self._scan_pending = False
                taken += self._scan_takeovers(free)
            if free - taken > 0:
                taken += self._take_claimable(free - taken)
        finally:
            # Runs handed to slot threads keep their permits; the rest go back.
            for _ in range(free - taken):
                self._slots.release()
        return taken > 0

    def _targets(self) -> dict[str, Any]:
        """What the steps call, for the calling thread: its slot's store and attempt
        store (``slot_store``), else the worker's; and the worker."""
        attempts = getattr(self._local, "attempts", None) or self._attempts
        return {"store": self._s(), "attempts": attempts, "worker": self}

    def _take_claimable(self, free: int) -> int:
        now = self._clock.now_ms()
        rows = run_steps(
            claim_steps(self._owner, now, free, can_batch=self._can_batch),
            {"store": self._store},
        )
        started = 0
        for row in rows:
            held = self._prepare_safely(row, now)
            if held is not None:
                self._inbox.put(held)
                started += 1
        return started

    def _prepare_safely(self, row: RunRow, now: int) -> _Held | None:
        try:
            return self._prepare(row, now, takeover=None, previous=None)
        except RunStoreError as error:
            # The run is ours but not started: its lease goes stale and this
            # worker's own scan takes it back (``own_stale``).
            logger.warning(
                "starting %s failed (%s)", row.run_id, error.code, extra={"run_id": row.run_id}
            )
            return None

    def _scan_takeovers(self, free: int) -> int:
        taken, more = run_steps(
            scan_steps(self._owner, self._clock.now_ms(), free),
            {"store": self._store, "worker": self},
        )
        if more:
            # More stale runs than free slots: the next slot that frees scans again
            # before it takes new work, instead of waiting for the next interval.
            self._scan_pending = True
        return taken

    def _take_over(self, row: RunRow, now: int) -> bool:
        """Take over the stale run ``row`` and hand it to a slot (``scan_steps``' call)."""
        if row.owner == self._owner:
            # Our own run went stale. While a handler here still holds it and has not
            # lost it, the supervisor decides (it renews or ends the lease): taking it
            # back would start a second execution beside the first. Otherwise (a start
            # that failed, a handler cut off) whatever held it must write nothing more
            # (the fence cannot tell this owner's grants apart).
            with self._lock:
                stale = self._held.get(row.run_id)
                if stale is not None and not stale.done:
                    if not stale.job.lost:
                        return False
                    stale.ended_by_worker = True
            if stale is not None:
                stale.job._lost.set()
        found = run_steps(take_over_steps(row, self._owner, now), {"store": self._store})
        if found is None:
            return False
        taken, kind, previous = found
        held = self._prepare(taken, now, takeover=kind, previous=previous)
        if held is None:
            return False  # ended at once (taken over too often): its slot is free
        self._inbox.put(held)
        return True

    # -- holding work ------------------------------------------------------------------

    def _prepare(
        self, row: RunRow, now: int, *, takeover: str | None, previous: OwnerId | None
    ) -> _Held | None:
        """Register a run just taken (its event, its supervision); None when it was
        ended at once instead (taken over too often)."""
        state = run_steps(state_steps(row), {"store": self._store})
        job = Job(self._store, row.run_id, self._owner, state, takeover, now)
        held = _Held(job)
        with self._lock:
            self._held[row.run_id] = held
        if takeover is None:
            self._emit("taken", row.run_id)
        else:
            self._emit(
                "taken_over",
                row.run_id,
                evidence=takeover if takeover != "own_stale" else None,
                previous_owner=previous,
            )
            if run_steps(
                too_many_takeovers_steps(row.run_id, self._max_takeovers), {"store": self._store}
            ):
                try:
                    self._fail(held, reason="too_many_takeovers", error=None)
                finally:
                    self._finish(held)
                return None
        self._fleet.add(row.run_id)
        return held

    # -- the slot threads --------------------------------------------------------------

    def _s(self) -> Any:
        """The store of the calling thread: its slot's own, else the worker's."""
        return getattr(self._local, "store", self._store)

    def _open_slot_store(self) -> Any:
        if self._slot_store is None:
            return None
        try:
            store = self._slot_store()
        except Exception as error:
            logger.warning("opening a slot's store failed (%s); sharing", _type_name(error))
            return None
        self._local.store = store
        if self._attempts is not None:
            self._local.attempts = attempt_store(store)
        return store

    def _start_slot_thread(self) -> None:
        with self._lock:
            self._slot_threads += 1
            number = self._slot_threads
        thread = threading.Thread(
            target=self._slot_main, name=f"runstore-worker-slot-{number}", daemon=True
        )
        thread.start()

    def _slot_main(self) -> None:
        """A handler slot: run what it is handed; after each run, claim the next one
        itself while there is work and nothing else is due."""
        own = self._open_slot_store()
        try:
            while True:
                held = self._inbox.get()
                if held is None:
                    return
                while held is not None:
                    self._execute(held)
                    if held.abandoned:
                        return  # the worker gave this slot to a new thread meanwhile
                    held = self._claim_for_slot()
        finally:
            with self._lock:
                self._slot_threads -= 1
            if own is not None:
                try:
                    own.close()
                except Exception as error:  # pragma: no cover - a store that fails to close
                    logger.warning("closing a slot's store failed (%s)", _type_name(error))

    def _claim_for_slot(self) -> _Held | None:
        """The slot's next run (it keeps its permit), or None (the permit goes back
        and the loop is woken: a scan is due, the worker stops, or nothing waits)."""
        with self._lock:
            go_on = self._running and not self._stopping and not self._scan_pending
        if go_on and self._clock.now_ms() < self._next_scan_ms:
            now = self._clock.now_ms()
            try:
                row = self._s().claim_next(self._owner, now)
            except RunStoreError as error:
                logger.warning(
                    "looking for work failed (%s); retrying", error.code, extra={"code": error.code}
                )
                row = None
            if row is not None:
                held = self._prepare_safely(row, now)
                if held is not None:
                    return held
        self._slots.release()
        self._kick.set()
        return None

    def _abandon(self, held: _Held) -> None:
        """Give up on ``held``'s handler thread, still running a run that is no
        longer this worker's: its permit goes back and a new thread takes the slot."""
        with self._lock:
            if held.done or held.abandoned:
                return
            held.abandoned = True
            replace = self._running
        self._slots.release()
        if replace:
            self._start_slot_thread()
        self._kick.set()

    def _execute(self, held: _Held) -> None:
        job = held.job
        job._store = self._s()  # the handler's checkpoints go through its slot's store
        try:
            error: Exception | None = None
            result: object = None
            try:
                with self._fleet.hold(job.run_id):
                    result = self._handler(job)
            except Exception as raised:
                error = raised
            decision = verdict(error, ended_by_worker=held.ended_by_worker, lost=job.lost)
            if decision.action == "complete":
                self._complete(held, result)
            elif decision.action == "fail":
                self._fail(held, reason=decision.reason or "handler_raised", error=error)
            elif decision.action == "lose":
                # A storage failure under the handler leaves the run to its lease
                # (``verdict``): its supervision ends now, nothing more is written.
                self._fleet.discard(job.run_id)
                self._lose(held, decision.reason or "lease_lost")
        except RunStoreError as error:
            # The settling write itself failed (storage, outcome unknown): the run
            # stays running under this owner until its lease lapses and a peer
            # (or this worker) takes it over.
            logger.warning(
                "settling %s failed (%s)",
                job.run_id,
                error.code,
                extra={"run_id": job.run_id, "code": error.code},
            )
        finally:
            self._finish(held)

    def _finish(self, held: _Held) -> None:
        with self._lock:
            current = self._held.get(held.job.run_id) is held
        if current:
            # Only the current holding: a handler thread abandoned earlier must not
            # end the supervision of the run this worker took back since.
            self._fleet.discard(held.job.run_id)
        with self._lock:
            held.done = True
            if self._held.get(held.job.run_id) is held:
                del self._held[held.job.run_id]
            self._lock.notify_all()

    def _complete(self, held: _Held, result: object) -> None:
        """Settle the run with the handler's result (``complete_steps``)."""
        steps = complete_steps(
            held.job, self._owner, result, self._clock, attempts=self._attempts is not None
        )
        self._report(held, run_steps(steps, self._targets()))

    def _fail(
        self,
        held: _Held,
        *,
        reason: str,
        error: BaseException | None,
        returned: object = None,
    ) -> None:
        """Settle ``failed`` keeping the last checkpoint, after the attempt record."""
        steps = fail_steps(
            held.job,
            self._owner,
            self._clock,
            reason=reason,
            error=error,
            returned=returned,
            attempts=self._attempts is not None,
        )
        self._report(held, run_steps(steps, self._targets()))

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
        with self._lock:
            if held.lost_reported or held.ended_by_worker:
                return
            held.lost_reported = True
        self._emit("lost", held.job.run_id, reason=reason)
        self._kick.set()

    def _on_lost(self, error: LeaseLost) -> None:
        run_id = error.run_id
        with self._lock:
            held = self._held.get(run_id) if run_id is not None else None
        if held is not None:
            self._lose(held, "lease_lost")
            self._abandon(held)
        self._kick.set()

    def _check_timeouts(self) -> None:
        limit = self._handler_timeout_ms
        if limit is None:
            return
        now = self._clock.now_ms()
        with self._lock:
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
            self._abandon(held)
            self._fleet.discard(held.job.run_id)
            try:
                self._fail(held, reason="handler_timeout", error=None)
            except RunStoreError as error:
                logger.warning("failing %s failed (%s)", held.job.run_id, error.code)
            held.job._lost.set()
            with self._lock:
                self._held.pop(held.job.run_id, None)

    # -- stopping ----------------------------------------------------------------------

    def _drain(self) -> None:
        """Wait out the grace for held runs, then suspend the rest."""
        deadline = self._grace_deadline_ms
        if deadline is not None:
            # Woken on the clock (a ManualClock or a shared clock moves when its
            # owner moves it), not only by the polls below.
            threading.Thread(
                target=self._wake_at, args=(deadline,), name="runstore-worker-grace", daemon=True
            ).start()
        while True:
            with self._lock:
                open_runs = [h for h in self._held.values() if not h.done and not h.job.lost]
                deadline = self._grace_deadline_ms
                if not open_runs:
                    return
                if deadline is not None and self._clock.now_ms() >= deadline:
                    for held in open_runs:
                        held.ended_by_worker = True
                    break
                self._lock.wait(0.05)
            self._check_timeouts()
        for held in open_runs:
            job = held.job
            self._fleet.discard(job.run_id)
            job._lost.set()
            try:
                ending = run_steps(suspend_steps(job.run_id, self._owner), {"store": self._store})
            except RunStoreError as error:
                logger.warning("suspending %s failed (%s)", job.run_id, error.code)
                continue
            if ending.kind == "suspended":
                self._emit("suspended", job.run_id, reason=ending.reason)
            else:
                self._emit("lost", job.run_id, reason=ending.reason)
            with self._lock:
                self._held.pop(job.run_id, None)

    def _wake_at(self, deadline_ms: int) -> None:
        self._clock.sleep_until(deadline_ms)
        with self._lock:
            self._lock.notify_all()

    # -- waking up ---------------------------------------------------------------------

    def _open_wakeup(self) -> Wakeup:
        if self._wakeup_given is not None:
            return self._wakeup_given
        opener = getattr(self._store, "open_listener", None)
        if callable(opener):
            try:
                listener: Wakeup = opener()
                return listener
            except RunStoreError as error:
                logger.warning("listening for work failed (%s); polling instead", error.code)
        return PollingWakeup()

    def _listen(self, wakeup: Wakeup) -> None:
        polling = isinstance(wakeup, PollingWakeup)
        while True:
            with self._lock:
                if not self._running or self._stopping:
                    return
            if polling:
                # Nothing to listen to: the loop's own backoff polls.
                with self._lock:
                    self._lock.wait(1.0)
                continue
            try:
                if wakeup.wait(self._poll_interval_s):
                    self._kick.set()
            except Exception as error:
                logger.warning("waiting for work failed (%s)", _type_name(error))
                with self._lock:
                    self._lock.wait(self._poll_interval_s)

    def _tick(self) -> None:
        """Wake the loop when a takeover scan is due, on the worker's clock."""
        while True:
            with self._lock:
                if not self._running or self._stopping:
                    return
            due = self._next_scan_ms
            self._clock.sleep_until(due)
            self._kick.set()
            with self._lock:
                if self._next_scan_ms == due and self._running and not self._stopping:
                    self._lock.wait(0.05)

    # -- events ------------------------------------------------------------------------

    def _emit(
        self,
        kind: EventKind,
        run_id: str,
        **details: Any,
    ) -> None:
        emit(self._owner, self._clock, self._on_event, kind, run_id, **details)

    def __repr__(self) -> str:
        return f"Worker(owner={self._owner!r}, concurrency={self._concurrency})"
