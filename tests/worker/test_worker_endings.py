"""How a worker ends a run, for every kind of handler (issue 27's endings), on a
SQLite file store with a ``ManualClock``: nothing here sleeps on lease time."""

from __future__ import annotations

import itertools
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import runstore
from runstore import HEARTBEAT_INTERVAL_MS, HEARTBEAT_STALE_AFTER_MS, ManualClock, OwnerId
from runstore.attempts import AttemptStore
from runstore.model import ModelRunStore
from runstore.ownership import LeaseLost
from runstore.worker import ATTEMPT_STEP, Job, Worker

from .._stores import STORE_FACTORIES
from ._harness import WAIT_S, Running

SECRET = "sk-live-5ecret-in-the-error"
ME = OwnerId("host-w", 4242, "worker-nonce")


@pytest.fixture(params=["model", "sqlite-file-sql", "postgres-sql"])
def store(
    request: pytest.FixtureRequest, tmp_path: Path, clock: ManualClock
) -> Iterator[runstore.RunStore]:
    """The reference model, a SQLite file and PostgreSQL: the worker works on any store."""
    opened = STORE_FACTORIES[request.param](clock, tmp_path)
    try:
        yield opened
        opened.check_invariants()
    finally:
        opened.close()


def test_returned_json_completes_the_run(store: runstore.RunStore, clock: ManualClock) -> None:
    store.create("r1", '{"n": 1}')

    def handler(job: Job) -> str:
        assert job.state_json == '{"n": 1}'
        assert job.takeover is None
        return '{"n": 2}'

    running = Running(store, handler, clock, owner=ME)
    assert running.wait_for("taken", "r1").owner == ME
    settled = running.wait_for("settled", "r1")
    running.stop()
    assert settled.status == "completed"
    row = store.get("r1")
    assert (row.status, row.state_json, row.owner) == ("completed", '{"n": 2}', None)


def test_a_raising_handler_fails_the_run_and_keeps_its_checkpoint(
    store: runstore.RunStore, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    store.create("r1", '{"step": 0}')

    def handler(job: Job) -> str:
        job.checkpoint('{"step": 1}')
        raise RuntimeError(f"token {SECRET} rejected")

    caplog.set_level(logging.DEBUG)
    running = Running(store, handler, clock, owner=ME)
    settled = running.wait_for("settled", "r1")
    running.stop()
    assert (settled.status, settled.reason, settled.error_type) == (
        "failed",
        "handler_raised",
        "RuntimeError",
    )
    row = store.get("r1")
    assert (row.status, row.state_json) == ("failed", '{"step": 1}')
    # The message (it may hold credentials) is nowhere: not in the event, the
    # log, or (below) the attempt record.
    assert SECRET not in repr(settled)
    assert SECRET not in caplog.text
    if isinstance(store, ModelRunStore):
        return  # the model keeps no attempts beside its runs
    (attempt,) = AttemptStore(store).state()  # type: ignore[arg-type]
    assert (attempt.run_id, attempt.step_key_digest, attempt.state) == (
        "r1",
        ATTEMPT_STEP,
        "failed",
    )
    error = attempt.error
    assert isinstance(error, dict)
    assert error["type"] == "RuntimeError"
    assert error["reason"] == "handler_raised"
    site = error["site"]
    assert isinstance(site, dict)
    assert site["function"] == "handler"
    assert site["file"].endswith("test_worker_endings.py")
    assert SECRET not in json.dumps(attempt.error) + json.dumps(attempt.meta)


@pytest.mark.parametrize("returned", [{"a": 1}, b"{}", "not json {", None, 7])
def test_a_handler_returning_anything_but_json_text_fails_the_run(
    store: runstore.RunStore, clock: ManualClock, returned: object
) -> None:
    store.create("r1", '{"kept": true}')
    running = Running(store, lambda job: returned, clock, owner=ME)
    settled = running.wait_for("settled", "r1")
    running.stop()
    assert (settled.status, settled.reason) == ("failed", "not_json")
    assert settled.error_type == "runstore.worker.NotJsonText"
    assert store.get("r1").state_json == '{"kept": true}'
    if isinstance(store, ModelRunStore):
        return
    (attempt,) = AttemptStore(store).state()  # type: ignore[arg-type]
    assert isinstance(attempt.error, dict)
    assert attempt.error["returned"] == type(returned).__qualname__


def test_a_thousand_checkpoints_then_completion(
    store: runstore.RunStore, clock: ManualClock
) -> None:
    store.create("r1", '{"i": 0}')
    seen: list[str] = []

    def handler(job: Job) -> str:
        for i in range(1, 1001):
            job.checkpoint(json.dumps({"i": i}))
        seen.append(store.get(job.run_id).state_json or "")
        return '{"done": 1000}'

    running = Running(store, handler, clock, owner=ME)
    settled = running.wait_for("settled", "r1")
    running.stop()
    assert settled.status == "completed"
    assert seen == ['{"i": 1000}']
    assert store.get("r1").state_json == '{"done": 1000}'


def test_a_cancel_requested_while_the_handler_returns_settles_cancelled(
    store: runstore.RunStore, clock: ManualClock
) -> None:
    store.create("r1", "{}")

    def handler(job: Job) -> str:
        assert not job.cancel_requested
        store.request_cancel(job.run_id, clock.now_ms())  # someone asks, just before the end
        assert job.cancel_requested
        return '{"partial": true}'

    running = Running(store, handler, clock, owner=ME)
    settled = running.wait_for("settled", "r1")
    running.stop()
    assert (settled.status, settled.reason) == ("cancelled", "cancel_requested")
    row = store.get("r1")
    assert (row.status, row.state_json) == ("cancelled", '{"partial": true}')


def _late_writer(release: threading.Event, refused: list[LeaseLost]) -> Callable[[Job], str]:
    """A handler that waits for ``release``, then tries to checkpoint (a refusal
    lands in ``refused``) and returns a completion."""

    def handler(job: Job) -> str:
        release.wait()
        try:
            job.checkpoint('{"v": "late"}')
        except LeaseLost as error:
            refused.append(error)
        return '{"v": "late completion"}'

    return handler


def _held_until(
    started: threading.Event, release: threading.Event, result: str
) -> Callable[[Job], str]:
    """A handler that says it ``started``, waits for ``release``, returns ``result``."""

    def handler(job: Job) -> str:
        started.set()
        release.wait()
        return result

    return handler


def _wait_for(condition: Callable[[], object]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)


def test_a_handler_that_never_returns_keeps_its_lease_then_is_suspended_at_stop(
    store: runstore.RunStore, clock: ManualClock
) -> None:
    store.create("r1", '{"v": 0}')
    release = threading.Event()
    refused: list[LeaseLost] = []
    handler = _late_writer(release, refused)
    running = Running(store, handler, clock, owner=ME)
    running.wait_for("taken", "r1")
    fleet = running.worker._fleet
    # Five lease periods pass: the fleet renews the lease every interval.
    for _ in range(5 * HEARTBEAT_STALE_AFTER_MS // HEARTBEAT_INTERVAL_MS):
        clock.advance(HEARTBEAT_INTERVAL_MS)
        assert fleet.wait_idle()
    row = store.get("r1")
    assert row.status == "running"
    assert row.owner == running.worker.owner
    assert row.heartbeat_at_ms == clock.now_ms()

    running.worker.stop(10.0)
    clock.advance(10_001)  # the grace runs out on the worker's clock
    suspended = running.wait_for("suspended", "r1")
    running.thread.join(20)
    assert not running.thread.is_alive()
    assert suspended.reason == "grace_expired"
    assert store.get("r1").status == "suspended"
    release.set()  # the handler wakes: its writes are refused
    _wait_for(lambda: refused)
    assert refused
    assert refused[0].reason == "fence_lost"
    row = store.get("r1")
    assert (row.status, row.state_json) == ("suspended", '{"v": 0}')


class _HeartbeatGate:
    """The store, with its lease renewals (and its takeovers) held at a gate while
    ``closed`` is set: a worker whose writes cannot get through, as over a
    partition. Takeovers are held too: once its supervisor gives the lease up,
    the worker could otherwise take its own stale run back before the peer."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self.closed = threading.Event()
        self.opened = threading.Event()

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._store, name)
        if name not in ("heartbeat_many", "reconfirm", "heartbeat", "claim_and_own"):
            return method

        def gated(*args: Any, **kwargs: Any) -> Any:
            if self.closed.is_set():
                self.opened.wait(WAIT_S)
            return method(*args, **kwargs)

        return gated


def test_a_run_taken_by_a_peer_is_lost_and_nothing_is_written(
    store: runstore.RunStore, clock: ManualClock
) -> None:
    store.create("r1", '{"v": 0}')
    started, release = threading.Event(), threading.Event()
    handler = _held_until(started, release, '{"v": "from the displaced owner"}')
    gate = _HeartbeatGate(store)
    running = Running(gate, handler, clock, owner=ME)
    assert started.wait(WAIT_S)
    # The worker's renewals stop getting through; past staleness a peer on
    # another host takes the run over with evidence.
    gate.closed.set()
    peer = OwnerId("host-p", 7, "peer")
    now = clock.advance(HEARTBEAT_STALE_AFTER_MS + 1)
    row = store.get("r1")
    evidence = runstore.LivenessEvidence(ME, now, "cross-host-unreachable-stale")
    assert store.claim_and_own("r1", row, peer, now, evidence) == runstore.Activated()
    gate.opened.set()
    clock.advance(HEARTBEAT_INTERVAL_MS)
    lost = running.wait_for("lost", "r1")
    release.set()
    running.stop()
    assert lost.reason == "lease_lost"
    row = store.get("r1")
    assert (row.status, row.owner, row.state_json) == ("running", peer, '{"v": 0}')
    assert [event.kind for event in running.drain_events()] == ["taken"]


def test_a_run_taken_over_too_often_is_failed_without_running_the_handler(
    store: runstore.RunStore, clock: ManualClock
) -> None:
    store.create("r1", '{"v": 0}')
    # Three owners on other hosts each took it and died: three takeovers so far.
    owners = [OwnerId(f"host-{i}", 10 + i, f"n{i}") for i in range(4)]
    now = clock.now_ms()
    assert store.claim_and_own("r1", store.get("r1"), owners[0], now) == runstore.Activated()
    for previous, taker in itertools.pairwise(owners):
        now = clock.advance(HEARTBEAT_STALE_AFTER_MS + 1)
        evidence = runstore.LivenessEvidence(previous, now, "cross-host-unreachable-stale")
        assert store.claim_and_own("r1", store.get("r1"), taker, now, evidence) == (
            runstore.Activated()
        )
    clock.advance(HEARTBEAT_STALE_AFTER_MS + 1)
    ran: list[str] = []
    running = Running(
        store, lambda job: ran.append(job.run_id) or "{}", clock, owner=ME, max_takeovers=3
    )
    taken = running.wait_for("taken_over", "r1")
    settled = running.wait_for("settled", "r1")
    running.stop()
    assert taken.evidence == "cross-host-unreachable-stale"
    assert taken.previous_owner == owners[3]
    assert (settled.status, settled.reason) == ("failed", "too_many_takeovers")
    assert ran == []
    assert store.get("r1").state_json == '{"v": 0}'


def test_a_stale_run_of_a_frozen_owner_on_this_host_is_taken_on_the_lease(
    store: runstore.RunStore, clock: ManualClock
) -> None:
    import os

    # A frozen process on this host: its pid is alive (our own), its lease stale.
    frozen = OwnerId("host-w", os.getpid(), "frozen")
    store.create("r1", '{"v": 1}')
    assert store.claim_and_own("r1", store.get("r1"), frozen, 0) == runstore.Activated()
    clock.advance(HEARTBEAT_STALE_AFTER_MS + 1)
    running = Running(store, lambda job: '{"v": 2}', clock, owner=ME)
    taken = running.wait_for("taken_over", "r1")
    running.wait_for("settled", "r1")
    running.stop()
    assert taken.evidence == "lease-expired"
    assert taken.previous_owner == frozen
    assert store.get("r1").status == "completed"


def test_worker_admission() -> None:
    store = runstore.open(":memory:")
    try:
        for options in (
            {"concurrency": 0},
            {"max_takeovers": -1},
            {"handler_timeout_ms": 0},
            {"poll_interval_s": 0},
            {"owner": ME, "host_id": "x"},
        ):
            with pytest.raises(runstore.InvalidRunError):
                Worker(store, lambda job: "{}", **options)  # type: ignore[arg-type]
        with pytest.raises(runstore.InvalidRunError):
            Worker(object(), lambda job: "{}")
    finally:
        store.close()


def test_a_handler_that_kills_its_process_every_time_ends_failed(tmp_path: Path) -> None:
    """Real processes and a real SIGKILL: each incarnation takes the run over
    from the dead one (its pid reaped: same-host-pid-dead) once the lease is
    stale, until the run has been taken over more than ``max_takeovers`` times."""
    import subprocess
    import sys

    path = tmp_path / "runs.db"
    with runstore.open(path, clock=ManualClock(0)) as setup:
        setup.create("doomed", '{"v": 0}')
    script = Path(__file__).with_name("_self_killing.py")
    outputs: list[tuple[int, str]] = []
    now = 0
    for _ in range(8):
        done = subprocess.run(
            [sys.executable, str(script), str(path), str(now), "3"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        outputs.append((done.returncode, done.stdout))
        if done.returncode == 0:
            break
        assert done.returncode == -9, done.stderr[-2000:]
        now += HEARTBEAT_STALE_AFTER_MS + 1
    codes = [code for code, _ in outputs]
    # One claim and three takeovers ran the handler and died; the fourth
    # takeover settled the run failed without running it.
    assert codes == [-9, -9, -9, -9, 0], outputs
    assert outputs[1][1].split() == ["taken_over", "doomed", "None", "None", "same-host-pid-dead"]
    assert "settled doomed failed too_many_takeovers" in outputs[-1][1]
    with runstore.open(path, clock=ManualClock(now)) as after:
        row = after.get("doomed")
        assert (row.status, row.state_json) == ("failed", '{"about_to": "die"}')
        facts = after.ownership_facts("doomed")
        assert sum(1 for fact in facts if fact.transition == "stolen") == 4
        after.check_invariants()


def test_handlers_that_finish_within_the_grace_complete_their_runs(
    store: runstore.RunStore, clock: ManualClock
) -> None:
    for number in range(3):
        store.create(f"r{number}", "{}")
    release = threading.Event()
    entered = threading.Semaphore(0)

    def handler(job: Job) -> str:
        entered.release()
        release.wait()
        return '{"done": true}'

    running = Running(store, handler, clock, owner=ME, concurrency=3)
    for _ in range(3):
        assert entered.acquire(timeout=WAIT_S)
    running.worker.stop(30.0)
    release.set()  # they return inside the grace
    running.thread.join(WAIT_S)
    assert not running.thread.is_alive()
    assert {store.get(f"r{n}").status for n in range(3)} == {"completed"}
    kinds = sorted(event.kind for event in running.drain_events())
    assert kinds == ["settled"] * 3 + ["taken"] * 3


def test_a_handler_past_its_timeout_fails_its_run_and_its_writes_are_refused(
    store: runstore.RunStore, clock: ManualClock
) -> None:
    store.create("r1", '{"v": 0}')
    release = threading.Event()
    refused: list[LeaseLost] = []
    handler = _late_writer(release, refused)
    running = Running(store, handler, clock, owner=ME, handler_timeout_ms=5_000)
    running.wait_for("taken", "r1")
    clock.advance(5_001)
    settled = running.wait_for("settled", "r1")
    release.set()
    _wait_for(lambda: refused)
    running.stop()
    assert (settled.status, settled.reason) == ("failed", "handler_timeout")
    assert refused
    assert refused[0].reason == "fence_lost"
    row = store.get("r1")
    assert (row.status, row.state_json) == ("failed", '{"v": 0}')


def test_workers_in_threads_complete_every_run_once(
    store: runstore.RunStore, clock: ManualClock
) -> None:
    runs = [f"job-{number:03d}" for number in range(60)]
    for run_id in runs:
        store.create(run_id, '{"n": 0}')
    done: list[str] = []
    lock = threading.Lock()

    def handler(job: Job) -> str:
        job.checkpoint('{"n": 1}')
        with lock:
            done.append(job.run_id)
        return '{"n": 2}'

    workers = [
        Running(store, handler, clock, owner=OwnerId(f"host-{i}", 100 + i, "t"), concurrency=4)
        for i in range(3)
    ]
    settled: list[str] = []
    for run_id in runs:
        for _ in range(int(WAIT_S / 0.01)):
            if store.get(run_id).status == "completed":
                break
            threading.Event().wait(0.01)
        settled.append(store.get(run_id).status)
    for running in workers:
        running.stop()
    assert settled == ["completed"] * len(runs)
    assert sorted(done) == runs  # each handler ran once: nobody was taken over
    events = [event for running in workers for event in running.drain_events()]
    assert sorted(e.run_id for e in events if e.kind == "settled") == runs


class _Watched(_HeartbeatGate):
    """The gate, also noting the worker's stale scans and its takeovers."""

    def __init__(self, store: Any) -> None:
        super().__init__(store)
        self.scanned_at: list[int] = []
        self.scan_seen = threading.Event()
        self.takeovers: list[str] = []

    def __getattr__(self, name: str) -> Any:
        method = super().__getattr__(name)
        if name == "list_runs":

            def listing(*args: Any, **kwargs: Any) -> Any:
                page = method(*args, **kwargs)
                if kwargs.get("stale_at") is not None:
                    self.scanned_at.append(kwargs["stale_at"])
                    self.scan_seen.set()
                return page

            return listing
        if name == "claim_and_own":

            def taking(run_id: str, *args: Any, **kwargs: Any) -> Any:
                self.takeovers.append(run_id)
                return method(run_id, *args, **kwargs)

            return taking
        return method


def test_a_held_run_gone_stale_is_not_taken_back_while_its_handler_runs(
    store: runstore.RunStore, clock: ManualClock
) -> None:
    """Renewals stuck (a partition): the run is stale in the store while its handler
    still runs here. The worker's own scan must leave it to the supervisor, not
    start a second execution of it beside the first."""
    store.create("r1", "{}")
    started, release = threading.Event(), threading.Event()
    handler = _held_until(started, release, "{}")
    watched = _Watched(store)
    # A free slot, so that the worker does scan for stale runs.
    running = Running(watched, handler, clock, owner=ME, concurrency=2)
    assert started.wait(WAIT_S)
    watched.closed.set()
    now = clock.advance(HEARTBEAT_STALE_AFTER_MS + 1)
    watched.scan_seen.clear()
    deadline = time.monotonic() + WAIT_S
    while now not in watched.scanned_at and time.monotonic() < deadline:
        watched.scan_seen.wait(0.05)
        watched.scan_seen.clear()
    assert now in watched.scanned_at  # the scan ran at the stale instant
    assert watched.takeovers == []
    watched.opened.set()
    release.set()
    settled = running.wait_for("settled", "r1")
    running.stop()
    assert settled.status == "completed"
    assert watched.takeovers == []


def test_slots_with_stores_of_their_own_complete_every_run_once(
    store: runstore.RunStore, clock: ManualClock
) -> None:
    """``slot_store``: each slot checkpoints, claims and settles through a store
    (a connection) of its own; the runs end exactly as with one shared store."""
    target = getattr(store, "_url", None) or getattr(store, "_path", None)
    if target is None:
        pytest.skip("the model has no second connection to open")
    opened: list[runstore.RunStore] = []

    def open_slot_store() -> runstore.RunStore:
        slot = runstore.open(target, clock=clock)
        opened.append(slot)
        return slot

    runs = [f"job-{number:02d}" for number in range(30)]
    for run_id in runs:
        store.create(run_id, '{"n": 0}')
    seen_stores: set[int] = set()
    lock = threading.Lock()

    def handler(job: Job) -> str:
        job.checkpoint('{"n": 1}')
        with lock:
            seen_stores.add(id(job._store))
        return '{"n": 2}'

    running = Running(store, handler, clock, owner=ME, concurrency=3, slot_store=open_slot_store)
    for run_id in runs:
        running.wait_for("settled", run_id)
    running.stop()
    assert {store.get(run_id).status for run_id in runs} == {"completed"}
    assert len(opened) == 3
    assert seen_stores <= {id(slot) for slot in opened}

    def closed(slot: runstore.RunStore) -> bool:
        try:
            slot.get("job-00")
        except runstore.RunStoreError:
            return True
        return False

    # Each slot closes its store as its thread ends, just after run() returns.
    deadline = time.monotonic() + WAIT_S
    while not all(closed(slot) for slot in opened) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert all(closed(slot) for slot in opened)


class _FlakyCheckpoints:
    """The store, whose next ``transition_owned`` to ``running`` fails as storage
    does (``PersistenceFailedError``, rolled back) while ``fail_next`` is set."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self.fail_next = threading.Event()

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._store, name)
        if name != "transition_owned":
            return method

        def transition_owned(run_id: str, owner: OwnerId, to: str, *args: Any) -> Any:
            if to == "running" and self.fail_next.is_set():
                self.fail_next.clear()
                raise runstore.PersistenceFailedError("transition_owned", "disk I/O error")
            return method(run_id, owner, to, *args)

        return transition_owned


def test_a_storage_failure_under_the_handler_leaves_the_run_to_its_lease(
    store: runstore.RunStore, clock: ManualClock
) -> None:
    store.create("r1", '{"v": 0}')
    flaky = _FlakyCheckpoints(store)
    tries: list[str] = []

    def handler(job: Job) -> str:
        tries.append(job.state_json)
        job.checkpoint('{"v": 1}')
        if len(tries) == 1:
            flaky.fail_next.set()
        job.checkpoint('{"v": 2}')  # the first time, storage fails: not caught here
        return '{"v": 3}'

    running = Running(flaky, handler, clock, owner=ME, concurrency=2)
    lost = running.wait_for("lost", "r1")
    assert lost.reason == "storage_failed"
    row = store.get("r1")  # not failed: still running, from its last durable state
    assert (row.status, row.owner, row.state_json) == ("running", ME, '{"v": 1}')
    clock.advance(HEARTBEAT_STALE_AFTER_MS + 1)  # no renewals: stale, taken back
    taken = running.wait_for("taken_over", "r1")
    settled = running.wait_for("settled", "r1")
    running.stop()
    assert taken.previous_owner == ME
    assert settled.status == "completed"
    assert tries == ['{"v": 0}', '{"v": 1}']
    assert store.get("r1").state_json == '{"v": 3}'
