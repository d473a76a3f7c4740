"""Attempts in ``runstore fuzz``: the campaign rotates the attempt machine with
the run-store and strategy machines on SQLite targets, the attempt machine logs
its attempt calls, and a regression file written from its program replays them
as plain ``AttemptStore`` calls: it fails on a broken attempt store and passes
on the shipped one."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from runstore.attempts import ABSENT
from runstore.stateful import ConsensusComparison, RunAttemptComparison, RunStoreComparison
from runstore.stateful._base._observe import AttemptPerformed, Reopened
from runstore.stateful._campaigns._fuzz import DEFAULT_TARGETS, fuzz_target, machines_for
from runstore.stateful._campaigns._regression import write_regression
from runstore.stateful._targets._builtin import BUILTIN_TARGETS, store_target

ROOT = Path(__file__).resolve().parents[3]
ZOO_ATTEMPT_STORE = "tests.zoo.attempt_finish_rewrites:attempt_store"


def _pytest(path: Path) -> int:
    """Run one regression file under pytest in its own process; its exit status."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return subprocess.call(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(path)],
        env=env,
        cwd=path.parent,
        stdout=subprocess.DEVNULL,
        timeout=300,
    )


@pytest.mark.parametrize("name", DEFAULT_TARGETS)
def test_fuzz_rotates_the_run_strategy_and_attempt_machines_on_sqlite_targets(name: str):
    """Every built-in SQLite target is put under the run-store machine, the
    strategy machine and the attempt machine, in that order."""
    machines = machines_for(BUILTIN_TARGETS[name])
    assert len(machines) == 3
    assert issubclass(machines[0], RunStoreComparison)
    assert not issubclass(machines[0], RunAttemptComparison)
    assert issubclass(machines[1], ConsensusComparison)
    assert issubclass(machines[2], RunAttemptComparison)
    assert machines[2].target == name


def test_fuzz_runs_no_attempt_machine_where_attempts_cannot_live():
    """The model target builds no SQLite store: only the run-store machine."""
    (machine,) = machines_for(BUILTIN_TARGETS["model"])
    assert not issubclass(machine, RunAttemptComparison)


def test_fuzz_of_a_store_factory_building_sqlite_stores_includes_attempts():
    """A ``--store`` factory that builds SQLite adapter stores gets the attempt
    machine after the run-store machine."""
    machines = machines_for(store_target("tests.stateful.machines.test_machines:in_memory"))
    assert [issubclass(m, RunAttemptComparison) for m in machines] == [False, True]


def test_fuzz_with_an_attempt_store_under_test_runs_the_attempt_machine_alone():
    """Pointing the campaign at an attempt store factory leaves only the
    attempt machine, built with that factory."""
    from tests.zoo.attempt_finish_rewrites import attempt_store

    (machine,) = machines_for(BUILTIN_TARGETS["sqlite-sql"], attempt_store=attempt_store)
    assert issubclass(machine, RunAttemptComparison)
    assert machine.attempt_store_factory is attempt_store


def test_fuzz_on_an_attempt_zoo_store_writes_a_regression_that_fails_until_fixed(
    tmp_path: Path,
):
    """A campaign against the attempt store whose ``finish`` rewrites settled
    attempts writes a pytest file (shrinking skipped) that fails on that store
    and passes once its import names the shipped ``AttemptStore``."""
    stream = io.StringIO()
    written = fuzz_target(
        BUILTIN_TARGETS["sqlite-sql"],
        seconds=None,
        examples=40,
        seed_value=3,
        db_dir=tmp_path / "db",
        out_dir=tmp_path / "out",
        stream=stream,
        attempt_store=ZOO_ATTEMPT_STORE,
        shrink=False,
    )
    assert written is not None, stream.getvalue()
    source = written.read_text()
    broken = "from tests.zoo.attempt_finish_rewrites import attempt_store as AttemptStore"
    assert broken in source
    assert "attempts = open_attempts(store)" in source
    assert "assert attempts['insert'].state() == expected_attempts" in source.replace('"', "'")
    assert "import hypothesis" not in source
    assert "from hypothesis" not in source
    # Each call goes through the judge, which re-checks the invariants.
    assert "judge = Judge(" in source
    assert "judge.attempt(" in source
    assert _pytest(written) == 1
    fixed = tmp_path / "fixed" / written.name
    fixed.parent.mkdir()
    fixed.write_text(source.replace(broken, "from runstore.attempts import AttemptStore"))
    assert _pytest(fixed) == 0


def _attempt_machine(name: str) -> type[RunAttemptComparison]:
    """The attempt machine a campaign on the built-in target ``name`` runs."""
    machine = machines_for(BUILTIN_TARGETS[name])[-1]
    assert issubclass(machine, RunAttemptComparison)
    return machine


def test_regression_file_of_a_conforming_attempt_program_passes(tmp_path: Path):
    """An attempt program written out as a regression file replays on the
    shipped stores and passes: attempt writes by the owner and by a displaced
    owner, both attempt stores, an armed fault, a crash and reopen (the
    attempt stores rebuilt over the reopened store) and the final attempts."""
    machine = _attempt_machine("sqlite-file-sql")()
    try:
        machine.setup((0, 10000, -1, 5000, 0, 0), ["lin-2"])
        machine.attempt_put(
            config="insert",
            run="running",
            step="s1",
            number=1,
            pick="given",
            writer="owner",
            own=True,
            variant="new",
            state="running",
            stamps="beating",
            checkpoint={"k": 1},
            error=1,
            outcome=1.0,
            meta={"try": 1},
        )
        machine.displaced_owner_writes("upsert", "running", 3, "finish", winner_first=False)
        machine.faulted_attempt(write="heartbeat", fault="statement-0", step="s1")
        machine.faulted_attempt(write="put", fault="busy-once", step="s2")
        machine.crash_store()
        machine.attempt_heartbeat(
            config="insert",
            run="running",
            step="s2",
            number=1,
            pick="latest",
            writer="owner",
            at="ahead",
            checkpoint=True,
        )
        machine.run_and_attempt_settle("insert", "running", False, "completed", "succeeded")
        machine.upsert_while_in_progress("b", "s1", 2, first="queued", settle="finish-insert")
        machine.attempt_patch(
            config="upsert",
            run="b",
            step="s1",
            number=2,
            pick="given",
            writer="owner",
            checkpoint=None,
            error=True,
            outcome=1,
            meta=ABSENT,
        )
        machine.attempt_finish(
            config="insert",
            run="b",
            step="s2",
            number=1,
            pick="given",
            writer="ghost",
            state="succeeded",
            at=0,
            error=ABSENT,
            outcome=None,
            meta=ABSENT,
        )
        machine.attempt_get(config="upsert", run="b", step="s1", number=2, pick="given")
        failure = machine._failure(AssertionError("a program to replay"))
    finally:
        machine.teardown()
    assert failure.machine == "attempts"
    assert failure.expected_attempts
    attempt_steps = [entry for entry in failure.log if isinstance(entry, AttemptPerformed)]
    assert {entry.config for entry in attempt_steps} == {"insert", "upsert"}
    assert any(entry.plan is not None for entry in attempt_steps)
    assert any(isinstance(entry, Reopened) for entry in failure.log)
    caps = BUILTIN_TARGETS["sqlite-file-sql"].capabilities
    path = write_regression(
        failure,
        tmp_path,
        faults=caps.fault_injection,
        whole_state=caps.whole_state,
        leases=caps.lease_introspection,
    )
    source = path.read_text()
    compile(source, str(path), "exec")
    assert source.count("attempts = open_attempts(store)") == 2
    assert _pytest(path) == 0


def test_fuzz_command_line_passes_the_attempt_store_on(monkeypatch: pytest.MonkeyPatch):
    """``runstore fuzz --attempt-store MODULE:FACTORY`` hands the factory to
    every target's campaign (the campaign itself is tested above)."""
    from runstore import cli
    from runstore.stateful._campaigns import _fuzz

    seen: list[tuple[str, str | None]] = []

    def campaign(target, **options):
        seen.append((target.name, options["attempt_store"]))
        return _fuzz.TargetResult(target, examples=0, steps=0)

    monkeypatch.setattr(_fuzz, "campaign_target", campaign)
    arguments = ["fuzz", "--attempt-store", ZOO_ATTEMPT_STORE, "--examples", "1"]
    assert cli.main(arguments) == 0
    assert seen == [(name, ZOO_ATTEMPT_STORE) for name in DEFAULT_TARGETS]
    seen.clear()
    assert cli.main(["fuzz", "--target", "sqlite-sql", "--examples", "1"]) == 0
    assert seen == [("sqlite-sql", None)]
