"""Async stores behind a synchronous stand-in, so the machines can drive them.

The machines, the explorer and the checks call a store synchronously. An
async store (``runstore.aopen``'s ``AsyncRunStore``, or anyone's store whose
operations are coroutines) is put behind a ``BlockingRunStore``: it owns a
private event loop on a thread of its own (``LoopThread``) and runs each call
there with ``asyncio.run_coroutine_threadsafe``, blocking the caller until it
is done. Nothing is decided here: a call is made on the loop's thread with
the arguments as given (a wrong signature raises the async store's own
``TypeError``), and what the coroutine returns or raises is what the caller
gets, the same object. Every public attribute of the async store is reached
through the stand-in, a coroutine operation as a blocking call (so an
operation a later version adds is driven too), anything else as it is.

``blocking_factory(factory)`` turns a store factory that may be async into
one the machines can call: ``factory(clock, path)`` is called as it is; when
it answers an awaitable (a coroutine function's coroutine, or
``runstore.aopen(...)``), that is awaited on the stand-in's loop; when the
store it gives is async, the stand-in wraps it; a synchronous store is
handed back untouched.

What the machines use beyond the protocol is decided by what the async store
offers. Over an ``AsyncRunStore`` (it has ``sync_stores``, the SQL stores
behind it, one per connection) the stand-in offers the SQL stores' fault
seam (``_install_faults`` and ``_retry_policy``, set on every connection;
they arm the transaction managers and touch no data), their write seam
(``_write``, on the first connection, through which the suite edits a run's
state behind the store's back) and the attempt stores (``attempts``:
``AsyncAttemptStore`` behind a ``BlockingAttemptStore``). Anyone else's
async store gets none of these (its own ``raw_write_state``, if it has one,
is reached as any other attribute). Which connection of a pool serves a
call is the async store's own choice, as for any caller.

May import: ``runstore`` (``runstore.aio`` and ``runstore.attempts``
included) and ``_base``.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import threading
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar

T = TypeVar("T")

#: Attribute names the stand-in never forwards (its own plumbing, and the
#: async store's private parts: reach those through ``async_store``).
_PRIVATE = "_"
#: The members of ``AsyncAttemptStore``: none holds attempt data.
_ATTEMPT_FIELDS = frozenset({"_store", "_key", "_options"})


class LoopThread:
    """A private event loop running on a daemon thread of its own.

    ``call(fn, *args, **kwargs)`` runs ``fn(*args, **kwargs)`` on the loop's
    thread, awaits what it answers when that is awaitable, and returns the
    result to the calling thread (or raises what was raised there, the same
    exception object). ``stop()`` cancels whatever is left on the loop, closes
    it and joins the thread; stopping twice does nothing.
    """

    def __init__(self, name: str = "runstore-blocking") -> None:
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()
        self.thread = threading.Thread(target=self._serve, args=(ready,), name=name, daemon=True)
        self.thread.start()
        ready.wait()

    def _serve(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(ready.set)
        try:
            self.loop.run_forever()
        finally:
            # A call whose caller gave up waiting (an interrupt) is cancelled here.
            left = asyncio.all_tasks(self.loop)
            for task in left:
                task.cancel()
            if left:
                self.loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.close()

    @property
    def running(self) -> bool:
        """Whether the loop still runs (False once stopped)."""
        return self.thread.is_alive()

    def call(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` on the loop's thread, awaited if awaitable."""
        if threading.current_thread() is self.thread:
            raise RuntimeError("a blocking call from the stand-in's own loop would never end")

        async def run() -> Any:
            value = fn(*args, **kwargs)
            if inspect.isawaitable(value):
                value = await value
            return value

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result()

    def wait(self, awaitable: Any) -> Any:
        """Await ``awaitable`` (made on any thread) on the loop's thread."""
        return self.call(lambda: awaitable)

    def stop(self) -> None:
        """Stop the loop and join its thread."""
        if self.thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join()


def is_async_store(store: object) -> bool:
    """Whether ``store``'s operations are coroutines (its ``get`` is a
    coroutine function): ``runstore.aio.AsyncRunStore``, or anyone's; never
    a stand-in, whose operations block."""
    if isinstance(store, BlockingRunStore):
        return False
    return inspect.iscoroutinefunction(getattr(store, "get", None))


class BlockingRunStore:
    """A synchronous ``RunStore`` in front of an async one (see the module docstring).

    ``BlockingRunStore(async_store, loop)``: ``loop`` is the ``LoopThread`` the
    async store was opened on; the stand-in owns it and stops it on
    ``close()``, after the async store's own ``close()`` (unless ``owns_loop``
    is False: several stand-ins, each a caller of its own, share one loop).
    Every public attribute is the async store's, a coroutine operation run to
    its end on the loop. ``async_store`` is the store behind it.
    """

    def __init__(self, async_store: Any, loop: LoopThread, *, owns_loop: bool = True) -> None:
        self.async_store = async_store
        """The async store every call goes to."""
        self.loop = loop
        """The ``LoopThread`` its calls run on."""
        self.owns_loop = owns_loop
        """Whether ``close()`` stops the loop."""
        self._closed = False

    # -- the operations ----------------------------------------------------------------

    def __getattr__(self, name: str) -> Any:
        if name.startswith(_PRIVATE):
            raise AttributeError(name)
        value = getattr(self.async_store, name)
        if not callable(value):
            return value

        @functools.wraps(value)
        def blocking(*args: Any, **kwargs: Any) -> Any:
            return self.loop.call(value, *args, **kwargs)

        return blocking

    def close(self) -> None:
        """Close the async store (awaiting its ``close()``), then stop the
        loop if it owns it. Closing twice does nothing."""
        if self._closed:
            return
        self._closed = True
        try:
            close = getattr(self.async_store, "close", None)
            if callable(close):
                self.loop.call(close)
        finally:
            if self.owns_loop:
                self.loop.stop()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"BlockingRunStore({self.async_store!r})"

    # -- what an AsyncRunStore offers beyond the protocol --------------------------

    @property
    def sync_stores(self) -> tuple[Any, ...]:
        """The SQL stores behind an ``AsyncRunStore``, one per connection
        (``AttributeError`` for anyone else's async store)."""
        stores: tuple[Any, ...] = self.async_store.sync_stores
        return stores

    @property
    def sql_backed(self) -> bool:
        """Whether the async store is ``runstore.aopen``'s (SQL stores behind
        it): the fault seam, the raw edit and the attempt stores are offered."""
        from runstore.aio import AsyncRunStore

        return isinstance(self.async_store, AsyncRunStore)

    def _install_faults(self, plan: Any) -> None:
        """Arm ``plan`` (a ``FaultPlan``; None disarms) on every connection:
        the write that runs next takes its faults, whichever connection it
        is sent to."""
        for store in self.sync_stores:
            store._install_faults(plan)

    @property
    def _retry_policy(self) -> Any:
        return self.sync_stores[0]._retry_policy

    @_retry_policy.setter
    def _retry_policy(self, policy: Any) -> None:
        for store in self.sync_stores:
            store._retry_policy = policy

    def _write(self, method: str, body: Callable[[Any], T]) -> T:
        """The SQL stores' write seam: ``body`` in one write transaction on
        the first connection, run on the calling thread (the SQL store refuses
        a call on a loop's thread). The raw edit of a run's state behind the
        store's back (``sqlite_raw_write_state``) writes through it."""
        written: T = self.sync_stores[0]._write(method, body)
        return written

    def attempts(self, **options: Any) -> BlockingAttemptStore:
        """``AsyncAttemptStore(async_store, **options)`` behind a
        ``BlockingAttemptStore``; its options are checked as it is built."""
        from runstore.aio import AsyncAttemptStore

        return BlockingAttemptStore(
            self.loop.call(AsyncAttemptStore, self.async_store, **options), self
        )


class BlockingAttemptStore:
    """A synchronous attempt store in front of an ``AsyncAttemptStore`` (or
    anyone's async attempt store): every public attribute is the async
    one's, a coroutine operation run to its end on the loop of ``run_store``
    (the stand-in of the run store it was built over)."""

    def __init__(self, async_attempts: Any, run_store: BlockingRunStore) -> None:
        self.async_attempts = async_attempts
        """The async attempt store every call goes to."""
        self.run_store = run_store
        """The stand-in of the run store it was built over (whose loop runs its calls)."""

    @property
    def holds_no_data(self) -> bool:
        """Whether the async attempt store is ``AsyncAttemptStore`` (or a subclass)
        holding nothing but its run store, its key and its options: its records
        live in the database alone (the explorer may then restore copies)."""
        from runstore.aio import AsyncAttemptStore

        inner = self.async_attempts
        return isinstance(inner, AsyncAttemptStore) and set(vars(inner)) <= _ATTEMPT_FIELDS

    def __getattr__(self, name: str) -> Any:
        if name.startswith(_PRIVATE):
            raise AttributeError(name)
        value = getattr(self.async_attempts, name)
        if not callable(value):
            return value

        @functools.wraps(value)
        def blocking(*args: Any, **kwargs: Any) -> Any:
            return self.run_store.loop.call(value, *args, **kwargs)

        return blocking

    def __repr__(self) -> str:
        return f"BlockingAttemptStore({self.async_attempts!r})"


#: ``attempt_store_over`` by name (``MODULE:FACTORY``), for regression files.
ATTEMPT_STORE_OVER = f"{__name__}:attempt_store_over"


def attempt_store_over(store: Any, **options: Any) -> Any:
    """The attempt store over ``store``, built with ``options``: the
    ``AsyncAttemptStore`` behind a ``BlockingAttemptStore`` over the stand-in
    of ``runstore.aopen``'s store (``BlockingRunStore.attempts``), else
    ``runstore.attempts.AttemptStore`` (which refuses any store but the SQL
    stores with ``invalid_attempt``)."""
    if isinstance(store, BlockingRunStore) and store.sql_backed:
        return store.attempts(**options)
    from runstore.attempts import AttemptStore

    return AttemptStore(store, **options)


def blocking(opened: Any) -> Any:
    """What a store factory answered, made something the machines can call:
    an awaitable is awaited on a new stand-in's loop; an async store is put
    behind that stand-in; a synchronous store is answered as it is."""
    if not (inspect.isawaitable(opened) or is_async_store(opened)):
        return opened
    loop = LoopThread()
    try:
        store = loop.wait(opened) if inspect.isawaitable(opened) else opened
    except BaseException:
        loop.stop()
        raise
    if not is_async_store(store):
        loop.stop()
        return store
    return BlockingRunStore(store, loop)


def blocking_factory(factory: Callable[..., Any]) -> Callable[..., Any]:
    """``factory`` (called ``factory(clock, path, **options)``), answering what
    ``blocking`` makes of its store: an async store behind a stand-in. It
    keeps the factory's name, module and declared ``capabilities``; wrapping
    twice wraps once."""
    if getattr(factory, "blocking_stand_in", False):
        return factory

    @functools.wraps(factory)
    def opened(clock: Any, path: Path, /, **options: Any) -> Any:
        return blocking(factory(clock, path, **options))

    opened.blocking_stand_in = True  # type: ignore[attr-defined]
    return opened
