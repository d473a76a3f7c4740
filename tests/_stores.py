"""The stores every store-level test runs against.

Each factory takes the test's ``ManualClock`` and a fresh temporary directory
and returns an open store. ``STORE_FACTORIES`` maps a short id (the pytest
parameter id, naming the backend) to its factory. ``postgres-sql`` opens a
fresh database on the test server (``tests/_postgres.py``), or skips.
``ASYNC_FACTORIES`` are the asyncio stores, for the golden tests.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import runstore
from runstore import ManualClock, RunStore
from runstore.consensus import LocalConsensus, SqlConsensus
from runstore.model import ModelRunStore
from runstore.stateful._targets._blocking import blocking

from . import _postgres

StoreFactory = Callable[[ManualClock, Path], RunStore]


def _model(clock: ManualClock, _tmp: Path) -> RunStore:
    return ModelRunStore(clock=clock)


def _sqlite_memory_sql(clock: ManualClock, _tmp: Path) -> RunStore:
    return runstore.open(":memory:", clock=clock, consensus=SqlConsensus())


def _sqlite_file_sql(clock: ManualClock, tmp: Path) -> RunStore:
    return runstore.open(tmp / "runs.db", clock=clock, consensus=SqlConsensus())


def _sqlite_memory_local(clock: ManualClock, _tmp: Path) -> RunStore:
    return runstore.open(":memory:", clock=clock, consensus=LocalConsensus())


def _sqlite_file_local(clock: ManualClock, tmp: Path) -> RunStore:
    return runstore.open(tmp / "runs.db", clock=clock, consensus=LocalConsensus())


STORE_FACTORIES: dict[str, StoreFactory] = {
    "model": _model,
    "sqlite-memory-sql": _sqlite_memory_sql,
    "sqlite-file-sql": _sqlite_file_sql,
    "sqlite-memory-local": _sqlite_memory_local,
    "sqlite-file-local": _sqlite_file_local,
    "postgres-sql": _postgres.factory(SqlConsensus),
}

#: PostgreSQL's general path (a statement per step) with ``SqlConsensus``:
#: the golden tests also run on it (conftest.py), so both implementations of
#: the decisions are held to them; ``postgres-sql`` takes the one-round-trip path.
GENERAL_PATH_FACTORIES: dict[str, StoreFactory] = {
    "postgres-sql-general": _postgres.factory(SqlConsensus, fast_path=False),
}


def _sqlite_async(clock: ManualClock, tmp: Path) -> RunStore:
    store: RunStore = blocking(
        runstore.aopen(tmp / "runs.db", clock=clock, consensus=SqlConsensus())
    )
    return store


def _postgres_async(clock: ManualClock, _tmp: Path) -> RunStore:
    store: RunStore = blocking(runstore.aopen(_postgres.database_url(), clock=clock, pool_size=2))
    return store


#: The asyncio stores (``runstore.aopen``), each driven through the suite's
#: blocking stand-in: every call a coroutine of the async store, awaited on a
#: loop of its own. The golden tests (upstream's contract) also run on them,
#: but for the admission cases (``conftest.py``).
ASYNC_FACTORIES: dict[str, StoreFactory] = {
    "sqlite-async": _sqlite_async,
    "postgres-async": _postgres_async,
}
