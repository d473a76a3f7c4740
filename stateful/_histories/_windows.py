"""Widened windows: transactions of the store under test that linger between statements.

A race between two transactions of one operation, or between a read and the
write that depends on it, lives in a window a few microseconds wide: on
SQLite, where writers are serialized, two processes almost never land in it.
A ``Widener`` makes such windows wide on purpose: after a statement that
leaves something to race with (a read, whose answer a later write may rely
on, or any statement inside an open transaction), it pauses the calling
thread now and then, for a random, seeded time. Other processes run in the
gap; a store that re-checks under its locks is only slower, a store that
trusts a stale read is caught.

It works on any store built on the ``sqlite3`` module or on psycopg, ours or a
third party's, without the store's help: ``install`` replaces
``sqlite3.connect`` (every connection it makes afterwards is of a subclass of
the class asked for, whose ``execute``, ``executemany`` and cursors pause) and
wraps psycopg's ``Cursor.execute`` (which ``Connection.execute`` goes
through). A torture worker installs one before it opens its stores
(``runstore torture --widen``). Statements sent another way (the sqlite3
module's own ``BEGIN`` and ``COMMIT``, an unbound
``sqlite3.Connection.execute``, psycopg's libpq-level calls) are not seen,
which only means fewer pauses.
"""

from __future__ import annotations

import random
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import Any, Self

#: The longest pause, in seconds of real time (a torture at speed 100 turns
#: 5 ms into half a second of store time, far from the 30 s of staleness).
LONGEST_PAUSE_S = 0.005

_READS = ("SELECT", "WITH", "VALUES", "PRAGMA")


def statement_kind(statement: object) -> str:
    """The first keyword of ``statement`` in upper case (comments and blanks
    skipped); ``""`` for what is not text."""
    if isinstance(statement, bytes):
        statement = statement.decode(errors="replace")
    if not isinstance(statement, str):
        return ""  # a composed query: its text needs a connection to render
    text = statement.lstrip(" \t\r\n(")
    while text.startswith(("--", "/*")):
        end = text.find("\n") if text.startswith("--") else text.find("*/")
        text = "" if end < 0 else text[end + (1 if text.startswith("--") else 2) :]
        text = text.lstrip(" \t\r\n(")
    word = text.split(None, 1)[0] if text else ""
    return word.rstrip(";").upper()


class Widener:
    """Decides, statement by statement, whether the calling thread pauses.

    After a read (``SELECT``, ``WITH``, ...) anywhere, or after any statement
    inside an open transaction other than its end, the thread pauses with
    probability ``chance``, for a time drawn uniformly from ``0`` to
    ``longest_s`` with ``rng`` (seeded by the caller, so a run's choices can
    be replayed). ``pause(seconds)`` does the waiting (``time.sleep``; a test
    passes a barrier instead). ``pauses`` counts the pauses taken.
    """

    def __init__(
        self,
        rng: random.Random,
        chance: float,
        *,
        longest_s: float = LONGEST_PAUSE_S,
        pause: Callable[[float], None] = time.sleep,
    ) -> None:
        if not 0.0 <= chance <= 1.0:
            raise ValueError("chance must be within 0..1")
        self.rng = rng
        self.chance = chance
        self.longest_s = longest_s
        self.pause = pause
        self.pauses = 0
        self._lock = threading.Lock()

    def after(self, statement: object, in_transaction: bool) -> None:
        """Called after ``statement`` ran; ``in_transaction``: whether its
        connection is now inside an open transaction."""
        if self.chance <= 0.0:
            return
        kind = statement_kind(statement)
        if kind in ("COMMIT", "END", "ROLLBACK", "RELEASE"):
            return
        if not (in_transaction or kind in _READS):
            return
        with self._lock:
            if self.rng.random() >= self.chance:
                return
            seconds = self.rng.uniform(0.0, self.longest_s)
            self.pauses += 1
        self.pause(seconds)


# -- sqlite3 --------------------------------------------------------------------------

_sqlite_classes: dict[tuple[type, int], type] = {}


def _widened_cursor(widener: Widener) -> type[sqlite3.Cursor]:
    class WidenedCursor(sqlite3.Cursor):
        def execute(self, sql: str, parameters: Any = (), /) -> Self:
            cursor = super().execute(sql, parameters)
            widener.after(sql, self.connection.in_transaction)
            return cursor

        def executemany(self, sql: str, parameters: Any, /) -> Self:
            cursor = super().executemany(sql, parameters)
            widener.after(sql, self.connection.in_transaction)
            return cursor

    return WidenedCursor


def widened_sqlite_class(base: type[sqlite3.Connection], widener: Widener) -> type:
    """A subclass of the connection class ``base`` whose statements go
    through ``widener`` (made once per class and widener)."""
    key = (base, id(widener))
    found = _sqlite_classes.get(key)
    if found is not None:
        return found
    cursor_class = _widened_cursor(widener)

    class Widened(base):  # type: ignore[valid-type,misc]
        def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
            cursor = super().execute(sql, parameters)
            widener.after(sql, self.in_transaction)
            return cursor  # type: ignore[no-any-return]

        def executemany(self, sql: str, parameters: Any, /) -> sqlite3.Cursor:
            cursor = super().executemany(sql, parameters)
            widener.after(sql, self.in_transaction)
            return cursor  # type: ignore[no-any-return]

        def cursor(self, factory: Any = None) -> Any:
            if factory is None or factory is sqlite3.Cursor:
                factory = cursor_class
            return super().cursor(factory)

    Widened.__name__ = Widened.__qualname__ = f"Widened{base.__name__}"
    _sqlite_classes[key] = Widened
    return Widened


# -- installing ---------------------------------------------------------------------


def install(widener: Widener) -> Callable[[], None]:
    """Route every ``sqlite3`` connection opened from now on, and every
    psycopg cursor's ``execute`` (when psycopg is installed), through
    ``widener``; returns the function that puts both back."""
    original_connect = sqlite3.connect

    def connect(*args: Any, **kwargs: Any) -> Any:
        if len(args) <= 5:  # ``factory`` is the sixth positional parameter
            base = kwargs.get("factory", sqlite3.Connection)
            kwargs["factory"] = widened_sqlite_class(base, widener)
        return original_connect(*args, **kwargs)

    sqlite3.connect = connect
    undo: list[Callable[[], None]] = [lambda: setattr(sqlite3, "connect", original_connect)]
    try:
        import psycopg
    except ImportError:
        psycopg = None  # type: ignore[assignment]
    if psycopg is not None:
        cursor_class: Any = psycopg.Cursor
        original_execute = cursor_class.execute
        idle = psycopg.pq.TransactionStatus.IDLE

        def execute(self: Any, query: Any, params: Any = None, **kwargs: Any) -> Any:
            result = original_execute(self, query, params, **kwargs)
            status = self.connection.pgconn.transaction_status
            widener.after(query, status != idle)
            return result

        cursor_class.execute = execute
        undo.append(lambda: setattr(cursor_class, "execute", original_execute))

    def uninstall() -> None:
        for step in reversed(undo):
            step()

    return uninstall
