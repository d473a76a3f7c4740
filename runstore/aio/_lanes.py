"""Lanes: each synchronous store of an async store, and the one thread that runs it.

An ``AsyncRunStore`` holds one or more lanes. A lane is a synchronous SQL
store (``runstore._sql._store.SqlRunStore``: the same admission, decisions
and SQL as ``runstore.open`` gives) and a thread of its own; every call on
that store runs on that thread, never on the event loop's (the store's
transaction manager refuses a call made on a loop's thread: ``loop_guard``).
The lanes take calls from one shared queue, oldest first, so a slow call
holds up only its own lane. A lane hands its answers back in batches: one
wake-up of the loop carries every answer finished since the last one.

Calls of one kind that the lane's store can send together (``together``:
an ``AsyncRunStore`` on PostgreSQL's one-round-trip path says so for
``heartbeat`` and ``reconfirm``) are taken together when several wait: a
lane takes up to ``MOST_TOGETHER`` of them, and no more than its share of
the queue, and runs them with one call of its store's batch function (each
still its own transaction, answered by itself). A lone call is never held
back for company: a lane takes only what already waits.

``Lanes.call`` is where asyncio's cancellation is decided:

- cancelled before a lane took it: the call is withdrawn, nothing was sent,
  and ``CancelledError`` is raised at once;
- a read cancelled while it runs: ``CancelledError`` at once (the lane
  finishes the read and drops its answer);
- a write cancelled while it runs: the caller first waits, shielded from
  further cancellation, up to ``grace_s`` for the write's answer; past that
  it interrupts the statement (``interrupt()``) and waits ``grace_s`` more.
  Then it re-raises ``CancelledError``: plain when the write answered with a
  value; with the write's error as ``__cause__`` when it failed; and with a
  ``PersistenceFailedError`` whose ``outcome_unknown`` is true when no answer
  could be had. Never a half write: the write is one transaction on the
  lane's thread, which either commits or rolls back whole.

May import: the core modules and the SQL store the backends share.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any, Final, Generic, TypeVar

from .._errors import PersistenceFailedError
from .._sql._store import SqlRunStore

T = TypeVar("T")
S = TypeVar("S")

MOST_TOGETHER: Final = 16
"""The most calls a lane takes together (see the module docstring)."""

DEFAULT_CANCEL_GRACE_S = 5.0
"""How long a cancelled write waits for its answer, before and after it
interrupts the statement (seconds), unless ``aopen`` is told otherwise."""

# A call's states (set by the lane that runs it, or by its withdrawal).
_QUEUED: Final = 0
_RUNNING: Final = 1
_DONE: Final = 2
_WITHDRAWN: Final = 3


def unknown_after_cancel(method: str) -> PersistenceFailedError:
    """The cause a cancelled write carries when its answer never came."""
    return PersistenceFailedError(
        method,
        "the call was cancelled before the write's answer arrived: it may have "
        "committed; read the run again to learn what happened",
        {"outcome": "unknown", "stage": "cancelled", "reason": "cancelled"},
    )


def _closed(method: str) -> PersistenceFailedError:
    return PersistenceFailedError(
        method, "the store is closed", {"stage": "closed", "reason": "closed"}
    )


class Lane(Generic[S]):
    """One synchronous store and the thread that runs every call on it."""

    def __init__(self, store: S) -> None:
        self.store = store
        #: Per-lane companions built on this lane's store (attempt stores).
        self.companions: dict[object, Any] = {}


class _Call:
    """One call: what to run, where its answer goes, and how far it got."""

    __slots__ = ("error", "fn", "future", "kind", "lane", "loop", "state", "token", "value")

    def __init__(
        self,
        fn: Callable[[Lane[Any]], Any],
        loop: asyncio.AbstractEventLoop,
        kind: tuple[str, tuple[Any, ...]] | None,
    ) -> None:
        self.fn = fn
        #: What a lane may run together with calls of the same kind: the
        #: kind's name and this call's arguments (None: by itself).
        self.kind = kind
        self.loop = loop
        self.future: asyncio.Future[Any] = loop.create_future()
        self.state = _QUEUED
        #: Whoever pops it first decides: a lane (the call runs) or the
        #: cancelled caller (the call is withdrawn). ``list.pop`` is atomic.
        self.token = [True]
        self.lane: Lane[Any] | None = None
        self.value: Any = None
        self.error: BaseException | None = None


def guard(store: SqlRunStore) -> None:
    """Make ``store`` refuse every call made on an event loop's thread."""
    store._tm.loop_guard = True


async def run_on_new_thread(fn: Callable[[], T], name: str) -> T:
    """``fn()`` on a short-lived thread of its own (opening a store), awaited."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def run() -> None:
        try:
            value = fn()
        except BaseException as error:  # handed to the awaiting task
            loop.call_soon_threadsafe(_settle_error, future, error)
        else:
            loop.call_soon_threadsafe(_settle_value, future, value)

    threading.Thread(target=run, name=name, daemon=True).start()
    return await asyncio.shield(future)


def _settle_value(future: asyncio.Future[T], value: T) -> None:
    if not future.done():
        future.set_result(value)


def _settle_error(future: asyncio.Future[Any], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)


class Lanes(Generic[S]):
    """The lanes of one async store, their threads, and how a call is run."""

    def __init__(
        self,
        stores: list[S],
        *,
        grace_s: float,
        name: str,
        together: Callable[[Lane[S], str, list[tuple[Any, ...]]], list[Any]] | None = None,
    ) -> None:
        self.lanes = [Lane(store) for store in stores]
        self.grace_s = grace_s
        #: Runs calls of one kind together: per call, its value or its error
        #: (an exception instance); None: every call runs by itself.
        self.together = together
        self.closed = False
        self._queue: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        #: Answers finished and not yet handed to their loop; ``_waking`` is
        #: set while a hand-over is scheduled (a lane that finds it set needs
        #: not wake the loop: the hand-over takes its answer too).
        self._done: collections.deque[_Call] = collections.deque()
        self._waking = False
        self._threads = [
            threading.Thread(target=self._serve, args=(lane,), name=f"{name}-{index}", daemon=True)
            for index, lane in enumerate(self.lanes)
        ]
        for thread in self._threads:
            thread.start()

    # -- the lanes' side ----------------------------------------------------------

    def _serve(self, lane: Lane[S]) -> None:
        """A lane's thread: take the oldest call (with those waiting that may
        run together with it), run it, hand its answer back; at the end
        (``None``), close the lane's store."""
        held: list[_Call | None] = []  # taken from the queue, not yet run
        while True:
            call = held.pop() if held else self._queue.get()
            if call is None:
                break
            if not self._take(call, lane):
                continue  # withdrawn by its cancelled caller
            if call.kind is None or self.together is None or self._queue.empty():
                self._run(call, lane)
                continue
            calls = [call]
            name = call.kind[0]
            most = min(MOST_TOGETHER, 1 + self._queue.qsize() // len(self.lanes))
            while len(calls) < most:
                try:
                    other = self._queue.get_nowait()
                except queue.Empty:
                    break
                if other is None or other.kind is None or other.kind[0] != name:
                    held.append(other)  # taken next (it may lead a batch of its own)
                    break
                if self._take(other, lane):
                    calls.append(other)
            if len(calls) == 1:
                self._run(call, lane)
                continue
            try:
                answers = self.together(lane, name, [_args(each) for each in calls])
            except BaseException as error:  # a defect: every caller is told
                answers = [error] * len(calls)
            if len(answers) != len(calls):  # a defect too; the lane must not die of it
                answers = [RuntimeError("a batch answered for other calls")] * len(calls)
            for each, answer in zip(calls, answers, strict=True):
                if isinstance(answer, BaseException):
                    each.error = answer
                else:
                    each.value = answer
            self._finish(*calls)
        close = getattr(lane.store, "close", None)
        if close is not None:
            close()

    @staticmethod
    def _take(call: _Call, lane: Lane[S]) -> bool:
        """Whether ``lane`` gets ``call`` (False: its caller withdrew it)."""
        try:
            call.token.pop()
        except IndexError:
            return False
        call.lane = lane
        call.state = _RUNNING
        return True

    def _run(self, call: _Call, lane: Lane[S]) -> None:
        try:
            call.value = call.fn(lane)
        except BaseException as error:  # handed to the awaiting task
            call.error = error
        self._finish(call)

    def _finish(self, *calls: _Call) -> None:
        for call in calls:
            call.state = _DONE
            self._done.append(call)
        if self._waking:
            return
        self._waking = True
        try:
            call.loop.call_soon_threadsafe(self._deliver, call.loop)
        except RuntimeError:
            # The loop is closed: nobody waits for this answer any more.
            self._waking = False

    def _deliver(self, loop: asyncio.AbstractEventLoop) -> None:
        """On a loop: hand every finished answer to its waiting task (a call
        made on another loop is handed to that loop)."""
        self._waking = False
        done = self._done
        while done:
            call = done.popleft()
            if call.loop is loop:
                _answer(call)
            else:
                with contextlib.suppress(RuntimeError):
                    call.loop.call_soon_threadsafe(_answer, call)

    # -- the loop's side ----------------------------------------------------------

    async def call(
        self,
        method: str,
        fn: Callable[[Lane[S]], T],
        *,
        write: bool,
        interrupt: Callable[[Lane[S]], None],
        kind: tuple[str, tuple[Any, ...]] | None = None,
    ) -> T:
        """``fn(lane)`` on a lane's thread, awaited, with the cancellation
        rules of the module docstring; with ``kind``, maybe together with
        other calls of that kind (``together``)."""
        if self.closed:
            raise _closed(method)
        call = _Call(fn, asyncio.get_running_loop(), kind)
        self._queue.put(call)
        try:
            value: T = await call.future
        except asyncio.CancelledError as cancelled:
            try:
                call.token.pop()
            except IndexError:
                pass  # a lane took it: it runs, or ran
            else:
                call.state = _WITHDRAWN  # nothing was sent
                raise
            if call.state != _DONE:
                if not write:
                    raise  # a read is abandoned; the lane drops its answer
                # A new future for the answer: the cancelled one takes none.
                call.future = call.loop.create_future()
                await self._settle_cancelled(call, interrupt)
                if call.future.done():
                    call.future.exception()  # kept on the call; retrieved here
            if call.state != _DONE:
                raise cancelled from unknown_after_cancel(method)
            if call.error is not None:
                raise cancelled from call.error
            raise
        return value

    async def _settle_cancelled(self, call: _Call, interrupt: Callable[[Lane[S]], None]) -> None:
        """Wait, shielded and bounded, for a cancelled write's answer; past the
        grace, interrupt its statement and wait as long again."""
        loop = call.loop
        for phase in ("answer", "interrupted"):
            deadline = loop.time() + self.grace_s
            while call.state != _DONE:
                left = deadline - loop.time()
                if left <= 0:
                    break
                try:
                    await asyncio.wait((call.future,), timeout=left)
                except asyncio.CancelledError:
                    continue  # cancelled again: the first cancellation is re-raised
            if call.state == _DONE or phase == "interrupted":
                return
            lane = call.lane
            if lane is not None:
                # Off the loop: a PostgreSQL cancel request is a round trip of its own.
                threading.Thread(target=interrupt, args=(lane,), daemon=True).start()

    async def close(self) -> None:
        """Refuse new calls, let the lanes finish the calls queued, close every
        lane's store and end the threads."""
        if self.closed:
            return
        self.closed = True
        for _ in self._threads:
            self._queue.put(None)
        threads = self._threads

        def join() -> None:
            for thread in threads:
                thread.join()

        await run_on_new_thread(join, "runstore-aclose")


def _args(call: _Call) -> tuple[Any, ...]:
    assert call.kind is not None
    return call.kind[1]


def _answer(call: _Call) -> None:
    future = call.future
    if future.done():
        return  # its task was cancelled: the answer stays on the call
    if call.error is not None:
        future.set_exception(call.error)
    else:
        future.set_result(call.value)
