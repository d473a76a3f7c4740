"""``runstore worker``: the shared file clock, usage errors, the log lines, and
a clean stop on SIGTERM."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import runstore
from runstore.cli import main
from runstore.cli._clocks import FileClock

from .. import _postgres
from ..worker._processes import WorkerProcess, wait_until

posix_only = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")


def test_file_clock_is_shared_by_every_reader_of_the_file(tmp_path: Path) -> None:
    """A clock moved through one mapping reads the same through another, and
    the file holds the time as eight little-endian bytes."""
    path = tmp_path / "clock"
    driver = FileClock.create(path, 1_000)
    reader = FileClock(path)
    assert reader.now_ms() == 1_000
    assert driver.advance(250) == 1_250
    assert reader.now_ms() == 1_250
    assert path.read_bytes() == (1_250).to_bytes(8, "little")
    driver.set(2**40)
    assert reader.now_ms() == 2**40
    driver.close()
    reader.close()


def test_file_clock_is_shared_with_another_process(tmp_path: Path) -> None:
    """A child process reads the time the parent set, and sleeps until the
    parent moves the clock past its deadline."""
    path = tmp_path / "clock"
    driver = FileClock.create(path, 5_000)
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from runstore.cli._clocks import FileClock\n"
            f"c = FileClock({str(path)!r}); print(c.now_ms(), flush=True)\n"
            "c.sleep_until(9_000); print(c.now_ms(), flush=True)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "5000"
    driver.advance(3_999)
    driver.advance(1)
    out, _ = child.communicate(timeout=30)
    assert out.strip() == "9000"
    assert child.returncode == 0


def test_file_clock_wakes_a_sleeping_thread_and_never_moves_back(tmp_path: Path) -> None:
    """``sleep_until`` returns once the file reaches the deadline; the clock
    refuses to move backwards, and a read-only clock refuses to move."""
    driver = FileClock.create(tmp_path / "clock", 0)
    reader = FileClock(tmp_path / "clock")
    woke: list[int] = []

    def sleep() -> None:
        reader.sleep_until(100)
        woke.append(1)

    sleeper = threading.Thread(target=sleep)
    sleeper.start()
    driver.advance(99)
    assert not woke
    driver.advance(1)
    sleeper.join(timeout=30)
    assert woke == [1]
    with pytest.raises(ValueError, match="forward"):
        driver.set(50)
    with pytest.raises(ValueError, match="forward"):
        driver.advance(-1)
    with pytest.raises(ValueError, match="read-only"):
        reader.set(500)
    reader.sleep_until(0)  # a deadline passed returns at once


def test_file_clock_refuses_a_file_that_is_not_a_clock(tmp_path: Path) -> None:
    """A file shorter than eight bytes is not a clock file."""
    (tmp_path / "short").write_bytes(b"abc")
    with pytest.raises(ValueError, match="not a clock file"):
        FileClock(tmp_path / "short")
    with pytest.raises(ValueError):
        FileClock.create(tmp_path / "negative", -1)


T0 = 1_700_000_000_000


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        ("no-colon", "wants MODULE:HANDLER"),
        ("tests.worker.no_such_module:handle", "cannot load the handler"),
        ("tests.worker.process_handlers:no_such_handler", "cannot load the handler"),
        ("tests.worker.process_handlers:STEPS", "is not callable"),
    ],
)
def test_a_handler_that_cannot_be_loaded_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, spec: str, why: str
) -> None:
    """Exit 2 with one line saying why; nothing on standard output."""
    code = main(["worker", spec, "--db", str(tmp_path / "runs.db")])
    out, err = capsys.readouterr()
    assert code == 2
    assert out == ""
    assert err.startswith("runstore worker: ")
    assert why in err
    assert err.count("\n") == 1


def test_a_target_that_cannot_be_opened_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A database in a missing folder, a clock file that is not there, and an
    owner id the store refuses: exit 2, one line each."""
    handler = "tests.worker.process_handlers:at_once"
    code = main(["worker", handler, "--db", str(tmp_path / "missing" / "runs.db")])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    assert err.startswith("runstore worker: cannot open ")
    db = str(tmp_path / "runs.db")
    code = main(["worker", handler, "--db", db, "--clock-file", str(tmp_path / "nope")])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    assert err.startswith("runstore worker: cannot read the clock file ")
    code = main(["worker", handler, "--db", db, "--host-id", "bad\x00host"])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    assert err.startswith("runstore worker: ")
    assert err.count("\n") == 1


def test_a_url_that_cannot_be_opened_never_shows_its_password(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Refused at once (nothing listens on port 1): exit 2, the password hidden."""
    pytest.importorskip("psycopg")
    url = "postgresql://alice:s3cret-pw-9@127.0.0.1:1/runs?connect_timeout=5"
    code = main(["worker", "tests.worker.process_handlers:at_once", "--db", url])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    assert "cannot open" in err
    assert "s3cret-pw-9" not in err


@pytest.mark.parametrize("argument", [["--concurrency", "0"], ["--grace-seconds", "-1"], []])
def test_bad_options_are_usage_errors(
    capsys: pytest.CaptureFixture[str], argument: list[str]
) -> None:
    """argparse's exit 2 for a concurrency below 1, a negative grace, a missing --db."""
    db = [] if not argument else ["--db", "x.db"]
    with pytest.raises(SystemExit) as exit_:
        main(["worker", "tests.worker.process_handlers:at_once", *db, *argument])
    assert exit_.value.code == 2
    capsys.readouterr()


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


def _finished(db: str, clock: FileClock) -> dict[str, str]:
    with runstore.open(db, clock=clock) as store:
        store.check_invariants()
        return {row.run_id: row.status for row in store.list_runs(limit=1000).runs}


@posix_only
@pytest.mark.processes
@pytest.mark.timeout(120)
def test_json_lines_parse_and_a_sigterm_stops_cleanly(
    tmp_path: Path, shared: tuple[str, Path, FileClock]
) -> None:
    """With ``--json`` every line is one JSON object: started, then taken and
    settled completed for each run, then stopped after SIGTERM; exit 0."""
    db, clock_path, clock = shared
    worker = WorkerProcess("w", db, "at_once", clock_path, tmp_path, "--host-id", "host-j")
    try:
        started = worker.started()
        assert started["owner"]["host_id"] == "host-j"
        assert started["owner"]["pid"] == worker.process.pid
        assert started["db"] == db
        wait_until(lambda: len(worker.events("settled")) == 3, "three settled runs")
        worker.signal(signal.SIGTERM)
        assert worker.wait_exit() == 0, worker.diagnosis()
    finally:
        worker.end()
    events = worker.events()
    assert next(e["event"] for e in events) == "started"
    assert [e["event"] for e in events][-1] == "stopped"
    assert sorted(e["run_id"] for e in worker.events("taken")) == ["run-0", "run-1", "run-2"]
    settled = worker.events("settled")
    assert sorted(e["run_id"] for e in settled) == ["run-0", "run-1", "run-2"]
    assert {e["status"] for e in settled} == {"completed"}
    assert all(e["owner"] == started["owner"] and e["at_ms"] == T0 for e in settled)
    assert _finished(db, clock) == dict.fromkeys(["run-0", "run-1", "run-2"], "completed")
    assert worker.err_path.read_text() == ""


@posix_only
@pytest.mark.processes
@pytest.mark.timeout(120)
def test_text_lines_name_each_event(tmp_path: Path, shared: tuple[str, Path, FileClock]) -> None:
    """Without ``--json``: one readable line per event, the time first."""
    db, clock_path, _ = shared
    worker = WorkerProcess(
        "w", db, "at_once", clock_path, tmp_path, "--host-id", "host-t", as_json=False
    )
    try:
        wait_until(lambda: worker.text().count(" completed\n") == 3, "three settled lines")
        worker.signal(signal.SIGINT)
        assert worker.wait_exit() == 0, worker.diagnosis()
    finally:
        worker.end()
    lines = worker.text().splitlines()
    owner = f"host-t/{worker.process.pid}/"
    assert lines[0].startswith(f"worker {owner}")
    assert lines[0].endswith(f"started on {db} (concurrency 1)")
    assert lines[-1].startswith(f"worker {owner}")
    assert lines[-1].endswith(" stopped")
    for n in range(3):
        assert f"{T0} taken run-{n}" in lines
        assert f"{T0} settled run-{n} completed" in lines


@posix_only
@pytest.mark.processes
@pytest.mark.timeout(120)
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_held_run_is_suspended_when_the_grace_runs_out(
    tmp_path: Path, shared: tuple[str, Path, FileClock], signum: int
) -> None:
    """A handler that never returns: after the signal the worker takes nothing
    more, waits out the grace on its clock, suspends the run (fenced; its last
    checkpoint kept) and exits 0 within the grace."""
    db, clock_path, clock = shared
    worker = WorkerProcess(
        "w", db, "until_lost", clock_path, tmp_path, "--grace-seconds", "5", "--host-id", "h"
    )
    try:
        taken = wait_until(lambda: worker.events("taken"), "a run taken")[0]
        with runstore.open(db, clock=clock) as store:
            wait_until(
                lambda: store.get(taken["run_id"]).state_json == '{"holding": true}',
                "the handler's checkpoint",
            )
        signalled_ms = clock.now_ms()
        worker.signal(signum)
        stopping = wait_until(lambda: worker.events("stopping"), "the stopping line")[0]
        assert (stopping["at_ms"], stopping["grace_ms"]) == (signalled_ms, 5_000)
        assert stopping["signal"] == signal.Signals(signum).name
        # The grace is on the worker's clock, which the test moves in steps.
        while worker.process.poll() is None and clock.now_ms() < signalled_ms + 10_000:
            clock.advance(250)
            time.sleep(0.02)
        assert worker.wait_exit() == 0, worker.diagnosis()
    finally:
        worker.end()
    (suspended,) = worker.events("suspended")
    assert suspended["run_id"] == taken["run_id"]
    assert suspended["reason"] == "grace_expired"
    # Not before the grace ran out; after it, as soon as the worker saw the clock
    # (the test moves it a step every 20 ms of real time, whatever the load: a
    # few steps late is the machine, not the worker).
    assert signalled_ms + 5_000 <= suspended["at_ms"] <= signalled_ms + 5_000 + 8 * 250
    assert [e["run_id"] for e in worker.events("taken")] == [taken["run_id"]]
    assert not worker.events("settled")
    assert worker.events()[-1]["event"] == "stopped"
    with runstore.open(db, clock=clock) as store:
        row = store.get(taken["run_id"])
        assert (row.status, row.owner, row.state_json) == ("suspended", None, '{"holding": true}')
        store.check_invariants()
        others = [store.get(f"run-{n}").status for n in range(3) if f"run-{n}" != row.run_id]
    assert others == ["pending", "pending"]


@posix_only
@pytest.mark.processes
@pytest.mark.timeout(120)
def test_a_held_run_finishing_within_the_grace_is_settled(
    tmp_path: Path, shared: tuple[str, Path, FileClock]
) -> None:
    """SIGTERM while a run is mid-flight: the handler finishes within the grace,
    the run completes, nothing is suspended, exit 0."""
    db, clock_path, clock = shared
    worker = WorkerProcess(
        "w", db, "checkpoints", clock_path, tmp_path, "--grace-seconds", "30", "--host-id", "h"
    )
    try:
        taken = wait_until(lambda: worker.events("taken"), "a run taken")[0]
        worker.signal(signal.SIGTERM)
        wait_until(lambda: worker.events("stopping"), "the stopping line")
        while worker.process.poll() is None and clock.now_ms() < T0 + 10_000:
            clock.advance(250)
            time.sleep(0.05)
        assert worker.wait_exit() == 0, worker.diagnosis()
    finally:
        worker.end()
    assert [(e["run_id"], e["status"]) for e in worker.events("settled")] == [
        (taken["run_id"], "completed")
    ]
    assert not worker.events("suspended")
    assert _finished(db, clock)[taken["run_id"]] == "completed"


@posix_only
@pytest.mark.processes
@pytest.mark.timeout(120)
def test_a_postgres_worker_never_prints_the_password(tmp_path: Path) -> None:
    """On PostgreSQL (the tests' server trusts local connections, so a password
    in the URL is accepted and ignored): the started line names the database
    without the password, and no line anywhere holds it."""
    url = _postgres.database_url()
    secret = "s3cret-pw-4711"
    scheme, _, rest = url.partition("://")
    user, _, after = rest.partition("@")
    with_password = f"{scheme}://{user}:{secret}@{after}"
    clock = FileClock.create(tmp_path / "clock", T0)
    with runstore.open(url, clock=clock) as store:
        store.create("pg-run", json.dumps({"token": secret}))
    worker = WorkerProcess(
        "w", with_password, "at_once", tmp_path / "clock", tmp_path, "--host-id", "h"
    )
    try:
        started = worker.started()
        wait_until(lambda: worker.events("settled"), "the run settled")
        worker.signal(signal.SIGTERM)
        assert worker.wait_exit() == 0, worker.diagnosis()
    finally:
        worker.end()
        clock.close()
    assert started["db"].startswith(f"{scheme}://{user}@")
    assert secret not in worker.log_path.read_text()
    assert secret not in worker.err_path.read_text()
    assert [e["status"] for e in worker.events("settled")] == ["completed"]
