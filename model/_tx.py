"""A stand-in for a store's write transaction, for exercising strategies alone.

``ModelTransaction`` implements ``runstore.consensus.Transaction`` without a
database: ``connection`` raises ``RuntimeError``, and the callbacks registered
with ``on_commit`` / ``on_rollback`` run when the transaction ends.
``model_transaction()`` opens one as a context manager: leaving the block
normally commits (commit callbacks in registration order); leaving it by an
exception, or after ``rollback_only()``, rolls back (rollback callbacks in
reverse registration order) and re-raises the exception, if any.

A transaction ends exactly once. Registering a callback or ending it again
after it ended raises ``RuntimeError``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Literal


class ModelTransaction:
    """An open transaction that strategies can register commit and undo work with."""

    def __init__(self) -> None:
        self._on_commit: list[Callable[[], None]] = []
        self._on_rollback: list[Callable[[], None]] = []
        self._rollback_only = False
        self._ended: Literal["commit", "rollback"] | None = None

    @property
    def connection(self) -> sqlite3.Connection:
        """Always raises ``RuntimeError``: the model has no database."""
        raise RuntimeError("a model transaction has no database connection")

    @property
    def ended(self) -> Literal["commit", "rollback"] | None:
        """How the transaction ended, or ``None`` while it is open."""
        return self._ended

    def on_commit(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` when the transaction commits."""
        self._check_open()
        self._on_commit.append(fn)

    def on_rollback(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` if the transaction rolls back (last registered runs first)."""
        self._check_open()
        self._on_rollback.append(fn)

    def rollback_only(self) -> None:
        """Make the enclosing ``model_transaction()`` roll back instead of committing.

        Calling it again does nothing more.
        """
        self._check_open()
        self._rollback_only = True

    @property
    def is_rollback_only(self) -> bool:
        """Whether ``rollback_only()`` was called."""
        return self._rollback_only

    def commit(self) -> None:
        """End the transaction, running the commit callbacks in order."""
        self._check_open()
        self._ended = "commit"
        for fn in self._on_commit:
            fn()

    def rollback(self) -> None:
        """End the transaction, running the undo callbacks in reverse order."""
        self._check_open()
        self._ended = "rollback"
        for fn in reversed(self._on_rollback):
            fn()

    def _check_open(self) -> None:
        if self._ended is not None:
            raise RuntimeError(f"the transaction already ended ({self._ended})")

    def __repr__(self) -> str:
        state = self._ended or ("rollback-only" if self._rollback_only else "open")
        return f"ModelTransaction({state})"


@contextmanager
def model_transaction() -> Iterator[ModelTransaction]:
    """Open a ``ModelTransaction``; commit on a normal exit, roll back otherwise."""
    tx = ModelTransaction()
    try:
        yield tx
    except BaseException:
        if tx.ended is None:
            tx.rollback()
        raise
    if tx.ended is None:
        if tx.is_rollback_only:
            tx.rollback()
        else:
            tx.commit()
