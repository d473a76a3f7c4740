"""``runstore demo``: several worker processes compete for runs on one database.

The coordinator creates the runs, starts the workers, and then breaks two of
them on purpose: one is killed with SIGKILL in the middle of a run, another is
stopped with SIGSTOP (between transactions) and continued once its run has been
taken over. The survivors notice the stale leases and take the orphaned runs
over with liveness evidence: ``same-host-pid-dead`` for the killed worker (it
was reaped, so its pid is gone) and ``lease-expired`` for the stopped one (its
pid is alive, but it stopped heartbeating). When the stopped worker wakes up,
its late writes are refused by the fence and its supervisor raises
``LeaseLost``. At the end every run must be completed exactly once.

With ``--db postgresql://...`` the runs live in that PostgreSQL database and
every worker is a host of its own (its own ``host_id``), as workers on
several machines would be: the survivors cannot ask the operating system
about a peer on another host, so both orphaned runs are taken over with
``cross-host-unreachable-stale`` evidence once their leases are stale, and
the stopped worker's late write is refused all the same. The URL reaches
the workers through their environment, never their command line, and its
password is never printed.

Every process runs the store on a sped-up clock (``--speed``, 50 times real
time by default), so a 30-second lease goes stale in well under a second. The
library never knows: it reads time only through the ``Clock`` it is given.

Usage::

    runstore demo [--workers N] [--runs M] [--db PATH|URL] [--seed S] [--speed X]

The exit status is 0 when every invariant held and 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import queue
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import runstore
from runstore import (
    HEARTBEAT_INTERVAL_MS,
    HEARTBEAT_STALE_AFTER_MS,
    Activated,
    OwnerId,
    RunRow,
    RunStore,
    RunStoreError,
    Transitioned,
)
from runstore.ownership import LeaseLost, lease_liveness, supervise, takeover_evidence

from ._ops._common import cannot_open, shown
from ._ops._format import printable_lines

STEPS = 4
STEP_MS = 2_000
SCAN_MS = 1_000
HOST = "demo-host"
RUN_PREFIX = "demo-run-"
#: How the coordinator hands the database to its workers (a URL may hold a password).
DB_VARIABLE = "RUNSTORE_DEMO_DB"


def _is_url(target: str | None) -> bool:
    scheme, sep, _ = (target or "").partition("://")
    return bool(sep) and scheme.lower() in ("postgresql", "postgres")


class SpedUpClock:
    """Demo time: milliseconds since ``origin_ns`` (wall clock), times ``speed``.

    Every process given the same origin and speed reads the same demo time, so
    they agree on staleness as processes on one host with synchronized clocks
    would. This is the demo application's clock; the library only sees a
    ``Clock``.
    """

    def __init__(self, origin_ns: int, speed: float) -> None:
        self.origin_ns = origin_ns
        self.speed = speed

    def now_ms(self) -> int:
        return int((time.time_ns() - self.origin_ns) * self.speed) // 1_000_000

    def real_seconds(self, demo_ms: float) -> float:
        """How long ``demo_ms`` of demo time takes in real time."""
        return max(0.0, demo_ms / self.speed / 1000)

    def sleep_until(self, deadline_ms: int) -> None:
        while (remaining := self.real_seconds(deadline_ms - self.now_ms())) > 0:
            time.sleep(remaining)

    async def asleep_until(self, deadline_ms: int) -> None:
        while (remaining := self.real_seconds(deadline_ms - self.now_ms())) > 0:
            await asyncio.sleep(remaining)


# --- the worker process -------------------------------------------------------------


class _Gated:
    """The worker's store, with every call taken under a gate.

    Holding the gate guarantees that no thread of this process is inside a
    store call, so no write lock is held: that is when the coordinator may stop
    the process with SIGSTOP without blocking everyone else.
    """

    def __init__(self, store: RunStore, gate: threading.Lock) -> None:
        self._store = store
        self._gate = gate

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._store, name)

        def gated(*args: Any, **kwargs: Any) -> Any:
            with self._gate:
                return method(*args, **kwargs)

        return gated


class _EventHandler(logging.Handler):
    """Sends the library's log records to the coordinator as timeline events."""

    def __init__(self, worker: _Worker) -> None:
        super().__init__(logging.WARNING)
        self.worker = worker

    def emit(self, record: logging.LogRecord) -> None:
        self.worker.emit("log", message=record.getMessage())


class _Worker:
    def __init__(self, options: argparse.Namespace) -> None:
        self.name: str = options.name
        self.clock = SpedUpClock(options.origin_ns, options.speed)
        self.raw = runstore.open(options.db or os.environ[DB_VARIABLE], clock=self.clock)
        self.gate = threading.Lock()
        self.store: Any = _Gated(self.raw, self.gate)
        self.me = OwnerId(options.host, os.getpid(), uuid.uuid4().hex[:8])
        self.run_ids = [f"{RUN_PREFIX}{n:02d}" for n in range(1, options.runs + 1)]
        self.random = random.Random(f"{options.seed}-{self.name}")
        self.current: str | None = None
        self.out_lock = threading.Lock()
        self.go = threading.Event()
        # The library's warnings become timeline events.
        library = logging.getLogger("runstore.ownership")
        library.addHandler(_EventHandler(self))
        library.propagate = False

    def emit(self, event: str, **fields: Any) -> None:
        line = json.dumps({"event": event, "t_ms": self.clock.now_ms(), **fields})
        with self.out_lock:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    def control(self) -> None:
        """Commands from the coordinator: freeze (take the gate) and thaw."""
        for line in sys.stdin:
            command = line.strip()
            if command == "go":
                self.go.set()
            elif command == "freeze":
                self.gate.acquire()
                self.emit("frozen", run=self.current)
            elif command == "thaw":
                self.gate.release()

    def run(self) -> int:
        threading.Thread(target=self.control, daemon=True).start()
        self.emit("started", pid=self.me.pid, nonce=self.me.nonce)
        self.go.wait()
        finished = 0
        while True:
            try:
                outcome = self.scan()
            except RunStoreError as error:  # an infrastructure failure: try again later
                self.emit("store_error", code=error.code)
                outcome = "idle"
            if outcome == "all done":
                self.emit("done", finished=finished)
                return 0
            if outcome == "finished":
                finished += 1
            elif outcome == "idle":
                self.clock.sleep_until(self.clock.now_ms() + SCAN_MS)

    def scan(self) -> str:
        """Look at every run once and work on the first one this worker can own.

        Orphans come first: a stale run someone else owns is taken over before
        any pending run is claimed. Returns ``"finished"`` or ``"worked"``
        after one run, ``"idle"`` when nothing could be owned, ``"all done"``
        when every run is settled.
        """
        order = list(self.run_ids)
        self.random.shuffle(order)
        rows = [self.store.get(run_id) for run_id in order]
        live = [row for row in rows if row.status not in runstore.TERMINAL_STATUSES]
        if not live:
            return "all done"
        live.sort(key=lambda row: row.status != "running")
        for row in live:
            if self.take(row):
                return "finished" if self.work(row.run_id) else "worked"
        return "idle"

    def take(self, row: RunRow) -> bool:
        """Own the run if it is free, or if its owner is gone (with evidence)."""
        now = self.clock.now_ms()
        evidence = None
        if row.status == "running":
            assert row.owner is not None
            assert row.heartbeat_at_ms is not None
            if row.owner == self.me or row.heartbeat_at_ms >= now - HEARTBEAT_STALE_AFTER_MS:
                return False
            # Ask the operating system first; a live pid that stopped
            # heartbeating is hung, and the expired lease is the evidence.
            evidence = takeover_evidence(row, self.me, now) or takeover_evidence(
                row, self.me, now, check=lease_liveness(), lease_expired=True
            )
            if evidence is None:
                return False
        outcome = self.store.claim_and_own(row.run_id, row, self.me, now, evidence)
        if outcome != Activated():
            return False
        if evidence is None:
            self.emit("claimed", run=row.run_id)
        else:
            assert row.owner is not None
            self.emit(
                "stole",
                run=row.run_id,
                from_pid=row.owner.pid,
                kind=evidence.kind,
                step=json.loads(_state_of(row))["step"],
            )
        return True

    def work(self, run_id: str) -> int:
        """Do the run's remaining steps under supervision; 1 if it finished here."""
        self.current = run_id
        try:
            with supervise(
                self.store, run_id, self.me, clock=self.clock, interrupt_thread=False
            ) as lease:
                step = json.loads(self.store.get(run_id).state_json)["step"]
                while step < STEPS:
                    jitter = self.random.randint(-STEP_MS // 4, STEP_MS // 4)
                    self.clock.sleep_until(self.clock.now_ms() + STEP_MS + jitter)
                    step += 1
                    done = step == STEPS
                    state = json.dumps({"step": step, "by": self.name, "done": done})
                    status = "completed" if done else "running"
                    outcome = self.store.transition_owned(run_id, self.me, status, state)
                    if outcome != Transitioned():
                        self.emit("refused", run=run_id, step=step, outcome=type(outcome).__name__)
                        # The fence is gone; the supervisor's next pulse or
                        # reconfirm finds the same and delivers the verdict.
                        lease.lost.wait(self.clock.real_seconds(3 * HEARTBEAT_INTERVAL_MS) + 1)
                        break
                    self.emit("finished" if done else "progress", run=run_id, step=step)
                    if done:
                        return 1
        except LeaseLost as lost:
            self.emit("lease_lost", run=run_id, reason=lost.reason)
        finally:
            self.current = None
        return 0


def _worker_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="runstore demo worker")
    parser.add_argument("--db", help=f"the database (default: ${DB_VARIABLE})")
    parser.add_argument("--host", default=HOST)
    parser.add_argument("--name", required=True)
    parser.add_argument("--origin-ns", type=int, required=True)
    parser.add_argument("--speed", type=float, required=True)
    parser.add_argument("--runs", type=int, required=True)
    parser.add_argument("--seed", type=int, required=True)
    return _Worker(parser.parse_args(argv)).run()


# --- the coordinator -----------------------------------------------------------------


class _Proc:
    def __init__(self, name: str, process: subprocess.Popen[str]) -> None:
        self.name = name
        self.process = process
        self.pid = process.pid
        self.fate = "ran"  # "killed" or "stopped" for the victims


class _Demo:
    def __init__(
        self,
        options: argparse.Namespace,
        out: Callable[[str], None],
        err: Callable[[str], None] | None = None,
    ) -> None:
        self.options = options
        self.out = out
        self.err = _to_stderr if err is None else err
        self.events: queue.Queue[tuple[str, dict[str, Any]]] = queue.Queue()
        self.procs: dict[str, _Proc] = {}
        self.by_pid: dict[int, str] = {}
        self.started = time.monotonic()
        self.origin_ns = time.time_ns()
        self.clock = SpedUpClock(self.origin_ns, options.speed)
        self.log: list[tuple[str, dict[str, Any]]] = []
        self.problems: list[str] = []

    # -- output --

    def line(self, who: str, text: str, t_ms: int | None = None) -> None:
        demo_ms = self.clock.now_ms() if t_ms is None else t_ms
        real = time.monotonic() - self.started
        self.out(f"{real:6.2f}s  {demo_ms / 1000:11.1f}s  {who:<10} {text}")

    def describe(self, who: str, event: dict[str, Any]) -> str | None:
        kind = event["event"]
        run = event.get("run")
        if kind == "started":
            return f"started (pid {event['pid']})"
        if kind == "claimed":
            return f"claimed {run}"
        if kind == "stole":
            victim = self.by_pid.get(event["from_pid"], f"pid {event['from_pid']}")
            return (
                f"took over {run} from {victim} at step {event['step']} (evidence: {event['kind']})"
            )
        if kind == "finished":
            return f"finished {run}"
        if kind == "refused":
            return f"late write to {run} refused: {event['outcome']} (the fence held)"
        if kind == "lease_lost":
            return f"lost the lease on {run} ({event['reason']}); work interrupted"
        if kind == "frozen":
            return None
        if kind == "done":
            return f"no runs left; exits having finished {event['finished']}"
        if kind == "log":
            return f"(log) {event['message']}"
        if kind == "store_error":
            return f"store error ({event['code']}); will retry"
        return None

    # -- processes --

    def spawn(self, name: str, db: Path | str) -> None:
        # Workers on PostgreSQL are hosts of their own; on one file, one host.
        host = f"demo-{name}" if _is_url(str(db)) else HOST
        command = [
            sys.executable,
            "-m",
            "runstore.cli._demo",
            "_worker",
            "--host",
            host,
            "--name",
            name,
            "--origin-ns",
            str(self.origin_ns),
            "--speed",
            str(self.options.speed),
            "--runs",
            str(self.options.runs),
            "--seed",
            str(self.options.seed),
        ]
        process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, DB_VARIABLE: str(db)},
        )
        proc = _Proc(name, process)
        self.procs[name] = proc
        self.by_pid[proc.pid] = name
        threading.Thread(target=self.read, args=(proc,), daemon=True).start()

    def read(self, proc: _Proc) -> None:
        assert proc.process.stdout is not None
        for raw in proc.process.stdout:
            with contextlib.suppress(ValueError):
                self.events.put((proc.name, json.loads(raw)))
        self.events.put((proc.name, {"event": "_eof"}))

    def tell(self, proc: _Proc, command: str) -> None:
        assert proc.process.stdin is not None
        proc.process.stdin.write(command + "\n")
        proc.process.stdin.flush()

    # -- the run --

    def run(self) -> int:
        options = self.options
        with contextlib.ExitStack() as stack:
            db: Path | str
            if options.db is None:
                folder = Path(stack.enter_context(tempfile.TemporaryDirectory()))
                db = folder / "demo.db"
            elif _is_url(options.db):
                db = options.db
            else:
                db = Path(options.db)
                if db.exists():
                    self.err(f"runstore demo: {db} already exists; give a new path")
                    return 2
            try:
                store = stack.enter_context(runstore.open(db, clock=self.clock))
            except RunStoreError as error:
                # A failed open is one line and exit 2, as for every command.
                self.err(f"runstore demo: {cannot_open(str(db), error).text}")
                return 2
            try:
                if _is_url(str(db)) and store.changes(0):
                    self.err(
                        f"runstore demo: {shown(str(db))} already holds runs; give an empty "
                        "database or schema (?schema=...)"
                    )
                    return 2
                for n in range(1, options.runs + 1):
                    store.create(f"{RUN_PREFIX}{n:02d}", json.dumps({"step": 0}))
            except RunStoreError as error:
                self.err(f"runstore demo: cannot create the runs in {shown(str(db))}: {error}")
                return 2
            where = shown(str(db)) if options.db else "a temporary file"
            self.out(
                f"runstore demo: {options.runs} runs of {STEPS} steps in {where},"
                f" {options.workers} worker processes, demo clock x{options.speed:g}"
            )
            self.out("")
            self.out(f"{'real':>7}  {'demo time':>12}  {'who':<10} what")
            try:
                for n in range(1, options.workers + 1):
                    self.spawn(f"worker-{n}", db)
                self.supervise_workers(store)
            finally:
                for proc in self.procs.values():
                    if proc.process.poll() is None:
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(proc.pid, signal.SIGCONT)
                            proc.process.kill()
                    proc.process.wait()
                    for stream in (proc.process.stdin, proc.process.stdout):
                        if stream is not None:
                            with contextlib.suppress(OSError):
                                stream.close()
            return self.tally(store)

    def supervise_workers(self, store: RunStore) -> None:
        names = sorted(self.procs)
        rng = random.Random(self.options.seed)
        rng.shuffle(names)
        # Both faults need someone left to take over: kill only with 3+ workers.
        kill_victim = names[0] if len(names) >= 3 else None
        stop_victim = names[1] if len(names) >= 3 else (names[0] if len(names) == 2 else None)
        stopped_run: str | None = None
        stop_requested = False
        running = set(self.procs)
        waiting_to_start = set(self.procs)
        deadline = time.monotonic() + self.options.timeout
        while running:
            if time.monotonic() > deadline:
                self.problems.append("the demo did not finish in time")
                self.line("demo", "timed out; stopping the workers")
                return
            try:
                name, event = self.events.get(timeout=0.1)
            except queue.Empty:
                continue
            kind = event["event"]
            if kind == "_eof":
                running.discard(name)
                continue
            if kind == "started":
                waiting_to_start.discard(name)
                if not waiting_to_start:
                    for proc in self.procs.values():
                        self.tell(proc, "go")
            self.log.append((name, event))
            text = self.describe(name, event)
            if text is not None:
                self.line(name, text, event.get("t_ms"))
            proc = self.procs[name]
            if kind == "progress" and name == kill_victim and proc.fate == "ran":
                proc.fate = "killed"
                os.kill(proc.pid, signal.SIGKILL)
                proc.process.wait()  # reap it: a zombie's pid would still answer alive
                self.line("demo", f"SIGKILL {name} in the middle of {event['run']}; reaped it")
            elif (
                kind == "progress"
                and name == stop_victim
                and proc.fate == "ran"
                and not stop_requested
                and (kill_victim is None or self.procs[kill_victim].fate == "killed")
            ):
                stop_requested = True
                self.tell(proc, "freeze")  # answered once no store call is in flight
            elif kind == "frozen":
                run = event["run"]
                row = None if run is None else store.get(run)
                if row is None or row.owner is None or row.owner.pid != proc.pid:
                    # It finished that run between the two messages: try later.
                    self.tell(proc, "thaw")
                    stop_requested = False
                    continue
                proc.fate = "stopped"
                stopped_run = event["run"]
                os.kill(proc.pid, signal.SIGSTOP)
                self.line("demo", f"SIGSTOP {name} in the middle of {stopped_run}")
            elif kind == "stole" and stopped_run is not None and event["run"] == stopped_run:
                victim = self.procs[stop_victim] if stop_victim else None
                if victim is not None and self.by_pid.get(event["from_pid"]) == victim.name:
                    os.kill(victim.pid, signal.SIGCONT)
                    self.tell(victim, "thaw")
                    self.line(
                        "demo", f"SIGCONT {victim.name}: it still thinks it owns {stopped_run}"
                    )
                    stopped_run = None

    # -- the verdict --

    def tally(self, store: RunStore) -> int:
        finished = Counter(e["run"] for _, e in self.log if e["event"] == "finished")
        by_worker = Counter(n for n, e in self.log if e["event"] == "finished")
        takeovers = Counter(e["kind"] for _, e in self.log if e["event"] == "stole")
        refused = [(n, e) for n, e in self.log if e["event"] == "refused"]
        lost = [(n, e) for n, e in self.log if e["event"] == "lease_lost"]
        killed = [p for p in self.procs.values() if p.fate == "killed"]
        stopped = [p for p in self.procs.values() if p.fate == "stopped"]
        run_ids = [f"{RUN_PREFIX}{n:02d}" for n in range(1, self.options.runs + 1)]

        for run_id in run_ids:
            row = store.get(run_id)
            state = json.loads(_state_of(row))
            settled = [
                f
                for f in store.ownership_facts(run_id)
                if f.transition == "released" and f.granted_at_ms is None
            ]
            if row.status != "completed" or state != {
                "step": STEPS,
                "by": state.get("by"),
                "done": True,
            }:
                self.problems.append(f"{run_id} is {row.status} with state {state}")
            if len(settled) != 1:
                self.problems.append(f"{run_id} was settled {len(settled)} times")
            reports = finished[run_id]
            if reports > 1:
                self.problems.append(f"{run_id} was reported finished {reports} times")
            if reports == 0 and not (
                settled and self.by_pid.get(settled[0].owner.pid) in {p.name for p in killed}
            ):
                self.problems.append(f"{run_id} completed without anyone reporting it")
        for proc in stopped:
            if not any(n == proc.name for n, _ in refused):
                self.problems.append(f"{proc.name} was stopped but no late write was refused")
            if not any(n == proc.name for n, _ in lost):
                self.problems.append(f"{proc.name} was stopped but never lost its lease")
        for name, event in refused:
            row = store.get(event["run"])
            if row.owner is not None and self.by_pid.get(row.owner.pid) == name:
                self.problems.append(f"{name}'s refused write left it owning {event['run']}")
        try:
            store.check_invariants()
        except AssertionError as broken:
            self.problems.append(f"store invariant broken: {broken}")

        self.out("")
        self.out("tally")
        self.out(
            f"  runs completed exactly once: {len(run_ids) - self._incomplete(store, run_ids)}"
            f" of {len(run_ids)}"
        )
        self.out(
            "  finished per worker: " + ", ".join(f"{n} {by_worker[n]}" for n in sorted(self.procs))
        )
        self.out(
            "  takeovers: "
            + (
                ", ".join(f"{count} with {kind}" for kind, count in sorted(takeovers.items()))
                or "none"
            )
        )
        self.out(f"  late writes refused by the fence: {len(refused)}")
        self.out(f"  leases lost (work interrupted): {len(lost)}")
        self.out(
            f"  killed: {', '.join(p.name for p in killed) or 'none'};"
            f" stopped and continued: {', '.join(p.name for p in stopped) or 'none'}"
        )
        if self.problems:
            self.out("")
            for problem in self.problems:
                self.out(f"INVARIANT BROKEN: {problem}")
            return 1
        self.out("  every invariant held")
        return 0

    @staticmethod
    def _incomplete(store: RunStore, run_ids: list[str]) -> int:
        return sum(1 for run_id in run_ids if store.get(run_id).status != "completed")


def _to_stderr(text: str) -> None:
    sys.stderr.write(printable_lines(text) + "\n")
    sys.stderr.flush()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="runstore demo",
        description="Worker processes compete for runs on one SQLite file (or one "
        "PostgreSQL database, each worker a host of its own); one is killed, one is "
        "stopped, the survivors take over with evidence, and every run completes exactly "
        "once.",
    )
    parser.add_argument("--workers", type=int, default=3, help="worker processes (default 3)")
    parser.add_argument("--runs", type=int, default=20, help="runs to complete (default 20)")
    parser.add_argument(
        "--db",
        help="the database file to create (default: a temporary one), or a postgresql:// "
        "URL of an empty database or schema",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed for every random choice")
    parser.add_argument(
        "--speed", type=float, default=50.0, help="demo seconds per real second (default 50)"
    )
    parser.add_argument("--timeout", type=float, default=120.0, help=argparse.SUPPRESS)
    return parser


def main(argv: list[str]) -> int:
    """Run ``runstore demo`` with ``argv`` (the words after ``demo``)."""
    if argv[:1] == ["_worker"]:
        return _worker_main(argv[1:])
    options = _parser().parse_args(argv)
    if options.workers < 1 or options.runs < 1 or options.speed <= 0:
        sys.stderr.write("runstore demo: --workers, --runs and --speed must be positive\n")
        return 2
    if sys.platform == "win32":  # pragma: no cover
        sys.stderr.write("runstore demo: needs POSIX signals (SIGKILL, SIGSTOP)\n")
        return 2

    def out(text: str) -> None:
        print(text, flush=True)

    return _Demo(options, out).run()


def _state_of(row: RunRow) -> str:
    """A row's state; every read the demo makes returns it."""
    if row.state_json is None:
        raise AssertionError("the demo reads rows with their state")
    return row.state_json


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
