"""Opening a PostgreSQL store: the URL, the schema, what is refused, and a
store's lifetime (reconnecting after a lost connection, interrupting a
statement, closing twice).

The URL's password never appears in a repr, an error or a log record;
``schema=`` (keyword or URL parameter) or the URL's
``options=-csearch_path=...`` selects the schema, and two schemas in one
database are two independent stores; ``LocalConsensus`` is refused.
"""

from __future__ import annotations

import logging
import threading
import traceback
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest

import runstore
from runstore import Activated, ManualClock, OwnerId, RunSnapshot, RunStoreError, Updated
from runstore.consensus import LocalConsensus, SqlConsensus

from .. import _postgres

postgres = pytest.importorskip("runstore.postgres")

OWNER = OwnerId("host-a", 1, "nonce-a")
PENDING = RunSnapshot("pending", None, None)
PASSWORD = "pg-secret-5b9d2e"


@pytest.fixture
def url() -> str:
    return _postgres.database_url()


@pytest.fixture
def admin() -> Any:
    return _postgres.require_server()


def with_query(url: str, **params: str) -> str:
    parts = urllib.parse.urlsplit(url)
    query = urllib.parse.parse_qsl(parts.query) + list(params.items())
    return urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(query)))


def with_password(url: str, password: str) -> str:
    parts = urllib.parse.urlsplit(url)
    user, _, host = parts.netloc.rpartition("@")
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{user}:{password}@{host}"))


def texts_of(error: BaseException) -> str:
    return "".join(traceback.format_exception(error)) + repr(error) + repr(error.args)


def test_a_store_opens_migrated_and_works(url: str) -> None:
    """The store is a PostgresRunStore whose dialect is postgresql."""
    with postgres.open(url, clock=ManualClock(0)) as store:
        assert isinstance(store, postgres.PostgresRunStore)
        assert store.dialect == "postgresql"
        assert store.schema == "public"
        store.create("r", "{}")
        assert store.claim_and_own("r", PENDING, OWNER, 0) == Activated()
        store.check_invariants()


def test_the_password_never_shows(url: str, caplog: pytest.LogCaptureFixture) -> None:
    """In the user info or as a parameter: not in the repr, nor in a refusal."""
    caplog.set_level(logging.DEBUG)
    for secret_url in (with_password(url, PASSWORD), with_query(url, password=PASSWORD)):
        with postgres.open(secret_url, clock=ManualClock(0)) as store:
            assert PASSWORD not in repr(store)
            assert PASSWORD not in str(store)
        missing = secret_url.replace(urllib.parse.urlsplit(url).path, "/no_such_database")
        with pytest.raises(RunStoreError) as caught:
            postgres.open(missing, clock=ManualClock(0))
        assert caught.value.code == "persistence_failed"
        assert caught.value.cause["reason"] == "database-missing"
        assert "does not exist" in caught.value.message
        assert PASSWORD not in texts_of(caught.value)
        assert caught.value.__cause__ is None
        assert caught.value.__context__ is None
    assert PASSWORD not in caplog.text


def test_an_unreachable_server_is_persistence_failed(tmp_path: Any) -> None:
    """A socket folder with no server: a payload-free persistence failure."""
    target = f"postgresql://app:{PASSWORD}@/runs?host={tmp_path}&connect_timeout=2"
    with pytest.raises(RunStoreError) as caught:
        postgres.open(target, clock=ManualClock(0))
    assert caught.value.code == "persistence_failed"
    assert caught.value.cause["stage"] == "connect"
    assert caught.value.cause["reason"] == "unreachable"
    assert PASSWORD not in texts_of(caught.value)


@pytest.mark.parametrize(
    "target",
    ["postgresql://host/db?sslmode", "postgresql://[bad/db", "sqlite:///x.db", "", 7],
)
def test_a_target_that_is_not_a_postgres_url_is_invalid_run(target: Any) -> None:
    with pytest.raises(RunStoreError) as caught:
        postgres.open(target, clock=ManualClock(0))
    assert caught.value.code == "invalid_run"


@pytest.mark.parametrize(
    "target",
    [
        "postgresql://app@db.internal:notaport/jobs",
        "postgresql://app@db-a:5432,db-b:x/jobs",
        "postgresql://app@[::1]:99999/jobs",
        "postgresql://app@/jobs?host=/tmp&port=5432x",
    ],
)
def test_a_port_that_is_not_a_number_is_invalid_run(target: str) -> None:
    """Refused before connecting, with the field and a reason in words."""
    with pytest.raises(RunStoreError) as caught:
        postgres.open(target, clock=ManualClock(0))
    assert caught.value.code == "invalid_run"
    assert caught.value.cause["field"] == "url"
    assert "port" in caught.value.message


def test_a_bad_option_from_the_environment_names_its_reason(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """libpq reads PGPORT when the URL names no port: persistence_failed,
    reason invalid-option (not unknown)."""
    monkeypatch.setenv("PGPORT", "notaport")
    with pytest.raises(RunStoreError) as caught:
        postgres.open(f"postgresql://app@/runs?host={tmp_path}", clock=ManualClock(0))
    error = caught.value
    assert error.code == "persistence_failed"
    assert error.cause["reason"] == "invalid-option"
    assert "port" in error.message


@pytest.mark.parametrize(
    ("url", "libpq", "schema"),
    [
        (
            "postgresql://app@db/jobs?options=-c%20statement_timeout%3D5000&schema=runstore",
            "postgresql://app@db/jobs?options=-c%20statement_timeout%3D5000",
            "runstore",
        ),
        (
            "postgresql://app@db/jobs?schema=s%20one&application_name=nightly%20exports+x&a=%2B",
            "postgresql://app@db/jobs?application_name=nightly%20exports+x&a=%2B",
            "s one",
        ),
        ("postgresql://app@db/jobs?schema=a+b", "postgresql://app@db/jobs", "a+b"),
        (
            "postgresql://app@db/jobs?sslmode=require",
            "postgresql://app@db/jobs?sslmode=require",
            None,
        ),
    ],
)
def test_the_schema_parameter_leaves_the_rest_byte_for_byte(
    url: str, libpq: str, schema: str | None
) -> None:
    """Only ``schema=`` is taken out; nothing is decoded and encoded again
    (libpq reads '+' as a plus); the schema is percent-decoded as libpq
    decodes values."""
    from runstore.postgres import _open

    assert _open._split_schema(url) == (libpq, schema)
    assert _open.redacted(url.replace("app@", f"app:{PASSWORD}@")) == url


def test_url_parameters_reach_the_server_unchanged_beside_schema(url: str) -> None:
    """The fleet guide's statement timeout and an application name with a
    space, both percent-encoded, in a URL that also names the schema."""
    target = (
        f"{url}{'&' if '?' in url else '?'}options=-c%20statement_timeout%3D5000"
        "&application_name=nightly%20exports&schema=runstore"
    )
    with postgres.open(target, clock=ManualClock(0)) as store:
        assert store.schema == "runstore"
        connection = store._connection
        assert connection.execute("SHOW statement_timeout").fetchone()[0] == "5s"
        assert connection.execute("SHOW application_name").fetchone()[0] == "nightly exports"
        store.create("r", "{}")


def test_local_consensus_is_refused(url: str) -> None:
    """Its leases live in one process; nothing is opened."""
    with pytest.raises(RunStoreError) as caught:
        postgres.open(url, clock=ManualClock(0), consensus=LocalConsensus())
    assert caught.value.code == "invalid_run"
    assert caught.value.cause["field"] == "consensus"
    assert "LocalConsensus" in caught.value.message


@pytest.mark.parametrize("consensus", ["sql", object(), SqlConsensus])
def test_a_consensus_that_is_not_a_strategy_is_refused(url: str, consensus: Any) -> None:
    """The same admission as SQLite's open: invalid_run naming consensus."""
    with pytest.raises(RunStoreError) as caught:
        postgres.open(url, clock=ManualClock(0), consensus=consensus)
    assert caught.value.code == "invalid_run"
    assert caught.value.cause["field"] == "consensus"


def _tables(admin: Any, url: str, schema: str) -> list[str]:
    import psycopg

    with psycopg.connect(url) as connection:
        rows = connection.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = %s ORDER BY tablename", (schema,)
        ).fetchall()
    return [row[0] for row in rows]


@pytest.mark.parametrize(
    ("how", "schema"), [("keyword", "app one"), ("url", "App-Ünï"), ("options", "app_options")]
)
def test_a_schema_is_selectable(url: str, admin: Any, how: str, schema: str) -> None:
    """schema= as a keyword, as a URL parameter, or options=-csearch_path=...
    put every table in that schema (created when missing, except by options)."""
    if how == "keyword":
        opened = postgres.open(url, clock=ManualClock(0), schema=schema)
    elif how == "url":
        opened = postgres.open(with_query(url, schema=schema), clock=ManualClock(0))
    else:
        import psycopg

        with psycopg.connect(url, autocommit=True) as connection:
            connection.execute(f"CREATE SCHEMA {schema}")
        opened = postgres.open(
            with_query(url, options=f"-csearch_path={schema}"), clock=ManualClock(0)
        )
    with opened as store:
        assert store.schema == schema
        store.create("r", "{}")
        assert [row.run_id for row in store.state().rows] == ["r"]
    tables = _tables(admin, url, schema)
    assert "flows_runs" in tables
    assert "flows_migrations" in tables


def test_two_schemas_in_one_database_are_independent(url: str) -> None:
    """Each has its runs, leases, facts and revision counter."""
    with (
        postgres.open(url, clock=ManualClock(0), schema="first") as first,
        postgres.open(url, clock=ManualClock(0), schema="second") as second,
    ):
        first.create("shared-id", "{}")
        assert first.claim_and_own("shared-id", PENDING, OWNER, 0) == Activated()
        second.create("shared-id", '{"other": true}')
        assert second.get("shared-id").status == "pending"
        assert first.revision() == 2
        assert second.revision() == 1
        assert first.state().leases != second.state().leases
        first.check_invariants()
        second.check_invariants()


def test_a_search_path_naming_no_schema_is_refused(url: str) -> None:
    target = with_query(url, options="-csearch_path=nowhere")
    with pytest.raises(runstore.UnsupportedDatabaseError) as caught:
        postgres.open(target, clock=ManualClock(0))
    assert caught.value.cause["stage"] == "schema"


@pytest.mark.parametrize("schema", ["", "x" * 64, "nul\x00", 5])
def test_a_bad_schema_name_is_invalid_run(url: str, schema: Any) -> None:
    with pytest.raises(RunStoreError) as caught:
        postgres.open(url, clock=ManualClock(0), schema=schema)
    assert caught.value.code == "invalid_run"


def test_the_keyword_and_the_url_must_agree(url: str) -> None:
    with pytest.raises(RunStoreError) as caught:
        postgres.open(with_query(url, schema="a"), clock=ManualClock(0), schema="b")
    assert caught.value.code == "invalid_run"


def test_a_database_that_is_not_utf8_is_refused(admin: Any) -> None:
    """SQL_ASCII would store any bytes: refused before anything is created."""
    import psycopg

    name = "rs_sql_ascii_test"
    admin.admin(f"DROP DATABASE IF EXISTS {name}")
    admin.admin(f"CREATE DATABASE {name} TEMPLATE template0 ENCODING 'SQL_ASCII' LOCALE 'C'")
    target = _postgres._postgres.with_database(admin.url, name)
    try:
        with pytest.raises(runstore.UnsupportedDatabaseError) as caught:
            postgres.open(target, clock=ManualClock(0))
        assert caught.value.cause["stage"] == "encoding"
        with psycopg.connect(target) as connection:
            assert connection.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'")
            tables = connection.execute(
                "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"
            ).fetchone()
            assert tables == (0,)
    finally:
        admin.admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def test_a_lost_connection_is_replaced_by_the_next_operation(url: str, admin: Any) -> None:
    """Every connection to the database ended (as a crash or a failover
    does): the next operation reconnects and works; nothing is lost."""
    with postgres.open(url, clock=ManualClock(0)) as store:
        store.create("r", "{}")
        assert store.claim_and_own("r", PENDING, OWNER, 0) == Activated()
        assert admin.terminate_connections(url) >= 1
        assert store.heartbeat("r", OWNER, 5) == Updated()
        assert store.get("r").heartbeat_at_ms == 5
        assert admin.terminate_connections(url) >= 1
        assert store.get("r").owner == OWNER
        store.check_invariants()


class Sleeper(SqlConsensus):
    """A strategy whose heartbeat sits in the database until cancelled."""

    def __init__(self) -> None:
        self.started = threading.Event()

    def heartbeat(self, tx: Any, run_id: str, owner: OwnerId, now_ms: int) -> Any:
        self.started.set()
        tx.connection.execute("SELECT pg_sleep(30)")
        return super().heartbeat(tx, run_id, owner, now_ms)


def test_interrupt_cancels_the_running_statement(url: str) -> None:
    """The interrupted operation raises persistence_failed and rolls back
    whole; the store works afterwards."""
    sleeper = Sleeper()
    with postgres.open(url, clock=ManualClock(0), consensus=sleeper) as store:
        store.create("r", "{}")
        assert store.claim_and_own("r", PENDING, OWNER, 0) == Activated()
        before = store.state()
        caught: list[BaseException] = []

        def beat() -> None:
            try:
                store.heartbeat("r", OWNER, 5)
            except BaseException as error:
                caught.append(error)

        worker = threading.Thread(target=beat)
        worker.start()
        assert sleeper.started.wait(10)
        for _ in range(50):
            store.interrupt()
            worker.join(0.2)
            if not worker.is_alive():
                break
        worker.join(10)
        assert not worker.is_alive()
        (error,) = caught
        assert isinstance(error, RunStoreError)
        assert error.code == "persistence_failed"
        assert error.cause["sqlstate"] == "57014"
        assert error.cause["database_code"] == "interrupted"
        assert store.state() == before
        store.interrupt()  # idle: nothing happens
        assert store.reconfirm("r", OWNER, 6) == Updated()


def test_close_twice_and_interrupt_after_close_do_nothing(url: str) -> None:
    store = postgres.open(url, clock=ManualClock(0))
    store.close()
    store.close()
    store.interrupt()
    with pytest.raises(RunStoreError) as caught:
        store.get("r")
    assert caught.value.code == "persistence_failed"
    assert caught.value.method == "get"
    assert caught.value.cause["stage"] == "closed"


@pytest.fixture
def store(url: str) -> Iterator[Any]:
    with postgres.open(url, clock=ManualClock(0)) as opened:
        yield opened


def test_tx_connection_is_psycopg_and_dialect_postgresql(store: Any) -> None:
    """The strategy seam: a psycopg.Connection taking $1 parameters; the
    transaction also hands SqlConsensus PostgreSQL's lease statements."""
    import psycopg

    from runstore.postgres import _lease_queries

    seen: list[Any] = []

    def body(tx: Any) -> None:
        seen.append((type(tx.connection), tx.dialect, tx.lease_queries))
        assert tx.connection.execute("SELECT $1::text", ("x",)).fetchone() == ("x",)

    store._write("probe", body)
    ((kind, dialect, statements),) = seen
    assert issubclass(kind, psycopg.Connection)
    assert dialect == "postgresql"
    assert statements is _lease_queries
