"""``runstore.open``: create or migrate a database file and open a store on it.

Open changes nothing until it knows the file is new or ours:

1. The arguments are admitted first: ``path`` (a ``file:`` name is refused,
   because SQLite may read it as a URI naming some other file), ``durability``,
   ``clock`` and ``consensus`` (by shape), then the SQLite library itself.
2. The path is judged without writing to it. A path that does not exist or an
   empty file is *new*. A directory, a file this process may not read and
   write, a file that is not SQLite, a corrupt one, or one whose schema is not
   ours is refused exactly as it is: its bytes, its journal mode and its mode
   unchanged, nothing created beside it. An existing file is read through a
   read-only SQLite connection, never through a descriptor of our own: closing
   one would drop the POSIX locks SQLite holds on that file for this process's
   other connections.
3. A new database is created 0600 before SQLite touches it, so the ``-wal``
   and ``-shm`` files SQLite derives from it are 0600 too, and ``-wal``/``-shm``
   files a killed process left beside it are tightened to 0600. An existing
   database keeps its mode (and its side files keep theirs).
4. A read-write connection, which never creates the file, is set up (WAL,
   foreign keys, secure_delete, synchronous) and the schema is migrated.

Each step that reads or writes the file waits out another process that holds
its lock (``SQLITE_BUSY``) with the jittered, bounded retry of the store's
writes (``RetryPolicy``): the read-only look and the first read wait for an
opener that is switching a new file to WAL (which rewrites the header under a
rollback journal) or recovering a WAL; ``journal_mode = WAL`` waits until no
other connection reads the file in rollback mode; the migration's ``BEGIN
IMMEDIATE`` waits for another opener's migration. Failures name their stage in
``cause["stage"]`` and say in words what is wrong.

``":memory:"`` opens a private in-memory database (no WAL; for tests).

Two modes change this:

- ``migrate=False`` creates nothing and migrates nothing: a missing file is
  refused (``cause["stage"] == "missing"``), and so is a database that needs
  migrating (an empty file included: ``"needs-migration"``, naming the
  pending steps; ``runstore._sql._modes``).
- ``read_only=True`` writes nothing at all: no file is created, none changes
  its mode, the schema is not migrated (a database that needs it is refused
  as above), the file only has to be readable (its folder need not be
  writable), and every write operation of the store raises
  ``persistence_failed`` with ``cause["stage"] == "read-only"``. How the
  connection reads a file it may not lock, and what that costs, is
  ``runstore.sqlite._readonly``'s docstring. ``":memory:"`` cannot be opened
  read-only (it would always be empty).
"""

from __future__ import annotations

import errno
import os
import random
import sqlite3
import stat
import threading
import time
import urllib.parse
from collections.abc import Callable
from typing import Any, Final, Literal, TypeVar

from .._boundary import admit_clock
from .._clock import Clock, SystemClock
from .._errors import InvalidRunError, PersistenceFailedError, UnsupportedDatabaseError
from .._sql._migrations import Migration, SchemaRefused
from .._sql._modes import needs_migration
from ..consensus._admit import admit_consensus
from ..consensus._sql import SqlConsensus
from . import _migrations, _readonly
from ._faults import RetryPolicy
from ._store import SqliteRunStore
from ._tx import Connection, FileChanged, is_transient

T = TypeVar("T")

MINIMUM_SQLITE: Final = (3, 35, 5)
"""The oldest SQLite library ``open`` accepts, as a version tuple: it needs
RETURNING (3.35) and a DROP COLUMN without the early releases' bugs. An older
one is refused with ``UnsupportedDatabaseError``."""

#: SQLite's own busy wait, kept short: the jittered retries do the fair
#: waiting (see ``_tx``).
BUSY_TIMEOUT_S: Final = 0.05

#: The retry policy of every open step (the store's write policy).
OPEN_RETRY: Final = RetryPolicy()

_SYNCHRONOUS: Final = {"full": "FULL", "normal": "NORMAL"}
_SIDE_FILES: Final = ("-wal", "-shm")
_NOT_A_DATABASE: Final = 26  # SQLITE_NOTADB
_CORRUPT: Final = 11  # SQLITE_CORRUPT
_READONLY: Final = 8  # SQLITE_READONLY
_READONLY_ROLLBACK: Final = 8 | (3 << 8)  # SQLITE_READONLY_ROLLBACK: a hot journal
_READONLY_RECOVERY: Final = 8 | (1 << 8)  # SQLITE_READONLY_RECOVERY: the WAL needs recovery
_READONLY_CANTINIT: Final = 8 | (5 << 8)  # SQLITE_READONLY_CANTINIT: no usable -shm
_READONLY_DIRECTORY: Final = 8 | (6 << 8)  # SQLITE_READONLY_DIRECTORY: folder not writable
_CANTOPEN: Final = 14  # SQLITE_CANTOPEN
_GENERIC_ERROR: Final = 1  # SQLITE_ERROR: what a query on a reshaped table raises

#: What a step that failed for no more specific reason says.
_STAGE_TEXT: Final = {
    "inspect": "could not read the database file",
    "open": "could not open the database file",
    "configure": "could not set up the database connection",
    "wal": "could not switch the database file to WAL",
    "migration-record": "the migration record is not one this version wrote",
    "migrate": "a schema migration failed",
}

#: Held while one thread decides whether a path exists and creates it, so that
#: no other thread of this process can open the file (and take SQLite locks on
#: it) while our creating descriptor is still open.
_creation_lock: Final = threading.Lock()
_jitter: Final = random.Random()


def open(
    path: str | os.PathLike[str],
    *,
    clock: Clock | None = None,
    consensus: Any = None,
    durability: Literal["full", "normal"] = "full",
    read_only: bool = False,
    migrate: bool = True,
) -> SqliteRunStore:
    """Open (creating or migrating as needed) the run store at ``path``.

    ``clock`` defaults to ``SystemClock()``, ``consensus`` to
    ``SqlConsensus()``; ``durability`` ``"full"`` (the default) or
    ``"normal"`` sets SQLite's ``synchronous`` mode. If the strategy has an
    ``on_open(tx)`` method it is called once, in a write transaction (in a
    read-only snapshot when ``read_only``). A clock without a usable
    ``now_ms``, a strategy missing one of its methods, or a ``file:`` path is
    ``invalid_run`` naming the argument; nothing is touched.

    ``migrate=False`` refuses a missing file and a database that needs
    migrating instead of creating or migrating it; ``read_only=True`` opens
    an existing, migrated file without writing anything (see the module's
    docstring).
    """
    text = admit_path("open", path)
    if durability not in _SYNCHRONOUS:
        raise InvalidRunError(
            "open", {"field": "durability", "detail": "must be 'full' or 'normal'"}
        )
    for name, value in (("read_only", read_only), ("migrate", migrate)):
        if type(value) is not bool:
            raise InvalidRunError("open", {"field": name, "detail": "must be True or False"})
    clock = SystemClock() if clock is None else admit_clock("open", clock)
    consensus = SqlConsensus() if consensus is None else admit_consensus("open", consensus)
    _check_library()

    memory = text == ":memory:"
    if memory and read_only:
        raise InvalidRunError(
            "open",
            {
                "field": "read_only",
                "detail": "cannot open ':memory:' read-only (it is always a new, empty database)",
            },
        )
    if memory and not migrate:
        raise needs_migration(_migrations.MIGRATIONS, read_only=False)
    if read_only:
        return _open_read_only(text, clock, consensus)
    if memory:
        target, uri = ":memory:", False
    else:
        real = os.path.realpath(text)
        _prepare(real, create=migrate)
        # mode=rw: this connection never creates the file (step 3 did, 0600).
        target, uri = _uri(real, "mode=rw"), True
    connection = _step("open", lambda: _connect(target, uri=uri))
    store: SqliteRunStore | None = None
    try:
        _configure(connection, memory=memory, durability=durability)
        if memory:
            _copy_memory_template(connection)
        _migrate(connection, allowed=migrate)
        store = SqliteRunStore(connection, clock=clock, consensus=consensus, path=text)
        on_open = getattr(consensus, "on_open", None)
        if callable(on_open):
            store._write("open", on_open)
    except BaseException:
        connection.close()
        raise
    return store


# --- arguments ------------------------------------------------------------------


def admit_path(method: str, path: object) -> str:
    """The text of a database path, or ``invalid_run`` naming ``path``.

    A name that starts with ``file:`` is refused: SQLite builds with URI
    names on read it as a URI (``file:runs.db?mode=...``), so the file it
    opens is not the one that name spells and would miss the 0600 treatment.
    Prefix ``./`` to name a file literally called so.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise InvalidRunError(method, {"field": "path", "detail": "must be str or os.PathLike"})
    text = os.fspath(path)
    if type(text) is not str or not text or "\x00" in text:
        raise InvalidRunError(method, {"field": "path", "detail": "must be a file name"})
    if text.startswith("file:"):
        raise InvalidRunError(
            method,
            {
                "field": "path",
                "detail": "must be a file path, not a 'file:' URI (prefix './' for such a name)",
            },
        )
    return text


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


# --- judging the path (nothing written until it is new or ours) -----------------


def _prepare(real: str, *, create: bool = True) -> None:
    """Judge the file at ``real``; create and secure it if it is new.

    Raises (with the file untouched) unless the path is new, an empty SQLite
    file, or a runstore database this version can open. With ``create``
    false (``migrate=False``) a new or empty database is refused instead.
    """
    if create:
        info, created = _stat_or_create(real)
    else:
        info, created = _stat_existing(real, read_only=False), False
    _check_kind(info)
    if not created:
        _check_access(real)
    if not create and info.st_size == 0:
        raise needs_migration(_migrations.MIGRATIONS, read_only=False)
    if created or info.st_size == 0:
        # A new database: this open makes it, so this open makes it private.
        for suffix in ("", *_SIDE_FILES):
            _tighten(real, suffix)
        return
    _step("inspect", lambda: _inspect(real, migrate=create))


def _check_kind(info: os.stat_result) -> None:
    if stat.S_ISDIR(info.st_mode):
        raise PersistenceFailedError("open", "the path is a directory", {"stage": "directory"})
    if not stat.S_ISREG(info.st_mode):
        raise PersistenceFailedError(
            "open", "the path is not a regular file", {"stage": "not-a-file"}
        )


def _stat_existing(real: str, *, read_only: bool) -> os.stat_result:
    """The status of a database file that must already exist (nothing is created)."""
    failure: PersistenceFailedError
    try:
        return os.stat(real)
    except FileNotFoundError as error:
        mode = "read_only=True" if read_only else "migrate=False"
        failure = PersistenceFailedError(
            "open",
            f"the database file does not exist (an open with {mode} creates nothing)",
            {"stage": "missing", "errno": error.errno},
        )
    except PermissionError as error:
        failure = PersistenceFailedError(
            "open",
            "the database file's folder cannot be entered by this process",
            {"stage": "permissions", "errno": error.errno},
        )
    except OSError as error:
        failure = PersistenceFailedError(
            "open",
            f"could not look up the database file: {_os_reason(error)}",
            {"stage": "stat", "errno": error.errno},
        )
    raise failure


def _os_reason(error: OSError) -> str:
    """Why the system refused a file operation, in words that name no path."""
    if error.errno == errno.ENOENT:
        return "its folder does not exist"
    if error.errno == errno.ENOTDIR:
        return "part of the path is not a folder"
    if error.errno is None:
        return type(error).__name__
    return os.strerror(error.errno).lower()


def _stat_or_create(real: str) -> tuple[os.stat_result, bool]:
    """The file's status, creating it (0600, empty) when it does not exist."""
    failure = PersistenceFailedError(
        "open", "could not create the database file", {"stage": "create", "errno": errno.EEXIST}
    )
    with _creation_lock:
        for _ in range(3):
            try:
                return os.stat(real), False
            except FileNotFoundError:
                pass
            except PermissionError as error:
                failure = PersistenceFailedError(
                    "open",
                    "the database file's folder cannot be entered by this process",
                    {"stage": "permissions", "errno": error.errno},
                )
                break
            except OSError as error:
                failure = PersistenceFailedError(
                    "open",
                    f"could not look up the database file: {_os_reason(error)}",
                    {"stage": "stat", "errno": error.errno},
                )
                break
            try:
                descriptor = os.open(real, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                continue  # another process created it first: look again
            except OSError as error:
                failure = PersistenceFailedError(
                    "open",
                    f"could not create the database file: {_os_reason(error)}",
                    {"stage": "create", "errno": error.errno},
                )
                break
            # Safe to close: no other connection of this process can hold it yet.
            os.close(descriptor)
            return os.stat(real), True
    raise failure


def _accessible(name: str, mode: int) -> bool:
    if os.access in os.supports_effective_ids:
        return os.access(name, mode, effective_ids=True)
    return os.access(name, mode)  # pragma: no cover - platforms without faccessat


def _check_access(real: str) -> None:
    """Refuse an existing file this process cannot both read and write."""
    for mode, word in ((os.R_OK, "readable"), (os.W_OK, "writable")):
        if not _accessible(real, mode):
            raise PersistenceFailedError(
                "open",
                f"the database file is not {word} by this process",
                {"stage": "permissions", "errno": errno.EACCES},
            )
    folder = os.path.dirname(real)
    sides_exist = all(os.path.exists(real + suffix) for suffix in _SIDE_FILES)
    if not sides_exist and not _accessible(folder, os.W_OK | os.X_OK):
        raise PersistenceFailedError(
            "open",
            "the database file's folder is not writable by this process "
            "(SQLite keeps the -wal and -shm files there)",
            {"stage": "permissions", "errno": errno.EACCES},
        )


def _tighten(real: str, suffix: str) -> None:
    """Make one file of a new database readable by its owner only."""
    name = real + suffix
    failure: PersistenceFailedError | None = None
    try:
        info = os.lstat(name)
        if stat.S_ISREG(info.st_mode) and info.st_mode & 0o077:
            os.chmod(name, 0o600)
    except FileNotFoundError:
        return
    except OSError as error:
        failure = PersistenceFailedError(
            "open",
            f"could not make the new database's files private: {_os_reason(error)}",
            {"stage": "secure", "file": suffix or "database", "errno": error.errno},
        )
    if failure is not None:
        raise failure


#: Internal: the file changed while it was being read; look again.
_Changed = FileChanged


def _uri(real: str, query: str) -> str:
    return "file://" + urllib.parse.quote(os.fsencode(real)) + "?" + query


def _identity(real: str) -> tuple[int, ...]:
    try:
        info = os.stat(real)
    except OSError:
        return ()
    return (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


def _inspect(real: str, *, migrate: bool = True) -> None:
    """Read the schema of an existing non-empty file without writing anything.

    With a ``-wal`` or a rollback journal beside it, the read-only connection
    takes SQLite's locks (it creates nothing new: the side files exist). With
    neither, nobody is writing the file, and ``immutable=1`` reads it without
    creating a ``-wal``/``-shm`` (which a read-only look at a WAL file would
    otherwise leave beside a foreign file); if the file changed meanwhile (an
    opener started), the look is repeated. With ``migrate`` false a database
    that needs migrating is refused by this look, so the file is left as it
    is (a rollback-mode file is not switched to WAL first).
    """

    def judge(connection: sqlite3.Connection) -> PersistenceFailedError | None:
        refusal = _judge_schema(connection)
        if refusal is None and not migrate:
            # Refused here, before the read-write connection switches a
            # rollback-mode file to WAL (a write to its header).
            needed = _migrations.pending(connection)
            if needed:
                return needs_migration(needed, read_only=False)
        return refusal

    sides = any(os.path.exists(real + suffix) for suffix in ("-wal", "-journal"))
    before = _identity(real)
    connection = sqlite3.connect(
        _uri(real, "mode=ro" if sides else "mode=ro&immutable=1"),
        uri=True,
        timeout=BUSY_TIMEOUT_S,
        isolation_level=None,
        check_same_thread=False,
    )
    refusal: PersistenceFailedError | None = None
    problem: sqlite3.Error | None = None
    try:
        refusal = _in_one_snapshot(connection, judge)
    except sqlite3.Error as error:
        problem = error
    finally:
        connection.close()
    if not sides and (
        _identity(real) != before
        or any(os.path.exists(real + suffix) for suffix in ("-wal", "-journal"))
    ):
        raise _Changed
    if problem is not None:
        raise problem
    if refusal is not None:
        raise refusal


def _in_one_snapshot(connection: sqlite3.Connection, read: Callable[[sqlite3.Connection], T]) -> T:
    """Run the statements of ``read`` in one read transaction.

    In autocommit each statement would see the file as it is at that moment,
    so "no bookkeeping table" and "sixteen tables" could straddle another
    opener's migration and make a runstore database look foreign.
    """
    execute = sqlite3.Connection.execute
    execute(connection, "BEGIN")
    try:
        return read(connection)
    finally:
        if connection.in_transaction:
            execute(connection, "ROLLBACK")


def _judge_schema(connection: sqlite3.Connection) -> PersistenceFailedError | None:
    """Why the file must not be opened, or None when it is ours or empty."""
    applied = _read_record(connection)
    if isinstance(applied, PersistenceFailedError):
        return applied
    try:
        _migrations.check_applied(applied, connection)
    except SchemaRefused as refused:
        return UnsupportedDatabaseError(refused.reason, dict(refused.detail))
    return None


def _read_record(connection: sqlite3.Connection) -> dict[int, str] | PersistenceFailedError | None:
    """The migrations the file records; None without a bookkeeping table; a
    refusal when the record is not shaped the way this version writes it."""
    execute = sqlite3.Connection.execute
    exists = execute(
        connection,
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'flows_migrations'",
    ).fetchone()
    if exists is None:
        return None
    tampered = UnsupportedDatabaseError(
        _STAGE_TEXT["migration-record"], {"stage": "migration-record"}
    )
    try:
        rows = execute(connection, "SELECT id, name FROM flows_migrations").fetchall()
    except sqlite3.Error as error:
        if _primary(error) != _GENERIC_ERROR:
            raise
        rows = None  # a column is missing: the table was rebuilt by someone else
    if rows is None:
        return tampered
    applied: dict[int, str] = {}
    for row_id, name in rows:
        if type(row_id) is not int or type(name) is not str:
            return tampered
        applied[row_id] = name
    return applied


# --- steps, retries and what their failures say ------------------------------------


def _primary(error: BaseException) -> int | None:
    code = getattr(error, "sqlite_errorcode", None)
    return code & 0xFF if type(code) is int else None


def _step(stage: str, fn: Callable[[], T], policy: RetryPolicy = OPEN_RETRY) -> T:
    """Run one open step, waiting out another process that holds the file's lock.

    Transient failures (``SQLITE_BUSY``/``SQLITE_LOCKED``, or the file changing
    under a read-only look) are retried after a jittered back-off within
    ``policy``, as the store's writes are; any other failure is named.
    """
    started = time.monotonic()
    attempt = 0
    while True:
        attempt += 1
        failure: PersistenceFailedError
        try:
            return fn()
        except (sqlite3.Error, _Changed) as error:
            if isinstance(error, sqlite3.Error) and not is_transient(error):
                failure = _failure(stage, error)
            else:
                ceiling = min(policy.max_delay_ms, policy.base_delay_ms * 2 ** min(attempt, 30))
                delay_ms = _jitter.uniform(0, ceiling)
                elapsed_ms = (time.monotonic() - started) * 1000
                if attempt >= policy.max_attempts or elapsed_ms + delay_ms > policy.budget_ms:
                    failure = _still_busy(stage, error, attempt)
                else:
                    time.sleep(delay_ms / 1000)
                    continue
        # Raised outside the handler: no chain leads back to the driver's message.
        raise failure


def _still_busy(stage: str, error: BaseException, attempts: int) -> PersistenceFailedError:
    if isinstance(error, _readonly.ShmMissing):
        text = (
            "the database has a -wal file but no -shm, which a read-only open cannot create; "
            "open it once without read_only (or as a user who may write its folder)"
        )
        name = None
        stage = "side-files"
    elif isinstance(error, _Changed):
        text = "the database file kept changing while it was read"
        name = None
    else:
        text = "another process kept the database file locked"
        name = getattr(error, "sqlite_errorname", None)
    return PersistenceFailedError(
        "open", text, {"stage": stage, "sqlite_error": name, "attempts": attempts}
    )


def _failure(stage: str, error: sqlite3.Error) -> PersistenceFailedError:
    """The named error for a step's non-transient SQLite failure."""
    code = getattr(error, "sqlite_errorcode", None)
    name = getattr(error, "sqlite_errorname", None)
    primary = _primary(error)
    if primary == _NOT_A_DATABASE:
        if stage == "inspect":
            return UnsupportedDatabaseError(
                "the file is not a SQLite database", {"stage": "header"}
            )
        return UnsupportedDatabaseError("the file is not a runstore database", {"stage": "schema"})
    if primary == _CORRUPT:
        return UnsupportedDatabaseError(
            "the database file is corrupt", {"stage": "corrupt", "sqlite_error": name}
        )
    if code == _READONLY_ROLLBACK:
        return PersistenceFailedError(
            "open",
            "the file holds an interrupted write (a hot journal) that a read-only look "
            "cannot roll back; let the program that wrote it recover it",
            {"stage": "hot-journal", "sqlite_error": name},
        )
    if code == _READONLY_RECOVERY:
        return PersistenceFailedError(
            "open",
            "the database's -wal needs recovering (a writer was killed), which a read-only "
            "open cannot do; open it once without read_only",
            {"stage": "wal-recovery", "sqlite_error": name},
        )
    if code in (_READONLY_CANTINIT, _READONLY_DIRECTORY) or primary == _CANTOPEN:
        return PersistenceFailedError(
            "open",
            "SQLite could not set up the -wal and -shm files it reads the database through",
            {"stage": "side-files", "sqlite_error": name},
        )
    if stage == "migration-record" and primary == _GENERIC_ERROR:
        return UnsupportedDatabaseError(_STAGE_TEXT[stage], {"stage": stage, "sqlite_error": name})
    if primary == _READONLY:
        return PersistenceFailedError(
            "open",
            "the database file or its -wal/-shm files are not writable by this process",
            {"stage": "permissions", "sqlite_error": name},
        )
    return PersistenceFailedError(
        "open", _STAGE_TEXT[stage], {"stage": stage, "sqlite_error": name}
    )


def _connect(target: str, *, uri: bool) -> Connection:
    connection = sqlite3.connect(
        target,
        timeout=BUSY_TIMEOUT_S,
        isolation_level=None,
        check_same_thread=False,
        factory=Connection,
        cached_statements=256,
        uri=uri,
    )
    assert isinstance(connection, Connection)
    return connection


def _pragma(connection: sqlite3.Connection, text: str) -> Any:
    row = sqlite3.Connection.execute(connection, text).fetchone()
    return None if row is None else row[0]


def _has_json(connection: sqlite3.Connection) -> bool:
    try:
        return bool(_pragma(connection, "SELECT json_valid('{\"a\":[1]}')") == 1)
    except sqlite3.OperationalError as error:
        if "json_valid" not in str(error):
            raise
    return False


def _configure(connection: Connection, *, memory: bool, durability: str) -> None:
    # The first read: waits for an opener that is writing a new file's header.
    _step("configure", lambda: _pragma(connection, "SELECT count(*) FROM sqlite_master"))
    if not _step("configure", lambda: _has_json(connection)):
        raise UnsupportedDatabaseError("SQLite lacks JSON functions", {"stage": "sqlite-features"})
    mode = _step("wal", lambda: _pragma(connection, "PRAGMA journal_mode = WAL"))
    if not memory and str(mode).lower() != "wal":
        raise UnsupportedDatabaseError(
            "WAL cannot be enabled on this file", {"stage": "wal", "journal_mode": str(mode)}
        )

    def settings() -> Any:
        _pragma(connection, "PRAGMA foreign_keys = ON")
        enforced = _pragma(connection, "PRAGMA foreign_keys")
        _pragma(connection, "PRAGMA secure_delete = ON")
        _pragma(connection, f"PRAGMA synchronous = {_SYNCHRONOUS[durability]}")
        return enforced

    if _step("configure", settings) != 1:
        raise UnsupportedDatabaseError(
            "SQLite cannot enforce foreign keys", {"stage": "sqlite-features"}
        )


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


def _migrate(connection: Connection, *, allowed: bool = True) -> None:
    """Apply the pending migrations (one ``BEGIN IMMEDIATE`` that re-reads the
    record); refuse them when not ``allowed`` (``migrate=False``)."""
    failure: PersistenceFailedError | None = None
    try:
        needed = _step(
            "migration-record", lambda: _in_one_snapshot(connection, _migrations.pending)
        )
        if needed and not allowed:
            failure = needs_migration(needed, read_only=False)
        elif needed:
            _migrations.apply(connection, run=lambda step: _step("migrate", step))
    except SchemaRefused as refused:
        failure = UnsupportedDatabaseError(refused.reason, dict(refused.detail))
    if failure is not None:
        raise failure


# --- read-only ------------------------------------------------------------------------


def _open_read_only(text: str, clock: Clock, consensus: Any) -> SqliteRunStore:
    """Open an existing, migrated database without writing anything (see
    ``_readonly``): no file created, no mode changed, no migration."""
    real = os.path.realpath(text)
    info = _stat_existing(real, read_only=True)
    _check_kind(info)
    if not _accessible(real, os.R_OK):
        raise PersistenceFailedError(
            "open",
            "the database file is not readable by this process",
            {"stage": "permissions", "errno": errno.EACCES},
        )
    if info.st_size == 0:
        raise needs_migration(_migrations.MIGRATIONS, read_only=True)

    def connect(query: str) -> Connection:
        connection = _connect(_uri(real, query), uri=True)
        try:
            sqlite3.Connection.execute(connection, "PRAGMA query_only = ON")
        except BaseException:
            connection.close()
            raise
        return connection

    def first() -> tuple[Connection, _readonly.ImmutableReader | None]:
        query = _readonly.query_for(real)
        opened = _readonly.identity(real)
        connection = connect(query)
        if query != _readonly.IMMUTABLE:
            return connection, None
        return connection, _readonly.ImmutableReader(real, connect, opened)

    connection, reader = _step("open", first)
    holder = _Holder(connection)
    store: SqliteRunStore | None = None
    try:
        pending = _step("inspect", lambda: _look(holder, reader))
        if pending:
            raise needs_migration(pending, read_only=True)
        store = SqliteRunStore(
            holder.connection,
            clock=clock,
            consensus=consensus,
            path=text,
            read_only=True,
            reader=reader,
        )
        on_open = getattr(consensus, "on_open", None)
        if callable(on_open):
            store._tm.snapshot("open", on_open, keep=True)
    except BaseException:
        holder.connection.close()
        raise
    return store


#: A read-only look's finding: the pending migrations, or why not to open.
_Look = list[Migration] | PersistenceFailedError


class _Holder:
    """The connection a read-only look uses (a reader may replace it)."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection


def _look(holder: _Holder, reader: _readonly.ImmutableReader | None) -> list[Migration]:
    """Check the SQLite features the store needs and judge the schema in one
    read; the pending migrations. Raises the refusal of a foreign or newer
    schema."""

    def judge(connection: sqlite3.Connection) -> _Look:
        if not _has_json(connection):
            return UnsupportedDatabaseError(
                "SQLite lacks JSON functions", {"stage": "sqlite-features"}
            )
        refusal = _judge_schema(connection)
        if refusal is not None:
            return refusal
        return _migrations.pending(connection)

    def read(connection: sqlite3.Connection) -> _Look:
        return _in_one_snapshot(connection, judge)

    found = read(holder.connection) if reader is None else reader.read(holder, read)
    if isinstance(found, PersistenceFailedError):
        raise found
    return found
