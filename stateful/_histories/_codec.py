"""JSON for recorded histories: the store's values, outcomes and arguments, exactly.

``encode`` turns what a store operation takes and answers into JSON-ready data
and ``decode`` turns it back into equal Python values, so a history written by
one process and read by another compares with ``==`` as if nothing had been
written. Every frozen attrs class that ``runstore`` exports (identities, rows,
snapshots, evidence, facts, leases, every outcome, and whatever later versions
export) is written as an object tagged with its class name; tuples and dicts
are tagged too, so nothing changes type on the way back. A value of any other
type (a caller passing something no store admits) is written as a placeholder
naming its type; it decodes to an ``Unencodable``, which every store refuses
with ``invalid_run`` just as it refused the original.

Decoding trusts nothing: an unknown tag raises ``ValueError``.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import attrs

import runstore

_CLASS = "$"
_TUPLE = "$tuple"
_DICT = "$dict"
_OTHER = "$unencodable"


@attrs.frozen
class Unencodable:
    """Stands for an argument of a type no history can hold (its type is named)."""

    type_name: str


@cache
def value_classes() -> dict[str, type]:
    """The attrs classes a history may carry, by class name."""
    found: dict[str, type] = {"Unencodable": Unencodable}
    for name in dir(runstore):
        value = getattr(runstore, name)
        if isinstance(value, type) and attrs.has(value):
            found[value.__name__] = value
    return found


def encode(value: Any) -> Any:
    """JSON-ready data for ``value`` (see the module docstring)."""
    if value is None or type(value) in (bool, int, float, str):
        return value
    if type(value) is list:
        return [encode(item) for item in value]
    if type(value) is tuple:
        return {_TUPLE: [encode(item) for item in value]}
    if type(value) is dict:
        return {_DICT: [[encode(k), encode(v)] for k, v in value.items()]}
    cls = type(value)
    if attrs.has(cls) and value_classes().get(cls.__name__) is cls:
        data: dict[str, Any] = {_CLASS: cls.__name__}
        for field in attrs.fields(cls):
            data[field.name] = encode(getattr(value, field.name))
        return data
    return {_OTHER: f"{cls.__module__}.{cls.__qualname__}"}


def decode(data: Any) -> Any:
    """The value ``encode`` was given (``ValueError`` on data it never writes)."""
    if data is None or type(data) in (bool, int, float, str):
        return data
    if type(data) is list:
        return [decode(item) for item in data]
    if type(data) is not dict:
        raise ValueError(f"not history data: {type(data).__name__}")
    if _TUPLE in data:
        return tuple(decode(item) for item in data[_TUPLE])
    if _DICT in data:
        return {decode(k): decode(v) for k, v in data[_DICT]}
    if _OTHER in data:
        return Unencodable(str(data[_OTHER]))
    name = data.get(_CLASS)
    cls = value_classes().get(name) if type(name) is str else None
    if cls is None:
        raise ValueError(f"unknown value class in a history: {name!r}")
    fields = {key: decode(item) for key, item in data.items() if key != _CLASS}
    return cls(**fields)
