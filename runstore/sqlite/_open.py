"""``runstore.open``: create or migrate a database file and open a store on it.

The file is created with mode 0600 before SQLite touches it, because SQLite
gives its ``-wal`` and ``-shm`` files the database file's permissions and run
state may hold credentials; an existing file (and its ``-wal``/``-shm``) that
others can read is tightened to 0600. The connection is then checked and set
up, refusing with ``UnsupportedDatabaseError`` what would break the store's
guarantees: a SQLite older than ``MINIMUM_SQLITE``, one without JSON functions
or foreign keys, a file that cannot use WAL, a file that is not a runstore
database, and a schema newer than this version. ``":memory:"`` opens a private
in-memory database (no WAL; for tests).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
import threading
import time
from collections.abc import Callable
from typing import Any, Final, Literal, TypeVar

from .._clock import Clock, SystemClock
from .._errors import InvalidRunError, PersistenceFailedError, UnsupportedDatabaseError
from ..consensus._sql import SqlConsensus
from . import _migrations
from ._faults import RetryPolicy
from ._store import SqliteRunStore
from ._tx import Connection, is_transient

T = TypeVar("T")

#: RETURNING (3.35) and a DROP COLUMN without the early releases' bugs.
MINIMUM_SQLITE: Final = (3, 35, 5)

#: SQLite's own busy wait, kept short: the transaction manager's jittered
#: retries do the fair waiting (see ``_tx``).
BUSY_TIMEOUT_S: Final = 0.05

_SYNCHRONOUS: Final = {"full": "FULL", "normal": "NORMAL"}
_NOT_A_DATABASE: Final = 26  # SQLITE_NOTADB


def open(
    path: str | os.PathLike[str],
    *,
    clock: Clock | None = None,
    consensus: Any = None,
    durability: Literal["full", "normal"] = "full",
) -> SqliteRunStore:
    """Open (creating or migrating as needed) the run store at ``path``.

    ``clock`` defaults to ``SystemClock()``, ``consensus`` to
    ``SqlConsensus()``; ``durability`` ``"full"`` (the default) or
    ``"normal"`` sets SQLite's ``synchronous`` mode. If the strategy has an
    ``on_open(tx)`` method it is called once, in a write transaction.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise InvalidRunError("open", {"field": "path", "detail": "must be str or os.PathLike"})
    text = os.fspath(path)
    if type(text) is not str or not text or "\x00" in text:
        raise InvalidRunError("open", {"field": "path", "detail": "must be a file name"})
    if durability not in _SYNCHRONOUS:
        raise InvalidRunError(
            "open", {"field": "durability", "detail": "must be 'full' or 'normal'"}
        )
    if clock is None:
        clock = SystemClock()
    if consensus is None:
        consensus = SqlConsensus()
    _check_library()

    memory = text == ":memory:"
    if not memory:
        _prepare_file(text)
    failure: PersistenceFailedError | None = None
    try:
        connection = sqlite3.connect(
            text,
            timeout=BUSY_TIMEOUT_S,
            isolation_level=None,
            check_same_thread=False,
            factory=Connection,
            cached_statements=256,
        )
    except sqlite3.Error as error:
        failure = _open_failure(error)
    if failure is not None:
        # Raised outside the handler: no chain leads back to the driver's message.
        raise failure
    assert isinstance(connection, Connection)
    store: SqliteRunStore | None = None
    try:
        _configure(connection, memory=memory, durability=durability)
        if memory:
            _copy_memory_template(connection)
        _migrate(connection)
        store = SqliteRunStore(connection, clock=clock, consensus=consensus, path=text)
        on_open = getattr(consensus, "on_open", None)
        if callable(on_open):
            store._write("open", on_open)
    except BaseException:
        connection.close()
        raise
    return store


def _check_library() -> None:
    if sqlite3.sqlite_version_info < MINIMUM_SQLITE:
        raise UnsupportedDatabaseError(
            "SQLite is too old for runstore",
            {
                "stage": "sqlite-version",
                "sqlite_version": sqlite3.sqlite_version,
                "minimum": ".".join(map(str, MINIMUM_SQLITE)),
            },
        )


def _prepare_file(path: str) -> None:
    """Create the file 0600, or tighten an existing one (and its WAL files)."""
    try:
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        for name in (path, path + "-wal", path + "-shm"):
            _tighten(name)
    except OSError as error:
        failure = PersistenceFailedError(
            "open", "could not create the database file", {"stage": "create", "errno": error.errno}
        )
        raise failure from None
    else:
        os.close(descriptor)


def _tighten(name: str) -> None:
    try:
        mode = os.stat(name).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISREG(mode) and mode & 0o077:
        # Not ours to refuse: tighten, and let SQLite report what it cannot open.
        with contextlib.suppress(OSError):
            os.chmod(name, 0o600)


def _open_failure(error: sqlite3.Error) -> PersistenceFailedError:
    code = getattr(error, "sqlite_errorcode", None)
    if type(code) is int and code & 0xFF == _NOT_A_DATABASE:
        return UnsupportedDatabaseError("the file is not a runstore database", {"stage": "schema"})
    return PersistenceFailedError(
        "open",
        "could not open the database file",
        {"stage": "open", "sqlite_error": getattr(error, "sqlite_errorname", None)},
    )


_OPEN_RETRY: Final = RetryPolicy()


def _retrying(fn: Callable[[], T], policy: RetryPolicy = _OPEN_RETRY) -> T:
    """Run an open-time step, waiting out another process that holds the lock."""
    started = time.monotonic()
    attempt = 0
    while True:
        attempt += 1
        try:
            return fn()
        except sqlite3.Error as error:
            spent_ms = (time.monotonic() - started) * 1000
            if not is_transient(error) or spent_ms > policy.budget_ms:
                raise
        time.sleep(min(policy.max_delay_ms, policy.base_delay_ms * 2**attempt) / 1000)


def _pragma(connection: sqlite3.Connection, text: str) -> Any:
    row = sqlite3.Connection.execute(connection, text).fetchone()
    return None if row is None else row[0]


def _configure(connection: Connection, *, memory: bool, durability: str) -> None:
    failure: PersistenceFailedError | None = None
    try:
        try:
            _pragma(connection, "SELECT count(*) FROM sqlite_master")
            json_ok = _pragma(connection, "SELECT json_valid('{\"a\":[1]}')")
        except sqlite3.OperationalError as error:
            if "json_valid" not in str(error):
                raise
            json_ok = None
        if json_ok != 1:
            raise UnsupportedDatabaseError(
                "SQLite lacks JSON functions", {"stage": "sqlite-features"}
            )
        mode = _retrying(lambda: _pragma(connection, "PRAGMA journal_mode = WAL"))
        if not memory and str(mode).lower() != "wal":
            raise UnsupportedDatabaseError(
                "WAL cannot be enabled on this file", {"stage": "wal", "journal_mode": str(mode)}
            )
        _pragma(connection, "PRAGMA foreign_keys = ON")
        if _pragma(connection, "PRAGMA foreign_keys") != 1:
            raise UnsupportedDatabaseError(
                "SQLite cannot enforce foreign keys", {"stage": "sqlite-features"}
            )
        _pragma(connection, "PRAGMA secure_delete = ON")
        _pragma(connection, f"PRAGMA synchronous = {_SYNCHRONOUS[durability]}")
    except sqlite3.Error as error:
        failure = _open_failure(error)
    if failure is not None:
        raise failure


_template_lock: Final = threading.Lock()
_templates: list[sqlite3.Connection] = []


def _copy_memory_template(connection: Connection) -> None:
    """Start a private in-memory database from a migrated copy.

    Tests open thousands of ``:memory:`` stores; copying the pages of one
    database migrated per process is much cheaper than replaying the chain
    every time. The copy gets its own source identity.
    """
    with _template_lock:
        if not _templates:
            template = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
            _migrations.apply(template)
            _templates.append(template)
        _templates[0].backup(connection)
    sqlite3.Connection.execute(
        connection, "UPDATE flows_run_source SET source = lower(hex(randomblob(16)))"
    )


def _migrate(connection: Connection) -> None:
    try:
        try:
            needed = _retrying(lambda: _migrations.pending(connection))
            if needed:
                _migrations.apply(connection, run=_retrying)
        except _migrations.SchemaRefused as refused:
            failure: PersistenceFailedError = UnsupportedDatabaseError(
                refused.reason, dict(refused.detail)
            )
        else:
            return
    except sqlite3.Error as error:
        failure = _open_failure(error)
    raise failure
