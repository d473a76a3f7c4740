"""Ported upstream cases: payload limits and redaction of run state.

upstream-semantics.md §9.2 "StorePayloadAndTimelineLimits" and "Redaction",
§3.5 and §9.3 (issue #72), and contract.md's admission table: run state has
no byte ceiling, only shape limits (depth <= 128 with the root at 0, at most
100 000 values), is strict JSON, and is stored byte for byte, never
re-serialized and never redacted. Errors about state carry its length and
validity, never its text. Attempt payloads (meta/error/outcome) belong to the
attempt store's tests.
"""

from __future__ import annotations

import json

import pytest

from runstore import ManualClock, RunStore, RunStoreError, Transitioned, Updated

from ._golden import OWNER_A, activate_new


def test_multi_megabyte_state_round_trips_byte_for_byte(
    store: RunStore, clock: ManualClock
) -> None:
    """a multi-megabyte state persists and reads back identically (no byte limit)."""
    blob = "x" * (3 * 1024 * 1024)
    state = '{ "blob" : "' + blob + '",\n  "n": 1.50 }'
    store.create("run-big", state)
    assert store.get("run-big").state_json == state
    activate_new(store, clock, "run-big-transition", OWNER_A)
    bigger = json.dumps({"pages": ["\u00e9\U0001f600" * 1000] * 600}, ensure_ascii=False)
    assert len(bigger.encode()) > 2 * 1024 * 1024
    assert (
        store.transition_owned("run-big-transition", OWNER_A, "running", bigger) == Transitioned()
    )
    assert store.get("run-big-transition").state_json == bigger
    # Renewing the lease leaves the state untouched.
    assert store.heartbeat("run-big-transition", OWNER_A, 1) == Updated()
    assert store.get("run-big-transition").state_json == bigger


@pytest.mark.parametrize(
    "state",
    [
        '{"pageToken":"tok_live_8Jd2","cursor":3}',
        '{"clientSecret":{"value":"s3cr3t","rotated":false}}',
        '{"apiKey":"sk-REDACTED-not","authorization":"Bearer abc.def"}',
        '{"token=":"token=[REDACTED]"}',
    ],
    ids=["page-token", "client-secret-object", "credential-names", "redaction-lookalike"],
)
def test_credential_shaped_state_round_trips_verbatim(
    store: RunStore, clock: ManualClock, state: str
) -> None:
    """pageToken and clientSecret:{...} state round-trip verbatim (issue #72): nothing redacts
    executable state."""
    store.create("run-secret", state)
    assert store.get("run-secret").state_json == state
    activate_new(store, clock, "run-secret-later", OWNER_A)
    assert store.transition_owned("run-secret-later", OWNER_A, "suspended", state) == Transitioned()
    assert store.get("run-secret-later").state_json == state


@pytest.mark.parametrize(
    "state",
    [
        '{"b":1,"a":2}',
        '{ "a" : [ 1.0 , 2e0 , -0 ] }\n',
        '{"a":"\\u00e9","b":"\u00e9"}',
        '{"dup":1,"dup":2}',
        '"a bare string"',
        "0",
        "null",
        "[]",
        '{"nul":"\\u0000"}',
        '{"big":1e308,"small":-1e-320}',
        '{"astral":"\\ud83d\\ude00"}',
    ],
    ids=[
        "key-order",
        "whitespace-and-number-forms",
        "escapes-kept",
        "duplicate-keys",
        "scalar-string",
        "scalar-number",
        "null",
        "empty-array",
        "escaped-nul",
        "finite-extremes",
        "escaped-surrogate-pair",
    ],
)
def test_admitted_state_is_stored_exactly_as_written(store: RunStore, state: str) -> None:
    """admitted text is stored byte for byte, never re-serialized."""
    store.create("run-exact", state)
    assert store.get("run-exact").state_json == state


@pytest.mark.parametrize(
    "state",
    [
        "",
        " ",
        "not-json",
        "{",
        "NaN",
        '{"n":NaN}',
        '{"n":Infinity}',
        '{"n":-Infinity}',
        '{"n":1e400}',
        '{"n":-1e400}',
        '{"s":"raw\ncontrol"}',
        '{"s":"tab\there"}',
        '{"s":"\\ud800"}',
        '{"s":"\\udc00"}',
        '{"s":"\ud800"}',
        "{'single':1}",
        '{"a":1,}',
    ],
    ids=[
        "empty",
        "whitespace",
        "not-json",
        "truncated",
        "bare-nan",
        "nan",
        "infinity",
        "minus-infinity",
        "overflow",
        "negative-overflow",
        "raw-newline",
        "raw-tab",
        "escaped-high-surrogate",
        "escaped-low-surrogate",
        "raw-surrogate",
        "single-quotes",
        "trailing-comma",
    ],
)
def test_inadmissible_state_is_invalid_run(store: RunStore, state: str) -> None:
    """state must be non-empty strict JSON with finite numbers and no surrogates."""
    with pytest.raises(RunStoreError) as failure:
        store.create("run-bad-state", state)
    assert (failure.value.code, failure.value.method) == ("invalid_run", "create")
    assert store.state().rows == ()


def test_depth_limit_counts_the_root_as_zero(store: RunStore) -> None:
    """a value at depth 128 is admitted; one at depth 129 is refused."""
    deepest = "[" * 128 + "0" + "]" * 128
    store.create("run-deep", deepest)
    assert store.get("run-deep").state_json == deepest
    empty_at_128 = "[" * 129 + "]" * 129
    store.create("run-deep-empty", empty_at_128)
    too_deep = "[" * 129 + "0" + "]" * 129
    with pytest.raises(RunStoreError) as failure:
        store.create("run-too-deep", too_deep)
    assert failure.value.code == "invalid_run"
    objects = '{"a":' * 129 + "0" + "}" * 129
    with pytest.raises(RunStoreError):
        store.create("run-too-deep-objects", objects)


def test_value_limit_counts_every_scalar_and_container(store: RunStore) -> None:
    """100 000 values (the root array and 99 999 members) are admitted; one more is refused."""
    at_limit = "[" + ",".join(["0"] * 99_999) + "]"
    store.create("run-wide", at_limit)
    assert store.get("run-wide").state_json == at_limit
    over = "[" + ",".join(["0"] * 100_000) + "]"
    with pytest.raises(RunStoreError) as failure:
        store.create("run-too-wide", over)
    assert failure.value.code == "invalid_run"
    nested = '{"a":[' + ",".join(["[]"] * 50_000) + '],"b":[' + ",".join(["1"] * 49_997) + "]}"
    store.create("run-nested-at-limit", nested)


def test_state_errors_never_carry_the_state_text(store: RunStore, clock: ManualClock) -> None:
    """an invalid state's error names its length and validity, never its text or a chain."""
    secret = "hunter2-credential"
    bad = '{"clientSecret":"' + secret + '",'
    for call in (
        lambda: store.create("run-leak", bad),
        lambda: store.create("run-leak", '{"clientSecret":"' + secret + '","n":NaN}'),
    ):
        with pytest.raises(RunStoreError) as failure:
            call()
        error = failure.value
        assert error.code == "invalid_run"
        assert secret not in str(error)
        assert secret not in repr(error)
        assert secret not in repr(error.cause)
        assert error.__cause__ is None
        assert error.__suppress_context__
    activate_new(store, clock, "run-leak-owned", OWNER_A)
    with pytest.raises(RunStoreError) as failure:
        store.transition_owned("run-leak-owned", OWNER_A, "completed", bad)
    assert secret not in repr(failure.value) + repr(failure.value.cause)


def test_row_repr_leaves_out_the_state(store: RunStore) -> None:
    """a row's repr never shows its state (it may hold credentials)."""
    store.create("run-repr", '{"clientSecret":"hunter2-credential"}')
    assert "hunter2-credential" not in repr(store.get("run-repr"))
    assert "hunter2-credential" not in repr(store.state())
