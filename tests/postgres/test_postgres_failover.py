"""Failover to a synchronous standby loses no acknowledged write and keeps
every fence.

A primary and a streaming-replication standby made with ``pg_basebackup``,
both throwaway clusters on loopback; the primary names the standby in
``synchronous_standby_names`` and commits with ``synchronous_commit=on``,
so a commit is acknowledged only once the standby has it. Supervised owners
reach the pair through one multi-host URL (``host=a,b`` with
``target_session_attrs=read-write``). Mid-run the primary is killed
(SIGKILL) and the standby promoted: the stores reconnect on their own and
find the new primary; no supervisor lapses (the failover is a few seconds of lease
time); every step acknowledged before the kill is on the new primary; and
an owner that had been displaced before the failover is still refused
(``FenceLost``) there, while the owner that replaced it writes on.

Without the synchronous standby the same failover can lose acknowledged
writes: an asynchronous standby replicating through a proxy that the test
pauses falls behind while the primary acknowledges commits; the primary is
killed, what was in flight is dropped, and the promoted standby does not
have the steps the owner was told were committed.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from runstore import (
    Activated,
    FenceLost,
    LivenessEvidence,
    ManualClock,
    OwnerId,
    RunSnapshot,
    RunStoreError,
    Transitioned,
)

from ._pg_faults import ROLE, Node, Proxy, need_binaries
from .test_postgres_faults import Owner, _advance, _writes_again

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

postgres = pytest.importorskip("runstore.postgres")

PENDING = RunSnapshot("pending", None, None)


@pytest.fixture
def pair() -> Iterator[tuple[Node, Node]]:
    need_binaries()
    primary = Node()
    standby = None
    try:
        primary.sql("CREATE DATABASE runs")
        postgres.open(primary.url("runs"), clock=ManualClock(0)).close()  # migrated
        standby = Node(standby_of=primary)
        primary.sql("ALTER SYSTEM SET synchronous_standby_names = '*'")
        primary.sql("SELECT pg_reload_conf()")
        deadline = time.monotonic() + 60
        while primary.sql("SELECT sync_state FROM pg_stat_replication") != [("sync",)]:
            assert time.monotonic() < deadline, "the standby never became synchronous"
            time.sleep(0.05)
        yield primary, standby
    finally:
        if standby is not None:
            standby.destroy()
        primary.destroy()


def test_failover_to_a_synchronous_standby(pair: tuple[Node, Node]) -> None:
    primary, standby = pair
    url = (
        f"postgresql://{ROLE}@127.0.0.1:{primary.port},127.0.0.1:{standby.port}/runs"
        "?target_session_attrs=read-write&connect_timeout=5"
    )
    clock = ManualClock(0)
    owners = [Owner(url, clock, f"r{i}", i) for i in range(2)]
    # A displaced owner: C owned r-fenced, D took it over (C's lease expired).
    side = ManualClock(0)
    c_store = postgres.open(url, clock=side)
    d_store = postgres.open(url, clock=side)
    c, d = OwnerId("host-c", 3, "c"), OwnerId("host-d", 4, "d")
    try:
        c_store.create("r-fenced", "{}")
        assert c_store.claim_and_own("r-fenced", PENDING, c, 0) == Activated()
        side.set(40_000)
        row = d_store.get("r-fenced")
        evidence = LivenessEvidence(c, 40_000, "lease-expired")
        assert d_store.claim_and_own("r-fenced", row, d, 40_000, evidence) == Activated()

        _advance(clock, owners, 1_000)
        _writes_again(owners)
        primary.stop("kill")
        acknowledged = [owner.acknowledged for owner in owners]
        assert all(acknowledged)
        standby.promote()
        _advance(clock, owners, 6_000)
        _writes_again(owners)
        _advance(clock, owners, 8_000)
        for owner in owners:
            assert owner.lost is None
            assert owner.lease.last_confirmed_ms == 8_000
            owner.finish()
        for owner, before in zip(owners, acknowledged, strict=True):
            # Writes in flight either failed (persistence_failed) or were
            # replayed by the store itself on the new primary.
            assert all(e.code == "persistence_failed" for e in owner.errors)
            assert owner.store._connection.info.port == standby.port
            step = json.loads(owner.store.get(owner.run_id).state_json)["step"]
            assert step >= before  # nothing acknowledged before the kill was lost
            assert step == owner.acknowledged or step in owner.unknown
        # The fence held across the failover.
        assert c_store.transition_owned("r-fenced", c, "running", '{"late": 1}') == FenceLost()
        assert d_store.transition_owned("r-fenced", d, "running", '{"d": 1}') == Transitioned()
        assert standby.sql("SELECT pg_is_in_recovery()") == [(False,)]
        owners[0].store.check_invariants()
    finally:
        for owner in owners:
            owner.stop.set()
            owner.thread.join(30)
            owner.store.close()
        c_store.close()
        d_store.close()


def test_an_asynchronous_standby_can_lose_acknowledged_writes() -> None:
    need_binaries()
    primary = Node()
    standby = None
    link = Proxy(primary.port)
    try:
        primary.sql("CREATE DATABASE runs")
        postgres.open(primary.url("runs"), clock=ManualClock(0)).close()
        standby = Node(standby_of=primary, via=link.port)
        deadline = time.monotonic() + 60
        while primary.sql("SELECT state FROM pg_stat_replication") != [("streaming",)]:
            assert time.monotonic() < deadline, "the standby never streamed"
            time.sleep(0.05)
        owner = OwnerId("host-a", 1, "a")
        with postgres.open(primary.url("runs"), clock=ManualClock(0)) as store:
            store.create("r", '{"step": 0}')
            assert store.claim_and_own("r", PENDING, owner, 0) == Activated()
            link.pause()  # the standby falls behind; commits are acknowledged anyway
            for step in range(1, 6):
                assert store.transition_owned("r", owner, "running", f'{{"step": {step}}}') == (
                    Transitioned()
                )
            primary.stop("kill")
        link.close()  # what was in flight to the standby is gone
        standby.promote()
        with postgres.open(standby.url("runs"), clock=ManualClock(0)) as promoted:
            assert json.loads(promoted.get("r").state_json)["step"] < 5
            promoted.check_invariants()
    finally:
        link.close()
        if standby is not None:
            standby.destroy()
        primary.destroy()


def _until(condition: Any) -> None:
    """Wait (bounded) for the standby to replay what the test checks next."""
    deadline = time.monotonic() + 60
    while not condition():
        assert time.monotonic() < deadline, "the standby never replayed the write"
        time.sleep(0.05)


def _has(store: Any, run_id: str) -> bool:
    try:
        store.get(run_id)
    except RunStoreError:
        return False
    return True


def test_a_standby_shows_the_numbered_feed_and_numbers_once_promoted(
    pair: tuple[Node, Node],
) -> None:
    """A hot standby cannot write, so its readers do not number the change
    log (docs/guides/postgresql.md, "The change feed"): they show the feed
    as numbered on the primary. The log's entries are rows like any other:
    once the standby is promoted, its first reader numbers the writes the
    old primary acknowledged but nobody numbered."""
    primary, standby = pair
    with postgres.open(primary.url("runs"), clock=ManualClock(0)) as writer:
        writer.create("a", "{}")
        assert writer.revision() == 1
        writer.create("b", "{}")  # acknowledged; not numbered yet
        reader = postgres.open(standby.url("runs"), clock=ManualClock(0), read_only=True)
        try:
            _until(lambda: _has(reader, "b"))
            assert reader.revision() == 1
            assert [c.run_id for c in reader.changes(0)] == ["a"]
            assert writer.revision() == 2
            _until(lambda: reader.revision() == 2)
            assert [c.run_id for c in reader.changes(1)] == ["b"]
            writer.create("c", "{}")
            _until(lambda: _has(reader, "c"))
            assert reader.revision() == 2
        finally:
            reader.close()
    primary.stop("kill")
    standby.promote()
    with postgres.open(standby.url("runs"), clock=ManualClock(0)) as promoted:
        assert promoted.revision() == 3
        assert [c.run_id for c in promoted.changes(2)] == ["c"]
        promoted.check_invariants()
