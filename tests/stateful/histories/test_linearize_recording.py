"""Recording histories: what ``HistoryRecorder`` writes, and that it reads back.

Calls through the wrapper are recorded with their intervals, answers or
error codes, and the store-clock readings a ``RecordingClock`` saw; values
come back equal; a process killed in the middle of a call leaves a readable
prefix whose last call is pending; threads are separate clients; files are
private.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import stat
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import runstore
from runstore import (
    Activated,
    CancelRequested,
    LivenessEvidence,
    ManualClock,
    OwnerId,
    RunSnapshot,
    TransitionGuard,
    Updated,
)
from runstore.stateful import (
    HistoryRecorder,
    RecordingClock,
    check_history,
    load_history,
)
from runstore.stateful._histories._codec import Unencodable, decode, encode

A = OwnerId("host-a", 1, "a")
PENDING = RunSnapshot("pending", None, None)


def test_calls_are_recorded_with_answers_errors_and_clock_readings(tmp_path):
    """Each call is an operation with its arguments, its answer (equal to what
    the store returned) or its error code, and the store clock's readings."""
    clock = ManualClock(1_000)
    path = tmp_path / "history.jsonl"
    with HistoryRecorder(path, process="p1") as recorder:
        store = recorder.record(runstore.open(tmp_path / "db", clock=RecordingClock(clock)))
        store.create("r", '{"a":1}')
        clock.advance(5)
        assert store.claim_and_own("r", PENDING, A, 1_005) == Activated()
        row = store.get("r")
        with pytest.raises(runstore.RunStoreError):
            store.get("missing")
        assert store.request_cancel("r", 1_010) == CancelRequested(1_010)
        store.close()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    ops = load_history([path])
    assert [op.method for op in ops] == [
        "create",
        "claim_and_own",
        "get",
        "get",
        "request_cancel",
    ]
    assert [op.id for op in ops] == [f"p1:{n}" for n in range(1, 6)]
    create, own, read, missing, cancel = ops
    assert create.clock_ms == (1_000,)
    assert own.clock_ms == (1_005,)
    assert read.clock_ms == ()
    assert read.value == row
    assert missing.status == "error"
    assert missing.error == "not_found_row"
    assert not missing.unknown
    assert cancel.value == CancelRequested(1_010)
    assert all(op.returned_ns is not None and op.returned_ns >= op.invoked_ns for op in ops)
    assert check_history(ops).ok


def test_values_round_trip_through_history_json():
    """Every value class, tuples and dicts come back equal and of the same
    type; something no store admits comes back as an Unencodable."""
    values = [
        A,
        PENDING,
        LivenessEvidence(A, 5, "lease-expired"),
        TransitionGuard("absent"),
        Updated(),
        (1, "two", None),
        {"r1": Updated(), "r2": None},
        [True, 1.5, "\ud800"],
    ]
    for value in values:
        back = decode(json.loads(json.dumps(encode(value))))
        assert back == value
        assert type(back) is type(value)
    assert decode(encode(object())) == Unencodable("builtins.object")


def test_an_inadmissible_argument_is_recorded_and_refused_alike():
    """A call with an argument of a type no history holds is recorded as a
    placeholder; the model refuses it with invalid_run as the store did."""
    recorder = HistoryRecorder(process="p")
    store = recorder.record(runstore.open(":memory:", clock=RecordingClock(ManualClock(0))))
    with pytest.raises(runstore.RunStoreError) as raised:
        store.get(object())
    assert raised.value.code == "invalid_run"
    (op,) = recorder.operations()
    assert isinstance(op.args[0], Unencodable)
    assert check_history(recorder.operations()).ok
    store.close()


def test_methods_the_wrapper_does_not_know_are_recorded_too():
    """Any public method of the wrapped store is recorded (later operations are
    recorded as they appear); the checker lists what it cannot check."""

    class Extended:
        def __init__(self, inner):
            self.inner = inner

        def list_everything(self, *, limit=100):
            return []

        def __getattr__(self, name):
            return getattr(self.inner, name)

    recorder = HistoryRecorder(process="p")
    inner = runstore.open(":memory:", clock=RecordingClock(ManualClock(0)))
    store = recorder.record(Extended(inner))
    assert store.list_everything(limit=5) == []
    (op,) = recorder.operations()
    assert (op.method, dict(op.kwargs)) == ("list_everything", {"limit": 5})
    verdict = check_history(recorder.operations())
    assert [reason for _, reason in verdict.excluded] == ["not an operation this checker knows"]
    inner.close()


def test_threads_are_separate_clients(tmp_path):
    """Two threads, each with its own store on one file, record into one
    in-memory recorder; the history names the threads and is linearizable."""
    clock = ManualClock(0)
    recorder = HistoryRecorder(process="p")
    runstore.open(tmp_path / "db").close()

    def client(name: str) -> None:
        store = recorder.record(runstore.open(tmp_path / "db", clock=RecordingClock(clock)))
        me = OwnerId("host", 1, name)
        for n in range(20):
            run_id = f"r{n % 3}"
            with contextlib.suppress(runstore.RunStoreError):
                store.create(run_id, "{}")
            row = store.get(run_id)
            store.claim_and_own(run_id, row.snapshot, me, 0)
            store.heartbeat(run_id, me, n)
        store.close()

    threads = [threading.Thread(target=client, args=(n,), name=n) for n in ("t1", "t2")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ops = recorder.operations()
    assert {op.thread for op in ops} == {"t1", "t2"}
    assert check_history(ops).ok


_CHILD = textwrap.dedent(
    """
    import sys
    import runstore
    from runstore import ManualClock, OwnerId, RunSnapshot
    from runstore.stateful import HistoryRecorder, RecordingClock

    db, history = sys.argv[1], sys.argv[2]
    recorder = HistoryRecorder(history, process="child")
    store = recorder.record(runstore.open(db, clock=RecordingClock(ManualClock(0))))
    store.create("r", "{}")
    store.get("r")
    print("ready", flush=True)
    sys.stdin.readline()
    store.claim("r", RunSnapshot("pending", None, None), OwnerId("h", 1, "n"), 0)
    """
)


@pytest.mark.processes
def test_a_process_killed_mid_call_leaves_a_prefix_with_a_pending_call(tmp_path):
    """The child's claim blocks on the write lock the parent holds; SIGKILL
    leaves its invoke line without a return: read back as pending, of unknown
    outcome, and the history (with the store's final state) still checks."""
    db, history = tmp_path / "db", tmp_path / "child.jsonl"
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(db), str(history)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == b"ready"
        blocker = sqlite3.connect(db, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")
        assert child.stdin is not None
        child.stdin.write(b"go\n")
        child.stdin.flush()
        deadline = time.monotonic() + 20
        while b'"method":"claim"' not in history.read_bytes():
            assert time.monotonic() < deadline, "the child never invoked its claim"
            time.sleep(0.01)
        child.send_signal(signal.SIGKILL)
        child.wait()
        blocker.execute("ROLLBACK")
        blocker.close()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        for pipe in (child.stdin, child.stdout):
            if pipe is not None:
                pipe.close()
    ops = load_history([history])
    assert [op.method for op in ops] == ["create", "get", "claim"]
    last = ops[-1]
    assert last.status == "pending"
    assert last.unknown
    assert last.returned_ns is None
    assert check_history(ops).ok


def test_a_torn_last_line_is_dropped_and_a_bad_line_elsewhere_refused(tmp_path):
    """A kill in the middle of a write leaves a torn last line: dropped. A line
    that is not history anywhere else is an error; so are clashing ids."""
    recorder = HistoryRecorder(tmp_path / "h.jsonl", process="p")
    store = recorder.record(runstore.open(":memory:", clock=RecordingClock(ManualClock(0))))
    store.create("r", "{}")
    store.close()
    recorder.close()
    text = (tmp_path / "h.jsonl").read_text()
    (tmp_path / "torn.jsonl").write_text(text + '{"e":"invoke","op":"p:9","proc')
    assert len(load_history([tmp_path / "torn.jsonl"])) == 1
    (tmp_path / "bad.jsonl").write_text("not json\n" + text)
    with pytest.raises(ValueError, match="line 1"):
        load_history([tmp_path / "bad.jsonl"])
    with pytest.raises(ValueError, match="appears twice"):
        load_history([tmp_path / "h.jsonl", tmp_path / "h.jsonl"])
