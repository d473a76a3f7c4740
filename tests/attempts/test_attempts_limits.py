"""Attempt payloads and timelines: the checkpoint cap, multi-megabyte values,
reversed timelines, and values that look like secrets round-tripping verbatim.

Ported from upstream's AttemptStore checkpoint-cap cases and its
StorePayloadAndTimelineLimits and Redaction cases.
"""

from __future__ import annotations

import pytest

from runstore.attempts import (
    AttemptPatch,
    AttemptStoreError,
    FinishAttempt,
    Finished,
    Inserted,
    Patched,
    Updated,
)

from .test_attempts_pairs import OWNER, RUN, STEP, Env, env, ident, running

__all__ = ["env"]

MIB = 1024 * 1024


def _string_of_bytes(total: int, char: str = "a") -> str:
    """A JSON string value whose canonical encoding is exactly ``total`` UTF-8 bytes."""
    width = len(char.encode("utf-8"))
    assert (total - 2) % width == 0
    return char * ((total - 2) // width)


def _refused_for_size(call: object) -> AttemptStoreError:
    with pytest.raises(AttemptStoreError) as caught:
        call()  # type: ignore[operator]
    assert caught.value.code == "invalid_attempt"
    assert caught.value.cause["field"] == "checkpoint"
    assert caught.value.cause["detail"] == "exceeds the JSON byte limit"
    return caught.value


def test_a_checkpoint_exactly_at_the_cap_is_admitted(env: Env) -> None:
    """The default cap is 1 MiB of UTF-8 in the stored encoding, inclusive."""
    env.own()
    exact = _string_of_bytes(MIB)
    assert env.attempts.put(running(1, checkpoint=exact), OWNER) == Inserted()
    assert env.attempts.get(ident(1)).checkpoint == exact


def test_one_byte_over_the_cap_is_refused_on_every_operation(env: Env) -> None:
    """put, heartbeat and patch refuse a checkpoint one byte over; nothing is written."""
    env.own()
    env.attempts.put(running(1, checkpoint="small"), OWNER)
    over = _string_of_bytes(MIB + 1)
    _refused_for_size(lambda: env.attempts.put(running(2, checkpoint=over), OWNER))
    _refused_for_size(lambda: env.attempts.heartbeat(RUN, STEP, 1, OWNER, 5, over))
    _refused_for_size(lambda: env.attempts.patch(ident(1), AttemptPatch(checkpoint=over), OWNER))
    assert env.attempts.state() == (running(1, checkpoint="small"),)


def test_the_cap_counts_utf8_bytes_not_characters(env: Env) -> None:
    """Multi-byte characters count their UTF-8 length."""
    env.own()
    attempts = env.attempt_store(max_checkpoint_bytes=2 + 4 * 10)
    assert attempts.put(running(1, checkpoint="\U0001f600" * 10), OWNER) == Inserted()
    _refused_for_size(lambda: attempts.put(running(2, checkpoint="\U0001f600" * 10 + "a"), OWNER))
    assert attempts.put(running(3, checkpoint="\u00e9" * 20), OWNER) == Inserted()


def test_the_cap_counts_the_compact_encoding(env: Env) -> None:
    """Separators are compact and non-ASCII is not escaped: {"a":1} is 7 bytes."""
    env.own()
    attempts = env.attempt_store(max_checkpoint_bytes=7)
    assert attempts.put(running(1, checkpoint={"a": 1}), OWNER) == Inserted()
    _refused_for_size(lambda: attempts.put(running(2, checkpoint={"a": 10}), OWNER))


def test_a_configured_cap_above_one_mib_admits_larger_checkpoints(env: Env) -> None:
    """With a 4 MiB cap, a 3 MiB checkpoint round-trips and 4 MiB + 1 is refused."""
    env.own()
    attempts = env.attempt_store(max_checkpoint_bytes=4 * MIB)
    big = _string_of_bytes(3 * MIB)
    assert attempts.put(running(1, checkpoint={"blob": big}), OWNER) == Inserted()
    assert attempts.heartbeat(RUN, STEP, 1, OWNER, 5, [big]) == Updated()
    assert attempts.get(ident(1)).checkpoint == [big]
    _refused_for_size(
        lambda: attempts.put(running(2, checkpoint=_string_of_bytes(4 * MIB + 1)), OWNER)
    )
    # The default store reads it back too: reads check only the 16 MiB ceiling.
    assert env.attempts.get(ident(1)).checkpoint == [big]


def test_the_16_mib_ceiling_is_usable(env: Env) -> None:
    """A store built with the 16 MiB maximum admits a checkpoint of exactly 16 MiB."""
    env.own()
    attempts = env.attempt_store(max_checkpoint_bytes=16 * MIB)
    exact = _string_of_bytes(16 * MIB)
    assert attempts.put(running(1, checkpoint=exact), OWNER) == Inserted()
    assert attempts.get(ident(1)).checkpoint == exact


def test_multi_megabyte_outcome_error_and_meta_round_trip(env: Env) -> None:
    """Only the checkpoint is capped: 5 MiB outcome, error and meta persist whole."""
    env.own()
    big = _string_of_bytes(5 * MIB, "\u00e9")
    rows = [{"i": i, "text": "x" * 100} for i in range(20_000)]
    env.attempts.put(running(1, meta={"payload": big}, error=[big]), OWNER)
    finish = FinishAttempt(RUN, STEP, 1, "succeeded", 9, outcome={"rows": rows, "tail": big})
    assert env.attempts.finish(finish, OWNER) == Finished()
    stored = env.attempts.get(ident(1))
    assert stored.meta == {"payload": big}
    assert stored.error == [big]
    assert stored.outcome == {"rows": rows, "tail": big}
    assert env.attempts.patch(ident(1), AttemptPatch(meta={"again": big}), OWNER) == Patched()
    assert env.attempts.get(ident(1)).meta == {"again": big}


def test_reversed_timelines_are_stored_as_given(env: Env) -> None:
    """Timestamps are never compared: finished before started, heartbeat before
    started, all persist exactly."""
    env.own()
    env.attempts.put(running(1, started_at_ms=1_000, heartbeat_at_ms=10), OWNER)
    env.attempts.heartbeat(RUN, STEP, 1, OWNER, 5)
    env.attempts.finish(FinishAttempt(RUN, STEP, 1, "succeeded", 1), OWNER)
    stored = env.attempts.get(ident(1))
    assert (stored.started_at_ms, stored.heartbeat_at_ms, stored.finished_at_ms) == (1_000, 10, 1)
    record = running(2, started_at_ms=500, finished_at_ms=0, heartbeat_at_ms=0, state="failed")
    assert env.attempts.put(record, OWNER) == Inserted()
    assert env.attempts.get(ident(2)) == record


def test_credential_shaped_values_round_trip_verbatim(env: Env) -> None:
    """Nothing is redacted: a pageToken string and an object-valued clientSecret
    come back exactly (upstream issue #72)."""
    env.own()
    checkpoint = {"pageToken": "tok_abc123", "clientSecret": {"id": "c", "secret": "s3cr3t"}}
    outcome = {"apiKey": "sk-live-123", "password": "hunter2", "token": "Bearer x.y.z"}
    env.attempts.put(running(1, checkpoint=checkpoint, meta={"authorization": "Basic Zm9v"}), OWNER)
    env.attempts.finish(FinishAttempt(RUN, STEP, 1, "succeeded", 2, outcome=outcome), OWNER)
    stored = env.attempts.get(ident(1))
    assert stored.checkpoint == checkpoint
    assert stored.outcome == outcome
    assert stored.meta == {"authorization": "Basic Zm9v"}


def test_nul_and_control_characters_in_values_round_trip(env: Env) -> None:
    """NUL and control characters are refused only in identifiers, never in values."""
    env.own()
    value = {"nul": "a\x00b", "ctl": "\x01\x1f\n\t", "quote": '"\\', "k\x00": 1}
    env.attempts.put(running(1, outcome=value), OWNER)
    assert env.attempts.get(ident(1)).outcome == value
