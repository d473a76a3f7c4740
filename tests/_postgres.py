"""PostgreSQL for the tests: one server per pytest run, a fresh database per test.

The server is ``runstore.stateful._targets._postgres.server()``: the
``RUNSTORE_TEST_POSTGRES`` URL when set, else a throwaway cluster started on
first use (as ``nobody`` when the tests run as root). Each database a test
asks for is cloned from a migrated template and dropped when the test ends
(``conftest.py``'s ``_drop_test_databases``). Without a server the test is
skipped with a reason that says how to get one; under ``CI=true`` it fails
instead, so CI cannot pass without having run the PostgreSQL tests.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest

from runstore.stateful._targets import _postgres

#: Databases created by the running test, dropped after it.
_created: list[str] = []


def require_server() -> _postgres.Server:
    """The server, or skip (fail under ``CI=true``) saying why there is none."""
    try:
        return _postgres.server()
    except _postgres.Unavailable as why:
        reason = f"PostgreSQL unavailable: {why}"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason} (CI=true requires the PostgreSQL tests to run)")
        pytest.skip(reason)


def database_url() -> str:
    """A fresh, migrated database for this test; its URL."""
    server = require_server()
    url = server.fresh_database()
    _created.append(url)
    return url


def drop_created() -> None:
    """Drop the databases the test created (connections still open are ended)."""
    if not _created:
        return
    server = _postgres.server()
    while _created:
        server.drop(_created.pop())


def open_store(clock: Any, consensus: Any = None, url: str | None = None, **options: Any) -> Any:
    """A PostgreSQL store on a fresh database (or on ``url``)."""
    import runstore.postgres

    return runstore.postgres.open(
        url or database_url(), clock=clock, consensus=consensus, **options
    )


def migrations_before(migration: int) -> int:
    """How many migrations come before ``migration``: all that a release
    before it knew."""
    from runstore.postgres import _migrations

    return [m.id for m in _migrations.MIGRATIONS].index(migration)


def build_schema(url: str, schema: str, count: int | None) -> None:
    """Create ``schema`` and apply the first ``count`` migrations to it (all
    for None), as the store applies them (``$1`` parameters: a raw cursor)."""
    import psycopg

    from runstore.postgres import _migrations

    with psycopg.connect(url, autocommit=True, cursor_factory=psycopg.RawCursor) as c:
        c.execute(f"CREATE SCHEMA {schema}")
        c.execute(f"SET search_path TO {schema}")
        _migrations.apply(c.execute, schema, count)


def open_older(
    url: str, count: int, monkeypatch: pytest.MonkeyPatch, clock: Any, **options: Any
) -> Any:
    """A store as a release that knew only the first ``count`` migrations
    opens ``url`` (``options`` passed to ``open``): it migrates that far."""
    import runstore.postgres
    from runstore.postgres import _migrations

    with monkeypatch.context() as patch:
        patch.setattr(_migrations, "MIGRATIONS", _migrations.MIGRATIONS[:count])
        return runstore.postgres.open(url, clock=clock, **options)


def factory(consensus_factory: Callable[[], Any], **options: Any) -> Callable[[Any, Any], Any]:
    """A ``STORE_FACTORIES`` entry: a store on a fresh database (``options``
    passed to ``open``)."""

    def build(clock: Any, _tmp: Any) -> Any:
        return open_store(clock, consensus_factory(), **options)

    return build


def clone_seconds() -> tuple[list[float], list[float]]:
    """How long each database clone of this run took, and how long each test
    waited for its database (both empty without a server)."""
    found = _postgres._server
    if not isinstance(found, _postgres.Server):
        return [], []
    return list(found.clone_seconds), list(found.wait_seconds)
