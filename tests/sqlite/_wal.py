"""Which pages, of which B-trees, a SQLite commit wrote: read from the WAL file.

A connection in WAL mode appends every page a commit changed to the ``-wal``
file as one frame (a 24-byte header whose first four bytes are the page
number, then the page), the last frame of a commit carrying the database's
size. With automatic checkpoints off the file only grows, so the frames past
a remembered offset are exactly what the commits since then wrote. The
``dbstat`` table (compiled into the SQLite builds we test on) names the
B-tree (table or index) each page belongs to; a page on no B-tree is free or
the database header.
"""

from __future__ import annotations

import sqlite3
import struct
from collections.abc import Sequence
from pathlib import Path

_HEADER = 32
_FRAME_HEADER = 24


class WalReader:
    """Frames appended to ``path``'s WAL since the last call of ``take``."""

    def __init__(self, database: Path | str) -> None:
        self.wal = Path(f"{database}-wal")
        self.offset = _HEADER

    def skip(self) -> None:
        """Forget every frame written so far."""
        self.take()

    def take(self) -> list[tuple[int, bool]]:
        """(page number, ends a commit) of every frame appended since the last call."""
        data = self.wal.read_bytes() if self.wal.exists() else b""
        if len(data) < _HEADER:
            return []
        page_size = struct.unpack(">I", data[8:12])[0]
        frames = []
        position = max(self.offset, _HEADER)
        while position + _FRAME_HEADER + page_size <= len(data):
            page, size_after = struct.unpack(">II", data[position : position + 8])
            frames.append((page, size_after != 0))
            position += _FRAME_HEADER + page_size
        self.offset = position
        return frames


def page_owners(connection: sqlite3.Connection) -> dict[int, str]:
    """Page number -> the name of the table or index whose B-tree holds it."""
    rows = sqlite3.Connection.execute(connection, "SELECT pageno, name FROM dbstat").fetchall()
    return {int(page): str(name) for page, name in rows}


def btrees(connection: sqlite3.Connection, frames: Sequence[tuple[int, bool]]) -> set[str]:
    """The B-trees the frames' pages belong to now (``"(other)"`` for a page on
    none: the header page or a free one)."""
    owners = page_owners(connection)
    return {owners.get(page, "(other)") for page, _end in frames}
