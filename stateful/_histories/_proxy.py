"""Lost acknowledgements aimed at commits: a loopback proxy in front of PostgreSQL.

A write whose commit reached the server but whose answer never reached the
client has an unknown outcome: the store must say so (``persistence_failed``
with ``outcome_unknown``), never "done" and never "not done", and must not
replay it. A server restart lands in that window only by luck. A
``CommitCutter`` aims at it: it listens on ``127.0.0.1`` and relays each
connection to the server (its unix socket or its TCP address), reading the
frontend protocol as it goes. When it is armed, the next message that
commits is forwarded to the server and the connection is cut before the
answer reaches the client: at once (the server commits, or not, while the
client is already gone) or once the server has answered (the commit
surely happened, and the answer is thrown away).

A message commits when it is a ``COMMIT`` (or ``END``) in a simple Query or
in an extended-protocol Parse/Bind/Execute batch (cut at its Sync), or a
write sent outside any transaction, which commits by itself: an INSERT,
UPDATE, DELETE, MERGE or CALL, or the one-statement write of runstore's
one-round-trip path (a prepared ``SELECT`` of one of its server-side
``flows_op_`` functions). Whether the session is inside a transaction is
read from the server's ReadyForQuery messages. SSL and GSS encryption
requests are refused (the client goes on in the clear on the loopback).

``runstore torture --lost-acks SECONDS`` runs one in the coordinator and
points the workers at it; it arms itself at random, seeded moments about
``SECONDS`` apart (by default on PostgreSQL, only in the phases of some
workloads: see ``runstore.stateful._campaigns._torture``).
"""

from __future__ import annotations

import contextlib
import random
import re
import selectors
import socket
import struct
import threading
import urllib.parse
from collections.abc import Callable
from typing import Any

_SSL_REQUEST = 80877103
_GSS_REQUEST = 80877104
_CANCEL_REQUEST = 80877102
_WRITES = ("INSERT", "UPDATE", "DELETE", "MERGE", "CALL")
#: The server-side functions of runstore's one-round-trip path, each a write.
_OPERATION_CALL = re.compile(r"\bflows_op_\w+\s*\(", re.IGNORECASE)


def first_keyword(statement: str) -> str:
    """The first keyword of ``statement``, upper case (comments skipped)."""
    text = statement.lstrip(" \t\r\n(")
    while text.startswith(("--", "/*")):
        line = text.startswith("--")
        end = text.find("\n") if line else text.find("*/")
        text = "" if end < 0 else text[end + (1 if line else 2) :].lstrip(" \t\r\n(")
    return text.split(None, 1)[0].rstrip(";").upper() if text else ""


def ends_transaction(statement: str) -> bool:
    """``COMMIT`` or ``END``: commits an explicit transaction."""
    return first_keyword(statement) in ("COMMIT", "END")


def writes(statement: str) -> bool:
    """Whether ``statement`` writes: a data-changing statement, or a SELECT
    that calls one of the server-side operations of runstore's
    one-round-trip path (``flows_op_...``)."""
    kind = first_keyword(statement)
    if kind in _WRITES:
        return True
    return kind in ("SELECT", "WITH") and _OPERATION_CALL.search(statement) is not None


def _server_address(url: str) -> tuple[int, Any]:
    """The socket family and address of the server ``url`` names."""
    parts = urllib.parse.urlsplit(url)
    query = dict(urllib.parse.parse_qsl(parts.query))
    host = query.get("host") or parts.hostname or "/var/run/postgresql"
    port = int(query.get("port") or parts.port or 5432)
    if host.startswith("/"):
        return socket.AF_UNIX, f"{host}/.s.PGSQL.{port}"
    return socket.AF_INET, (host, port)


def _through(url: str, port: int) -> str:
    """``url`` pointed at ``127.0.0.1:port`` in the clear."""
    parts = urllib.parse.urlsplit(url)
    query = [
        (key, value)
        for key, value in urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
        if key not in ("host", "hostaddr", "port", "sslmode", "gssencmode")
    ]
    query += [("sslmode", "disable"), ("gssencmode", "disable")]
    user = parts.netloc.rpartition("@")[0]
    netloc = f"{user}@127.0.0.1:{port}" if user else f"127.0.0.1:{port}"
    return urllib.parse.urlunsplit(
        parts._replace(netloc=netloc, query=urllib.parse.urlencode(query))
    )


class CommitCutter:
    """The proxy in front of the server at ``target`` (a ``postgresql://`` URL).

    ``url`` is the same target through the proxy. ``arm()`` makes the next
    committing message of any connection lose its answer; ``cuts`` counts
    the connections cut so, ``relayed`` the connections relayed. A cut
    waits for the server's answer with chance ``wait_chance`` (drawn with
    ``rng``), else cuts at once. ``every_s`` (when
    positive) arms it by itself at random moments, ``every_s`` apart on
    average; with ``gate`` only at moments when ``gate()`` is true (the
    torture's default mix loses acknowledgements in some phases only).
    ``close()`` stops it and cuts every connection.
    """

    def __init__(
        self,
        target: str,
        rng: random.Random,
        *,
        every_s: float = 0.0,
        wait_chance: float = 0.5,
        gate: Callable[[], bool] | None = None,
    ) -> None:
        self.target = target
        self.rng = rng
        self.wait_chance = wait_chance
        self.every_s = every_s
        self.gate = gate
        self.cuts = 0
        self.relayed = 0
        self._family, self._address = _server_address(target)
        self._armed = False
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._sockets: set[socket.socket] = set()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.url = _through(target, self.port)
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        if every_s > 0:
            self._threads.append(threading.Thread(target=self._arming, daemon=True))
        for thread in self._threads:
            thread.start()

    # -- control -------------------------------------------------------------------

    def arm(self) -> None:
        """Cut the next committing message's connection."""
        with self._lock:
            self._armed = True

    @property
    def armed(self) -> bool:
        """Whether a cut is waiting for its commit."""
        with self._lock:
            return self._armed

    def _take(self) -> bool:
        with self._lock:
            taken, self._armed = self._armed, False
            if taken:
                self.cuts += 1
            return taken

    def _arming(self) -> None:
        while not self._closed.wait(self.rng.uniform(0.5, 1.5) * self.every_s):
            if self.gate is None or self.gate():
                self.arm()
            else:
                # Out of the gate's time: a cut armed before and not yet taken lapses.
                with self._lock:
                    self._armed = False

    def close(self) -> None:
        """Stop listening and cut every connection still relayed."""
        self._closed.set()
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            open_sockets = list(self._sockets)
        for sock in open_sockets:
            with contextlib.suppress(OSError):
                sock.close()
        for thread in self._threads:
            thread.join(5)

    def __enter__(self) -> CommitCutter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- relaying ------------------------------------------------------------------

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            thread = threading.Thread(target=self._relay, args=(client,), daemon=True)
            thread.start()

    def _relay(self, client: socket.socket) -> None:
        server = socket.socket(self._family, socket.SOCK_STREAM)
        with self._lock:
            self._sockets.update((client, server))
            self.relayed += 1
        try:
            server.connect(self._address)
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            _Session(self, client, server).run()
        except OSError:
            pass
        finally:
            for sock in (client, server):
                with contextlib.suppress(OSError):
                    sock.close()
            with self._lock:
                self._sockets.difference_update((client, server))


class _Session:
    """One relayed connection: the frontend stream parsed message by message,
    the backend's parsed for ReadyForQuery (and, during a cut, discarded)."""

    def __init__(self, cutter: CommitCutter, client: socket.socket, server: socket.socket) -> None:
        self.cutter = cutter
        self.client = client
        self.server = server
        self.from_client = bytearray()
        self.from_server = bytearray()
        self.started = False  # past the startup packet
        self.raw = False  # a cancel request: bytes relayed as they are
        self.status = b"I"  # the server's last transaction status
        self.statements: dict[bytes, str] = {}
        self.portals: dict[bytes, str] = {}
        self.batch: list[str] = []
        self.cutting: str | None = None  # None, or waiting for the answer to drop

    def run(self) -> None:
        selector = selectors.DefaultSelector()
        selector.register(self.client, selectors.EVENT_READ, self._client_data)
        selector.register(self.server, selectors.EVENT_READ, self._server_data)
        try:
            while not self.cutter._closed.is_set():
                for key, _ in selector.select(0.5):
                    handler: Callable[[bytes], bool] = key.data
                    data = key.fileobj.recv(65536)  # type: ignore[union-attr]
                    if not data or not handler(data):
                        return
        finally:
            selector.close()

    # -- from the client --

    def _client_data(self, data: bytes) -> bool:
        if self.cutting is not None:
            return True  # the client's further words are dropped with the connection
        if self.raw:
            self.server.sendall(data)
            return True
        self.from_client += data
        while True:
            if not self.started:
                if len(self.from_client) < 8:
                    return True
                (length,) = struct.unpack("!i", self.from_client[:4])
                if len(self.from_client) < length:
                    return True
                packet = bytes(self.from_client[:length])
                del self.from_client[:length]
                (code,) = struct.unpack("!i", packet[4:8])
                if code in (_SSL_REQUEST, _GSS_REQUEST):
                    self.client.sendall(b"N")
                    continue
                self.server.sendall(packet)
                if code == _CANCEL_REQUEST:
                    self.raw = True
                    self.server.sendall(bytes(self.from_client))
                    self.from_client.clear()
                    return True
                self.started = True
                continue
            if len(self.from_client) < 5:
                return True
            kind = bytes(self.from_client[0:1])
            (length,) = struct.unpack("!i", self.from_client[1:5])
            if len(self.from_client) < 1 + length:
                return True
            message = bytes(self.from_client[: 1 + length])
            del self.from_client[: 1 + length]
            commits = self._commits(kind, message[5:])
            self.server.sendall(message)
            if commits and self.cutter._take():
                return self._cut()

    def _commits(self, kind: bytes, body: bytes) -> bool:
        """Whether ``kind``/``body`` ends a batch whose effect commits."""
        if kind == b"Q":
            text = body.split(b"\0", 1)[0].decode(errors="replace")
            return ends_transaction(text) or (self.status == b"I" and writes(text))
        if kind == b"P":
            name, rest = body.split(b"\0", 1)
            self.statements[name] = rest.split(b"\0", 1)[0].decode(errors="replace")
        elif kind == b"B":
            portal, rest = body.split(b"\0", 1)
            statement = rest.split(b"\0", 1)[0]
            self.portals[portal] = self.statements.get(statement, "")
        elif kind == b"E":
            portal = body.split(b"\0", 1)[0]
            self.batch.append(self.portals.get(portal, ""))
        elif kind == b"S":
            batch, self.batch = self.batch, []
            explicit = any(first_keyword(text) in ("BEGIN", "START") for text in batch)
            if any(ends_transaction(text) for text in batch):
                return True
            return self.status == b"I" and not explicit and any(writes(text) for text in batch)
        return False

    def _cut(self) -> bool:
        """The committing message went out: cut now, or once it is answered."""
        if self.cutter.rng.random() >= self.cutter.wait_chance:
            return False  # at once
        self.cutting = "answer"
        return True

    # -- from the server --

    def _server_data(self, data: bytes) -> bool:
        self.from_server += data
        forward = bytearray()
        while len(self.from_server) >= 5:
            kind = self.from_server[0:1]
            (length,) = struct.unpack("!i", self.from_server[1:5])
            if len(self.from_server) < 1 + length:
                break
            message = bytes(self.from_server[: 1 + length])
            del self.from_server[: 1 + length]
            if kind == b"Z":
                self.status = message[5:6]
                if self.cutting is not None:
                    return False  # answered, and the answer is dropped with the connection
            forward += message
        if self.cutting is None and forward:
            self.client.sendall(forward)
        return True
