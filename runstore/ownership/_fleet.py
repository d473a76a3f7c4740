"""``Fleet``: many runs of one owner kept alive with one ``heartbeat_many`` per pulse.

``supervise`` runs one supervisor per run, and each pulses on its own: an
owner holding ten thousand runs would send ten thousand heartbeats a second.
A fleet sends one ``heartbeat_many`` for all of them and gives each run the
answer ``supervise`` would have acted on, with the same rules per run:

- every ``HEARTBEAT_INTERVAL_MS`` one ``heartbeat_many`` with the clock's
  reading; ``Updated`` re-arms that run's budget from the timestamp sent;
- any other answer means another owner holds that run (or it is gone): its
  supervision ends with ``LeaseLost(reason="fence_lost")``, unless this owner
  released the run itself (its last fact is its own release), which ends it
  quietly; the other runs are not affected;
- a failed write is tolerated (logged once per outage); a run whose lease went
  unconfirmed for ``HEARTBEAT_WRITE_TOLERANCE_MS`` gets one ``reconfirm`` of
  its own, bounded by one interval, which renews it or ends it with
  ``LeaseLost(reason="lapsed")``. A write that never returns is bounded by the
  earliest budget it covers.

Each run's ``Supervision`` (``lost``, ``check()``, ``error``,
``last_confirmed_ms``) is the one ``supervise`` hands out. ``hold(run_id)``
is the per-run ``with`` block: it raises ``LeaseLost`` in the holding thread
when that run is lost (CPython; ``interrupt_thread=False`` turns that off) and
from the block's exit. ``on_lost(error)`` is called for every run lost.

A fleet has two faces. ``with supervise_many(...) as fleet:`` runs it on its
own event loop in one helper thread; store calls run in daemon worker threads,
awaited with the clock as a bound. ``async with supervise_many(...) as
fleet:`` runs it as a task on the caller's loop, and ``fleet.ahold(run_id)``
is the per-run ``async with`` block: a lost run cancels the task holding it
and the block raises ``LeaseLost``, as ``asupervise`` does. On that face an
asyncio store (its operations coroutine functions, as
``runstore.aio.AsyncRunStore``'s) is awaited on the loop with the same bounds
and no worker thread; a call that outlives its bound is cancelled and left to
the store's own rules, never waited for (see ``_core``). The thread face
refuses an asyncio store (``InvalidRunError``). Time is read only through the
injected ``Clock``; tests drive a ``ManualClock`` and call ``wait_idle()``
after each move. This module adds no cancellation watching and no
``on_reconfirm``/``on_lapse`` callbacks: use ``supervise`` for those.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from types import TracebackType
from typing import Any, Literal

from .. import _telemetry
from .._boundary import admit_identifier, admit_owner
from .._clock import Clock
from .._constants import HEARTBEAT_INTERVAL_MS, HEARTBEAT_WRITE_TOLERANCE_MS
from .._errors import InvalidRunError
from .._outcomes import Updated
from .._values import OwnerId
from ..consensus._admit import missing_methods
from ._core import (
    _IDLE_POLL_S,
    LeaseLost,
    Supervision,
    _AsyncCalls,
    _error_code,
    _forget_injected,
    _remember_injected,
    _TimedOut,
    _Workers,
)
from ._faces import _clear_async_exc, _set_async_exc, refuse_async_store

logger = logging.getLogger("runstore.ownership")

_STORE_METHODS = ("heartbeat_many", "reconfirm", "ownership_facts")


class _Member:
    """One run of the fleet: its supervision and who holds it (a thread, or a
    task on the async face)."""

    __slots__ = ("cancelled_work", "holder", "injected", "supervision", "task")

    def __init__(self, supervision: Supervision) -> None:
        self.supervision = supervision
        self.holder: int | None = None
        self.injected = False
        self.task: asyncio.Task[Any] | None = None
        self.cancelled_work = False


class Fleet:
    """Keeps the leases of many runs of one owner alive; see the module docstring.

    Build it with ``supervise_many``; ``with`` starts and stops its helper
    thread, ``async with`` its task on the running loop (the face an asyncio
    store needs). ``add`` and ``discard`` change the runs it keeps (a worker
    adds the runs ``claim_next`` gives it); ``fleet[run_id]`` is a run's
    ``Supervision``; ``hold`` (threads) and ``ahold`` (tasks) wrap one run's
    work.

    ``Fleet(store, owner, clock=..., on_lost=..., interrupt_thread=...)``:
    ``owner``'s leases in ``store`` are kept on ``clock``; ``on_lost(error)``
    is called with each run's ``LeaseLost``; ``interrupt_thread`` (CPython)
    raises it in the thread holding that run (``hold``), as ``supervise``
    does.
    """

    def __init__(
        self,
        store: Any,
        owner: OwnerId,
        *,
        clock: Clock,
        on_lost: Callable[[LeaseLost], object] | None = None,
        interrupt_thread: bool = True,
    ) -> None:
        self._store = store
        self._owner = owner
        self._clock = clock
        self._on_lost = on_lost
        self._interrupt_thread = interrupt_thread and _set_async_exc is not None
        self._members: dict[str, _Member] = {}
        self._lock = threading.Condition()
        self._parked_until: int | None = None
        self._busy = 0
        self._failing = False
        self._workers = _Workers("runstore-fleet")
        self._async_calls = _AsyncCalls()
        self._async_face = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._thread: threading.Thread | None = None
        self._started = False

    # -- the runs --------------------------------------------------------------------

    def add(self, run_id: str) -> Supervision:
        """Keep ``run_id``'s lease from now on (its budget starts now). A run kept
        already gives its current ``Supervision``; one whose lease was lost starts
        over with a new one (the owner took the run back)."""
        rid = admit_identifier("Fleet.add", "run_id", run_id)
        with self._lock:
            member = self._members.get(rid)
            if member is None or member.supervision._ended or member.supervision.error:
                member = _Member(Supervision(rid, self._owner, self._clock.now_ms()))
                member.supervision._clock = self._clock
                self._members[rid] = member
            return member.supervision

    def discard(self, run_id: str) -> None:
        """Stop keeping ``run_id``'s lease (the owner settled or left it)."""
        with self._lock:
            member = self._members.pop(run_id, None)
        if member is not None:
            member.supervision._end()

    def _discard_member(self, member: _Member) -> None:
        """Stop keeping ``member``'s run, unless the run was added again since
        (a newer member keeps it now): a block leaving ends only its own holding."""
        run_id = member.supervision.run_id
        with self._lock:
            if self._members.get(run_id) is member:
                del self._members[run_id]
        member.supervision._end()

    def __getitem__(self, run_id: str) -> Supervision:
        with self._lock:
            return self._members[run_id].supervision

    def __contains__(self, run_id: object) -> bool:
        with self._lock:
            return run_id in self._members

    @property
    def run_ids(self) -> list[str]:
        """The runs kept now, in run id order."""
        with self._lock:
            return sorted(self._members)

    @contextlib.contextmanager
    def hold(self, run_id: str) -> Iterator[Supervision]:
        """The owned work of ``run_id``, in the calling thread: ``with fleet.hold(run_id) as
        lease:`` keeps the run (``add``), gives its ``Supervision``, raises ``LeaseLost`` here
        when that run's lease is lost (asynchronously with ``interrupt_thread``) and from the
        exit; leaving the block stops keeping the run."""
        supervision = self.add(run_id)
        with self._lock:
            member = self._members[supervision.run_id]
            member.holder = threading.get_ident()
        exc: BaseException | None = None
        try:
            yield supervision
        except BaseException as error:
            exc = error
            raise
        finally:
            with self._lock:
                member.holder = None
                if member.injected and _clear_async_exc is not None:
                    _clear_async_exc(threading.get_ident(), None)
                    _forget_injected(threading.get_ident())
            self._discard_member(member)
            lost = supervision.error
            if lost is not None and not isinstance(exc, LeaseLost):
                if exc is None:
                    raise lost
                raise lost from exc

    def ahold(self, run_id: str) -> _AsyncHold:
        """The owned work of ``run_id``, in the calling task, on a fleet entered with
        ``async with``: ``async with fleet.ahold(run_id) as lease:`` keeps the run
        (``add``) and gives its ``Supervision``; when that run's lease is lost the
        task is cancelled and the block raises ``LeaseLost`` (a cancellation from
        anyone else still propagates as ``CancelledError``). Leaving the block
        stops keeping the run."""
        return _AsyncHold(self, admit_identifier("Fleet.ahold", "run_id", run_id))

    # -- lifetime ----------------------------------------------------------------------

    def __enter__(self) -> Fleet:
        if self._started:
            raise RuntimeError("a fleet is entered once")
        refuse_async_store(self._store, "supervise_many", _STORE_METHODS, "async with")
        self._started = True
        ready = threading.Event()
        self._thread = threading.Thread(
            target=self._main, args=(ready,), name="runstore-fleet", daemon=True
        )
        self._thread.start()
        ready.wait()
        return self

    def __exit__(self, *_exc: object) -> None:
        loop, task = self._loop, self._task
        if loop is not None and task is not None:
            with contextlib.suppress(RuntimeError):  # the loop already closed
                loop.call_soon_threadsafe(task.cancel)
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            members = list(self._members.values())
            self._members.clear()
            self._parked_until = None
            self._lock.notify_all()
        for member in members:
            member.supervision._end()

    async def __aenter__(self) -> Fleet:
        if self._started:
            raise RuntimeError("a fleet is entered once")
        self._started = True
        self._async_face = True
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.ensure_future(self._run())
        self._task.add_done_callback(self._run_done)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        task = self._task
        if task is not None:
            task.cancel()
            # Prompt: the fleet's own store calls are never waited for once cancelled.
            await asyncio.wait((task,))
        self._async_calls.cancel_all()
        with self._lock:
            members = list(self._members.values())
            self._members.clear()
            self._parked_until = None
            self._lock.notify_all()
        for member in members:
            member.supervision._end()
        self._workers.close()

    def _run_done(self, task: asyncio.Future[None]) -> None:
        if task.cancelled():
            return
        error = task.exception()
        if error is None:
            return
        # A fleet that died keeps no lease: every run is lost.
        kind = type(error).__name__
        logger.error("run fleet failed (error=%s)", kind, extra={"error_type": kind})
        for run_id in self.run_ids:
            self._lose(run_id, "lapsed", unconfirmed_ms=None, outcome=None)

    def _main(self, ready: threading.Event) -> None:
        loop = asyncio.new_event_loop()
        try:
            self._task = loop.create_task(self._run())
            self._loop = loop
            ready.set()
            with contextlib.suppress(asyncio.CancelledError):
                loop.run_until_complete(self._task)
        except BaseException as error:
            # A fleet that died keeps no lease: every run is lost.
            kind = type(error).__name__
            logger.error("run fleet failed (error=%s)", kind, extra={"error_type": kind})
            for run_id in self.run_ids:
                self._lose(run_id, "lapsed", unconfirmed_ms=None, outcome=None)
        finally:
            ready.set()
            self._workers.close()
            loop.close()

    def wait_idle(self, timeout_s: float = 5.0) -> bool:
        """Block until the fleet waits for a moment still in the future with no store call in flight
        (or has stopped); True then, False when that did not happen within ``timeout_s`` seconds
        of real time. For ``ManualClock`` tests."""
        looks = max(1, int(timeout_s / _IDLE_POLL_S))
        with self._lock:
            for _ in range(looks):
                if self._idle():
                    return True
                self._lock.wait(_IDLE_POLL_S)
            return self._idle()

    def _idle(self) -> bool:
        if self._thread is not None and not self._thread.is_alive():
            return True
        task = self._task
        if self._async_face and task is not None and task.done():
            return True
        until = self._parked_until
        return self._busy == 0 and until is not None and until > self._clock.now_ms()

    # -- the job -------------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            await self._park(self._clock.now_ms() + HEARTBEAT_INTERVAL_MS)
            # As supervise: a run whose budget is spent is reconfirmed, not
            # pulsed; the pulse covers the rest, bounded by their budgets.
            now = self._clock.now_ms()
            await self._expire(now)
            await self._pulse(now)
            await self._expire(self._clock.now_ms())

    async def _park(self, deadline_ms: int) -> None:
        with self._lock:
            self._parked_until = deadline_ms
            self._lock.notify_all()
        try:
            await self._clock.asleep_until(deadline_ms)
        finally:
            with self._lock:
                self._parked_until = None

    def _live(self) -> dict[str, Supervision]:
        with self._lock:
            return {
                run_id: member.supervision
                for run_id, member in self._members.items()
                if not member.supervision._ended and member.supervision.error is None
            }

    async def _pulse(self, now: int) -> None:
        live = {
            run_id: supervision
            for run_id, supervision in self._live().items()
            if now - supervision.last_confirmed_ms < HEARTBEAT_WRITE_TOLERANCE_MS
        }
        if not live:
            return
        ids = sorted(live)
        bound = min(s.last_confirmed_ms for s in live.values()) + HEARTBEAT_WRITE_TOLERANCE_MS
        try:
            answers = await self._call(
                self._store.heartbeat_many, self._owner, ids, now, bound=bound
            )
        except asyncio.CancelledError:
            raise
        except Exception as error:
            if not self._failing and not isinstance(error, _TimedOut):
                self._failing = True
                for run_id in ids:
                    self._event("write_failed", live[run_id])
                code = _error_code(error)
                logger.warning(
                    "run fleet heartbeat failed (runs=%s, code=%s)",
                    len(ids),
                    code,
                    extra={"runs": len(ids), "error_code": code},
                )
            return
        self._failing = False
        for run_id in ids:
            answer = answers.get(run_id) if isinstance(answers, dict) else None
            supervision = live[run_id]
            if isinstance(answer, Updated):
                # Re-arm from the timestamp sent, never from when it returned.
                supervision._confirm(now)
            elif await self._released_by_owner(run_id):
                self._event("released", supervision)
                self.discard(run_id)
            else:
                logger.warning(
                    "run fence lost; interrupting owned work (run_id=%s, outcome=%s)",
                    run_id,
                    type(answer).__name__,
                    extra={"run_id": run_id, "outcome": type(answer).__name__},
                )
                self._lose(run_id, "fence_lost", unconfirmed_ms=None, outcome=answer)

    async def _expire(self, now: int) -> None:
        for run_id, supervision in sorted(self._live().items()):
            unconfirmed = now - supervision.last_confirmed_ms
            if unconfirmed < HEARTBEAT_WRITE_TOLERANCE_MS:
                continue
            try:
                outcome: object = await self._call(
                    self._store.reconfirm,
                    run_id,
                    self._owner,
                    now,
                    bound=now + HEARTBEAT_INTERVAL_MS,
                )
            except asyncio.CancelledError:
                raise
            except Exception:
                outcome = None
            if isinstance(outcome, Updated) and now + HEARTBEAT_WRITE_TOLERANCE_MS > (
                self._clock.now_ms()
            ):
                supervision._confirm(now)
                self._event("reconfirmed", supervision, unconfirmed)
                continue
            if outcome is not None and await self._released_by_owner(run_id):
                self._event("released", supervision)
                self.discard(run_id)
                continue
            logger.warning(
                "run lease lapsed; interrupting owned work (run_id=%s, unconfirmed_ms=%s)",
                run_id,
                unconfirmed,
                extra={"run_id": run_id, "unconfirmed_ms": unconfirmed},
            )
            self._lose(run_id, "lapsed", unconfirmed_ms=unconfirmed, outcome=None)

    async def _released_by_owner(self, run_id: str) -> bool:
        """Did this owner release the run itself (its last fact)?"""
        try:
            facts = await self._call(self._store.ownership_facts, run_id, bound=None)
        except asyncio.CancelledError:
            raise
        except Exception:
            return False
        for fact in reversed(facts):
            if fact.owner == self._owner:
                return bool(fact.transition == "released" and fact.granted_at_ms is None)
        return False

    def _lose(
        self, run_id: str, reason: Any, *, unconfirmed_ms: int | None, outcome: object
    ) -> None:
        with self._lock:
            member = self._members.get(run_id)
        if member is None:
            return
        if reason == "lapsed":
            message = f"the lease of run {run_id!r} lapsed after {unconfirmed_ms} ms"
        else:
            message = f"run {run_id!r} is no longer owned by this owner ({outcome!r})"
        error = LeaseLost(
            message, run_id=run_id, reason=reason, unconfirmed_ms=unconfirmed_ms, outcome=outcome
        )
        first = member.supervision.error is None
        member.supervision._lose(error)
        if first:
            self._event(reason, member.supervision, unconfirmed_ms)
        with self._lock:
            holder = member.holder
            if holder is not None and self._interrupt_thread and _set_async_exc is not None:
                _remember_injected(holder, error)
                member.injected = True
                _set_async_exc(holder, LeaseLost)
            task = member.task if not member.cancelled_work else None
            if task is not None:
                member.cancelled_work = True
        if task is not None:
            # On the async face, on the loop: the holding task sees the
            # cancellation at its next await and its block raises LeaseLost.
            task.cancel(msg="runstore: the run's lease was lost")
        if self._on_lost is not None:
            try:
                self._on_lost(error)
            except Exception as failure:
                kind = type(failure).__name__
                logger.warning(
                    "run fleet callback failed (run_id=%s, error=%s)",
                    run_id,
                    kind,
                    extra={"run_id": run_id, "callback": "on_lost", "error_type": kind},
                )

    def _event(
        self, event: str, supervision: Supervision, unconfirmed_ms: int | None = None
    ) -> None:
        """Report a supervisor event of one run (``runstore._telemetry``)."""
        _telemetry.supervisor_event(
            event, "fleet", supervision._span, supervision.run_id, unconfirmed_ms
        )

    async def _call(self, fn: Callable[..., Any], *args: Any, bound: int | None) -> Any:
        if inspect.iscoroutinefunction(fn):
            with self._lock:
                self._busy += 1
            try:
                return await self._async_calls.call(fn, args, bound=bound, clock=self._clock)
            finally:
                with self._lock:
                    self._busy -= 1
                    self._lock.notify_all()
        with self._lock:
            self._busy += 1
        future = self._workers.submit(fn, args)
        try:
            if bound is None:
                return await future
            timer = asyncio.ensure_future(self._clock.asleep_until(bound))
            try:
                await asyncio.wait((future, timer), return_when=asyncio.FIRST_COMPLETED)
            finally:
                timer.cancel()
                await asyncio.gather(timer, return_exceptions=True)
            if future.done() and not future.cancelled():
                return future.result()
            raise _TimedOut
        finally:
            if not future.done():
                future.cancel()
            with self._lock:
                self._busy -= 1
                self._lock.notify_all()


class _AsyncHold:
    """What ``Fleet.ahold`` returns: one run's work in one task, interrupted by
    cancellation when that run's lease is lost (``asupervise``'s rules)."""

    def __init__(self, fleet: Fleet, run_id: str) -> None:
        self._fleet = fleet
        self._run_id = run_id
        self._member: _Member | None = None
        self._task: asyncio.Task[Any] | None = None

    async def __aenter__(self) -> Supervision:
        fleet = self._fleet
        if not fleet._async_face:
            raise RuntimeError("Fleet.ahold needs a fleet entered with async with")
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("Fleet.ahold must be used inside an asyncio task")
        supervision = fleet.add(self._run_id)
        with fleet._lock:
            member = fleet._members[self._run_id]
            member.task = task
            member.cancelled_work = False
        self._member, self._task = member, task
        return supervision

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> Literal[False]:
        fleet, member, task = self._fleet, self._member, self._task
        assert member is not None
        assert task is not None
        with fleet._lock:
            member.task = None
            cancelled = member.cancelled_work
        fleet._discard_member(member)
        error = member.supervision.error
        if cancelled:
            if task.uncancel() > 0:
                return False  # someone else cancelled the holder too: theirs wins
        elif isinstance(exc, asyncio.CancelledError):
            return False  # the holder was cancelled by someone else
        if error is None or isinstance(exc, LeaseLost):
            return False
        if exc is None or isinstance(exc, asyncio.CancelledError):
            raise error
        raise error from exc


def supervise_many(
    store: Any,
    owner: OwnerId,
    run_ids: Iterable[str] = (),
    *,
    clock: Clock,
    on_lost: Callable[[LeaseLost], object] | None = None,
    interrupt_thread: bool = True,
) -> Fleet:
    """Keep ``owner``'s leases on ``run_ids`` (and any added later) in ``store``
    alive with one ``heartbeat_many`` per pulse on ``clock``: ``with
    supervise_many(...) as fleet:`` (a helper thread), or ``async with`` (a
    task on the running loop; the face an asyncio store such as
    ``runstore.aio.AsyncRunStore`` needs, whose calls are awaited there).
    ``store`` needs ``heartbeat_many``, ``reconfirm`` and ``ownership_facts``
    (else ``InvalidRunError``, and from ``with`` for an asyncio store);
    ``on_lost`` and ``interrupt_thread`` are ``Fleet``'s.

    Each run keeps ``supervise``'s rules (see ``Fleet``): a lost fence or a
    lapse ends that run's supervision with ``LeaseLost`` (``fleet[run_id]``,
    ``fleet.hold(run_id)``, ``on_lost``) and no other's.
    """
    missing = missing_methods(store, _STORE_METHODS)
    if missing:
        detail = f"must be a run store (missing or not callable: {', '.join(missing)})"
        raise InvalidRunError(
            "supervise_many", {"field": "store", "detail": detail, "missing": missing}
        )
    who = admit_owner("supervise_many", "owner", owner)
    fleet = Fleet(store, who, clock=clock, on_lost=on_lost, interrupt_thread=interrupt_thread)
    for run_id in run_ids:
        fleet.add(admit_identifier("supervise_many", "run_id", run_id))
    return fleet
