"""The heartbeat supervisor: one implementation behind ``supervise`` and ``asupervise``.

The supervisor is a coroutine that races two loops, as the original does:

- **pulses**: every ``HEARTBEAT_INTERVAL_MS`` it heartbeats with the clock's
  reading. ``Updated`` re-arms the budget from the timestamp it sent; any other
  answer means another owner holds the run, so it ends at once (no
  ``on_lapse``); an error is tolerated, logged once per outage.
- **deadline**: it sleeps until the last confirmed pulse plus
  ``HEARTBEAT_WRITE_TOLERANCE_MS`` and re-reads the clock. It bounds a write
  that never returns.

When the budget is spent either loop runs the expiry procedure, serialized and
re-checked so that two loops arriving together settle once: one ``reconfirm``
bounded by one interval either renews the lease (then ``on_reconfirm`` runs,
bounded by the renewed budget) or the lease lapses (``on_lapse`` once).

Blocking store calls and plain-function callbacks run in daemon worker threads
and are awaited with the clock as a bound, so the event loop never blocks and a
stalled call never delays the supervisor. A store whose operations are
coroutine functions (``runstore.aio.AsyncRunStore``, or any store written that
way) is driven natively instead: each call is awaited on the supervisor's loop
as a task of its own (``_AsyncCalls``), with the same bounds and the same
count of calls in flight, and no worker thread. Time is read only through the
injected ``Clock``. The faces in ``_faces`` decide how an ending interrupts the
owned work.

A coroutine call that outlives its bound, or the supervision, is cancelled and
not waited for: the store settles it by its own cancellation rules (an
``AsyncRunStore`` withdraws a call not yet started and lets a started write
wait, shielded, up to its ``cancel_grace_s`` before interrupting it), while
the lease rules go on at once. Waiting would let a stalled write hold a lost
lease's ``LeaseLost`` back by up to twice that grace.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import queue
import threading
from collections.abc import Awaitable, Callable
from typing import Any, Literal, TypeVar

import attrs

from .. import _telemetry
from .._clock import Clock
from .._constants import HEARTBEAT_INTERVAL_MS, HEARTBEAT_WRITE_TOLERANCE_MS
from .._errors import ERROR_CODES, RunStoreError
from .._outcomes import Updated
from .._protocol import RunStore
from .._values import OwnerId

logger = logging.getLogger("runstore.ownership")

T = TypeVar("T")

#: A supervisor callback: a plain function (run in a worker thread) or a
#: coroutine function (awaited on the supervisor's event loop).
Callback = Callable[..., object]

EndReason = Literal["lapsed", "fence_lost", "released"]

_IDLE_POLL_S = 0.002


@_telemetry.interrupt_error
class LeaseLost(Exception):
    """Raised from a supervised block when the owned work was interrupted.

    ``reason`` is ``"lapsed"`` (heartbeat writes failed for the whole write
    tolerance and the final ``reconfirm`` did not renew the lease) or
    ``"fence_lost"`` (a heartbeat answered that this owner no longer holds
    the run). ``unconfirmed_ms`` is how long the lease had gone unconfirmed at
    a lapse; ``outcome`` is the store's answer when the fence was lost.

    Inside a threaded block the same exception may arrive asynchronously, at
    any point where the work thread runs Python code; let it propagate.

    Supervisors build it as ``LeaseLost(message, run_id=..., reason=...,
    unconfirmed_ms=..., outcome=...)``: ``run_id``, ``reason``,
    ``unconfirmed_ms`` and ``outcome`` become the attributes below, and
    ``message`` defaults to "the run's lease was lost".
    """

    run_id: str | None
    """The run whose lease was lost."""
    reason: EndReason | None
    """``"lapsed"`` or ``"fence_lost"``."""
    unconfirmed_ms: int | None
    """At a lapse, how long the lease had gone unconfirmed, in ms; else ``None``."""
    outcome: object
    """When the fence was lost, the store's answer that showed it (``FenceLost()``,
    ``NotFound()``); else ``None``."""

    def __init__(
        self,
        message: str | None = None,
        *,
        run_id: str | None = None,
        reason: EndReason | None = None,
        unconfirmed_ms: int | None = None,
        outcome: object = None,
    ) -> None:
        if message is None:
            # Built with no arguments: the interpreter raising an exception
            # injected into a work thread. Adopt that thread's details.
            template = _take_injected(threading.get_ident())
            if template is not None:
                message = template.args[0] if template.args else None
                run_id, reason = template.run_id, template.reason
                unconfirmed_ms, outcome = template.unconfirmed_ms, template.outcome
        super().__init__(message or "the run's lease was lost")
        self.run_id = run_id
        self.reason = reason
        self.unconfirmed_ms = unconfirmed_ms
        self.outcome = outcome


_injected_lock = threading.Lock()
_injected: dict[int, LeaseLost] = {}


def _remember_injected(thread_id: int, error: LeaseLost) -> None:
    with _injected_lock:
        _injected[thread_id] = error


def _take_injected(thread_id: int) -> LeaseLost | None:
    with _injected_lock:
        return _injected.pop(thread_id, None)


def _forget_injected(thread_id: int) -> None:
    _take_injected(thread_id)


@attrs.frozen
class Ending:
    """How a supervision ended on its own: the lease lapsed, the fence was lost,
    or this owner released the run itself (a quiet end)."""

    reason: EndReason
    unconfirmed_ms: int | None = None
    outcome: object = None

    def error(self, run_id: str) -> LeaseLost:
        if self.reason == "lapsed":
            message = f"the lease of run {run_id!r} lapsed after {self.unconfirmed_ms} ms"
        else:
            message = f"run {run_id!r} is no longer owned by this owner ({self.outcome!r})"
        return LeaseLost(
            message,
            run_id=run_id,
            reason=self.reason,
            unconfirmed_ms=self.unconfirmed_ms,
            outcome=self.outcome,
        )


class Supervision:
    """What a supervised block gets: the state of its lease.

    ``lost`` is set when the work was interrupted; ``check()`` raises the
    ``LeaseLost`` then, for work that prefers to look between steps.
    ``cancel_requested`` is set once a pulse has seen cancellation intent (only
    watched when ``on_cancel_requested`` was given). ``last_confirmed_ms`` is the
    timestamp of the last write that renewed the lease (or the start).

    Supervisors build it as ``Supervision(run_id, owner, start_ms)``: the
    supervised ``run_id`` and ``owner``, and ``start_ms``, the clock reading
    supervision started at.
    """

    def __init__(self, run_id: str, owner: OwnerId, start_ms: int) -> None:
        self.run_id = run_id
        """The supervised run."""
        self.owner = owner
        """The owner whose lease is kept."""
        self.lost = threading.Event()
        """Set when the lease is lost and the work is being interrupted."""
        self.cancel_requested = threading.Event()
        """Set once a pulse has seen cancellation intent on the run (watched only
        when ``on_cancel_requested`` was given)."""
        self._last_confirmed_ms = start_ms
        self._error: LeaseLost | None = None
        self._lock = threading.Condition()
        self._parked: dict[str, int] = {}
        self._pending = 0
        self._ended = False
        self._clock: Clock | None = None
        #: The span current where supervision began (telemetry events go there).
        self._span = _telemetry.current_span()

    @property
    def last_confirmed_ms(self) -> int:
        """The store-clock reading of the last write that renewed the lease, or the start of
        supervision before any did."""
        with self._lock:
            return self._last_confirmed_ms

    @property
    def error(self) -> LeaseLost | None:
        """The ``LeaseLost`` the block ends with, once the lease is lost."""
        with self._lock:
            return self._error

    def check(self) -> None:
        """Raise ``LeaseLost`` if the lease is lost; otherwise do nothing."""
        error = self.error
        if error is not None:
            raise error

    def wait_idle(self, timeout_s: float = 5.0) -> bool:
        """Block until the supervisor has nothing to do at the clock's current time: both of its
        loops wait for a moment still in the future and no store call or callback is in flight
        (or supervision has ended).

        A test that drives a ``ManualClock`` calls it after each move to know the supervisor has
        finished reacting. Returns True then, or False when that did not happen within
        ``timeout_s`` seconds of real time.
        """
        looks = max(1, int(timeout_s / _IDLE_POLL_S))
        with self._lock:
            for _ in range(looks):
                if self._idle():
                    return True
                # Clock moves do not notify us: look again shortly.
                self._lock.wait(_IDLE_POLL_S)
            return self._idle()

    def _idle(self) -> bool:
        if self._ended:
            return True
        if self._pending or len(self._parked) < 2 or self._clock is None:
            return False
        now = self._clock.now_ms()
        return all(deadline > now for deadline in self._parked.values())

    def _park(self, loop: str, deadline_ms: int) -> None:
        with self._lock:
            self._parked[loop] = deadline_ms
            self._lock.notify_all()

    def _unpark(self, loop: str) -> None:
        with self._lock:
            self._parked.pop(loop, None)

    def _busy(self, delta: int) -> None:
        with self._lock:
            self._pending += delta
            self._lock.notify_all()

    def _end(self) -> None:
        with self._lock:
            self._ended = True
            self._parked.clear()
            self._lock.notify_all()

    def _confirm(self, stamp_ms: int) -> None:
        with self._lock:
            self._last_confirmed_ms = max(self._last_confirmed_ms, stamp_ms)

    def _lose(self, error: LeaseLost) -> None:
        with self._lock:
            if self._error is None:
                self._error = error
        self.lost.set()

    def __repr__(self) -> str:
        state = "lost" if self.lost.is_set() else "held"
        return f"Supervision(run_id={self.run_id!r}, owner={self.owner!r}, {state})"


class _TimedOut(Exception):
    """A bounded call reached its clock deadline before it returned."""


def coroutine_methods(store: object, names: tuple[str, ...]) -> list[str]:
    """Those of ``names`` that ``store`` offers as coroutine functions (an asyncio store)."""
    return [name for name in names if inspect.iscoroutinefunction(getattr(store, name, None))]


#: Coroutine store calls nobody waits for any more (cancelled at a bound or at
#: the end of a supervision), kept referenced until the store has settled them.
_detached: set[asyncio.Future[Any]] = set()


class _AsyncCalls:
    """A supervisor's calls on a store whose operations are coroutine functions.

    Each call runs as a task of its own on the supervisor's loop, so that
    neither a bound nor the supervisor's own cancellation waits for a call
    that is settling a cancelled write: the waiting side stops at once and the
    call is cancelled and left to the store's rules (see the module docstring).
    ``in_flight`` counts the calls not yet ended, as ``_counted`` does for
    blocking ones.
    """

    def __init__(self) -> None:
        self._tasks: set[asyncio.Future[Any]] = set()

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    def _ended(self, task: asyncio.Future[Any]) -> None:
        self._tasks.discard(task)
        _detached.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: an abandoned call's error is not logged

    async def call(
        self,
        fn: Callable[..., Awaitable[T]],
        args: tuple[Any, ...],
        *,
        bound: int | None,
        clock: Clock,
    ) -> T:
        """Await ``fn(*args)``; with ``bound``, give up (``_TimedOut``) when
        the clock reaches it first. A call cancelled by ``cancel_all`` also
        ends in ``_TimedOut``: it has no answer."""
        task: asyncio.Future[T] = asyncio.ensure_future(fn(*args))
        self._tasks.add(task)
        _detached.add(task)
        task.add_done_callback(self._ended)
        try:
            if bound is None:
                await asyncio.wait((task,))
            else:
                timer = asyncio.ensure_future(clock.asleep_until(bound))
                try:
                    await asyncio.wait((task, timer), return_when=asyncio.FIRST_COMPLETED)
                finally:
                    timer.cancel()
                    # Let the cancelled timer leave the clock before anyone counts sleepers.
                    await asyncio.gather(timer, return_exceptions=True)
        except asyncio.CancelledError:
            task.cancel()
            raise
        if not task.done():
            task.cancel()
            raise _TimedOut
        if task.cancelled():
            raise _TimedOut
        return task.result()

    def cancel_all(self) -> None:
        """Cancel every call in flight; nobody waits for them."""
        for task in list(self._tasks):
            task.cancel()


class _Workers:
    """Daemon threads that run blocking calls for one event loop.

    A call that never returns keeps its thread; the next call gets another one.
    Daemon threads never hold up interpreter exit, which a stalled database
    write would do to a ``ThreadPoolExecutor``.
    """

    _MAX_IDLE = 2

    def __init__(self, name: str) -> None:
        self._name = name
        self._lock = threading.Lock()
        self._idle: list[queue.SimpleQueue[Any]] = []
        self._closed = False
        self.in_flight = 0

    def submit(self, fn: Callable[..., T], args: tuple[Any, ...]) -> asyncio.Future[T]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        with self._lock:
            if self._closed:
                raise RuntimeError("the supervisor's workers are closed")
            inbox = self._idle.pop() if self._idle else None
            self.in_flight += 1
        if inbox is None:
            inbox = queue.SimpleQueue()
            threading.Thread(
                target=self._serve, args=(inbox,), name=self._name, daemon=True
            ).start()
        inbox.put((fn, args, loop, future))
        return future

    def _serve(self, inbox: queue.SimpleQueue[Any]) -> None:
        while True:
            item = inbox.get()
            if item is None:
                return
            fn, args, loop, future = item
            try:
                result = fn(*args)
            except BaseException as error:
                _deliver(loop, future, None, error)
            else:
                _deliver(loop, future, result, None)
            finally:
                del item, fn, args, future
            with self._lock:
                self.in_flight -= 1
                if self._closed or len(self._idle) >= self._MAX_IDLE:
                    return
                self._idle.append(inbox)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for inbox in idle:
            inbox.put(None)


def _deliver(
    loop: asyncio.AbstractEventLoop,
    future: asyncio.Future[Any],
    result: object,
    error: BaseException | None,
) -> None:
    def settle() -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)

    # A closed loop means nobody waits for this answer any more.
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(settle)


def _error_code(error: BaseException) -> str:
    """A store error's code, or else its type's name: never its message.

    A driver's or a store's message may quote run state. A code outside the
    known ones (a store of one's own may set anything) counts as unknown text.
    """
    code = getattr(error, "code", None) if isinstance(error, RunStoreError) else None
    if type(code) is str and code in ERROR_CODES:
        return code
    return type(error).__name__


def failure_site(error: BaseException) -> str:
    """Where ``error`` was raised: the innermost frame's module, function and line.

    Code locations only, never the message or a local value, so a log line can
    say where a failure happened without quoting what the failing code held.
    """
    tb = error.__traceback__
    if tb is None:
        return "unknown"
    while tb.tb_next is not None:
        tb = tb.tb_next
    code = tb.tb_frame.f_code
    module = tb.tb_frame.f_globals.get("__name__")
    prefix = f"{module}." if type(module) is str else ""
    return f"{prefix}{code.co_qualname}:{tb.tb_lineno}"


class Core:
    """One supervision of one run by one owner. ``run()`` is the whole job."""

    def __init__(
        self,
        store: RunStore,
        supervision: Supervision,
        *,
        clock: Clock,
        on_reconfirm: Callback | None,
        on_lapse: Callback | None,
        on_cancel_requested: Callback | None,
        interrupt: Callable[[LeaseLost], None],
    ) -> None:
        self._store = store
        self._supervision = supervision
        supervision._clock = clock
        self._run_id = supervision.run_id
        self._owner = supervision.owner
        self._clock = clock
        self._on_reconfirm = on_reconfirm
        self._on_lapse = on_lapse
        self._on_cancel_requested = on_cancel_requested
        self._interrupt = interrupt
        self._workers = _Workers("runstore-heartbeat")
        self._state = threading.Lock()
        self._ending: Ending | None = None
        self._stopping = False
        self._failing = False
        self._cancel_seen = False
        self._background: set[asyncio.Future[Any]] = set()
        self._expiry = asyncio.Lock()
        self._store_calls = 0
        self._async_calls = _AsyncCalls()

    # --- control, from any thread ---------------------------------------------

    @property
    def ending(self) -> Ending | None:
        with self._state:
            return self._ending

    def request_stop(self) -> bool:
        """The owner is leaving. True: stop the supervisor (cancel its task);
        False: it already settled and finishes on its own."""
        with self._state:
            if self._ending is not None:
                return False
            self._stopping = True
            return True

    def _settle(self, ending: Ending) -> Ending:
        """Record the first ending; later arrivals get the recorded one."""
        with self._state:
            if self._ending is not None:
                return self._ending
            if self._stopping:
                # The owner is leaving: its cancellation wins, without on_lapse.
                raise asyncio.CancelledError
            self._ending = ending
            return ending

    @property
    def _last_confirmed(self) -> int:
        return self._supervision.last_confirmed_ms

    # --- the job ----------------------------------------------------------------

    async def run(self) -> Ending:
        """Supervise until the lease ends; cancel the task to stop supervising."""
        pulses = asyncio.ensure_future(self._pulses())
        deadline = asyncio.ensure_future(self._deadline())
        ending: Ending | None = None
        try:
            done, _ = await asyncio.wait((pulses, deadline), return_when=asyncio.FIRST_COMPLETED)
            ending = next(iter(done)).result()
        finally:
            for task in (pulses, deadline, *self._background):
                task.cancel()
            await asyncio.gather(pulses, deadline, *self._background, return_exceptions=True)
            self._async_calls.cancel_all()
            self._workers.close()
            if ending is not None:
                self._event(ending.reason, ending.unconfirmed_ms)
            if ending is not None and ending.reason != "released":
                self._interrupt(ending.error(self._run_id))
            self._supervision._end()
        return ending

    async def _pulses(self) -> Ending:
        while True:
            await self._park("pulse", self._clock.now_ms() + HEARTBEAT_INTERVAL_MS)
            now = self._clock.now_ms()
            if now - self._last_confirmed >= HEARTBEAT_WRITE_TOLERANCE_MS:
                ending = await self._expire()
            else:
                ending = await self._pulse(now)
            if ending is not None:
                return ending

    async def _deadline(self) -> Ending:
        while True:
            await self._park("deadline", self._last_confirmed + HEARTBEAT_WRITE_TOLERANCE_MS)
            if self._clock.now_ms() - self._last_confirmed >= HEARTBEAT_WRITE_TOLERANCE_MS:
                ending = await self._expire()
                if ending is not None:
                    return ending

    async def _park(self, loop: str, deadline_ms: int) -> None:
        """Wait on the clock, visibly: ``Supervision.wait_idle`` watches these."""
        self._supervision._park(loop, deadline_ms)
        try:
            await self._clock.asleep_until(deadline_ms)
        finally:
            self._supervision._unpark(loop)

    def _event(self, event: str, unconfirmed_ms: int | None = None) -> None:
        """Report a supervisor event (``runstore._telemetry``)."""
        _telemetry.supervisor_event(
            event, "supervise", self._supervision._span, self._run_id, unconfirmed_ms
        )

    def _background_done(self, task: asyncio.Future[Any]) -> None:
        self._background.discard(task)
        self._supervision._busy(-1)

    async def _pulse(self, now: int) -> Ending | None:
        try:
            outcome = await self._call_store(self._store.heartbeat, self._run_id, self._owner, now)
        except asyncio.CancelledError:
            raise
        except Exception as error:
            if self.ending is None and not self._failing:
                self._failing = True
                self._event("write_failed")
                code = _error_code(error)
                logger.warning(
                    "run heartbeat write failed (run_id=%s, code=%s)",
                    self._run_id,
                    code,
                    extra={"run_id": self._run_id, "error_code": code},
                )
            return None
        if self.ending is not None:
            return None  # settled while this write was pending: nothing to renew
        if isinstance(outcome, Updated):
            # Re-arm from the timestamp sent, never from when the write returned.
            self._supervision._confirm(now)
            self._failing = False
            if self._on_cancel_requested is not None and not self._cancel_seen:
                await self._watch_cancel(now)
            return None
        return await self._fence_lost(outcome)

    async def _fence_lost(self, outcome: object) -> Ending:
        # Unbounded like the heartbeat itself: the deadline loop bounds the lease.
        if await self._released_by_owner(bound=None):
            return self._settle(Ending("released", outcome=outcome))
        ending = self._settle(Ending("fence_lost", outcome=outcome))
        if ending.reason == "fence_lost" and ending.outcome is outcome:
            logger.warning(
                "run fence lost; interrupting owned work (run_id=%s, outcome=%s)",
                self._run_id,
                type(outcome).__name__,
                extra={"run_id": self._run_id, "outcome": type(outcome).__name__},
            )
        return ending

    async def _released_by_owner(self, *, bound: int | None) -> bool:
        """Did this owner give the run up itself (a transition out of running)?

        Then a heartbeat that finds the fence gone is the work's own doing and
        the supervision ends quietly instead of interrupting it.
        """
        try:
            facts = await self._call_store(self._store.ownership_facts, self._run_id, bound=bound)
        except asyncio.CancelledError:
            raise
        except Exception:
            return False
        for fact in reversed(facts):
            if fact.owner == self._owner:
                return fact.transition == "released" and fact.granted_at_ms is None
        return False

    async def _expire(self) -> Ending | None:
        async with self._expiry:
            settled = self.ending
            if settled is not None:
                return settled
            stamp = self._clock.now_ms()
            unconfirmed = stamp - self._last_confirmed
            if unconfirmed < HEARTBEAT_WRITE_TOLERANCE_MS:
                return None  # the other loop renewed the lease meanwhile
            try:
                outcome: object = await self._call_store(
                    self._store.reconfirm,
                    self._run_id,
                    self._owner,
                    stamp,
                    bound=stamp + HEARTBEAT_INTERVAL_MS,
                )
            except asyncio.CancelledError:
                raise
            except Exception:
                outcome = None
            if isinstance(outcome, Updated):
                # An answer that arrives when the renewed budget is already
                # spent renews nothing (an exactly spent budget included).
                if stamp + HEARTBEAT_WRITE_TOLERANCE_MS <= self._clock.now_ms():
                    return await self._lapse(unconfirmed)
                self._supervision._confirm(stamp)
                self._event("reconfirmed", unconfirmed)
                if self._on_reconfirm is not None:
                    receipt_ok = await self._invoke_bounded(
                        "on_reconfirm",
                        self._on_reconfirm,
                        unconfirmed,
                        bound=stamp + HEARTBEAT_WRITE_TOLERANCE_MS,
                    )
                    if not receipt_ok:
                        return await self._lapse(unconfirmed)
                return None
            if outcome is None and self._clock.now_ms() - self._last_confirmed < (
                HEARTBEAT_WRITE_TOLERANCE_MS
            ):
                # The reconfirm failed, but a pulse that was still pending
                # landed meanwhile and renewed the lease from its own stamp.
                return None
            bound = self._clock.now_ms() + HEARTBEAT_INTERVAL_MS
            if outcome is not None and await self._released_by_owner(bound=bound):
                return self._settle(Ending("released", outcome=outcome))
            return await self._lapse(unconfirmed)

    async def _lapse(self, unconfirmed: int) -> Ending:
        ending = self._settle(Ending("lapsed", unconfirmed_ms=unconfirmed))
        if ending.reason != "lapsed" or ending.unconfirmed_ms != unconfirmed:
            return ending
        logger.warning(
            "run lease lapsed; interrupting owned work (run_id=%s, unconfirmed_ms=%s)",
            self._run_id,
            unconfirmed,
            extra={"run_id": self._run_id, "unconfirmed_ms": unconfirmed},
        )
        self._interrupt_store()
        if self._on_lapse is not None:
            await self._invoke_bounded("on_lapse", self._on_lapse, unconfirmed, bound=None)
        return ending

    def _interrupt_store(self) -> None:
        """Abort a store call that is still pending, if the store can: a
        coroutine call is cancelled (the store's own rules settle it)."""
        self._async_calls.cancel_all()
        with self._state:
            pending = self._store_calls
        interrupt = getattr(self._store, "interrupt", None)
        if pending and callable(interrupt):
            try:
                interrupt()
            except Exception as error:
                # The code or type only: the store's message may quote run state.
                code = _error_code(error)
                logger.debug(
                    "store interrupt failed (run_id=%s, code=%s)",
                    self._run_id,
                    code,
                    extra={"run_id": self._run_id, "error_code": code, "operation": "interrupt"},
                )

    async def _watch_cancel(self, now: int) -> None:
        # acknowledge_cancel is a constant-cost check (it never reads run
        # state) that answers True only when intent is present and this owner
        # still holds the run; the acknowledgement it records is exactly the
        # fact that the owner observed the request.
        # Unbounded like the heartbeat itself: the deadline loop bounds the lease.
        try:
            seen = await self._call_store(
                self._store.acknowledge_cancel, self._run_id, self._owner, now
            )
        except asyncio.CancelledError:
            raise
        except Exception:
            return
        if seen is not True or self._cancel_seen:
            return
        self._cancel_seen = True
        self._supervision.cancel_requested.set()
        callback = self._on_cancel_requested
        if callback is not None:
            # Fired in the background: a slow callback must not delay pulses.
            task = asyncio.ensure_future(
                self._invoke_bounded("on_cancel_requested", callback, bound=None)
            )
            self._background.add(task)
            self._supervision._busy(+1)
            task.add_done_callback(self._background_done)

    # --- calls and callbacks ---------------------------------------------------

    async def _call_store(
        self, fn: Callable[..., Any], *args: Any, bound: int | None = None
    ) -> Any:
        """A store call, counted so that a lapse knows whether one is pending:
        awaited on the loop when ``fn`` is a coroutine function, else run in a
        worker thread."""
        if inspect.iscoroutinefunction(fn):
            return await self._async_calls.call(fn, args, bound=bound, clock=self._clock)
        return await self._call(self._counted, fn, *args, bound=bound)

    def _counted(self, fn: Callable[..., T], *args: Any) -> T:
        with self._state:
            self._store_calls += 1
        try:
            return fn(*args)
        finally:
            with self._state:
                self._store_calls -= 1

    async def _call(self, fn: Callable[..., T], *args: Any, bound: int | None = None) -> T:
        """Run a blocking call in a worker thread; with ``bound``, give up
        (``_TimedOut``) when the clock reaches it first."""
        future = self._workers.submit(fn, args)
        try:
            if bound is None:
                return await future
            return await self._await_bounded(future, bound)
        finally:
            if not future.done():
                future.cancel()

    async def _await_bounded(self, awaitable: Awaitable[T], bound: int) -> T:
        work = asyncio.ensure_future(awaitable)
        timer = asyncio.ensure_future(self._clock.asleep_until(bound))
        try:
            await asyncio.wait((work, timer), return_when=asyncio.FIRST_COMPLETED)
        finally:
            timer.cancel()
            if not work.done():
                work.cancel()
        # Let the cancelled timer leave the clock before anyone counts sleepers.
        await asyncio.gather(timer, return_exceptions=True)
        if work.done() and not work.cancelled():
            return work.result()
        raise _TimedOut

    async def _invoke_bounded(
        self, name: str, callback: Callback, *args: Any, bound: int | None
    ) -> bool:
        """Run the callback ``name`` to completion, or until ``bound``. True if
        it finished in time without raising."""
        try:
            if inspect.iscoroutinefunction(callback):
                awaitable: Awaitable[object] = callback(*args)
            else:
                awaitable = self._call_then_await(callback, *args)
            if bound is None:
                await awaitable
            else:
                await self._await_bounded(awaitable, bound)
        except asyncio.CancelledError:
            raise
        except _TimedOut:
            return False
        except Exception as error:
            # The type and the callback only, at every level: the callback's
            # message, its traceback's text and its locals may quote run state.
            kind = type(error).__name__
            logger.warning(
                "run supervisor callback failed (run_id=%s, callback=%s, error=%s)",
                self._run_id,
                name,
                kind,
                extra={"run_id": self._run_id, "callback": name, "error_type": kind},
            )
            return False
        return True

    async def _call_then_await(self, callback: Callback, *args: Any) -> object:
        result = await self._call(callback, *args)
        if inspect.isawaitable(result):
            return await result
        return result
