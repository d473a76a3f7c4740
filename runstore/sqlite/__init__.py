"""The SQLite adapter: ``runstore.open(path)``. (Placeholder until the adapter lands.)"""

from __future__ import annotations

import os
from typing import Any


class SqliteRunStore:
    """The SQLite-backed run store."""


def open(path: str | os.PathLike[str], **_options: Any) -> SqliteRunStore:
    raise NotImplementedError("the SQLite adapter is not built yet")
