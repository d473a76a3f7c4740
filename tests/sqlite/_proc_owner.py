"""A child process that owns runs on command, for tests/sqlite/test_processes.py.

Usage: ``python tests/sqlite/_proc_owner.py DB_PATH HOST_ID NONCE START_MS``

It opens the store at DB_PATH (a PostgreSQL URL too; with
``RUNSTORE_TEST_GENERAL_PATH`` set, on the general path) on a
``ManualClock(START_MS)`` as owner
``OwnerId(HOST_ID, <its pid>, NONCE)`` and answers one JSON line on stdout for
every JSON command line on stdin:

- ``{"op": "own", "run_id", "evidence": null|"probe"|"lease-expired"}``: read
  the row and ``claim_and_own`` it at the clock's reading; ``"probe"`` builds
  evidence with the pid probe, ``"lease-expired"`` with the lease check.
- ``{"op": "supervise", "run_id"}``: start the owned work: a thread that enters
  ``supervise(...)`` (cooperative interruption) and waits for work commands.
- ``{"op": "write", "step"}``: inside the block, write the run's state
  (``transition_owned(..., "running", state)``); answers the outcome.
- ``{"op": "churn"}``: inside the block, write steps 1, 2, 3, ... forever,
  printing ``{"committed": n}`` after each commit (for SIGKILL mid-work).
- ``{"op": "clock", "ms"}``: set the clock, then answer once the supervisor is
  parked again (or has ended): no transaction of this process is open then,
  so the parent may SIGSTOP it safely.
- ``{"op": "status"}``, ``{"op": "leave"}`` (exit the block; answers how it
  ended), ``{"op": "exit"}``.
"""

from __future__ import annotations

import json
import os
import queue
import sys
import threading
import time
from typing import Any

import runstore
from runstore import ManualClock, OwnerId
from runstore.ownership import LeaseLost, lease_liveness, supervise, takeover_evidence

_print_lock = threading.Lock()


def send(message: dict[str, Any]) -> None:
    with _print_lock:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()


class Block:
    """The owned work: a thread inside ``supervise(...)`` taking commands."""

    def __init__(self, store: Any, clock: ManualClock, run_id: str, me: OwnerId) -> None:
        self.store, self.clock, self.run_id, self.me = store, clock, run_id, me
        self.inbox: queue.Queue[dict[str, Any]] = queue.Queue()
        self.outbox: queue.Queue[dict[str, Any]] = queue.Queue()
        self.lapses: list[int] = []
        self.lease: Any = None
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        try:
            with supervise(
                self.store,
                self.run_id,
                self.me,
                clock=self.clock,
                on_lapse=self.lapses.append,
                interrupt_thread=False,
            ) as lease:
                self.lease = lease
                # Answer once the supervisor is parked on the clock, so the
                # parent's next clock move finds its pulse due (a move made
                # before the supervisor's first park would only schedule it).
                lease.wait_idle(timeout_s=30.0)
                self.outbox.put({"supervising": True})
                while True:
                    command = self.inbox.get()
                    if command["op"] == "leave":
                        break
                    if command["op"] == "churn":
                        self.churn()
                    else:
                        self.outbox.put({"outcome": self.write(command["step"])})
        except LeaseLost as lost:
            self.outbox.put({"left": True, "lease_lost": lost.reason, "lapses": self.lapses})
        else:
            self.outbox.put({"left": True, "lease_lost": None, "lapses": self.lapses})

    def write(self, step: int) -> str:
        state = json.dumps({"step": step, "by": self.me.nonce})
        outcome = self.store.transition_owned(self.run_id, self.me, "running", state)
        return type(outcome).__name__

    def churn(self) -> None:
        step = 0
        while True:
            step += 1
            outcome = self.write(step)
            send({"committed": step, "outcome": outcome})

    def parked(self) -> None:
        """Wait until the supervisor is parked on the clock or has ended."""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            lease = self.lease
            if lease is not None:
                # Not the clock's sleeper count: a sleeper the move just woke
                # is still counted until its thread runs, which on a loaded
                # machine can be after this check.
                if lease.lost.is_set() or lease.wait_idle(timeout_s=1.0):
                    return
                continue
            if self.clock.sleepers >= 2:
                return
            time.sleep(0.001)
        raise RuntimeError("the supervisor never parked")


def main(argv: list[str]) -> int:
    path, host_id, nonce, start_ms = argv[1], argv[2], argv[3], int(argv[4])
    clock = ManualClock(start_ms)
    options = {}
    if os.environ.get("RUNSTORE_TEST_GENERAL_PATH"):  # PostgreSQL: a transaction per step
        options["fast_path"] = False
    store = runstore.open(path, clock=clock, **options)
    me = OwnerId(host_id, os.getpid(), nonce)
    block: Block | None = None
    send({"ready": True, "pid": os.getpid()})
    for line in sys.stdin:
        command = json.loads(line)
        op = command["op"]
        if op == "own":
            row = store.get(command["run_id"])
            now = clock.now_ms()
            evidence = None
            if command.get("evidence") == "probe":
                evidence = takeover_evidence(row, me, now)
            elif command.get("evidence") == "lease-expired":
                evidence = takeover_evidence(
                    row, me, now, check=lease_liveness(), lease_expired=True
                )
            outcome = store.claim_and_own(command["run_id"], row, me, now, evidence)
            send(
                {
                    "outcome": type(outcome).__name__,
                    "evidence": None if evidence is None else evidence.kind,
                }
            )
        elif op == "supervise":
            block = Block(store, clock, command["run_id"], me)
            send(block.outbox.get(timeout=5))
        elif op in ("write", "churn"):
            assert block is not None
            block.inbox.put(command)
            if op == "write":
                send(block.outbox.get(timeout=5))
        elif op == "clock":
            clock.set(command["ms"])
            if block is not None:
                block.parked()
            send({"now": clock.now_ms()})
        elif op == "status":
            lost = block is not None and block.lease is not None and block.lease.lost.is_set()
            send({"lost": lost, "lapses": [] if block is None else block.lapses})
        elif op == "leave":
            assert block is not None
            block.inbox.put(command)
            send(block.outbox.get(timeout=5))
            block.thread.join(5)
            block = None
        elif op == "exit":
            break
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
