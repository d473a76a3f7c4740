"""claim_next's row is decoded once, judging only what came from the database.

``_activated_row`` builds the row a claim-and-own leaves from the picked
columns, the admitted owner and the time, and judges only the columns the
database supplied (id, creation, start, parent, cancellation, lineage,
round, state). On any picked row, valid or corrupt in those columns, it
equals ``decode_run`` of the same activated columns, or raises the same
error (class, code, method, message and cause).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runstore import OwnerId, RunStoreError
from runstore._sql._decode import decode_run
from runstore._sql._store import _activated, _activated_row

WHO = OwnerId("host-a", 7, "nonce-a")
NOW = 5_000
LIMIT = 2**53 - 1
JUNK = st.sampled_from(
    [None, 0, 1, -1, LIMIT, LIMIT + 1, 1.0, 2.5, "", "x", "\x00", "é", "\ud800", b"x", True]
)
#: The picked row's columns the database supplies, by position.
FROM_DATABASE = {
    "run_id": 0,
    "created_at_ms": 2,
    "started_at_ms": 3,
    "parent_run_id": 13,
    "cancel_requested_at_ms": 14,
    "lineage_id": 15,
    "round_ordinal": 16,
    "state_json": 17,
}
OPTIONAL_IDS = st.one_of(st.none(), st.sampled_from(["run-0", "p", "x" * 300]))
OPTIONAL_TIMES = st.one_of(st.none(), st.integers(0, LIMIT))
STATES = st.sampled_from(['{"a": 1}', "[]", "null", '"s"', "{", "", '{"a": NaN}', "[" * 200])


def _outcome(call: Any) -> object:
    try:
        return call()
    except RunStoreError as error:
        return (type(error), error.code, error.method, str(error), error.cause)


@settings(max_examples=400, deadline=None)
@given(
    valid=st.tuples(
        st.sampled_from(["run-1", "r", "x" * 300]),
        st.sampled_from(["pending", "suspended"]),
        st.integers(0, LIMIT),
        OPTIONAL_TIMES,
        OPTIONAL_IDS,
        OPTIONAL_TIMES,
        OPTIONAL_IDS,
        OPTIONAL_TIMES,
        STATES,
    ),
    corrupt=st.one_of(st.none(), st.sampled_from(sorted(FROM_DATABASE))),
    junk=JUNK,
)
def test_the_activated_row_is_decode_run_of_the_activated_columns(
    valid: tuple[Any, ...], corrupt: str | None, junk: Any
) -> None:
    """A valid picked row, with at most one of its database columns replaced
    by a value of any type a driver yields."""
    run_id, status, created, started, parent, cancel, lineage, round_ordinal, state = valid
    picked = [
        run_id, status, created, started, None, None, None, None, None, None, None, None, None,
        parent, cancel, lineage, round_ordinal, state, 3,
    ]  # fmt: skip
    if corrupt is not None:
        picked[FROM_DATABASE[corrupt]] = junk
    fast = _outcome(lambda: _activated_row("claim_next", picked, WHO, NOW))
    full = _outcome(lambda: decode_run("claim_next", _activated(picked, WHO, NOW)))
    assert fast == full


def test_a_corrupt_state_is_not_taken() -> None:
    """The check that ``_activated_row`` skips nothing the state needs."""
    picked = ("run-1", "pending", 1, None, None, *([None] * 8), None, None, None, None, "{", 0)
    with pytest.raises(RunStoreError) as caught:
        _activated_row("claim_next", picked, WHO, NOW)
    assert caught.value.code == "decode_failed"
