"""A read-only PostgreSQL store runs in read-only sessions and needs only
``SELECT``.

Every session of a ``read_only=True`` store, the first and any that replaces
a lost one, has ``default_transaction_read_only`` on, so even a statement the
store never sends (a raw write on its connection) is refused by the server
(SQLSTATE 25006). A role granted only ``USAGE`` on the schema and ``SELECT``
on its tables opens the store read-only and reads everything; opened
writable, the same role is refused.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest

from runstore import ManualClock, RunStoreError

from .. import _postgres

postgres = pytest.importorskip("runstore.postgres")
psycopg = pytest.importorskip("psycopg")


def _raw_write_refused(store: Any) -> str | None:
    """The SQLSTATE of a raw write on the store's own connection."""
    connection = store._tm.live()
    try:
        connection.execute("UPDATE flows_run_source SET source = source")
    except psycopg.Error as error:
        return error.sqlstate  # type: ignore[no-any-return]
    return None


def test_every_session_is_read_only() -> None:
    server = _postgres.require_server()
    url = _postgres.database_url()
    with postgres.open(url, clock=ManualClock(0)) as store:
        store.create("r", "{}")
        assert _raw_write_refused(store) is None  # the control: a writable session
    with postgres.open(url, clock=ManualClock(0), read_only=True) as store:
        assert _raw_write_refused(store) == "25006"
        assert server.terminate_connections(url) >= 1
        assert store.get("r").status == "pending"  # on a new session
        assert _raw_write_refused(store) == "25006"


@pytest.fixture
def reader_url() -> Iterator[tuple[str, str]]:
    """A database whose ``public`` schema is migrated, and a login role with
    only ``USAGE`` on it and ``SELECT`` on its tables."""
    url = _postgres.database_url()
    name = urllib.parse.unquote(urllib.parse.urlsplit(url).path.lstrip("/"))
    role = f"reader_{re.sub(r'[^a-z0-9]', '_', name)}"
    server = _postgres.require_server()
    try:
        server.admin(f"CREATE ROLE {role} LOGIN")
    except psycopg.Error:
        pytest.skip("the test server's role cannot create roles")
    with postgres.open(url, clock=ManualClock(0)) as store:
        store.create("r", "{}")
        # Numbered by a writable store: a read-only one sees the numbered feed.
        assert store.revision() == 1
    with psycopg.connect(url, autocommit=True) as owner:
        owner.execute(f"GRANT USAGE ON SCHEMA public TO {role}")
        owner.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}")
    parts = urllib.parse.urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    try:
        yield urllib.parse.urlunsplit(parts._replace(netloc=f"{role}@{host}")), role
    finally:
        with psycopg.connect(url, autocommit=True) as connection:
            connection.execute(f"DROP OWNED BY {role}")
        server.admin(f"DROP ROLE IF EXISTS {role}")


def test_a_role_that_may_only_select_reads(reader_url: tuple[str, str]) -> None:
    url, _role = reader_url
    with postgres.open(url, clock=ManualClock(0), read_only=True) as store:
        assert [row.run_id for row in store.state().rows] == ["r"]
        store.check_invariants()
        assert store.changes(0)
    # The control: the same role cannot use the store writable.
    with postgres.open(url, clock=ManualClock(0)) as store, pytest.raises(RunStoreError) as caught:
        store.create("s", "{}")
    assert caught.value.code == "persistence_failed"
