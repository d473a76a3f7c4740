"""The suite judges admission itself: a bug in the input admission the
reference shares with the stores (contract.md, Independence) makes both sides
agree, so only the suite's own table of limits (``stateful/_checks/_malformed.py``)
can see it. Each test plants one such bug in the shared code, for the
duration of the test, and the default budget must report it as
``AdmissionViolation`` or ``StoreCrashed``."""

from __future__ import annotations

from typing import Any

import pytest

from runstore import _boundary
from runstore.stateful import AdmissionViolation, StoreCrashed
from runstore.stateful._base._steps import Raised
from runstore.stateful._checks._malformed import EDGE_CASES, MALFORMED_CASES, refused

from ..._sqlite import run_in_memory_store_machine


def test_a_shape_walk_that_forgets_depth_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The walk never counts depth: state nested past 128 levels is admitted."""
    walk = _boundary.json_shape_complaint

    def no_depth(value: object) -> str | None:
        complaint = walk(value)
        return None if complaint is not None and "depth" in complaint else complaint

    monkeypatch.setattr(_boundary, "json_shape_complaint", no_depth)
    with pytest.raises(AdmissionViolation, match="refused by admission"):
        run_in_memory_store_machine()


def test_a_skew_bound_one_too_tight_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """A reading exactly at the allowance is refused on both sides."""
    monkeypatch.setattr(_boundary, "HEARTBEAT_SKEW_ALLOWANCE_MS", 9_999)
    with pytest.raises(AdmissionViolation, match="admitted"):
        run_in_memory_store_machine()


def test_a_crash_in_shared_admission_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cursor check that raises ``TypeError``: both sides crash alike, which
    the comparison alone would call agreement."""

    def crashing(method: str, value: object) -> Any:
        if value is None:
            return None
        raise TypeError("'<' not supported between instances of 'type' and 'type'")

    monkeypatch.setattr(_boundary, "decode_cursor", crashing)
    with pytest.raises(StoreCrashed, match="TypeError"):
        run_in_memory_store_machine()


def test_the_table_names_distinct_cases() -> None:
    assert len(set(MALFORMED_CASES)) == len(MALFORMED_CASES)
    assert len(set(EDGE_CASES)) == len(EDGE_CASES)
    assert not set(MALFORMED_CASES) & set(EDGE_CASES)


def test_refused_means_an_admission_error() -> None:
    assert refused(Raised("invalid_run", "get"))
    assert refused(Raised("invalid_attempt", "put"))
    assert not refused(Raised("persistence_failed", "get"))
    assert not refused(None)
