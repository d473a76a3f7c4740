"""``runstore.open(target, ...)``: one entry point for both backends.

A ``postgresql://`` or ``postgres://`` URL opens PostgreSQL
(``runstore.postgres.open``, which needs the ``postgres`` extra: without it
the URL is refused with ``UnsupportedDatabaseError``); anything else is
SQLite's (``runstore.sqlite.open``: a path, or ``":memory:"``). The keyword
arguments are passed on unchanged.

Two open modes mean the same on both backends:

- ``read_only=True`` never writes: it never creates a file or a schema,
  never migrates, never changes a file's mode, and needs only read access
  (a SQLite file its user may only read, in a folder it may not write; a
  PostgreSQL role with ``SELECT``). Every write operation of the store raises
  ``persistence_failed`` with ``cause["stage"] == "read-only"``; reads work.
- ``migrate=False`` opens read-write but refuses a missing database and one
  that needs migrating (``UnsupportedDatabaseError``, ``cause["stage"] ==
  "needs-migration"``, ``cause["pending_migrations"]`` the pending ids, the
  message naming each step) instead of creating or migrating it.
  ``read_only=True`` refuses such a database the same way.
"""

from __future__ import annotations

import os
from typing import Any, TypeGuard

from ._clock import Clock
from ._errors import UnsupportedDatabaseError
from ._sql._store import SqlRunStore
from ._version import install_hint

_SCHEMES = ("postgresql", "postgres")


def is_postgres_url(target: object) -> TypeGuard[str]:
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
    read_only: bool = False,
    migrate: bool = True,
    **options: Any,
) -> SqlRunStore:
    """Open the run store at ``target``: a SQLite file path (a ``str`` or
    ``os.PathLike``; ``":memory:"`` for a private in-memory one) or a
    PostgreSQL database named by a ``postgresql://`` URL.

    ``clock`` is the store clock (``SystemClock()`` when None) and
    ``consensus`` the strategy (``SqlConsensus()`` when None). With
    ``read_only=True`` the store never writes, migrates or changes a file's
    mode: every write operation raises ``persistence_failed``; with
    ``migrate=False`` a database that needs migrating is refused
    (``UnsupportedDatabaseError``) instead of migrated. ``options`` are the
    backend's own, passed through: ``runstore.sqlite.open``'s (such as
    ``durability``) or ``runstore.postgres.open``'s (such as ``schema``).

    Returns a ``runstore.SqliteRunStore`` or a
    ``runstore.postgres.PostgresRunStore``, whose ``dialect`` says which.
    Raises ``InvalidRunError`` for an inadmissible argument,
    ``UnsupportedDatabaseError`` for a database it must not use (and for a
    PostgreSQL URL without the ``postgres`` extra, naming the command that
    installs it) and ``PersistenceFailedError`` when the database cannot be
    opened.
    """
    if is_postgres_url(target):
        try:
            from .postgres import open as open_postgres
        except ImportError:
            missing = UnsupportedDatabaseError(
                f"PostgreSQL needs the postgres extra (psycopg): {install_hint('postgres')}",
                {"stage": "driver"},
            )
        else:
            return open_postgres(
                target,
                clock=clock,
                consensus=consensus,
                read_only=read_only,
                migrate=migrate,
                **options,
            )
        raise missing
    from .sqlite import open as open_sqlite

    return open_sqlite(
        target, clock=clock, consensus=consensus, read_only=read_only, migrate=migrate, **options
    )
