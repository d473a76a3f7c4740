"""The async built-in targets: ``runstore.aopen`` on a SQLite file and on PostgreSQL.

Each is an async store factory (``async def factory(clock, path) ->
AsyncRunStore``, as a third party hands ``run_conformance`` one) and, for the
machines, the same factory behind ``blocking_factory`` (a ``BlockingRunStore``
per store), by name for regression files and the explorer's workers:

- ``open_sqlite_async`` / ``sqlite_async_store`` (the ``sqlite-async``
  target): ``runstore.aopen`` on ``path`` over ``SqlConsensus``, the file a
  copy of the migrated template the first time and reopened as it is
  afterwards (one connection: SQLite's async store always has one);
- ``open_postgres_async`` / ``postgres_async_store`` (``postgres-async``):
  ``runstore.aopen`` on a fresh database of the suite's server over
  ``SqlConsensus``, with ``POOL_SIZE`` connections, so that a program's calls
  meet more than one connection; called again for the same path it ends every
  connection to that database (a crash, as the server sees it) and reopens.

May import: ``runstore`` and ``_base``.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from ._blocking import blocking_factory
from ._template import template_database

#: How many connections the ``postgres-async`` target's store holds.
POOL_SIZE = 2


def _sql() -> Any:
    from runstore.consensus import SqlConsensus

    return SqlConsensus()


async def open_sqlite_async(clock: Any, path: Path) -> Any:
    """``runstore.aopen(path)`` over ``SqlConsensus``: the ``sqlite-async`` target's store."""
    import runstore

    if not path.exists():
        await asyncio.to_thread(shutil.copyfile, template_database(), path)
    return await runstore.aopen(path, clock=clock, consensus=_sql(), durability="normal")


def postgres_async_factory(
    consensus_factory: Callable[[], Any] | None = _sql,
    *,
    pool_size: int = POOL_SIZE,
    fast_path: bool | None = None,
) -> Callable[[Any, Path], Coroutine[Any, Any, Any]]:
    """An async store factory over PostgreSQL, as ``postgres_store_factory``
    makes a synchronous one: the first call for a path gets a fresh database
    (and drops the one an earlier path had); a later call for the same path
    ends every connection to it and reopens. The store is ``runstore.aopen``'s
    with ``pool_size`` connections and ``fast_path`` as given."""
    databases: dict[Path, str] = {}

    def database(path: Path) -> str:
        from ._postgres import server

        found = server()
        url = databases.get(path)
        if url is None:
            for old in list(databases):
                found.drop(databases.pop(old))
            url = databases[path] = found.fresh_database()
        else:
            found.terminate_connections(url)
        return url

    async def factory(clock: Any, path: Path) -> Any:
        import runstore

        url = await asyncio.to_thread(database, path)
        consensus = None if consensus_factory is None else consensus_factory()
        return await runstore.aopen(
            url, clock=clock, consensus=consensus, pool_size=pool_size, fast_path=fast_path
        )

    factory.__qualname__ = "postgres_async_factory"
    return factory


#: The ``postgres-async`` target's async factory.
open_postgres_async = postgres_async_factory()

#: The targets' factories for the machines: each store behind a ``BlockingRunStore``.
sqlite_async_store = blocking_factory(open_sqlite_async)
postgres_async_store = blocking_factory(open_postgres_async)
