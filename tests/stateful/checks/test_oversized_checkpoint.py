"""The attempt machine's oversized-checkpoint check (``runstore.stateful._checks._oversize``):
a stored checkpoint past every store's cap, written behind the store's back,
must be refused when read. The check passes on the shipped attempt store and
catches one that decodes stored checkpoints without the cap (``PLANTED``,
which ``benchmarks/zoo_detection.py`` also times)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis.stateful import run_state_machine_as_test

import runstore
from runstore import ManualClock, OwnerId
from runstore.attempts import Attempt, AttemptStore
from runstore.attempts import _store as attempt_store_module
from runstore.attempts._boundary import stored_json_complaint
from runstore.stateful import CorruptRowAccepted, attempt_comparison_for
from runstore.stateful._campaigns._budget import default_settings
from runstore.stateful._checks._oversize import judge_oversized_checkpoint
from runstore.stateful._targets._builtin import BUILTIN_TARGETS


def _open(clock: ManualClock, path: Path) -> Any:
    return runstore.open(path, clock=clock)


def _one_attempt(path: Path) -> Attempt:
    clock = ManualClock(1_000)
    store = _open(clock, path)
    try:
        store.create("r1", "{}")
        owner = OwnerId("host", 1, "nonce")
        store.claim_and_own("r1", store.get("r1"), owner, 1_000)
        record = Attempt("r1", "step", 1, "running", 10, meta={})
        AttemptStore(store).put(record, owner)
    finally:
        store.close()
    return record


def _without_cap(text: object, *, cap: int | None = None) -> tuple[object, str | None]:
    return stored_json_complaint(text)  # the bug: the stored checkpoint's cap is not applied


def test_the_shipped_attempt_store_refuses_it(tmp_path: Path) -> None:
    record = _one_attempt(tmp_path / "runs.db")
    judge_oversized_checkpoint(_open, AttemptStore, tmp_path / "runs.db", 1_000, record.id)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs.db"]


def test_a_decode_without_the_cap_is_caught(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = _one_attempt(tmp_path / "runs.db")
    monkeypatch.setattr(attempt_store_module, "stored_json_complaint", _without_cap)
    with pytest.raises(CorruptRowAccepted, match="must be refused with decode_failed"):
        judge_oversized_checkpoint(_open, AttemptStore, tmp_path / "runs.db", 1_000, record.id)


def _decode_without_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    """The attempt store decodes stored checkpoints without the cap."""
    monkeypatch.setattr(attempt_store_module, "stored_json_complaint", _without_cap)


def _attempt_machine_on_a_file() -> Any:
    target = BUILTIN_TARGETS["sqlite-file-sql"]
    assert target.store_factory is not None
    return attempt_comparison_for(
        target.store_factory, target.capabilities, name="decode-without-cap"
    )


#: name -> (plant, the check that must fire, what builds the machine it runs on).
PLANTED: dict[str, tuple[Callable[[pytest.MonkeyPatch], None], str, Callable[[], Any]]] = {
    "decode_without_the_cap": (
        _decode_without_the_cap,
        "CorruptRowAccepted",
        _attempt_machine_on_a_file,
    ),
}


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_the_attempt_machine_catches_it(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under the attempt machine's default budget, on a file, without shrinking."""
    plant, expected, machine_for = PLANTED[name]
    plant(monkeypatch)
    machine = machine_for()
    with pytest.raises(AssertionError) as caught:
        run_state_machine_as_test(machine, settings=default_settings(machine, shrink=False))
    assert type(caught.value).__name__ == expected, caught.value
