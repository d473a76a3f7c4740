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
"""A plain JSON value as Python holds it: ``dict`` (string keys), ``list``, ``str``, ``int``,
``float`` (finite), ``bool`` or ``None``."""

PutMode: TypeAlias = Literal["insert", "upsert"]
"""What ``put`` does with an attempt that already exists: ``"insert"`` compares it (``ExistingSame``
or ``Conflict``), ``"upsert"`` replaces it while it is in progress."""
PUT_MODES: frozenset[str] = frozenset({"insert", "upsert"})


class Absent(enum.Enum):
    """The type of ``ABSENT``: a JSON field that was not given.

    An enum with one member, so type checkers narrow ``x is ABSENT``.
    """

    ABSENT = "absent"
    """The one member, exported as ``runstore.attempts.ABSENT``."""

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Final = Absent.ABSENT
"""A JSON field that was not given (as opposed to JSON ``null``, which is ``None``)."""


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
    """Whether ``left`` and ``right`` are the same JSON value with types kept
    strict: ``True``, ``1`` and ``1.0`` all differ, object key order does not
    matter, array order does. Two ``ABSENT`` are equal; a value that is not
    JSON equals only itself."""
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
    """The run the attempt belongs to."""
    step_key_digest: str
    """The caller's stable name for the step (an identifier: 1 to 1024 UTF-16 code units)."""
    attempt: int
    """The try's number: a non-negative safe integer; gaps are allowed."""


@attrs.frozen
class Attempt:
    """An attempt record, as ``put`` takes it and ``get`` returns it.

    ``state`` is the caller's vocabulary (``"running"``, ``"succeeded"``, ...);
    the store only knows which states are "in progress" (its options). The
    timestamps are the caller's readings and are never compared with each
    other. ``meta`` is required; the other JSON fields may be ``ABSENT``.
    """

    run_id: str
    """The run the attempt belongs to; it must exist and be owned by the writer."""
    step_key_digest: str
    """The caller's stable name for the step."""
    attempt: int
    """The try's number."""
    state: str
    """The caller's name for the attempt's state; the store's ``in_progress_states`` say which are
    in progress."""
    started_at_ms: int
    """When the attempt started, by the caller's clock."""
    finished_at_ms: int | None = attrs.field(default=None, kw_only=True)
    """When it finished, by the caller's clock, or ``None``."""
    heartbeat_at_ms: int | None = attrs.field(default=None, kw_only=True)
    """Its last heartbeat, by the caller's clock, or ``None``; ``heartbeat`` only moves it forward.
    """
    checkpoint: JsonValue | Absent = attrs.field(
        default=ABSENT, eq=strict_json_key, repr=_json_repr, kw_only=True
    )
    """Where to resume from: any JSON value within the store's checkpoint cap, or ``ABSENT``."""
    error: JsonValue | Absent = attrs.field(
        default=ABSENT, eq=strict_json_key, repr=_json_repr, kw_only=True
    )
    """The error the attempt ended with, as JSON, or ``ABSENT``."""
    outcome: JsonValue | Absent = attrs.field(
        default=ABSENT, eq=strict_json_key, repr=_json_repr, kw_only=True
    )
    """The attempt's result, as JSON, or ``ABSENT``."""
    meta: JsonValue | Absent = attrs.field(kw_only=True, eq=strict_json_key, repr=_json_repr)
    """The caller's metadata, as JSON; required (use ``{}`` for none)."""

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
    """The run of the attempt to settle."""
    step_key_digest: str
    """The step of the attempt to settle."""
    attempt: int
    """The number of the attempt to settle."""
    state: str
    """The settled state to write: not one of the store's in-progress states."""
    finished_at_ms: int
    """When it finished, by the caller's clock."""
    error: JsonValue | Absent = attrs.field(
        default=ABSENT, eq=strict_json_key, repr=_json_repr, kw_only=True
    )
    """The error to store, or ``ABSENT`` to keep the stored one."""
    outcome: JsonValue | Absent = attrs.field(
        default=ABSENT, eq=strict_json_key, repr=_json_repr, kw_only=True
    )
    """The result to store, or ``ABSENT`` to keep the stored one."""
    meta: JsonValue | Absent = attrs.field(
        default=ABSENT, eq=strict_json_key, repr=_json_repr, kw_only=True
    )
    """The metadata to store, or ``ABSENT`` to keep the stored one."""

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
    """The checkpoint to store, or ``ABSENT`` to keep the stored one."""
    error: JsonValue | Absent = attrs.field(
        default=ABSENT, eq=strict_json_key, repr=_json_repr, kw_only=True
    )
    """The error to store, or ``ABSENT`` to keep the stored one."""
    outcome: JsonValue | Absent = attrs.field(
        default=ABSENT, eq=strict_json_key, repr=_json_repr, kw_only=True
    )
    """The result to store, or ``ABSENT`` to keep the stored one."""
    meta: JsonValue | Absent = attrs.field(
        default=ABSENT, eq=strict_json_key, repr=_json_repr, kw_only=True
    )
    """The metadata to store, or ``ABSENT`` to keep the stored one."""


@attrs.frozen
class AttemptOptions:
    """An attempt store's admitted options (see ``AttemptStore``)."""

    in_progress_states: tuple[str, ...]
    """The states ``heartbeat`` and ``finish`` act on and an upsert may replace."""
    max_checkpoint_bytes: int
    """The checkpoint cap, in UTF-8 bytes of the stored encoding."""
    put_mode: PutMode
    """``"insert"`` or ``"upsert"``: what ``put`` does with an attempt that exists."""
