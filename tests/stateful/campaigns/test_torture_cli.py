"""``runstore torture``: real worker processes on one SQLite file, faults
injected, the history and the final state checked; the command line's
progress, verdict, rate and exit statuses."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from runstore.stateful import load_history
from runstore.stateful._campaigns._torture import TortureConfig, run_torture
from runstore.stateful._histories import _workload

pytestmark = [pytest.mark.processes, pytest.mark.slow]


def test_the_clean_store_passes_and_the_command_reports_as_it_goes(tmp_path):
    """On the shipped store the command prints progress, the verdict and the
    operations checked per second, and exits 0."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "runstore.cli",
            "torture",
            "--db",
            str(tmp_path / "db"),
            "--seconds",
            "1.5",
            "--out",
            str(tmp_path / "out"),
            "--seed",
            "7",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("torture: 3 workers, 1.5 s on")
    assert lines[1] == (
        "torture: workloads mixed, cancel, candidates, batches, lineage, zombies, "
        "in turns of 400 ms"
    )
    assert any(
        line.endswith("pairs the workloads aim at were in flight together")
        or "pairs the workloads aim at were in flight together (not: " in line
        for line in lines
    )
    assert any(" operations  " in line and "kills" in line for line in lines)
    assert any(line.startswith("linearizable: ") for line in lines)
    assert any(line.endswith("operations checked per second") for line in lines)
    assert lines[-1] == "torture: passed"


def test_faults_leave_pending_calls_and_the_history_still_checks(tmp_path):
    """Frequent kills and stops: a killed worker's last call (if it was in one)
    is pending, its replacement records in a file of its own, and the verdict
    is linearizable."""
    result = run_torture(
        TortureConfig(
            db=str(tmp_path / "db"),
            out=str(tmp_path / "out"),
            seconds=2.0,
            fault_every_s=0.25,
            seed=3,
            quiet=True,
        )
    )
    assert result.status == 0, result.verdict.summary()
    assert result.kills >= 1
    assert result.stops >= 1
    files = sorted(result.history_dir.glob("*.jsonl"))
    assert len(files) == 3 + result.kills
    operations = load_history(files)
    assert len(operations) == result.operations
    assert all(op.unknown for op in operations if op.status == "pending")
    assert result.invariant_failure is None


def test_a_walk_that_raises_makes_the_run_inconclusive(tmp_path, capfd, monkeypatch):
    """An owner whose walk raises (a mistake of the torture, not of the store)
    ends its worker with its own exit status: the run, cut short, is reported
    inconclusive (status 3), never passed; the traceback is on stderr."""
    # The factory plants its mistake in the process that calls it, this one
    # too: the walk is put back when the test ends, for the tests after it.
    monkeypatch.setattr(_workload.Worker, "step", _workload.Worker.step)
    result = run_torture(
        TortureConfig(
            db=str(tmp_path / "db"),
            out=str(tmp_path / "out"),
            store="tests.stateful.campaigns.walk_mistake:factory",
            seconds=1.0,
            kills=False,
            stops=False,
            seed=5,
        )
    )
    assert result.verdict.ok, result.verdict.summary()
    assert result.status == 3
    captured = capfd.readouterr()
    assert "a mistake planted in the walk" in captured.err
    assert "stopped on an error of its own" in captured.out


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--db", "postgresql://127.0.0.1:1/nowhere"], "runstore torture: "),
        (["--db", "no/such/folder/db"], "cannot open no/such/folder/db: persistence_failed"),
        (["--db", "x.db", "--store", "no_such_module:factory"], "cannot load the store factory"),
        (["--db", "x.db", "--skew-ms", "20000"], "--skew-ms must be within"),
        (["--db", "x.db", "--restart-command", "true"], "--db must be its URL"),
        (["--db", "x.db", "--workload", "nope"], "argument --workload: invalid choice"),
        (["--db", "x.db", "--phase-ms", "0"], "--phase-ms must be positive"),
    ],
)
def test_unusable_targets_and_options_exit_2_with_a_message(tmp_path, arguments, message):
    """Refused before any worker starts: a target that cannot be opened (a
    PostgreSQL server that is not there, or a version that cannot open URLs),
    a factory that cannot be imported, a skew past the allowance, a restart
    command for a target that is not a PostgreSQL server, a workload that does
    not exist, turns of no length."""
    done = subprocess.run(
        [sys.executable, "-m", "runstore.cli", "torture", *arguments],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 2
    assert message in done.stderr


def test_a_url_is_printed_without_its_password():
    """Progress lines and errors show the target with any password masked."""
    from runstore.stateful._campaigns._torture import shown_target

    assert shown_target("postgresql://u:pw@db:5432/runs") == "postgresql://u:***@db:5432/runs"
    assert shown_target("postgresql://u@db/runs?password=pw&sslmode=require") == (
        "postgresql://u@db/runs?password=***&sslmode=require"
    )
    assert shown_target("/tmp/runs.db") == "/tmp/runs.db"


def test_on_a_throwaway_postgres_server_restarted_by_command(tmp_path):
    """What CI does: ``python -m runstore.stateful._targets._pgserver`` prints a fresh
    database's URL; the torture runs on it with ``--restart-command "kill
    -USR1 <pid>"`` (the command returns before the server is back: the
    torture waits for its start time to change), restarts it, and passes;
    SIGTERM stops the server and removes its folder."""
    import signal
    import urllib.parse
    from pathlib import Path

    from runstore.stateful._targets import _postgres

    if _postgres._binary("initdb") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("PostgreSQL binaries not found (CI=true requires the PostgreSQL tests)")
        pytest.skip("PostgreSQL binaries not found")
    server = subprocess.Popen(
        [sys.executable, "-m", "runstore.stateful._targets._pgserver"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        url = server.stdout.readline().strip()
        assert url.startswith("postgresql://")
        folder = Path(urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)["host"][0])
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "runstore.cli",
                "torture",
                "--db",
                url,
                "--seconds",
                "2",
                "--no-kills",
                "--no-stops",
                "--restart-command",
                f"kill -USR1 {server.pid}",
                "--out",
                str(tmp_path / "out"),
                "--seed",
                "5",
            ],
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        lines = done.stdout.splitlines()
        assert any(line.endswith(" restarts") and " 0 restarts" not in line for line in lines)
        assert lines[-1] == "torture: passed"
    finally:
        server.send_signal(signal.SIGTERM)
        status = server.wait(60)
        if server.stdout is not None:
            server.stdout.close()
    assert status == 0
    assert not folder.exists()
