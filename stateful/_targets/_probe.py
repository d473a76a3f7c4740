"""What a third party's factory builds: one store, built in a scratch folder,
looked at, and closed.

The conformance run asks before it picks its machines: whether the factory
builds SQL adapter stores, or async stores over them (the attempt machine
runs over those, with the attempt store that fits), and which strategy a
SQLite store was built with (the opening check opens files with it).

May import: ``runstore`` and ``_base``.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from runstore._clock import ManualClock
from runstore._errors import RunStoreError

from .._base._domain import START_MS
from ._blocking import BlockingRunStore, attempt_store_over, blocking_factory
from ._builtin import StoreFactory

T = TypeVar("T")


def probe_store(store_factory: StoreFactory, look: Callable[[Any], T], failed: T) -> T:
    """``look(store)`` for one store ``store_factory`` builds in a scratch
    directory (an async one behind its stand-in), then closed; ``failed``
    when the factory fails (the run-store machine reports that failure)."""
    folder = Path(tempfile.mkdtemp(prefix="runstore-probe-"))
    try:
        try:
            store = blocking_factory(store_factory)(ManualClock(START_MS), folder / "store.db")
        except Exception:
            return failed
        try:
            return look(store)
        finally:
            close = getattr(store, "close", None)
            if callable(close):
                close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def attempt_store_for(store_factory: StoreFactory) -> Callable[..., Any] | None:
    """How to build the attempt stores under test over the stores
    ``store_factory`` builds (called ``attempt_store(store, **options)``):
    ``AttemptStore`` over SQL adapter stores, SQLite or PostgreSQL;
    ``attempt_store_over`` (an ``AsyncAttemptStore`` behind its stand-in)
    over ``runstore.aopen``'s async stores behind theirs; None for any other
    store. One store is built in a scratch directory, looked at and closed.
    A factory that fails here answers None; the run-store machine reports
    its failure."""
    from runstore._sql._store import SqlRunStore
    from runstore.attempts import AttemptStore

    def look(store: Any) -> Callable[..., Any] | None:
        if isinstance(store, SqlRunStore):
            return AttemptStore
        if isinstance(store, BlockingRunStore) and store.sql_backed:
            return attempt_store_over
        return None

    return probe_store(store_factory, look, None)


def builds_async_stores(store_factory: StoreFactory) -> bool:
    """Whether ``store_factory`` builds async stores (driven through the
    synchronous stand-in): one store is built in a scratch directory, looked
    at and closed; a factory that fails here answers False."""
    return probe_store(store_factory, lambda store: isinstance(store, BlockingRunStore), False)


def builds_sqlite_stores(store_factory: StoreFactory) -> bool:
    """Whether ``store_factory`` builds stores an attempt store can be built
    over (``attempt_store_for``): SQL adapter stores, SQLite or PostgreSQL,
    or ``runstore.aopen``'s async stores over them behind the stand-in."""
    return attempt_store_for(store_factory) is not None


def open_refusal(store_factory: StoreFactory) -> RunStoreError | None:
    """The ``RunStoreError`` with which ``store_factory`` refuses to build a
    store in a scratch directory (its database cannot be opened), or
    ``None`` when it builds one (closed at once) or fails otherwise (the
    run-store machine reports that failure)."""
    refusal: list[RunStoreError] = []

    def build(clock: ManualClock, path: Path) -> Any:
        try:
            return blocking_factory(store_factory)(clock, path)
        except RunStoreError as error:
            refusal.append(error)
            raise

    probe_store(build, lambda store: None, None)
    return refusal[0] if refusal else None
