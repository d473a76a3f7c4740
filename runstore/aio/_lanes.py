"""Lanes: each synchronous store of an async store, and the one thread that runs it.

An ``AsyncRunStore`` holds one or more lanes. A lane is a synchronous SQL
store (``runstore._sql._store.SqlRunStore``: the same admission, decisions
and SQL as ``runstore.open`` gives) and a thread of its own; every call on
that store runs on that thread, never on the event loop's (the store's
transaction manager refuses a call made on a loop's thread: ``loop_guard``).
A call goes to the lane with the fewest calls queued, so a slow call holds
up only its own lane.

``Lanes.call`` is where asyncio's cancellation is decided:

- cancelled before its lane started it: the call is withdrawn, nothing was
  sent, and ``CancelledError`` is raised at once;
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
import concurrent.futures
import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from .._errors import PersistenceFailedError
from .._sql._store import SqlRunStore

T = TypeVar("T")
S = TypeVar("S")

#: How long a cancelled write waits for its answer, before and after it
#: interrupts the statement (seconds), unless ``aopen`` is told otherwise.
DEFAULT_CANCEL_GRACE_S = 5.0


def unknown_after_cancel(method: str) -> PersistenceFailedError:
    """The cause a cancelled write carries when its answer never came."""
    return PersistenceFailedError(
        method,
        "the call was cancelled before the write's answer arrived: it may have "
        "committed; read the run again to learn what happened",
        {"outcome": "unknown", "stage": "cancelled", "reason": "cancelled"},
    )


class Lane(Generic[S]):
    """One synchronous store and the thread that runs every call on it."""

    def __init__(self, store: S, name: str) -> None:
        self.store = store
        self.pending = 0
        self.executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix=name
        )
        #: Per-lane companions built on this lane's store (attempt stores).
        self.companions: dict[object, Any] = {}


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
    """The lanes of one async store, and how a call is run on them."""

    def __init__(self, stores: list[S], *, grace_s: float, name: str) -> None:
        self.lanes = [Lane(store, f"{name}-{index}") for index, store in enumerate(stores)]
        self.grace_s = grace_s
        self.closed = False
        self._lock = threading.Lock()

    def _pick(self) -> Lane[S]:
        with self._lock:
            lane = min(self.lanes, key=lambda lane: lane.pending)
            lane.pending += 1
            return lane

    def _done(self, lane: Lane[S]) -> None:
        with self._lock:
            lane.pending -= 1

    async def call(
        self,
        method: str,
        fn: Callable[[Lane[S]], T],
        *,
        write: bool,
        interrupt: Callable[[Lane[S]], None],
    ) -> T:
        """``fn(lane)`` on a lane's thread, awaited, with the cancellation
        rules of the module docstring."""
        lane = self._pick()
        try:
            started = lane.executor.submit(fn, lane)
        except RuntimeError:
            self._done(lane)
            raise PersistenceFailedError(
                method, "the store is closed", {"stage": "closed", "reason": "closed"}
            ) from None
        started.add_done_callback(lambda _: self._done(lane))
        answer = asyncio.wrap_future(started)
        try:
            return await asyncio.shield(answer)
        except asyncio.CancelledError as cancelled:
            if started.cancel() or not write:
                # Withdrawn before it ran, or a read: nothing to wait for.
                answer.add_done_callback(_forget)
                raise
            cause = await self._settle_cancelled(method, lane, answer, interrupt)
            if cause is None:
                raise
            raise cancelled from cause

    async def _settle_cancelled(
        self,
        method: str,
        lane: Lane[S],
        answer: asyncio.Future[Any],
        interrupt: Callable[[Lane[S]], None],
    ) -> BaseException | None:
        """Wait, shielded and bounded, for a cancelled write's answer: None when
        it answered with a value, its error when it failed, else the
        outcome-unknown cause."""
        loop = asyncio.get_running_loop()
        for phase in ("answer", "interrupted"):
            deadline = loop.time() + self.grace_s
            while not answer.done():
                left = deadline - loop.time()
                if left <= 0:
                    break
                try:
                    await asyncio.wait((answer,), timeout=left)
                except asyncio.CancelledError:
                    continue  # cancelled again: the first cancellation is re-raised
            if answer.done() or phase == "interrupted":
                break
            # Off the loop: a PostgreSQL cancel request is a round trip of its own.
            threading.Thread(target=interrupt, args=(lane,), daemon=True).start()
        if not answer.done():
            answer.add_done_callback(_forget)
            return unknown_after_cancel(method)
        return answer.exception()


def _forget(answer: asyncio.Future[Any]) -> None:
    """Retrieve an abandoned answer's error, so asyncio does not log it."""
    if not answer.cancelled():
        answer.exception()
