"""The conformance machines themselves: each runs clean against the shipped
implementations under the loaded profile, reports a disagreement with the right
failure, and the fuzz command line writes regression files that fail on the
bug they were found with and pass without it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import Phase, settings
from hypothesis.stateful import run_state_machine_as_test

import runstore
from runstore import FenceLost, ManualClock
from runstore._boundary import admit_renewal
from runstore.consensus import LocalConsensus, SqlConsensus
from runstore.model import ModelConsensus, ModelRunStore
from runstore.stateful import (
    Capabilities,
    ConsensusComparison,
    OutcomeMismatch,
    RunStoreComparison,
    authority_for,
    comparison_for,
    conformance_machines,
    consensus_comparison_for,
    run_conformance,
)
from runstore.stateful._campaigns._regression import write_regression
from runstore.stateful._targets._builtin import BUILTIN_TARGETS, raw_writer_for

ROOT = Path(__file__).resolve().parents[3]


def _builtin(name: str) -> type[RunStoreComparison]:
    target = BUILTIN_TARGETS[name]
    assert target.store_factory is not None
    return comparison_for(
        target.store_factory,
        target.capabilities,
        name=name,
        raw_writer=raw_writer_for(target.store_factory),
    )


# The in-memory adapter over LocalConsensus, with faults and raw corruption.
# (SqlConsensus in memory, and both strategies on a file with crashes and
# reopening, run in test_conformance.py.)
TestSqliteLocalInMemory = _builtin("sqlite-local").TestCase

# The reference strategy against itself: keeps the machine honest.
TestModelConsensusAgainstItself = consensus_comparison_for(ModelConsensus, name="model").TestCase

# The SQLite adapter over a double that disagrees with the row on purpose.
TestStrategyIsAuthoritative = authority_for().TestCase


def test_reference_model_against_itself():
    """The model compared with a second model never disagrees and never breaks
    an invariant (a check on the machine and on the model together)."""
    run_conformance(
        store_factory=lambda clock, path: ModelRunStore(clock=clock),
        capabilities=Capabilities(reopen=False),
        settings=settings(max_examples=30),
    )


class LateHeartbeat(ModelRunStore):
    """A store that refuses every admissible heartbeat (and writes nothing);
    an inadmissible one it refuses as the model does (the tour asks the whole
    admission table, and this store's bug is the outcome, not admission)."""

    def heartbeat(self, run_id, owner, now_ms):
        admit_renewal("heartbeat", run_id, owner, now_ms, self._clock)  # raises where it must
        return FenceLost()


def test_a_disagreement_is_reported_as_an_outcome_mismatch():
    """A store that answers one operation differently fails with ``OutcomeMismatch``."""
    with pytest.raises(OutcomeMismatch):
        run_conformance(
            store_factory=lambda clock, path: LateHeartbeat(clock=clock),
            capabilities=Capabilities(reopen=False),
            settings=settings(max_examples=50, report_multiple_bugs=False, phases=[Phase.generate]),
        )


def test_conformance_needs_something_to_test():
    """``run_conformance`` without a factory is a usage error."""
    with pytest.raises(TypeError):
        run_conformance()


def test_a_strategy_runs_alone_and_inside_the_adapter():
    """A consensus factory alone yields the strategy machine and the adapter
    machine (then the adapter machine with attempts, see test_attempt_machine.py,
    and the opening check, see test_opening_check.py)."""
    machines = conformance_machines(consensus_factory=SqlConsensus)
    assert len(machines) == 4
    assert issubclass(machines[0], ConsensusComparison)
    assert issubclass(machines[1], RunStoreComparison)
    assert machines[1].capabilities.fault_injection


def test_local_consensus_machine_in_one_short_run():
    """The strategy machine runs LocalConsensus clean (a short smoke run)."""
    run_state_machine_as_test(
        consensus_comparison_for(LocalConsensus, name="local"),
        settings=settings(max_examples=10),
    )


def _cli(*arguments: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-m", "runstore.stateful", *arguments],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@pytest.mark.slow
def test_fuzz_on_a_zoo_store_writes_a_regression_that_fails_until_fixed(tmp_path: Path):
    """``runstore fuzz`` against a broken store exits 1 and writes a pytest file
    that fails on that store and passes once the import names a correct one."""
    done = _cli(
        "fuzz",
        "--target",
        "tests.zoo.ack_repeat_not_written:factory",
        "--examples",
        "60",
        "--seed",
        "3",
        "--db",
        str(tmp_path / "db"),
        "--out",
        str(tmp_path / "out"),
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "examples" in done.stdout
    assert "file written:" in done.stdout
    (written,) = (tmp_path / "out").glob("test_regression_*.py")
    replayed = _cli("replay", str(written))
    assert replayed.returncode == 1, replayed.stdout
    fixed = tmp_path / "fixed" / written.name
    fixed.parent.mkdir()
    source = written.read_text()
    assert "from tests.zoo.ack_repeat_not_written import factory as open_store" in source
    fixed.write_text(
        source.replace(
            "from tests.zoo.ack_repeat_not_written import factory as open_store",
            "from tests.stateful.machines.test_machines import in_memory as open_store",
        )
    )
    assert _cli("replay", str(fixed)).returncode == 0


def in_memory(clock: ManualClock, path: Path) -> runstore.SqliteRunStore:
    return runstore.open(":memory:", clock=clock)


@pytest.mark.slow
def test_fuzz_on_sql_consensus_runs_clean_and_prints_progress(tmp_path: Path):
    """A short campaign against the shipped SQLite target finds nothing."""
    done = _cli(
        "fuzz",
        "--consensus",
        "runstore.consensus:SqlConsensus",
        "--examples",
        "30",
        "--seed",
        "5",
        "--db",
        str(tmp_path / "db"),
        "--out",
        str(tmp_path / "out"),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "30 examples" in done.stdout or "examples" in done.stdout
    assert "clean" in done.stdout
    assert not (tmp_path / "out").exists()


def test_fuzz_without_the_conformance_extra_says_how_to_install_it():
    """Without Hypothesis the command explains which extra to install and exits 2."""
    code = (
        "import sys; sys.modules['hypothesis'] = None\n"
        "from runstore.cli import main\n"
        "sys.exit(main(['fuzz', '--examples', '1']))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 2
    assert "python -m pip install -e " in done.stderr
    assert "[conformance]" in done.stderr


def test_unknown_fuzz_target_is_a_usage_error():
    """An unknown target name exits 2 with the list of known ones."""
    done = _cli("fuzz", "--target", "no-such-target", "--examples", "1")
    assert done.returncode == 2
    assert "sqlite-sql" in done.stderr


def _render_and_run(machine, failure, tmp_path: Path, **options) -> int:
    path = write_regression(failure, tmp_path, **options)
    compile(path.read_text(), str(path), "exec")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return subprocess.call(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(path)],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
    )


def test_regression_file_of_a_conforming_store_program_passes(tmp_path: Path):
    """A program written out as a regression file replays on a conforming store
    and passes: faults, a crash and reopen (leases rebuilt by LocalConsensus),
    a corrupted row and a takeover included."""
    machine = _builtin("sqlite-file-local")()
    try:
        machine.setup((0, 10000, -1, 5000, 0, 0), ["lin-2"])
        machine.claim_and_activate("claimable", 1)
        machine.faulted("heartbeat", "busy-twice")
        machine.faulted("claim", "strategy-0")
        machine.takeover("running", 3, "fit", "heartbeat", 1)
        machine.crash_store()
        machine.cancellation("running", 2, "present", "cancelled")
        machine.corrupt_row("b", '{"n":1e400}')
        machine.delayed_pulse("running", 1000)
        failure = machine._failure(AssertionError("a program to replay"))
    finally:
        machine.teardown()
    target = BUILTIN_TARGETS["sqlite-file-local"]
    status = _render_and_run(machine, failure, tmp_path, faults=True, whole_state=True, leases=True)
    assert target.capabilities.reopen
    assert status == 0


def test_regression_file_of_a_conforming_strategy_program_passes(tmp_path: Path):
    """A strategy program written out as a regression file passes on the
    strategy it came from, rollbacks included."""
    machine = consensus_comparison_for(LocalConsensus, name="sqlite-local")()
    try:
        machine.setup((0,) * 6)
        machine.own("claimable", 2, "late")
        machine.takeover("running", 4, "fit", 1, "reconfirm")
        machine.claim_then("claimable", "activate", "claimant", "claim", False)
        machine.recover_dead_claim("claimable", 0, 5, 1, True)
        failure = machine._failure(AssertionError("a program to replay"))
    finally:
        machine.teardown()
    assert _render_and_run(machine, failure, tmp_path) == 0


def test_aliases_from_an_earlier_reopen_are_relearned_at_the_next():
    """Found by the CI fuzz campaign on sqlite-file-local: the thief's grant
    time differs from its first heartbeat (its clock runs 1 ms ahead), a reopen
    rebuilds the lease with the heartbeat as grant time, a pulse moves the
    heartbeat onto the grant time, and a second reopen rebuilds it exactly as
    the model holds it. The alias the first reopen taught must not outlive it."""
    machine = _builtin("sqlite-file-local")
    state = machine()
    try:
        state.setup(offsets=(0, 0, 1, 0, 0, 0), more=[])
        state.claim_and_own(actor=0, at="reading", evidence="fit", expected="row", run="claimable")
        state.recover_dead_claim(claimant=0, edge=1, observer=0, run="claimable")
        grant = state.steal(actor=2, at="reading", evidence="fit", expected="row", run="running")
        state.activate_grant(expected="row", grant=grant)
        state.crash_store()
        assert state.aliases  # the first reopen rebuilt the thief's grant time
        state.delayed_pulse(gap=1, run="running")
        state.crash_store()
        assert not state.aliases
    finally:
        state.teardown()
