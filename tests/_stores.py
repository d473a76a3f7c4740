"""The stores every store-level test runs against.

Each factory takes the test's ``ManualClock`` and a fresh temporary directory
and returns an open store. ``STORE_FACTORIES`` maps a short id (the pytest
parameter id) to its factory; the SQLite adapter adds its own entries here.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from runstore import ManualClock, RunStore
from runstore.model import ModelRunStore

StoreFactory = Callable[[ManualClock, Path], RunStore]


def _model(clock: ManualClock, _tmp: Path) -> RunStore:
    return ModelRunStore(clock=clock)


STORE_FACTORIES: dict[str, StoreFactory] = {
    "model": _model,
}
