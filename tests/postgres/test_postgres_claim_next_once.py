"""``claim_next`` in one round trip on PostgreSQL (migration 2007).

The claimed row is returned by a statement that commits by itself only when
the server proves that the client will decode it; otherwise the statement
raises ``DECODE_FIRST``, the claim rolls back with it, and the client makes
the two-round-trip call, which decodes the row before ``COMMIT``. So:

- a row the server proves takes one round trip, and one it cannot prove
  takes three, with the same answer;
- a row that does not decode is refused with ``decode_failed`` and claims
  nothing, whichever column is broken;
- the server's proof is sound: wherever ``flows_state_decodes`` says yes, the
  client's own reading of run state (``json_text_complaint``) has nothing to
  say, over texts built to sit on each edge of that reading.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runstore import ManualClock, OwnerId, RunStoreError
from runstore._boundary import json_text_complaint

from .. import _postgres
from .test_postgres_fast_path import round_trips

postgres = pytest.importorskip("runstore.postgres")
psycopg = pytest.importorskip("psycopg")

OWNER = OwnerId("host-a", 1, "nonce-a")


@pytest.fixture
def url() -> str:
    return _postgres.database_url()


def _raw_state(url: str, run_id: str, text: str) -> None:
    with psycopg.connect(url, autocommit=True) as raw:
        raw.execute("UPDATE flows_run_state SET state_json = %s WHERE run_id = %s", (text, run_id))


def _table(url: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as raw:
        rows = raw.execute("SELECT * FROM flows_runs ORDER BY run_id").fetchall()
        leases = raw.execute("SELECT * FROM flows_consensus_leases ORDER BY run_id").fetchall()
        source = raw.execute("SELECT revision FROM flows_run_source").fetchall()
    return [*rows, *leases, *source]


#: (run id, state, round trips): states the server proves in its cheap test,
#: in its jsonb test, and not at all.
CLAIMED = [
    ("plain", '{"step": 1, "items": [1, 2.5, -3], "note": "x"}', 1),
    ("hex-digest", '{"sha": "3e9f0e7a", "n": 12}', 1),
    ("exponent", '{"n": 1.5e300, "m": 2E-9}', 1),
    ("escaped", '{"s": "caf\\u00e9 \\ud83d\\ude00"}', 1),
    ("deep", "[" * 129 + "]" * 129, 3),
    ("long-digits", "[" + "1" * 250 + "]", 1),
    ("long", '{"s": "' + "x" * 100_001 + '"}', 3),
    ("wide-id-" + "é" * 600, "{}", 3),
]


@pytest.mark.parametrize(("run_id", "state", "trips"), CLAIMED, ids=[c[0][:12] for c in CLAIMED])
def test_a_proven_row_takes_one_round_trip_and_any_other_three(
    url: str, run_id: str, state: str, trips: int
) -> None:
    assert json_text_complaint(state) is None
    with postgres.open(url, clock=ManualClock(0)) as store:
        store.create("warm", "{}")
        assert store.claim_next(OWNER, 0) is not None  # plpgsql compiled
        store.create(run_id, state)
        got: list[Any] = []
        assert round_trips(store, lambda: got.append(store.claim_next(OWNER, 5))) == trips
        (row,) = got
        assert row is not None
        assert (row.run_id, row.state_json, row.owner, row.heartbeat_at_ms) == (
            run_id,
            state,
            OWNER,
            5,
        )
        store.check_invariants()


#: States that do not decode (each would be refused by ``create``).
UNDECODABLE = [
    '{"v": "\\ud800"}',  # a lone surrogate
    '{"n": 1e400}',  # overflows a double
    "[" + "9" * 400 + "]",  # so does this integer
    "[" * 130 + "]" * 130,  # too deep
]


@pytest.mark.parametrize("state", UNDECODABLE, ids=["surrogate", "1e400", "400-digits", "deep"])
def test_a_run_whose_state_does_not_decode_is_refused_and_not_claimed(url: str, state: str) -> None:
    assert json_text_complaint(state) is not None
    with postgres.open(url, clock=ManualClock(0)) as store:
        store.create("r", "{}")
        _raw_state(url, "r", state)
        before = _table(url)
        with pytest.raises(RunStoreError) as caught:
            store.claim_next(OWNER, 0)
        assert (caught.value.code, caught.value.method) == ("decode_failed", "claim_next")
        assert _table(url) == before
        _raw_state(url, "r", "{}")
        assert store.claim_next(OWNER, 0) is not None  # healed, it is taken


#: Columns edited with the row check dropped: each makes the row undecodable.
EDITS = {
    "created-negative": "created_at_ms = -1",
    "started-too-large": f"started_at_ms = {2**53}",
    "parent-empty": "parent_run_id = ''",
    "lineage-too-long": "lineage_id = repeat('x', 1025)",
    "cancel-negative": "cancel_requested_at_ms = -5",
}


@pytest.mark.parametrize("edit", list(EDITS))
def test_a_row_edited_behind_the_stores_back_is_refused_and_not_claimed(
    url: str, edit: str
) -> None:
    with postgres.open(url, clock=ManualClock(0)) as store:
        store.create("r", "{}")
        with psycopg.connect(url, autocommit=True) as raw:
            raw.execute("ALTER TABLE flows_runs DROP CONSTRAINT flows_runs_valid")
            raw.execute("SET session_replication_role = replica")  # no foreign key check
            raw.execute(f"UPDATE flows_runs SET {EDITS[edit]} WHERE run_id = 'r'")
        before = _table(url)
        with pytest.raises(RunStoreError) as caught:
            store.claim_next(OWNER, 0)
        assert (caught.value.code, caught.value.method) == ("decode_failed", "claim_next")
        assert _table(url) == before


# -- the proof is sound ---------------------------------------------------------------

#: Pieces that sit on the edges of the client's reading of JSON.
_PIECES = [
    "0", "-0", "01", "1.", ".5", "1e308", "1e309", "-1.7976931348623157e308", "1.8e308",
    "2E-400", "1e-99999", "9" * 308, "9" * 309, "1" * 199, "1" * 200, "NaN", "Infinity",
    '"\\ud800"', '"\\udc00"', '"\\ud83d\\ude00"', '"\\u0000"', '"\\u00e9"', '"\\x"',
    '"a\tb"', '"\x7f"', '"\u2028"', '"3e4f"', '"é"', "true", "null", "[", "]", "{", "}",
    ",", ":", '"k"', " ", "\n", "\x0c", "\ufeff",
]  # fmt: skip

_json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**320), max_value=10**320)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4)
    ),
    max_leaves=12,
)

_texts = st.one_of(
    st.lists(st.sampled_from(_PIECES), min_size=1, max_size=12).map("".join),
    st.builds(json.dumps, _json_values, ensure_ascii=st.booleans()),
    st.builds(lambda inner: "[" * inner[0] + inner[1] + "]" * inner[0],
              st.tuples(st.integers(120, 135), st.sampled_from(["1", "1e5", '"\\u00e9"']))),
)  # fmt: skip


def _storable(text: str) -> bool:
    """Text PostgreSQL can hold in a UTF8 database."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\x00" not in text


@pytest.fixture
def prover() -> Any:
    url = _postgres.database_url()
    with psycopg.connect(url, autocommit=True) as connection:
        yield lambda texts: [
            row[0]
            for row in connection.execute(
                "SELECT flows_state_decodes(t) FROM unnest(%s::text[]) WITH ORDINALITY AS u(t, i)"
                " ORDER BY i",
                (texts,),
            )
        ]


# The prover holds no state between examples: one database serves them all.
@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(_texts, min_size=1, max_size=40))
def test_what_the_server_proves_the_client_decodes(prover: Any, texts: list[str]) -> None:
    texts = [text for text in texts if _storable(text)]
    if not texts:
        return
    for text, proven in zip(texts, prover(texts), strict=True):
        if proven:
            assert json_text_complaint(text) is None, text[:200]


def test_the_states_a_worker_writes_are_proven(prover: Any) -> None:
    """The proof is not vacuous: ordinary state, hex digests, exponents and
    escaped text pass it."""
    proven = [text for _id, text, trips in CLAIMED if trips == 1]
    assert prover(proven) == [True] * len(proven)
    assert prover([*UNDECODABLE, "[1", "", "{}x"]) == [False] * (len(UNDECODABLE) + 3)
