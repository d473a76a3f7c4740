"""Input admission: the one place that decides what an operation accepts.

The model and every adapter call these functions and nothing else to check
their arguments, so both refuse exactly the same inputs in exactly the same
order. Admission never decides an outcome; it only says "this input breaks the
durable contract" by raising ``InvalidRunError`` ``from None`` with a
payload-free cause (field names, lengths, validity flags, never the text).

Rules (contract.md, "Input admission in Python terms"):

- identifiers: exactly ``str``; 1 to 1024 UTF-16 code units; no NUL; no
  surrogate code point;
- timestamps, pids, ordinals: exactly ``int``; ``0 <= x <= 2**53 - 1``;
- run state: exactly ``str``, strict JSON within the shape limits, stored byte
  for byte;
- records: exactly the contract's classes (a ``RunRow`` wherever a snapshot is
  expected).

The ``admit_<operation>`` functions check each operation's arguments in the
operation's documented order and return them admitted.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from typing import Any, Final

import attrs

from ._clock import Clock
from ._constants import (
    COMPANION_PREFIX,
    HEARTBEAT_SKEW_ALLOWANCE_MS,
    MAX_SAFE_INTEGER,
    MAXIMUM_CLAIM_BATCH,
    MAXIMUM_HEARTBEAT_BATCH,
    MAXIMUM_IDENTIFIER_LENGTH,
    MAXIMUM_PAGE_SIZE,
    MAXIMUM_PURGE_BATCH,
    MAXIMUM_RUN_JSON_DEPTH,
    MAXIMUM_RUN_JSON_NODES,
)
from ._errors import InvalidRunError
from ._values import (
    EVIDENCE_KINDS,
    RUN_STATUSES,
    LivenessEvidence,
    OwnerId,
    RunRow,
    RunSnapshot,
    RunStatus,
    TransitionGuard,
)

DEFAULT_DETAIL: Final = "violates the durable contract"

_SURROGATE = re.compile("[\ud800-\udfff]")
_ASTRAL = re.compile("[\U00010000-\U0010ffff]")


# --- primitive predicates ---------------------------------------------------


def utf16_length(text: str) -> int:
    """The length of ``text`` in UTF-16 code units (an astral character is 2)."""
    return len(text) + len(_ASTRAL.findall(text))


def is_identifier(value: object) -> bool:
    """Whether ``value`` is durable identifier text."""
    if type(value) is not str or not value or "\x00" in value:
        return False
    if _SURROGATE.search(value) is not None:
        return False
    if len(value) * 2 <= MAXIMUM_IDENTIFIER_LENGTH:
        return True
    return utf16_length(value) <= MAXIMUM_IDENTIFIER_LENGTH


def is_timestamp(value: object) -> bool:
    """Whether ``value`` is an exact ``int`` in ``[0, 2**53 - 1]``."""
    return type(value) is int and 0 <= value <= MAX_SAFE_INTEGER


def is_owner(value: object) -> bool:
    """Whether ``value`` is an ``OwnerId`` whose three fields are admissible."""
    return (
        type(value) is OwnerId
        and is_identifier(value.host_id)
        and is_timestamp(value.pid)
        and is_identifier(value.nonce)
    )


def invalid(method: str, field: str, detail: str = DEFAULT_DETAIL) -> InvalidRunError:
    """The admission error for one field."""
    return InvalidRunError(method, {"field": field, "detail": detail})


# --- JSON shape -------------------------------------------------------------


class NonFiniteNumber(ValueError):
    """A JSON literal no other reader could hold as a finite number: ``NaN``,
    ``Infinity``, ``-Infinity``, or a literal that overflows a double."""


def _refuse_constant(_name: str) -> Any:
    raise NonFiniteNumber


def _finite_float(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise NonFiniteNumber
    return number


def _finite_int(text: str) -> int:
    number = int(text)
    # A literal that overflows a double is Infinity to every other reader.
    float(number)
    return number


#: One decoder for every read (``json.loads`` with hooks builds a decoder and
#: its scanner per call, a measurable share of a small row's decode). Its
#: ``decode`` keeps no state between calls, so threads may share it.
_STRICT_DECODER: Final = json.JSONDecoder(
    parse_constant=_refuse_constant,
    parse_float=_finite_float,
    parse_int=_finite_int,
)


def parse_strict_json(text: str) -> Any:
    """Parse ``text`` as strict JSON, as run state and attempt values are read.

    Raises ``NonFiniteNumber`` for a non-finite literal, and ``ValueError`` or
    ``RecursionError`` for anything else that is not JSON (control characters
    inside strings included).
    """
    try:
        return _STRICT_DECODER.decode(text)
    except OverflowError:
        raise NonFiniteNumber from None


def json_text_complaint(text: object) -> str | None:
    """Why ``text`` is not admissible run state, or None when it is."""
    if type(text) is not str or not text:
        return "must be non-empty JSON text"
    try:
        value = parse_strict_json(text)
    except NonFiniteNumber:
        return "contains a non-finite number"
    except (ValueError, RecursionError):
        return "must be valid JSON text"
    if _shape_cannot_break(text):
        return None
    return json_shape_complaint(value)


def _shape_cannot_break(text: str) -> bool:
    """Whether strict JSON ``text`` is too small to break a shape limit, so
    the walk over its value can be skipped (most run state is small).

    Every value takes at least one character, so a text no longer than the
    node limit holds no more values (or members); a depth over the limit
    needs more opening brackets than the limit; a surrogate in a parsed
    string comes from a backslash-u escape or is in the text itself."""
    return (
        len(text) <= MAXIMUM_RUN_JSON_NODES
        and text.count("[") + text.count("{") <= MAXIMUM_RUN_JSON_DEPTH
        and "\\u" not in text
        and _SURROGATE.search(text) is None
    )


def json_shape_complaint(value: object) -> str | None:
    """Why a decoded JSON value breaks the shape limits, or None.

    Depth counts from 0 at the root; every scalar and container is one value;
    members (array elements and object members) are bounded per container and
    in total. Strings and keys may hold no surrogate code point.
    """
    nodes = 0
    members = 0
    stack: list[tuple[object, int]] = [(value, 0)]
    on_path: set[int] = set()
    while stack:
        item, depth = stack.pop()
        if depth > MAXIMUM_RUN_JSON_DEPTH:
            return f"exceeds the maximum JSON depth of {MAXIMUM_RUN_JSON_DEPTH}"
        nodes += 1
        if nodes > MAXIMUM_RUN_JSON_NODES:
            return f"contains more than {MAXIMUM_RUN_JSON_NODES} JSON values"
        if type(item) is str:
            if _SURROGATE.search(item) is not None:
                return "contains unbounded or ill-formed text"
        elif type(item) is dict:
            if id(item) in on_path:
                return "contains a cycle"
            members += len(item)
            if len(item) > MAXIMUM_RUN_JSON_NODES or members > MAXIMUM_RUN_JSON_NODES:
                return "exceeds the JSON members limit"
            for key, child in item.items():
                if type(key) is not str or _SURROGATE.search(key) is not None:
                    return "contains an unbounded or ill-formed object key"
                stack.append((child, depth + 1))
        elif type(item) is list:
            members += len(item)
            if len(item) > MAXIMUM_RUN_JSON_NODES or members > MAXIMUM_RUN_JSON_NODES:
                return "exceeds the JSON members limit"
            stack.extend((child, depth + 1) for child in item)
        elif type(item) is float:
            if not math.isfinite(item):
                return "contains a non-finite number"
        elif type(item) is int:
            try:
                float(item)
            except OverflowError:
                return "contains a non-finite number"
        elif type(item) is bool or item is None:
            pass
        else:
            return "contains a non-plain value"
    return None


def _has_cycle(value: object) -> bool:
    """Whether a Python value refers to one of its own containers."""
    path: set[int] = set()
    # Depth-first with explicit exit markers, so sharing (a DAG) is not a cycle.
    stack: list[tuple[object, bool]] = [(value, False)]
    seen = 0
    while stack:
        item, leaving = stack.pop()
        if leaving:
            path.discard(id(item))
            continue
        if type(item) is dict or type(item) is list:
            seen += 1
            if id(item) in path:
                return True
            if seen > MAXIMUM_RUN_JSON_NODES:
                return False  # the node limit refuses it anyway
            path.add(id(item))
            stack.append((item, True))
            children = item.values() if type(item) is dict else item
            stack.extend((child, False) for child in children)
    return False


def json_value_complaint(value: object) -> str | None:
    """Why a Python value is not an admissible attempt JSON value, or None."""
    if _has_cycle(value):
        return "contains a cycle"
    return json_shape_complaint(value)


def canonical_json(value: object) -> str:
    """The stored encoding of an admitted attempt value."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def state_cause(text: object, **context: object) -> dict[str, Any]:
    """A payload-free description of run state for an error cause."""
    valid = False
    if type(text) is str:
        try:
            json.loads(text)
            valid = True
        except (ValueError, RecursionError):
            valid = False
    return {
        **context,
        "field": "state_json",
        "state_json_length": len(text) if type(text) is str else None,
        "state_json_valid": valid,
    }


# --- field admission ----------------------------------------------------------


def admit_identifier(method: str, field: str, value: object) -> str:
    if not is_identifier(value):
        raise invalid(method, field, "must be well-formed durable text") from None
    return value  # type: ignore[return-value]


def admit_timestamp(method: str, field: str, value: object) -> int:
    if not is_timestamp(value):
        raise invalid(method, field, "must be a non-negative safe integer") from None
    return value  # type: ignore[return-value]


def admit_owner(method: str, field: str, value: object) -> OwnerId:
    if type(value) is not OwnerId:
        raise invalid(method, field, "must be an OwnerId") from None
    if not is_owner(value):
        raise invalid(method, field, "must be a valid owner identity") from None
    return value


def clock_reading(method: str, clock: Clock) -> int:
    """The store clock's current reading, in whole milliseconds.

    A fractional reading is floored (upstream's rule: a clock at 10.5 ms
    stamps 10). Anything else that is not a non-negative safe integer (a
    negative or non-finite number, nanoseconds past ``2**53 - 1``, ``None``, a
    ``bool``) is refused with ``invalid_run`` naming the clock; the reading
    itself is not quoted.
    """
    reading: object = clock.now_ms()
    if type(reading) is float and math.isfinite(reading) and reading >= 0:
        reading = math.floor(reading)
    if not is_timestamp(reading):
        raise invalid(
            method, "clock", "returned a reading that is not a non-negative safe integer of ms"
        ) from None
    return reading  # type: ignore[return-value]


def admit_clock(method: str, clock: object) -> Clock:
    """A store clock: an object with a callable ``now_ms`` whose reading is
    admissible now (``time.time``, a string or a bare object are refused)."""
    if not callable(getattr(clock, "now_ms", None)):
        raise invalid(method, "clock", "must be a runstore.Clock (an object with now_ms())")
    try:
        clock_reading(method, clock)  # type: ignore[arg-type]
    except InvalidRunError:
        raise
    except Exception:
        failure = invalid(method, "clock", "raised an exception from now_ms()")
    else:
        return clock  # type: ignore[return-value]
    # Raised outside the handler: the clock's own error text stays out of the chain.
    raise failure


def admit_lease_reading(
    method: str,
    value: object,
    clock: Clock,
    *,
    run_id: str | None,
    claimed_at_ms: int | None = None,
) -> int:
    """A caller's lease reading: a timestamp at most the skew allowance ahead of
    the store clock (exactly the allowance is admitted; behind is fine)."""
    now_ms = admit_timestamp(method, "now_ms", value)
    clock_ms = clock_reading(method, clock)
    if now_ms > clock_ms + HEARTBEAT_SKEW_ALLOWANCE_MS:
        cause: dict[str, Any] = {} if run_id is None else {"run_id": run_id}
        if claimed_at_ms is not None:
            cause["claimed_at_ms"] = claimed_at_ms
        cause.update(
            field="now_ms",
            now_ms=now_ms,
            clock_ms=clock_ms,
            detail="runs ahead of the store clock by more than the heartbeat skew allowance",
        )
        raise InvalidRunError(method, cause) from None
    return now_ms


def admit_snapshot(method: str, value: object) -> RunSnapshot:
    """An expected snapshot: a ``RunSnapshot``, or a ``RunRow`` (its other
    fields are ignored), whose ownership fields agree with its status."""
    if type(value) is RunRow:
        value = value.snapshot
    if type(value) is not RunSnapshot:
        raise invalid(method, "expected", "must be a RunSnapshot or RunRow") from None
    # Fields are typed, but nothing checked them when the value was built.
    status: object = value.status
    owner: object = value.owner
    heartbeat: object = value.heartbeat_at_ms
    if (
        type(status) is not str
        or status not in RUN_STATUSES
        or (heartbeat is not None and not is_timestamp(heartbeat))
    ):
        raise invalid(method, "expected", "contains an invalid status or heartbeat") from None
    if owner is not None:
        admit_owner(method, "expected.owner", owner)
    if (status == "running") != (owner is not None) or (status == "running") != (
        heartbeat is not None
    ):
        raise invalid(method, "expected", "violates ownership invariants") from None
    return value


def admit_evidence(method: str, value: object) -> LivenessEvidence:
    if type(value) is not LivenessEvidence:
        raise invalid(method, "evidence", "must be a LivenessEvidence") from None
    admit_owner(method, "evidence.expected_owner", value.expected_owner)
    admit_timestamp(method, "evidence.checked_at_ms", value.checked_at_ms)
    kind: object = value.kind
    if type(kind) is not str or kind not in EVIDENCE_KINDS:
        raise invalid(method, "evidence.kind") from None
    return value


def admit_guard(method: str, value: object) -> TransitionGuard | None:
    if value is None:
        return None
    if type(value) is not TransitionGuard:
        raise invalid(method, "guard", "must be a TransitionGuard") from None
    requirement: object = value.cancel_requested
    if requirement is not None and (
        type(requirement) is not str or requirement not in ("absent", "present")
    ):
        raise invalid(method, "guard.cancel_requested") from None
    return value


def admit_state(method: str, value: object, **context: object) -> str:
    complaint = json_text_complaint(value)
    if complaint is not None:
        cause = state_cause(value, **context)
        cause["detail"] = complaint
        raise InvalidRunError(method, cause) from None
    return value  # type: ignore[return-value]


def admit_to_status(method: str, value: object) -> RunStatus:
    if type(value) is not str or value not in RUN_STATUSES or value == "pending":
        raise invalid(method, "to_status", "must be a run status other than pending") from None
    return value  # type: ignore[return-value]


# --- per-operation admission (each in the operation's documented order) ------


def admit_create(
    run_id: object,
    state_json: object,
    parent_run_id: object,
    lineage_id: object,
    round_ordinal: object,
) -> tuple[str, str, str | None, str | None, int | None]:
    method = "create"
    rid = admit_identifier(method, "run_id", run_id)
    if rid.startswith(COMPANION_PREFIX):
        raise invalid(method, "run_id", "names a reserved companion fact stream") from None
    if (
        (parent_run_id is not None and not is_identifier(parent_run_id))
        or (lineage_id is not None and not is_identifier(lineage_id))
        or (round_ordinal is not None and not is_timestamp(round_ordinal))
        or ((lineage_id is None) != (round_ordinal is None))
    ):
        raise invalid(method, "options", "contains invalid ancestry or lineage") from None
    state = admit_state(method, state_json, run_id=rid)
    return rid, state, parent_run_id, lineage_id, round_ordinal  # type: ignore[return-value]


def admit_run_id(method: str, run_id: object) -> str:
    """For ``get``, ``lineage``, ``latest_round`` and ``ownership_facts``."""
    return admit_identifier(method, "run_id", run_id)


def admit_request_cancel(method: str, run_id: object, now_ms: object) -> tuple[str, int]:
    """For ``request_cancel`` and ``request_cancel_lineage`` (no skew bound)."""
    return admit_identifier(method, "run_id", run_id), admit_timestamp(method, "now_ms", now_ms)


def admit_acknowledge_cancel(
    run_id: object, owner: object, now_ms: object
) -> tuple[str, OwnerId, int]:
    method = "acknowledge_cancel"
    return (
        admit_identifier(method, "run_id", run_id),
        admit_owner(method, "owner", owner),
        admit_timestamp(method, "now_ms", now_ms),
    )


def admit_claim(
    run_id: object, expected: object, claimant: object, now_ms: object, clock: Clock
) -> tuple[str, RunSnapshot, OwnerId, int]:
    method = "claim"
    rid = admit_identifier(method, "run_id", run_id)
    snapshot = admit_snapshot(method, expected)
    who = admit_owner(method, "claimant", claimant)
    return rid, snapshot, who, admit_lease_reading(method, now_ms, clock, run_id=rid)


def admit_claim_and_own(
    run_id: object,
    expected: object,
    owner: object,
    now_ms: object,
    evidence: object,
    clock: Clock,
) -> tuple[str, RunSnapshot, OwnerId, int, LivenessEvidence | None]:
    method = "claim_and_own"
    rid = admit_identifier(method, "run_id", run_id)
    snapshot = admit_snapshot(method, expected)
    who = admit_owner(method, "owner", owner)
    now = admit_lease_reading(method, now_ms, clock, run_id=rid)
    proof = None if evidence is None else admit_evidence(method, evidence)
    return rid, snapshot, who, now, proof


def admit_activate(
    run_id: object, claimant: object, claimed_at_ms: object, expected: object
) -> tuple[str, OwnerId, int, RunSnapshot]:
    method = "activate"
    return (
        admit_identifier(method, "run_id", run_id),
        admit_owner(method, "claimant", claimant),
        admit_timestamp(method, "claimed_at_ms", claimed_at_ms),
        admit_snapshot(method, expected),
    )


def admit_abandon_claim(
    run_id: object, claimant: object, claimed_at_ms: object
) -> tuple[str, OwnerId, int]:
    method = "abandon_claim"
    return (
        admit_identifier(method, "run_id", run_id),
        admit_owner(method, "claimant", claimant),
        admit_timestamp(method, "claimed_at_ms", claimed_at_ms),
    )


def admit_recover_claim(
    run_id: object,
    stale_claimant: object,
    claimed_at_ms: object,
    observer: object,
    now_ms: object,
    evidence: object,
    clock: Clock,
) -> tuple[str, OwnerId, int, OwnerId, int, LivenessEvidence]:
    method = "recover_claim"
    rid = admit_identifier(method, "run_id", run_id)
    stale = admit_owner(method, "stale_claimant", stale_claimant)
    token = admit_timestamp(method, "claimed_at_ms", claimed_at_ms)
    who = admit_owner(method, "observer", observer)
    now = admit_lease_reading(method, now_ms, clock, run_id=rid, claimed_at_ms=token)
    return rid, stale, token, who, now, admit_evidence(method, evidence)


def admit_renewal(
    method: str, run_id: object, owner: object, now_ms: object, clock: Clock
) -> tuple[str, OwnerId, int]:
    """For ``heartbeat`` and ``reconfirm``."""
    rid = admit_identifier(method, "run_id", run_id)
    who = admit_owner(method, "owner", owner)
    return rid, who, admit_lease_reading(method, now_ms, clock, run_id=rid)


def admit_transition_owned(
    run_id: object, owner: object, to_status: object, state_json: object, guard: object
) -> tuple[str, OwnerId, RunStatus, str | None, TransitionGuard | None]:
    method = "transition_owned"
    rid = admit_identifier(method, "run_id", run_id)
    who = admit_owner(method, "owner", owner)
    status = admit_to_status(method, to_status)
    state = None if state_json is None else admit_state(method, state_json, run_id=rid)
    return rid, who, status, state, admit_guard(method, guard)


def admit_steal(
    run_id: object,
    expected: object,
    claimant: object,
    now_ms: object,
    evidence: object,
    clock: Clock,
) -> tuple[str, RunSnapshot, OwnerId, int, LivenessEvidence]:
    method = "steal"
    rid = admit_identifier(method, "run_id", run_id)
    snapshot = admit_snapshot(method, expected)
    who = admit_owner(method, "claimant", claimant)
    now = admit_lease_reading(method, now_ms, clock, run_id=rid)
    return rid, snapshot, who, now, admit_evidence(method, evidence)


def admit_changes(after_revision: object) -> int:
    return admit_timestamp("changes", "after_revision", after_revision)


# --- wave 2: finding work, batch renewal, purging ------------------------------

#: ``claim_next``'s statuses when the caller names none.
CLAIMABLE_STATUSES: Final = ("pending", "suspended")

_CURSOR_PREFIX: Final = "rs1."


def encode_cursor(created_at_ms: int, run_id: str) -> str:
    """The opaque ``list_runs`` cursor for a listing key.

    Pages are ordered by ``(created_at_ms, run_id)`` (ids by code point), a key
    no write changes, so a cursor names a place in the order, not a run.
    """
    text = json.dumps([created_at_ms, run_id], ensure_ascii=True, separators=(",", ":"))
    return _CURSOR_PREFIX + base64.urlsafe_b64encode(text.encode("ascii")).decode("ascii")


def decode_cursor(method: str, value: object) -> tuple[int, str] | None:
    """The listing key of an ``after`` cursor (``None``: from the start)."""
    if value is None:
        return None
    bad = invalid(method, "after", "must be a cursor from a previous page's next")
    if type(value) is not str or not value.startswith(_CURSOR_PREFIX):
        raise bad from None
    try:
        raw = base64.urlsafe_b64decode(value[len(_CURSOR_PREFIX) :].encode("ascii"))
        key = json.loads(raw.decode("ascii"))
    except (ValueError, UnicodeError, binascii.Error):
        raise bad from None
    if (
        type(key) is not list
        or len(key) != 2
        or not is_timestamp(key[0])
        or not is_identifier(key[1])
        or encode_cursor(key[0], key[1]) != value
    ):
        raise bad from None
    return key[0], key[1]


def _statuses(method: str, value: object, allowed: frozenset[str]) -> tuple[str, ...]:
    """One status or a non-empty collection of them, as a sorted tuple."""
    choices = ", ".join(sorted(allowed))
    if type(value) is str:
        items: tuple[object, ...] = (value,)
    elif isinstance(value, (tuple, list, set, frozenset)) and type(value) in (
        tuple,
        list,
        set,
        frozenset,
    ):
        items = tuple(value)
        if not items:
            raise invalid(method, "status", "must name at least one status") from None
    else:
        raise invalid(method, "status", f"must be a status or a collection of ({choices})")
    for item in items:
        if type(item) is not str or item not in allowed:
            raise invalid(method, "status", f"must name only statuses among ({choices})") from None
    return tuple(sorted(set(items)))  # type: ignore[arg-type]


def _bound(method: str, field: str, value: object, maximum: int) -> int:
    if type(value) is not int or not 1 <= value <= maximum:
        raise invalid(method, field, f"must be an int from 1 to {maximum}") from None
    return value


def _optional_time(method: str, field: str, value: object) -> int | None:
    return None if value is None else admit_timestamp(method, field, value)


def _optional_flag(method: str, field: str, value: object) -> bool | None:
    if value is not None and type(value) is not bool:
        raise invalid(method, field, "must be True, False or None") from None
    return value


@attrs.frozen
class ListQuery:
    """The admitted filters of one ``list_runs`` call (each None: no filter)."""

    statuses: tuple[str, ...] | None
    claimable_at: int | None
    stale_at: int | None
    claim_stale_at: int | None
    cancel_requested: bool | None
    lineage_id: str | None
    parent_run_id: str | None
    limit: int
    after: tuple[int, str] | None
    with_state: bool


def admit_list_runs(
    status: object,
    claimable_at: object,
    stale_at: object,
    claim_stale_at: object,
    cancel_requested: object,
    lineage_id: object,
    parent_run_id: object,
    limit: object,
    after: object,
    with_state: object,
) -> ListQuery:
    """``list_runs``'s keywords, in signature order. The ``*_at`` readings are
    plain timestamps (a listing judges nothing, so no skew bound)."""
    method = "list_runs"
    statuses = None if status is None else _statuses(method, status, RUN_STATUSES)
    claimable = _optional_time(method, "claimable_at", claimable_at)
    stale = _optional_time(method, "stale_at", stale_at)
    claim_stale = _optional_time(method, "claim_stale_at", claim_stale_at)
    cancel = _optional_flag(method, "cancel_requested", cancel_requested)
    lineage = None if lineage_id is None else admit_identifier(method, "lineage_id", lineage_id)
    parent = (
        None if parent_run_id is None else admit_identifier(method, "parent_run_id", parent_run_id)
    )
    size = _bound(method, "limit", limit, MAXIMUM_PAGE_SIZE)
    key = decode_cursor(method, after)
    if type(with_state) is not bool:
        raise invalid(method, "with_state", "must be True or False") from None
    return ListQuery(
        statuses, claimable, stale, claim_stale, cancel, lineage, parent, size, key, with_state
    )


def admit_claim_next(
    owner: object, now_ms: object, status: object, clock: Clock
) -> tuple[OwnerId, int, tuple[str, ...]]:
    """``claim_next(owner, now_ms, *, status)``: the owner, the lease reading
    (skew bound), then the statuses to take from (``pending``/``suspended``)."""
    method = "claim_next"
    who = admit_owner(method, "owner", owner)
    now = admit_lease_reading(method, now_ms, clock, run_id=None)
    return who, now, claim_statuses(method, status)


def admit_claim_next_many(
    owner: object, now_ms: object, limit: object, status: object, clock: Clock
) -> tuple[OwnerId, int, int, tuple[str, ...]]:
    """``claim_next_many(owner, now_ms, limit, *, status)``: the owner, the
    lease reading (skew bound), the limit (an int from 1 to
    ``MAXIMUM_CLAIM_BATCH``), then the statuses to take from."""
    method = "claim_next_many"
    who = admit_owner(method, "owner", owner)
    now = admit_lease_reading(method, now_ms, clock, run_id=None)
    size = _bound(method, "limit", limit, MAXIMUM_CLAIM_BATCH)
    return who, now, size, claim_statuses(method, status)


_CLAIMABLE_SET: Final = frozenset(CLAIMABLE_STATUSES)


def claim_statuses(method: str, status: object) -> tuple[str, ...]:
    """The statuses ``claim_next`` may take runs from: ``pending`` and/or ``suspended``."""
    if status is CLAIMABLE_STATUSES:  # the default, already sorted and admitted
        return CLAIMABLE_STATUSES
    return _statuses(method, status, _CLAIMABLE_SET)


def admit_heartbeat_many(
    owner: object, run_ids: object, now_ms: object, clock: Clock
) -> tuple[OwnerId, tuple[str, ...], int]:
    """``heartbeat_many(owner, run_ids, now_ms)``: the owner, the ids (a list
    or tuple of distinct identifiers), then the lease reading (skew bound).
    One bad or repeated id refuses the whole call."""
    method = "heartbeat_many"
    who = admit_owner(method, "owner", owner)
    if type(run_ids) is not list and type(run_ids) is not tuple:
        raise invalid(method, "run_ids", "must be a list or tuple of run ids") from None
    ids: tuple[object, ...] = tuple(run_ids)
    if len(ids) > MAXIMUM_HEARTBEAT_BATCH:
        raise invalid(
            method, "run_ids", f"must hold at most {MAXIMUM_HEARTBEAT_BATCH} run ids"
        ) from None
    for index, rid in enumerate(ids):
        if not is_identifier(rid):
            raise InvalidRunError(
                method,
                {
                    "field": "run_ids",
                    "index": index,
                    "detail": "must hold well-formed durable text",
                },
            ) from None
    if len(set(ids)) != len(ids):
        raise invalid(method, "run_ids", "must not name a run twice") from None
    now = admit_lease_reading(method, now_ms, clock, run_id=None)
    return who, ids, now  # type: ignore[return-value]


def admit_purge_settled(
    before_ms: object, limit: object, method: str = "purge_settled"
) -> tuple[int, int]:
    """``purge_settled(before_ms, *, limit)``, and ``purge_candidates``, which
    takes the same arguments (``method`` names the one called)."""
    return (
        admit_timestamp(method, "before_ms", before_ms),
        _bound(method, "limit", limit, MAXIMUM_PURGE_BATCH),
    )


def admit_compact_changes(through_revision: object, limit: object) -> tuple[int, int]:
    """``compact_changes(through_revision, *, limit)``."""
    method = "compact_changes"
    return (
        admit_timestamp(method, "through_revision", through_revision),
        _bound(method, "limit", limit, MAXIMUM_PURGE_BATCH),
    )
