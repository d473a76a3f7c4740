"""Attempt values: strict JSON equality, absent versus null, reprs, outcomes, errors."""

from __future__ import annotations

import pickle

import pytest

import runstore
from runstore.attempts import (
    ABSENT,
    Absent,
    Attempt,
    AttemptId,
    AttemptPatch,
    AttemptStoreError,
    Conflict,
    ExistingSame,
    FenceLost,
    FinishAttempt,
    Inserted,
    NotFound,
    Patched,
    PutOutcome,
    RunNotFound,
    Updated,
    Upserted,
    strict_json_equal,
)


def _attempt(**fields: object) -> Attempt:
    fields.setdefault("meta", {})
    return Attempt("r", "s", 1, "running", 0, **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("left", "right"),
    [
        (True, 1),
        (1, 1.0),
        (False, 0),
        (0, 0.0),
        (None, False),
        ("1", 1),
        ([1, 2], [2, 1]),
        ({"a": 1}, {"a": True}),
        ({"a": [1]}, {"a": [1.0]}),
        ({"a": 1}, {"a": 1, "b": None}),
        ([], {}),
        (None, ABSENT),
    ],
)
def test_strict_equality_tells_types_apart(left: object, right: object) -> None:
    """True, 1 and 1.0 differ, list order matters, and null is not absent."""
    assert not strict_json_equal(left, right)
    assert not strict_json_equal(right, left)


@pytest.mark.parametrize(
    ("left", "right"),
    [
        ({"a": 1, "b": 2}, {"b": 2, "a": 1}),
        ({"x": {"p": [1, {"q": None, "r": 2.5}]}}, {"x": {"p": [1, {"r": 2.5, "q": None}]}}),
        (1.0, 1.0),
        ("\U0001f600", "\U0001f600"),
        (ABSENT, ABSENT),
    ],
)
def test_strict_equality_ignores_object_key_order(left: object, right: object) -> None:
    """Objects with the same members in another order are equal."""
    assert strict_json_equal(left, right)


def test_records_compare_their_json_fields_strictly() -> None:
    """Two attempts that differ only by 1 versus True are different attempts."""
    assert _attempt(outcome={"ok": 1}) != _attempt(outcome={"ok": True})
    assert _attempt(outcome={"a": 1, "b": 2}) == _attempt(outcome={"b": 2, "a": 1})
    assert _attempt(checkpoint=None) != _attempt()
    assert hash(_attempt(outcome={"a": 1, "b": 2})) == hash(_attempt(outcome={"b": 2, "a": 1}))


def test_absent_is_one_sentinel_distinct_from_null() -> None:
    """ABSENT is the only Absent, distinct from None, and reprs as ABSENT."""
    assert ABSENT is Absent.ABSENT
    assert ABSENT is not None
    assert list(Absent) == [ABSENT]
    assert repr(ABSENT) == "ABSENT"


def test_json_fields_never_appear_in_a_repr() -> None:
    """Reprs show whether a JSON field is present, never its content."""
    secret = "sk-live-VALUE-IN-REPR"
    records = [
        _attempt(checkpoint=secret, error=[secret], outcome={"k": secret}, meta={secret: 1}),
        FinishAttempt("r", "s", 1, "done", 3, error=secret, outcome=secret, meta=secret),
        AttemptPatch(checkpoint=secret, error=secret, outcome=secret, meta=secret),
    ]
    for record in records:
        assert secret not in repr(record)
        assert "<json>" in repr(record)
    assert "<absent>" in repr(_attempt())


def test_attempt_id_is_the_records_identity() -> None:
    """``.id`` gives the AttemptId of an attempt or a finish request."""
    assert _attempt().id == AttemptId("r", "s", 1)
    assert FinishAttempt("r", "s", 1, "done", 3).id == AttemptId("r", "s", 1)


def test_outcomes_reuse_the_run_stores_classes() -> None:
    """Updated, FenceLost and NotFound are the run store's own outcome classes."""
    assert FenceLost is runstore.FenceLost
    assert NotFound is runstore.NotFound
    assert Updated is runstore.Updated


def test_outcomes_are_matchable_values() -> None:
    """Outcomes compare by value and work in match statements."""

    def describe(outcome: PutOutcome) -> str:
        match outcome:
            case Inserted() | Upserted():
                return "written"
            case ExistingSame():
                return "same"
            case Conflict():
                return "conflict"
            case FenceLost() | RunNotFound():
                return "lost"
        return "?"

    assert [describe(o) for o in (Inserted(), ExistingSame(), Conflict(), RunNotFound())] == [
        "written",
        "same",
        "conflict",
        "lost",
    ]
    assert Patched() == Patched()


def test_attempt_store_error_is_its_own_root() -> None:
    """AttemptStoreError is not a RunStoreError; it keeps code, method and cause."""
    error = AttemptStoreError("invalid_attempt", "put", "bad", {"field": "meta"})
    assert not isinstance(error, runstore.RunStoreError)
    assert error.code == "invalid_attempt"
    assert error.method == "put"
    assert error.cause == {"field": "meta"}
    assert error.message == "invalid_attempt: put: bad"
    assert "invalid_attempt" in repr(error)


def test_attempt_store_error_survives_pickling() -> None:
    """Errors cross process boundaries intact."""
    error = AttemptStoreError("decode_failed", "get", "row", {"column": "meta_json"})
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is AttemptStoreError
    assert (copy.code, copy.method, copy.message, copy.cause) == (
        error.code,
        error.method,
        error.message,
        error.cause,
    )


def test_error_codes_are_upstreams_five() -> None:
    """The codes are stable: invalid_attempt, constraint, decode_failed,
    persistence_failed, unknown."""
    from runstore.attempts._errors import ATTEMPT_ERROR_CODES

    assert sorted(ATTEMPT_ERROR_CODES) == [
        "constraint",
        "decode_failed",
        "invalid_attempt",
        "persistence_failed",
        "unknown",
    ]
