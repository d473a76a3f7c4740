"""Injected time. Library code reads time only through a ``Clock``.

A clock answers ``now_ms()`` in whole milliseconds and can wait until a
deadline, from a thread (``sleep_until``) or a coroutine (``asleep_until``).
``SystemClock`` reads the wall clock. ``ManualClock`` moves only when a test
moves it, and wakes every waiter whose deadline it reaches, from any thread or
task, so lease timing is tested without sleeping.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Protocol, runtime_checkable


@runtime_checkable
class Clock(Protocol):
    """The time source every store, supervisor and probe is given.

    Required: ``now_ms``, ``sleep_until`` and ``asleep_until``. A deadline that
    has already passed returns at once.
    """

    def now_ms(self) -> int:
        """The current time in whole milliseconds (floored)."""
        ...

    def sleep_until(self, deadline_ms: int) -> None:
        """Block the calling thread until ``now_ms()`` reaches ``deadline_ms``."""
        ...

    async def asleep_until(self, deadline_ms: int) -> None:
        """Suspend the calling task until ``now_ms()`` reaches ``deadline_ms``."""
        ...


class SystemClock:
    """The wall clock, in floored milliseconds since the epoch."""

    def now_ms(self) -> int:
        """Milliseconds since the Unix epoch, floored, read from ``time.time_ns()``."""
        return time.time_ns() // 1_000_000

    def sleep_until(self, deadline_ms: int) -> None:
        """Block the calling thread until the wall clock reads ``deadline_ms`` or
        later; a deadline already passed returns at once."""
        while (remaining := deadline_ms - self.now_ms()) > 0:
            time.sleep(remaining / 1000)

    async def asleep_until(self, deadline_ms: int) -> None:
        """Suspend the calling task until the wall clock reads ``deadline_ms`` or
        later; a deadline already passed returns at once."""
        while (remaining := deadline_ms - self.now_ms()) > 0:
            await asyncio.sleep(remaining / 1000)

    def __repr__(self) -> str:
        return "SystemClock()"


class ManualClock:
    """A clock that only moves when told to.

    ``advance`` and ``set`` never move it backwards (``ValueError``). Every
    thread in ``sleep_until`` and every task in ``asleep_until`` whose deadline
    the new time reaches is woken, whichever thread moved the clock.
    ``wait_for_sleepers`` lets a test wait, in real time, until the code under
    test is parked on the clock before advancing it.

    ``ManualClock(start_ms)`` starts at ``start_ms`` (default 0), a
    non-negative int; anything else raises ``ValueError``.
    """

    def __init__(self, start_ms: int = 0) -> None:
        if type(start_ms) is not int or start_ms < 0:
            raise ValueError("start_ms must be a non-negative int")
        self._now = start_ms
        self._cond = threading.Condition()
        self._sleepers = 0
        self._async_waiters: list[tuple[int, asyncio.AbstractEventLoop, asyncio.Future[None]]] = []

    def now_ms(self) -> int:
        """The time the clock was last set or advanced to (``start_ms`` until then)."""
        with self._cond:
            return self._now

    def advance(self, ms: int) -> int:
        """Move forward by ``ms`` (an int >= 0, else ``ValueError``), wake every
        waiter whose deadline is reached, and return the new time."""
        if type(ms) is not int or ms < 0:
            raise ValueError("a ManualClock only moves forward by a non-negative int")
        with self._cond:
            return self._move(self._now + ms)

    def set(self, ms: int) -> int:
        """Move to ``ms``, an int not earlier than now (else ``ValueError``),
        wake every waiter whose deadline is reached, and return it."""
        if type(ms) is not int:
            raise ValueError("a ManualClock is set to an int")
        with self._cond:
            if ms < self._now:
                raise ValueError("a ManualClock never moves backwards")
            return self._move(ms)

    def _move(self, new_now: int) -> int:
        self._now = new_now
        self._cond.notify_all()
        due = [w for w in self._async_waiters if w[0] <= new_now]
        self._async_waiters = [w for w in self._async_waiters if w[0] > new_now]
        for _, loop, future in due:
            loop.call_soon_threadsafe(_resolve, future)
        return new_now

    @property
    def sleepers(self) -> int:
        """How many threads and tasks are waiting on this clock right now."""
        with self._cond:
            return self._sleepers + len(self._async_waiters)

    def wait_for_sleepers(self, count: int, timeout_s: float = 5.0) -> bool:
        """Block (in real time) until at least ``count`` threads and tasks are
        parked in ``sleep_until``/``asleep_until``.

        Returns True once they are, False if that did not happen within
        ``timeout_s`` seconds of real time.
        """
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._sleepers + len(self._async_waiters) < count:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(min(remaining, 0.01))
            return True

    def sleep_until(self, deadline_ms: int) -> None:
        """Block the calling thread until the clock is moved to ``deadline_ms`` or
        later, by any thread; at once if it already is."""
        with self._cond:
            if self._now >= deadline_ms:
                return
            self._sleepers += 1
            self._cond.notify_all()
            try:
                while self._now < deadline_ms:
                    self._cond.wait()
            finally:
                self._sleepers -= 1

    async def asleep_until(self, deadline_ms: int) -> None:
        """Suspend the calling task until the clock is moved to ``deadline_ms`` or
        later, by any thread or task; at once if it already is."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        entry = (deadline_ms, loop, future)
        with self._cond:
            if self._now >= deadline_ms:
                return
            self._async_waiters.append(entry)
            self._cond.notify_all()
        try:
            await future
        finally:
            with self._cond:
                if entry in self._async_waiters:
                    self._async_waiters.remove(entry)

    def __repr__(self) -> str:
        return f"ManualClock(now_ms={self.now_ms()})"


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
