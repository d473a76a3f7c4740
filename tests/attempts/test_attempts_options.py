"""Attempt-store options: checked when the store is built, on both stores."""

from __future__ import annotations

from typing import Any

import pytest

from runstore.attempts import (
    DEFAULT_MAX_CHECKPOINT_BYTES,
    MAXIMUM_CHECKPOINT_BYTES,
    MAXIMUM_IN_PROGRESS_STATES,
    AttemptOptions,
    AttemptStore,
    AttemptStoreError,
)

from .test_attempts_pairs import Env, env

__all__ = ["env"]


def test_defaults(env: Env) -> None:
    """By default: ("running",), 1 MiB, insert."""
    assert env.attempts.options == AttemptOptions(("running",), 1 << 20, "insert")
    assert DEFAULT_MAX_CHECKPOINT_BYTES == 1 << 20
    assert MAXIMUM_CHECKPOINT_BYTES == 16 << 20
    assert MAXIMUM_IN_PROGRESS_STATES == 256


@pytest.mark.parametrize(
    "options",
    [
        {"in_progress_states": ["queued", "running"]},
        {"in_progress_states": tuple(f"s{i}" for i in range(256))},
        {"in_progress_states": ("\U0001f600",)},
        {"max_checkpoint_bytes": 1},
        {"max_checkpoint_bytes": 16 * 1024 * 1024},
        {"put_mode": "upsert"},
    ],
    ids=["list", "256-states", "astral", "1-byte", "16-mib", "upsert"],
)
def test_valid_options_are_accepted(env: Env, options: dict[str, Any]) -> None:
    """Boundary values of every option build a store."""
    store = env.attempt_store(**options)
    for name, value in options.items():
        expected = tuple(value) if name == "in_progress_states" else value
        assert getattr(store.options, name) == expected


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"in_progress_states": ()}, "in_progress_states"),
        ({"in_progress_states": []}, "in_progress_states"),
        ({"in_progress_states": "running"}, "in_progress_states"),
        ({"in_progress_states": frozenset({"running"})}, "in_progress_states"),
        ({"in_progress_states": ("running", "running")}, "in_progress_states"),
        ({"in_progress_states": tuple(f"s{i}" for i in range(257))}, "in_progress_states"),
        ({"in_progress_states": ("",)}, "in_progress_states"),
        ({"in_progress_states": ("a\x00b",)}, "in_progress_states"),
        ({"in_progress_states": ("\ud800",)}, "in_progress_states"),
        ({"in_progress_states": ("x" * 1025,)}, "in_progress_states"),
        ({"in_progress_states": (1,)}, "in_progress_states"),
        ({"max_checkpoint_bytes": 0}, "max_checkpoint_bytes"),
        ({"max_checkpoint_bytes": -1}, "max_checkpoint_bytes"),
        ({"max_checkpoint_bytes": 16 * 1024 * 1024 + 1}, "max_checkpoint_bytes"),
        ({"max_checkpoint_bytes": 1024.0}, "max_checkpoint_bytes"),
        ({"max_checkpoint_bytes": True}, "max_checkpoint_bytes"),
        ({"max_checkpoint_bytes": "1024"}, "max_checkpoint_bytes"),
        ({"put_mode": "replace"}, "put_mode"),
        ({"put_mode": "INSERT"}, "put_mode"),
        ({"put_mode": None}, "put_mode"),
    ],
)
def test_invalid_options_are_refused_when_built(
    env: Env, options: dict[str, Any], field: str
) -> None:
    """A bad option fails at construction with invalid_attempt naming it, not later."""
    with pytest.raises(AttemptStoreError) as caught:
        env.attempt_store(**options)
    error = caught.value
    assert error.code == "invalid_attempt"
    assert error.method == "options"
    assert error.cause["field"] == field
    assert error.__cause__ is None
    assert error.__suppress_context__


def test_unknown_options_are_refused(env: Env) -> None:
    """Options are keyword-only and closed: an unknown name is a TypeError."""
    with pytest.raises(TypeError):
        env.attempt_store(max_checkpoint=1)
    with pytest.raises(TypeError):
        env.attempt_store(("running",))


def test_the_sqlite_store_needs_a_sqlite_run_store() -> None:
    """AttemptStore refuses anything but an open SqliteRunStore."""
    with pytest.raises(AttemptStoreError) as caught:
        AttemptStore(object())  # type: ignore[arg-type]
    assert caught.value.code == "invalid_attempt"
    assert caught.value.cause["field"] == "store"
