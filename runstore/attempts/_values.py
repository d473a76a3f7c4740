"""Attempt values: identities, records, finish and patch requests, options.

Each class is a frozen attrs class that compares by value and works in
``match`` statements. Building one validates nothing; every operation admits
its own arguments (``runstore.attempts._boundary``).

JSON fields (``checkpoint``, ``error``, ``outcome``, ``meta``) hold plain
Python JSON values: ``dict`` with ``str`` keys, ``list``, ``str``, ``int``,
``float``, ``bool`` and ``None``. Two things need care:

- **Absent is not null.** ``None`` is JSON ``null``, a value like any other.
  A field that was not given holds the sentinel ``ABSENT`` (the only member
  of ``Absent``), which is stored as SQL ``NULL`` and read back as ``ABSENT``.
- **Equality is strict.** Python says ``True == 1 == 1.0``; the stores do not.
  Two JSON values are equal when they have the same type at every node, the
  same list order and the same members (object key order is ignored). The
  records compare their JSON fields that way, so ``==`` on two ``Attempt``
  values is exactly the "same attempt" test ``put`` answers ``ExistingSame``
  with.

The JSON fields are left out of every repr (shown as ``<json>`` or
``<absent>``), because attempt values are executable data and may hold
credentials.
"""

from __future__ import annotations

import enum
from typing import Final, Literal, TypeAlias

import attrs

JsonValue: TypeAlias = "dict[str, JsonValue] | list[JsonValue] | str | int | float | bool | None"

PutMode: TypeAlias = Literal["insert", "upsert"]
PUT_MODES: frozenset[str] = frozenset({"insert", "upsert"})


class Absent(enum.Enum):
    """The type of ``ABSENT``: a JSON field that was not given.

    An enum with one member, so type checkers narrow ``x is ABSENT``.
    """

    ABSENT = "absent"

    def __repr__(self) -> str:
        return "ABSENT"


#: A JSON field that was not given (as opposed to JSON ``null``, which is ``None``).
ABSENT: Final = Absent.ABSENT


def strict_json_key(value: object) -> object:
    """A hashable key that is equal for two values exactly when they are the
    same JSON value with types kept strict.

    ``True``, ``1`` and ``1.0`` get different keys; object members are compared
    as a set (key order ignored); array order is kept. ``ABSENT`` has its own
    key. A value that is not JSON at all compares by identity.
    """
    kind = type(value)
    if value is None:
        return ("null",)
    if kind is bool:
        return ("bool", value)
    if kind is int:
        return ("int", value)
    if kind is float:
        return ("float", value)
    if kind is str:
        return ("str", value)
    if kind is list:
        return ("list", tuple(strict_json_key(item) for item in value))  # type: ignore[attr-defined]
    if kind is dict:
        return (
            "dict",
            frozenset(
                (("str", key) if type(key) is str else strict_json_key(key), strict_json_key(item))
                for key, item in value.items()  # type: ignore[attr-defined]
            ),
        )
    if value is ABSENT:
        return ("absent",)
    # Not JSON: never equal to anything but itself, and never shown.
    return ("object", id(value))


def strict_json_equal(left: object, right: object) -> bool:
    """Whether two values are the same JSON value with types kept strict."""
    return strict_json_key(left) == strict_json_key(right)


def _json_repr(value: object) -> str:
    return "<absent>" if value is ABSENT else "<json>"


@attrs.frozen
class AttemptId:
    """One attempt of one step of one run.

    ``step_key_digest`` is the caller's stable name for the step; ``attempt``
    numbers its tries (any non-negative safe integer; gaps are allowed).
    """

    run_id: str
    step_key_digest: str
    attempt: int


@attrs.frozen
class Attempt:
    """An attempt record, as ``put`` takes it and ``get`` returns it.

    ``state`` is the caller's vocabulary (``"running"``, ``"succeeded"``, ...);
    the store only knows which states are "in progress" (its options). The
    timestamps are the caller's readings and are never compared with each
    other. ``meta`` is required; the other JSON fields may be ``ABSENT``.
    """

    run_id: str
    step_key_digest: str
    attempt: int
    state: str
    started_at_ms: int
    finished_at_ms: int | None = attrs.field(default=None, kw_only=True)
    heartbeat_at_ms: int | None = attrs.field(default=None, kw_only=True)
    checkpoint: JsonValue | Absent = attrs.field(
        default=ABSENT, eq=strict_json_key, repr=_json_repr, kw_only=True
    )
    error: JsonValue | Absent = attrs.field(
        default=ABSENT, eq=strict_json_key, repr=_json_repr, kw_only=True
    )
    outcome: JsonValue | Absent = attrs.field(
        default=ABSENT, eq=strict_json_key, repr=_json_repr, kw_only=True
    )
    meta: JsonValue | Absent = attrs.field(kw_only=True, eq=strict_json_key, repr=_json_repr)

    @property
    def id(self) -> AttemptId:
        """The attempt's identity."""
        return AttemptId(self.run_id, self.step_key_digest, self.attempt)


@attrs.frozen
class FinishAttempt:
    """A request to settle an in-progress attempt.

    ``state`` must not be one of the store's in-progress states. ``error``,
    ``outcome`` and ``meta`` replace the stored values only when given.
    """

    run_id: str
    step_key_digest: str
    attempt: int
    state: str
    finished_at_ms: int
    error: JsonValue | Absent = attrs.field(
        default=ABSENT, eq=strict_json_key, repr=_json_repr, kw_only=True
    )
    outcome: JsonValue | Absent = attrs.field(
        default=ABSENT, eq=strict_json_key, repr=_json_repr, kw_only=True
    )
    meta: JsonValue | Absent = attrs.field(
        default=ABSENT, eq=strict_json_key, repr=_json_repr, kw_only=True
    )

    @property
    def id(self) -> AttemptId:
        """The attempt's identity."""
        return AttemptId(self.run_id, self.step_key_digest, self.attempt)


@attrs.frozen
class AttemptPatch:
    """Fields to replace on an attempt; each ``ABSENT`` field keeps its value.

    An empty patch changes nothing but still proves the caller holds the fence.
    """

    checkpoint: JsonValue | Absent = attrs.field(
        default=ABSENT, eq=strict_json_key, repr=_json_repr, kw_only=True
    )
    error: JsonValue | Absent = attrs.field(
        default=ABSENT, eq=strict_json_key, repr=_json_repr, kw_only=True
    )
    outcome: JsonValue | Absent = attrs.field(
        default=ABSENT, eq=strict_json_key, repr=_json_repr, kw_only=True
    )
    meta: JsonValue | Absent = attrs.field(
        default=ABSENT, eq=strict_json_key, repr=_json_repr, kw_only=True
    )


@attrs.frozen
class AttemptOptions:
    """An attempt store's admitted options (see ``AttemptStore``)."""

    in_progress_states: tuple[str, ...]
    max_checkpoint_bytes: int
    put_mode: PutMode
