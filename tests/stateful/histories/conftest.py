"""Fixtures for the history checker's tests."""

from __future__ import annotations

import pytest

from runstore.stateful._histories import _spec


@pytest.fixture
def applications(monkeypatch):
    """Counts the model applications of every search (``Spec.apply``): a
    checker's work, bounded by tests where a time would be a timed assertion."""
    count = [0]
    apply = _spec.Spec.apply

    def counted(self, node, op):
        count[0] += 1
        return apply(self, node, op)

    monkeypatch.setattr(_spec.Spec, "apply", counted)
    return count
