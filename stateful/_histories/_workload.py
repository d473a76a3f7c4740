"""The random workload of one owner: what a torture worker (or a generated
history's client) does to the store, step by step.

A ``Worker`` is one owner walking a small, moving window of run ids
(``<prefix>0``, ``<prefix>1``, ...): each step reads one run of the window
and acts on what it saw, as a real owner would, including the stale and
displaced moves that races are made of (claiming what someone just claimed,
activating with an old snapshot, a heartbeat after losing the run, a late
settle). Runs come in lineages of ``ROUNDS_PER_LINEAGE`` rounds (the first
round a fork of the root, so creates can fail on a missing parent). When the
window's first run is settled the window moves on, so every worker keeps
converging on the same few live runs.

Now and then a step is a multi-run operation instead, where the store offers
it: a walk over the pages of ``list_runs`` (a random filter, small pages),
``claim_next``, ``claim_next_many`` of one to three runs,
``heartbeat_many`` over the runs this owner holds (and a
run it may not), or ``purge_settled`` of runs settled well before (20 s of
store time: more than two clock skews, so a run settling during the call is
never eligible).

The worker only uses the ``RunStore`` protocol and a clock, so the same walk
runs against a real store in a torture process and against the reference
model in ``runstore.stateful._histories._generate``.

Workloads (``WORKLOADS``) aim the walk at the windows where races live: each
is the walk above with some moves made much more likely, so that operations
which can touch the same run or the same candidate set are in flight at
once. ``OVERLAPS`` lists those pairs and the workloads that make each
overlap; ``overlapping_pairs`` finds them in a recorded history. A torture
runs a mix of workloads in phases on the shared monotonic clock, so every
owner runs the same workload at the same time. The ``zombies`` workload holds
an owner of a run past staleness (a thread waiting on a ``ZombieBoard``)
until a peer starts taking the run over, then lets it go on heartbeating,
transitioning and settling as if it still owned the run.
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol

from runstore import (
    HEARTBEAT_SKEW_ALLOWANCE_MS,
    HEARTBEAT_STALE_AFTER_MS,
    TERMINAL_STATUSES,
    Activated,
    Claimed,
    LivenessEvidence,
    OwnerId,
    RunPage,
    RunRow,
    RunStoreError,
    TransitionGuard,
)

from ._history import Operation

ROUNDS_PER_LINEAGE = 3
#: How many lineages behind the shared window a new incarnation may start.
STRAGGLE_LINEAGES = 3
#: Claims of the ``candidates`` workload start every this many slots of the shared grid.
CLAIM_GRID_SLOTS = 4
#: How old (store time since it settled, ms) a pool run the ``candidates`` workload forks
#: is, at least and at most: past the purges' 20 s on most hosts' clocks (skews differ by
#: up to twice ``--skew-ms``), and young enough that few purges have run since.
FORK_RIPE_MS = (21_000, 60_000)
#: Purges and forks of the ``candidates`` workload start every this many slots: fewer
#: instants than the claims', so that the two often start at the same one.
PURGE_GRID_SLOTS = 64
#: How often a zombie owner's first call, let go at the takeover's instant, is a
#: transition (else its first call is any of its writes, a transition one time in four).
ZOMBIE_WRITES_FIRST = 0.5
#: How long an owner of the ``cancel`` workload waits for a peer's first cancel request
#: before it settles its run anyway (ns).
CANCEL_HOLD_NS = 30_000_000
#: The longest settle a cancel request of the ``cancel`` workload waits behind (ns).
SETTLE_CAP_NS = 10_000_000
_SETTLED = ("suspended", "completed", "failed", "cancelled")

#: Each workload by name, with what it aims at.
WORKLOADS: dict[str, str] = {
    "mixed": "every operation at its everyday rate on one run at a time (the walk as it was)",
    "candidates": "claim_next and claim_next_many of every owner at the same instants, on the "
    "same oldest runs, beside a pool of claimable runs refilled as it drains, while suspensions, "
    "settles and cancel requests change which runs are candidates, and purge_settled deletes old "
    "ones while forks of the runs it may choose are created",
    "batches": "heartbeat_many over the runs an owner holds and runs others hold, against "
    "steals, takeovers, settles, cancellation and snapshot reads of those runs",
    "lineage": "new rounds and children of one lineage created while request_cancel_lineage, "
    "settles and purge_settled run over the same lineage",
    "cancel": "request_cancel and request_cancel_lineage against acknowledge_cancel, "
    "heartbeats, transitions, settles and takeovers of the same run; an owner about to settle "
    "waits for a peer about to ask, and both act at one instant",
    "zombies": "an owner held past staleness and let go the moment a peer starts taking its "
    "run over; it goes on heartbeating, transitioning and settling as the owner",
}

#: The workloads ``runstore torture`` runs when none is named, in phase order.
DEFAULT_MIX: tuple[str, ...] = ("mixed", "cancel", "candidates", "batches", "lineage", "zombies")

#: Operations that take a run from its owner (a zombie is let go when one starts).
TAKEOVERS = frozenset({"steal", "claim_and_own", "recover_claim"})


def _pair(a: str, b: str) -> tuple[str, str]:
    return (a, b) if a <= b else (b, a)


#: Every pair of operations that can touch the same run or the same candidate
#: set, with the workloads that make the two overlap often (each pair sorted).
OVERLAPS: dict[tuple[str, str], tuple[str, ...]] = {
    _pair(a, b): tuple(workloads.split())
    for a, b, workloads in (
        # One candidate set: claim_next picks while runs join and leave it.
        ("claim_next", "claim_next", "candidates"),
        ("claim_next", "claim", "candidates"),
        ("claim_next", "claim_and_own", "candidates"),
        ("claim_next", "transition_owned", "candidates"),
        ("claim_next", "request_cancel", "candidates"),
        ("claim_next", "create", "candidates"),
        ("claim_next", "purge_settled", "candidates"),
        ("claim_next", "heartbeat_many", "candidates batches"),
        # Batches of claims over the same candidate set.
        ("claim_next_many", "claim_next_many", "candidates"),
        ("claim_next", "claim_next_many", "candidates"),
        ("claim", "claim_next_many", "candidates"),
        ("claim_next_many", "transition_owned", "candidates"),
        ("claim_next_many", "request_cancel", "candidates"),
        ("purge_settled", "purge_settled", "candidates lineage"),
        ("purge_settled", "transition_owned", "candidates lineage"),
        ("purge_settled", "create", "candidates lineage"),
        ("purge_settled", "request_cancel_lineage", "lineage"),
        # Batches of heartbeats against everything that moves the same runs.
        ("heartbeat_many", "heartbeat_many", "batches"),
        ("heartbeat_many", "steal", "batches zombies"),
        ("heartbeat_many", "claim_and_own", "batches zombies"),
        ("heartbeat_many", "transition_owned", "batches zombies"),
        ("heartbeat_many", "acknowledge_cancel", "batches"),
        ("heartbeat_many", "request_cancel", "batches"),
        ("heartbeat_many", "list_runs", "batches"),
        # Lineage rounds.
        ("create", "create", "lineage"),
        ("create", "request_cancel_lineage", "lineage"),
        ("create", "transition_owned", "lineage"),
        ("request_cancel_lineage", "transition_owned", "lineage cancel"),
        ("request_cancel_lineage", "acknowledge_cancel", "cancel"),
        ("request_cancel_lineage", "request_cancel", "cancel"),
        # Cancellation.
        ("request_cancel", "acknowledge_cancel", "cancel"),
        ("request_cancel", "transition_owned", "cancel"),
        ("request_cancel", "steal", "zombies"),
        ("request_cancel", "claim_and_own", "cancel"),
        ("acknowledge_cancel", "transition_owned", "cancel"),
        ("acknowledge_cancel", "steal", "zombies"),
        ("acknowledge_cancel", "claim_and_own", "cancel"),
        # Steals and takeovers, and the displaced owner still writing.
        ("steal", "steal", "zombies"),
        ("steal", "claim_and_own", "zombies"),
        ("claim_and_own", "claim_and_own", "mixed"),
        ("steal", "heartbeat", "zombies"),
        ("steal", "transition_owned", "zombies"),
        ("claim_and_own", "heartbeat", "zombies"),
        ("claim_and_own", "transition_owned", "zombies"),
        ("activate", "heartbeat", "zombies"),
        ("activate", "transition_owned", "zombies"),
        ("recover_claim", "activate", "zombies"),
        ("transition_owned", "transition_owned", "zombies cancel"),
        ("heartbeat", "transition_owned", "zombies mixed"),
        ("claim", "claim", "mixed"),
        ("claim", "claim_and_own", "mixed"),
        ("claim", "activate", "mixed"),
    )
}

#: Operations over a candidate set rather than named runs.
_OVER_A_SET = frozenset({"claim_next", "claim_next_many", "purge_settled", "list_runs"})


#: Operations on a whole lineage: they touch every round of it.
_OVER_A_LINEAGE = frozenset({"create", "request_cancel_lineage"})


def _lineage_of(run_id: str) -> frozenset[str]:
    """Every round of the lineage of one of a walk's run ids (by its numbering)."""
    stem = run_id.rstrip("0123456789")
    tail = run_id[len(stem) :]
    if not tail:
        return frozenset({run_id})
    root = int(tail) - int(tail) % ROUNDS_PER_LINEAGE
    return frozenset(f"{stem}{root + k}" for k in range(ROUNDS_PER_LINEAGE))


def touched(op: Operation) -> frozenset[str] | None:
    """The runs an operation can touch (a lineage operation every round of
    the lineage, by the walk's numbering), or None for an operation over a
    candidate set (it may touch any run). ``op``: a recorded call."""
    if op.method in _OVER_A_SET:
        return None
    if op.method == "heartbeat_many":
        ids = op.args[1] if len(op.args) > 1 else op.kwargs.get("run_ids", ())
        return frozenset(i for i in ids if isinstance(i, str))
    first = op.args[0] if op.args else op.kwargs.get("run_id")
    if not isinstance(first, str):
        return frozenset()
    return _lineage_of(first) if op.method in _OVER_A_LINEAGE else frozenset({first})


def overlapping_pairs(operations: Iterable[Operation]) -> Counter[tuple[str, str]]:
    """How often each pair of ``OVERLAPS`` was in flight at once in a history
    of ``operations``.

    Two calls overlap when their intervals intersect (a pending call never
    ends), they were made by different owners (process and thread), and they
    can touch the same run (see ``touched``) or one of them works on a
    candidate set. Counted once per pair of calls.
    """
    ops = sorted(operations, key=lambda op: op.invoked_ns)
    found: Counter[tuple[str, str]] = Counter()
    active: list[tuple[int, Operation, frozenset[str] | None]] = []
    for op in ops:
        active = [entry for entry in active if entry[0] > op.invoked_ns]
        mine = touched(op)
        for _, other, theirs in active:
            pair = _pair(op.method, other.method)
            if pair not in OVERLAPS or (other.process, other.thread) == (op.process, op.thread):
                continue
            if mine is None or theirs is None or mine & theirs:
                found[pair] += 1
        ends = op.returned_ns if op.returned_ns is not None else 2**63
        active.append((ends, op, mine))
    return found


class ZombieBoard:
    """Where owners held past staleness wait to be let go (files in ``folder``,
    shared by the processes of one torture).

    An owner holding ``run_id`` writes ``<run_id>.held`` and waits for
    ``<run_id>.wake``; a peer about to take a run over writes the wake file
    when the held file is there, and waits for the owner's answer
    (``<run_id>.up``: an instant on the monotonic clock a little ahead), so
    that both make their next call at that same instant: the takeover and the
    displaced owner's writes are in flight together. ``folder``: the board's
    folder (created).
    """

    #: How far ahead of its waking a held owner sets the common instant (ns).
    LEAD_NS = 3_000_000
    #: How much later than the common instant a peer may act (ns).
    JITTER_NS = 1_500_000
    #: How long a peer waits for a held owner's answer (ns).
    ANSWER_NS = 20_000_000

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)

    def _file(self, run_id: str, kind: str) -> Path:
        return self.folder / f"{run_id}.{kind}"

    def hold(self, run_id: str, until_ns: int, stale_ns: int = 0) -> bool:
        """Wait until a peer starts taking ``run_id`` over, then until the
        instant both act (True), or until the monotonic clock reaches
        ``until_ns`` (False). Peers are not heard before ``stale_ns`` (the
        monotonic time when the run is surely stale)."""
        wake = self._file(run_id, "wake")
        held = self._file(run_id, "held")
        wake.unlink(missing_ok=True)
        self._file(run_id, "up").unlink(missing_ok=True)
        # With the hold's end: a killed owner's file is stale, not obeyed.
        # Written whole then renamed: a peer reading a file created but not
        # yet written would find no times in it and not wake this owner.
        self._write_atomically(held, f"{stale_ns} {until_ns}")
        try:
            while time.monotonic_ns() < until_ns:
                if wake.exists():
                    instant = time.monotonic_ns() + self.LEAD_NS
                    self._write_atomically(self._file(run_id, "up"), str(instant))
                    _sleep_until(instant)
                    return True
                time.sleep(0.001)
            return False
        finally:
            held.unlink(missing_ok=True)
            wake.unlink(missing_ok=True)
            self._file(run_id, "up").unlink(missing_ok=True)

    def wake(self, run_id: str) -> bool:
        """Let an owner holding ``run_id`` go, if one is, and wait for the
        instant it names (or a short while, when it does not answer). True
        when both act at the owner's instant."""
        try:
            stale_ns, until_ns = map(int, self._file(run_id, "held").read_text().split())
        except (FileNotFoundError, ValueError):
            return False
        if not stale_ns <= time.monotonic_ns() < until_ns:
            return False
        self._file(run_id, "wake").touch()
        up = self._file(run_id, "up")
        give_up = time.monotonic_ns() + self.ANSWER_NS
        while time.monotonic_ns() < give_up:
            try:
                instant = int(up.read_text())
            except (FileNotFoundError, ValueError):
                time.sleep(0.0002)
                continue
            # Left for other peers starting a takeover before the instant. A
            # peer comes up to a little after it: the held owner's first
            # writes land before, during or after the takeover's.
            _sleep_until(instant + random.randrange(0, self.JITTER_NS))
            return True
        return False

    def taking(self, run_id: str) -> bool:
        """Whether a held owner of ``run_id`` has been told of a takeover and
        named its instant (a peer may join in until then)."""
        return self._file(run_id, "up").exists()

    def frontier(self, kind: str = "frontier") -> int:
        """The first run number of the window, as a worker last published it (0
        before any did): a new incarnation of a killed worker starts there, not at
        run 0, which would bring the purged runs of the start back to life, one
        object living (and gathering calls of unknown outcome) for the whole run.
        ``kind="pool"``: the first number of the candidate pool not known created."""
        try:
            return int(self._file("window", kind).read_text())
        except (FileNotFoundError, ValueError):
            return 0

    def publish(self, frontier: int, kind: str = "frontier") -> None:
        """Say that the window (``kind="pool"``: the candidate pool) has moved on to
        run number ``frontier``."""
        self._write_atomically(self._file("window", kind), str(frontier))

    @staticmethod
    def _write_atomically(path: Path, text: str) -> None:
        temporary = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}")
        temporary.write_text(text)
        os.replace(temporary, path)

    def held(self) -> list[str]:
        """The run ids owners are holding now (files left by killed owners
        included, until their holds would have ended)."""
        return [path.name[: -len(".held")] for path in self.folder.glob("*.held")]


def _sleep_until(instant_ns: int) -> None:
    remaining = instant_ns - time.monotonic_ns()
    if remaining > 0:
        time.sleep(remaining / 1e9)


class _Clock(Protocol):
    def now_ms(self) -> int: ...


class Worker:
    """One owner's random walk over the live window of runs.

    ``nap_probability``: the chance per step of a pause long enough for this
    owner's leases to go stale (``stale_real_s`` up to 1.5 times); zero in
    simulations. ``settle``: whether owners ever settle runs (without it one
    run lives for the whole walk). ``lineages``: whether runs form lineages.
    ``slot_ms``: when set, most steps start on a grid of the system-wide
    monotonic clock, so workers in different processes act at the same
    instants and their operations collide (races become likely, not lucky).
    ``multi``: whether steps may be multi-run operations (those the store has).
    ``workloads``: the workloads (``WORKLOADS``) this owner takes turns at,
    one per phase; ``phase_ms``: a phase's length on the system-wide
    monotonic clock (every owner of a torture in the same phase at once), or
    0 to let ``phase`` say, or failing that to change every 40 steps;
    ``phase``: a function giving the current phase's number. ``board``: where
    a held owner waits for a peer's takeover (None: a held owner skips its
    steps until its lease is stale, as in a simulation), and where the
    window's first run is shared (a new incarnation starts its walk there); ``until_ns``: the
    monotonic time no hold may outlast.
    """

    def __init__(
        self,
        store: Any,
        clock: _Clock,
        me: OwnerId,
        rng: random.Random,
        prefix: str,
        window: int,
        *,
        stale_real_s: float = 0.0,
        nap_probability: float = 0.0,
        settle: bool = True,
        lineages: bool = True,
        slot_ms: float = 0.0,
        multi: bool = True,
        workloads: Sequence[str] = ("mixed",),
        phase_ms: float = 0.0,
        phase: Callable[[], int] | None = None,
        board: ZombieBoard | None = None,
        until_ns: int | None = None,
    ) -> None:
        unknown = [name for name in workloads if name not in WORKLOADS]
        if unknown or not workloads:
            raise ValueError(f"unknown workloads {unknown}; the workloads are {list(WORKLOADS)}")
        self.store = store
        self.clock = clock
        self.me = me
        self.rng = rng
        self.prefix = prefix
        self.window = window
        self.stale_real_s = stale_real_s
        self.nap_probability = nap_probability
        self.settle = settle
        self.lineages = lineages
        self.slot_ns = int(slot_ms * 1_000_000)
        self.multi = multi
        self.workloads = tuple(workloads)
        self.phase_ns = int(phase_ms * 1_000_000)
        self.phase = phase
        self.board = board
        self.until_ns = until_ns
        self.steps = 0
        #: The workload of the current step.
        self.mode = self.workloads[0]
        #: A held owner (simulations only): run id, what it held, its row, and
        #: the store time after which it goes on.
        self.held: tuple[str, str, RunRow, int] | None = None
        self.frontier = 0
        if board is not None:
            # A new incarnation starts a little behind the window, as a worker that
            # fell behind does: it creates again a few runs just purged (new rounds
            # under a lineage settled a while ago, claimable runs nobody else is
            # touching), which purge_settled and claim_next must get right. From
            # run 0, every incarnation revived the campaign's first runs instead,
            # and one object lived (gathering unknown outcomes) for the whole run.
            behind = rng.randrange(0, STRAGGLE_LINEAGES * ROUNDS_PER_LINEAGE + 1)
            self.frontier = max(0, board.frontier() - behind)
        self.settled: set[int] = set()
        self.mine: set[int] = set()
        self.claims: dict[str, RunRow] = {}
        #: The candidate pool (``step_candidates``): the first number not known
        #: created, those above it known created, the pool runs this owner holds,
        #: and whether its last claim came back short.
        self.pool_low = 0
        self.pooled: set[int] = set()
        self.pool_held: set[str] = set()
        self.short = True
        #: Runs this owner settled (perhaps), with the store time it did,
        #: oldest first, and how many forks it made of such runs.
        self.settled_at: list[tuple[str, int]] = []
        self.forks = 0
        #: How long this owner's last ``transition_owned`` took (ns, at most ``SETTLE_CAP_NS``).
        self.settle_ns = 0
        self.counter = 0

    # -- helpers --

    def run_id(self, n: int) -> str:
        return f"{self.prefix}{n}"

    def now(self) -> int:
        """The caller's reading: mostly the clock, sometimes ahead (inside the
        allowance, rarely past it) or behind."""
        now = self.clock.now_ms()
        roll = self.rng.random()
        if roll < 0.08:
            return now + self.rng.randrange(0, HEARTBEAT_SKEW_ALLOWANCE_MS)
        if roll < 0.09:
            return now + HEARTBEAT_SKEW_ALLOWANCE_MS + self.rng.randrange(1, 5_000)
        if roll < 0.14:
            return max(0, now - self.rng.randrange(0, HEARTBEAT_STALE_AFTER_MS))
        return now

    def state_json(self) -> str:
        self.counter += 1
        return json.dumps({"host": self.me.host_id, "step": self.counter})

    def evidence(self, owner: OwnerId, now: int) -> LivenessEvidence:
        if self.rng.random() < 0.3:
            return LivenessEvidence(owner, now, "lease-expired")
        if owner.host_id == self.me.host_id:
            return LivenessEvidence(owner, now, "same-host-pid-dead")
        return LivenessEvidence(owner, now, "cross-host-unreachable-stale")

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Call the store; an exception is returned, not raised (the recorder
        has written it down; a store that crashes is reported, not obeyed).
        A takeover with evidence (or a cancel request of the zombies or cancel
        workload) first lets go an owner held on that run, and waits for the
        instant it names."""
        if (
            self.board is not None
            and method in TAKEOVERS
            and args
            and (method != "claim_and_own" or len(args) > 4 or "evidence" in kwargs)
        ) or (
            self.board is not None
            and method == "request_cancel"
            and self.mode in ("zombies", "cancel")
        ):
            # A zombie hunter's cancel request joins the takeover's instant too; in
            # the cancel workload, an owner waiting to settle the run is let go.
            woke = self.board.wake(args[0])
            late = woke and method == "request_cancel" and self.mode == "cancel"
            if late and self.rng.random() < 0.5:
                # The request's read and its write must straddle the settle's commit.
                # Where a settle takes several round trips (PostgreSQL), a request
                # started with it writes before the commit: half the time, start up
                # to one settle (this owner's last) later.
                time.sleep(self.rng.uniform(0, self.settle_ns) / 1e9)
        started = time.monotonic_ns()
        try:
            answer = getattr(self.store, method)(*args, **kwargs)
        except Exception as error:
            answer = error
        if method == "transition_owned":
            self.settle_ns = min(time.monotonic_ns() - started, SETTLE_CAP_NS)
        settling = method == "transition_owned" and len(args) > 2 and args[2] in TERMINAL_STATUSES
        if settling and (
            not isinstance(answer, Exception)
            or (isinstance(answer, RunStoreError) and answer.code == "persistence_failed")
        ):
            # Settled (perhaps): a run the candidates workload may fork.
            self.settled_at.append((args[0], self.clock.now_ms()))
        return answer

    # -- one step --

    def workload(self) -> str:
        """The workload of the current phase."""
        if len(self.workloads) == 1:
            return self.workloads[0]
        if self.phase is not None:
            index = self.phase()
        elif self.phase_ns:
            index = time.monotonic_ns() // self.phase_ns
        else:
            index = self.steps // 40
        return self.workloads[index % len(self.workloads)]

    def step(self) -> None:
        rng = self.rng
        self.steps += 1
        if self.held is not None:
            self.still_held()
            return
        if self.nap_probability and rng.random() < self.nap_probability:
            # A pause (a slow step, a collector): long enough for leases to go stale.
            time.sleep(rng.uniform(0, 1.5 * self.stale_real_s))
        if self.slot_ns and rng.random() < 0.9:
            # Start on the shared slot grid (the monotonic clock is system-wide),
            # as pollers on an aligned schedule do: every worker acts at once.
            now = time.monotonic_ns()
            time.sleep((self.slot_ns - now % self.slot_ns) / 1e9)
        self.mode = self.workload()
        if self.mode == "mixed":
            self.walk()
        elif self.mode == "candidates":
            self.step_candidates()
        elif self.mode == "batches":
            self.step_batches()
        elif self.mode == "lineage":
            self.step_lineage()
        elif self.mode == "cancel":
            self.step_cancel()
        else:
            self.step_zombies()

    # -- the workloads --

    def pick(self, width: int | None = None) -> str:
        return self.run_id(self.rng.choice(self.live_window(width)))

    def step_candidates(self) -> None:
        """Several owners claim at once from a small pool of claimable runs,
        refilled as it drains, while others change which runs are candidates.

        The pool's runs (``<prefix>c<k>``) are roots of their own, each its own
        object, created in turn and touched by nothing but claims until
        someone takes one; the window's own claimable runs are candidates too.
        A claim (``claim_next`` or ``claim_next_many``) and a write that
        changes candidacy (a suspension or settle of a run this owner took, a
        cancel request) start on the claim grid (every ``CLAIM_GRID_SLOTS``
        slots of the shared clock), so the claimers of every worker meet there
        on the same oldest runs, beside pool runs nobody touches. An owner
        whose last claim came back short refills more often, so the pool
        holds a few runs more than a round of claims takes. Purges start on
        a coarser grid (``PURGE_GRID_SLOTS``), and so do forks of pool runs settled a while ago
        (``fork_settled``), runs a purge at that instant may have chosen:
        a run that gains a child between a purge's choice and its deletion
        must be kept. None of this hangs on the seed: every claim step of
        every owner lands on one of those instants."""
        rng = self.rng
        roll = rng.random()
        can_next, can_many = self.offers("claim_next"), self.offers("claim_next_many")
        refill = 0.25 if self.short else 0.06
        if roll < 0.45 and (can_next or can_many):
            self.align(CLAIM_GRID_SLOTS)
            if can_many and (roll < 0.2 or not can_next):
                self.claim_next_many()
            else:
                self.claim_next()
        elif roll < 0.45 + refill:
            self.refill()
        elif roll < 0.57 + refill:
            self.align(CLAIM_GRID_SLOTS)
            self.change_candidacy()
        elif roll < 0.60 + refill and self.offers("purge_settled"):
            # Rarer than the rest: every purge is a term of the revision count. On
            # a grid of its own (a claim instant too), shared with forks of old
            # settled runs (below), which make runs the purge chose ineligible.
            self.align(PURGE_GRID_SLOTS)
            self.call("purge_settled", self.clock.now_ms() - 20_000)
        elif roll < 0.65 + refill:
            if not self.fork_settled():
                self.walk(width=3, multi=0.0)
        elif roll < 0.67 + refill and self.offers("heartbeat_many"):
            self.heartbeat_many()
        elif roll < 0.69 + refill and self.offers("list_runs"):
            self.list_pages()
        else:
            self.walk(width=3, multi=0.0)

    def align(self, slots: int) -> None:
        """Wait for the next instant on the grid of ``slots`` slots of the
        shared monotonic clock (nothing without a slot grid)."""
        if self.slot_ns:
            grid = self.slot_ns * slots
            time.sleep((grid - time.monotonic_ns() % grid) / 1e9)

    def refill(self) -> None:
        """Create the next runs of the candidate pool (one of the first two
        not known to exist, and after a short claim one or two more), each a
        root of its own."""
        if self.board is not None and self.pool_low < (shared := self.board.frontier("pool")):
            self.pool_low = shared
        moved = False
        for _ in range(self.rng.randint(1, 3) if self.short else 1):
            # The first two numbers not known created (pool_low is never known created).
            second = self.pool_low + 1
            while second in self.pooled:
                second += 1
            k = self.rng.choice((self.pool_low, second))
            self.call("create", f"{self.prefix}c{k}", self.state_json())
            self.pooled.add(k)  # created now, or someone else did first
            while self.pool_low in self.pooled:
                self.pooled.discard(self.pool_low)
                self.pool_low += 1
                moved = True
        if moved and self.board is not None:
            self.board.publish(self.pool_low, "pool")

    def change_candidacy(self) -> None:
        """A write that changes which runs ``claim_next`` may take, at the
        instant claimers pick: a run this owner took suspended (a candidate
        again) or settled, and otherwise a cancel request or a step of the
        walk."""
        rng = self.rng
        held = sorted(self.pool_held) + [self.run_id(n) for n in sorted(self.mine)]
        if held and rng.random() < 0.7:
            run_id = rng.choice(held)
            to = rng.choice(("suspended", "completed", "completed", "failed"))
            # Any status but running releases the run: it is not this owner's after.
            self.call("transition_owned", run_id, self.me, to, self.state_json())
            self.pool_held.discard(run_id)
            if (n := self.number(run_id)) is not None:
                self.mine.discard(n)
        elif rng.random() < 0.5:
            pool = [f"{self.prefix}c{k}" for k in range(max(0, self.pool_low - 3), self.pool_low)]
            window = [self.run_id(n) for n in self.live_window(3)]
            self.call("request_cancel", rng.choice(pool + window), self.now())
        else:
            self.walk(width=3, multi=0.0)

    def fork_settled(self) -> bool:
        """Create, on the purges' grid (``PURGE_GRID_SLOTS``), a fork
        (``parent_run_id``) of the run this owner settled most recently of
        those old enough (``FORK_RIPE_MS``) for a purge starting at the same
        instant to choose. A run named as parent must be kept, so a purge that
        chose its runs before the fork and deletes them after deletes a run
        it must keep (or fails on the foreign key). The fork is a pool run
        (``<prefix>cf...``): claimed, settled and forked in turn like the
        others. False when this owner settled none old enough."""
        now = self.clock.now_ms()
        youngest, oldest = FORK_RIPE_MS
        self.settled_at = [(rid, at) for rid, at in self.settled_at if now - at <= oldest]
        ripe = [rid for rid, at in self.settled_at if now - at >= youngest]
        if not ripe or not self.offers("purge_settled"):
            return False
        parent = ripe[-1]
        self.settled_at = [(rid, at) for rid, at in self.settled_at if rid != parent]
        self.forks += 1
        fork = f"{self.prefix}cf{self.forks}-{parent[len(self.prefix) :]}"
        self.align(PURGE_GRID_SLOTS)
        self.call("create", fork, self.state_json(), parent_run_id=parent)
        return True

    def took(self, row: Any) -> None:
        """Note a run a claim took: a window run or a pool run this owner now holds."""
        if not isinstance(row, RunRow):
            return
        if (n := self.number(row.run_id)) is not None:
            self.mine.add(n)
            self.claims.pop(row.run_id, None)
        elif row.run_id.startswith(f"{self.prefix}c"):
            self.pool_held.add(row.run_id)

    def step_batches(self) -> None:
        """Batches of heartbeats over runs that other owners move."""
        rng = self.rng
        roll = rng.random()
        if roll < 0.35 and self.offers("heartbeat_many"):
            self.heartbeat_many(others=0.5)
        elif roll < 0.40 and self.offers("list_runs"):
            self.list_pages()
        elif roll < 0.55 and self.offers("list_runs"):
            self.batch_snapshot()
        elif roll < 0.57 and self.offers("claim_next"):
            self.claim_next()
        elif roll < 0.59 and self.offers("claim_next_many"):
            self.claim_next_many()
        elif roll < 0.59 and self.offers("claim_next"):
            self.claim_next()
        elif roll < 0.64:
            self.call("request_cancel", self.pick(2), self.now())
        else:
            self.walk(width=2, multi=0.0)

    def batch_snapshot(self) -> None:
        """A snapshot read that can see a whole batch: every running run on one
        page, or now and then the whole database (``state()``)."""
        if self.rng.random() < 0.2 and self.offers("state"):
            self.call("state")
        else:
            self.call("list_runs", status="running", limit=100)

    def step_lineage(self) -> None:
        """Rounds of one lineage created, cancelled, settled and purged at once."""
        rng = self.rng
        window = self.live_window(ROUNDS_PER_LINEAGE)
        roll = rng.random()
        if roll < 0.15:
            self.call("request_cancel_lineage", self.run_id(rng.choice(window)), self.now())
        elif roll < 0.27:
            # A round or child created early, perhaps twice: the store decides.
            self.create(rng.choice(window))
        elif roll < 0.30 and self.offers("purge_settled"):
            self.call("purge_settled", self.clock.now_ms() - 20_000)
        elif roll < 0.38:
            run_id = self.run_id(rng.choice(window))
            self.call(rng.choice(("lineage", "latest_round")), run_id)
        else:
            self.walk(width=ROUNDS_PER_LINEAGE, multi=0.0)

    def step_cancel(self) -> None:
        """Cancel requests against owners acknowledging, settling and taking
        over, and owners that lost the run acting on a request as if they held it.

        The first request of a run is the one that races: once a run carries
        a request, later ones change nothing. So most steps read one of two
        runs and act on what they saw (``walk``): a peer of a running run not
        yet asked to cancel asks, while its owner, having seen the same, often
        settles it at the same slot (``owned``, ``owned_by_other``). Blind
        requests are rarer: run at every step they would ask every run the
        moment it goes live, and the owner would only ever settle runs
        already asked."""
        rng = self.rng
        roll = rng.random()
        if roll < 0.05:
            self.call("request_cancel", self.pick(2), self.now())
        elif roll < 0.12:
            # As often as before: a lineage's rounds asked while they settle.
            self.call("request_cancel_lineage", self.pick(), self.now())
        elif roll < 0.16:
            # Perhaps not this owner's run (any more): the fence decides.
            self.call("acknowledge_cancel", self.pick(2), self.me, self.now())
        elif roll < 0.18:
            self.call("transition_owned", self.pick(2), self.me, "cancelled", None)
        else:
            self.walk(width=2, multi=0.0)

    def step_zombies(self) -> None:
        """Owners of three runs held past staleness, their peers taking over."""
        rng = self.rng
        held = self.board.held() if self.board is not None and rng.random() < 0.8 else []
        if held:
            # Peers gather on a held run, so that several take it over at once.
            self.walk(width=3, multi=0.0, focus=self.number(rng.choice(held)))
        elif self.offers("heartbeat_many") and rng.random() < 0.03:
            self.heartbeat_many()
        else:
            self.walk(width=3, multi=0.0)

    def hold(self, run_id: str, kind: str, row: RunRow) -> None:
        """Stop acting past staleness while holding ``run_id`` (as its owner,
        or its claimant: ``kind``), until a peer starts taking it over; then
        go on as if nothing happened."""
        if self.board is None:
            release = (
                self.clock.now_ms() + HEARTBEAT_STALE_AFTER_MS + 2 * HEARTBEAT_SKEW_ALLOWANCE_MS
            )
            self.held = (run_id, kind, row, release)
            return
        now_ns = time.monotonic_ns()
        limit = now_ns + int(3 * self.stale_real_s * 1e9)
        if self.until_ns is not None:
            limit = min(limit, self.until_ns)
        if limit <= now_ns:
            return
        # Peers are heard once the lease is stale on this owner's clock (a
        # peer whose clock is ahead may take the run a little sooner, unheard).
        beat = row.heartbeat_at_ms if row.heartbeat_at_ms is not None else self.clock.now_ms()
        stale_in_ms = beat + HEARTBEAT_STALE_AFTER_MS - self.clock.now_ms()
        ns_per_ms = self.stale_real_s * 1e9 / HEARTBEAT_STALE_AFTER_MS
        self.board.hold(run_id, limit, now_ns + int(stale_in_ms * ns_per_ms))
        self.resume(run_id, kind, row)

    def still_held(self) -> None:
        """A simulated hold: nothing until the lease is stale (or, rarely, sooner)."""
        assert self.held is not None
        run_id, kind, row, release = self.held
        if self.clock.now_ms() >= release or self.rng.random() < 0.01:
            self.held = None
            self.resume(run_id, kind, row)

    def resume(self, run_id: str, kind: str, row: RunRow) -> None:
        """A held owner, let go, acts as if it still held ``run_id``."""
        rng = self.rng
        if kind == "claimant":
            token = row.claimed_at_ms
            remembered = self.claims.get(run_id)
            expected = remembered.snapshot if remembered is not None else row.snapshot
            if token is not None:
                self.call("activate", run_id, self.me, token, expected)
            return
        if kind == "batch":
            self.heartbeat_many(others=0.0)
            return
        moves = ["heartbeat", "transition_owned", "acknowledge_cancel", "heartbeat_many"]
        rng.shuffle(moves)
        if rng.random() < ZOMBIE_WRITES_FIRST:
            # Half the time its first call, at the takeover's instant, is a transition
            # (now and then a settle): the write a guard or a lease read must fence.
            to = "running" if rng.random() < 0.5 else rng.choice(("suspended", *_SETTLED))
            self.call("transition_owned", run_id, self.me, to, self.state_json())
            if to != "running":
                return
        for move in moves[: rng.randint(2, 4)]:
            if move == "transition_owned":
                self.call(move, run_id, self.me, "running", self.state_json())
            elif move == "heartbeat_many":
                if self.offers(move):
                    self.heartbeat_many(others=0.0)
            else:
                self.call(move, run_id, self.me, self.now())
        if rng.random() < 0.7:
            to = rng.choice(("suspended", *_SETTLED))
            self.call("transition_owned", run_id, self.me, to, self.state_json())

    # -- the walk --

    def walk(self, width: int | None = None, multi: float = 0.03, focus: int | None = None) -> None:
        """One step of the walk on the live window (``width`` runs, or the
        walk's own), or with ``multi`` probability a multi-run operation;
        on run number ``focus`` when given."""
        rng = self.rng
        if focus is None and self.multi and rng.random() < multi and self.multi_run():
            return
        window = self.live_window(width)
        mine = [n for n in window if n in self.mine]
        n = rng.choice(mine) if mine and rng.random() < 0.5 else rng.choice(window)
        if focus is not None:
            n = focus
        run_id = self.run_id(n)
        row = self.call("get", run_id)
        if isinstance(row, RunStoreError) and row.code == "not_found_row":
            self.create(n)
            return
        if not isinstance(row, RunRow):
            return
        if row.owner == self.me or row.claim == self.me:
            self.mine.add(n)
        else:
            self.mine.discard(n)
        if row.status in TERMINAL_STATUSES:
            self.settled.add(n)
            moved = self.frontier in self.settled
            while self.frontier in self.settled:
                self.settled.discard(self.frontier)
                self.frontier += 1
            if moved and self.board is not None and self.frontier > self.board.frontier():
                self.board.publish(self.frontier)
            self.claims.pop(run_id, None)
            if rng.random() < 0.1:
                self.call("request_cancel", run_id, self.now())
            return
        roll = rng.random()
        if roll < 0.03:
            self.call(rng.choice(("lineage", "latest_round", "ownership_facts")), run_id)
        elif roll < 0.06:
            method = rng.choice(("request_cancel", "request_cancel", "request_cancel_lineage"))
            self.call(method, run_id, self.now())
        elif roll < 0.08:
            # Perhaps a displaced owner's late write: the fence must refuse it.
            self.call(rng.choice(("heartbeat", "reconfirm")), run_id, self.me, self.now())
        elif row.claim == self.me:
            self.claimed(run_id, row)
        elif row.claim is not None:
            self.claimed_by_other(run_id, row)
        elif row.status == "running" and row.owner == self.me:
            self.owned(run_id, row)
        elif row.status == "running":
            self.owned_by_other(run_id, row)
        else:
            self.claimable(run_id, row)

    def offers(self, method: str) -> bool:
        return callable(getattr(self.store, method, None))

    def number(self, run_id: str) -> int | None:
        """The window number of one of this walk's run ids (None for others)."""
        tail = run_id[len(self.prefix) :] if run_id.startswith(self.prefix) else ""
        return int(tail) if tail.isdigit() else None

    def multi_run(self) -> bool:
        """One multi-run operation the store offers; False when it offers none."""
        rng = self.rng
        choices = [
            name
            for name in (
                "list_runs",
                "claim_next",
                "claim_next_many",
                "heartbeat_many",
                "purge_settled",
            )
            if self.offers(name)
        ]
        if not choices:
            return False
        method = rng.choice(choices)
        if method == "list_runs":
            self.list_pages()
        elif method == "claim_next":
            self.claim_next()
        elif method == "claim_next_many":
            self.claim_next_many()
        elif method == "heartbeat_many":
            self.heartbeat_many()
        elif rng.random() < 0.3:
            self.call("purge_settled", self.clock.now_ms() - 20_000)
        return True

    def list_pages(self) -> None:
        """Up to three pages of one random query, each page's cursor the next's;
        now and then a whole-database snapshot read instead (``snapshot_read``)."""
        if self.snapshot_read():
            return
        rng = self.rng
        now = self.now()
        query: dict[str, Any] = rng.choice(
            (
                {},
                {"status": rng.choice(("pending", "running", "suspended", "completed"))},
                {"status": ("pending", "suspended")},
                {"claimable_at": now},
                {"stale_at": now},
                {"claim_stale_at": now},
                {"cancel_requested": rng.choice((True, False))},
                {"lineage_id": self.run_id(self.frontier - self.frontier % ROUNDS_PER_LINEAGE)},
                {"parent_run_id": self.run_id(self.frontier - self.frontier % ROUNDS_PER_LINEAGE)},
            )
        )
        limit = rng.choice((1, 2, 3, 100))
        with_state = rng.random() < 0.3
        after = None
        for _ in range(3):
            page = self.call("list_runs", **query, limit=limit, after=after, with_state=with_state)
            if not isinstance(page, RunPage) or page.next is None:
                return
            after = page.next

    def snapshot_read(self) -> bool:
        """One time in ten a ``state()``, one in ten ``changes(0)``, where the
        store offers them: snapshot reads recorded with what they saw (the
        checker holds each to showing every ``heartbeat_many`` whole or not at
        all). False when none was made."""
        roll = self.rng.random()
        if roll < 0.1 and self.offers("state"):
            self.call("state")
            return True
        if roll < 0.2 and self.offers("changes"):
            self.call("changes", 0)
            return True
        return False

    def claim_next(self) -> None:
        row = self.call("claim_next", self.me, self.now())
        self.took(row)
        self.short = not isinstance(row, RunRow)

    def claim_next_many(self) -> None:
        """A batch of one to three of the oldest claimable runs."""
        limit = self.rng.choice((1, 2, 3))
        rows = self.call("claim_next_many", self.me, self.now(), limit)
        for row in rows if isinstance(rows, list) else ():
            self.took(row)
        self.short = not isinstance(rows, list) or len(rows) < limit

    def heartbeat_many(self, others: float = 0.2) -> None:
        """One batch over the runs this owner holds, and with ``others``
        probability (or when it holds none) runs of the window it may not."""
        ids = [self.run_id(n) for n in sorted(self.mine)]
        if not ids or self.rng.random() < others:
            window = self.live_window(max(self.window, 2))
            ids += [self.run_id(n) for n in self.rng.sample(window, self.rng.randint(1, 2))]
        self.call("heartbeat_many", self.me, sorted(set(ids)), self.now())

    def live_window(self, width: int | None = None) -> list[int]:
        """The first ``width`` (the walk's window unless given) run numbers from
        the frontier not known settled."""
        numbers: list[int] = []
        n = self.frontier
        while len(numbers) < (width or self.window):
            if n not in self.settled:
                numbers.append(n)
            n += 1
        return numbers

    def create(self, n: int) -> None:
        run_id = self.run_id(n)
        ordinal = n % ROUNDS_PER_LINEAGE if self.lineages else 0
        root = self.run_id(n - ordinal)
        if ordinal == 0:
            self.call("create", run_id, self.state_json())
        elif ordinal == 1:
            self.call(
                "create",
                run_id,
                self.state_json(),
                parent_run_id=root,
                lineage_id=root,
                round_ordinal=ordinal,
            )
        else:
            self.call("create", run_id, self.state_json(), lineage_id=root, round_ordinal=ordinal)

    def claimable(self, run_id: str, row: RunRow) -> None:
        now = self.now()
        if self.rng.random() < 0.5:
            outcome = self.call("claim", run_id, row.snapshot, self.me, now)
            if isinstance(outcome, Claimed):
                self.claims[run_id] = row
                if self.mode == "zombies" and self.rng.random() < 0.5:
                    # A claimant held past staleness, let go as a peer recovers the claim.
                    claimed = self.call("get", run_id)
                    if isinstance(claimed, RunRow) and claimed.claim == self.me:
                        self.hold(run_id, "claimant", claimed)
                elif self.rng.random() < 0.7:
                    self.call("activate", run_id, self.me, outcome.claimed_at_ms, row.snapshot)
        else:
            self.call("claim_and_own", run_id, row.snapshot, self.me, now)

    def claimed(self, run_id: str, row: RunRow) -> None:
        token = row.claimed_at_ms
        if token is None:
            return
        remembered = self.claims.get(run_id)
        expected = remembered.snapshot if remembered is not None else row.snapshot
        if self.mode == "zombies" and self.rng.random() < 0.3:
            # A claimant held past staleness: let go as a peer recovers its claim.
            self.hold(run_id, "claimant", row)
        elif self.rng.random() < 0.75:
            self.call("activate", run_id, self.me, token, expected)
        else:
            self.call("abandon_claim", run_id, self.me, token)

    def claimed_by_other(self, run_id: str, row: RunRow) -> None:
        claimant, token = row.claim, row.claimed_at_ms
        if claimant is None or token is None:
            return
        now = self.now()
        if token < now - HEARTBEAT_STALE_AFTER_MS and self.rng.random() < 0.7:
            evidence = self.evidence(claimant, now)
            self.call("recover_claim", run_id, claimant, token, self.me, now, evidence)
        elif self.rng.random() < 0.5:
            self.call("claim", run_id, row.snapshot, self.me, now)

    def owned(self, run_id: str, row: RunRow) -> None:
        rng = self.rng
        if self.mode == "zombies" and rng.random() < 0.5:
            self.hold(run_id, "owner", row)
            return
        if self.mode == "batches" and rng.random() < 0.1:
            self.hold(run_id, "batch", row)
            return
        requested = row.cancel_requested_at_ms is not None
        if self.mode == "batches" and requested and rng.random() < 0.3:
            self.call("acknowledge_cancel", run_id, self.me, self.now())
            return
        if self.mode == "cancel" and row.cancel_requested_at_ms is not None:
            if rng.random() < 0.5:
                self.call("acknowledge_cancel", run_id, self.me, self.now())
            else:
                self.call("transition_owned", run_id, self.me, "cancelled", None)
            return
        if self.mode == "cancel" and rng.random() < 0.5:
            # Not asked yet: settle now, while a peer that saw the run live asks;
            # first wait a moment for a peer about to ask, and settle as it does.
            self.await_request(run_id)
            to = rng.choice(("completed", "failed", "cancelled"))
            self.call("transition_owned", run_id, self.me, to, self.state_json())
            return
        roll = rng.random()
        if roll < 0.3:
            self.call("heartbeat", run_id, self.me, self.now())
        elif roll < 0.4:
            self.call("reconfirm", run_id, self.me, self.now())
        elif roll < 0.47 and row.cancel_requested_at_ms is not None:
            self.call("acknowledge_cancel", run_id, self.me, self.now())
        elif roll < 0.57 or not self.settle:
            state = self.state_json() if rng.random() < 0.7 else None
            self.call("transition_owned", run_id, self.me, "running", state)
        else:
            # Suspending makes the run claimable again: more claim races.
            to = "suspended" if rng.random() < 0.5 else rng.choice(_SETTLED)
            guard = rng.choice((None, None, TransitionGuard("absent"), TransitionGuard("present")))
            state = self.state_json() if rng.random() < 0.5 else None
            self.call("transition_owned", run_id, self.me, to, state, guard)

    def await_request(self, run_id: str) -> None:
        """Wait (at most ``CANCEL_HOLD_NS``) for a peer about to ask ``run_id`` to
        cancel, then until the instant both act (on the ``ZombieBoard``, as a
        held owner waits for a takeover), and up to twice
        ``ZombieBoard.JITTER_NS`` more (the peer waits up to once that): the
        owner's settle and the first cancel request of its run are in flight
        together, either a little ahead of the other. Nothing without a
        board."""
        if self.board is None:
            return
        now_ns = time.monotonic_ns()
        limit = now_ns + CANCEL_HOLD_NS
        if self.until_ns is not None:
            limit = min(limit, self.until_ns)
        if limit > now_ns and self.board.hold(run_id, limit, now_ns):
            # Either may go first: the request's read and write must straddle
            # the settle's commit, and under load either side may lag.
            time.sleep(self.rng.uniform(0, 2 * ZombieBoard.JITTER_NS) / 1e9)

    def owned_by_other(self, run_id: str, row: RunRow) -> None:
        owner, heartbeat = row.owner, row.heartbeat_at_ms
        if owner is None:
            return
        now = self.now()
        stale = heartbeat is None or heartbeat < now - HEARTBEAT_STALE_AFTER_MS
        taking = self.mode == "zombies" and self.board is not None and self.board.taking(run_id)
        if taking:
            # A takeover of a held owner's run is under way: join in.
            stale = True
        roll = self.rng.random()
        if self.mode == "cancel" and row.cancel_requested_at_ms is None and roll < 0.6:
            # The first request of a live run, as its owner may be settling it.
            self.call("request_cancel", run_id, now)
            return
        hunting = self.mode == "zombies"
        if hunting and stale and roll < (0.3 if taking else 0.1):
            # A cancel request lands in the middle of the takeover (more often
            # once one is under way: a peer that joins it asks, another steals).
            self.call("request_cancel", run_id, now)
            return
        # Zombie hunters steal more: several steals of one run at once.
        if stale and roll < (0.6 if hunting else 0.45):
            evidence = self.evidence(owner, now)
            outcome = self.call("steal", run_id, row.snapshot, self.me, now, evidence)
            if isinstance(outcome, Claimed):
                self.claims[run_id] = row
                activated = self.call(
                    "activate", run_id, self.me, outcome.claimed_at_ms, row.snapshot
                )
                if hunting and isinstance(activated, Activated):
                    # The new owner's first checkpoint, while the old one still writes.
                    self.call("transition_owned", run_id, self.me, "running", self.state_json())
        elif stale and roll < 0.9:
            evidence = self.evidence(owner, now)
            owned = self.call("claim_and_own", run_id, row.snapshot, self.me, now, evidence)
            if hunting and isinstance(owned, Activated):
                self.call("transition_owned", run_id, self.me, "running", self.state_json())
        elif roll < 0.1:
            # A fresh owner: evidence cannot beat its heartbeat.
            self.call("claim_and_own", run_id, row.snapshot, self.me, now)
        elif roll < 0.15:
            self.call("request_cancel", run_id, now)
