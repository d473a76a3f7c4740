"""``check_invariants()`` for the SQLite store: the shared checks
(``runstore._sql._invariants``) with the SQLite queries."""

from __future__ import annotations

from typing import Any

from .._sql._invariants import check_store_invariants as _check
from . import _queries


def check_store_invariants(tx: Any) -> None:
    _check(tx, _queries)
