"""``runstore.postgres.open``: connect to a PostgreSQL database, select the
schema, migrate it, and open a store on it.

The target is a ``postgresql://`` (or ``postgres://``) URL, passed to libpq
as it is, except for runstore's own ``schema`` parameter, which is removed:
every other byte of the URL reaches libpq unchanged (no parameter is
decoded and encoded again; libpq reads ``+`` as a plus, not a space). The
``schema`` value is percent-decoded as libpq decodes the others. A port that
is not a number from 1 to 65535 is refused before connecting.
The schema is chosen by ``schema=`` (keyword or URL parameter; created when
missing), or else it is the search path's current schema (libpq's
``options=-csearch_path=...`` sets it); every connection then sets its search
path to exactly that schema.

Refused, with ``UnsupportedDatabaseError`` and nothing changed: a server
older than ``MINIMUM_POSTGRES``, a database whose encoding is not UTF8, a
schema with tables that is not a runstore schema, and a schema newer than
this version. ``LocalConsensus`` is refused with ``invalid_run``: its leases
live in one process, and a PostgreSQL store is shared by many.

The URL's password never appears in a repr, a log line or an error: the
store keeps a copy of the URL without it, and connection failures are
reported by SQLSTATE, never by the driver's message. Every failure of
``open`` names a ``cause["reason"]``; a missing privilege names the grants
the role lacks (``_grants``).

No statement of ``open`` resolves a name through the caller's search path:
those that run before the store pins its search path to the schema name
everything with ``pg_catalog.`` and ``OPERATOR(pg_catalog.=)``, so an
operator or function planted in a schema the database's default search path
lists first never runs with the store's role.

The session's ``statement_timeout`` is read as each connection is set up
(it also bounds the store's commits, see ``_tx``); one set below
``MINIMUM_STATEMENT_TIMEOUT_MS`` is refused (``UnsupportedDatabaseError``,
``cause["reason"] == "statement-timeout-too-short"``): it would cancel the
store's ordinary statements, and its commits, at random.

``migrate=False`` creates and migrates nothing: a missing schema is refused
(``cause["stage"] == "missing"``), and so is one that needs migrating
(``"needs-migration"``, naming the pending steps). ``read_only=True`` also
makes every session read-only (``SET default_transaction_read_only = on``,
and the snapshots are ``READ ONLY`` anyway), so nothing the store runs can
write, and every write operation of the store raises ``persistence_failed``
with ``cause["stage"] == "read-only"``; it needs only ``USAGE`` on the
schema and ``SELECT`` on its tables.
"""

from __future__ import annotations

import re
import urllib.parse
from typing import Any, Final

import psycopg

from .._boundary import admit_clock
from .._clock import Clock, SystemClock
from .._errors import InvalidRunError, PersistenceFailedError, UnsupportedDatabaseError
from .._sql._faults import RetryPolicy
from .._sql._migrations import SchemaRefused
from .._sql._modes import needs_migration
from ..consensus._admit import admit_consensus
from ..consensus._local import LocalConsensus
from ..consensus._sql import SqlConsensus
from . import _migrations
from ._clock_check import ClockCheck
from ._errors import connect_reason, failure_reason, reason_text, sqlstate
from ._fused import Fused, fusable
from ._grants import grants_text, missing_grants
from ._notify import channel_for
from ._store import PostgresRunStore
from ._tx import Connection, TransactionManager

MINIMUM_POSTGRES: Final = 15
"""The oldest PostgreSQL major version ``open`` accepts (and the suite runs
on); an older server is refused with ``UnsupportedDatabaseError``
(``cause["stage"] == "server-version"``)."""

SCHEMES: Final = ("postgresql", "postgres")
_MAX_IDENTIFIER_BYTES: Final = 63


def is_url(target: object) -> bool:
    """Whether ``target`` names a PostgreSQL database (a ``postgresql://`` URL)."""
    if type(target) is not str:
        return False
    scheme, sep, _ = target.partition("://")
    return bool(sep) and scheme.lower() in SCHEMES


def _refuse(field: str, detail: str) -> InvalidRunError:
    return InvalidRunError("open", {"field": field, "detail": detail})


def _pieces(url: str) -> tuple[str, str, list[str]]:
    """``url`` as libpq splits it: scheme, the part up to the first ``?``
    (user info, hosts, database) and the query's ``key=value`` items, each
    as written (nothing decoded)."""
    scheme, _, rest = url.partition("://")
    head, _, query = rest.partition("?")
    return scheme, head, [item for item in query.split("&") if item]


def _join(scheme: str, head: str, items: list[str]) -> str:
    query = "&".join(items)
    return f"{scheme}://{head}?{query}" if query else f"{scheme}://{head}"


def _key(item: str) -> str:
    return urllib.parse.unquote(item.partition("=")[0])


def redacted(url: str) -> str:
    """``url`` without its password (user info or ``password`` parameter);
    everything else as written."""
    scheme, head, items = _pieces(url)
    authority, slash, path = head.partition("/")
    if "@" in authority:
        userinfo, _, hosts = authority.rpartition("@")
        user = userinfo.split(":", 1)[0]
        authority = f"{user}@{hosts}" if user else hosts
    kept = [item for item in items if _key(item).lower() != "password"]
    return _join(scheme, authority + slash + path, kept)


def _split_schema(url: str) -> tuple[str, str | None]:
    """The URL for libpq, byte for byte but for the ``schema`` parameter, and
    the schema it named (percent-decoded, as libpq decodes values), if any."""
    scheme, head, items = _pieces(url)
    schemas = [item.partition("=")[2] for item in items if _key(item) == "schema"]
    if len(schemas) > 1:
        raise _refuse("schema", "is given more than once in the URL")
    if not schemas:
        return url, None
    try:
        schema = urllib.parse.unquote(schemas[0], errors="strict")
    except UnicodeDecodeError:
        raise _refuse("schema", "must be valid Unicode text") from None
    rest = [item for item in items if _key(item) != "schema"]
    return _join(scheme, head, rest), schema


def _check_ports(url: str) -> None:
    """Refuse a port (in the host list or a ``port`` parameter) that is not a
    number from 1 to 65535; an empty one means libpq's default."""
    _, head, items = _pieces(url)
    authority = head.partition("/")[0].rpartition("@")[2]
    ports = []
    for host in authority.split(","):
        if host.startswith("["):  # [IPv6]:port
            ports.append(host.partition("]")[2].removeprefix(":"))
        else:
            ports.append(host.partition(":")[2])
    for item in items:
        if _key(item) == "port":
            ports += urllib.parse.unquote(item.partition("=")[2]).split(",")
    for port in ports:
        if port and not (port.isascii() and port.isdigit() and 0 < int(port) <= 65535):
            raise _refuse("url", "names a port that is not a number from 1 to 65535")


def _admit_schema(schema: object) -> str:
    if type(schema) is not str:
        raise _refuse("schema", "must be a str")
    size = len(schema.encode("utf-8", "surrogatepass"))
    if not 0 < size <= _MAX_IDENTIFIER_BYTES or "\x00" in schema:
        raise _refuse("schema", "must be 1 to 63 bytes without NUL")
    try:
        schema.encode("utf-8")
    except UnicodeEncodeError:
        raise _refuse("schema", "must be valid Unicode text") from None
    return schema


def _quoted(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'


def open(
    url: str,
    *,
    clock: Clock | None = None,
    consensus: Any = None,
    schema: str | None = None,
    read_only: bool = False,
    migrate: bool = True,
    check_clock: bool | None = None,
    fast_path: bool | None = None,
    notify: bool = True,
) -> PostgresRunStore:
    """Open (migrating as needed) the run store in ``url``'s database.

    ``clock`` defaults to ``SystemClock()``, ``consensus`` to
    ``SqlConsensus()`` (``LocalConsensus`` is refused). ``schema`` (or a
    ``schema`` URL parameter) selects the schema, created when missing;
    without one, the search path's current schema is used. If the strategy
    has an ``on_open(tx)`` method it is called once, in a write transaction
    (in a read-only snapshot when ``read_only``). ``migrate=False`` refuses a
    missing schema or one that needs migrating; ``read_only=True`` opens a
    migrated schema in read-only sessions and refuses every write.
    ``check_clock`` measures the store clock against the server's (at open,
    after each 30 s of the clock, and when it moves backwards) and refuses
    lease operations while they are more than half the skew allowance apart
    (``persistence_failed``, ``cause["reason"] == "clock-skew"``;
    ``PostgresRunStore.clock_offset_ms`` is the last measurement); the
    default checks a ``SystemClock`` and no other clock. ``fast_path`` runs
    every write operation as one statement, one round trip, a server-side
    function that makes the same decision; the default takes it when the
    strategy is ``SqlConsensus`` (and the store is writable); ``False`` keeps
    the general path, one statement per step. ``notify`` (default True)
    makes the store send a ``NOTIFY`` on its schema's channel
    (``PostgresRunStore.notify_channel``) once a write that may wake a
    worker has committed: ``create``, a ``transition_owned`` to
    ``suspended``, an ``abandon_claim`` or ``recover_claim`` that cleared a
    claim, a ``request_cancel`` or ``request_cancel_lineage`` that recorded
    a request; one statement of its own after the commit, never inside the
    write's transaction, with an empty payload; a failure to send it never
    fails the write; ``False`` sends none (listeners still hear other
    stores). Returns the open
    ``PostgresRunStore``; an inadmissible argument raises ``InvalidRunError``,
    a server or schema it must not use ``UnsupportedDatabaseError``, a
    failure to connect or prepare ``PersistenceFailedError`` naming its
    ``cause["stage"]`` and ``cause["reason"]``.
    """
    if not is_url(url):
        raise _refuse("url", "must be a postgresql:// URL")
    for name, value in (("read_only", read_only), ("migrate", migrate), ("notify", notify)):
        if type(value) is not bool:
            raise _refuse(name, "must be True or False")
    for name, option in (("check_clock", check_clock), ("fast_path", fast_path)):
        if option is not None and type(option) is not bool:
            raise _refuse(name, "must be True, False or None")
    if clock is None:
        clock = SystemClock()
    clock = admit_clock("open", clock)
    if check_clock is None:
        check_clock = type(clock) is SystemClock
    if consensus is None:
        consensus = SqlConsensus()
    consensus = admit_consensus("open", consensus)
    if fast_path and not fusable(consensus):
        raise _refuse("fast_path", "needs SqlConsensus (a strategy of one's own takes every step)")
    if isinstance(consensus, LocalConsensus):
        raise _refuse(
            "consensus",
            "LocalConsensus keeps its leases in one process and cannot arbitrate a "
            "PostgreSQL store; use SqlConsensus (the default)",
        )
    try:
        urllib.parse.parse_qsl(urllib.parse.urlsplit(url).query)
    except ValueError:
        raise _refuse("url", "is not a valid PostgreSQL connection URL") from None
    scheme, _, rest = url.partition("://")
    libpq_url, in_url = _split_schema(f"{scheme.lower()}://{rest}")  # libpq wants lower case
    if schema is not None and in_url is not None and schema != in_url:
        raise _refuse("schema", "differs between the keyword and the URL")
    chosen = None if schema is None and in_url is None else _admit_schema(schema or in_url)
    if not _parses(libpq_url):
        raise _refuse("url", "is not a valid PostgreSQL connection URL")
    _check_ports(libpq_url)
    shown = redacted(url)

    def connect() -> Connection:
        connection = Connection.connect(
            libpq_url,
            autocommit=True,
            cursor_factory=psycopg.RawCursor,
            client_encoding="UTF8",
        )
        # A read-only session refuses writes; a writable one bounds an idle
        # open transaction, which holds run-row locks (unless the URL, role
        # or database set a bound). Both read the statement timeout. A
        # session that fails here is closed at once, not left to the
        # collector (a statement_timeout of 1 ms cancels these statements).
        try:
            settings = _READ_ONLY_SESSION if read_only else _WRITABLE_SESSION
            row = psycopg.Connection.execute(connection, settings).fetchone()
            connection.statement_timeout_ms = _milliseconds(row[0] if row else None)
            if selected[0] is not None:
                psycopg.Connection.execute(connection, f"SET search_path TO {_quoted(selected[0])}")
        except BaseException:
            connection.close()
            raise
        return connection

    selected: list[str | None] = [chosen]
    connection = _first_connection(connect)
    try:
        _check_statement_timeout(connection)
        resolved = _prepare(connection, chosen, read_only=read_only, migrate=migrate)
        selected[0] = resolved
        # Later connections (after a loss) set the search path themselves.
        tm = TransactionManager(connection, connect, consensus, RetryPolicy(), read_only=read_only)
        tm.schema = resolved
        if notify and not read_only:
            tm.notify_channel = channel_for(resolved)
        if check_clock and not read_only:
            tm.clock_check = ClockCheck(clock)
            _measure_at_open(tm.clock_check, connection)
        store = PostgresRunStore(tm, clock=clock, consensus=consensus, url=shown, schema=resolved)
        if fast_path is not False and fusable(consensus) and not read_only:
            store._fused = Fused(tm)
        on_open = getattr(consensus, "on_open", None)
        if callable(on_open):
            if read_only:
                tm.snapshot("open", on_open, keep=True)
            else:
                store._write("open", on_open)
    except BaseException:
        connection.close()
        raise
    return store


#: The bound on a session's idle open transaction, unless one is set already.
IDLE_IN_TRANSACTION_MS: Final = 10_000
#: The session settings of a writable store, set before its search path is
#: pinned: every name qualified, nothing resolved through the search path.
_WRITABLE_SESSION: Final = (
    "SELECT pg_catalog.current_setting('statement_timeout'), "
    "CASE WHEN pg_catalog.current_setting('idle_in_transaction_session_timeout') "
    "OPERATOR(pg_catalog.=) '0' "
    "THEN pg_catalog.set_config('idle_in_transaction_session_timeout', "
    f"'{IDLE_IN_TRANSACTION_MS}', false) END"
)
_READ_ONLY_SESSION: Final = (
    "SELECT pg_catalog.current_setting('statement_timeout'), "
    "pg_catalog.set_config('default_transaction_read_only', 'on', false)"
)

#: The least ``statement_timeout`` (ms) a store opens with; 0 (none) is fine.
MINIMUM_STATEMENT_TIMEOUT_MS: Final = 100

#: How PostgreSQL shows a time setting whose unit is the millisecond.
_DURATION: Final = re.compile(r"^(\d+)(ms|s|min|h|d)?$")
_UNIT_MS: Final = {None: 1, "ms": 1, "s": 1_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def _milliseconds(shown: object) -> int:
    """``current_setting('statement_timeout')`` (``0``, ``2s``, ``1500ms``,
    ``1min``) in ms; 0 for what it cannot read."""
    found = _DURATION.match(shown) if type(shown) is str else None
    if found is None:
        return 0
    return int(found.group(1)) * _UNIT_MS[found.group(2)]


def _check_statement_timeout(connection: Connection) -> None:
    timeout = connection.statement_timeout_ms
    if 0 < timeout < MINIMUM_STATEMENT_TIMEOUT_MS:
        raise UnsupportedDatabaseError(
            f"the session's statement_timeout ({timeout} ms) is below the "
            f"{MINIMUM_STATEMENT_TIMEOUT_MS} ms runstore needs: it would cancel the store's "
            "ordinary statements and commits at random; raise it, or leave it unset (0)",
            {
                "stage": "settings",
                "reason": "statement-timeout-too-short",
                "statement_timeout_ms": timeout,
                "minimum_ms": MINIMUM_STATEMENT_TIMEOUT_MS,
            },
        )


def _measure_at_open(check: ClockCheck, connection: Connection) -> None:
    failure: PersistenceFailedError | None = None
    try:
        check.measure(connection)
    except psycopg.Error as error:
        reason = failure_reason(error)
        failure = PersistenceFailedError(
            "open",
            f"could not read the PostgreSQL server's clock: {reason_text(reason)}",
            {
                "stage": "clock",
                "reason": reason,
                "sqlstate": sqlstate(error),
                "error": type(error).__name__,
            },
        )
    if failure is not None:
        raise failure


def _parses(url: str) -> bool:
    """Whether libpq reads ``url`` (its error would quote the URL: not passed on)."""
    try:
        psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.Error:
        return False
    return True


def _first_connection(connect: Any) -> Connection:
    failure: PersistenceFailedError | None = None
    try:
        connection: Connection = connect()
    except psycopg.Error as error:
        reason = connect_reason(error)
        failure = PersistenceFailedError(
            "open",
            f"could not connect to the PostgreSQL server: {reason_text(reason)}",
            {
                "stage": "connect",
                "reason": reason,
                "sqlstate": sqlstate(error),
                "error": type(error).__name__,
            },
        )
    if failure is not None:
        # Raised outside the handler: no chain leads to libpq's message.
        raise failure
    return connection


def _prepare(connection: Connection, schema: str | None, *, read_only: bool, migrate: bool) -> str:
    """Check the server, select (and if needed and allowed create) the schema,
    migrate (or refuse to, when not allowed). Returns the schema's name."""
    failure: PersistenceFailedError | None = None
    creating = [False]
    try:
        return _prepare_unchecked(
            connection, schema, read_only=read_only, migrate=migrate, creating=creating
        )
    except SchemaRefused as refused:
        detail = dict(refused.detail)
        failure = UnsupportedDatabaseError(
            refused.reason, {**detail, "reason": str(detail.get("stage", "unsupported"))}
        )
    except UnsupportedDatabaseError as refused:
        refused.cause.setdefault("reason", refused.cause.get("stage", "unsupported"))
        failure = refused
    except psycopg.Error as error:
        reason = failure_reason(error)
        cause: dict[str, Any] = {
            "stage": "migrate",
            "reason": reason,
            "sqlstate": sqlstate(error),
            "error": type(error).__name__,
        }
        text = reason_text(reason)
        if reason == "insufficient-privilege":
            named = schema or _current_schema(connection)
            missing = missing_grants(connection, named, read_only=read_only, creating=creating[0])
            cause["missing_grants"] = missing or []
            text = grants_text(missing)
        failure = PersistenceFailedError(
            "open", f"could not prepare the PostgreSQL schema: {text}", cause
        )
    raise failure


def _current_schema(connection: Connection) -> str | None:
    try:
        row = psycopg.Connection.execute(connection, _CURRENT_SCHEMA).fetchone()
    except psycopg.Error:
        return None
    return None if row is None or row[0] is None else str(row[0])


#: The schema the search path selects (resolving nothing through it).
_CURRENT_SCHEMA: Final = "SELECT pg_catalog.current_schema()"
#: Whether a schema of that name exists, visible to the role or not.
_SCHEMA_EXISTS: Final = (
    "SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname OPERATOR(pg_catalog.=) $1::text"
)


def _prepare_unchecked(
    connection: Connection,
    schema: str | None,
    *,
    read_only: bool,
    migrate: bool,
    creating: list[bool],
) -> str:
    execute = connection.execute
    may_write = migrate and not read_only
    version = connection.info.server_version  # 150018 for 15.18
    if version // 10000 < MINIMUM_POSTGRES:
        raise SchemaRefused(
            "PostgreSQL is too old for runstore",
            {"stage": "server-version", "server_version": version, "minimum": MINIMUM_POSTGRES},
        )
    encoding = execute("SHOW server_encoding").fetchone()[0]
    if encoding != "UTF8":
        raise SchemaRefused(
            "runstore needs a UTF8 database", {"stage": "encoding", "server_encoding": encoding}
        )
    if schema is None:
        current = execute(_CURRENT_SCHEMA).fetchone()[0]
        if current is None:
            raise SchemaRefused(
                "the search path names no existing schema; create it or pass schema=",
                {"stage": "schema"},
            )
        schema = str(current)
        psycopg.Connection.execute(connection, f"SET search_path TO {_quoted(schema)}")
    elif execute(_CURRENT_SCHEMA).fetchone()[0] is None:
        # current_schema() skips a schema the role may not use: say so,
        # rather than try to create a schema that exists.
        exists = execute(_SCHEMA_EXISTS, (schema,)).fetchone() is not None
        missing = missing_grants(connection, schema, read_only=read_only) if exists else None
        if exists and missing != []:
            raise PersistenceFailedError(
                "open",
                f"could not use the PostgreSQL schema: {grants_text(missing)}",
                {
                    "stage": "migrate",
                    "reason": "insufficient-privilege",
                    "sqlstate": None,
                    "missing_grants": missing or [],
                },
            )
        # Existing and usable: another opener created it since current_schema()
        # looked; it is opened as a schema that existed.
        if not exists and not may_write:
            mode = "read_only=True" if read_only else "migrate=False"
            raise PersistenceFailedError(
                "open",
                f"the schema does not exist (an open with {mode} creates nothing)",
                {"stage": "missing", "reason": "schema-missing"},
            )
        if not exists:
            creating[0] = True
            _create_schema(connection, schema)
    pending = _migrations.pending(execute)
    if pending and not may_write:
        raise needs_migration(pending, read_only=read_only)
    if pending:
        creating[0] = True
        _migrations.apply(execute, schema)
    creating[0] = False
    return schema


def _create_schema(connection: Connection, schema: str) -> None:
    execute = connection.execute
    execute("BEGIN")
    try:
        execute(_migrations.MIGRATION_LOCK, (schema,))
        execute(f"CREATE SCHEMA IF NOT EXISTS {_quoted(schema)}")
    except BaseException:
        if not connection.broken:
            execute("ROLLBACK")
        raise
    execute("COMMIT")
