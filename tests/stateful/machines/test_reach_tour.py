"""The reach tour (``stateful._tour``): at the end of a program that passed
every check, the run-store machine reaches the cells its programs miss, each
step an ordinary differential step, so a bug only those cells show is caught.
"""

from __future__ import annotations

import attrs
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from runstore._outcomes import AlreadyClaimed, SnapshotChanged
from runstore.sqlite import SqliteRunStore
from runstore.stateful._base._compare import OutcomeMismatch
from runstore.stateful._base._observe import Observer, Performed, observing
from runstore.stateful._checks._invariants import AdmissionViolation
from runstore.stateful._machines import _reach
from runstore.stateful._machines._reach import Reach, recording
from runstore.stateful._machines._reach_gaps import KNOWN_GAPS
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


#: Cells the tour reaches outside ``TOUR``: its lineage step and its refusals.
BEYOND_TOUR = (
    "request_cancel_lineage -> AlreadyRequested when status=settled, cancel=no",
    "acknowledge_cancel -> raised invalid_run",
)


def _plain_store(clock, path):
    return open_as(SqliteRunStore, clock)


#: One program of one step, derandomized, not shrunk.
ONE_STEP = settings(
    max_examples=1,
    stateful_step_count=1,
    derandomize=True,
    database=None,
    deadline=None,
    phases=[Phase.generate],
    suppress_health_check=[HealthCheck.too_slow],
)


def _one_step_then_tour(factory, name: str) -> None:
    machine = comparison_for(factory, IN_MEMORY, name=name)
    run_state_machine_as_test(machine, settings=ONE_STEP)


def test_the_tour_alone_reaches_every_cell_it_claims() -> None:
    """A tour aimed at a cell it cannot reach skips it silently: here one
    program of one step, then the tour, lands in every cell of ``TOUR`` and
    in the cells its lineage step and its refusals aim at. No cell is left
    to ``KNOWN_GAPS``."""
    reach = Reach()
    with recording(reach):
        _one_step_then_tour(_plain_store, "tour-alone")
    missed = {_reach.describe_cell(cell) for cell in _reach.gaps(reach)}
    assert not missed & set(TOUR), sorted(missed & set(TOUR))
    assert not missed & set(BEYOND_TOUR), sorted(missed & set(BEYOND_TOUR))
    assert KNOWN_GAPS == ()


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
    observer = Observer()
    with observing(observer), pytest.raises(OutcomeMismatch):
        run_state_machine_as_test(machine, settings=ONE_STEP)
    assert machine.toured is False  # a failed tour is made again on replay
    failure = observer.failure
    assert failure is not None
    assert failure.check == "OutcomeMismatch"
    last = [entry for entry in failure.log if isinstance(entry, Performed)][-1]
    assert last.call.method == "steal"
    assert str(last.call.run_id).startswith("tour-")


class NulIdLookup(SqliteRunStore):
    """A ``get`` that answers "no such run" for an id holding a NUL instead of
    refusing it: one case of the admission table shows it."""

    def get(self, run_id):
        if isinstance(run_id, str) and "\x00" in run_id:
            return None  # the bug
        return super().get(run_id)


def _nul_store(clock, path):
    return open_as(NulIdLookup, clock)


@pytest.mark.parametrize("whole_state", [True, False])
def test_the_tour_asks_every_admission_case(whole_state: bool) -> None:
    """The derandomized budget's ``malformed`` draws leave cases of the
    admission table unasked; the tour asks each, also of a store compared
    through public reads only, so one program of one step, then the tour,
    catches a refusal that one case shows, and the failing call is that
    case's."""
    capabilities = attrs.evolve(IN_MEMORY, whole_state=whole_state)
    machine = comparison_for(_nul_store, capabilities, name=f"nul-id-{whole_state}")
    observer = Observer()
    with observing(observer), pytest.raises(AdmissionViolation):
        run_state_machine_as_test(machine, settings=ONE_STEP)
    failure = observer.failure
    assert failure is not None
    last = [entry for entry in failure.log if isinstance(entry, Performed)][-1]
    assert last.call.method == "get"
    assert "\x00" in str(last.call.run_id)
