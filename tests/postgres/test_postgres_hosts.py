"""Real processes as distinct hosts over one PostgreSQL database.

Each owner is a child process (tests/sqlite/_proc_owner.py) with its own host id,
its own connection and its own ManualClock, so lease timing is driven by
commands while the operating system is real: SIGKILL, SIGSTOP/SIGCONT. A
peer on another host cannot probe a pid, so it takes over with
``cross-host-unreachable-stale`` evidence once the lease is stale by its
clock. A killed owner's open transaction dies with its connection; a
stopped owner's open transaction is ended by the server after
``idle_in_transaction_session_timeout``, so neither can hold the run's row
lock against the peer. Every write the stopped owner makes after it wakes
is refused (``FenceLost``), its supervisor raises ``LeaseLost``, and the
run completes once. ``runstore demo --db postgresql://...`` runs the whole
story with every worker a host of its own.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

import runstore
from runstore import Activated, LivenessEvidence, ManualClock, OwnerId, Transitioned
from runstore.cli._demo import RUN_PREFIX, STEPS

from .. import _postgres
from ..sqlite.test_processes import Child
from .test_postgres_failure_reasons import with_options

pytestmark = [
    pytest.mark.processes,
    pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals"),
    pytest.mark.timeout(60),
]

postgres = pytest.importorskip("runstore.postgres")
psycopg = pytest.importorskip("psycopg")


@pytest.fixture
def url() -> str:
    return _postgres.database_url()


@pytest.fixture
def children() -> Iterator[list[Child]]:
    started: list[Child] = []
    yield started
    for child in started:
        child.close()


def start(
    children: list[Child],
    url: str,
    host_id: str,
    nonce: str,
    start_ms: int = 0,
    env: dict[str, str] | None = None,
) -> Child:
    child = Child(url, host_id, nonce, start_ms, env)  # type: ignore[arg-type]
    children.append(child)
    return child


def state_of(store: Any, run_id: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(store.get(run_id).state_json)
    return loaded


def test_a_killed_owner_is_taken_over_from_another_host(url: str, children: list[Child]) -> None:
    """A is SIGKILLed mid-work (possibly inside a transaction, holding the
    run's lock: the server rolls it back when the connection drops). B, on
    another host, is refused while the lease is fresh and takes over the
    moment it is stale; every step A had acknowledged is there."""
    with postgres.open(url, clock=ManualClock(0)) as setup:
        setup.create("r1", '{"step": 0}')
    a = start(children, url, "host-a", "a-1")
    assert a.ask("own", run_id="r1") == {"outcome": "Activated", "evidence": None}
    assert a.ask("supervise", run_id="r1") == {"supervising": True}
    assert a.ask("clock", ms=5_000) == {"now": 5_000}
    a.ask("churn")
    acknowledged = 0
    while acknowledged < 25:
        message = a.receive()
        assert message["outcome"] == "Transitioned"
        acknowledged = message["committed"]
    a.signal(signal.SIGKILL)
    a.process.wait(5)
    a.reader.join(5)
    while not a.lines.empty():
        acknowledged = max(acknowledged, a.lines.get()["committed"])

    b = start(children, url, "host-b", "b-1", start_ms=35_000)
    assert b.ask("own", run_id="r1", evidence="probe") == {
        "outcome": "HeartbeatFresh",
        "evidence": "cross-host-unreachable-stale",
    }
    assert b.ask("clock", ms=35_001) == {"now": 35_001}
    started = time.monotonic()
    assert b.ask("own", run_id="r1", evidence="probe") == {
        "outcome": "Activated",
        "evidence": "cross-host-unreachable-stale",
    }
    assert time.monotonic() - started < 5
    with postgres.open(url, clock=ManualClock(35_001)) as look:
        committed = state_of(look, "r1")
        assert committed["by"] == "a-1"
        assert acknowledged <= committed["step"] <= acknowledged + 1
        transitions = [(f.transition, f.owner) for f in look.ownership_facts("r1")]
        assert transitions == [
            ("claimed", a.owner),
            ("activated", a.owner),
            ("stolen", b.owner),
            ("activated", b.owner),
        ]
        look.check_invariants()


def test_a_stopped_owner_is_taken_over_and_its_late_writes_refused(
    url: str, children: list[Child]
) -> None:
    """A is stopped between transactions; B (another host) takes over once
    the lease is stale and completes the run; A, continued, has every write
    refused and its supervisor raises LeaseLost: the run completes once."""
    with postgres.open(url, clock=ManualClock(0)) as setup:
        setup.create("r2", '{"step": 0}')
    a = start(children, url, "host-a", "a-2")
    assert a.ask("own", run_id="r2")["outcome"] == "Activated"
    assert a.ask("supervise", run_id="r2") == {"supervising": True}
    assert a.ask("write", step=1) == {"outcome": "Transitioned"}
    assert a.ask("clock", ms=1_000) == {"now": 1_000}  # parked: no transaction open
    a.signal(signal.SIGSTOP)
    try:
        b = start(children, url, "host-b", "b-2", start_ms=31_001)
        assert b.ask("own", run_id="r2", evidence="probe") == {
            "outcome": "Activated",
            "evidence": "cross-host-unreachable-stale",
        }
        assert b.ask("supervise", run_id="r2") == {"supervising": True}
        assert b.ask("write", step=100) == {"outcome": "Transitioned"}
    finally:
        a.signal(signal.SIGCONT)
    assert a.ask("write", step=2) == {"outcome": "FenceLost"}
    assert a.ask("clock", ms=32_000) == {"now": 32_000}
    assert a.ask("status") == {"lost": True, "lapses": [31_000]}
    assert a.ask("leave") == {"left": True, "lease_lost": "lapsed", "lapses": [31_000]}
    assert b.ask("leave") == {"left": True, "lease_lost": None, "lapses": []}

    with postgres.open(url, clock=ManualClock(32_000)) as look:
        b_owner = look.get("r2").owner
        assert b_owner == b.owner
        assert look.transition_owned("r2", b_owner, "completed", '{"done": 1}') == Transitioned()
        assert state_of(look, "r2") == {"done": 1}
        settled = [f for f in look.ownership_facts("r2") if f.transition == "released"]
        assert [(f.owner, f.granted_at_ms) for f in settled] == [(b.owner, None)]
        look.check_invariants()


def test_an_owner_stopped_inside_a_transaction_cannot_hold_the_run(
    url: str, children: list[Child]
) -> None:
    """A, on the general path (a transaction per step, as with a strategy of
    one's own; the one-round-trip path never leaves a transaction open
    between round trips), is stopped while it churns writes, at a moment its
    transaction is open and the run's row locked (the server says so); the
    server ends that session after its idle-in-transaction bound (here
    300 ms), and B's takeover, which waits on the lock, goes through within a
    few seconds."""
    with postgres.open(url, clock=ManualClock(0)) as setup:
        setup.create("r3", '{"step": 0}')
    short = with_options(url, "-c idle_in_transaction_session_timeout=300")
    a = start(children, short, "host-a", "a-3", env={"RUNSTORE_TEST_GENERAL_PATH": "1"})
    assert a.ask("own", run_id="r3")["outcome"] == "Activated"
    assert a.ask("supervise", run_id="r3") == {"supervising": True}
    a.ask("churn")
    while a.receive()["committed"] < 10:
        pass
    with psycopg.connect(url, autocommit=True) as watch:
        for _ in range(100):  # stop A until it is caught inside a transaction
            a.signal(signal.SIGSTOP)
            time.sleep(0.05)  # let a statement in flight finish on the server
            inside = watch.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> pg_backend_pid() AND state = 'idle in transaction'"
            ).fetchone()[0]
            if inside:
                break
            a.signal(signal.SIGCONT)
            time.sleep(0.01)
        assert inside, "A was never caught inside a transaction"
    try:
        with postgres.open(url, clock=ManualClock(31_001)) as b:
            thief = OwnerId("host-b", 2, "b-3")
            row = b.get("r3")
            assert row.owner == a.owner
            evidence = LivenessEvidence(a.owner, 31_001, "cross-host-unreachable-stale")
            started = time.monotonic()
            assert b.claim_and_own("r3", b.get("r3"), thief, 31_001, evidence) == Activated()
            assert time.monotonic() - started < 5
            b.check_invariants()
    finally:
        a.signal(signal.SIGCONT)


@pytest.mark.timeout(60)
def test_the_demo_runs_on_postgresql_with_a_host_per_worker(url: str) -> None:
    """Same ending as on SQLite: every run completed exactly once; the
    takeovers are cross-host; the URL's password is never printed; a
    database that holds runs already is refused."""
    secret = "demo-secret-91c3"
    target = f"{url}&password={secret}"
    run = [sys.executable, "-m", "runstore.cli._demo", "--workers", "3", "--runs", "6"]
    result = subprocess.run(
        [*run, "--seed", "7", "--db", target],
        capture_output=True,
        text=True,
        timeout=45,
        check=False,
    )
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert secret not in out + result.stderr
    assert "SIGKILL" in out
    assert "SIGSTOP" in out
    assert "(evidence: cross-host-unreachable-stale)" in out
    assert "refused: FenceLost" in out
    assert "runs completed exactly once: 6 of 6" in out
    assert "every invariant held" in out
    with runstore.open(url, clock=ManualClock(0)) as store:
        owners = {
            f.owner.host_id
            for n in range(1, 7)
            for f in store.ownership_facts(f"{RUN_PREFIX}{n:02d}")
        }
        assert len(owners) >= 2
        assert all(host.startswith("demo-worker-") for host in owners)
        for n in range(1, 7):
            row = store.get(f"{RUN_PREFIX}{n:02d}")
            assert row.status == "completed"
            assert json.loads(row.state_json or "{}")["step"] == STEPS
    again = subprocess.run(
        [*run, "--db", target], capture_output=True, text=True, timeout=45, check=False
    )
    assert again.returncode == 2
    assert "already holds runs" in again.stderr
    assert secret not in again.stdout + again.stderr
