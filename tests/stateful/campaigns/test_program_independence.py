"""The default budget's programs do not depend on what else the process has
imported. Hypothesis mixes the literals of every local module it finds
loaded into the choices it generates; the machines switch that off for their
own examples (``_base._programs.programs_independent_of_callers_code``), so a
third party's verdict, and this suite's reach and zoo measurements, do not
move when unrelated code changes."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

import runstore
from runstore.stateful import Capabilities, comparison_for
from runstore.stateful._machines import _run_store as machine_module


def _store(clock: Any, _path: Any) -> Any:
    return runstore.open(":memory:", clock=clock)


def _program(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    made: list[str] = []
    do = machine_module.RunStoreComparison._do

    def recording(self: Any, op: Any, **options: Any) -> Any:
        made.append(op.describe())
        return do(self, op, **options)

    monkeypatch.setattr(machine_module.RunStoreComparison, "_do", recording)
    machine = comparison_for(_store, Capabilities(reopen=False), name="independence")
    run_state_machine_as_test(
        machine,
        settings=settings(max_examples=12, stateful_step_count=25, derandomize=True, database=None),
    )
    monkeypatch.undo()
    return made


def test_a_newly_imported_module_full_of_literals_changes_no_program(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = _program(monkeypatch)
    literals = "\n".join(
        f"VALUE_{i} = {i * 7919 % 100_003}\nNAME_{i} = 'run-{i}'" for i in range(300)
    )
    (tmp_path / "caller_literals.py").write_text(literals + "\n")
    sys.path.insert(0, str(tmp_path))
    try:
        importlib.import_module("caller_literals")
        after = _program(monkeypatch)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("caller_literals", None)
    assert before, "the machine made no operation"
    assert after == before
