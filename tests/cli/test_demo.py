"""``runstore demo``: the newcomer's first run, end to end and in its parts."""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

import runstore
from runstore import Clock, ManualClock
from runstore.cli._demo import RUN_PREFIX, STEPS, SpedUpClock, _Demo
from runstore.model import ModelRunStore

posix_only = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")


def run_demo(*args: str, timeout_s: float = 20) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "runstore.cli._demo", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


@posix_only
@pytest.mark.processes
@pytest.mark.timeout(30)
def test_demo_completes_every_run_exactly_once_despite_a_kill_and_a_stop() -> None:
    """3 workers, 6 runs: one SIGKILLed, one SIGSTOPped; survivors take over with
    evidence, the stopped worker's late write is refused, exit status 0."""
    started = time.monotonic()
    result = run_demo("--workers", "3", "--runs", "6", "--seed", "7")
    elapsed = time.monotonic() - started
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert elapsed < 20
    assert "SIGKILL" in out
    assert "SIGSTOP" in out
    assert "SIGCONT" in out
    assert "(evidence: same-host-pid-dead)" in out
    assert "(evidence: lease-expired)" in out
    assert "refused: FenceLost" in out
    assert "lost the lease" in out
    assert "runs completed exactly once: 6 of 6" in out
    assert "every invariant held" in out
    assert "INVARIANT BROKEN" not in out


@posix_only
@pytest.mark.processes
@pytest.mark.timeout(30)
def test_demo_keeps_the_database_it_was_given(tmp_path: Path) -> None:
    """--db PATH writes the runs there (every one completed) and refuses to reuse it."""
    db = tmp_path / "demo.db"
    result = run_demo("--workers", "2", "--runs", "3", "--db", str(db))
    assert result.returncode == 0, result.stdout + result.stderr
    with runstore.open(db, clock=ManualClock(0)) as store:
        for n in range(1, 4):
            row = store.get(f"{RUN_PREFIX}{n:02d}")
            assert row.status == "completed"
            assert json.loads(row.state_json)["step"] == STEPS
    again = run_demo("--runs", "1", "--db", str(db))
    assert again.returncode == 2
    assert "already exists" in again.stderr


@posix_only
@pytest.mark.processes
@pytest.mark.timeout(30)
def test_runstore_command_dispatches_to_the_demo() -> None:
    """`runstore demo` (the console entry point's module) runs the same demo."""
    result = subprocess.run(
        [sys.executable, "-m", "runstore.cli", "demo", "--workers", "1", "--runs", "1"],
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "every invariant held" in result.stdout


@pytest.mark.parametrize(
    "args", [["--workers", "0"], ["--runs", "0"], ["--speed", "0"], ["--speed", "-1"]]
)
def test_demo_refuses_non_positive_options(args: list[str]) -> None:
    """Nonsense sizes exit 2 before anything starts."""
    from runstore.cli._demo import main

    assert main(args) == 2


def tally_of(store: ModelRunStore, runs: int) -> tuple[int, list[str]]:
    options = argparse.Namespace(workers=1, runs=runs, db=None, seed=0, speed=50.0, timeout=5)
    lines: list[str] = []
    demo = _Demo(options, lines.append)
    return demo.tally(store), lines


def test_tally_fails_when_a_run_was_never_completed() -> None:
    """The verdict is computed from the store: an unfinished run exits 1."""
    store = ModelRunStore(clock=ManualClock(0))
    store.create(f"{RUN_PREFIX}01", json.dumps({"step": 0}))
    status, lines = tally_of(store, 1)
    assert status == 1
    assert any(line.startswith("INVARIANT BROKEN") for line in lines)
    assert "  runs completed exactly once: 0 of 1" in lines


def test_sped_up_clock_is_a_clock_running_faster_than_real_time() -> None:
    """The demo's clock satisfies the Clock protocol and moves `speed` times faster."""
    clock = SpedUpClock(time.time_ns(), 1000.0)
    assert isinstance(clock, Clock)
    start = clock.now_ms()
    clock.sleep_until(start + 50)  # 50 demo ms = 0.05 real ms
    assert clock.now_ms() >= start + 50
    asyncio.run(clock.asleep_until(clock.now_ms() + 50))
    assert clock.real_seconds(50_000) == pytest.approx(0.05)
