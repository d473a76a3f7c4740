"""Differential comparison: views of a store, and the mismatch failures.

``OutcomeMismatch`` and ``StateMismatch`` are raised when the store under test
and the reference disagree about one step's answer or about the whole state
after it. ``public_state`` builds a comparable ``StoreState`` from public
reads alone, for stores without ``state()``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import attrs

from runstore._errors import RunStoreError
from runstore._values import Lease, StoreState


class DifferentialMismatch(AssertionError):
    """The store under test and the reference model disagree."""


class OutcomeMismatch(DifferentialMismatch):
    """One operation answered differently on the two sides."""


class StateMismatch(DifferentialMismatch):
    """After a step the two sides hold different states."""


class LeaseMismatch(DifferentialMismatch):
    """A strategy's leases differ from the reference strategy's."""


class RollbackLeak(DifferentialMismatch):
    """A strategy kept a change made inside a transaction that rolled back."""


def public_state(store: Any, run_ids: Iterable[str]) -> StoreState:
    """A ``StoreState`` read through public operations only (no leases, no
    acknowledgements). Runs whose ``get`` raises are left out."""
    rows = []
    facts = []
    for run_id in run_ids:
        try:
            row = store.get(run_id)
        except RunStoreError:
            continue
        rows.append(row)
        facts.extend(store.ownership_facts(run_id))
    return StoreState(
        rows=tuple(rows),
        leases=(),
        facts=tuple(facts),
        revision=store.revision(),
        changes=tuple(store.changes(0)),
    )


def describe_difference(expected: StoreState, actual: StoreState) -> str:
    """Which parts of two states differ, element by element (a short summary)."""
    lines: list[str] = []
    for field in attrs.fields(StoreState):
        left, right = getattr(expected, field.name), getattr(actual, field.name)
        if left == right:
            continue
        if isinstance(left, tuple) and isinstance(right, tuple):
            keyed_left = {_key(x): x for x in left}
            keyed_right = {_key(x): x for x in right}
            for key in sorted(set(keyed_left) | set(keyed_right), key=repr):
                a, b = keyed_left.get(key), keyed_right.get(key)
                if a != b:
                    lines.append(f"{field.name}[{key}]: reference {a!r} / store {b!r}")
        else:
            lines.append(f"{field.name}: reference {left!r} / store {right!r}")
    return "\n".join(lines[:20])


def _key(value: object) -> object:
    run_id = getattr(value, "run_id", None)
    position = getattr(value, "position", None)
    if position is not None:
        return (run_id, position)
    return run_id if run_id is not None else repr(value)


def without_leases(state: StoreState) -> StoreState:
    return attrs.evolve(state, leases=())


def with_leases(state: StoreState, leases: Iterable[Lease]) -> StoreState:
    return attrs.evolve(state, leases=tuple(sorted(leases, key=lambda lease: lease.run_id)))
