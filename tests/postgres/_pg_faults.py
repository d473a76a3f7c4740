"""Throwaway PostgreSQL clusters on loopback TCP, and a TCP proxy, for the fault tests.

``Node`` is one cluster in a temporary folder, listening on ``127.0.0.1`` at
a free port (and on a unix socket there), run as ``nobody`` when the tests
run as root, started as a direct child with a parent-death signal. It stops
the way ``pg_ctl stop`` does, by signal: ``-m immediate`` is ``SIGQUIT``
(no checkpoint; recovery replays the write-ahead log at the next start),
``-m fast`` is ``SIGINT`` (sessions are ended, a checkpoint is written);
``kill()`` is ``SIGKILL`` to the postmaster, as a machine failure would do.
A node made with ``standby_of`` is a streaming replica cloned with
``pg_basebackup -R`` (replicating through the loopback port ``via``, a
proxy, when given); ``promote()`` makes it a primary.

Every node runs with ``synchronous_commit=on`` (a commit is acknowledged
after its WAL was written out, so a server crash loses nothing acknowledged)
and ``fsync=off`` (these tests crash the server's processes, not the
machine, so the kernel still holds what was written; far faster on a busy
machine).

``Proxy`` forwards TCP connections from a loopback port to a node and can
be paused: while paused it reads nothing from either side, so bytes in
flight wait in the sockets' buffers, as across a network partition;
``resume()`` lets them through.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import select
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any

import pytest

from runstore.stateful._targets._postgres import URL_VARIABLE, _binary, _die_with_parent

ROLE = "runstore"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def need_binaries() -> None:
    """Skip (fail under CI=true) unless this process may run its own clusters."""
    missing = [b for b in ("initdb", "postgres", "pg_basebackup") if _binary(b) is None]
    why = None
    if os.environ.get(URL_VARIABLE):
        why = f"runs its own clusters; {URL_VARIABLE} points at a server"
        pytest.skip(why)
    if missing:
        why = f"PostgreSQL binaries not found: {', '.join(missing)}"
    if why is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{why} (CI=true requires the PostgreSQL tests to run)")
        pytest.skip(why)


class Node:
    """One throwaway cluster on loopback TCP (see the module docstring)."""

    def __init__(
        self,
        *,
        standby_of: Node | None = None,
        via: int | None = None,
        settings: dict[str, str] | None = None,
    ) -> None:
        self._user: dict[str, Any] = {}
        if os.geteuid() == 0:
            entry = pwd.getpwnam("nobody")
            self._user = {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}
        self.folder = Path(tempfile.mkdtemp(prefix="runstore-pgfault-"))
        self.data = self.folder / "data"
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.log = self.folder / "server.log"
        try:
            if self._user:
                os.chown(self.folder, self._user["user"], self._user["group"])
            if standby_of is None:
                self._run(
                    _binary("initdb"), "-D", str(self.data), "-E", "UTF8", "--locale=C",
                    "-A", "trust", "-U", ROLE, "--no-sync",
                )  # fmt: skip
            else:
                self._run(
                    _binary("pg_basebackup"), "-h", "127.0.0.1",
                    "-p", str(via or standby_of.port),
                    "-U", ROLE, "-D", str(self.data), "-R", "-X", "stream", "--no-sync",
                    "--checkpoint=fast",
                )  # fmt: skip
            self.settings = {
                "listen_addresses": "127.0.0.1",
                "port": str(self.port),
                "unix_socket_directories": str(self.folder),
                "fsync": "off",
                "synchronous_commit": "on",
                "full_page_writes": "off",
                "shared_buffers": "16MB",
                "max_connections": "60",
                "wal_level": "replica",
                "max_wal_senders": "4",
                "hot_standby": "on",
                "log_min_messages": "warning",
                "log_min_error_statement": "panic",
                "log_error_verbosity": "terse",
                **(settings or {}),
            }
            self.start()
        except BaseException:
            self.destroy()
            raise

    def _run(self, *command: Any) -> None:
        with (self.folder / "setup.log").open("ab") as out:
            done = subprocess.run(
                [str(part) for part in command],
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.folder,
                check=False,
                timeout=120,
                **self._user,
            )
        if done.returncode != 0:
            text = (self.folder / "setup.log").read_text(errors="replace")[-800:]
            raise RuntimeError(f"{command[0]} failed: {text}")

    def url(self, database: str = "postgres", **params: str) -> str:
        query = urllib.parse.urlencode(params, quote_via=urllib.parse.quote)
        tail = f"?{query}" if query else ""
        return f"postgresql://{ROLE}@127.0.0.1:{self.port}/{database}{tail}"

    def start(self) -> None:
        arguments = [str(_binary("postgres")), "-D", str(self.data)]
        for key, value in self.settings.items():
            arguments += ["-c", f"{key}={value}"]
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                arguments,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.folder,
                preexec_fn=_die_with_parent,
                **self._user,
            )
        self.wait_ready()

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        import psycopg

        deadline = time.monotonic() + timeout_s
        while True:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"the server exited: {self.log.read_text()[-800:]}")
            try:
                psycopg.connect(self.url(), connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def stop(self, mode: str = "fast") -> None:
        """Stop as ``pg_ctl stop -m MODE`` does (``immediate``, ``fast``) or
        ``kill`` (SIGKILL the postmaster); returns once it has exited."""
        process = self.process
        if process is None or process.poll() is not None:
            return
        number = {"immediate": signal.SIGQUIT, "fast": signal.SIGINT, "kill": signal.SIGKILL}[mode]
        process.send_signal(number)
        process.wait(60)
        if mode == "kill":
            self._wait_backends_gone()

    def _wait_backends_gone(self) -> None:
        """After SIGKILL the postmaster's children notice its death and exit;
        wait until none holds the data folder's lock file's port."""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", self.port)) != 0:
                    return
            time.sleep(0.05)

    def restart(self, mode: str) -> None:
        self.stop(mode)
        self.start()

    def sql(self, statement: str, database: str = "postgres") -> list[tuple[Any, ...]]:
        import psycopg

        with psycopg.connect(self.url(database), autocommit=True) as connection:
            cursor = connection.execute(statement)
            return cursor.fetchall() if cursor.description is not None else []

    def promote(self) -> None:
        assert self.sql("SELECT pg_promote(true, 60)") == [(True,)]

    def destroy(self) -> None:
        with contextlib.suppress(Exception):
            self.stop("immediate")
        shutil.rmtree(self.folder, ignore_errors=True)


class Proxy:
    """A pausable TCP forwarder from a loopback port to ``port``: a thread
    per direction of each connection, so one slow reader never stalls
    another connection."""

    def __init__(self, port: int) -> None:
        self.target = port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        self.paused = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        #: The pumps still running, and those of them parked by the pause.
        self._pumping: set[int] = set()
        self._parked: set[int] = set()
        self._threads: list[threading.Thread] = []
        self._spawn(self._accept_loop)

    def url(self, database: str, **params: str) -> str:
        query = urllib.parse.urlencode(params, quote_via=urllib.parse.quote)
        tail = f"?{query}" if query else ""
        return f"postgresql://{ROLE}@127.0.0.1:{self.port}/{database}{tail}"

    def pause(self) -> None:
        """Stop forwarding; returns once no pump can forward another byte
        (each has seen the pause), so whatever is sent after it is held."""
        self.paused.set()
        deadline = time.monotonic() + 5
        while True:
            with self._lock:
                moving = self._pumping - self._parked
            if not moving:
                return
            assert time.monotonic() < deadline, "a proxy pump never saw the pause"
            time.sleep(0.005)

    def resume(self) -> None:
        self.paused.clear()

    def _spawn(self, target: Any, *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, name="pg-proxy", daemon=True)
        with self._lock:
            self._threads.append(thread)
        thread.start()

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            if self.paused.is_set():
                time.sleep(0.01)
                continue
            ready, _, _ = select.select([self.listener], [], [], 0.05)
            if not ready:
                continue
            try:
                client, _ = self.listener.accept()
            except OSError:
                continue
            try:
                server = socket.create_connection(("127.0.0.1", self.target))
            except OSError:
                client.close()  # the server is gone: refuse this one
                continue
            with self._lock:
                self._sockets += [client, server]
            self._spawn(self._pump, client, server)
            self._spawn(self._pump, server, client)

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        me = threading.get_ident()
        with self._lock:
            self._pumping.add(me)
        try:
            while not self._stop.is_set():
                if self.paused.is_set():
                    with self._lock:
                        self._parked.add(me)
                    time.sleep(0.01)
                    continue
                with self._lock:
                    self._parked.discard(me)
                ready, _, _ = select.select([source], [], [], 0.05)
                if not ready:
                    continue
                data = source.recv(65536)
                if not data:
                    break
                sink.sendall(data)
        except (OSError, ValueError):
            pass
        finally:
            with self._lock:
                self._pumping.discard(me)
                self._parked.discard(me)
        for one in (source, sink):
            with contextlib.suppress(OSError):
                one.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        """Stop forwarding and drop every connection (bytes in flight are lost)."""
        self._stop.set()
        # The accept loop may still take one connection and start its pumps
        # after the stop: join every thread until none is new, so the last
        # look at the sockets sees them all (one left open is a
        # ResourceWarning in whichever later test collects it).
        joined = 0
        while True:
            with self._lock:
                sockets, threads = list(self._sockets), self._threads[joined:]
            for one in sockets:
                with contextlib.suppress(OSError):
                    one.shutdown(socket.SHUT_RDWR)
            if not threads:
                break
            for thread in threads:
                thread.join(5)
            joined += len(threads)
        for one in sockets:
            one.close()
        self.listener.close()
