"""Three ``runstore worker`` processes over one database, one SIGKILLed and one
SIGSTOPped in the middle of a run: every run completes exactly once.

Real processes, real signals, a real database (a SQLite file; PostgreSQL on
the tests' throwaway server). The processes share a ``FileClock`` that only
this test moves, in steps of ``STEP_MS``; between steps the test waits, in
real time, for progress: up to a second while a live worker's heartbeat is
more than ``FRESH_MS`` old, and, once a run of a killed or frozen worker has
been stale for a scan interval, a few seconds for a survivor to take it
over; never for lease timing itself. The stopped worker is stopped between
two of its transactions (a process frozen inside one would hold SQLite's
write lock, or its rows' locks on PostgreSQL): when it holds one, it is
continued and stopped again a step later.

What must hold (issue 27):

- every run completed, and none completed twice: one ``settled completed``
  line per run across the three logs, by the owner that the run's ownership
  facts show releasing it;
- the frozen worker, continued after the others finish, writes nothing for
  the runs it held when it was stopped: its log shows ``lost`` for each and
  no ``settled``;
- ``check_invariants()`` is clean;
- each run of the killed and the frozen worker is taken over with evidence
  once, by a survivor, after its last heartbeat is stale, and at most
  staleness plus two heartbeat intervals plus one step of the clock after
  the signal; the delays are printed.

Every fleet here is a campaign test (CI's campaign step): each takes a few
seconds when the machine is quiet, but under the README command's parallel
load a fleet of nine threads in four processes is the kind of test that
makes a run slow or flaky. The default run keeps the command's own tests
(``tests/cli/test_worker_cli.py``: one worker, a few runs, SIGTERM and SIGINT
stops, the grace running out).
"""

from __future__ import annotations

import contextlib
import json
import signal
import sqlite3
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

import runstore
from runstore import HEARTBEAT_INTERVAL_MS, HEARTBEAT_STALE_AFTER_MS
from runstore.cli._clocks import FileClock

from .. import _postgres
from ._processes import PROGRESS_S, WorkerProcess, wait_until

posix_only = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

T0 = 1_700_000_000_000
#: How far the test moves the shared clock at a time.
STEP_MS = 250
#: How old a live worker's heartbeat may be before the test slows the clock
#: down for it (a run claimed while the clock moved on starts with an older
#: heartbeat than the clock, and the fleet supervisor pulses one interval
#: after its last pulse ended).
FRESH_MS = 5 * HEARTBEAT_INTERVAL_MS
#: The longest a takeover may come after the signal, and the shortest.
LATEST_MS = HEARTBEAT_STALE_AFTER_MS + 2 * HEARTBEAT_INTERVAL_MS + STEP_MS
EARLIEST_MS = HEARTBEAT_STALE_AFTER_MS - FRESH_MS
#: Real seconds the test gives the survivors, once an orphan has been stale
#: for a scan interval, to take it over before it moves the clock on all the
#: same (a takeover due on the clock then has real time to
#: happen, as it would on a real clock; a late one is the worker's).
TAKEOVER_S = 3.0
#: Real seconds a fleet may take before the test gives up.
FLEET_S = 120.0
KILLED, FROZEN, SURVIVOR = "host-a", "host-b", "host-c"
#: Runs each worker holds at most: the survivor has room for every run the
#: other two hold when they are signalled.
CONCURRENCY = {KILLED: 2, FROZEN: 2, SURVIVOR: 4}


@attrs.define
class Fleet:
    """The database, the shared clock, the driver's own store and the workers."""

    backend: str
    target: str
    folder: Path
    clock: FileClock
    store: Any
    workers: dict[str, WorkerProcess] = attrs.field(factory=dict)
    dead: set[str] = attrs.field(factory=set)
    #: Runs of a killed or frozen worker not yet taken over: their last heartbeat.
    orphans: dict[str, int] = attrs.field(factory=dict)
    #: A bug of ``planted_worker.py`` every worker runs with, or None.
    plant: str | None = None

    def start(self, host: str, *options: str) -> WorkerProcess:
        """A worker process with ``host`` as its host id, on the shared clock."""
        clock_path = self.clock.path
        worker = WorkerProcess(
            host,
            self.target,
            "checkpoints",
            clock_path,
            self.folder,
            "--host-id",
            host,
            *options,
            plant=self.plant,
        )
        self.workers[host] = worker
        return worker

    def running(self) -> list[Any]:
        """The running rows now, with their state."""
        return list(self.store.list_runs(status="running", limit=1000, with_state=True).runs)

    def settled(self) -> int:
        """How many runs are completed, failed or cancelled."""
        done = ("completed", "failed", "cancelled")
        return len(self.store.list_runs(status=done, limit=1000).runs)

    def step(self) -> None:
        """Wait (a second at most) until every live worker's held runs have a
        heartbeat at most ``FRESH_MS`` old, then move the clock on by
        ``STEP_MS``; fail when one is half-way to stale."""
        now = self.clock.now_ms()

        def behind(limit_ms: int) -> list[tuple[str, str, int | None]]:
            return [
                (row.run_id, row.owner.host_id, row.heartbeat_at_ms)
                for row in self.running()
                if row.owner is not None
                and row.owner.host_id not in self.dead
                and (row.heartbeat_at_ms is None or row.heartbeat_at_ms < now - limit_ms)
            ]

        # A heartbeat older than FRESH_MS slows the clock down (a real second
        # per step) without stopping it: the fleet supervisor parks until one
        # interval after its last pulse ended, a time the clock must reach.
        with contextlib.suppress(AssertionError):
            wait_until(lambda: not behind(FRESH_MS), "the live workers' heartbeats", 1.0)
        late = behind(HEARTBEAT_STALE_AFTER_MS // 2)
        if late:
            # Half-way to stale with the clock slowed down: a worker is stuck.
            where = self.where()
            stacks = {host: self.workers[host].dump_stacks() for _, host, _ in late}
            raise AssertionError(f"heartbeats behind at {now}: {late}; {where}; stacks: {stacks}")
        # An orphan stale for a whole scan interval: a scan has come due since
        # it went stale, so give the survivors real time to act on it before
        # time moves on (a late takeover is then the worker's, not the
        # driver's; the test's bound finds it).
        due = [
            run_id
            for run_id, heartbeat in self.orphans.items()
            if heartbeat + HEARTBEAT_STALE_AFTER_MS + HEARTBEAT_INTERVAL_MS <= now
        ]
        if due:
            with contextlib.suppress(AssertionError):
                wait_until(
                    lambda: not self.still_orphaned(due) or self.room() <= 0,
                    "takeovers",
                    TAKEOVER_S,
                )
            for run_id in due:  # each orphan is waited for once
                del self.orphans[run_id]
        self.clock.advance(STEP_MS)
        time.sleep(0.005)

    def room(self) -> int:
        """How many more runs the live workers could hold now."""
        live = [host for host in self.workers if host not in self.dead]
        held = sum(1 for row in self.running() if row.owner and row.owner.host_id in live)
        return sum(CONCURRENCY[host] for host in live) - held

    def still_orphaned(self, run_ids: list[str]) -> list[str]:
        """Those of ``run_ids`` still owned by a killed or frozen worker."""
        left = []
        for run_id in run_ids:
            row = self.store.get(run_id)
            if row.status == "running" and row.owner is not None and row.owner.host_id in self.dead:
                left.append(run_id)
        return left

    def held_mid_run(self, host: str) -> list[Any]:
        """The runs ``host`` holds that have checkpointed at least once."""
        return [
            row
            for row in self.running()
            if row.owner is not None
            and row.owner.host_id == host
            and json.loads(row.state_json).get("step", 0) >= 1
        ]

    def step_until(self, done: Any, what: str) -> Any:
        deadline = time.monotonic() + FLEET_S
        while not (found := done()):
            if time.monotonic() > deadline:
                raise AssertionError(f"{what} did not happen within {FLEET_S:g} s: {self.where()}")
            self.step()
        return found

    def in_transaction(self) -> bool:
        """Whether a frozen process holds a write transaction open (which would
        block every writer on SQLite and the rows it locked on PostgreSQL)."""
        if self.backend == "sqlite-file":
            connection = sqlite3.connect(self.target, timeout=0.5, isolation_level=None)
            try:
                connection.execute("BEGIN IMMEDIATE")
                connection.execute("ROLLBACK")
                return False
            except sqlite3.OperationalError:
                return True
            finally:
                connection.close()
        import psycopg

        query = (
            "SELECT pid, xact_start FROM pg_stat_activity WHERE datname = current_database()"
            " AND state = 'idle in transaction' AND pid <> pg_backend_pid()"
        )
        with psycopg.connect(self.target, autocommit=True) as server:
            first = set(server.execute(query).fetchall())
            time.sleep(0.3)
            return bool(first & set(server.execute(query).fetchall()))

    def where(self) -> str:
        """The runs not completed and the logs' tails, for a failure message."""
        rows = self.store.list_runs(limit=1000).runs
        open_runs = [(r.run_id, r.status, r.owner) for r in rows if r.status != "completed"]
        logs = "; ".join(f"{name}: {w.diagnosis()}" for name, w in self.workers.items())
        return f"at {self.clock.now_ms() - T0} ms, not completed: {open_runs}; {logs}"


def _stopped(pid: int) -> bool:
    """Whether the process has stopped (state ``T`` in ``/proc``; elsewhere,
    assume the signal took effect)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rpartition(")")[2].split()[0] == "T"


def _failures(fleet: Fleet) -> list[dict[str, Any]]:
    """The settled lines of runs that did not complete, for a failure message."""
    return [e for e in _events(fleet, "settled") if e["status"] != "completed"]


def _events(fleet: Fleet, kind: str) -> list[dict[str, Any]]:
    return [event for worker in fleet.workers.values() for event in worker.events(kind)]


@pytest.fixture
def fleet(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Fleet]:
    backend = request.param
    if backend == "postgres":
        target = _postgres.database_url()
    else:
        target = str(tmp_path / "runs.db")
    clock = FileClock.create(tmp_path / "clock", T0)
    store = runstore.open(target, clock=clock)
    made = Fleet(backend, target, tmp_path, clock, store)
    try:
        yield made
    finally:
        for worker in made.workers.values():
            worker.end()
        store.close()
        clock.close()


def run_fleet(fleet: Fleet, runs: int) -> dict[str, Any]:
    """The fleet scenario over ``runs`` runs; returns the figures it measured."""
    for n in range(runs):
        fleet.store.create(f"run-{n:03d}", json.dumps({"n": n}))
    for host in (KILLED, FROZEN, SURVIVOR):
        fleet.start(host, "--concurrency", str(CONCURRENCY[host]), "--grace-seconds", "5")
    for worker in fleet.workers.values():
        worker.started()

    # SIGKILL a worker in the middle of a run.
    killed = fleet.workers[KILLED]
    fleet.step_until(lambda: fleet.held_mid_run(KILLED), f"{KILLED} holding a run mid-flight")
    killed.signal(signal.SIGKILL)
    assert killed.wait_exit() == -signal.SIGKILL
    fleet.dead.add(KILLED)
    killed_at = fleet.clock.now_ms()
    killed_runs = {
        row.run_id: row.heartbeat_at_ms for row in fleet.running() if row.owner.host_id == KILLED
    }
    fleet.orphans.update(killed_runs)

    # SIGSTOP another in the middle of a run, between two transactions.
    frozen = fleet.workers[FROZEN]
    while True:
        fleet.step_until(lambda: fleet.held_mid_run(FROZEN), f"{FROZEN} holding a run mid-flight")
        frozen.signal(signal.SIGSTOP)
        wait_until(lambda: _stopped(frozen.process.pid), f"{FROZEN} to stop")
        if not fleet.in_transaction():
            break
        frozen.signal(signal.SIGCONT)
        fleet.step()
    fleet.dead.add(FROZEN)
    frozen_at = fleet.clock.now_ms()
    frozen_runs = {
        row.run_id: row.heartbeat_at_ms for row in fleet.running() if row.owner.host_id == FROZEN
    }
    fleet.orphans.update(frozen_runs)

    # The survivor finishes everything, the orphaned runs included.
    fleet.step_until(lambda: fleet.settled() == runs, "every run settled")
    finished_at = fleet.clock.now_ms()

    # The frozen worker wakes up: each of its late writes is refused.
    frozen.signal(signal.SIGCONT)
    fleet.dead.discard(FROZEN)
    fleet.step_until(
        lambda: (
            {e["run_id"] for e in frozen.events() if e["event"] in ("lost", "settled")}
            >= set(frozen_runs)
        ),
        f"{FROZEN} to end each of its runs",
    )
    for host in (FROZEN, SURVIVOR):
        fleet.workers[host].signal(signal.SIGTERM)
    for host in (FROZEN, SURVIVOR):
        assert fleet.workers[host].wait_exit(PROGRESS_S) == 0, fleet.workers[host].diagnosis()
    return {
        "runs": runs,
        "killed_at": killed_at,
        "killed_runs": killed_runs,
        "frozen_at": frozen_at,
        "frozen_runs": frozen_runs,
        "finished_at": finished_at,
    }


def check_fleet(fleet: Fleet, figures: dict[str, Any]) -> list[str]:
    """Every assertion of the module docstring; returns the takeover report."""
    runs = figures["runs"]
    store = fleet.store
    store.check_invariants()
    rows = {row.run_id: row for row in store.list_runs(limit=1000, with_state=True).runs}
    assert len(rows) == runs
    not_completed = {r.run_id: r.status for r in rows.values() if r.status != "completed"}
    assert not not_completed, f"runs not completed: {not_completed}; {_failures(fleet)}"
    for row in rows.values():
        state = json.loads(row.state_json)
        assert state["done"] is True
        assert state["step"] == 3

    # None completed twice: one settled line per run, by the owner that the
    # ownership facts show releasing it.
    settled = _events(fleet, "settled")
    assert {e["status"] for e in settled} == {"completed"}
    per_run = Counter(e["run_id"] for e in settled)
    twice = sorted(run_id for run_id, count in per_run.items() if count > 1)
    assert not twice, f"runs settled more than once: {twice}"
    assert per_run == Counter(dict.fromkeys(rows, 1))
    for event in settled:
        facts = store.ownership_facts(event["run_id"])
        released = [fact for fact in facts if fact.transition == "released"]
        assert len(released) == 1
        assert attrs.asdict(released[0].owner) == event["owner"]
        assert facts[-1] == released[0]

    # The frozen worker: lost for every run it held when stopped, settled none.
    frozen = fleet.workers[FROZEN]
    assert figures["frozen_runs"]
    frozen_settled = {e["run_id"] for e in frozen.events("settled")}
    assert not frozen_settled & set(figures["frozen_runs"])
    for run_id in figures["frozen_runs"]:
        lost = [e for e in frozen.events("lost") if e["run_id"] == run_id]
        assert len(lost) == 1
        assert lost[0]["at_ms"] >= figures["finished_at"]
    assert not frozen.events("suspended")

    # Each orphaned run taken over with evidence, in time.
    report = []
    assert figures["killed_runs"]
    for victim, at_key, run_ids in (
        (KILLED, "killed_at", figures["killed_runs"]),
        (FROZEN, "frozen_at", figures["frozen_runs"]),
    ):
        signalled = figures[at_key]
        for run_id in sorted(run_ids):
            takeovers = [
                e
                for e in _events(fleet, "taken_over")
                if e["run_id"] == run_id and e["previous_owner"]["host_id"] == victim
            ]
            assert len(takeovers) == 1, takeovers
            (takeover,) = takeovers
            delay = takeover["at_ms"] - signalled
            report.append(
                f"{run_id} of {victim} ({'SIGKILL' if victim == KILLED else 'SIGSTOP'}):"
                f" taken over by {takeover['owner']['host_id']} {delay} ms after the signal,"
                f" {takeover['at_ms'] - run_ids[run_id]} ms after its last heartbeat"
                f" (evidence: {takeover['evidence']})"
            )
            assert takeover["evidence"] == "cross-host-unreachable-stale"
            assert takeover["at_ms"] - run_ids[run_id] > HEARTBEAT_STALE_AFTER_MS
            assert EARLIEST_MS < delay <= LATEST_MS, report[-1]
    return report


def _print_report(
    fleet: Fleet, report: list[str], capsys: pytest.CaptureFixture[str], started: float
) -> None:
    with capsys.disabled():
        print(
            f"\nfleet on {fleet.backend}: takeovers, on the shared clock (bound"
            f" {EARLIEST_MS} < delay <= {LATEST_MS} ms); {time.monotonic() - started:.1f} s real"
        )
        for line in report:
            print("  " + line)


@posix_only
@pytest.mark.processes
@pytest.mark.campaign
@pytest.mark.timeout(300)
@pytest.mark.parametrize("fleet", ["sqlite-file"], indirect=True)
def test_a_small_fleet_survives_a_kill_and_a_stop(
    fleet: Fleet, capsys: pytest.CaptureFixture[str]
) -> None:
    """24 runs, three workers: the killed and the frozen worker's runs are taken
    over after staleness and completed once; the frozen worker's late writes
    are refused."""
    started = time.monotonic()
    figures = run_fleet(fleet, 24)
    _print_report(fleet, check_fleet(fleet, figures), capsys, started)


@posix_only
@pytest.mark.processes
@pytest.mark.campaign
@pytest.mark.timeout(900)
@pytest.mark.parametrize("fleet", ["sqlite-file", "postgres"], indirect=True)
def test_a_fleet_of_three_over_200_runs_survives_a_kill_and_a_stop(
    fleet: Fleet, capsys: pytest.CaptureFixture[str]
) -> None:
    """The issue's fleet: 200 runs, three host ids, one worker SIGKILLed and one
    SIGSTOPped mid-run (continued after the others finish): every run completed
    once, every late write refused, invariants clean, takeovers in time."""
    started = time.monotonic()
    figures = run_fleet(fleet, 200)
    _print_report(fleet, check_fleet(fleet, figures), capsys, started)


@posix_only
@pytest.mark.processes
@pytest.mark.campaign
@pytest.mark.timeout(300)
@pytest.mark.parametrize("fleet", ["sqlite-file"], indirect=True)
@pytest.mark.parametrize(
    ("plant", "caught"),
    [
        pytest.param("zombie_settles", "settled more than once", id="zombie_settles"),
        pytest.param("slow_scans", "taken over by host-c", id="slow_scans"),
    ],
)
def test_the_fleet_checks_catch_a_planted_worker_bug(fleet: Fleet, plant: str, caught: str) -> None:
    """A worker that ignores the fence (the frozen one, woken, claims runs its
    peer finished) and one that looks for stale runs once a minute (takeovers
    come late) each fail the checks (tests/worker/planted_worker.py)."""
    fleet.plant = plant
    figures = run_fleet(fleet, 24)
    with pytest.raises(AssertionError, match=caught):
        check_fleet(fleet, figures)
