"""``runstore fuzz`` says once, at the end, what it found: the check, the seed
that replays the campaign (a ``runstore fuzz --seed`` line, never a
``@reproduce_failure`` hint, which cannot work from the command line),
whether shrinking finished or the time budget cut it, every file written, and
why many failing executions gave one file. A suite defect is labelled as one.
``--store MODULE:FACTORY`` honours the capabilities the factory declares and
those given on the command line.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

import runstore
from runstore import FenceLost, ManualClock
from runstore.model import ModelRunStore
from runstore.stateful import Capabilities
from runstore.stateful._base import _observe
from runstore.stateful._campaigns._fuzz import campaign_target, run_campaign
from runstore.stateful._targets._builtin import BUILTIN_TARGETS, capabilities_of, store_target

ROOT = Path(__file__).resolve().parents[3]


def in_memory_store(clock: ManualClock, path: Path) -> runstore.SqliteRunStore:
    """An in-memory store that declares nothing (so cannot be reopened)."""
    return runstore.open(":memory:", clock=clock)


def declared_store(clock: ManualClock, path: Path) -> runstore.SqliteRunStore:
    """An in-memory store whose factory declares that it cannot reopen."""
    return runstore.open(":memory:", clock=clock)


declared_store.capabilities = Capabilities(reopen=False)  # type: ignore[attr-defined]


class LateHeartbeat(ModelRunStore):
    """Refuses every heartbeat (a disagreement with the reference)."""

    def heartbeat(self, run_id, owner, now_ms):
        return FenceLost()


def refuses_heartbeats(clock: ManualClock, path: Path) -> LateHeartbeat:
    return LateHeartbeat(clock=clock)


refuses_heartbeats.capabilities = Capabilities(reopen=False)  # type: ignore[attr-defined]


class LateInTheDay(ModelRunStore):
    """Refuses heartbeats once the store clock reaches 200 s: a failure whose
    program needs several steps, so shrinking has work to do."""

    def __init__(self, *, clock: ManualClock) -> None:
        super().__init__(clock=clock)
        self.late_clock = clock

    def heartbeat(self, run_id, owner, now_ms):
        if self.late_clock.now_ms() >= 200_000:
            return FenceLost()
        return super().heartbeat(run_id, owner, now_ms)


def slow_after_a_failure(clock: ManualClock, path: Path) -> LateInTheDay:
    """``LateInTheDay``, but the first example after a failure (a shrink
    attempt) takes until the campaign's deadline to open, so shrinking cannot
    finish inside the budget."""
    observer = _observe.current()
    if observer is not None and observer.failures == 1 and observer.deadline is not None:
        time.sleep(max(0.0, observer.deadline - time.monotonic()))
    return LateInTheDay(clock=clock)


slow_after_a_failure.capabilities = Capabilities(reopen=False)  # type: ignore[attr-defined]


class CampaignClock:
    """A campaign's time source in a test (seconds): it stands still, and
    moves only when an example builds its store, by what ``cost(n)`` says
    the campaign's ``n``-th example takes. So where the budget ends is
    decided by the test, not by the machine's load."""

    def __init__(self, cost) -> None:
        self.now = 0.0
        self.cost = cost

    def __call__(self) -> float:
        return self.now


#: The clock the ``timed_*`` factories move; each test sets its own.
CAMPAIGN_CLOCK: CampaignClock | None = None


def timed_store(clock: ManualClock, path: Path) -> ModelRunStore:
    """The reference model as a store, whose examples cost campaign time on
    ``CAMPAIGN_CLOCK`` (only inside a campaign: the target probe is free)."""
    observer = _observe.current()
    if CAMPAIGN_CLOCK is not None and observer is not None:
        CAMPAIGN_CLOCK.now += CAMPAIGN_CLOCK.cost(observer.examples)
    return ModelRunStore(clock=clock)


timed_store.capabilities = Capabilities(reopen=False)  # type: ignore[attr-defined]
#: The same factory under another name: a second target.
timed_store_too = timed_store


def _run(spec: str, tmp_path: Path, **options) -> tuple[int, str]:
    stream = io.StringIO()
    code = run_campaign(
        [store_target(spec)],
        db_dir=tmp_path / "db",
        out_dir=tmp_path / "out",
        stream=stream,
        **options,
    )
    return code, stream.getvalue()


def test_a_failure_ends_in_one_summary_with_seed_shrinking_and_file(tmp_path: Path):
    """The summary names the check, the seed (with the line that replays the
    campaign), that shrinking finished, the file written and why the failing
    executions gave one file; no ``@reproduce_failure`` hint anywhere."""
    code, out = _run(
        "tests.stateful.campaigns.test_fuzz_output:refuses_heartbeats", tmp_path, examples=100
    )
    assert code == 1
    assert out.count("fuzz summary:") == 1
    summary = out[out.index("fuzz summary:") :]
    # The seed is random: the first failing check of a store that refuses
    # heartbeats depends on the program (OutcomeMismatch most often).
    assert re.search(r"FAILED [A-Z][A-Za-z]+", summary), summary
    assert "shrinking: finished" in summary
    (written,) = (tmp_path / "out").glob("test_regression_*.py")
    assert f"file written: {written}" in summary
    assert f"runstore replay {written}" in summary
    assert "failing executions" in summary
    assert "one file holds the shortest program" in summary
    assert "reproduce_failure" not in out
    seed_line = next(line for line in out.splitlines() if "chosen at random" in line)
    seed = int(seed_line.split()[2])
    assert (
        "runstore fuzz --store tests.stateful.campaigns.test_fuzz_output:refuses_heartbeats "
        f"--examples 100 "
        f"--seed {seed}"
        in summary
        or f"--seed {seed}" in summary
    )


def test_a_shrink_cut_by_the_time_budget_is_said_so(tmp_path: Path):
    """When the budget runs out while shrinking, the summary says shrinking was
    cut by the time budget, and the file holds the shortest program seen."""
    code, out = _run(
        "tests.stateful.campaigns.test_fuzz_output:slow_after_a_failure",
        tmp_path,
        minutes=0.1,
        seed_value=7,
    )
    assert code == 1, out
    assert "shrinking: cut by the time budget" in out
    assert "seed 7" in out
    assert list((tmp_path / "out").glob("test_regression_*.py"))


def test_every_target_runs_its_share_of_a_time_budget_and_its_end_is_no_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Examples of 0.25 s against a budget of 15 s for two targets: each
    target runs its 7.5 s share (up to 30 examples) in batches sized by what
    an example cost, so that no example starts after its deadline (a second
    batch of 20 would have crossed it), and the campaign exits 0, clean,
    having run both targets."""
    clock = CampaignClock(lambda n: 0.25)
    monkeypatch.setattr(sys.modules[__name__], "CAMPAIGN_CLOCK", clock)
    stream = io.StringIO()
    targets = [
        store_target(f"tests.stateful.campaigns.test_fuzz_output:{name}")
        for name in ("timed_store", "timed_store_too")
    ]
    code = run_campaign(
        targets,
        minutes=0.25,
        seed_value=7,
        db_dir=tmp_path / "db",
        out_dir=tmp_path / "out",
        stream=stream,
        clock=clock,
    )
    out = stream.getvalue()
    assert code == 0, out
    assert "FlakyStrategyDefinition" not in out
    assert "seed 7: nothing found" in out
    assert "fuzz summary: 2 target(s)" in out
    for name in ("timed_store", "timed_store_too"):
        line = next(
            line for line in out.splitlines() if f"test_fuzz_output:{name}: clean (" in line
        )
        ran = int(line.split("clean (")[1].split()[0])
        assert 20 < ran <= 30, line  # more than the first batch; at most the share
    # Each share is 7.5 s; the last example of a share may end 0.25 s after it.
    assert clock.now <= 2 * (7.5 + 0.25)
    assert not list((tmp_path / "out").glob("*"))


def test_a_budget_that_ends_inside_an_example_mid_batch_discards_the_cut_example(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Examples of 10 ms fill a batch of 20; the 6th takes 100 s, so the
    budget (6 s) ends inside it, in the middle of the batch. The example that
    starts next is cut before it draws anything and discarded: the campaign
    exits 0, clean, reporting the 6 examples that ran."""
    clock = CampaignClock(lambda n: 100.0 if n == 6 else 0.01)
    monkeypatch.setattr(sys.modules[__name__], "CAMPAIGN_CLOCK", clock)
    stream = io.StringIO()
    result = campaign_target(
        store_target("tests.stateful.campaigns.test_fuzz_output:timed_store"),
        seconds=6.0,
        examples=None,
        seed_value=7,
        db_dir=tmp_path / "db",
        out_dir=tmp_path / "out",
        stream=stream,
        clock=clock,
    )
    out = stream.getvalue()
    assert result.found is None, out
    assert result.examples == 6, out
    assert out.rstrip().endswith("test_fuzz_output:timed_store: clean"), out
    assert "FlakyStrategyDefinition" not in out


def test_a_clean_campaign_says_nothing_was_found(tmp_path: Path):
    """A clean campaign's summary says so, with the seed."""
    code, out = _run(
        "tests.stateful.campaigns.test_fuzz_output:declared_store",
        tmp_path,
        examples=10,
        seed_value=3,
    )
    assert code == 0, out
    assert "seed 3: nothing found" in out
    assert "declared_store: clean" in out


def test_capabilities_come_from_the_factory_or_its_module():
    """A factory's own ``capabilities`` wins; else its module's; else the default."""
    from tests.zoo import suspend_keeps_claim

    assert capabilities_of(declared_store, Capabilities()).reopen is False
    assert capabilities_of(in_memory_store, Capabilities()) == Capabilities()
    module_declared = capabilities_of(suspend_keeps_claim.factory, Capabilities())
    assert module_declared == suspend_keeps_claim.capabilities


def test_an_undeclared_in_memory_store_fails_on_reopen_and_is_told_how_to_declare(
    tmp_path: Path,
):
    """Without any declaration the store is assumed to reopen, so an in-memory
    one loses its state at the first crash; the summary says how to declare it."""
    code, out = _run(
        "tests.stateful.campaigns.test_fuzz_output:in_memory_store",
        tmp_path,
        examples=40,
        seed_value=1,
    )
    assert code == 1
    assert "CommittedStateLost" in out
    assert "--no-reopen" in out


@pytest.mark.parametrize(
    "flags",
    [["--no-reopen"], ["--capabilities", "reopen=false"], []],
    ids=["no-reopen", "capabilities", "declared"],
)
def test_store_capabilities_are_honoured_from_the_command_line(flags, tmp_path: Path, capfd):
    """``--no-reopen`` and ``--capabilities reopen=false`` make an in-memory
    store fuzz clean (no ``CommittedStateLost`` at once), as does a factory
    that declares ``reopen=False`` itself."""
    from runstore import cli

    spec = "tests.stateful.campaigns.test_fuzz_output:" + (
        "declared_store" if not flags else "in_memory_store"
    )
    arguments = ["fuzz", "--store", spec, *flags, "--examples", "40", "--seed", "1"]
    arguments += ["--db", str(tmp_path / "db"), "--out", str(tmp_path / "out")]
    code = cli.main(arguments)
    out = capfd.readouterr().out
    assert code == 0, out
    assert "nothing found" in out


def test_an_unknown_capability_is_a_usage_error(capsys):
    """A capability name the suite does not know exits 2 and lists the known ones."""
    from runstore import cli

    code = cli.main(
        [
            "fuzz",
            "--store",
            "tests.stateful.campaigns.test_fuzz_output:in_memory_store",
            "--capabilities",
            "teleport=true",
            "--examples",
            "1",
        ]
    )
    assert code == 2
    assert "reopen" in capsys.readouterr().err


def test_a_suite_defect_is_labelled_as_one_and_its_file_replays_the_reference(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """A broken reference step (planted) is reported as a suite defect, never a
    store failure; its file is named for the defect and replays the program on
    the reference model: it passes once the reference is sound and fails, with
    ``ReferenceInvariantViolation``, while the defect is there."""
    from tests.stateful.campaigns.test_suite_defects import plant_broken_reference_heartbeat

    plant_broken_reference_heartbeat(monkeypatch)
    stream = io.StringIO()
    result = campaign_target(
        BUILTIN_TARGETS["sqlite-sql"],
        seconds=None,
        examples=60,
        seed_value=2,
        db_dir=tmp_path / "db",
        out_dir=tmp_path / "out",
        stream=stream,
        shrink=False,
    )
    out = stream.getvalue()
    assert result.suite_defect, out
    assert "SUITE DEFECT" in out
    assert result.path is not None
    assert result.path.name.startswith("test_suite_defect_")
    source = result.path.read_text()
    assert "not a failure of the store under test" in source
    assert "reference=True" in source
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))

    def replay(path: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(path)],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )

    assert replay(result.path).returncode == 0  # the reference here is sound
    planted = result.path.with_name("test_planted_" + result.path.name)
    planted.write_text(
        source
        + "\n\nimport pytest as _pytest\n"
        + "from tests.stateful.campaigns.test_suite_defects import "
        + "plant_broken_reference_heartbeat\n"
        + "plant_broken_reference_heartbeat(_pytest.MonkeyPatch())\n"
    )
    again = replay(planted)
    assert again.returncode == 1
    assert "ReferenceInvariantViolation" in again.stdout


def test_fuzz_loads_the_hypothesis_profile_named_in_the_environment(tmp_path: Path):
    """``HYPOTHESIS_PROFILE=deep runstore fuzz`` runs its batches under the
    ``deep`` profile (100 steps per example), and says so."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["HYPOTHESIS_PROFILE"] = "deep"
    code = (
        "import sys\n"
        "from hypothesis import settings\n"
        "from runstore.cli import main\n"
        "status = main(sys.argv[1:])\n"
        "print('steps per example:', settings.default.stateful_step_count)\n"
        "sys.exit(status)\n"
    )
    arguments = [
        "fuzz",
        "--store",
        "tests.stateful.campaigns.test_fuzz_output:declared_store",
        "--examples",
        "2",
    ]
    arguments += ["--seed", "1", "--db", str(tmp_path / "db"), "--out", str(tmp_path / "out")]
    done = subprocess.run(
        [sys.executable, "-c", code, *arguments],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "fuzz: Hypothesis profile deep" in done.stdout
    assert "steps per example: 100" in done.stdout
