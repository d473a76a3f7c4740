"""A defect of the suite is reported as one, never against the store under test.

Every machine checks every invariant on the reference's own states and steps,
before any check on the store (or strategy) under test. An invariant that
fails there raises ``ReferenceInvariantViolation`` (naming the invariant), and
the fuzzer reports it as a suite defect. Shown by planting a broken invariant
and broken reference steps, with correct stores under test.
"""

from __future__ import annotations

import pytest

from runstore import LivenessEvidence, OwnerId, RunSnapshot
from runstore.consensus import SqlConsensus
from runstore.model import ModelRunStore
from runstore.stateful import (
    InvariantViolation,
    ReferenceInvariantViolation,
    comparison_for,
    consensus_comparison_for,
)
from runstore.stateful._base._observe import Observer, observing
from runstore.stateful._base._steps import Call, call
from runstore.stateful._checks import _invariants
from runstore.stateful._targets._builtin import BUILTIN_TARGETS, raw_writer_for

ME = OwnerId("h1", 2, "n0")


def _owner_only_heartbeats(rows_before, rows_after, before, after, step, *, leases):
    """The invariant as it was before issue 10: any heartbeat that moves back
    under the same owner fires, across grants too (wrong: activation stamps
    the store clock)."""
    for run_id, old in rows_before.items():
        new = rows_after[run_id]
        if (
            old.owner is not None
            and new.owner == old.owner
            and new.heartbeat_at_ms is not None
            and new.heartbeat_at_ms < old.heartbeat_at_ms
        ):
            raise _invariants.HeartbeatRegressed(f"run {run_id!r} moved back")


def _self_steal(machine) -> None:
    """The issue's sequence: a self-steal, a heartbeat 10 s ahead of the store
    clock, then the activation (which stamps the store clock)."""
    machine._do(call("create", ("run_id", "self"), ("state_json", "{}")))
    pending = RunSnapshot("pending", None, None)
    machine._do(
        call(
            "claim_and_own",
            ("run_id", "self"),
            ("expected", pending),
            ("owner", ME),
            ("now_ms", machine.clock.now_ms()),
        )
    )
    start = machine.clock.now_ms()
    machine._set_clock(start + 40_000)
    reading = start + 50_000
    machine._do(
        call(
            "steal",
            ("run_id", "self"),
            ("expected", RunSnapshot("running", ME, start)),
            ("claimant", ME),
            ("now_ms", reading),
            ("evidence", LivenessEvidence(ME, reading, "lease-expired")),
        )
    )
    machine._do(call("heartbeat", ("run_id", "self"), ("owner", ME), ("now_ms", reading)))
    machine._do(
        call(
            "activate",
            ("run_id", "self"),
            ("claimant", ME),
            ("claimed_at_ms", reading),
            ("expected", RunSnapshot("running", ME, reading)),
        )
    )


def _machine(name: str = "sqlite-sql"):
    target = BUILTIN_TARGETS[name]
    assert target.store_factory is not None
    return comparison_for(
        target.store_factory,
        target.capabilities,
        name=name,
        raw_writer=raw_writer_for(target.store_factory),
    )()


def test_the_self_steal_sequence_passes_on_the_reference_and_the_store():
    """The issue's sequence runs clean through the run-store machine (the
    reference model against the SQLite store)."""
    machine = _machine()
    try:
        machine.setup((0,) * 6, [])
        _self_steal(machine)
    finally:
        machine.teardown()


def test_a_planted_invariant_failing_on_the_reference_is_a_suite_defect(monkeypatch):
    """With the old, owner-only heartbeat invariant planted, the sequence fails
    on the reference first: ``ReferenceInvariantViolation`` naming
    ``HeartbeatRegressed``, recorded as such, never a store failure."""
    monkeypatch.setattr(_invariants, "_check_heartbeats", _owner_only_heartbeats)
    machine = _machine()
    observer = Observer()
    try:
        machine.setup((0,) * 6, [])
        with observing(observer), pytest.raises(ReferenceInvariantViolation) as caught:
            _self_steal(machine)
    finally:
        machine.teardown()
    assert caught.value.invariant == "HeartbeatRegressed"
    assert not isinstance(caught.value, InvariantViolation)
    assert observer.failure is not None
    assert observer.failure.check == "ReferenceInvariantViolation"
    assert observer.failure.log[-1].call.method == "activate"


def plant_broken_reference_heartbeat(monkeypatch) -> None:
    """Break the reference model: its heartbeat also rewrites the run's state."""
    original = ModelRunStore.heartbeat

    def heartbeat(self, run_id, owner, now_ms):
        outcome = original(self, run_id, owner, now_ms)
        self.raw_write_state(run_id, '{"planted":true}')
        return outcome

    monkeypatch.setattr(ModelRunStore, "heartbeat", heartbeat)


def test_a_broken_reference_step_is_a_suite_defect(monkeypatch):
    """A reference model whose heartbeat also rewrites the run's state text
    breaks ``StateNotPreserved`` on its own history; the correct store under
    test is not blamed (no ``StateMismatch``)."""
    plant_broken_reference_heartbeat(monkeypatch)
    machine = _machine()
    try:
        machine.setup((0,) * 6, [])
        machine.claim_and_activate("claimable", 1)
        with pytest.raises(ReferenceInvariantViolation) as caught:
            machine.delayed_pulse("running", 1000)
    finally:
        machine.teardown()
    assert caught.value.invariant in ("StateNotPreserved", "RevisionMismatch")


def test_a_broken_reference_strategy_is_a_suite_defect(monkeypatch):
    """The strategy machine checks the reference's leases first: a reference
    heartbeat that moves the lease back inside one grant is a suite defect,
    not an ``OutcomeMismatch`` against the correct strategy."""
    import attrs

    from runstore.consensus._types import Lost, Renewed
    from runstore.model import _leases

    def heartbeat(lease, owner, now_ms):
        if lease is None or lease.owner != owner:
            return Lost(), lease
        return Renewed(now_ms), attrs.evolve(lease, heartbeat_at_ms=now_ms)

    monkeypatch.setattr(_leases, "heartbeat", heartbeat)
    machine = consensus_comparison_for(SqlConsensus, name="sql")()
    try:
        machine.setup((0,) * 6)
        now = machine.clock.now_ms()
        machine._transact([call("claim", ("run_id", "a"), ("claimant", ME), ("now_ms", now))])
        machine._transact(
            [
                Call(
                    "activate",
                    (("run_id", "a"), ("owner", ME), ("granted_at_ms", now), ("now_ms", now)),
                )
            ]
        )
        beat = Call("heartbeat", (("run_id", "a"), ("owner", ME), ("now_ms", now + 5000)))
        machine._transact([beat])
        late = Call("heartbeat", (("run_id", "a"), ("owner", ME), ("now_ms", now + 1000)))
        with pytest.raises(ReferenceInvariantViolation) as caught:
            machine._transact([late])
    finally:
        machine.teardown()
    assert caught.value.invariant == "HeartbeatRegressed"


def test_a_planted_attempt_invariant_failing_on_the_reference_is_a_suite_defect(monkeypatch):
    """The attempt machine checks the reference's attempts first."""
    from runstore.stateful._campaigns._fuzz import machines_for
    from runstore.stateful._checks._attempt_invariants import AttemptHeartbeatRegressed
    from runstore.stateful._machines import _attempts as _attempt_machine

    def broken(*args, **kwargs):
        raise AttemptHeartbeatRegressed("planted")

    monkeypatch.setattr(_attempt_machine, "check_attempt_step", broken)
    (*_, attempts) = machines_for(BUILTIN_TARGETS["sqlite-sql"])
    from hypothesis import Phase, settings
    from hypothesis.stateful import run_state_machine_as_test

    with pytest.raises(ReferenceInvariantViolation) as caught:
        run_state_machine_as_test(
            attempts,
            settings=settings(max_examples=20, phases=[Phase.generate], report_multiple_bugs=False),
        )
    assert caught.value.invariant == "AttemptHeartbeatRegressed"


def test_the_self_steal_regression_file_fails_while_the_defect_is_there(monkeypatch):
    """``tests/regressions/test_regression_self_steal_regrant.py`` passes now;
    with the old owner-only heartbeat invariant planted it fails, as a suite
    defect on the reference and as ``HeartbeatRegressed`` on the store."""
    from tests.regressions import test_regression_self_steal_regrant as regression

    regression.test_self_steal_regrant_keeps_every_invariant("reference")
    regression.test_self_steal_regrant_keeps_every_invariant("sqlite")
    monkeypatch.setattr(_invariants, "_check_heartbeats", _owner_only_heartbeats)
    with pytest.raises(ReferenceInvariantViolation):
        regression.test_self_steal_regrant_keeps_every_invariant("reference")
    with pytest.raises(_invariants.HeartbeatRegressed):
        regression.test_self_steal_regrant_keeps_every_invariant("sqlite")
