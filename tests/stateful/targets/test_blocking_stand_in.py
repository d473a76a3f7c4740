"""The synchronous stand-in the machines drive an async store through
(``runstore.stateful._targets._blocking``): it hides nothing of the async
store. A value comes back as the very object the coroutine returned, an error
as the very exception it raised (a wrong call's ``TypeError`` included), each
call runs on the stand-in's own event loop (never on the caller's thread),
and a factory may be a coroutine function, a function answering an
awaitable, or a synchronous one (whose store is handed back untouched).

Each check here is shown to fail on a planted stand-in that hides one thing
(``Swallows``, ``Copies``, ``OnTheCallersThread``)."""

from __future__ import annotations

import asyncio
import copy
import threading
from pathlib import Path

import pytest

import runstore
from runstore import ManualClock, RunNotFoundError
from runstore.stateful._targets._blocking import (
    BlockingRunStore,
    LoopThread,
    attempt_store_over,
    blocking,
    blocking_factory,
)


class Probe:
    """An async store of anyone's: what each call saw and answered."""

    def __init__(self) -> None:
        self.answer = object()
        self.error = RunNotFoundError("get", "missing")
        self.threads: list[str] = []
        self.closed = False

    async def get(self, run_id: str) -> object:
        asyncio.get_running_loop()  # raises RuntimeError off a loop
        self.threads.append(threading.current_thread().name)
        if run_id == "missing":
            raise self.error
        return self.answer

    async def close(self) -> None:
        self.closed = True


class Swallows(BlockingRunStore):
    """Planted: an error comes back as None."""

    def __getattr__(self, name):
        call = super().__getattr__(name)

        def swallowed(*args, **kwargs):
            try:
                return call(*args, **kwargs)
            except Exception:
                return None

        return swallowed


class Copies(BlockingRunStore):
    """Planted: a value comes back as a copy."""

    def __getattr__(self, name):
        call = super().__getattr__(name)
        return lambda *args, **kwargs: copy.copy(call(*args, **kwargs))


class OnTheCallersThread(BlockingRunStore):
    """Planted: each coroutine is run to its end on the caller's thread."""

    def __getattr__(self, name):
        method = getattr(self.async_store, name)
        return lambda *args, **kwargs: asyncio.run(method(*args, **kwargs))


def hides_nothing(cls: type[BlockingRunStore]) -> None:
    """The checks, on a stand-in of class ``cls`` in front of a ``Probe``."""
    probe = Probe()
    store = cls(probe, LoopThread())
    try:
        assert store.get("a") is probe.answer
        with pytest.raises(RunNotFoundError) as raised:
            store.get("missing")
        assert raised.value is probe.error
        with pytest.raises(TypeError):
            store.get()  # the coroutine function's own signature refuses it
        assert probe.threads == [store.loop.thread.name] * 2
    finally:
        store.close()
    assert probe.closed
    assert not store.loop.running


def test_the_stand_in_hands_back_what_the_async_store_answered_or_raised():
    """The same value object, the same exception object, the async store's own
    signature; every call on the stand-in's loop thread; closing closes the
    async store and stops the loop."""
    hides_nothing(BlockingRunStore)


@pytest.mark.parametrize("planted", [Swallows, Copies, OnTheCallersThread])
def test_a_stand_in_that_hides_something_is_caught(planted):
    """Each planted stand-in fails ``hides_nothing``: the test above can fail."""
    with pytest.raises((AssertionError, pytest.fail.Exception)):
        hides_nothing(planted)


def test_every_form_of_factory_gives_a_store_the_machines_can_call(tmp_path: Path):
    """A coroutine function, a function answering ``runstore.aopen(...)`` and a
    function answering an async store each give a stand-in over
    ``runstore.aopen``'s store; a synchronous factory's store is handed back
    as it is; wrapping twice wraps once."""

    async def coroutine_function(clock, path):
        return await runstore.aopen(path, clock=clock)

    def answers_awaitable(clock, path):
        return runstore.aopen(path, clock=clock)

    def synchronous(clock, path):
        return runstore.open(path, clock=clock)

    for number, factory in enumerate((coroutine_function, answers_awaitable)):
        wrapped = blocking_factory(factory)
        assert blocking_factory(wrapped) is wrapped
        assert wrapped.__qualname__ == factory.__qualname__
        store = wrapped(ManualClock(1_000), tmp_path / f"{number}.db")
        try:
            assert isinstance(store, BlockingRunStore)
            assert store.sql_backed
            store.create("a", "{}")
            assert store.get("a").state_json == "{}"
            attempts = attempt_store_over(store)
            assert attempts.state() == ()
        finally:
            store.close()

    plain = runstore.open(tmp_path / "plain.db", clock=ManualClock(1_000))
    try:
        assert blocking(plain) is plain
    finally:
        plain.close()
    sync = blocking_factory(synchronous)(ManualClock(1_000), tmp_path / "sync.db")
    try:
        assert isinstance(sync, runstore.SqliteRunStore)
    finally:
        sync.close()


def test_the_stand_in_refuses_a_call_from_its_own_loop():
    """A call made from the stand-in's own loop thread would wait for itself:
    it is refused with ``RuntimeError``, not left hanging."""
    loop = LoopThread()
    try:
        with pytest.raises(RuntimeError, match="never end"):
            loop.call(loop.call, lambda: None)
    finally:
        loop.stop()
