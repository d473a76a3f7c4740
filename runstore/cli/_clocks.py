"""A clock that several processes share through a file, for tests and demonstrations.

Real processes cannot share a ``ManualClock``. A ``FileClock`` reads the time
from a small file that every process maps into memory: the first eight bytes
are the current time in whole milliseconds, a little-endian signed integer.
Whoever writes the file moves the clock for every process at once, and only
forward. ``runstore worker --clock-file PATH`` runs a worker on such a clock,
so that a test can drive a fleet of worker processes through lease expiry
without waiting thirty real seconds.

Reading never blocks: ``now_ms`` reads the mapped bytes (twice, until two
reads agree, so a reader never acts on a half-written value).
``sleep_until`` waits by polling the file every ``poll_s`` seconds of real
time (2 ms by default); that wait is the only real time involved.

This is not part of the library's public API: library code gets any
``runstore.Clock`` and never knows it is this one.
"""

from __future__ import annotations

import asyncio
import mmap
import os
import struct
import time
from pathlib import Path

__all__ = ["FileClock"]

_FORMAT = "<q"
_SIZE = struct.calcsize(_FORMAT)


class FileClock:
    """The time in milliseconds kept in the file at ``path``, shared by every
    process that opens it.

    ``FileClock.create(path, start_ms)`` writes a new clock file; ``FileClock(path)``
    opens an existing one (``ValueError`` when it is not a clock file).
    ``writable=True`` opens it for ``set`` and ``advance`` too. ``poll_s`` is
    how often, in real seconds, ``sleep_until`` looks at the file again.
    """

    def __init__(
        self, path: str | os.PathLike[str], *, writable: bool = False, poll_s: float = 0.002
    ) -> None:
        self.path = Path(path)
        self._poll_s = poll_s
        self._writable = writable
        with self.path.open("r+b" if writable else "rb") as file:
            if os.fstat(file.fileno()).st_size < _SIZE:
                raise ValueError(f"{self.path} is not a clock file (fewer than {_SIZE} bytes)")
            access = mmap.ACCESS_WRITE if writable else mmap.ACCESS_READ
            self._map = mmap.mmap(file.fileno(), _SIZE, access=access)

    @classmethod
    def create(cls, path: str | os.PathLike[str], start_ms: int, **options: float) -> FileClock:
        """Write a clock file at ``path`` reading ``start_ms`` (a non-negative
        int; it replaces any file there) and return it opened for writing
        (``options``: ``poll_s``)."""
        if type(start_ms) is not int or start_ms < 0:
            raise ValueError("start_ms must be a non-negative int")
        Path(path).write_bytes(struct.pack(_FORMAT, start_ms))
        return cls(path, writable=True, **options)

    def now_ms(self) -> int:
        """The time the file holds now, in whole milliseconds."""
        first = struct.unpack_from(_FORMAT, self._map, 0)[0]
        while True:
            again = struct.unpack_from(_FORMAT, self._map, 0)[0]
            if again == first:
                return int(first)
            first = again

    def set(self, ms: int) -> int:
        """Move the clock to ``ms`` (an int not before now, else ``ValueError``)
        for every process that reads the file, and return it."""
        if not self._writable:
            raise ValueError("this FileClock was opened read-only")
        if type(ms) is not int or ms < self.now_ms():
            raise ValueError("a FileClock only moves forward, to an int")
        self._map[0:_SIZE] = struct.pack(_FORMAT, ms)
        return ms

    def advance(self, ms: int) -> int:
        """Move the clock forward by ``ms`` (a non-negative int) and return the new time."""
        if type(ms) is not int or ms < 0:
            raise ValueError("a FileClock only moves forward by a non-negative int")
        return self.set(self.now_ms() + ms)

    def sleep_until(self, deadline_ms: int) -> None:
        """Block the calling thread until the file reads ``deadline_ms`` or later
        (polling it); at once if it already does."""
        while self.now_ms() < deadline_ms:
            time.sleep(self._poll_s)

    async def asleep_until(self, deadline_ms: int) -> None:
        """Suspend the calling task until the file reads ``deadline_ms`` or later
        (polling it); at once if it already does."""
        while self.now_ms() < deadline_ms:
            await asyncio.sleep(self._poll_s)

    def close(self) -> None:
        """Unmap the file (the clock is not read again)."""
        self._map.close()

    def __repr__(self) -> str:
        return f"FileClock({str(self.path)!r})"
