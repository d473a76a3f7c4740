"""Reading a SQLite database file read-only, creating nothing beside it.

``runstore.open(path, read_only=True)`` connects with ``mode=ro`` and sets
``query_only``. How that connection shares the file with writers depends on
what lies beside it when it opens (and before each read):

- A ``-wal`` (a writer has the file open, or one was killed): the connection
  takes SQLite's shared locks and reads the WAL through the ``-shm`` index,
  as any reader does. Both files may be read-only to this process (SQLite
  then reads through a private copy of the index). A ``-wal`` without its
  ``-shm`` cannot be read without creating the ``-shm``, so it is refused.
- No ``-wal``: nobody has the file open and the file holds every committed
  write. A ``mode=ro`` connection would create an empty ``-wal`` and ``-shm``
  (and fails in a folder it may not write), so the file is read with
  ``immutable=1``, which takes no locks and creates nothing.
  ``ImmutableReader`` keeps that honest: before each read it checks that no
  ``-wal`` or journal appeared and that the file is still the one it opened
  (inode, size, modification and change times); after the read it checks
  again, and a read the file changed under is discarded and repeated (the
  store's busy retry). Once a writer has appeared, the reader follows it
  through a ``mode=ro`` connection (the writer made the side files), so
  later writes are seen.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Final, Protocol, TypeVar

from ._tx import Connection, FileChanged

T = TypeVar("T")

#: The URI query of each way of reading.
LOCKED: Final = "mode=ro"
IMMUTABLE: Final = "mode=ro&immutable=1"


class ShmMissing(FileChanged):
    """Internal: a ``-wal`` lies beside the file without its ``-shm`` (a
    writer creating them, if it does not last)."""


class Holder(Protocol):
    """What holds the connection a reader reads through (the transaction
    manager, or the open that judges the file)."""

    connection: Connection


def identity(real: str) -> tuple[int, ...]:
    """What changes when anyone writes the file (empty when it is gone)."""
    try:
        info = os.stat(real)
    except OSError:
        return ()
    return (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


def has_writer_files(real: str) -> bool:
    """Whether a ``-wal`` or a rollback journal lies beside the file."""
    return any(os.path.exists(real + suffix) for suffix in ("-wal", "-journal"))


def query_for(real: str) -> str:
    """How to read the file now; ``FileChanged`` while a writer is still
    creating the ``-shm`` beside its ``-wal``."""
    if os.path.exists(real + "-wal"):
        if not os.path.exists(real + "-shm"):
            raise ShmMissing
        return LOCKED
    if os.path.exists(real + "-journal"):
        return LOCKED  # rollback mode: the locks say whether it is being written
    return IMMUTABLE


class ImmutableReader:
    """Reads through an ``immutable=1`` connection while the file stays as it
    was, and through a locking one once a writer has appeared.

    ``connect(query)`` opens a configured read-only connection to the file.
    """

    def __init__(
        self, real: str, connect: Callable[[str], Connection], opened: tuple[int, ...]
    ) -> None:
        self._real = real
        self._connect = connect
        self._identity = opened
        #: False once the reader follows writers through SQLite's locks.
        self.immutable = True

    def _moved(self) -> bool:
        return has_writer_files(self._real) or identity(self._real) != self._identity

    def read(self, tm: Holder, body: Callable[[Connection], T]) -> T:
        if self.immutable and self._moved():
            self._follow(tm)
        if not self.immutable:
            return body(tm.connection)
        result = body(tm.connection)
        if self._moved():
            raise FileChanged
        return result

    def _follow(self, tm: Holder) -> None:
        """Replace the connection: a locking one when a writer made the side
        files, else a fresh immutable look at the file as it is now."""
        query = query_for(self._real)
        opened = identity(self._real)
        connection = self._connect(query)
        previous, tm.connection = tm.connection, connection
        previous.close()
        self._identity = opened
        self.immutable = query == IMMUTABLE
