"""Attempts in the differential machines: the attempt machine runs clean on the
shipped stores, its composite rules produce the races they are named for,
``run_conformance`` runs it for SQLite stores only, and every attempt
invariant fires on a state (or step) that violates it.

The attempt machine over the file-backed adapter with ``SqlConsensus`` and
with ``LocalConsensus`` (crashes and reopening included), and over the
in-memory adapter with ``SqlConsensus``, runs in ``test_conformance.py``
through ``run_conformance``; here it runs over the in-memory adapter with
``LocalConsensus``.
"""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

import runstore
from runstore import ManualClock, OwnerId, RunRow, StoreState
from runstore.attempts import (
    ABSENT,
    Attempt,
    AttemptId,
    AttemptPatch,
    AttemptStore,
    AttemptStoreError,
    Conflict,
    ExistingSame,
    FenceLost,
    FinishAttempt,
    Finished,
    Inserted,
    Patched,
    Updated,
    Upserted,
)
from runstore.consensus import LocalConsensus, SqlConsensus
from runstore.model import ModelRunStore
from runstore.stateful import (
    ATTEMPT_INVARIANTS,
    AttemptChangedWithoutWrite,
    AttemptHeartbeatRegressed,
    AttemptRunMissing,
    AttemptStateMismatch,
    AttemptWriteMovedRevision,
    Call,
    CheckpointOverCap,
    CommittedAttemptLost,
    Raised,
    RunAttemptComparison,
    SettledAttemptChanged,
    Step,
    UnfencedAttemptWrite,
    attempt_comparison_for,
    check_attempt_state,
    check_attempt_step,
    conformance_machines,
)
from runstore.stateful._machines._attempts import (
    AT_CAP_TWO_BYTE,
    CONFIGS,
    OVER_CAP_TWO_BYTE,
    perform_attempt,
    retyped,
)
from runstore.stateful._targets._builtin import BUILTIN_TARGETS, raw_writer_for
from runstore.stateful._targets._probe import builds_sqlite_stores


def _builtin(name: str) -> type[RunAttemptComparison]:
    target = BUILTIN_TARGETS[name]
    assert target.store_factory is not None
    return attempt_comparison_for(
        target.store_factory,
        target.capabilities,
        name=f"{name}+attempts",
        raw_writer=raw_writer_for(target.store_factory),
    )


# The in-memory adapter over LocalConsensus, with faults and raw corruption.
TestSqliteLocalInMemoryAttempts = _builtin("sqlite-local").TestCase


# -- the composite rules do what they say -------------------------------------------


def _machine(name: str) -> RunAttemptComparison:
    machine = _builtin(name)()
    machine.setup((0, 0, 0, 0, 0, 0), [])
    return machine


@pytest.fixture
def traced(monkeypatch):
    """Record each attempt step's call and the reference's answer on the machine."""
    original = RunAttemptComparison._do_attempt

    def recording(self, op, **checks):
        out = original(self, op, **checks)
        self.__dict__.setdefault("trace", []).append((op, out))
        return out

    monkeypatch.setattr(RunAttemptComparison, "_do_attempt", recording)


def _answers(machine: RunAttemptComparison, method: str) -> list[object]:
    return [out for op, out in machine.trace if op.method == method]


@pytest.mark.usefixtures("traced")
def test_a_displaced_owners_late_finish_is_fenced_and_the_new_owners_lands():
    """After a takeover, the old owner's finish answers FenceLost and changes
    nothing; the new owner's finish settles the attempt."""
    machine = _machine("sqlite-sql")
    try:
        machine.displaced_owner_writes("insert", "a", 3, "finish", False)
        assert _answers(machine, "attempt_finish") == [FenceLost(), Finished()]
        (record,) = machine.model_attempts
        assert record.state == "failed"
        assert record.outcome == {"by": machine.world.process(3).nonce}
    finally:
        machine.teardown()


@pytest.mark.usefixtures("traced")
def test_a_displaced_owners_late_patch_is_fenced_even_when_the_winner_went_first():
    """The new owner patches, then the old owner's patch answers FenceLost."""
    machine = _machine("sqlite-local")
    try:
        machine.displaced_owner_writes("upsert", "b", 2, "patch", True)
        assert _answers(machine, "attempt_patch") == [Patched(), FenceLost()]
        assert machine.displaced["b"]
    finally:
        machine.teardown()


@pytest.mark.usefixtures("traced")
@pytest.mark.parametrize("run_first", [True, False])
def test_run_terminal_and_attempt_terminal_race(run_first: bool):
    """When the run settles first, the attempt's finish and patch are fenced
    out; when the attempt finishes first, it is settled and the late patch is
    fenced out."""
    machine = _machine("sqlite-sql")
    try:
        machine.run_and_attempt_settle("insert", "a", run_first, "completed", "succeeded")
        finish = _answers(machine, "attempt_finish")
        assert finish == ([FenceLost()] if run_first else [Finished()])
        assert _answers(machine, "attempt_patch") == [FenceLost()]
        (record,) = machine.model_attempts
        assert record.state == ("running" if run_first else "succeeded")
    finally:
        machine.teardown()


@pytest.mark.usefixtures("traced")
@pytest.mark.parametrize(
    ("settle", "expected"),
    [
        ("finish", [Inserted(), Upserted(), Conflict(), ExistingSame(), ExistingSame()]),
        ("put", [Inserted(), Upserted(), Upserted(), Conflict(), ExistingSame(), ExistingSame()]),
        # Finished as "queued" by the insert store: in progress again for upsert.
        ("finish-insert", [Inserted(), Upserted(), Upserted(), ExistingSame(), Upserted()]),
    ],
)
def test_upsert_replaces_only_while_in_progress(settle: str, expected: list[object]):
    """Upsert replaces a queued or running attempt and stops once it settled;
    the settled record put again is the same by strict comparison."""
    machine = _machine("sqlite-sql")
    try:
        machine.upsert_while_in_progress("a", "s1", 1, "queued", settle)
        assert _answers(machine, "attempt_put") == expected
    finally:
        machine.teardown()


@pytest.mark.usefixtures("traced")
def test_attempts_survive_a_store_crash_and_reopen():
    """The reopened store holds every committed attempt, and the attempt
    stores built over it go on writing."""
    machine = _machine("sqlite-file-local")
    try:
        machine.upsert_while_in_progress("a", "s2", 2, "running", "finish")
        before = machine.store_attempts
        assert before
        machine.crash_store()
        assert machine.store_attempts == before
        owner = machine.world.actor("owner", "a")
        machine._put("insert", Attempt("a", "s1", 1, "running", 5, meta={}), owner)
        assert machine.trace[-1][1] == Inserted()
        assert len(machine.store_attempts) == len(before) + 1
    finally:
        machine.teardown()


@pytest.mark.usefixtures("traced")
@pytest.mark.parametrize(
    ("checkpoint", "admitted"),
    [(AT_CAP_TWO_BYTE, True), (OVER_CAP_TWO_BYTE, False)],
    ids=["64-bytes", "66-bytes"],
)
def test_the_upsert_store_caps_checkpoints_in_utf8_bytes(checkpoint: str, admitted: bool):
    """64 bytes of two-byte text pass the 64-byte cap; 66 bytes (34 characters) do not."""
    machine = _machine("sqlite-sql")
    try:
        machine.upsert_while_in_progress("a", "s1", 1, "running", "finish")
        machine.attempt_heartbeat("upsert", "a", "s1", 1, "given", "owner", "reading", checkpoint)
        _, out = machine.trace[-1]
        assert (type(out).__name__ != "Raised") == admitted
    finally:
        machine.teardown()


def test_faults_on_attempt_writes_leave_both_sides_unchanged(monkeypatch):
    """Lasting faults raise persistence_failed on the store and leave both
    sides' attempts unchanged; transient ones within the budget do not
    change the outcome (the machine checks both)."""
    answers: list[object] = []
    original = RunAttemptComparison._settle

    def recording(self, model_step, store_step, **checks):
        answers.append(store_step.outcome)
        original(self, model_step, store_step, **checks)

    monkeypatch.setattr(RunAttemptComparison, "_settle", recording)
    machine = _machine("sqlite-sql")
    try:
        machine.upsert_while_in_progress("a", "s1", 1, "running", "finish")
        del answers[:]
        for write in ("put", "heartbeat", "finish", "patch", "upsert"):
            for fault in ("statement-0", "statement-1", "commit", "busy-once", "busy-always"):
                machine.faulted_attempt(write, fault, "s2")
        assert answers.count(Raised("persistence_failed", "put")) >= 4
        assert Raised("persistence_failed", "patch") in answers
        assert Inserted() in answers
    finally:
        machine.teardown()


def test_retyped_values_are_equal_in_python_and_different_to_the_stores():
    """The machine's retyping turns True, 1, 1.0 and null/absent into each other."""
    assert retyped(True) == 1
    assert type(retyped(True)) is int
    assert retyped(1) == 1.0
    assert type(retyped(1)) is float
    assert retyped(1.0) is True
    assert retyped(None) is ABSENT
    assert retyped(ABSENT) is None
    assert retyped({"k": 1}) == {"k": 1.0}


# -- wiring --------------------------------------------------------------------------


def _in_memory(clock: ManualClock, path: Path) -> runstore.SqliteRunStore:
    return runstore.open(":memory:", clock=clock)


def test_run_conformance_adds_the_attempt_machine_for_sqlite_stores_only():
    """A strategy (always run inside the adapter) and a SQLite store factory
    get the attempt machine after the run machine; a store that is not the
    SQLite adapter does not."""
    for strategy in (SqlConsensus, LocalConsensus):
        machines = conformance_machines(consensus_factory=strategy)
        attempts = [issubclass(m, RunAttemptComparison) for m in machines]
        assert attempts == [False, False, True, False]  # the opening check last
        assert machines[2].capabilities.fault_injection
        assert machines[2].capabilities.reopen
    machines = conformance_machines(store_factory=_in_memory)
    assert [issubclass(m, RunAttemptComparison) for m in machines] == [False, True, False]
    model = conformance_machines(store_factory=lambda clock, path: ModelRunStore(clock=clock))
    assert not any(issubclass(m, RunAttemptComparison) for m in model)


def test_probing_a_factory_that_fails_answers_no():
    """A factory that raises is not probed further (the run machine reports it)."""

    def broken(clock: ManualClock, path: Path) -> object:
        raise OSError("no store here")

    assert builds_sqlite_stores(broken) is False
    assert builds_sqlite_stores(_in_memory) is True


def test_the_two_attempt_configurations():
    """Insert mode with the defaults, and upsert mode with queued and running
    in progress and a 64-byte cap."""
    assert CONFIGS["insert"].options() == {
        "in_progress_states": ("running",),
        "max_checkpoint_bytes": 1 << 20,
        "put_mode": "insert",
    }
    assert CONFIGS["upsert"].options() == {
        "in_progress_states": ("queued", "running"),
        "max_checkpoint_bytes": 64,
        "put_mode": "upsert",
    }


# -- the invariants fire on violating states ----------------------------------------

OWNER = OwnerId("h1", 1, "n0")
RIVAL = OwnerId("h2", 1, "n0")
PROGRESS = frozenset({"queued", "running"})


def _row(run_id: str = "a", owner: OwnerId | None = OWNER) -> RunRow:
    return RunRow(
        run_id,
        "running" if owner is not None else "pending",
        0,
        0,
        None,
        owner,
        0 if owner is not None else None,
        None,
        None,
        None,
        None,
        None,
        None,
        "{}",
    )


def _runs(*rows: RunRow) -> StoreState:
    return StoreState(rows=rows, leases=(), facts=(), revision=len(rows), changes=())


def _attempt(**fields: object) -> Attempt:
    base = Attempt("a", "s1", 1, "running", 10, heartbeat_at_ms=20, meta={})
    return attrs.evolve(base, **fields)


def _step(method: str, outcome: object, owner: OwnerId = OWNER, **arguments: object) -> Step:
    pairs = (("config", "upsert"), *arguments.items(), ("owner", owner))
    return Step(Call(method, tuple(pairs)), outcome)


def _check(before, after, step, *, runs=None, revisions=(1, 1), cap=64):
    check_attempt_step(
        before,
        after,
        step,
        runs_before=runs if runs is not None else _runs(_row()),
        revision_before=revisions[0],
        revision_after=revisions[1],
        in_progress_states=PROGRESS,
        max_checkpoint_bytes=cap,
    )


def test_every_attempt_invariant_has_its_own_exception():
    """Eight invariants, eight distinct AssertionError subclasses."""
    assert len(set(ATTEMPT_INVARIANTS)) == len(ATTEMPT_INVARIANTS) == 8
    assert all(issubclass(kind, AssertionError) for kind in ATTEMPT_INVARIANTS)


def test_conforming_steps_pass():
    """A fenced heartbeat that moves the stamp forward, and a fenced finish,
    break nothing."""
    old = _attempt()
    beat = _step(
        "attempt_heartbeat",
        Updated(),
        run_id="a",
        step_key_digest="s1",
        attempt=1,
        now_ms=30,
        checkpoint=ABSENT,
    )
    _check((old,), (attrs.evolve(old, heartbeat_at_ms=30),), beat)
    done = _step("attempt_finish", Finished(), finish=FinishAttempt("a", "s1", 1, "failed", 40))
    _check((old,), (attrs.evolve(old, state="failed", finished_at_ms=40),), done)
    check_attempt_state((old,), _runs(_row()), max_checkpoint_bytes=64)


def test_settled_attempt_changed_fires():
    """A second finish that rewrites a settled attempt's state."""
    old = _attempt(state="succeeded", finished_at_ms=40)
    again = _step("attempt_finish", Finished(), finish=FinishAttempt("a", "s1", 1, "failed", 41))
    with pytest.raises(SettledAttemptChanged):
        _check((old,), (attrs.evolve(old, state="failed", finished_at_ms=41),), again)


def test_settled_attempt_changed_fires_on_finish_time_alone():
    """Only the finish time moved: still a settled attempt changing."""
    old = _attempt(state="succeeded", finished_at_ms=40)
    again = _step("attempt_finish", Finished(), finish=FinishAttempt("a", "s1", 1, "succeeded", 41))
    with pytest.raises(SettledAttemptChanged):
        _check((old,), (attrs.evolve(old, finished_at_ms=41),), again)


def test_unfenced_attempt_write_fires_on_an_accepted_answer():
    """A patch from someone who did not own the run answered Patched."""
    old = _attempt()
    patch = _step(
        "attempt_patch",
        Patched(),
        owner=RIVAL,
        attempt_id=AttemptId("a", "s1", 1),
        patch=AttemptPatch(),
    )
    with pytest.raises(UnfencedAttemptWrite):
        _check((old,), (old,), patch)


def test_unfenced_attempt_write_fires_on_a_silent_change():
    """A refused write (FenceLost) by the displaced owner that still changed the attempt."""
    old = _attempt()
    patch = _step(
        "attempt_patch",
        FenceLost(),
        owner=RIVAL,
        attempt_id=AttemptId("a", "s1", 1),
        patch=AttemptPatch(outcome=1),
    )
    with pytest.raises(UnfencedAttemptWrite):
        _check((old,), (attrs.evolve(old, outcome=1),), patch)


def test_unfenced_attempt_write_is_judged_on_the_run_before_the_write():
    """The owner of a run that is not running (settled, or not found) holds no fence."""
    put = _step("attempt_put", Inserted(), attempt=_attempt())
    with pytest.raises(UnfencedAttemptWrite):
        _check((), (_attempt(),), put, runs=_runs(_row(owner=None)))
    with pytest.raises(UnfencedAttemptWrite):
        _check((), (_attempt(),), put, runs=_runs())


def test_checkpoint_over_cap_fires_on_a_write_over_its_stores_cap():
    """A heartbeat stored 66 bytes under a 64-byte cap."""
    old = _attempt()
    beat = _step(
        "attempt_heartbeat",
        Updated(),
        run_id="a",
        step_key_digest="s1",
        attempt=1,
        now_ms=30,
        checkpoint=OVER_CAP_TWO_BYTE,
    )
    new = attrs.evolve(old, heartbeat_at_ms=30, checkpoint=OVER_CAP_TWO_BYTE)
    _check((old,), (new,), beat, cap=1 << 20)
    with pytest.raises(CheckpointOverCap):
        _check((old,), (new,), beat, cap=64)


def test_a_write_that_leaves_the_checkpoint_alone_is_not_held_to_its_cap():
    """The upsert store (64 bytes) patching the outcome of an attempt whose
    66-byte checkpoint the insert store (1 MiB) wrote breaks nothing."""
    old = _attempt(checkpoint=OVER_CAP_TWO_BYTE)
    patch = _step(
        "attempt_patch",
        Patched(),
        attempt_id=AttemptId("a", "s1", 1),
        patch=AttemptPatch(outcome=1),
    )
    _check((old,), (attrs.evolve(old, outcome=1),), patch, cap=64)


def test_checkpoint_over_cap_fires_on_a_state_over_every_cap():
    """A stored checkpoint larger than the largest cap."""
    record = _attempt(checkpoint=OVER_CAP_TWO_BYTE)
    with pytest.raises(CheckpointOverCap):
        check_attempt_state((record,), _runs(_row()), max_checkpoint_bytes=64)


def test_attempt_heartbeat_regressed_fires():
    """A heartbeat older than the stored stamp moved it back."""
    old = _attempt(heartbeat_at_ms=20)
    beat = _step(
        "attempt_heartbeat",
        Updated(),
        run_id="a",
        step_key_digest="s1",
        attempt=1,
        now_ms=15,
        checkpoint=ABSENT,
    )
    with pytest.raises(AttemptHeartbeatRegressed):
        _check((old,), (attrs.evolve(old, heartbeat_at_ms=15),), beat)


def test_an_upsert_may_rewrite_the_heartbeat():
    """Upsert replaces the whole record: an older heartbeat is not a regression."""
    old = _attempt(heartbeat_at_ms=20)
    new = _attempt(heartbeat_at_ms=5)
    _check((old,), (new,), _step("attempt_put", Upserted(), attempt=new))


def test_attempt_run_missing_fires():
    """An attempt stored for a run that does not exist."""
    with pytest.raises(AttemptRunMissing):
        check_attempt_state((_attempt(run_id="b"),), _runs(_row()), max_checkpoint_bytes=64)


def test_attempt_write_moved_revision_fires():
    """An attempt write that bumped the run revision."""
    old = _attempt()
    patch = _step(
        "attempt_patch", Patched(), attempt_id=AttemptId("a", "s1", 1), patch=AttemptPatch()
    )
    with pytest.raises(AttemptWriteMovedRevision):
        _check((old,), (old,), patch, revisions=(1, 2))


def test_attempt_changed_without_write_fires_on_a_run_step():
    """A run-store operation that changed an attempt."""
    old = _attempt()
    step = Step(Call("heartbeat", (("run_id", "a"), ("owner", OWNER), ("now_ms", 5))), Updated())
    with pytest.raises(AttemptChangedWithoutWrite):
        _check((old,), (attrs.evolve(old, outcome=True),), step)


def test_attempt_changed_without_write_fires_on_a_stray_change():
    """An accepted write that changed another attempt too."""
    one, two = _attempt(), _attempt(attempt=2)
    patch = _step(
        "attempt_patch", Patched(), attempt_id=AttemptId("a", "s1", 1), patch=AttemptPatch(error=1)
    )
    with pytest.raises(AttemptChangedWithoutWrite):
        _check(
            (one, two),
            (attrs.evolve(one, error=1), attrs.evolve(two, error=1)),
            patch,
        )


def test_committed_attempt_lost_fires():
    """A reopen that lost an attempt."""
    with pytest.raises(CommittedAttemptLost):
        _check((_attempt(),), (), Step(Call("reopen"), None))


class DropsFinishOutcome(AttemptStore):
    """An attempt store whose finish keeps the old outcome instead of the given one."""

    def __init__(self, store, **options):
        super().__init__(store, **options)
        given = "outcome_json = COALESCE(:outcome_json, outcome_json)"
        assert given in self._finish
        self._finish = self._finish.replace(given, "outcome_json = outcome_json")


def test_a_disagreement_in_attempts_is_reported_as_an_attempt_state_mismatch():
    """Both sides answer Finished, but the stores hold different outcomes."""
    target = BUILTIN_TARGETS["sqlite-sql"]
    assert target.store_factory is not None
    machine = attempt_comparison_for(
        target.store_factory, target.capabilities, attempt_store=DropsFinishOutcome
    )()
    try:
        machine.setup((0, 0, 0, 0, 0, 0), [])
        with pytest.raises(AttemptStateMismatch, match="differs in outcome"):
            machine.run_and_attempt_settle("insert", "a", False, "completed", "succeeded")
    finally:
        machine.teardown()


class _Raising:
    """An attempt store whose ``get`` raises what it is given."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def get(self, attempt_id: AttemptId) -> None:
        raise self.error


def test_only_an_attempt_store_error_counts_as_a_refusal():
    """A ``RunStoreError`` escaping an attempt operation is a crash, never the
    refusal an ``AttemptStoreError`` with the same code and method would be,
    and its message is not kept."""
    op = Call("attempt_get", (("config", "insert"), ("attempt_id", AttemptId("r", "k" * 64, 1))))
    proper = perform_attempt(
        {"insert": _Raising(AttemptStoreError("decode_failed", "get", "bad row"))}, op
    )
    leaked = perform_attempt(
        {"insert": _Raising(runstore.RunStoreError("decode_failed", "get", "secret-42"))}, op
    )
    assert proper == Raised("decode_failed", "get")
    assert leaked != proper
    assert "secret-42" not in repr(leaked)
