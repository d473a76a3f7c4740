"""``runstore torture``: real processes race on one database; the history is checked.

The coordinator starts ``--workers`` worker processes over one database. Each
worker is a distinct owner on a distinct host (``host-<i>``) with its own clock
skew (up to ``--skew-ms``, inside the heartbeat skew allowance), and issues
random operations in a tight loop on a small, moving window of runs (``--runs``
live run ids at a time, three runs to a lineage), recording every call with a
``HistoryRecorder`` to a history file of its own. Time is sped up (``--speed``,
default 100 times), as in ``runstore demo``: every worker's clock is the
system-wide monotonic clock since a shared origin, scaled, plus its skew, so a
30-second lease goes stale in a third of a second and steals happen. The
owners take the workloads (``--workload``, all of ``WORKLOADS`` by default)
in turns of ``--phase-ms``, all on the same one at once, their stores'
statements widened (``--widen``, ``DEFAULT_WIDEN`` by default); the ``zombies``
workload holds owners past staleness on a board of files under ``--out``
and lets each go as a peer starts taking its run over.

While the workers run, the coordinator injects faults: it SIGKILLs a worker
(one that has said it is ready: a replacement still starting on a busy
machine is left alone) and starts a new incarnation in its place (same host,
new pid and nonce, a new history file; the killed one's last call is left
pending), or SIGSTOPs one for
a while (its leases go stale and are taken over; when it is continued its late
writes meet the fence) and SIGCONTs it. On a PostgreSQL target given
``--restart-command`` (or a ``restarter`` function), it also restarts the
server: it runs the command and waits until the server answers with a new
start time; every session is cut, calls in flight fail with an unknown
outcome, and the stores reconnect. On a PostgreSQL URL the workers reach the
server through a proxy that loses the acknowledgement of a commit now and
then (``--lost-acks``; by default about every ``DEFAULT_LOST_ACKS_S`` in the
phases of ``LOST_ACK_WORKLOADS``). It prints a progress line every second.

When the budget is spent it stops the workers, reads the database's final
state (and runs ``check_invariants()`` on it), and checks the whole history
with ``check_history(..., initial=..., final=...)``: one final-state read per
run follows every operation, so the final state must be the end state of some
linearization, pending operations included or not, and the database's final
revision must count the row writes of some linearization of every run. It
prints the verdict with operations checked per second and how many of the
pairs of operations the workloads aim at (``OVERLAPS``) were in flight
together; on a violation it
writes the minimal offending sub-history of each failing object (readable
``.txt`` and re-checkable ``.jsonl``) to ``--out`` and exits 1.

Exit status: 0 linearizable, 1 a violation or a broken invariant, 2 bad
usage, 3 some object could not be checked (too many operations of unknown
outcome, the search budget, or a revision count that could not be
checked) or an owner's walk raised (a mistake of the torture itself, its
worker's exit status ``WALK_FAILED``: the run was cut short): never a
silent pass.

Targets (``--db``): a SQLite file path (created if missing; an existing
database is used as it is, its state taken as the initial state, and the
runs get a fresh prefix), or whatever else ``runstore.open`` opens (a
``postgresql://`` URL, opened as it is; ``runstore.stateful._targets._pgserver`` starts
a throwaway server to torture and restart). A target that cannot be opened
is a usage error; a URL's password is never printed, and the workers get
their settings on stdin, not in argv. ``--store MODULE:FACTORY`` tortures a
store of one's own: ``factory(clock, target) -> RunStore``, called in every
worker (the zoo's concurrency bugs are such factories).

With ``--async`` each worker process drives async stores instead: one event
loop per process (on a thread of its own) and, per owner, an async store
(``runstore.aopen`` with one connection, or ``--store``'s async factory's),
behind the synchronous stand-in the owner's walk calls from its thread, so
every call in flight is a task on the process's loop. The async store reads
its clock on its connection's thread, so each owner's store gets a
``HandedRecordingClock`` of its own, handed each call as it is made; the
recording, the faults and the check are the same.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import inspect
import json
import os
import random
import secrets
import select
import signal
import subprocess
import sys
import threading
import time
import traceback
import urllib.parse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs

import runstore
from runstore import HEARTBEAT_SKEW_ALLOWANCE_MS, HEARTBEAT_STALE_AFTER_MS, OwnerId
from runstore._clock import Clock

from .._histories._history import (
    HandedRecordingClock,
    HistoryRecorder,
    RecordingClock,
    load_history,
)
from .._histories._linearize import MAX_UNKNOWN, HistoryVerdict, check_history
from .._histories._proxy import CommitCutter
from .._histories._report import write_violation
from .._histories._windows import Widener
from .._histories._windows import install as install_widener
from .._histories._workload import (
    DEFAULT_MIX,
    OVERLAPS,
    WORKLOADS,
    Worker,
    ZombieBoard,
    overlapping_pairs,
)
from .._targets._blocking import BlockingRunStore, LoopThread, blocking_factory, is_async_store

#: Virtual milliseconds at the shared origin (any large value: stamps stay positive).
BASE_MS = 1_000_000_000
#: The chance per step that a worker pauses long enough for its leases to go stale.
NAP_PROBABILITY = 0.01
#: Violations shrunk to a minimal sub-history; later ones are written whole.
MAX_SHRUNK = 3
#: How long every owner spends on one workload of the mix before the next (real ms).
PHASE_MS = 400.0
#: The chance of a widened window after a statement (``--widen``) when none is given.
DEFAULT_WIDEN = 0.05
#: Mean seconds between lost acknowledgements at commits (``--lost-acks``) when none is
#: given, on a PostgreSQL target: only in the phases of ``LOST_ACK_WORKLOADS``.
DEFAULT_LOST_ACKS_S = 1.0
#: The workloads in whose phases the default loses acknowledgements: the ones whose
#: writes settle, cancel and take over runs. The others run without cuts, so that
#: the calls of unknown outcome the cuts leave stay few on every object.
LOST_ACK_WORKLOADS: tuple[str, ...] = ("mixed", "cancel", "zombies")


class TortureError(Exception):
    """Raised for a target or option the torture cannot use (exit status 2)."""


@attrs.frozen
class TortureConfig:
    """One torture campaign's settings (see ``runstore torture --help``)."""

    db: str
    workers: int = 3
    seconds: float = 10.0
    runs: int = 1
    seed: int | None = None
    out: str = ".runstore-torture"
    store: str | None = None
    speed: float = 100.0
    skew_ms: int = 5_000
    kills: bool = True
    stops: bool = True
    #: A shell command that restarts the database server (``--restart-command``).
    restart_command: str | None = None
    #: The same as a function, for a server this process runs itself.
    restarter: Callable[[], None] | None = attrs.field(default=None, eq=False)
    fault_every_s: float = 0.8
    slot_ms: float = 2.0
    threads: int = 2
    max_unknown: int = MAX_UNKNOWN
    shrink: bool = True
    quiet: bool = False
    #: The workloads every owner takes turns at (``--workload``), in phase order.
    workloads: tuple[str, ...] = DEFAULT_MIX
    #: A phase's length in real milliseconds (``--phase-ms``).
    phase_ms: float = PHASE_MS
    #: The chance that a worker's store lingers after a read or inside a
    #: transaction (``--widen``; ``_histories._windows``); 0: never; None:
    #: ``DEFAULT_WIDEN``.
    widen: float | None = None
    #: Mean seconds between lost acknowledgements aimed at commits, through a
    #: proxy in front of PostgreSQL (``--lost-acks``; ``_histories._proxy``), in
    #: every phase; 0: none; None: on a PostgreSQL target ``DEFAULT_LOST_ACKS_S``
    #: in the phases of ``LOST_ACK_WORKLOADS`` only, none on SQLite.
    lost_acks_s: float | None = None
    #: Whether each worker process drives async stores (``--async``): every
    #: owner's store is ``runstore.aopen``'s, its calls run as tasks on the
    #: process's one event loop.
    aio: bool = False


@attrs.frozen
class TortureResult:
    """What a campaign did and found."""

    verdict: HistoryVerdict
    status: int
    operations: int
    kills: int
    stops: int
    invariant_failure: str | None
    restarts: int
    written: tuple[Path, ...]
    history_dir: Path
    #: How often each pair of operations of ``OVERLAPS`` was in flight at once.
    overlaps: dict[tuple[str, str], int] = attrs.field(factory=dict)
    #: Connections cut after a committing message, before its answer.
    lost_acks: int = 0


# -- time ---------------------------------------------------------------------------


class TortureClock:
    """A worker host's clock: shared monotonic time since ``origin_ns``, sped
    up ``speed`` times, offset by the host's ``skew_ms``."""

    def __init__(self, origin_ns: int, speed: float, skew_ms: int) -> None:
        self.origin_ns = origin_ns
        self.speed = speed
        self.skew_ms = skew_ms

    def now_ms(self) -> int:
        elapsed = time.monotonic_ns() - self.origin_ns
        return BASE_MS + self.skew_ms + int(elapsed * self.speed) // 1_000_000

    def sleep_until(self, deadline_ms: int) -> None:
        while (remaining := deadline_ms - self.now_ms()) > 0:
            time.sleep(remaining / self.speed / 1000)

    async def asleep_until(self, deadline_ms: int) -> None:
        import asyncio

        while (remaining := deadline_ms - self.now_ms()) > 0:
            await asyncio.sleep(remaining / self.speed / 1000)


# -- targets ------------------------------------------------------------------------


def _is_url(target: str) -> bool:
    return "://" in target


def shown_target(target: str) -> str:
    """``target`` as it may be printed: a URL without its password (in the
    user part or as a ``password=`` parameter)."""
    if not _is_url(target):
        return target
    parts = urllib.parse.urlsplit(target)
    netloc = parts.netloc
    if parts.password is not None:
        netloc = f"{parts.username or ''}:***@{netloc.rsplit('@', 1)[-1]}"
    query = urllib.parse.urlencode(
        [
            (key, "***" if key.lower() == "password" else value)
            for key, value in urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
        ],
        safe="*/%",
    )
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc, query=query))


def load_store_factory(spec: str) -> Callable[[Clock, str], Any]:
    """``MODULE:FACTORY`` imported (the current directory is importable)."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise TortureError(f"--store wants MODULE:FACTORY, not {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
        factory = getattr(module, attribute)
    except (ImportError, AttributeError) as error:
        raise TortureError(f"cannot load the store factory {spec!r}: {error}") from None
    if not callable(factory):
        raise TortureError(f"{spec!r} is not callable")
    return factory  # type: ignore[no-any-return]


def open_target(target: str, clock: Clock, store: str | None = None) -> Any:
    """Open the store under torture on ``target`` with ``clock``.

    A URL goes to ``runstore.open`` as it is (which opens what this version
    can); a refusal of the target becomes a ``TortureError``.
    """
    if store is not None:
        # An async factory's store is read through the synchronous stand-in.
        return blocking_factory(load_store_factory(store))(clock, target)
    if _is_url(target):
        try:
            return runstore.open(target, clock=clock)
        except runstore.InvalidRunError as error:
            if error.cause.get("field") != "target":
                raise
        scheme = target.split("://", 1)[0]
        raise TortureError(
            f"{scheme}:// targets need the PostgreSQL store, which this version's "
            "runstore.open does not open yet; give a SQLite file path"
        )
    # Process kills, not power loss, are the faults here: WAL with
    # synchronous=NORMAL keeps every commit through a SIGKILL and spares an
    # fsync per operation.
    return runstore.open(target, clock=clock, durability="normal")


#: How long the torture waits for a restarted server (or a target that a
#: restart left unreachable) before it gives up.
RESTART_TIMEOUT_S = 60.0


def open_async_target(target: str, clock: Clock, loop: LoopThread, store: str | None = None) -> Any:
    """Open an async store on ``target`` with ``clock``, on ``loop``, behind a
    synchronous stand-in that leaves the loop running when it closes (the
    owners of a worker process share it): ``runstore.aopen`` with one
    connection (an owner's calls come one at a time), or ``store``'s factory,
    which must give an async store (``TortureError`` otherwise)."""
    if store is not None:
        opened = load_store_factory(store)(clock, target)
    elif _is_url(target):
        opened = runstore.aopen(target, clock=clock, pool_size=1)
    else:
        opened = runstore.aopen(target, clock=clock, durability="normal")
    made = loop.wait(opened) if inspect.isawaitable(opened) else opened
    if not is_async_store(made):
        with contextlib.suppress(Exception):
            made.close()
        raise TortureError(f"--async: {store} gave a store whose operations are not coroutines")
    return BlockingRunStore(made, loop, owns_loop=False)


class HandingStore:
    """A store that hands its ``HandedRecordingClock`` each call before making
    it (on the caller's thread, inside the recorded call), and releases it
    after: the async store reads the clock on a thread of its own."""

    def __init__(self, store: Any, clock: HandedRecordingClock) -> None:
        self.store = store
        self.clock = clock

    def __getattr__(self, name: str) -> Any:
        value = getattr(self.store, name)
        if name.startswith("_") or not callable(value):
            return value

        def handed(*args: Any, **kwargs: Any) -> Any:
            self.clock.hand()
            try:
                return value(*args, **kwargs)
            finally:
                self.clock.release()

        return handed

    def close(self) -> None:
        self.store.close()


def open_patiently(
    target: str,
    clock: Clock,
    store: str | None = None,
    opener: Callable[[str, Clock], Any] | None = None,
) -> Any:
    """``open_target`` (or ``opener(target, clock)``), retried while it fails
    with ``persistence_failed`` (a server restarting) for up to
    ``RESTART_TIMEOUT_S``."""
    deadline = time.monotonic() + RESTART_TIMEOUT_S
    while True:
        try:
            if opener is not None:
                return opener(target, clock)
            return open_target(target, clock, store)
        except runstore.RunStoreError as error:
            if error.code != "persistence_failed" or time.monotonic() > deadline:
                raise
        time.sleep(0.05)


def server_started(target: str) -> object | None:
    """The PostgreSQL server's start time (``pg_postmaster_start_time()``), or
    None while it cannot be reached. A restart is a change of this value."""
    import psycopg

    try:
        with psycopg.connect(target, connect_timeout=2, autocommit=True) as connection:
            row = connection.execute("SELECT pg_postmaster_start_time()").fetchone()
    except psycopg.Error:
        return None
    return None if row is None else row[0]


def restart_server(config: TortureConfig) -> None:
    """Restart the database server (the restart fault), and return once the
    server answers again with a new start time.

    The command (or function) may return before the server is back, or even
    before it went down (``kill -USR1 <pid>`` to ``runstore.stateful._targets._pgserver``):
    the new start time is what says it restarted. ``TortureError`` when it did
    not within ``RESTART_TIMEOUT_S``, or the command failed.
    """
    before = server_started(config.db)
    if config.restarter is not None:
        config.restarter()
    elif config.restart_command is not None:
        try:
            done = subprocess.run(
                config.restart_command,
                shell=True,
                stdin=subprocess.DEVNULL,
                timeout=RESTART_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise TortureError("the restart command did not finish in time") from None
        if done.returncode != 0:
            raise TortureError(f"the restart command failed (exit status {done.returncode})")
    deadline = time.monotonic() + RESTART_TIMEOUT_S
    while True:
        started = server_started(config.db)
        if started is not None and started != before:
            return
        if time.monotonic() > deadline:
            raise TortureError("the server did not restart (its start time did not change)")
        time.sleep(0.02)


# -- the worker ---------------------------------------------------------------------

#: A worker's exit status when an owner's walk raised (a mistake of the walk, not the store's).
WALK_FAILED = 4


def worker_main(config: dict[str, Any]) -> int:
    """A worker process: ``threads`` owners, each with its own connection,
    run steps until the deadline, then close. One history file per process."""
    clock = TortureClock(config["origin_ns"], config["speed"], config["skew_ms"])
    recorder = HistoryRecorder(config["history"], process=config["process"])
    # Threads interleave at every SQLite call (it releases the GIL) and, with a
    # short switch interval, between Python statements too.
    sys.setswitchinterval(config.get("switch_interval_s", 0.0005))
    rng = random.Random(config["seed"])
    if config.get("widen"):
        # Before any store opens: every sqlite3 or psycopg connection lingers.
        install_widener(Widener(random.Random(rng.randrange(2**32)), config["widen"]))
    board = ZombieBoard(config["board"]) if config.get("board") else None
    stores = []
    workers = []
    # --async: one event loop runs every owner's calls, each as a task of its own.
    loop = LoopThread("runstore-torture-loop") if config.get("async") else None
    for _ in range(config.get("threads", 1)):
        # Patiently: a replacement may start while the server restarts.
        if loop is None:
            store = open_patiently(config["db"], RecordingClock(clock), config.get("store"))
        else:
            # Each owner an async store of its own, whose clock it hands each call.
            handed = HandedRecordingClock(clock)
            opener = functools.partial(open_async_target, loop=loop, store=config.get("store"))
            store = HandingStore(open_patiently(config["db"], handed, opener=opener), handed)
        stores.append(store)
        me = OwnerId(config["host"], os.getpid(), secrets.token_hex(4))
        workers.append(
            Worker(
                recorder.record(store),
                clock,
                me,
                random.Random(rng.randrange(2**32)),
                config["prefix"],
                config["runs"],
                stale_real_s=HEARTBEAT_STALE_AFTER_MS / config["speed"] / 1000,
                nap_probability=NAP_PROBABILITY,
                slot_ms=config["slot_ms"],
                workloads=config.get("workloads", ("mixed",)),
                board=board,
            )
        )
    # Ready; the coordinator answers with the deadline once every worker is.
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    line = sys.stdin.readline().split()
    deadline = int(line[1]) if len(line) == 3 and line[0] == "go" else 0
    # Phases count from the campaign's start, the same instants in every process.
    start = int(line[2]) if len(line) == 3 else 0
    phase_ns = max(1, int(config.get("phase_ms", PHASE_MS) * 1_000_000))
    for worker in workers:
        worker.until_ns = deadline
        worker.phase = lambda: (time.monotonic_ns() - start) // phase_ns

    failures: list[str] = []

    def walk(worker: Worker) -> None:
        try:
            while time.monotonic_ns() < deadline:
                worker.step()
        except Exception:
            # A mistake of the walk itself (the store's errors are answers, not
            # raised): told on stderr and in the exit status, so that a run an
            # owner left early is never passed as if it had been whole.
            failures.append(traceback.format_exc())
            sys.stderr.write(failures[-1])

    threads = [threading.Thread(target=walk, args=(w,), daemon=True) for w in workers[1:]]
    try:
        for thread in threads:
            thread.start()
        if workers:
            walk(workers[0])
        for thread in threads:
            thread.join()
    finally:
        for store in stores:
            store.close()
        if loop is not None:
            loop.stop()
        recorder.close()
    return WALK_FAILED if failures else 0


# -- the coordinator ----------------------------------------------------------------


class _Process:
    def __init__(self, index: int, incarnation: int, popen: subprocess.Popen[bytes]) -> None:
        self.index = index
        self.incarnation = incarnation
        self.popen = popen
        self.stopped_until: float | None = None
        #: Whether it said ``ready`` (imported, its stores open): only then is it a
        #: fault's victim, so that a busy machine, slow to start a replacement,
        #: does not kill or stop workers that never acted.
        self.ready = False

    def poll_ready(self) -> bool:
        """``ready``, reading the worker's ready line if it has come."""
        stdout = self.popen.stdout
        if not self.ready and stdout is not None:
            with contextlib.suppress(OSError, ValueError):
                if select.select([stdout], [], [], 0)[0]:
                    self.ready = stdout.readline().strip() == b"ready"
        return self.ready


def _say(config: TortureConfig, text: str) -> None:
    if not config.quiet:
        print(text, flush=True)


def _ready(popen: subprocess.Popen[bytes]) -> bool:
    """Wait for a new worker's ``ready`` line (it has imported and opened the store)."""
    assert popen.stdout is not None
    return popen.stdout.readline().strip() == b"ready"


def _close_pipes(popen: subprocess.Popen[bytes]) -> None:
    for pipe in (popen.stdin, popen.stdout):
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()


def _go(popen: subprocess.Popen[bytes], deadline_ns: int, start_ns: int) -> None:
    assert popen.stdin is not None
    with contextlib.suppress(BrokenPipeError):
        popen.stdin.write(f"go {deadline_ns} {start_ns}\n".encode())
        popen.stdin.flush()


def _count_invokes(paths: Sequence[Path], offsets: dict[Path, tuple[int, int]]) -> int:
    """Invoke lines written so far (files read incrementally)."""
    total = 0
    for path in paths:
        offset, count = offsets.get(path, (0, 0))
        try:
            with open(path, "rb") as handle:
                handle.seek(offset)
                data = handle.read()
        except FileNotFoundError:
            data = b""
        cut = data.rfind(b"\n") + 1
        count += data[:cut].count(b'"e":"invoke"')
        offsets[path] = (offset + cut, count)
        total += count
    return total


def _lost_acks(config: TortureConfig) -> tuple[float, frozenset[str]]:
    """Mean seconds between lost acknowledgements (0: none), and the workloads in
    whose phases they come: as given (every phase), or by default on a PostgreSQL
    URL ``DEFAULT_LOST_ACKS_S`` in the phases of ``LOST_ACK_WORKLOADS``."""
    if config.lost_acks_s is not None:
        return config.lost_acks_s, frozenset(config.workloads)
    if config.db.split("://", 1)[0].lower() not in ("postgresql", "postgres"):
        return 0.0, frozenset()
    return DEFAULT_LOST_ACKS_S, frozenset(LOST_ACK_WORKLOADS)


def run_torture(config: TortureConfig) -> TortureResult:
    """Run one campaign (see the module docstring)."""
    if (
        min(config.workers, config.runs, config.threads) < 1
        or min(config.seconds, config.speed) <= 0
    ):
        raise TortureError("--workers, --threads, --runs, --seconds and --speed must be positive")
    if not 0 <= config.skew_ms <= HEARTBEAT_SKEW_ALLOWANCE_MS:
        raise TortureError(f"--skew-ms must be within 0..{HEARTBEAT_SKEW_ALLOWANCE_MS}")
    unknown = [name for name in config.workloads if name not in WORKLOADS]
    if unknown or not config.workloads:
        raise TortureError(f"--workload takes {', '.join(WORKLOADS)}, not {unknown}")
    if config.phase_ms <= 0:
        raise TortureError("--phase-ms must be positive")
    widen = DEFAULT_WIDEN if config.widen is None else config.widen
    if not 0.0 <= widen <= 1.0:
        raise TortureError("--widen is a chance: within 0..1")
    if config.lost_acks_s is not None and (
        config.lost_acks_s < 0 or (config.lost_acks_s > 0 and not _is_url(config.db))
    ):
        raise TortureError("--lost-acks takes positive seconds and a PostgreSQL URL as --db")
    lost_acks_s, lost_ack_phases = _lost_acks(config)
    restarts_on = config.restart_command is not None or config.restarter is not None
    if restarts_on and not _is_url(config.db):
        raise TortureError("--restart-command restarts a PostgreSQL server: --db must be its URL")
    seed = config.seed if config.seed is not None else random.randrange(2**32)
    rng = random.Random(seed)
    out = Path(config.out)
    history_dir = out / "history"
    board_dir = out / "board"
    try:
        history_dir.mkdir(parents=True, exist_ok=True)
        for old in history_dir.glob("*.jsonl"):
            old.unlink()
        board_dir.mkdir(parents=True, exist_ok=True)
        for old in board_dir.iterdir():
            old.unlink()
    except OSError as error:
        reason = os.strerror(error.errno) if error.errno else type(error).__name__
        raise TortureError(f"cannot use {out} (--out): {reason}") from None

    if config.store is not None:
        load_store_factory(config.store)
    try:
        opened = open_target(config.db, TortureClock(0, 1.0, 0), config.store)
    except runstore.RunStoreError as error:
        raise TortureError(f"cannot open {shown_target(config.db)}: {error.message}") from None
    with contextlib.closing(opened) as store:
        initial = store.state()
    prefix = f"t{rng.randrange(16**6):06x}-"
    origin_ns = time.monotonic_ns()
    skews = [rng.randint(-config.skew_ms, config.skew_ms) for _ in range(config.workers)]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.getcwd(), env.get("PYTHONPATH")]))
    _say(
        config,
        f"torture: {config.workers} workers, {config.seconds:g} s on {shown_target(config.db)}, "
        f"{config.runs} live run{'' if config.runs == 1 else 's'}, "
        f"{config.threads} owner{'' if config.threads == 1 else 's'} per worker, "
        f"speed {config.speed:g}x, seed {seed}"
        + (", async stores (runstore.aopen)" if config.aio else ""),
    )
    _say(
        config,
        f"torture: workload{'' if len(config.workloads) == 1 else 's'} "
        f"{', '.join(config.workloads)}"
        + (f", in turns of {config.phase_ms:g} ms" if len(config.workloads) > 1 else ""),
    )

    if widen > 0:
        _say(config, f"torture: widened windows (a pause after a statement: chance {widen:g})")
    cutter = None
    deadline_ns: int | None = None
    phase_ns = max(1, int(config.phase_ms * 1_000_000))
    lost_phases = {k for k, name in enumerate(config.workloads) if name in lost_ack_phases}
    if lost_acks_s > 0 and lost_phases:

        def gate() -> bool:
            # The phase of the workers' mix now (counted from the same start).
            if deadline_ns is None:
                return False
            start = deadline_ns - int(config.seconds * 1e9)
            phase = (time.monotonic_ns() - start) // phase_ns
            return phase >= 0 and phase % len(config.workloads) in lost_phases

        # The workers reach the server through the proxy; the judge does not.
        cutter = CommitCutter(
            config.db,
            random.Random(rng.randrange(2**32)),
            every_s=lost_acks_s,
            gate=None if len(lost_phases) == len(config.workloads) else gate,
        )
        _say(
            config,
            f"torture: lost acknowledgements at commits about every {lost_acks_s:g} s"
            + (
                ""
                if len(lost_phases) == len(config.workloads)
                else " in the phases of "
                + ", ".join(name for name in config.workloads if name in lost_ack_phases)
            ),
        )

    def spawn(index: int, incarnation: int) -> _Process:
        process = f"w{index}.{incarnation}"
        settings = {
            "db": config.db if cutter is None else cutter.url,
            "widen": widen,
            "store": config.store,
            "origin_ns": origin_ns,
            "speed": config.speed,
            "skew_ms": skews[index],
            "host": f"host-{index}",
            "process": process,
            "history": str(history_dir / f"{process}.jsonl"),
            "prefix": prefix,
            "runs": config.runs,
            "slot_ms": config.slot_ms,
            "threads": config.threads,
            "seed": rng.randrange(2**32),
            "workloads": list(config.workloads),
            "phase_ms": config.phase_ms,
            "board": str(board_dir),
            "async": config.aio,
        }
        # The settings go through stdin, not argv: a URL may hold a password,
        # and every local user can read a process's arguments.
        command = [sys.executable, "-m", "runstore.stateful._campaigns._torture", "worker"]
        popen = subprocess.Popen(command, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        spawned.append(popen)
        assert popen.stdin is not None
        with contextlib.suppress(BrokenPipeError):
            popen.stdin.write(json.dumps(settings).encode() + b"\n")
            popen.stdin.flush()
        if deadline_ns is not None:
            _go(popen, deadline_ns, deadline_ns - int(config.seconds * 1e9))
        return _Process(index, incarnation, popen)

    spawned: list[subprocess.Popen[bytes]] = []
    processes = [spawn(i, 1) for i in range(config.workers)]
    for process in processes:
        process.ready = _ready(process.popen)
        if not process.ready:
            for popen in spawned:
                popen.kill()
                popen.wait()
                _close_pipes(popen)
            raise TortureError(f"worker {process.index} did not start (see its error above)")
    deadline_ns = time.monotonic_ns() + int(config.seconds * 1e9)
    for process in processes:
        _go(process.popen, deadline_ns, deadline_ns - int(config.seconds * 1e9))
    kills = stops = restarts = 0
    offsets: dict[Path, tuple[int, int]] = {}
    started = time.monotonic()
    next_fault = started + rng.uniform(0.3, 1.0) * config.fault_every_s
    next_progress = started + 1.0
    stale_real_s = HEARTBEAT_STALE_AFTER_MS / config.speed / 1000
    faults = [
        kind
        for kind, on in (("kill", config.kills), ("stop", config.stops), ("restart", restarts_on))
        if on
    ]
    try:
        while time.monotonic_ns() < deadline_ns:
            time.sleep(0.02)
            now = time.monotonic()
            for process in processes:
                if process.stopped_until is not None and now >= process.stopped_until:
                    process.popen.send_signal(signal.SIGCONT)
                    process.stopped_until = None
            if faults and now >= next_fault and time.monotonic_ns() < deadline_ns - int(0.5e9):
                next_fault = now + rng.uniform(0.5, 1.5) * config.fault_every_s
                victim = rng.choice(processes)
                kind = rng.choice(faults)
                if kind == "restart":
                    restart_server(config)
                    restarts += 1
                elif (
                    victim.poll_ready()
                    and victim.popen.poll() is None
                    and victim.stopped_until is None
                ):
                    if kind == "kill":
                        victim.popen.send_signal(signal.SIGKILL)
                        victim.popen.wait()
                        kills += 1
                        replacement = spawn(victim.index, victim.incarnation + 1)
                        processes[processes.index(victim)] = replacement
                    else:
                        victim.popen.send_signal(signal.SIGSTOP)
                        victim.stopped_until = now + rng.uniform(0.5, 2.5) * stale_real_s
                        stops += 1
            if now >= next_progress:
                next_progress = now + 1.0
                ops = _count_invokes(sorted(history_dir.glob("*.jsonl")), offsets)
                _say(
                    config,
                    f"torture: {now - started:5.1f} s  {ops} operations  "
                    f"{kills} kills  {stops} stops"
                    + (f"  {restarts} restarts" if restarts_on else ""),
                )
    finally:
        for process in processes:
            if process.stopped_until is not None:
                process.popen.send_signal(signal.SIGCONT)
        for process in processes:
            try:
                process.popen.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.popen.kill()
                process.popen.wait()
        for popen in spawned:
            _close_pipes(popen)
        if cutter is not None:
            cutter.close()
    # A worker whose owner's walk raised (its own mistake, not the store's).
    failed = [f"w{p.index}.{p.incarnation}" for p in processes if p.popen.returncode == WALK_FAILED]
    if cutter is not None:
        _say(config, f"torture: {cutter.cuts} acknowledgements lost at commits")
    judged = _judge(config, seed, initial, history_dir, out, kills, stops, restarts)
    if cutter is not None:
        judged = attrs.evolve(judged, lost_acks=cutter.cuts)
    if failed:
        _say(
            config,
            f"torture: INCONCLUSIVE: worker {', '.join(failed)} stopped on an error of its own "
            "(its traceback is above): the run is thinner than it looks",
        )
        if judged.status == 0:
            judged = attrs.evolve(judged, status=3)
    return judged


def _judge(
    config: TortureConfig,
    seed: int,
    initial: runstore.StoreState,
    history_dir: Path,
    out: Path,
    kills: int,
    stops: int,
    restarts: int,
) -> TortureResult:
    invariant_failure = None
    judge_clock = TortureClock(0, 1.0, 0)
    with contextlib.closing(open_patiently(config.db, judge_clock, config.store)) as store:
        final = store.state()
        try:
            store.check_invariants()
        except AssertionError as error:
            invariant_failure = f"{type(error).__name__}: {error}"
    operations = load_history(sorted(history_dir.glob("*.jsonl")))
    recorded = len(operations)
    verdict = check_history(
        operations,
        initial=initial,
        final=final,
        max_unknown=config.max_unknown,
        shrink=config.shrink,
        max_shrunk=MAX_SHRUNK,
    )
    rate = verdict.operations_per_second
    _say(
        config,
        f"torture: {recorded} operations recorded, {kills} kills, {stops} stops"
        + (f", {restarts} restarts" if restarts else ""),
    )
    _say(config, verdict.summary())
    _say(config, f"torture: {rate:,.0f} operations checked per second")
    overlaps = overlapping_pairs(operations)
    aimed = {pair for pair, names in OVERLAPS.items() if set(names) & set(config.workloads)}
    missed = sorted(aimed - set(overlaps))
    _say(
        config,
        f"torture: {len(aimed) - len(missed)} of {len(aimed)} pairs the workloads aim at "
        "were in flight together"
        + (
            f" (not: {', '.join(f'{a} with {b}' for a, b in missed[:3])}"
            + (f" and {len(missed) - 3} more)" if len(missed) > 3 else ")")
            if missed
            else ""
        ),
    )
    written: list[Path] = []
    for failing in verdict.violations:
        written += write_violation(failing, out)
    for path in written:
        _say(config, f"torture: wrote {path}")
    if invariant_failure is not None:
        _say(config, f"torture: the final state breaks an invariant: {invariant_failure}")
    if verdict.status == "violation" or invariant_failure is not None:
        status = 1
        _say(config, f"torture: FAILED (seed {seed})")
    elif verdict.status == "unchecked":
        status = 3
        _say(config, f"torture: INCONCLUSIVE: some objects were not checked (seed {seed})")
    else:
        status = 0
        _say(config, "torture: passed")
    return TortureResult(
        verdict=verdict,
        status=status,
        operations=recorded,
        kills=kills,
        stops=stops,
        restarts=restarts,
        invariant_failure=invariant_failure,
        written=tuple(written),
        history_dir=history_dir,
        overlaps=dict(overlaps),
    )


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="runstore torture",
        description="Worker processes race on one database with kills and stops; the recorded "
        "history and the final state are checked for linearizability against the model.",
    )
    parser.add_argument(
        "--db",
        required=True,
        metavar="TARGET",
        help="a SQLite file path, or a PostgreSQL URL if runstore.open opens it",
    )
    parser.add_argument("--workers", type=int, default=3, help="worker processes (default 3)")
    parser.add_argument("--seconds", type=float, default=10.0, help="time budget (default 10)")
    parser.add_argument(
        "--runs",
        type=int,
        default=1,
        help="live runs at a time; 1, the default, puts every owner on the same run",
    )
    parser.add_argument("--seed", type=int, help="seed of the coordinator's choices")
    parser.add_argument(
        "--out",
        default=".runstore-torture",
        metavar="DIR",
        help="histories and violation files (default %(default)s)",
    )
    parser.add_argument("--store", metavar="MODULE:FACTORY", help="factory(clock, target) -> store")
    parser.add_argument("--speed", type=float, default=100.0, help="time speed-up (default 100)")
    parser.add_argument(
        "--skew-ms", type=int, default=5_000, help="largest clock skew of a host (default 5000)"
    )
    parser.add_argument(
        "--slot-ms",
        type=float,
        default=2.0,
        help="workers start most steps on a shared grid of this many ms, so they collide;"
        " 0 for free running (default %(default)s)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=2,
        help="owners per worker process, each a thread with its own connection (default 2)",
    )
    parser.add_argument(
        "--workload",
        action="append",
        choices=list(WORKLOADS),
        metavar="NAME",
        help="a workload every owner takes turns at; repeat for several, taken in turns "
        f"(default all: {' '.join(DEFAULT_MIX)})",
    )
    parser.add_argument(
        "--phase-ms",
        type=float,
        default=PHASE_MS,
        help="how long all owners stay on one workload before the next (default %(default)g)",
    )
    parser.add_argument("--no-kills", action="store_true", help="never SIGKILL a worker")
    parser.add_argument("--no-stops", action="store_true", help="never SIGSTOP a worker")
    parser.add_argument(
        "--restart-command",
        metavar="CMD",
        help="a shell command that restarts the PostgreSQL server of --db (e.g. pg_ctl restart "
        "-m immediate); run now and then as a fault, the torture waiting for the server's start "
        "time to change",
    )
    parser.add_argument(
        "--max-unknown",
        type=int,
        default=MAX_UNKNOWN,
        help="operations of unknown outcome an object may carry (default %(default)s)",
    )
    parser.add_argument(
        "--no-shrink",
        action="store_true",
        help="report violations without shrinking them (faster; the files hold whole objects)",
    )
    parser.add_argument(
        "--widen",
        type=float,
        default=None,
        metavar="P",
        help="chance that a worker's store pauses (up to 5 ms) after a read or inside a "
        "transaction, on any store built on sqlite3 or psycopg; 0 never "
        f"(default {DEFAULT_WIDEN:g})",
    )
    parser.add_argument(
        "--lost-acks",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="PostgreSQL: the workers connect through a proxy that, about every SECONDS, "
        "forwards a commit and cuts the connection before its answer, in every phase; 0 never "
        f"(default on a PostgreSQL URL: every {DEFAULT_LOST_ACKS_S:g} s in the phases of "
        f"{', '.join(LOST_ACK_WORKLOADS)} only)",
    )
    parser.add_argument(
        "--async",
        dest="aio",
        action="store_true",
        help="each worker process drives async stores: every owner's store is runstore.aopen's"
        " (or --store's async one), its calls run as tasks on the process's one event loop",
    )
    parser.add_argument("--quiet", action="store_true", help="print nothing")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """``runstore torture ...``; returns the exit status."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments == ["worker"]:
        return worker_main(json.loads(sys.stdin.readline()))
    args = parser().parse_args(arguments)
    config = TortureConfig(
        db=args.db,
        workers=args.workers,
        seconds=args.seconds,
        runs=args.runs,
        seed=args.seed,
        out=args.out,
        store=args.store,
        speed=args.speed,
        skew_ms=args.skew_ms,
        slot_ms=args.slot_ms,
        threads=args.threads,
        kills=not args.no_kills,
        stops=not args.no_stops,
        restart_command=args.restart_command,
        max_unknown=args.max_unknown,
        shrink=not args.no_shrink,
        quiet=args.quiet,
        workloads=tuple(args.workload) if args.workload else DEFAULT_MIX,
        phase_ms=args.phase_ms,
        widen=args.widen,
        lost_acks_s=args.lost_acks,
        aio=args.aio,
    )
    try:
        return run_torture(config).status
    except TortureError as error:
        sys.stderr.write(f"runstore torture: {error}\n")
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
