"""Waking workers on PostgreSQL: the store's notification and its listener.

After a write that may have made a run claimable (``create``; a
``transition_owned`` to ``suspended``; ``abandon_claim`` and
``recover_claim`` that cleared a claim) or that recorded a cancellation
request (``request_cancel``, ``request_cancel_lineage`` answering
``CancelRequested``) has committed, the store sends ``NOTIFY`` on the
schema's channel (``channel_for``), as a statement of its own
(``TransactionManager.wake``). Never inside the write's transaction: at
commit, a transaction that notified takes a lock of the whole database and
holds it through its commit's WAL flush, so notifying writers would commit
one at a time (the PostgreSQL guide, "The change feed", says why that
matters, and "Waking workers" what is sent). A
transaction that only notifies writes no WAL before its commit record, so
its commit waits for no flush (nor for a synchronous standby) and holds the
lock for microseconds; it waits at most ``NOTIFY_LOCK_TIMEOUT_MS`` for the
lock (another session's commit may hold it). The payload is empty: nothing
of a run. One notification covers every write committed before it, and a
store sends at most one each ``NOTIFY_SPACING_MS``: one due sooner is held
back and sent at its time (``TransactionManager.wake``).
Losing a notification (a failure to send it is swallowed; the write had
committed) costs a waiting worker at most one polling interval.

``PostgresListener`` is the other end: its own connection, ``LISTEN`` on
the channel, ``wait(timeout_s)`` answering True when a notification arrived
since the last ``wait``.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import select
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any, Final, Self

import psycopg
from psycopg import pq

from .._errors import InvalidRunError, PersistenceFailedError
from ._errors import connect_reason, failure_reason, reason_text, sqlstate

#: What every channel name begins with; the schema's name follows when the
#: whole fits in PostgreSQL's 63 bytes, else ``#`` and a digest of it.
CHANNEL_PREFIX: Final = "runstore"
_NAME_BYTES: Final = 63

#: The least time between two notifications of one store: one due sooner is
#: held back until then, and covers every write made meanwhile. Under a
#: stream of writes it bounds what notifications cost (each one wakes every
#: listener); a waiting worker hears of a run at most this much later.
NOTIFY_SPACING_MS: Final = 50

#: The longest wait of the notification for the database's notify lock (held
#: by another session committing a NOTIFY of its own); then it is dropped.
NOTIFY_LOCK_TIMEOUT_MS: Final = 500

#: The notification: one statement in its own implicit transaction, which
#: gives up on the notify lock after ``NOTIFY_LOCK_TIMEOUT_MS`` (a setting
#: local to it, still in force at its commit, where the lock is taken). Every
#: name is qualified: nothing resolves through the search path.
NOTIFY: Final = (
    f"SELECT pg_catalog.set_config('lock_timeout', '{NOTIFY_LOCK_TIMEOUT_MS}ms', true), "
    "pg_catalog.pg_notify($1::text, '')"
)

_OK: Final = pq.ConnStatus.OK


def channel_for(schema: str) -> str:
    """The notification channel of the store whose tables live in ``schema``:
    ``runstore:<schema>`` when that fits in 63 bytes (UTF-8), else
    ``runstore#`` and the first 54 hex digits of the SHA-256 of the schema's
    name. Databases never share notifications, so the schema is enough."""
    readable = f"{CHANNEL_PREFIX}:{schema}"
    if len(readable.encode("utf-8")) <= _NAME_BYTES:
        return readable
    digest = hashlib.sha256(schema.encode("utf-8")).hexdigest()
    head = f"{CHANNEL_PREFIX}#"
    return head + digest[: _NAME_BYTES - len(head)]


def _quoted(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'


def _admit_timeout(timeout_s: object) -> float:
    if type(timeout_s) not in (int, float):
        raise InvalidRunError("wait", {"field": "timeout_s", "detail": "must be an int or float"})
    value = float(timeout_s)  # type: ignore[arg-type]
    if not math.isfinite(value) or value < 0:
        raise InvalidRunError(
            "wait", {"field": "timeout_s", "detail": "must be a finite number, 0 or more"}
        )
    return value


class PostgresListener:
    """A wake-up for an idle worker: ``LISTEN`` on a PostgreSQL store's channel.

    Made by ``PostgresRunStore.open_listener()``, on a connection of its own
    to the store's server, database and schema (the conninfo the store
    connects with). ``wait(timeout_s)`` answers True when a notification
    arrived since the last ``wait`` returned (it reads them all), False when
    ``timeout_s`` seconds passed without one. A lost connection is replaced
    by the next ``wait``, which then answers True at once, since work may
    have appeared while nobody listened; when the server cannot be reached,
    ``wait`` sleeps out its timeout and answers False, and tries again next
    time. ``close()`` (from any thread) wakes a ``wait`` in progress, which
    answers False, and so does every later ``wait``. One thread waits at a
    time (others queue). It is a context manager; its repr never shows a
    password.

    Stores notify after a write that may have made a run claimable, or that
    recorded a cancellation request, once it has committed (see
    ``runstore.postgres.open``'s ``notify``). A True answer means "look
    now", not that work is there: another worker may take it first.

    Its constructor is ``open_listener``'s: ``connect`` makes a connection
    (autocommit) to the store's database, ``channel`` is the channel to
    listen on and ``url`` the store's URL without its password, for the
    repr. Raises ``PersistenceFailedError`` (``cause["stage"] ==
    "listen"``) when the first connection or its ``LISTEN`` fails.
    """

    def __init__(
        self, connect: Callable[[], psycopg.Connection[Any]], channel: str, url: str
    ) -> None:
        self._connect = connect
        self._channel = channel
        self._url = url
        self._lock = threading.Lock()
        self._closing = threading.Lock()
        self._closed = False
        self._connection: psycopg.Connection[Any] | None = None
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_read, False)
        os.set_blocking(self._wake_write, False)
        failure: PersistenceFailedError | None = None
        try:
            self._connection = self._listen()
        except psycopg.Error as error:
            reason = connect_reason(error) if error.sqlstate is None else failure_reason(error)
            failure = PersistenceFailedError(
                "open_listener",
                f"could not listen for notifications: {reason_text(reason)}",
                {
                    "stage": "listen",
                    "reason": reason,
                    "sqlstate": sqlstate(error),
                    "error": type(error).__name__,
                },
            )
        if failure is not None:
            os.close(self._wake_read)
            os.close(self._wake_write)
            # Raised outside the handler: no chain leads to libpq's message.
            raise failure

    @property
    def channel(self) -> str:
        """The channel it listens on (``runstore:<schema>``, see the PostgreSQL guide)."""
        return self._channel

    @property
    def closed(self) -> bool:
        """Whether ``close()`` was called."""
        return self._closed

    def _listen(self) -> psycopg.Connection[Any]:
        connection = self._connect()
        try:
            psycopg.Connection.execute(connection, f"LISTEN {_quoted(self._channel)}")
        except BaseException:
            connection.close()
            raise
        return connection

    def wait(self, timeout_s: float) -> bool:
        """Block until a notification arrives or ``timeout_s`` seconds (an int
        or float, finite, 0 or more) pass. Returns True when one arrived since the
        last ``wait`` (all waiting are read: many writes, one True) or the
        connection had to be replaced; False on timeout and once closed.
        Any other ``timeout_s`` raises ``InvalidRunError``; failures of the
        server never raise."""
        timeout = _admit_timeout(timeout_s)
        with self._lock:
            if self._closed:
                return False
            deadline = time.monotonic() + timeout
            connection = self._connection
            if connection is None or connection.closed or connection.broken:
                return self._replace(deadline)
            while True:
                try:
                    if self._drain(connection):
                        return True
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return False
                    readable, _, _ = select.select(
                        [connection.fileno(), self._wake_read], [], [], remaining
                    )
                except (psycopg.Error, OSError, ValueError):
                    return self._replace(deadline)
                if self._wake_read in readable:
                    return False  # closed

    def _drain(self, connection: psycopg.Connection[Any]) -> bool:
        """Read what the server sent; whether it held a notification. Raises
        ``psycopg.OperationalError`` when the connection is found lost."""
        pgconn = connection.pgconn
        pgconn.consume_input()
        if pgconn.status != _OK:
            raise psycopg.OperationalError("the connection was lost")
        notified = False
        while pgconn.notifies() is not None:
            notified = True
        return notified

    def _replace(self, deadline: float) -> bool:
        """The connection is lost: connect and listen again (True: work may
        have been missed meanwhile), or sleep until ``deadline`` (False)."""
        old, self._connection = self._connection, None
        if old is not None:
            with contextlib.suppress(psycopg.Error, OSError):
                old.close()
        try:
            self._connection = self._listen()
        except psycopg.Error:
            remaining = deadline - time.monotonic()
            if remaining > 0:
                select.select([self._wake_read], [], [], remaining)
            return False
        return True

    def close(self) -> None:
        """Stop listening and close the connection; a ``wait`` in progress
        (in another thread) returns False. Closing twice does nothing."""
        with self._closing:
            if self._closed:
                return
            self._closed = True
            with contextlib.suppress(OSError):
                os.write(self._wake_write, b"x")
        with self._lock:
            connection, self._connection = self._connection, None
            if connection is not None:
                with contextlib.suppress(psycopg.Error, OSError):
                    connection.close()
            for descriptor in (self._wake_read, self._wake_write):
                with contextlib.suppress(OSError):
                    os.close(descriptor)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = ", closed" if self._closed else ""
        return f"PostgresListener(url={self._url!r}, channel={self._channel!r}{state})"
