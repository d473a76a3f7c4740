"""``runstore worker`` with a coroutine-function handler runs it under ``AsyncWorker``:
the same lines, the same clean stop on a signal, the same grace (processes on a SQLite
file and a clock file the test moves; never on real lease time)."""

from __future__ import annotations

import json
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import runstore
from runstore.cli._clocks import FileClock

from ._processes import WorkerProcess, wait_until

T0 = 1_700_000_000_000

pytestmark = [
    pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals"),
    pytest.mark.processes,
    pytest.mark.timeout(120),
]


@pytest.fixture
def shared(tmp_path: Path) -> Iterator[tuple[str, Path, FileClock]]:
    """A SQLite file with three pending runs, and the clock file, at T0."""
    clock_path = tmp_path / "clock"
    clock = FileClock.create(clock_path, T0)
    db = str(tmp_path / "runs.db")
    with runstore.open(db, clock=clock) as store:
        for n in range(3):
            store.create(f"run-{n}", json.dumps({"n": n}))
    yield db, clock_path, clock
    clock.close()


def test_an_async_handler_settles_every_run_and_a_sigterm_stops_cleanly(
    tmp_path: Path, shared: tuple[str, Path, FileClock]
) -> None:
    db, clock_path, clock = shared
    worker = WorkerProcess(
        "w", db, "at_once_async", clock_path, tmp_path, "--host-id", "host-a", "--concurrency", "2"
    )
    try:
        started = worker.started()
        assert started["concurrency"] == 2
        wait_until(lambda: len(worker.events("settled")) == 3, "three settled runs")
        worker.signal(signal.SIGTERM)
        assert worker.wait_exit() == 0, worker.diagnosis()
    finally:
        worker.end()
    events = worker.events()
    assert next(e["event"] for e in events) == "started"
    assert [e["event"] for e in events][-2:] == ["stopping", "stopped"]
    settled = worker.events("settled")
    assert sorted(e["run_id"] for e in settled) == ["run-0", "run-1", "run-2"]
    assert {e["status"] for e in settled} == {"completed"}
    with runstore.open(db, clock=clock) as store:
        assert [store.get(f"run-{n}").state_json for n in range(3)] == [
            json.dumps({"n": n}) for n in range(3)
        ]
    assert worker.err_path.read_text() == ""


def test_an_async_handler_still_held_when_the_grace_runs_out_is_suspended(
    tmp_path: Path, shared: tuple[str, Path, FileClock]
) -> None:
    db, clock_path, clock = shared
    worker = WorkerProcess(
        "w", db, "until_lost_async", clock_path, tmp_path, "--grace-seconds", "5"
    )
    try:
        taken = wait_until(lambda: worker.events("taken"), "a run taken")[0]
        with runstore.open(db, clock=clock) as store:
            wait_until(
                lambda: store.get(taken["run_id"]).state_json == '{"holding": true}',
                "the handler's checkpoint",
            )
        signalled_ms = clock.now_ms()
        worker.signal(signal.SIGINT)
        wait_until(lambda: worker.events("stopping"), "the stopping line")
        while worker.process.poll() is None and clock.now_ms() < signalled_ms + 10_000:
            clock.advance(250)
            time.sleep(0.02)
        assert worker.wait_exit() == 0, worker.diagnosis()
    finally:
        worker.end()
    (suspended,) = worker.events("suspended")
    assert (suspended["run_id"], suspended["reason"]) == (taken["run_id"], "grace_expired")
    assert suspended["at_ms"] >= signalled_ms + 5_000
    assert worker.events()[-1]["event"] == "stopped"
    with runstore.open(db, clock=clock) as store:
        row = store.get(taken["run_id"])
        assert (row.status, row.owner, row.state_json) == ("suspended", None, '{"holding": true}')
        store.check_invariants()
