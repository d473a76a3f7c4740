"""``runstore.open(target, ...)``: one entry point for both backends.

A ``postgresql://`` or ``postgres://`` URL opens PostgreSQL
(``runstore.postgres.open``, which needs the ``postgres`` extra); anything
else is SQLite's (``runstore.sqlite.open``: a path, or ``":memory:"``), with
the keyword arguments passed on unchanged.
"""

from __future__ import annotations

import os
from typing import Any

from ._clock import Clock
from ._errors import InvalidRunError
from ._sql._store import SqlRunStore

_SCHEMES = ("postgresql", "postgres")


def is_postgres_url(target: object) -> bool:
    """Whether ``target`` is a ``postgresql://`` (or ``postgres://``) URL."""
    if type(target) is not str:
        return False
    scheme, sep, _ = target.partition("://")
    return bool(sep) and scheme.lower() in _SCHEMES


def open(
    target: str | os.PathLike[str],
    *,
    clock: Clock | None = None,
    consensus: Any = None,
    **options: Any,
) -> SqlRunStore:
    """Open the run store at ``target``: a SQLite file (``":memory:"`` for a
    private in-memory one) or a PostgreSQL database named by a
    ``postgresql://`` URL. See ``runstore.sqlite.open`` and
    ``runstore.postgres.open`` for each backend's options. The store is a
    ``runstore.SqliteRunStore`` or a ``runstore.postgres.PostgresRunStore``
    (both ``runstore._sql.SqlRunStore``, whose ``dialect`` says which)."""
    if is_postgres_url(target):
        raise InvalidRunError(
            "open",
            {
                "field": "target",
                "detail": "is a PostgreSQL URL, which this version cannot open yet",
            },
        )
    from .sqlite import open as open_sqlite

    return open_sqlite(target, clock=clock, consensus=consensus, **options)
