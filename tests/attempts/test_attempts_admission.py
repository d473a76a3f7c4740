"""Attempt input admission: what every operation refuses, and that refusal writes nothing.

Every refusal is ``AttemptStoreError`` ``invalid_attempt``, raised ``from
None``, naming the field and a fixed complaint, never the rejected value.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import attrs
import pytest

from runstore import OwnerId
from runstore.attempts import (
    ABSENT,
    Attempt,
    AttemptId,
    AttemptPatch,
    AttemptStoreError,
    FinishAttempt,
    Patched,
)

from .test_attempts_pairs import OWNER, RUN, STEP, Env, env, ident, running

__all__ = ["env"]


class Text(str):
    """A str subclass: not exactly str, so never admitted."""


def _cyclic() -> dict[str, Any]:
    value: dict[str, Any] = {}
    value["self"] = value
    return value


def _deep(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


BAD_JSON: list[tuple[object, str]] = [
    (Text("x"), "contains a non-plain value"),
    ({"k": Text("x")}, "contains a non-plain value"),
    ((1, 2), "contains a non-plain value"),
    (b"bytes", "contains a non-plain value"),
    ({1: "int key"}, "contains an unbounded or ill-formed object key"),
    ({Text("k"): 1}, "contains an unbounded or ill-formed object key"),
    (math.nan, "contains a non-finite number"),
    ([math.inf], "contains a non-finite number"),
    ({"n": -math.inf}, "contains a non-finite number"),
    (10**400, "contains a non-finite number"),
    (_cyclic(), "contains a cycle"),
    ("\ud800", "contains unbounded or ill-formed text"),
    ({"\udc00": 1}, "contains an unbounded or ill-formed object key"),
    (_deep(129), "exceeds the maximum JSON depth of 128"),
    (list(range(100_000)), "contains more than 100000 JSON values"),
    ({"a": ABSENT}, "contains a non-plain value"),
    (object(), "contains a non-plain value"),
]
BAD_JSON_IDS = [
    "str-subclass",
    "nested-str-subclass",
    "tuple",
    "bytes",
    "int-key",
    "str-subclass-key",
    "nan",
    "inf",
    "minus-inf",
    "huge-int",
    "cycle",
    "lone-surrogate",
    "surrogate-key",
    "depth-129",
    "too-many-values",
    "nested-absent",
    "object",
]


def _refused(call: Callable[[], object], field: str, detail: str | None = None) -> None:
    with pytest.raises(AttemptStoreError) as caught:
        call()
    error = caught.value
    assert error.code == "invalid_attempt"
    assert error.cause["field"] == field
    if detail is not None:
        assert error.cause["detail"] == detail
    assert error.__cause__ is None
    assert error.__suppress_context__


@pytest.mark.parametrize(("value", "detail"), BAD_JSON, ids=BAD_JSON_IDS)
@pytest.mark.parametrize("field", ["checkpoint", "error", "outcome", "meta"])
def test_put_refuses_json_that_is_not_plain_bounded_json(
    env: Env, field: str, value: object, detail: str
) -> None:
    """Exact plain types only, no cycle, finite numbers, well-formed text, shape limits."""
    env.own()
    _refused(lambda: env.attempts.put(running(1, **{field: value}), OWNER), field, detail)
    assert env.attempts.state() == ()


@pytest.mark.parametrize(("value", "detail"), BAD_JSON[:12], ids=BAD_JSON_IDS[:12])
def test_heartbeat_finish_and_patch_refuse_bad_json(env: Env, value: object, detail: str) -> None:
    """The same JSON rules hold for every operation that takes a value."""
    env.own()
    env.attempts.put(running(1), OWNER)
    _refused(lambda: env.attempts.heartbeat(RUN, STEP, 1, OWNER, 5, value), "checkpoint", detail)
    _refused(
        lambda: env.attempts.finish(FinishAttempt(RUN, STEP, 1, "done", 5, outcome=value), OWNER),
        "outcome",
        detail,
    )
    _refused(lambda: env.attempts.patch(ident(1), AttemptPatch(meta=value), OWNER), "meta", detail)
    assert env.attempts.state() == (running(1),)


def test_json_at_the_shape_limits_is_admitted(env: Env) -> None:
    """Depth exactly 128 and exactly 100 000 values are admitted."""
    env.own()
    wide = list(range(99_999))  # the list itself is the 100 000th value
    assert env.attempts.put(running(1, meta=_deep(128), outcome=wide), OWNER)
    stored = env.attempts.get(ident(1))
    assert stored.meta == _deep(128)
    assert stored.outcome == wide


def test_put_requires_meta(env: Env) -> None:
    """An attempt without meta is refused; the other JSON fields may be absent."""
    env.own()
    record = Attempt(RUN, STEP, 1, "running", 0, meta=ABSENT)
    _refused(lambda: env.attempts.put(record, OWNER), "meta", "is required")


BAD_IDENTIFIERS: list[object] = [
    "",
    "a\x00b",
    "\ud83d",
    "x" * 1025,
    "\U0001f600" * 513,
    7,
    None,
    Text("t"),
]


@pytest.mark.parametrize(
    "value", BAD_IDENTIFIERS, ids=lambda v: type(v).__name__ + str(len(str(v)))
)
@pytest.mark.parametrize("field", ["run_id", "step_key_digest", "state"])
def test_put_refuses_identifiers_that_are_not_durable_text(
    env: Env, field: str, value: object
) -> None:
    """Run id, step key digest and state follow the durable text rule."""
    fields: dict[str, Any] = {"run_id": RUN, "step_key_digest": STEP, "state": "running"}
    fields[field] = value
    record = Attempt(fields["run_id"], fields["step_key_digest"], 1, fields["state"], 0, meta={})
    _refused(lambda: env.attempts.put(record, OWNER), field)


def test_durable_text_edges_are_admitted(env: Env) -> None:
    """1024 UTF-16 units, U+FFFD and astral characters are ordinary text."""
    env.own()
    long_step = "\U0001f600" * 512
    assert env.attempts.put(running(1, step=long_step, state="\ufffd"), OWNER)
    assert env.attempts.get(ident(1, step=long_step)).state == "\ufffd"


BAD_INTEGERS: list[object] = [-1, 2**53, 1.0, True, "1", None]


BAD_NUMBER_CASES = [
    (field, value)
    for field in ("attempt", "started_at_ms", "finished_at_ms", "heartbeat_at_ms")
    for value in BAD_INTEGERS
    # None means "not set" for the optional timestamps.
    if not (value is None and field in ("finished_at_ms", "heartbeat_at_ms"))
]


@pytest.mark.parametrize(("field", "value"), BAD_NUMBER_CASES)
def test_put_refuses_numbers_that_are_not_safe_non_negative_ints(
    env: Env, field: str, value: object
) -> None:
    """Attempt numbers and timestamps are exact ints in [0, 2**53 - 1]."""
    fields: dict[str, Any] = {"attempt": 1, "started_at_ms": 0}
    fields[field] = value
    record = Attempt(
        RUN,
        STEP,
        fields.pop("attempt"),
        "running",
        fields.pop("started_at_ms"),
        meta={},
        **fields,
    )
    _refused(lambda: env.attempts.put(record, OWNER), field)


def test_the_largest_safe_integer_is_admitted(env: Env) -> None:
    """2**53 - 1 is a valid attempt number and timestamp."""
    env.own()
    top = 2**53 - 1
    record = running(top, started_at_ms=top, finished_at_ms=top, heartbeat_at_ms=top)
    assert env.attempts.put(record, OWNER)
    assert env.attempts.get(ident(top)) == record


@pytest.mark.parametrize(
    "owner",
    [None, ("h", 1, "n"), OwnerId("", 1, "n"), OwnerId("h", -1, "n"), OwnerId("h", 1, Text("n"))],
    ids=["none", "tuple", "empty-host", "negative-pid", "str-subclass-nonce"],
)
def test_every_write_refuses_an_invalid_owner(env: Env, owner: object) -> None:
    """The owner must be an OwnerId with admissible fields."""
    env.own()
    env.attempts.put(running(1), OWNER)
    _refused(lambda: env.attempts.put(running(2), owner), "owner")  # type: ignore[arg-type]
    _refused(lambda: env.attempts.heartbeat(RUN, STEP, 1, owner, 5), "owner")  # type: ignore[arg-type]
    _refused(
        lambda: env.attempts.finish(FinishAttempt(RUN, STEP, 1, "done", 5), owner),  # type: ignore[arg-type]
        "owner",
    )
    _refused(lambda: env.attempts.patch(ident(1), AttemptPatch(), owner), "owner")  # type: ignore[arg-type]
    assert env.attempts.state() == (running(1),)


def test_records_must_be_the_contracts_classes(env: Env) -> None:
    """put takes an Attempt, finish a FinishAttempt, get and patch an AttemptId (or an
    Attempt, which stands for its own id) and an AttemptPatch."""
    env.own()
    _refused(lambda: env.attempts.put({"run_id": RUN}, OWNER), "attempt")  # type: ignore[arg-type]
    _refused(lambda: env.attempts.get((RUN, STEP, 1)), "attempt_id")  # type: ignore[arg-type]
    _refused(lambda: env.attempts.finish(running(1), OWNER), "finish")  # type: ignore[arg-type]
    _refused(
        lambda: env.attempts.patch(FinishAttempt(RUN, STEP, 1, "done", 5), AttemptPatch(), OWNER),
        "attempt_id",
    )  # type: ignore[arg-type]
    _refused(lambda: env.attempts.patch(ident(1), {}, OWNER), "patch")  # type: ignore[arg-type]
    _refused(lambda: env.attempts.get(AttemptId(RUN, STEP, -1)), "attempt")


def test_heartbeat_admits_owner_then_id_then_now(env: Env) -> None:
    """With several bad arguments, the owner is reported first, then the id, then now_ms."""
    bad = OwnerId("", 0, "")
    _refused(lambda: env.attempts.heartbeat("", STEP, 1, bad, -1), "owner")
    _refused(lambda: env.attempts.heartbeat("", STEP, 1, OWNER, -1), "run_id")
    _refused(lambda: env.attempts.heartbeat(RUN, STEP, -1, OWNER, -1), "attempt")
    _refused(lambda: env.attempts.heartbeat(RUN, STEP, 1, OWNER, -1), "now_ms")
    _refused(lambda: env.attempts.heartbeat(RUN, STEP, 1, OWNER, 2**53), "now_ms")


def test_heartbeat_has_no_skew_rule(env: Env) -> None:
    """An attempt heartbeat far ahead of the store clock is admitted."""
    env.own()
    env.attempts.put(running(1), OWNER)
    assert env.attempts.heartbeat(RUN, STEP, 1, OWNER, 2**53 - 1)
    assert env.attempts.get(ident(1)).heartbeat_at_ms == 2**53 - 1


@pytest.mark.parametrize("state", ["running"])
def test_finish_refuses_an_in_progress_state(env: Env, state: str) -> None:
    """finish needs a settled state: an in-progress one is invalid_attempt, nothing written."""
    env.own()
    env.attempts.put(running(1), OWNER)
    request = FinishAttempt(RUN, STEP, 1, state, 5)
    _refused(lambda: env.attempts.finish(request, OWNER), "state")
    custom = env.attempt_store(in_progress_states=("queued", "running"))
    _refused(lambda: custom.finish(FinishAttempt(RUN, STEP, 1, "queued", 5), OWNER), "state")
    assert env.attempts.get(ident(1)) == running(1)


def test_finish_refuses_a_bad_finish_time(env: Env) -> None:
    """finished_at_ms is required and must be a safe non-negative int."""
    request = FinishAttempt(RUN, STEP, 1, "done", None)  # type: ignore[arg-type]
    _refused(lambda: env.attempts.finish(request, OWNER), "finished_at_ms")


def test_refusal_messages_carry_no_value(env: Env) -> None:
    """The message and cause name the field and complaint, never the value."""
    env.own()
    secret = "sk-live-ADMISSION-SECRET"
    with pytest.raises(AttemptStoreError) as caught:
        env.attempts.put(running(1, outcome={"token": secret, "bad": math.nan}), OWNER)
    text = f"{caught.value} {caught.value!r} {caught.value.cause}"
    assert secret not in text
    assert "outcome" in text


def test_an_attempt_is_accepted_as_its_own_id(env: Env) -> None:
    """get and patch take the Attempt that put or get returned in place of its AttemptId
    (upstream: an attempt record is also its id); only its id fields are read."""
    env.own()
    record = running(1)
    env.attempts.put(record, OWNER)
    assert env.attempts.get(record) == env.attempts.get(ident(1)) is not None
    fetched = env.attempts.get(ident(1))
    assert fetched is not None
    assert env.attempts.patch(fetched, AttemptPatch(), OWNER) == Patched()
    # A record whose id fields are inadmissible is refused like a bad AttemptId.
    _refused(lambda: env.attempts.get(attrs.evolve(fetched, attempt=-1)), "attempt")
