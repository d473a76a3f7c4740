"""The reach tour (``stateful._tour``): at the end of a program that passed
every check, the run-store machine reaches the cells its programs miss, each
step an ordinary differential step, so a bug only those cells show is caught.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from runstore._outcomes import AlreadyClaimed, SnapshotChanged
from runstore.sqlite import SqliteRunStore
from runstore.stateful._base._compare import OutcomeMismatch
from runstore.stateful._base._observe import Observer, Performed, observing
from runstore.stateful._machines import _reach
from runstore.stateful._machines._run_store import comparison_for
from runstore.stateful._machines._tour import TOUR, tour_cells

from ...zoo._stores import IN_MEMORY, open_as

#: The cell the planted bug answers wrongly in: no program of the default
#: budget lands there (it was a known gap before the tour).
CELL = "steal -> AlreadyClaimed when status=pending, claim=held, owner=none, evidence=unfit"


def test_every_tour_cell_is_reachable() -> None:
    """The tour aims only at cells no reason rules out, each named once."""
    cells = tour_cells()
    assert len(set(cells)) == len(cells) == len(TOUR)
    reachable = set(_reach.reachable_cells())
    assert all(cell in reachable for cell in cells)


class ClaimBlindSteal(SqliteRunStore):
    """A steal that reads a pending claim as a moved snapshot: it answers
    ``SnapshotChanged`` where the contract says ``AlreadyClaimed``."""

    def steal(self, run_id, expected, claimant, now_ms, evidence):
        out = super().steal(run_id, expected, claimant, now_ms, evidence)
        if isinstance(out, AlreadyClaimed) and self.get(run_id).status == "pending":
            return SnapshotChanged()  # the bug
        return out


def _blind_store(clock, path):
    return open_as(ClaimBlindSteal, clock)


def test_the_tour_catches_a_bug_only_its_cells_show() -> None:
    """One short program, then the tour: the tour's steal on a pending run
    with a claim gets the wrong answer, and the failing step is the tour's."""
    assert CELL in TOUR
    machine = comparison_for(_blind_store, IN_MEMORY, name="claim-blind-steal")
    budget = settings(
        max_examples=1,
        stateful_step_count=1,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=[HealthCheck.too_slow],
    )
    observer = Observer()
    with observing(observer), pytest.raises(OutcomeMismatch):
        run_state_machine_as_test(machine, settings=budget)
    assert machine.toured is False  # a failed tour is made again on replay
    failure = observer.failure
    assert failure is not None
    assert failure.check == "OutcomeMismatch"
    last = [entry for entry in failure.log if isinstance(entry, Performed)][-1]
    assert last.call.method == "steal"
    assert str(last.call.run_id).startswith("tour-")
