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
from ._errors import InvalidRunError, UnsupportedDatabaseError
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


#: How many connections a PostgreSQL ``AsyncRunStore`` holds unless told.
DEFAULT_POSTGRES_POOL_SIZE = 4


class _Opening:
    """What ``aopen`` returns: ``await`` it for the store, or ``async with`` it
    to have the store closed at the end of the block."""

    def __init__(self, opener: Any) -> None:
        self._opener = opener
        self._store: Any = None

    def __await__(self) -> Any:
        return self._opener().__await__()

    async def __aenter__(self) -> Any:
        self._store = await self._opener()
        return self._store

    async def __aexit__(self, *exc: object) -> None:
        if self._store is not None:
            await self._store.close()


def aopen(
    target: str | os.PathLike[str],
    *,
    clock: Clock | None = None,
    consensus: Any = None,
    read_only: bool = False,
    migrate: bool = True,
    pool_size: int | None = None,
    cancel_grace_s: float = 5.0,
    **options: Any,
) -> Any:
    """Open the run store at ``target`` for asyncio: ``store = await
    runstore.aopen(target)`` or ``async with runstore.aopen(target) as
    store:``. Gives a ``runstore.aio.AsyncRunStore``.

    ``target``, ``clock``, ``consensus``, ``read_only``, ``migrate`` and the
    backend's ``options`` are ``runstore.open``'s. ``pool_size`` is how many
    connections the store holds, each with a thread of its own that runs
    every call on it: 4 by default on PostgreSQL; on SQLite always 1 (one
    connection, since SQLite lets one writer at a time into the file and a
    ``:memory:`` database lives in its one connection; another is refused
    with ``InvalidRunError``). ``cancel_grace_s`` (default 5) bounds how long
    a cancelled write waits for its answer, before and again after it
    interrupts its statement.

    Raises what ``runstore.open`` raises, when awaited.
    """
    from .aio._lanes import guard, run_on_new_thread
    from .aio._store import AsyncRunStore

    postgres = is_postgres_url(target)
    if pool_size is None:
        size = DEFAULT_POSTGRES_POOL_SIZE if postgres else 1
    elif type(pool_size) is not int or not 1 <= pool_size <= 1024:
        raise InvalidRunError("aopen", {"field": "pool_size", "detail": "an int from 1 to 1024"})
    elif pool_size != 1 and not postgres:
        raise InvalidRunError(
            "aopen",
            {
                "field": "pool_size",
                "detail": "1 on SQLite (one writer at a time; :memory: lives in its connection)",
            },
        )
    else:
        size = pool_size
    if (
        type(cancel_grace_s) not in (int, float)
        or not 0 <= cancel_grace_s <= 3600
        or cancel_grace_s != cancel_grace_s
    ):
        raise InvalidRunError(
            "aopen", {"field": "cancel_grace_s", "detail": "seconds, from 0 to 3600"}
        )

    def open_one(first: bool) -> SqlRunStore:
        store = open(
            target,
            clock=clock,
            consensus=consensus,
            read_only=read_only,
            migrate=migrate if first else False,
            **options,
        )
        guard(store)
        return store

    async def opener() -> AsyncRunStore:
        stores = [await run_on_new_thread(lambda: open_one(True), "runstore-aopen")]
        try:
            for _ in range(size - 1):
                stores.append(await run_on_new_thread(lambda: open_one(False), "runstore-aopen"))
        except BaseException:
            for store in stores:
                store._tm.loop_guard = False
                await run_on_new_thread(store.close, "runstore-aclose")
            raise
        return AsyncRunStore(stores, cancel_grace_s=float(cancel_grace_s), name="runstore-aio")

    return _Opening(opener)
