"""No statement of the store resolves a name through the caller's search path.

A database whose default search path lists ``public`` before ``pg_catalog``
(``ALTER DATABASE ... SET search_path = public, pg_catalog``) lets an object
planted in ``public`` shadow the built-in one of the same name and
signature, for every session that has not pinned its own search path. So
``public`` gets an ``=`` operator on text and the functions
``current_setting``, ``set_config`` and ``current_schema``, each of which
counts its calls and then does what the built-in does. ``open()`` (with a
schema of its own, and with the search path's schema) and the operations
after it must call none of them: zero calls.
"""

from __future__ import annotations

import urllib.parse
from typing import Any

import pytest

from runstore import Activated, ManualClock, OwnerId, PersistenceFailedError, Transitioned

from .. import _postgres

postgres = pytest.importorskip("runstore.postgres")
psycopg = pytest.importorskip("psycopg")

OWNER = OwnerId("host-a", 1, "a")

HOSTILE = """
CREATE SCHEMA evil;
CREATE TABLE evil.calls (what text NOT NULL);
GRANT USAGE ON SCHEMA evil TO PUBLIC;
GRANT INSERT ON evil.calls TO PUBLIC;
CREATE FUNCTION public.texteq(text, text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO evil.calls VALUES ('=');
  RETURN pg_catalog.texteq($1, $2);
END $$;
CREATE OPERATOR public.= (LEFTARG = text, RIGHTARG = text, FUNCTION = public.texteq);
CREATE FUNCTION public.current_setting(text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO evil.calls VALUES ('current_setting');
  RETURN pg_catalog.current_setting($1);
END $$;
CREATE FUNCTION public.set_config(text, text, boolean) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO evil.calls VALUES ('set_config');
  RETURN pg_catalog.set_config($1, $2, $3);
END $$;
CREATE FUNCTION public.current_schema() RETURNS name LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO evil.calls VALUES ('current_schema');
  RETURN pg_catalog.current_schema();
END $$;
"""


@pytest.fixture
def hostile() -> Any:
    """A fresh database with the planted objects and the default search path
    ``public, pg_catalog``; its URL."""
    url = _postgres.database_url()
    name = urllib.parse.unquote(urllib.parse.urlsplit(url).path.lstrip("/"))
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(HOSTILE)
        connection.execute(f'ALTER DATABASE "{name}" SET search_path = public, pg_catalog')
        # The control: a session that does not pin its search path runs them.
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute("SELECT current_setting('work_mem') = 'x'")
        assert _calls(url) == ["current_setting", "="]
        connection.execute("DELETE FROM evil.calls")
    return url


def _calls(url: str) -> list[str]:
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute("SET search_path = pg_catalog")
        return [row[0] for row in connection.execute("SELECT what FROM evil.calls")]


@pytest.mark.parametrize("schema", ["rs", None], ids=["schema=", "search-path"])
@pytest.mark.parametrize("read_only", [False, True], ids=["writable", "read-only"])
def test_open_resolves_nothing_through_the_search_path(
    hostile: str, schema: str | None, read_only: bool
) -> None:
    if read_only:
        postgres.open(hostile, clock=ManualClock(0), schema=schema).close()  # migrated
        with postgres.open(hostile, clock=ManualClock(0), schema=schema, read_only=True) as store:
            assert store.schema == (schema or "public")
            store.check_invariants()
    else:
        with postgres.open(hostile, clock=ManualClock(0), schema=schema) as store:
            assert store.schema == (schema or "public")
            store.create("r", "{}")
            row = store.get("r")
            assert store.claim_and_own("r", row.snapshot, OWNER, 1) == Activated()
            assert store.transition_owned("r", OWNER, "completed", "{}") == Transitioned()
            store.check_invariants()
    assert _calls(hostile) == []


def test_a_schema_the_role_may_not_use_is_not_created_again(hostile: str) -> None:
    """A role without USAGE on the schema cannot see it through its search
    path; open says so (and names the grant) instead of trying to create it."""
    postgres.open(hostile, clock=ManualClock(0), schema="rs").close()
    server = _postgres.require_server()
    role = "no_usage_" + urllib.parse.urlsplit(hostile).path.lstrip("/").lower()
    role = "".join(c if c.isalnum() else "_" for c in role)[:60]
    try:
        server.admin(f"CREATE ROLE {role} LOGIN")
    except psycopg.Error:
        pytest.skip("the test server's role cannot create roles")
    try:
        parts = urllib.parse.urlsplit(hostile)
        target = urllib.parse.urlunsplit(
            parts._replace(netloc=f"{role}@{parts.netloc.rpartition('@')[2]}")
        )
        with pytest.raises(PersistenceFailedError) as caught:
            postgres.open(target, clock=ManualClock(0), schema="rs")
        error = caught.value
        assert error.cause["reason"] == "insufficient-privilege"
        assert error.cause["missing_grants"][0] == "USAGE ON SCHEMA rs"
        assert "permission denied" in error.message
        assert _calls(hostile) == []
    finally:
        with psycopg.connect(hostile, autocommit=True) as owner:
            owner.execute(f"DROP OWNED BY {role}")
        server.admin(f"DROP ROLE IF EXISTS {role}")
