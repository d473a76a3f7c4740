"""Hostile input leaves the SQLite file exactly as it was.

The shared hostile-input suite (``test_hostile_input``) compares ``state()``
before and after each refusal on every store. Here the comparison is the
logical dump of the file itself (``iterdump``: every table, index, trigger
and row, bookkeeping included), plus the revision, leases and facts, so a
refused call that touched anything at all, even a table ``state()`` does not
show, is caught.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from runstore import Activated, Claimed, InvalidRunError, ManualClock
from runstore.sqlite import SqliteRunStore

from .._sqlite import STRATEGIES, logical_dump, open_store
from ..store.test_hostile_input import (
    CLAIMANT,
    OWNER,
    PARAM_CASES,
    PENDING,
    Param,
    call,
    valid_values,
)


@pytest.fixture(params=["memory-sql", "file-sql", "memory-local"])
def seeded(
    request: pytest.FixtureRequest, clock: ManualClock, tmp_path: Path
) -> Iterator[SqliteRunStore]:
    """The hostile suite's seed: a pending, an owned, a claimed run and a round."""
    where, strategy = request.param.split("-")
    store = open_store(where, clock, tmp_path, STRATEGIES[strategy]())
    store.create("pending-run", '{"step": 0}')
    store.create("owned-run", '{"step": 1}')
    assert store.claim_and_own("owned-run", PENDING, OWNER, 0) == Activated()
    store.create("claimed-run", "{}")
    assert store.claim("claimed-run", PENDING, CLAIMANT, 0) == Claimed(0)
    store.create("round-0", "{}", lineage_id="lineage", round_ordinal=0)
    try:
        yield store
    finally:
        store.close()


@pytest.mark.parametrize(("operation", "param"), PARAM_CASES)
def test_hostile_arguments_leave_the_file_unchanged(
    seeded: SqliteRunStore, operation: str, param: Param
) -> None:
    """Every hostile value of every argument is refused and the logical dump,
    revision, leases and facts are unchanged."""
    before = logical_dump(seeded)
    refused = 0
    for label, value in param.hostile():
        if value is None and param.optional:
            continue
        values = valid_values(operation)
        values.update(param.alongside)
        values[param.name] = value
        with pytest.raises(InvalidRunError):
            call(seeded, operation, values)
        refused += 1
        assert label
    assert refused > 10
    assert logical_dump(seeded) == before
    seeded.check_invariants()
