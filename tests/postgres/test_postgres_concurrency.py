"""Concurrent writers on one PostgreSQL database: real connections, real processes.

Every store here has its own connection (as stores on different hosts do).
Writers racing for one run are serialized by the run-row lock: N racing
``claim_and_own`` calls give exactly one ``Activated``, N racing steals of a
stale run exactly one claim, whether the racers are threads or processes,
and no racer ever sees an error. A real deadlock (two strategies locking
each other's runs) is detected by the server, and the victim's whole
operation is replayed: no 40P01 reaches the caller.

The change feed stays dense and never skips a committed change when
transactions commit in another order than they began: the revision is
assigned at commit, under the revision source's row lock, so revisions
follow commit order. A feed numbered when rows are written (a sequence, no
lock) does skip, and the same reader catches it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from runstore import (
    Activated,
    AlreadyClaimed,
    Claimed,
    HeartbeatFresh,
    LivenessEvidence,
    ManualClock,
    OwnerId,
    RunSnapshot,
    SnapshotChanged,
    Updated,
)
from runstore.consensus import SqlConsensus

from .. import _postgres

postgres = pytest.importorskip("runstore.postgres")
psycopg = pytest.importorskip("psycopg")

PENDING = RunSnapshot("pending", None, None)
VICTIM = OwnerId("host-victim", 1, "victim")
RACER = Path(__file__).with_name("_pg_racer.py")
#: The answers a loser of a claim race may get: the row moved on.
LOSSES = {HeartbeatFresh(), SnapshotChanged(), AlreadyClaimed()}


@pytest.fixture
def url() -> str:
    return _postgres.database_url()


def _race(count: int, fn: Callable[[int], Any], timeout: float = 60) -> list[Any]:
    """``fn(i)`` on ``count`` threads released together; results (or errors) in order
    (each thread given ``timeout`` seconds to end)."""
    barrier = threading.Barrier(count)
    results: list[Any] = [None] * count

    def run(index: int) -> None:
        barrier.wait()
        try:
            results[index] = fn(index)
        except BaseException as error:  # reported through the results
            results[index] = error

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=timeout)
        assert not thread.is_alive()
    return results


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(0)


@pytest.fixture
def stores(url: str, clock: ManualClock) -> Iterator[list[Any]]:
    opened = [postgres.open(url, clock=clock) for _ in range(8)]
    yield opened
    for store in opened:
        store.close()


def test_racing_claim_and_own_on_separate_connections_has_one_winner(stores: list[Any]) -> None:
    """Eight stores race for each of ten runs: one Activated per run, the
    others a loss value, never an error; facts name the winner only."""
    first = stores[0]
    for round_ in range(10):
        run_id = f"race-{round_}"
        first.create(run_id, "{}")
        owners = [OwnerId(f"host-{i}", 100 + i, f"n-{round_}") for i in range(len(stores))]
        results = _race(
            len(stores),
            lambda i, run_id=run_id, owners=owners: stores[i].claim_and_own(
                run_id, PENDING, owners[i], 1_000
            ),
        )
        winners = [i for i, result in enumerate(results) if result == Activated()]
        assert len(winners) == 1, results
        assert all(result in LOSSES for i, result in enumerate(results) if i != winners[0])
        row = first.get(run_id)
        assert row.owner == owners[winners[0]]
        facts = [(f.transition, f.owner) for f in first.ownership_facts(run_id)]
        assert facts == [("claimed", owners[winners[0]]), ("activated", owners[winners[0]])]
    first.check_invariants()


def test_racing_steals_of_a_stale_run_have_one_claim(stores: list[Any], clock: ManualClock) -> None:
    first = stores[0]
    for round_ in range(10):
        run_id = f"stale-{round_}"
        first.create(run_id, "{}")
        assert first.claim_and_own(run_id, PENDING, VICTIM, 0) == Activated()
    clock.set(40_000)
    for round_ in range(10):
        run_id = f"stale-{round_}"
        expected = RunSnapshot("running", VICTIM, 0)
        thieves = [OwnerId(f"thief-{i}", 200 + i, f"t-{round_}") for i in range(len(stores))]

        def steal(
            i: int, run_id: str = run_id, expected: Any = expected, thieves: Any = thieves
        ) -> Any:
            evidence = LivenessEvidence(VICTIM, 40_000, "cross-host-unreachable-stale")
            return stores[i].steal(run_id, expected, thieves[i], 40_000, evidence)

        results = _race(len(stores), steal)
        winners = [i for i, result in enumerate(results) if result == Claimed(40_000)]
        assert len(winners) == 1, results
        assert all(r == AlreadyClaimed() for i, r in enumerate(results) if i != winners[0])
        assert first.get(run_id).claim == thieves[winners[0]]
    first.check_invariants()


class _Racers:
    """Racer processes (tests/postgres/_pg_racer.py), each its own host."""

    def __init__(self, url: str, count: int, *, lazy: bool = False) -> None:
        extra = ["--lazy"] if lazy else []
        self.processes = [
            subprocess.Popen(
                [sys.executable, str(RACER), url, f"proc-host-{i}", *extra],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for i in range(count)
        ]
        self.pids = [self._answer(process)["ready"] for process in self.processes]

    @staticmethod
    def _answer(process: subprocess.Popen[str]) -> dict[str, Any]:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line, "a racer exited early"
        answer: dict[str, Any] = json.loads(line)
        return answer

    def broadcast(self, **command: Any) -> list[dict[str, Any]]:
        """Send ``command`` to every racer at once; their answers in order."""
        text = json.dumps(command) + "\n"
        for process in self.processes:
            assert process.stdin is not None
            process.stdin.write(text)
            process.stdin.flush()
        return [self._answer(process) for process in self.processes]

    def close(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                assert process.stdin is not None
                process.stdin.write('{"op": "exit"}\n')
                process.stdin.close()
        for process in self.processes:
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)
            if process.stdout is not None:
                process.stdout.close()


def test_racing_purges_leave_no_eligible_run_behind(stores: list[Any], clock: ManualClock) -> None:
    """Two purges at once over a settled lineage (a root and two rounds, the
    first round the root's child): together they delete all three, whichever
    way they interleave. (Purges that ran side by side once each passed over
    the rounds the other held and judged the root by a snapshot in which its
    child still existed, so neither deleted the root.)"""
    owner = OwnerId("host-purge", 1, "purge")
    first, second = stores[0], stores[1]
    for trial in range(12):
        root, one, two = (f"p{trial}-{name}" for name in ("root", "one", "two"))
        first.create(root, "{}")
        first.create(one, "{}", parent_run_id=root, lineage_id=root, round_ordinal=1)
        first.create(two, "{}", lineage_id=root, round_ordinal=2)
        for run_id in (root, one, two):
            first.claim_and_own(run_id, PENDING, owner, clock.now_ms())
            first.transition_owned(run_id, owner, "completed")
        clock.advance(60_000)
        purged = _race(2, lambda i: (first, second)[i].purge_settled(clock.now_ms()))
        assert not any(isinstance(n, BaseException) for n in purged), purged
        assert sum(purged) == 3, (trial, purged)
        assert not {root, one, two} & {row.run_id for row in first.state().rows}
    first.check_invariants()


@pytest.mark.processes
@pytest.mark.timeout(120)
def test_racing_processes_have_one_winner_per_run(url: str) -> None:
    """Four processes (four hosts) race claim_and_own on each of five runs,
    then steal each of five stale runs: one winner each time, no error."""
    racers = _Racers(url, 4)
    try:
        with postgres.open(url, clock=ManualClock(0)) as look:
            for n in range(5):
                look.create(f"p-{n}", "{}")
                answers = racers.broadcast(op="claim_and_own", run_id=f"p-{n}", now_ms=1_000)
                assert [a.get("outcome") for a in answers].count("Activated") == 1, answers
                assert all("error" not in a for a in answers), answers
                owner = look.get(f"p-{n}").owner
                assert owner is not None
                assert owner.pid in racers.pids
            for n in range(5):
                look.create(f"s-{n}", "{}")
                assert look.claim_and_own(f"s-{n}", PENDING, VICTIM, 0) == Activated()
                answers = racers.broadcast(
                    op="steal",
                    run_id=f"s-{n}",
                    now_ms=40_000,
                    owner=[VICTIM.host_id, VICTIM.pid, VICTIM.nonce],
                    heartbeat_at_ms=0,
                )
                outcomes = [a.get("outcome") for a in answers]
                assert outcomes.count("Claimed") == 1, answers
                assert outcomes.count("AlreadyClaimed") == 3, answers
            look.check_invariants()
    finally:
        racers.close()


class _Crossing(SqlConsensus):
    """On its first claim, locks ``partner``'s run row after a pause: two of
    these, each claiming the other's partner, deadlock."""

    def __init__(self, partner: str) -> None:
        self.partner = partner
        self.calls = 0

    def claim(self, tx: Any, run_id: str, claimant: OwnerId, now_ms: int) -> Any:
        self.calls += 1
        if self.calls == 1:
            tx.connection.execute("SELECT pg_sleep(0.3)")
            tx.connection.execute(
                "SELECT 1 FROM flows_runs WHERE run_id = $1 FOR UPDATE", (self.partner,)
            )
        return super().claim(tx, run_id, claimant, now_ms)


def test_a_real_deadlock_is_replayed_and_never_reaches_the_caller(url: str) -> None:
    with postgres.open(url, clock=ManualClock(0)) as setup:
        setup.create("left", "{}")
        setup.create("right", "{}")
    strategies = [_Crossing("right"), _Crossing("left")]
    stores = [postgres.open(url, clock=ManualClock(0), consensus=s) for s in strategies]
    try:
        owners = [OwnerId("host-l", 1, "l"), OwnerId("host-r", 2, "r")]
        runs = ["left", "right"]
        results = _race(2, lambda i: stores[i].claim(runs[i], PENDING, owners[i], 5))
        assert results == [Claimed(5), Claimed(5)]
        # The server chose one victim, whose whole operation ran again.
        assert sorted(s.calls for s in strategies) == [1, 2]
        stores[0].check_invariants()
    finally:
        for store in stores:
            store.close()


# -- the change feed under out-of-order commits ------------------------------------------


class _Reader:
    """A change-feed consumer: polls ``changes(cursor)`` and remembers every
    (run, revision) it was shown."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.cursor = 0
        self.seen: set[tuple[str, int]] = set()

    def poll(self) -> None:
        changes = self.store.changes(self.cursor)
        for change in changes:
            assert change.revision > self.cursor
            self.seen.add((change.run_id, change.revision))
        if changes:
            self.cursor = changes[-1].revision

    def skipped(self) -> list[tuple[str, int]]:
        """Committed changes newer than nothing the reader saw: run entries
        at or below its cursor that it was never shown."""
        self.poll()
        final = [(c.run_id, c.revision) for c in self.store.changes(0)]
        return [pair for pair in final if pair not in self.seen]


def _out_of_order(
    url: str, *, fast_path: bool = True
) -> tuple[list[tuple[str, int]], list[int], int]:
    """A begins first and commits last; B commits in between; a reader
    polls after each commit. Returns what the reader missed, A's and B's
    revisions, and the database revision."""
    inside, release = threading.Event(), threading.Event()
    with (
        postgres.open(url, clock=ManualClock(0), fast_path=fast_path) as b,
        postgres.open(url, clock=ManualClock(0)) as a,
    ):
        b.create("a-run", "{}")
        b.create("b-run", "{}")
        reader = _Reader(b)
        reader.poll()

        def held(tx: Any) -> None:
            # A's row is written now (a nested write), its commit comes later.
            assert a.request_cancel("a-run", 5).__class__.__name__ == "CancelRequested"
            inside.set()
            assert release.wait(30)

        worker = threading.Thread(target=a._write, args=("held", held))
        worker.start()
        try:
            assert inside.wait(10)
            assert b.claim("b-run", PENDING, OwnerId("host-b", 2, "b"), 5) == Claimed(5)
            reader.poll()
        finally:
            release.set()
            worker.join(10)
        reader.poll()
        revisions = {c.run_id: c.revision for c in b.changes(0)}
        return reader.skipped(), [revisions["a-run"], revisions["b-run"]], b.revision()


def test_revisions_follow_commit_order_and_the_feed_never_skips(url: str) -> None:
    skipped, (a_revision, b_revision), revision = _out_of_order(url)
    assert b_revision == 3  # two creates, then B's commit,
    assert a_revision == 4  # then A's
    assert skipped == []
    assert revision == 4


# A feed numbered when the row is written: a sequence, taken without any lock.
_SEQUENCE_NUMBERED = """
CREATE SEQUENCE zoo_revisions;
CREATE OR REPLACE FUNCTION flows_runs_revision() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO flows_run_changes (run_id, revision, deleted)
    VALUES (NEW.run_id, nextval('zoo_revisions'), 0)
    ON CONFLICT (run_id) DO UPDATE SET revision = excluded.revision;
  RETURN NULL;
END $$;
DROP TRIGGER flows_runs_revision_update ON flows_runs;
CREATE TRIGGER flows_runs_revision_update AFTER UPDATE ON flows_runs
  FOR EACH ROW EXECUTE FUNCTION flows_runs_revision();
"""


def test_a_feed_numbered_at_write_time_skips_and_the_reader_sees_it(url: str) -> None:
    """The zoo case for the test above: the same schedule over a sequence-
    numbered feed gives A the earlier number though it commits later, so the
    reader's cursor passes it before it is visible. B takes the general
    path: since migration 2014 a one-round-trip write appends its change
    itself instead of through the trigger planted here."""
    with psycopg.connect(url, autocommit=True) as raw:
        raw.execute(_SEQUENCE_NUMBERED)
    skipped, (a_revision, b_revision), _ = _out_of_order(url, fast_path=False)
    assert a_revision < b_revision
    assert skipped == [("a-run", a_revision)]


@pytest.mark.timeout(120)
def test_a_feed_read_during_concurrent_writers_is_dense_and_complete(url: str) -> None:
    """Four writers heartbeat their own runs while a reader follows the feed:
    the reader is shown every run's last change, and the revision counts
    every row write exactly once."""
    writers, beats = 4, 40
    stores = [postgres.open(url, clock=ManualClock(0)) for _ in range(writers + 1)]
    try:
        reader_store = stores[-1]
        owners = [OwnerId(f"host-{i}", i + 1, "w") for i in range(writers)]
        for i in range(writers):
            stores[i].create(f"w-{i}", "{}")
            assert stores[i].claim_and_own(f"w-{i}", PENDING, owners[i], 0) == Activated()
        reader = _Reader(reader_store)
        done = threading.Event()
        problems: list[BaseException] = []

        def follow() -> None:
            deadline = time.monotonic() + 60
            try:
                while not done.is_set() and time.monotonic() < deadline:
                    reader.poll()
            except BaseException as error:
                problems.append(error)

        follower = threading.Thread(target=follow)
        follower.start()
        try:
            results = _race(
                writers,
                lambda i: [
                    stores[i].heartbeat(f"w-{i}", owners[i], beat) for beat in range(1, beats + 1)
                ],
            )
        finally:
            done.set()
            follower.join(60)
        assert problems == []
        assert all(result == [Updated()] * beats for result in results), results
        assert reader.skipped() == []
        assert reader_store.revision() == writers * (2 + beats)
        assert sorted(c.revision for c in reader_store.changes(0))[-1] == writers * (2 + beats)
        reader_store.check_invariants()
    finally:
        for store in stores:
            store.close()
