"""A store the explorer does not own, as a third party's factory gives one.

``factory`` builds what the suite's ``sqlite-file-sql`` target builds (a
SQLite file store of this library at the path the campaign gives it, over
``SqlConsensus``, ``durability="normal"``, its file copied from a migrated
template the first time) and hands it out behind a class of its own that
forwards every call. The explorer cannot copy or restore such a store, so
every source state is rebuilt on a fresh store from the factory: the path
any third party's store takes (``runstore explore --store
tests.stateful.explore.third_party:factory``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runstore import ManualClock
from runstore.consensus import SqlConsensus
from runstore.stateful._targets._builtin import sqlite_store_factory

_BUILT = sqlite_store_factory(SqlConsensus, file=True)


class ThirdPartyStore:
    """Every attribute is the inner store's: a store that is not one of ours."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def factory(clock: ManualClock, path: Path) -> ThirdPartyStore:
    """A SQLite file store at ``path`` on ``clock``, behind ``ThirdPartyStore``."""
    return ThirdPartyStore(_BUILT(clock, path))
