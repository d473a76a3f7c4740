"""Real processes over one SQLite file: killed, stopped and restarted owners.

Each test starts child processes (tests/sqlite/_proc_owner.py) that talk JSON lines
over pipes and run the store on their own ManualClock, so lease timing is
still driven by commands, never by sleeping. The operating system is real:
SIGKILL, SIGSTOP/SIGCONT, reaping, pid probes.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import runstore
from runstore import (
    Activated,
    HeartbeatFresh,
    LivenessEvidence,
    ManualClock,
    OwnerId,
    RunSnapshot,
    RunStore,
)
from runstore.ownership import (
    LivenessContext,
    same_host_pid_probe,
    takeover_evidence,
)

pytestmark = [
    pytest.mark.processes,
    pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals"),
    pytest.mark.timeout(10),
]

CHILD = Path(__file__).with_name("_proc_owner.py")
HOST = "host-local"


class Child:
    """One owner process, driven over its stdin/stdout."""

    def __init__(
        self, db: Path, host_id: str, nonce: str, start_ms: int, env: dict[str, str] | None = None
    ) -> None:
        self.nonce = nonce
        self.process = subprocess.Popen(
            [sys.executable, str(CHILD), str(db), host_id, nonce, str(start_ms)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=None if env is None else {**os.environ, **env},
        )
        self.lines: queue.Queue[dict[str, Any]] = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        hello = self.receive()
        assert hello["ready"] is True
        self.pid: int = hello["pid"]
        self.owner = OwnerId(host_id, self.pid, nonce)

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(json.loads(line))

    def receive(self, timeout_s: float = 5.0) -> dict[str, Any]:
        return self.lines.get(timeout=timeout_s)

    def ask(self, op: str, **arguments: Any) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"op": op, **arguments}) + "\n")
        self.process.stdin.flush()
        if op == "churn":
            return {}
        return self.receive()

    def signal(self, number: int) -> None:
        os.kill(self.pid, number)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(5)
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "runs.db"


@pytest.fixture
def children(db: Path) -> Iterator[list[Child]]:
    started: list[Child] = []
    yield started
    for child in started:
        child.close()


def start(children: list[Child], db: Path, host_id: str, nonce: str, start_ms: int = 0) -> Child:
    child = Child(db, host_id, nonce, start_ms)
    children.append(child)
    return child


def peer(db: Path, now_ms: int) -> RunStore:
    """This test process as the peer, with its own store on a ManualClock."""
    return runstore.open(db, clock=ManualClock(now_ms))


def state_of(store: RunStore, run_id: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(store.get(run_id).state_json)
    return loaded


def test_a_killed_owner_is_taken_over_on_the_same_host_with_pid_dead_evidence(
    db: Path, children: list[Child]
) -> None:
    """A is SIGKILLed mid-work and reaped; B on the same host takes over with
    same-host-pid-dead as soon as the lease is stale by B's clock, and every
    step A committed is intact."""
    with peer(db, 0) as setup:
        setup.create("r1", '{"step": 0}')
    a = start(children, db, HOST, "a-1")
    assert a.ask("own", run_id="r1") == {"outcome": "Activated", "evidence": None}
    assert a.ask("supervise", run_id="r1") == {"supervising": True}
    assert a.ask("clock", ms=5_000) == {"now": 5_000}  # one pulse, heartbeat 5 000
    a.ask("churn")
    acknowledged = 0
    while acknowledged < 25:
        message = a.receive()
        assert message["outcome"] == "Transitioned"
        acknowledged = message["committed"]
    a.signal(signal.SIGKILL)  # mid-work: possibly inside a write transaction

    # Killed but not reaped: a zombie's pid still exists, so the probe says alive.
    context = LivenessContext(OwnerId(HOST, os.getpid(), "b"), 5_000, 40_000)
    assert same_host_pid_probe(a.owner, context) is True
    a.process.wait(5)
    assert a.process.returncode == -signal.SIGKILL
    a.reader.join(5)
    while not a.lines.empty():  # steps committed after our last read
        acknowledged = max(acknowledged, a.lines.get()["committed"])
    assert same_host_pid_probe(a.owner, context) is False

    with peer(db, 0) as look:
        row = look.get("r1")
    assert row.owner == a.owner
    assert row.heartbeat_at_ms == 5_000
    stale_at = row.heartbeat_at_ms + 30_001
    b_owner = OwnerId(HOST, os.getpid(), "b-1")
    b_clock = ManualClock(stale_at - 1)
    with runstore.open(db, clock=b_clock) as b:
        fresh = b.get("r1")
        evidence = takeover_evidence(fresh, b_owner, stale_at - 1)
        assert evidence == LivenessEvidence(a.owner, stale_at - 1, "same-host-pid-dead")
        assert b.claim_and_own("r1", fresh, b_owner, stale_at - 1, evidence) == HeartbeatFresh()
        b_clock.set(stale_at)
        row = b.get("r1")
        evidence = takeover_evidence(row, b_owner, stale_at)
        assert evidence == LivenessEvidence(a.owner, stale_at, "same-host-pid-dead")
        assert b.claim_and_own("r1", row, b_owner, stale_at, evidence) == Activated()
        taken = b.get("r1")
        committed = state_of(b, "r1")
        assert taken.owner == b_owner
        assert committed["by"] == "a-1"
        # Everything acknowledged is there; at most one more step committed unseen.
        assert acknowledged <= committed["step"] <= acknowledged + 1
        transitions = [(f.transition, f.owner) for f in b.ownership_facts("r1")]
        assert transitions == [
            ("claimed", a.owner),
            ("activated", a.owner),
            ("stolen", b_owner),
            ("activated", b_owner),
        ]
        b.check_invariants()


@pytest.mark.parametrize("kind", ["cross-host-unreachable-stale", "lease-expired"])
def test_a_stopped_owner_taken_over_from_another_host_finds_every_write_refused(
    db: Path, children: list[Child], kind: str
) -> None:
    """B on another host takes over only once the lease is stale; A, stopped
    between transactions and continued afterwards, has every fenced write
    refused and its supervisor raises LeaseLost."""
    with peer(db, 0) as setup:
        setup.create("r2", '{"step": 0}')
    a = start(children, db, "host-a", "a-2")
    assert a.ask("own", run_id="r2")["outcome"] == "Activated"
    assert a.ask("supervise", run_id="r2") == {"supervising": True}
    assert a.ask("write", step=1) == {"outcome": "Transitioned"}
    # The handshake: "clock" answers once the pulse committed and the
    # supervisor is parked, so A holds no write lock when it is stopped.
    assert a.ask("clock", ms=1_000) == {"now": 1_000}
    a.signal(signal.SIGSTOP)
    try:
        b = start(children, db, "host-b", "b-2", start_ms=31_000)
        evidence = "probe" if kind != "lease-expired" else "lease-expired"
        refused = b.ask("own", run_id="r2", evidence=evidence)
        if kind == "lease-expired":
            assert refused == {"outcome": "HeartbeatFresh", "evidence": None}
        else:
            assert refused == {"outcome": "HeartbeatFresh", "evidence": kind}
        assert b.ask("clock", ms=31_001) == {"now": 31_001}
        assert b.ask("own", run_id="r2", evidence=evidence) == {
            "outcome": "Activated",
            "evidence": kind,
        }
        assert b.ask("supervise", run_id="r2") == {"supervising": True}
        assert b.ask("write", step=100) == {"outcome": "Transitioned"}
    finally:
        a.signal(signal.SIGCONT)

    # A wakes up believing it owns r2: its fenced writes are all refused.
    assert a.ask("write", step=2) == {"outcome": "FenceLost"}
    assert a.ask("status") == {"lost": False, "lapses": []}
    # Its clock catches up with the time it spent stopped: the supervisor's
    # budget is long gone and the reconfirm is refused (another owner).
    assert a.ask("clock", ms=32_000) == {"now": 32_000}
    assert a.ask("status") == {"lost": True, "lapses": [31_000]}
    assert a.ask("write", step=3) == {"outcome": "FenceLost"}
    assert a.ask("leave") == {"left": True, "lease_lost": "lapsed", "lapses": [31_000]}

    with peer(db, 32_000) as look:
        row = look.get("r2")
        assert row.owner == b.owner
        assert state_of(look, "r2") == {"step": 100, "by": "b-2"}
        writers = {f.owner for f in look.ownership_facts("r2")}
        assert writers == {a.owner, b.owner}
        look.check_invariants()
    assert b.ask("leave") == {"left": True, "lease_lost": None, "lapses": []}


def test_a_restarted_process_needs_evidence_for_its_own_stale_runs(
    db: Path, children: list[Child]
) -> None:
    """Same host, new nonce: a different owner. Without evidence its own old run
    is EvidenceRequired; the pid probe of the dead incarnation gives
    same-host-pid-dead and the run comes back."""
    with peer(db, 0) as setup:
        setup.create("r3", '{"step": 0}')
    first = start(children, db, HOST, "incarnation-1")
    assert first.ask("own", run_id="r3")["outcome"] == "Activated"
    first.signal(signal.SIGKILL)
    first.process.wait(5)

    second = start(children, db, HOST, "incarnation-2", start_ms=30_001)
    assert second.owner != first.owner
    assert second.ask("own", run_id="r3") == {"outcome": "EvidenceRequired", "evidence": None}
    assert second.ask("own", run_id="r3", evidence="probe") == {
        "outcome": "Activated",
        "evidence": "same-host-pid-dead",
    }


@pytest.mark.parametrize("holder", ["the restarted process itself", "an unrelated process"])
def test_with_a_reused_pid_only_lease_expired_evidence_works(
    db: Path, children: list[Child], holder: str
) -> None:
    """The old incarnation's pid now names a live process, so the pid probe
    answers alive and yields no evidence; lease-expired evidence takes the run."""
    second = start(children, db, HOST, "incarnation-2", start_ms=30_001)
    reused = second.pid if holder == "the restarted process itself" else os.getpid()
    earlier = OwnerId(HOST, reused, "incarnation-1")
    with peer(db, 0) as history:
        history.create("r4", '{"step": 0}')
        assert history.claim_and_own("r4", history.get("r4"), earlier, 0) == Activated()

    assert second.ask("own", run_id="r4") == {"outcome": "EvidenceRequired", "evidence": None}
    # The probe sees the pid alive: no evidence, still EvidenceRequired.
    assert second.ask("own", run_id="r4", evidence="probe") == {
        "outcome": "EvidenceRequired",
        "evidence": None,
    }
    assert second.ask("own", run_id="r4", evidence="lease-expired") == {
        "outcome": "Activated",
        "evidence": "lease-expired",
    }
    # Seen from here too: the recorded pid is alive, so the probe gives nothing.
    with peer(db, 30_001) as look:
        assert look.get("r4").owner == second.owner
    stale = RunSnapshot("running", earlier, 0)
    assert takeover_evidence(stale, OwnerId(HOST, os.getpid(), "observer"), 30_001) is None
