"""The two faces of the supervisor: ``supervise`` (threads) and ``asupervise`` (asyncio).

Both run the same ``Core``. They differ only in where it runs and how an
ending reaches the owned work:

- ``asupervise`` runs the core as a task on the caller's loop; a lost lease
  cancels the block's task and the ``async with`` raises ``LeaseLost``.
- ``supervise`` runs the core on a private event loop in a helper thread; the
  block's work keeps the caller's thread. A lost lease sets
  ``Supervision.lost``, raises ``LeaseLost`` asynchronously in the work thread
  (unless ``interrupt_thread=False``) and, in every case, raises ``LeaseLost``
  when the block exits.

An asyncio store (its operations coroutine functions, as
``runstore.aio.AsyncRunStore``'s) is driven natively by ``asupervise``, on
the caller's loop. ``supervise`` refuses one (``InvalidRunError``): its block
runs in a thread, which cannot await the store, and its helper loop would
have to outlive the block (or hold its exit back) while a cancelled write
settles.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import sys
import threading
from types import TracebackType
from typing import Literal

from .._boundary import admit_identifier, admit_owner
from .._clock import Clock
from .._errors import InvalidRunError
from .._protocol import RunStore
from .._values import OwnerId
from ..consensus._admit import missing_methods
from ._core import (
    Callback,
    Core,
    Ending,
    LeaseLost,
    Supervision,
    _forget_injected,
    _remember_injected,
    coroutine_methods,
    failure_site,
)

logger = logging.getLogger("runstore.ownership")

# PyThreadState_SetAsyncExc(thread id, exception type or NULL): schedule (or,
# with NULL, withdraw) an exception in another thread. CPython only; called
# through our own prototypes so the shared ctypes.pythonapi stays untouched.
_set_async_exc = None
_clear_async_exc = None
if sys.implementation.name == "cpython":  # pragma: no branch
    _set_async_exc = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_ulong, ctypes.py_object)(
        ("PyThreadState_SetAsyncExc", ctypes.pythonapi)
    )
    _clear_async_exc = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p)(
        ("PyThreadState_SetAsyncExc", ctypes.pythonapi)
    )


def _crashed(run_id: str) -> LeaseLost:
    return LeaseLost(
        f"the supervisor of run {run_id!r} failed; the lease is no longer kept",
        run_id=run_id,
        reason="lapsed",
    )


def _log_crash(run_id: str, error: BaseException) -> None:
    """Log a supervisor that died: the error's type and where it was raised.

    Never the message or the traceback's text (no ``exc_info``): the failure
    may come from a store or a callback of the caller's, whose message may
    quote run state.
    """
    kind, site = type(error).__name__, failure_site(error)
    logger.error(
        "run supervisor failed (run_id=%s, error=%s, at=%s)",
        run_id,
        kind,
        site,
        extra={"run_id": run_id, "error_type": kind, "failure_site": site},
    )


#: What a supervisor calls on its store: anything offering these is a store
#: (a wrapper that delegates, ``NoopRunStore``, a test double).
_STORE_METHODS = ("heartbeat", "reconfirm", "ownership_facts", "acknowledge_cancel")


def _admit(store: object, run_id: object, owner: object, method: str) -> tuple[str, OwnerId]:
    missing = missing_methods(store, _STORE_METHODS)
    if missing:
        detail = f"must be a run store (missing or not callable: {', '.join(missing)})"
        raise InvalidRunError(method, {"field": "store", "detail": detail, "missing": missing})
    return admit_identifier(method, "run_id", run_id), admit_owner(method, "owner", owner)


def refuse_async_store(store: object, method: str, names: tuple[str, ...], instead: str) -> None:
    """``InvalidRunError`` when ``store`` offers any of ``names`` as coroutine
    functions: a thread face cannot drive an asyncio store."""
    found = coroutine_methods(store, names)
    if found:
        detail = f"an asyncio store (its operations are coroutine functions): use {instead}"
        raise InvalidRunError(method, {"field": "store", "detail": detail, "coroutines": found})


class ThreadSupervisor:
    """The context manager ``supervise`` returns; enter it once (a second ``with`` raises
    ``RuntimeError``). Build it with ``supervise``, which takes the same parameters: ``store``,
    ``run_id``, ``owner``, ``clock``, ``on_reconfirm``, ``on_lapse``, ``on_cancel_requested`` and
    ``interrupt_thread``. Entering starts the helper thread and gives the block its
    ``Supervision``."""

    def __init__(
        self,
        store: RunStore,
        run_id: str,
        owner: OwnerId,
        *,
        clock: Clock,
        on_reconfirm: Callback | None,
        on_lapse: Callback | None,
        on_cancel_requested: Callback | None,
        interrupt_thread: bool,
    ) -> None:
        self._store = store
        self._run_id, self._owner = _admit(store, run_id, owner, "supervise")
        refuse_async_store(store, "supervise", _STORE_METHODS, "asupervise")
        self._clock = clock
        self._callbacks = (on_reconfirm, on_lapse, on_cancel_requested)
        self._interrupt_thread = interrupt_thread and _set_async_exc is not None
        self._gate = threading.Lock()
        self._block_done = False
        self._injected = False
        self._entered = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[Ending] | None = None

    def __enter__(self) -> Supervision:
        if self._entered:
            raise RuntimeError("a supervisor is entered once")
        self._entered = True
        self._work_thread = threading.get_ident()
        # The budget starts when supervision starts, read in the owner's thread.
        self._supervision = Supervision(self._run_id, self._owner, self._clock.now_ms())
        on_reconfirm, on_lapse, on_cancel_requested = self._callbacks
        self._core = Core(
            self._store,
            self._supervision,
            clock=self._clock,
            on_reconfirm=on_reconfirm,
            on_lapse=on_lapse,
            on_cancel_requested=on_cancel_requested,
            interrupt=self._interrupt,
        )
        ready = threading.Event()
        self._thread = threading.Thread(
            target=self._main, args=(ready,), name="runstore-supervise", daemon=True
        )
        self._thread.start()
        ready.wait()
        return self._supervision

    def _main(self, ready: threading.Event) -> None:
        loop = asyncio.new_event_loop()
        try:
            self._task = loop.create_task(self._core.run())
            self._loop = loop
            ready.set()
            with contextlib.suppress(asyncio.CancelledError):
                loop.run_until_complete(self._task)
        except BaseException as error:
            # A supervisor that died cannot keep the lease: stop the work.
            _log_crash(self._run_id, error)
            self._interrupt(_crashed(self._run_id))
        finally:
            ready.set()
            try:
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                loop.close()

    def _interrupt(self, error: LeaseLost) -> None:
        # Runs in the helper thread once the core has settled a loss.
        self._supervision._lose(error)
        with self._gate:
            if self._block_done or not self._interrupt_thread or _set_async_exc is None:
                return
            _remember_injected(self._work_thread, error)
            self._injected = True
            _set_async_exc(self._work_thread, LeaseLost)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> Literal[False]:
        with self._gate:
            self._block_done = True
            if self._injected and _clear_async_exc is not None:
                # Withdraw an injected exception not yet delivered: it must
                # never surface after the block.
                _clear_async_exc(self._work_thread, None)
                _forget_injected(self._work_thread)
        if self._core.request_stop():
            loop, task = self._loop, self._task
            if loop is not None and task is not None:
                with contextlib.suppress(RuntimeError):  # the loop already closed
                    loop.call_soon_threadsafe(task.cancel)
        self._thread.join()
        error = self._supervision.error
        if error is None or isinstance(exc, LeaseLost):
            return False
        if exc is None:
            raise error
        raise error from exc


class AsyncSupervisor:
    """The async context manager ``asupervise`` returns; enter it once (a second ``async with``
    raises ``RuntimeError``, and so does entering it outside an asyncio task). Build it with
    ``asupervise``, which takes the same parameters: ``store``, ``run_id``, ``owner``, ``clock``,
    ``on_reconfirm``, ``on_lapse`` and ``on_cancel_requested``. Entering starts the supervising
    task and gives the block its ``Supervision``."""

    def __init__(
        self,
        store: RunStore,
        run_id: str,
        owner: OwnerId,
        *,
        clock: Clock,
        on_reconfirm: Callback | None,
        on_lapse: Callback | None,
        on_cancel_requested: Callback | None,
    ) -> None:
        self._store = store
        self._run_id, self._owner = _admit(store, run_id, owner, "asupervise")
        self._clock = clock
        self._callbacks = (on_reconfirm, on_lapse, on_cancel_requested)
        self._block_done = False
        self._cancelled_work = False
        self._entered = False

    async def __aenter__(self) -> Supervision:
        if self._entered:
            raise RuntimeError("a supervisor is entered once")
        self._entered = True
        work = asyncio.current_task()
        if work is None:
            raise RuntimeError("asupervise must be used inside an asyncio task")
        self._work = work
        self._supervision = Supervision(self._run_id, self._owner, self._clock.now_ms())
        on_reconfirm, on_lapse, on_cancel_requested = self._callbacks
        self._core = Core(
            self._store,
            self._supervision,
            clock=self._clock,
            on_reconfirm=on_reconfirm,
            on_lapse=on_lapse,
            on_cancel_requested=on_cancel_requested,
            interrupt=self._interrupt,
        )
        self._task = asyncio.ensure_future(self._core.run())
        self._task.add_done_callback(self._core_done)
        return self._supervision

    def _core_done(self, task: asyncio.Future[Ending]) -> None:
        if task.cancelled():
            return
        error = task.exception()
        if error is None:
            return
        # A supervisor that died cannot keep the lease: stop the work.
        _log_crash(self._run_id, error)
        self._interrupt(_crashed(self._run_id))

    def _interrupt(self, error: LeaseLost) -> None:
        # Runs on the loop, in the core's task, once the core settled a loss.
        self._supervision._lose(error)
        if not self._block_done:
            self._cancelled_work = True
            self._work.cancel(msg="runstore: the run's lease was lost")

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> Literal[False]:
        self._block_done = True
        if self._core.request_stop():
            self._task.cancel()
        # Wait for the core without letting its cancellation become ours.
        await asyncio.wait((self._task,))
        error = self._supervision.error
        if self._cancelled_work:
            if self._work.uncancel() > 0:
                # Someone else cancelled the owner too: their cancellation wins.
                return False
        elif isinstance(exc, asyncio.CancelledError):
            return False  # the owner was cancelled by someone else
        if error is None or isinstance(exc, LeaseLost):
            return False
        if exc is None or isinstance(exc, asyncio.CancelledError):
            raise error
        raise error from exc


def supervise(
    store: RunStore,
    run_id: str,
    owner: OwnerId,
    *,
    clock: Clock,
    on_reconfirm: Callback | None = None,
    on_lapse: Callback | None = None,
    on_cancel_requested: Callback | None = None,
    interrupt_thread: bool = True,
) -> ThreadSupervisor:
    """Keep ``owner``'s lease on ``run_id`` in ``store`` alive while a ``with``
    block works: ``with supervise(store, run_id, owner, clock=clock) as lease:``.
    ``store`` is anything with ``heartbeat``, ``reconfirm``, ``ownership_facts``
    and ``acknowledge_cancel`` (else ``InvalidRunError``, as for an
    inadmissible ``run_id`` or ``owner``, and for an asyncio store, whose
    operations are coroutine functions: supervise that one with
    ``asupervise``); the block gets a ``Supervision``.

    The block runs in the caller's thread; a helper thread heartbeats every
    ``HEARTBEAT_INTERVAL_MS`` on ``clock`` (the store's clock). The work is
    interrupted, and ``LeaseLost`` raised from the ``with`` statement, when a
    heartbeat finds another owner (``reason="fence_lost"``) or when writes
    failed for ``HEARTBEAT_WRITE_TOLERANCE_MS`` and the final ``reconfirm``
    did not renew the lease (``reason="lapsed"``, after ``on_lapse``).
    ``on_reconfirm(unconfirmed_ms)`` runs after a reconfirmation renewed the
    lease and must return before the renewed budget ends, or the lease lapses.
    ``on_cancel_requested()`` runs once, when a pulse finds cancellation intent
    on the run (the supervisor then records the owner's acknowledgement).
    Callbacks may be plain functions (run in a worker thread) or coroutine
    functions (run on the helper's event loop).

    Interruption: with ``interrupt_thread=True`` (the default, CPython only)
    ``LeaseLost`` is raised asynchronously in the work thread the moment the
    lease is lost, at the next point where that thread runs Python code; a
    thread blocked in a C call (``time.sleep``, a socket read) sees it when the
    call returns. With ``False`` nothing is injected: the work looks at
    ``lease.lost`` or calls ``lease.check()`` between steps. Either way the
    block's exit raises ``LeaseLost`` if the lease was lost while it ran, and
    leaving the block (normally or with an exception) stops the supervisor
    without ``on_lapse``. If the work settles or suspends the run itself, the
    supervisor notices that its own owner released it and ends quietly.

    ``on_lapse`` runs before the work is interrupted and the block's exit waits
    for it, so keep it short. Tests that drive a ``ManualClock`` call
    ``lease.wait_idle()`` after each move to let the supervisor react.
    """
    return ThreadSupervisor(
        store,
        run_id,
        owner,
        clock=clock,
        on_reconfirm=on_reconfirm,
        on_lapse=on_lapse,
        on_cancel_requested=on_cancel_requested,
        interrupt_thread=interrupt_thread,
    )


def asupervise(
    store: RunStore,
    run_id: str,
    owner: OwnerId,
    *,
    clock: Clock,
    on_reconfirm: Callback | None = None,
    on_lapse: Callback | None = None,
    on_cancel_requested: Callback | None = None,
) -> AsyncSupervisor:
    """The asyncio face of ``supervise``: ``async with asupervise(store, run_id,
    owner, clock=clock) as lease:`` keeps ``owner``'s lease on ``run_id`` in
    ``store`` alive, heartbeating on ``clock``, with the same
    ``on_reconfirm``, ``on_lapse`` and ``on_cancel_requested`` callbacks and
    the same ``LeaseLost`` rules.

    The supervisor runs as a task on the running loop. A blocking store's
    calls run in worker threads, so the loop never waits on the database; an
    asyncio store's (``runstore.aio.AsyncRunStore``: its operations are
    coroutine functions) are awaited on the loop, each as a task of its own,
    with no worker thread. Such a call still pending when its bound (the
    lease's budget) or the supervision ends is cancelled and not waited for:
    the store settles it by its own rules, and ``LeaseLost`` is not held back
    by its ``cancel_grace_s``. A lost lease cancels the task running the
    block and the ``async with`` raises ``LeaseLost`` (a cancellation from
    anyone else still propagates as ``CancelledError``, without
    ``on_lapse``). Callbacks may be coroutine
    functions (awaited on the loop) or plain functions (run in a worker thread).
    """
    return AsyncSupervisor(
        store,
        run_id,
        owner,
        clock=clock,
        on_reconfirm=on_reconfirm,
        on_lapse=on_lapse,
        on_cancel_requested=on_cancel_requested,
    )
