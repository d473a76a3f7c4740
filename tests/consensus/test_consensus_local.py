"""What is particular to ``LocalConsensus``: rebuilding leases from the rows,
undo bookkeeping, threads, and its single-process scope.

The rules it shares with every strategy are pinned in
``test_consensus_conformance.py``.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from runstore import Activated, LivenessEvidence, OwnerId, RunSnapshot, Updated
from runstore.consensus import (
    Consensus,
    FenceLostError,
    Granted,
    Lease,
    LocalConsensus,
    Lost,
    Promoted,
    Rejected,
    Renewed,
)

from ._consensus_tx import FakeTransaction, RollBack, backfill_connection

A = OwnerId("host-a", 1, "nonce-a")
B = OwnerId("host-b", 1, "nonce-b")
C = OwnerId("host-c", 1, "nonce-c")

ROWS = [
    # run_id, status, owner host, pid, nonce, heartbeat, claim host, pid, nonce, claimed_at
    ("owned", "running", "host-a", 1, "nonce-a", 500, None, None, None, None),
    ("stolen", "running", "host-a", 1, "nonce-a", 600, "host-b", 1, "nonce-b", 31_000),
    ("claimed", "pending", None, None, None, None, "host-c", 1, "nonce-c", 700),
    ("idle", "pending", None, None, None, None, None, None, None, None),
    ("paused", "suspended", None, None, None, None, None, None, None, None),
    ("done", "completed", None, None, None, None, None, None, None, None),
]


def rebuilt(local: LocalConsensus) -> None:
    with FakeTransaction(backfill_connection(ROWS)) as tx:
        local.on_open(tx)


def lease(local: LocalConsensus, run_id: str) -> Lease | None:
    with FakeTransaction() as tx:
        return local.lease(tx, run_id)


def test_local_consensus_is_a_consensus() -> None:
    """LocalConsensus satisfies the Consensus protocol."""
    assert isinstance(LocalConsensus(), Consensus)


def test_docs_say_it_is_single_process() -> None:
    """The class and module documentation warn against sharing it between processes."""
    import runstore.consensus._local as module

    for doc in (module.__doc__ or "", LocalConsensus.__doc__ or ""):
        assert "process" in doc
    assert "tests" in (module.__doc__ or "")


def test_on_open_rebuilds_running_owners_and_pending_claims() -> None:
    """A running row's owner gets its heartbeat as grant and heartbeat; claims are copied."""
    local = LocalConsensus()
    rebuilt(local)
    assert lease(local, "owned") == Lease("owned", A, 500, 500, None, None)
    assert lease(local, "stolen") == Lease("stolen", A, 600, 600, B, 31_000)
    assert lease(local, "claimed") == Lease("claimed", None, None, None, C, 700)
    for run_id in ("idle", "paused", "done", "never"):
        assert lease(local, run_id) is None


def test_leases_lists_every_lease_by_run_id() -> None:
    """leases() reports the same leases as lease(), sorted by run id."""
    local = LocalConsensus()
    rebuilt(local)
    with FakeTransaction() as tx:
        assert local.leases(tx) == [
            Lease("claimed", None, None, None, C, 700),
            Lease("owned", A, 500, 500, None, None),
            Lease("stolen", A, 600, 600, B, 31_000),
        ]


def test_rebuilt_leases_behave_like_granted_ones() -> None:
    """After on_open owners renew and fence, claimants activate, stale owners are stolen."""
    local = LocalConsensus()
    rebuilt(local)
    with FakeTransaction() as tx:
        assert local.heartbeat(tx, "owned", A, 400) == Renewed(500)
        local.guard(tx, "owned", A)
        assert local.reconfirm(tx, "stolen", A, 31_001) == Lost()
        assert local.activate(tx, "stolen", B, 31_000, 31_002) == Promoted()
        assert local.activate(tx, "claimed", C, 700, 800) == Promoted()
        evidence = LivenessEvidence(A, 30_501, "lease-expired")
        assert local.steal(tx, "owned", B, 30_501, evidence) == Granted(30_501)


def test_on_open_replaces_what_it_held() -> None:
    """Leases granted before on_open are forgotten; the rows are the truth."""
    local = LocalConsensus()
    with FakeTransaction() as tx:
        assert local.claim(tx, "idle", B, 1) == Granted(1)
        assert local.claim(tx, "elsewhere", B, 1) == Granted(1)
    rebuilt(local)
    assert lease(local, "idle") is None
    assert lease(local, "elsewhere") is None
    assert lease(local, "owned") == Lease("owned", A, 500, 500, None, None)


def test_on_open_rolls_back() -> None:
    """An on_open whose transaction rolls back leaves the previous leases in place."""
    local = LocalConsensus()
    with FakeTransaction() as tx:
        assert local.claim(tx, "elsewhere", B, 1) == Granted(1)
    with FakeTransaction(backfill_connection(ROWS)) as tx:
        local.on_open(tx)
        raise RollBack
    assert lease(local, "elsewhere") == Lease("elsewhere", None, None, None, B, 1)
    assert lease(local, "owned") is None


def test_refusals_register_no_undo() -> None:
    """A call that changes nothing registers nothing with the transaction."""
    local = LocalConsensus()
    rebuilt(local)
    with FakeTransaction() as tx:
        assert local.claim(tx, "owned", B, 1) == Rejected("owner_held")
        assert local.activate(tx, "owned", B, 1, 1) == Lost()
        assert local.heartbeat(tx, "owned", B, 1) == Lost()
        local.release_claim(tx, "claimed", A, 700)
        local.release_ownership(tx, "owned", B)
        with pytest.raises(FenceLostError):
            local.guard(tx, "owned", B)
        assert local.lease(tx, "owned") is not None
    assert tx.rollback_callbacks == []


def test_changes_undo_in_reverse_order() -> None:
    """Several changes to one run in one transaction roll back to the first state."""
    local = LocalConsensus()
    rebuilt(local)
    before = lease(local, "stolen")
    with FakeTransaction() as tx:
        assert local.activate(tx, "stolen", B, 31_000, 31_001) == Promoted()
        assert local.heartbeat(tx, "stolen", B, 31_005) == Renewed(31_005)
        local.release_ownership(tx, "stolen", B)
        assert local.claim(tx, "stolen", C, 31_006) == Granted(31_006)
        raise RollBack
    assert lease(local, "stolen") == before


def test_concurrent_claims_grant_once() -> None:
    """Threads racing to claim one run through one strategy: exactly one is granted."""
    local = LocalConsensus()
    start = threading.Barrier(16)
    answers: list[object] = []
    guard = threading.Lock()

    def contender(pid: int) -> None:
        start.wait()
        with FakeTransaction() as tx:
            answer = local.claim(tx, "race", OwnerId("host", pid, f"n{pid}"), pid)
        with guard:
            answers.append(answer)

    threads = [threading.Thread(target=contender, args=(pid,)) for pid in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    granted = [a for a in answers if isinstance(a, Granted)]
    assert len(granted) == 1
    assert answers.count(Rejected("already_claimed")) == 15


def test_separate_instances_do_not_share_leases() -> None:
    """Two instances each grant the same run: why one database must never have two of them."""
    first, second = LocalConsensus(), LocalConsensus()
    with FakeTransaction() as tx:
        assert first.claim(tx, "run", A, 1) == Granted(1)
        assert second.claim(tx, "run", B, 1) == Granted(1)


def test_store_reopened_with_local_consensus_rebuilds_its_leases(tmp_path: Path) -> None:
    """A SQLite store opened with a fresh LocalConsensus knows the owners already in the file."""
    import runstore

    path = tmp_path / "local.db"
    try:
        store = runstore.open(path, consensus=LocalConsensus())
    except NotImplementedError:
        pytest.skip("runstore.open has not landed yet")
    with store:
        store.create("run", "{}")
        assert store.claim_and_own("run", RunSnapshot("pending", None, None), A, 100) == Activated()
    local = LocalConsensus()
    with runstore.open(path, consensus=local) as reopened:
        assert lease(local, "run") == Lease("run", A, 100, 100, None, None)
        assert reopened.heartbeat("run", A, 200) == Updated()
        assert lease(local, "run") == Lease("run", A, 100, 200, None, None)
