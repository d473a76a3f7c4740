"""Owners keep their runs through a PostgreSQL server restart or crash, and a
partitioned owner is fenced.

Restarts and crashes (``pg_ctl restart -m fast`` and ``-m immediate``, sent
as the signals ``pg_ctl`` sends) while three supervised owners write steps:
every write during the outage fails with ``persistence_failed`` and a reason
that says the server went away; the supervisors tolerate it and no
``LeaseLost`` is raised while the outage, measured on the lease clock,
stays under ``HEARTBEAT_WRITE_TOLERANCE_MS`` (19 s); each store reconnects
on its own; every acknowledged step is there afterwards and
``check_invariants()`` passes. The lease clock is a ``ManualClock`` the test
moves while the server is down, so the outage the supervisors see (12 s
here) is exact and independent of how long the restart takes in real time
(about a second); the same outage stretched past the tolerance ends in
``LeaseLost``, which shows the first case could fail.

A partitioned owner talks to the server through a TCP proxy on loopback
that the test pauses: its writes hang, its supervisor's deadline lapses
the lease, a peer takes the run over once it is stale, and when the proxy
resumes every write of the old owner is refused with ``FenceLost``. Every
loop is bounded in count and in time.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from runstore import (
    HEARTBEAT_WRITE_TOLERANCE_MS,
    Activated,
    FenceLost,
    LivenessEvidence,
    ManualClock,
    OwnerId,
    RunSnapshot,
    RunStoreError,
    Transitioned,
)
from runstore.ownership import LeaseLost, supervise
from runstore.sqlite import RetryPolicy

from ._pg_faults import Node, Proxy, need_binaries

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

postgres = pytest.importorskip("runstore.postgres")

PENDING = RunSnapshot("pending", None, None)
#: Reasons a write may give while the server is away.
OUTAGE_REASONS = {
    "connection-lost",
    "server-shutting-down",
    "server-starting-or-stopping",
    "unreachable",
}


@pytest.fixture(scope="module")
def node() -> Iterator[Node]:
    need_binaries()
    started = Node()
    try:
        started.sql("CREATE DATABASE runs")
        yield started
    finally:
        started.destroy()


_databases = iter(range(1, 1000))


@pytest.fixture
def url(node: Node) -> str:
    """A fresh database on the fault node (dropped with the node)."""
    name = f"runs_{next(_databases)}"
    node.sql(f"CREATE DATABASE {name}")
    return node.url(name)


class Owner:
    """One owner: its own store, a supervised worker thread writing steps."""

    def __init__(self, url: str, clock: ManualClock, run_id: str, index: int) -> None:
        self.store: Any = postgres.open(url, clock=clock)
        self.store._retry_policy = RetryPolicy(budget_ms=300)  # fail fast while down
        self.clock = clock
        self.run_id = run_id
        self.me = OwnerId(f"host-{index}", 1000 + index, "n")
        self.store.create(run_id, '{"step": 0}')
        assert self.store.claim_and_own(run_id, PENDING, self.me, clock.now_ms()) == Activated()
        self.acknowledged = 0
        self.unknown: list[int] = []
        self.errors: list[RunStoreError] = []
        self.outcomes: list[str] = []
        self.lost: LeaseLost | None = None
        self.lease: Any = None
        self.ready = threading.Event()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._work, daemon=True)
        self.thread.start()
        assert self.ready.wait(10)

    def _work(self) -> None:
        deadline = time.monotonic() + 120
        try:
            with supervise(
                self.store, self.run_id, self.me, clock=self.clock, interrupt_thread=False
            ) as lease:
                self.lease = lease
                self.ready.set()
                step = 1
                while not self.stop.is_set() and time.monotonic() < deadline:
                    if lease.lost.is_set():
                        break
                    state = f'{{"step": {step}}}'
                    try:
                        outcome = self.store.transition_owned(
                            self.run_id, self.me, "running", state
                        )
                    except RunStoreError as error:
                        self.errors.append(error)
                        if error.outcome_unknown:  # may have committed: never resent
                            self.unknown.append(step)
                            step += 1
                        time.sleep(0.02)
                        continue
                    self.outcomes.append(type(outcome).__name__)
                    if outcome == Transitioned():
                        self.acknowledged = step
                        step += 1
                    time.sleep(0.005)
        except LeaseLost as lost:
            self.lost = lost
        finally:
            self.ready.set()

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(30)
        assert not self.thread.is_alive()


def _advance(clock: ManualClock, owners: list[Owner], to_ms: int) -> None:
    """Move the lease clock to ``to_ms`` a second at a time, letting every
    supervisor finish reacting after each move."""
    while clock.now_ms() < to_ms:
        clock.set(min(to_ms, clock.now_ms() + 1_000))
        for owner in owners:
            if owner.lease is not None:
                assert owner.lease.wait_idle(30)


def _writes_again(owners: list[Owner]) -> None:
    deadline = time.monotonic() + 30
    marks = [owner.acknowledged for owner in owners]
    while time.monotonic() < deadline:
        if all(o.acknowledged > mark for o, mark in zip(owners, marks, strict=True)):
            return
        time.sleep(0.02)
    raise AssertionError("the owners did not write again after the restart")


@pytest.mark.parametrize(
    ("mode", "outage_ms"),
    [("immediate", 12_000), ("fast", 12_000), ("immediate", HEARTBEAT_WRITE_TOLERANCE_MS + 2_000)],
    ids=["crash", "restart", "crash-longer-than-the-tolerance"],
)
def test_owners_ride_out_a_server_outage(node: Node, url: str, mode: str, outage_ms: int) -> None:
    clock = ManualClock(0)
    owners = [Owner(url, clock, f"r{i}", i) for i in range(3)]
    try:
        _advance(clock, owners, 1_000)
        _writes_again(owners)
        acknowledged_before = [o.acknowledged for o in owners]
        node.stop(mode)
        _advance(clock, owners, 1_000 + outage_ms)
        node.start()
        if outage_ms >= HEARTBEAT_WRITE_TOLERANCE_MS:
            # The supervisors lapsed; the work threads see it and end.
            for owner in owners:
                owner.thread.join(30)
                assert owner.lost is not None
                assert owner.lost.reason == "lapsed"
            return
        _writes_again(owners)
        _advance(clock, owners, 3_000 + outage_ms)
        for owner in owners:
            assert owner.lost is None
            assert not owner.lease.lost.is_set()
            assert owner.lease.last_confirmed_ms == 3_000 + outage_ms
        for owner in owners:
            owner.finish()
        for owner, before in zip(owners, acknowledged_before, strict=True):
            assert owner.errors, "no write failed during the outage"
            for error in owner.errors:
                assert error.code == "persistence_failed"
                assert error.cause["reason"] in OUTAGE_REASONS, error
            assert set(owner.outcomes) == {"Transitioned"}
            step = json.loads(owner.store.get(owner.run_id).state_json)["step"]
            assert step >= owner.acknowledged > before
            assert step == owner.acknowledged or step in owner.unknown
        owners[0].store.check_invariants()
    finally:
        for owner in owners:
            owner.stop.set()
            owner.thread.join(30)
            owner.store.close()


def test_a_partitioned_owner_is_taken_over_and_fenced(node: Node, url: str) -> None:
    clock = ManualClock(0)
    proxy = Proxy(node.port)
    # The partitioned owner's sessions: an open transaction it strands is
    # ended by the server quickly, so the peer's takeover need not wait.
    behind = proxy.url(url.rsplit("/", 1)[1], options="-c idle_in_transaction_session_timeout=300")
    try:
        owner = Owner(behind, clock, "r", 0)
        peer: Any = postgres.open(url, clock=clock)
        try:
            _advance(clock, [owner], 2_000)
            _writes_again([owner])
            proxy.pause()
            time.sleep(0.2)  # the owner's next write is now stranded
            stranded = owner.acknowledged
            # The owner's calls hang now, so its supervisor never goes idle:
            # move the clock without waiting for it, until the lease lapses.
            deadline = time.monotonic() + 60
            while not owner.lease.lost.is_set() and time.monotonic() < deadline:
                clock.advance(500)
                time.sleep(0.05)
            assert owner.lease.lost.is_set()  # the deadline bounded the hung writes
            assert clock.now_ms() >= 2_000 + HEARTBEAT_WRITE_TOLERANCE_MS
            assert owner.acknowledged == stranded
            stale_at = owner.lease.last_confirmed_ms + 30_001
            clock.set(stale_at)
            row = peer.get("r")
            assert row.owner == owner.me
            thief = OwnerId("host-peer", 2, "p")
            evidence = LivenessEvidence(owner.me, stale_at, "cross-host-unreachable-stale")
            started = time.monotonic()
            assert peer.claim_and_own("r", row, thief, stale_at, evidence) == Activated()
            assert time.monotonic() - started < 10
            proxy.resume()
            owner.thread.join(30)
            assert not owner.thread.is_alive()
            # Every write the old owner makes now is refused.
            answers: list[object] = []
            deadline = time.monotonic() + 30
            while len(answers) < 3 and time.monotonic() < deadline:
                try:
                    answers.append(owner.store.transition_owned("r", owner.me, "running", "{}"))
                except RunStoreError:
                    time.sleep(0.05)  # its connection is being replaced
            assert answers == [FenceLost()] * 3
            assert peer.get("r").owner == thief
            peer.check_invariants()
        finally:
            owner.stop.set()
            proxy.resume()
            owner.thread.join(30)
            owner.store.close()
            peer.close()
    finally:
        proxy.close()
