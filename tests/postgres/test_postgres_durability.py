"""A committed operation survives the server stopping without a shutdown
checkpoint, and a store outlives the server's restart.

This test runs its own cluster with ``fsync``, ``synchronous_commit`` and
``full_page_writes`` on (the shared test cluster has them off for speed):
the server is stopped as a crash stops it (an immediate shutdown: no
checkpoint, recovery replays the write-ahead log) and started again on the
same data folder. The open store's connection died with the server; its next
operation reconnects.
"""

from __future__ import annotations

import os

import pytest

from runstore import Activated, ManualClock, OwnerId, RunSnapshot, RunStoreError, Updated
from runstore.sqlite import RetryPolicy
from runstore.stateful._targets import _postgres as servers

postgres = pytest.importorskip("runstore.postgres")

OWNER = OwnerId("host-a", 1, "nonce-a")


@pytest.mark.slow
def test_committed_writes_survive_an_immediate_shutdown() -> None:
    if os.environ.get(servers.URL_VARIABLE):
        pytest.skip("runs its own cluster; RUNSTORE_TEST_POSTGRES points at a server")
    try:
        cluster = servers.Cluster(fsync=True)
    except servers.Unavailable as why:
        if os.environ.get("CI") == "true":
            pytest.fail(f"PostgreSQL unavailable under CI=true: {why}")
        pytest.skip(f"PostgreSQL unavailable: {why}")
    try:
        with postgres.open(cluster.url, clock=ManualClock(0)) as store:
            store.create("r", '{"step": 1}')
            assert store.claim_and_own("r", RunSnapshot("pending", None, None), OWNER, 0) == (
                Activated()
            )
            assert store.heartbeat("r", OWNER, 7) == Updated()
            before = store.state()
            cluster.crash()
            # Reconnecting is retried within the policy; keep the wait short here.
            store._retry_policy = RetryPolicy(max_attempts=3)
            with pytest.raises(RunStoreError) as caught:
                store.get("r")
            assert caught.value.code == "persistence_failed"
            cluster.restart()
            assert store.state() == before
            assert store.heartbeat("r", OWNER, 9) == Updated()
            store.check_invariants()
    finally:
        cluster.stop()
