"""Attempt input admission: the one place that decides what an attempt store accepts.

The SQLite ``AttemptStore`` and the model's ``ModelAttemptStore`` both call
these functions and nothing else to check their arguments, so they refuse the
same inputs in the same order. Admission never decides an outcome; it raises
``AttemptStoreError("invalid_attempt")`` ``from None`` with a payload-free
cause (field name and a fixed complaint, lengths; never the value).

Rules:

- identifiers (run id, step key digest, state names): the run store's durable
  text rule; attempt numbers and timestamps: exact ``int`` in ``[0, 2**53-1]``;
- owners: exactly ``OwnerId`` with admissible fields;
- records: exactly ``Attempt``, ``AttemptId``, ``FinishAttempt``,
  ``AttemptPatch``;
- JSON values: exact plain types (``dict`` with ``str`` keys, ``list``,
  ``str``, ``int``, ``float``, ``bool``, ``None``), no cycle, finite numbers,
  no surrogate code point, within the run store's shape limits (depth 128,
  100 000 values, 100 000 members per container and in total); the checkpoint
  additionally within the store's byte cap, counted in UTF-8 bytes of the
  canonical encoding.

An admitted JSON value is encoded once (the canonical encoding that is
stored) and the record handed back holds copies decoded from that text, so
what was checked is exactly what is written and nothing the caller still holds
can change it afterwards.
"""

from __future__ import annotations

import json
from typing import Final

import attrs

from .._boundary import (
    NonFiniteNumber,
    canonical_json,
    is_identifier,
    is_owner,
    is_timestamp,
    json_shape_complaint,
    json_value_complaint,
    parse_strict_json,
)
from .._values import OwnerId
from ._errors import AttemptStoreError
from ._values import (
    ABSENT,
    PUT_MODES,
    Absent,
    Attempt,
    AttemptId,
    AttemptOptions,
    AttemptPatch,
    FinishAttempt,
    JsonValue,
    PutMode,
)

MAXIMUM_CHECKPOINT_BYTES: Final = 16 * 1024 * 1024
"""The largest checkpoint cap a store may be built with (16 MiB), and the cap
every stored checkpoint is checked against on read."""
DEFAULT_MAX_CHECKPOINT_BYTES: Final = 1024 * 1024
"""The default checkpoint cap (1 MiB), in UTF-8 bytes of the stored encoding."""
MAXIMUM_IN_PROGRESS_STATES: Final = 256
"""The most in-progress states a store may be built with."""
DEFAULT_IN_PROGRESS_STATES: Final = ("running",)
DEFAULT_PUT_MODE: Final = "insert"

BYTE_LIMIT_COMPLAINT: Final = "exceeds the JSON byte limit"


def invalid(method: str, field: str, detail: str, **extra: object) -> AttemptStoreError:
    """The admission error for one field (raise it ``from None``)."""
    return AttemptStoreError(
        "invalid_attempt",
        method,
        f"attempt input is invalid: {field} {detail}",
        {"field": field, "detail": detail, **extra},
    )


@attrs.frozen
class Encoded:
    """The canonical texts of a request's JSON fields; ``None`` where absent."""

    checkpoint: str | None = None
    error: str | None = None
    outcome: str | None = None
    meta: str | None = None


# --- options ----------------------------------------------------------------


def admit_options(
    in_progress_states: object, max_checkpoint_bytes: object, put_mode: object
) -> AttemptOptions:
    """A store's options, checked when the store is built."""
    method = "options"
    field = "in_progress_states"
    if type(in_progress_states) not in (tuple, list):
        raise invalid(method, field, "must be a tuple or list of state names") from None
    states: tuple[object, ...] = tuple(in_progress_states)  # type: ignore[arg-type]
    if not states:
        raise invalid(method, field, "must not be empty") from None
    if len(states) > MAXIMUM_IN_PROGRESS_STATES:
        raise invalid(
            method, field, f"must hold at most {MAXIMUM_IN_PROGRESS_STATES} states"
        ) from None
    if not all(is_identifier(state) for state in states):
        raise invalid(method, field, "must hold well-formed durable text") from None
    if len(set(states)) != len(states):
        raise invalid(method, field, "must not repeat a state") from None
    field = "max_checkpoint_bytes"
    if (
        type(max_checkpoint_bytes) is not int
        or not 1 <= max_checkpoint_bytes <= MAXIMUM_CHECKPOINT_BYTES
    ):
        raise invalid(
            method, field, f"must be an int from 1 to {MAXIMUM_CHECKPOINT_BYTES}"
        ) from None
    if type(put_mode) is not str or put_mode not in PUT_MODES:
        raise invalid(method, "put_mode", 'must be "insert" or "upsert"') from None
    mode: PutMode = "insert" if put_mode == "insert" else "upsert"
    return AttemptOptions(states, max_checkpoint_bytes, mode)  # type: ignore[arg-type]


# --- fields -------------------------------------------------------------------


def _identifier(method: str, field: str, value: object) -> str:
    if not is_identifier(value):
        raise invalid(method, field, "must be well-formed durable text") from None
    return value  # type: ignore[return-value]


def _integer(method: str, field: str, value: object) -> int:
    if not is_timestamp(value):
        raise invalid(method, field, "must be a non-negative safe integer") from None
    return value  # type: ignore[return-value]


def _optional_timestamp(method: str, field: str, value: object) -> int | None:
    return None if value is None else _integer(method, field, value)


def _owner(method: str, value: object) -> OwnerId:
    if not is_owner(value):
        raise invalid(method, "owner", "must be a valid OwnerId") from None
    return value  # type: ignore[return-value]


def _record(method: str, field: str, value: object, kind: type[object]) -> None:
    if type(value) is not kind:
        raise invalid(method, field, f"must be an {kind.__name__}") from None


def _json(
    method: str, field: str, value: object, *, cap: int | None = None
) -> tuple[JsonValue | Absent, str | None]:
    """An optional JSON field: its detached copy and canonical text, or
    ``(ABSENT, None)`` when not given."""
    if value is ABSENT:
        return ABSENT, None
    complaint = json_value_complaint(value)
    if complaint is not None:
        raise invalid(method, field, complaint) from None
    text = canonical_json(value)
    if cap is not None and len(text) * 4 > cap:
        # Every code point is 1 to 4 UTF-8 bytes, so only this case needs encoding.
        size = len(text) if len(text) > cap else len(text.encode("utf-8"))
        if size > cap:
            raise invalid(
                method, field, BYTE_LIMIT_COMPLAINT, limit_bytes=cap, at_least_bytes=size
            ) from None
    detached: JsonValue = json.loads(text)
    return detached, text


def _id(method: str, run_id: object, step_key_digest: object, attempt: object) -> AttemptId:
    return AttemptId(
        _identifier(method, "run_id", run_id),
        _identifier(method, "step_key_digest", step_key_digest),
        _integer(method, "attempt", attempt),
    )


# --- per operation (each in the operation's documented order) ----------------


def admit_put(
    attempt: object, owner: object, options: AttemptOptions
) -> tuple[Attempt, OwnerId, Encoded]:
    """``put(attempt, owner)``: the record's fields in order, then the owner."""
    method = "put"
    _record(method, "attempt", attempt, Attempt)
    record: Attempt = attempt  # type: ignore[assignment]
    ident = _id(method, record.run_id, record.step_key_digest, record.attempt)
    state = _identifier(method, "state", record.state)
    started = _integer(method, "started_at_ms", record.started_at_ms)
    finished = _optional_timestamp(method, "finished_at_ms", record.finished_at_ms)
    beat = _optional_timestamp(method, "heartbeat_at_ms", record.heartbeat_at_ms)
    checkpoint, checkpoint_text = _json(
        method, "checkpoint", record.checkpoint, cap=options.max_checkpoint_bytes
    )
    error, error_text = _json(method, "error", record.error)
    outcome, outcome_text = _json(method, "outcome", record.outcome)
    if record.meta is ABSENT:
        raise invalid(method, "meta", "is required") from None
    meta, meta_text = _json(method, "meta", record.meta)
    who = _owner(method, owner)
    admitted = Attempt(
        ident.run_id,
        ident.step_key_digest,
        ident.attempt,
        state,
        started,
        finished_at_ms=finished,
        heartbeat_at_ms=beat,
        checkpoint=checkpoint,
        error=error,
        outcome=outcome,
        meta=meta,
    )
    return admitted, who, Encoded(checkpoint_text, error_text, outcome_text, meta_text)


def _attempt_id(method: str, value: object) -> AttemptId:
    """An ``AttemptId``, or an ``Attempt`` standing for its own id (upstream:
    an attempt record is also its id); only the three id fields are read."""
    if type(value) is not AttemptId and type(value) is not Attempt:
        raise invalid(method, "attempt_id", "must be an AttemptId or an Attempt") from None
    given: AttemptId | Attempt = value
    return _id(method, given.run_id, given.step_key_digest, given.attempt)


def admit_get(attempt_id: object) -> AttemptId:
    """``get(attempt_id)``: an ``AttemptId`` or an ``Attempt``."""
    return _attempt_id("get", attempt_id)


def admit_heartbeat(
    run_id: object,
    step_key_digest: object,
    attempt: object,
    owner: object,
    now_ms: object,
    checkpoint: object,
    options: AttemptOptions,
) -> tuple[AttemptId, OwnerId, int, JsonValue | Absent, str | None]:
    """``heartbeat``: owner, the id, ``now_ms`` (a plain timestamp, no skew
    rule), then the checkpoint against the cap."""
    method = "heartbeat"
    who = _owner(method, owner)
    ident = _id(method, run_id, step_key_digest, attempt)
    now = _integer(method, "now_ms", now_ms)
    value, text = _json(method, "checkpoint", checkpoint, cap=options.max_checkpoint_bytes)
    return ident, who, now, value, text


def admit_finish(
    finish: object, owner: object, options: AttemptOptions
) -> tuple[FinishAttempt, OwnerId, Encoded]:
    """``finish(finish, owner)``: the record's fields in order (the state must
    not be in progress), then the owner."""
    method = "finish"
    _record(method, "finish", finish, FinishAttempt)
    record: FinishAttempt = finish  # type: ignore[assignment]
    ident = _id(method, record.run_id, record.step_key_digest, record.attempt)
    state = _identifier(method, "state", record.state)
    if state in options.in_progress_states:
        raise invalid(method, "state", "must be a settled state, not an in-progress one") from None
    finished = _integer(method, "finished_at_ms", record.finished_at_ms)
    error, error_text = _json(method, "error", record.error)
    outcome, outcome_text = _json(method, "outcome", record.outcome)
    meta, meta_text = _json(method, "meta", record.meta)
    who = _owner(method, owner)
    admitted = FinishAttempt(
        ident.run_id,
        ident.step_key_digest,
        ident.attempt,
        state,
        finished,
        error=error,
        outcome=outcome,
        meta=meta,
    )
    return admitted, who, Encoded(None, error_text, outcome_text, meta_text)


def admit_patch(
    attempt_id: object, patch: object, owner: object, options: AttemptOptions
) -> tuple[AttemptId, AttemptPatch, OwnerId, Encoded]:
    """``patch(attempt_id, patch, owner)``: the id, the patch's fields in
    order (the checkpoint against the cap), then the owner."""
    method = "patch"
    ident = _attempt_id(method, attempt_id)
    _record(method, "patch", patch, AttemptPatch)
    fields: AttemptPatch = patch  # type: ignore[assignment]
    checkpoint, checkpoint_text = _json(
        method, "checkpoint", fields.checkpoint, cap=options.max_checkpoint_bytes
    )
    error, error_text = _json(method, "error", fields.error)
    outcome, outcome_text = _json(method, "outcome", fields.outcome)
    meta, meta_text = _json(method, "meta", fields.meta)
    who = _owner(method, owner)
    admitted = AttemptPatch(checkpoint=checkpoint, error=error, outcome=outcome, meta=meta)
    return ident, admitted, who, Encoded(checkpoint_text, error_text, outcome_text, meta_text)


# --- stored text ---------------------------------------------------------------


def stored_json_complaint(text: object, *, cap: int | None = None) -> tuple[object, str | None]:
    """Parse a stored JSON column: ``(value, None)``, or ``(None, complaint)``.

    Strict JSON (no ``NaN``/``Infinity``, no control characters in strings,
    no literal overflowing a double) within the shape limits; with ``cap``,
    also within that many UTF-8 bytes.
    """
    if type(text) is not str:
        return None, "is not JSON text"
    if cap is not None and len(text) * 4 > cap and len(text.encode("utf-8")) > cap:
        return None, BYTE_LIMIT_COMPLAINT
    try:
        value = parse_strict_json(text)
    except NonFiniteNumber:
        return None, "contains a non-finite number"
    except (ValueError, RecursionError):
        return None, "is not valid JSON text"
    complaint = json_shape_complaint(value)
    if complaint is not None:
        return None, complaint
    return value, None
