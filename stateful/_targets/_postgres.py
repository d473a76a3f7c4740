"""PostgreSQL servers for the conformance suite and the tests.

A ``Server`` is somewhere runstore may create and drop databases: the
``RUNSTORE_TEST_POSTGRES`` URL when it is set (a role with ``CREATEDB``), else
a throwaway cluster this process starts itself when ``initdb`` and
``postgres`` are on ``PATH``. The throwaway cluster lives in a temporary
folder (on a tmpfs when there is one: ``Cluster``'s ``in_memory``), listens
only on a unix socket there, runs with ``fsync=off`` (a durability test asks
for its own cluster, on disk, with ``fsync=True``), and is started
as the unprivileged user ``nobody`` when this process runs as root (the server
refuses root). It is started as a direct child, not daemonized, with a
parent-death signal, so a test run that is killed takes its server with it.

Each test or example gets a fresh database cloned from a template migrated
once per server (``CREATE DATABASE ... TEMPLATE ... STRATEGY FILE_COPY``,
tens of milliseconds), with a new source identity, and drops it afterwards;
a worker thread clones ahead and drops behind, off the tests' path.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import itertools
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from runstore._version import install_hint

#: The variable that points the tests (and the ``postgres-sql`` fuzz target)
#: at an existing server instead of a throwaway cluster.
URL_VARIABLE = "RUNSTORE_TEST_POSTGRES"
TEMPLATE = "runstore_template"
_UNPRIVILEGED = "nobody"
_START_TIMEOUT_S = 60.0
_PR_SET_PDEATHSIG = 1

HOW_TO_ENABLE = (
    f"set {URL_VARIABLE}=postgresql://USER@HOST/DB (a role with CREATEDB) or put "
    "PostgreSQL's initdb and postgres on PATH (e.g. apt-get install postgresql; "
    "they live in /usr/lib/postgresql/<version>/bin)"
)


class Unavailable(Exception):
    """No PostgreSQL server can be had; the message says why and how to fix it."""


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGQUIT, 0, 0, 0)


def _binary(name: str) -> str | None:
    found = shutil.which(name)
    if found is not None:
        return found
    # Debian keeps the server binaries out of PATH.
    for candidate in sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"), reverse=True):
        return str(candidate)
    return None


#: Where an in-memory cluster lives (a tmpfs), and the room it must leave free
#: there: a test run's cluster holds a few dozen databases (8 MB each) and
#: its write-ahead log at a time.
MEMORY_FOLDER = Path("/dev/shm")
MEMORY_FOLDER_FREE = 2 << 30


def _memory_folder() -> str | None:
    """``MEMORY_FOLDER`` (Linux's shared-memory tmpfs) when it is there,
    writable and has ``MEMORY_FOLDER_FREE`` to spare, else None (the
    system's temporary folder). A run killed before it cleaned up leaves its
    folders there: the room asked for is what bounds them."""
    try:
        if not os.access(MEMORY_FOLDER, os.W_OK | os.X_OK):
            return None
        stats = os.statvfs(MEMORY_FOLDER)
    except OSError:
        return None
    if stats.f_bavail * stats.f_frsize < MEMORY_FOLDER_FREE:
        return None
    return str(MEMORY_FOLDER)


class Cluster:
    """A throwaway cluster: ``initdb`` in a temporary folder, then ``postgres``.

    ``in_memory``: the folder on a tmpfs when there is one with room
    (``MEMORY_FOLDER``), for a cluster whose durability nothing measures
    (``fsync`` off): creating a database copies some 300 files, and on a
    disk the file system's work for them (an ``openat`` that creates a file
    took 0.3 ms on our test machine) made the clones of a test run a fifth
    of its CPU. A crash of the server loses nothing there either; only the
    machine's would.
    """

    def __init__(self, *, fsync: bool = False, in_memory: bool = False) -> None:
        initdb, postgres = _binary("initdb"), _binary("postgres")
        if initdb is None or postgres is None:
            raise Unavailable(f"PostgreSQL binaries not found; {HOW_TO_ENABLE}")
        self._user: dict[str, Any] = {}
        if os.geteuid() == 0:
            try:
                entry = pwd.getpwnam(_UNPRIVILEGED)
            except KeyError:
                raise Unavailable(
                    f"running as root and there is no {_UNPRIVILEGED!r} user to run the "
                    f"server as; {HOW_TO_ENABLE}"
                ) from None
            self._user = {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}
        self.folder = Path(
            tempfile.mkdtemp(prefix="runstore-pg-", dir=_memory_folder() if in_memory else None)
        )
        self.role = "runstore"
        self._process: subprocess.Popen[bytes] | None = None
        try:
            if self._user:
                os.chown(self.folder, self._user["user"], self._user["group"])
            data = self.folder / "data"
            log = self.folder / "initdb.log"
            command = [initdb, "-D", str(data), "-E", "UTF8", "--locale=C", "-A", "trust"]
            with log.open("wb") as out:
                done = subprocess.run(
                    [*command, "-U", self.role, "--no-sync"],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    cwd=self.folder,
                    check=False,
                    **self._user,
                )
            if done.returncode != 0:
                raise Unavailable(f"initdb failed ({_tail(log)}); {HOW_TO_ENABLE}")
            settings = {
                "listen_addresses": "",
                "unix_socket_directories": str(self.folder),
                "fsync": "on" if fsync else "off",
                "synchronous_commit": "on" if fsync else "off",
                "full_page_writes": "on" if fsync else "off",
                "shared_buffers": "32MB",
                "max_connections": "200",
                "max_wal_size": "1GB",
                "checkpoint_timeout": "30min",
                # PostgreSQL logs an error with its DETAIL, which quotes a
                # failing row (run state, attempt values): keep it out.
                "log_min_messages": "warning",
                "log_min_error_statement": "panic",
                "log_error_verbosity": "terse",
            }
            self._arguments = [postgres, "-D", str(data)]
            for key, value in settings.items():
                self._arguments += ["-c", f"{key}={value}"]
            self._log = self.folder / "server.log"
            with self._log.open("wb") as out:
                self._process = subprocess.Popen(
                    self._arguments,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    cwd=self.folder,
                    preexec_fn=_die_with_parent,
                    **self._user,
                )
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        atexit.register(self.stop)

    @property
    def url(self) -> str:
        """The admin URL (the bootstrap superuser, database ``postgres``)."""
        host = urllib.parse.quote(str(self.folder), safe="")
        return f"postgresql://{self.role}@/postgres?host={host}"

    @property
    def log_path(self) -> Path:
        return self._log

    def _wait_ready(self) -> None:
        import psycopg

        deadline = time.monotonic() + _START_TIMEOUT_S
        while True:
            assert self._process is not None
            if self._process.poll() is not None:
                raise Unavailable(f"the server exited at start ({_tail(self._log)})")
            try:
                psycopg.connect(self.url, connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise Unavailable("the server did not accept connections in time") from None
                time.sleep(0.05)

    def crash(self) -> None:
        """Stop the server without a shutdown checkpoint (an immediate stop)."""
        if self._process is not None and self._process.poll() is None:
            self._process.send_signal(signal.SIGQUIT)
            self._process.wait(30)

    def restart(self) -> None:
        """Start the server again on the same data folder (after ``crash``)."""
        self.crash()
        with self._log.open("ab") as out:
            self._process = subprocess.Popen(
                self._arguments,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.folder,
                preexec_fn=_die_with_parent,
                **self._user,
            )
        self._wait_ready()

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGINT)  # fast shutdown
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(30)
        shutil.rmtree(self.folder, ignore_errors=True)


def _tail(path: Path, lines: int = 5) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "no log"
    return " | ".join(text[-lines:]) or "no output"


def with_database(url: str, database: str) -> str:
    """``url`` with its database name replaced by ``database``."""
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit(parts._replace(path="/" + urllib.parse.quote(database)))


#: How many cloned databases the worker keeps ready ahead of demand.
PREFETCH = 2
#: ``CREATE DATABASE ... STRATEGY``: ``FILE_COPY`` copies the template's files
#: (two checkpoints, cheap with fsync off); ``WAL_LOG`` logs every page.
STRATEGY = os.environ.get("RUNSTORE_TEST_CLONE_STRATEGY", "FILE_COPY")


class Server:
    """A server runstore may create databases on, with a migrated template.

    Cloning and dropping run on a worker thread with its own connection, so
    a test neither waits for its database's clone (one is kept ready) nor
    for the last one's drop. ``clone_seconds`` holds each clone's duration,
    ``wait_seconds`` how long each caller of ``fresh_database`` waited.
    """

    def __init__(self, url: str, cluster: Cluster | None = None) -> None:
        self.url = url
        self.cluster = cluster
        self._lock = threading.Lock()
        self._names = itertools.count(1)
        self._prefix = f"rs_{os.getpid()}_{int(time.time()) % 100_000}"
        self._template: str | None = None
        self._live: set[str] = set()
        self.clone_seconds: list[float] = []
        self.wait_seconds: list[float] = []
        self._admin_connection: Any = None
        self._work = threading.Condition()
        self._ready: list[str] = []
        self._doomed: list[str] = []
        self._failure: BaseException | None = None
        self._worker: threading.Thread | None = None
        self._stopping = False
        atexit.register(self.close)

    def _admin(self) -> Any:
        import psycopg

        if self._admin_connection is None or self._admin_connection.closed:
            self._admin_connection = psycopg.connect(self.url, autocommit=True)
        return self._admin_connection

    def admin(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Run one statement on the admin connection (database of ``url``)."""
        with self._lock:
            cursor = self._admin().execute(sql, params)
            return cursor.fetchall() if cursor.description is not None else []

    def _ensure_template(self) -> str:
        with self._lock:
            if self._template is not None:
                return self._template
            from psycopg import sql

            import runstore.postgres

            name = f"{self._prefix}_template"
            self._admin().execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            runstore.postgres.open(with_database(self.url, name)).close()
            self._template = name
            return name

    # -- the worker ---------------------------------------------------------------

    def _start_worker(self) -> None:
        with self._work:
            if self._worker is None:
                self._worker = threading.Thread(
                    target=self._serve, name="runstore-test-databases", daemon=True
                )
                self._worker.start()

    def _serve(self) -> None:
        import psycopg

        try:
            with psycopg.connect(self.url, autocommit=True) as connection:
                while True:
                    with self._work:
                        while not (self._stopping or self._doomed or len(self._ready) < PREFETCH):
                            self._work.wait()
                        if self._stopping:
                            return
                        doomed = self._doomed.pop() if self._doomed else None
                    if doomed is not None:
                        self._drop_now(connection, doomed)
                    else:
                        name = self._clone(connection)
                        with self._work:
                            self._ready.append(name)
                            self._work.notify_all()
        except BaseException as error:  # reported to the next caller
            with self._work:
                self._failure = error
                self._work.notify_all()

    def _clone(self, connection: Any) -> str:
        import psycopg
        from psycopg import sql

        assert self._template is not None
        name = f"{self._prefix}_{next(self._names)}"
        started = time.perf_counter()
        connection.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {} STRATEGY {}").format(
                sql.Identifier(name), sql.Identifier(self._template), sql.SQL(STRATEGY)
            )
        )
        with self._lock:
            self._live.add(name)
        with psycopg.connect(with_database(self.url, name), autocommit=True) as clone:
            clone.execute(
                "UPDATE flows_run_source SET source = md5(random()::text || clock_timestamp())"
            )
        self.clone_seconds.append(time.perf_counter() - started)
        return name

    def _drop_now(self, connection: Any, name: str) -> None:
        import psycopg
        from psycopg import sql

        # A database that cannot be dropped now stays until the cluster goes.
        with contextlib.suppress(psycopg.Error):
            connection.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )

    # -- the interface --------------------------------------------------------------

    def fresh_database(self) -> str:
        """A new database, migrated, with its own source identity; its URL."""
        self._ensure_template()
        self._start_worker()
        started = time.perf_counter()
        with self._work:
            while not self._ready and self._failure is None:
                self._work.wait()
            if self._failure is not None:
                raise Unavailable(f"cloning test databases failed ({self._failure!r})")
            name = self._ready.pop(0)
            self._work.notify_all()
        self.wait_seconds.append(time.perf_counter() - started)
        return with_database(self.url, name)

    def drop(self, url: str) -> None:
        """Drop the database behind ``url`` soon (its connections are ended)."""
        name = urllib.parse.unquote(urllib.parse.urlsplit(url).path.lstrip("/"))
        with self._lock:
            if name not in self._live:
                return
            self._live.discard(name)
        with self._work:
            self._doomed.append(name)
            self._work.notify_all()

    def terminate_connections(self, url: str) -> int:
        """End every connection to ``url``'s database (a crash, as the server
        sees it), waiting (up to 5 s each) until those backends have exited,
        so their clients have been told by the time this returns."""
        name = urllib.parse.unquote(urllib.parse.urlsplit(url).path.lstrip("/"))
        rows = self.admin(
            "SELECT count(pg_terminate_backend(pid, 5000)) FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid()",
            (name,),
        )
        return int(rows[0][0])

    def close(self) -> None:
        """Stop the worker and drop every database this server made."""
        with self._work:
            self._stopping = True
            self._work.notify_all()
            worker = self._worker
        if worker is not None:
            worker.join(60)
        with contextlib.suppress(Exception):
            from psycopg import sql

            names = set(self._live) | set(self._doomed) | set(self._ready)
            if self._template is not None:
                names.add(self._template)
            for name in sorted(names):
                self._admin().execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
                )
            self._live.clear()
            self._template = None
        if self._admin_connection is not None:
            with contextlib.suppress(Exception):
                self._admin_connection.close()
            self._admin_connection = None


_server_lock = threading.Lock()
_server: Server | Unavailable | None = None


def server() -> Server:
    """The process's server: ``RUNSTORE_TEST_POSTGRES``, else a throwaway
    cluster started on first use. Raises ``Unavailable`` saying why not."""
    global _server
    with _server_lock:
        if _server is None:
            _server = _resolve()
        if isinstance(_server, Unavailable):
            raise Unavailable(str(_server))
        return _server


def _resolve() -> Server | Unavailable:
    try:
        import psycopg
    except ImportError:
        return Unavailable(f"psycopg is not installed ({install_hint('postgres')})")
    url = os.environ.get(URL_VARIABLE)
    if url:
        import psycopg

        try:
            psycopg.connect(url, connect_timeout=10).close()
        except psycopg.Error as error:
            # Named by class only: libpq's text may quote the URL.
            refusal = type(error).__name__
            return Unavailable(f"{URL_VARIABLE} names a server that refused ({refusal})")
        return Server(url)
    try:
        cluster = Cluster(in_memory=True)
    except Unavailable as why:
        return why
    except OSError as error:
        return Unavailable(f"could not start a throwaway cluster ({error}); {HOW_TO_ENABLE}")
    return Server(cluster.url, cluster)


@contextlib.contextmanager
def fresh_database() -> Iterator[str]:
    """A fresh database's URL for the block, dropped afterwards."""
    found = server()
    url = found.fresh_database()
    try:
        yield url
    finally:
        found.drop(url)


def postgres_store_factory(
    consensus_factory: Callable[[], Any] | None = None,
    *,
    fast_path: bool | None = None,
) -> Callable[[Any, Path], Any]:
    """A conformance store factory over PostgreSQL: the first call for a path
    gets a fresh database (and drops the one an earlier path had, whose
    example is over); a later call for the same path ends every connection to
    that database (a crash, as the server sees it) and reopens it.
    ``fast_path`` is passed to ``runstore.postgres.open`` (False: the
    general path even with ``SqlConsensus``), and so is the factory's own
    ``check_clock`` keyword (the server-clock machine passes True)."""
    databases: dict[Path, str] = {}

    def factory(clock: Any, path: Path, *, check_clock: bool | None = None) -> Any:
        import runstore.postgres

        found = server()
        url = databases.get(path)
        if url is None:
            for old in list(databases):
                found.drop(databases.pop(old))
            url = databases[path] = found.fresh_database()
        else:
            found.terminate_connections(url)
        consensus = None if consensus_factory is None else consensus_factory()
        return runstore.postgres.open(
            url, clock=clock, consensus=consensus, fast_path=fast_path, check_clock=check_clock
        )

    factory.__qualname__ = "postgres_store_factory"
    return factory


#: The server's clock in whole milliseconds (floored), the suite's own query.
SERVER_NOW = "SELECT floor(extract(epoch FROM pg_catalog.clock_timestamp()) * 1000)::bigint"


def server_now_ms() -> int:
    """The clock of the server ``postgres_store_factory``'s databases live on."""
    return int(server().admin(SERVER_NOW)[0][0])


#: The ``postgres-sql`` target's factory (``SqlConsensus``), by name for
#: regression files: ``from runstore.stateful._targets._postgres import postgres_sql_store``.
postgres_sql_store = postgres_store_factory()
