"""What a third party's factory builds: one store, built in a scratch folder,
looked at, and closed.

The conformance run asks before it picks its machines: whether the factory
builds SQL adapter stores (the attempt machine runs over those), and which
strategy a SQLite store was built with (the opening check opens files with
it).
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
from ._builtin import StoreFactory

T = TypeVar("T")


def probe_store(store_factory: StoreFactory, look: Callable[[Any], T], failed: T) -> T:
    """``look(store)`` for one store ``store_factory`` builds in a scratch
    directory, then closed; ``failed`` when the factory fails (the run-store
    machine reports that failure)."""
    folder = Path(tempfile.mkdtemp(prefix="runstore-probe-"))
    try:
        try:
            store = store_factory(ManualClock(START_MS), folder / "store.db")
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


def builds_sqlite_stores(store_factory: StoreFactory) -> bool:
    """Whether ``store_factory`` builds SQL adapter stores, SQLite or
    PostgreSQL (the stores an ``AttemptStore`` can be built over): one store
    is built in a scratch directory, looked at and closed. A factory that
    fails here answers ``False``; the run-store machine reports its failure."""
    from runstore._sql._store import SqlRunStore

    return probe_store(store_factory, lambda store: isinstance(store, SqlRunStore), False)


def open_refusal(store_factory: StoreFactory) -> RunStoreError | None:
    """The ``RunStoreError`` with which ``store_factory`` refuses to build a
    store in a scratch directory (its database cannot be opened), or
    ``None`` when it builds one (closed at once) or fails otherwise (the
    run-store machine reports that failure)."""
    refusal: list[RunStoreError] = []

    def build(clock: ManualClock, path: Path) -> Any:
        try:
            return store_factory(clock, path)
        except RunStoreError as error:
            refusal.append(error)
            raise

    probe_store(build, lambda store: None, None)
    return refusal[0] if refusal else None
