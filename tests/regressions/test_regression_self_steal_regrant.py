"""Regression: a self-steal's activation reported as HeartbeatRegressed (issue 10).

Found under ``HYPOTHESIS_PROFILE=deep`` on the unmutated stores: an owner
steals its own stale run (``lease-expired``), heartbeats at a reading 10 s
ahead of the store clock (inside the skew allowance) and activates. The
activation stamps the store clock (the seed), below that heartbeat, and the
invariant, which then judged heartbeats per owner rather than per grant,
fired on the reference model itself; the fuzzer blamed the store. A defect of
the suite, not of the store. Every step goes through the judge, which checks
every invariant on the reference (as a suite defect) and on the store.
"""

import pytest

import runstore
from runstore import (
    Activated,
    Claimed,
    LivenessEvidence,
    ManualClock,
    OwnerId,
    RunSnapshot,
    Updated,
)
from runstore.model import ModelRunStore
from runstore.stateful import Judge

ME = OwnerId(host_id="h1", pid=2, nonce="n0")


@pytest.mark.parametrize("side", ["reference", "sqlite"])
def test_self_steal_regrant_keeps_every_invariant(side):
    """The reference and the store take the program; no invariant fires."""
    clock = ManualClock(100000)
    if side == "reference":
        store = ModelRunStore(clock=clock)
    else:
        store = runstore.open(":memory:", clock=clock)
    judge = Judge(store, reference=side == "reference")
    try:
        assert judge.call("create", "lin", "{}") is None
        pending = RunSnapshot(status="pending", owner=None, heartbeat_at_ms=None)
        assert judge.call("claim_and_own", "lin", pending, ME, 100000) == Activated()
        clock.set(140000)
        evidence = LivenessEvidence(expected_owner=ME, checked_at_ms=150000, kind="lease-expired")
        stale = RunSnapshot(status="running", owner=ME, heartbeat_at_ms=100000)
        assert judge.call("steal", "lin", stale, ME, 150000, evidence) == Claimed(150000)
        assert judge.call("heartbeat", "lin", ME, 150000) == Updated()
        fresh = RunSnapshot(status="running", owner=ME, heartbeat_at_ms=150000)
        assert judge.call("activate", "lin", ME, 150000, fresh) == Activated()
        assert store.get("lin").heartbeat_at_ms == 140000  # activation stamps the store clock
    finally:
        close = getattr(store, "close", None)
        if callable(close):
            close()
