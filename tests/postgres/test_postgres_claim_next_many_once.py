"""``claim_next_many`` in one round trip on PostgreSQL (migration 2011).

As ``claim_next``'s (migration 2007): the batch is returned by a statement
that commits by itself only when the server proves that the client will
decode every row; one row it cannot prove rolls the whole batch back
(``DECODE_FIRST``) and the client makes the two-round-trip call, decoding
every row before ``COMMIT``; one row that does not decode refuses the call
and claims nothing.
"""

from __future__ import annotations

import pytest

from runstore import ManualClock, OwnerId, RunStoreError

from .. import _postgres
from .test_postgres_claim_next_once import _raw_state, _table
from .test_postgres_fast_path import round_trips

postgres = pytest.importorskip("runstore.postgres")

OWNER = OwnerId("host-a", 1, "nonce-a")


@pytest.fixture
def url() -> str:
    return _postgres.database_url()


@pytest.mark.parametrize(("unproven", "trips"), [(False, 1), (True, 3)])
def test_a_proven_batch_takes_one_round_trip_and_any_other_three(
    url: str, unproven: bool, trips: int
) -> None:
    with postgres.open(url, clock=ManualClock(0)) as store:
        store.create("warm", "{}")
        assert len(store.claim_next_many(OWNER, 0, 2)) == 1  # plpgsql compiled
        states = ["{}", "[" * 129 + "]" * 129 if unproven else "[1]", '{"n": 2}']
        for index, state in enumerate(states):
            store.create(f"r{index}", state)
        got: list[object] = []
        assert round_trips(store, lambda: got.append(store.claim_next_many(OWNER, 5, 10))) == trips
        (rows,) = got
        assert [(row.run_id, row.state_json) for row in rows] == [  # type: ignore[attr-defined]
            (f"r{index}", state) for index, state in enumerate(states)
        ]
        store.check_invariants()


def test_a_batch_with_a_row_that_does_not_decode_claims_nothing(url: str) -> None:
    with postgres.open(url, clock=ManualClock(0)) as store:
        for run_id in ("a", "b", "c"):
            store.create(run_id, "{}")
        _raw_state(url, "b", '{"v": "\\ud800"}')
        before = _table(url)
        with pytest.raises(RunStoreError) as caught:
            store.claim_next_many(OWNER, 0, 3)
        assert (caught.value.code, caught.value.method) == ("decode_failed", "claim_next_many")
        assert _table(url) == before
        assert [row.run_id for row in store.claim_next_many(OWNER, 0, 1)] == ["a"]
        _raw_state(url, "b", "{}")
        assert [row.run_id for row in store.claim_next_many(OWNER, 0, 5)] == ["b", "c"]


@pytest.mark.parametrize("fast_path", [True, False], ids=["one-round-trip", "general"])
def test_a_batch_skips_a_row_another_transaction_holds_without_waiting(
    url: str, fast_path: bool
) -> None:
    """``FOR UPDATE SKIP LOCKED``: while another session holds the oldest run's row (as a
    ``request_cancel`` in flight would), a batch takes the next ones at once; once the row is
    free, the next batch takes it."""
    psycopg = pytest.importorskip("psycopg")
    with postgres.open(url, clock=ManualClock(0), fast_path=fast_path) as store:
        for run_id in ("a", "b", "c", "d"):
            store.create(run_id, "{}")
        with psycopg.connect(url) as holder:
            holder.execute("SELECT 1 FROM flows_runs WHERE run_id = 'a' FOR UPDATE")
            taken = store.claim_next_many(OWNER, 0, 2)
            assert [row.run_id for row in taken] == ["b", "c"]
            holder.rollback()
        assert [row.run_id for row in store.claim_next_many(OWNER, 0, 5)] == ["a", "d"]
        store.check_invariants()
