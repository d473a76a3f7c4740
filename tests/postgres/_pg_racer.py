"""A child process that races for runs on command, for the PostgreSQL race tests.

Usage: ``python tests/postgres/_pg_racer.py URL HOST_ID [--lazy]``

It opens the store at URL (unless ``--lazy``) on a ``ManualClock`` as owner
``OwnerId(HOST_ID, <its pid>, "racer")``, prints ``{"ready": pid}``, and then
answers one JSON line for every JSON command line on stdin, as fast as it
can (the parent sends the same command to every racer at once); a command's
``now_ms`` moves the racer's clock forward to it first:

- ``{"op": "claim_and_own", "run_id", "now_ms"}``: claim and activate the run
  from the ``pending`` snapshot;
- ``{"op": "steal", "run_id", "now_ms", "owner": [host, pid, nonce],
  "heartbeat_at_ms"}``: steal the run from that owner with
  ``cross-host-unreachable-stale`` evidence;
- ``{"op": "open_url", "url", "migrate": true}``: open (and close) a store
  on that URL, migrating it if it needs it and ``migrate`` allows (the
  migration race);
- ``{"op": "exit"}``.

Each answer is ``{"outcome": "<class name>"}``, or ``{"error": code,
"reason": ...}`` when the call raised a ``RunStoreError``.
"""

from __future__ import annotations

import json
import os
import sys

import runstore
from runstore import LivenessEvidence, ManualClock, OwnerId, RunSnapshot, RunStoreError


def main(argv: list[str]) -> int:
    url, host_id = argv[1], argv[2]
    me = OwnerId(host_id, os.getpid(), "racer")
    clock = ManualClock(0)
    store = None
    if "--lazy" not in argv:
        store = runstore.open(url, clock=clock)
    print(json.dumps({"ready": os.getpid()}), flush=True)
    for line in sys.stdin:
        command = json.loads(line)
        op = command["op"]
        if op == "exit":
            break
        if "now_ms" in command and command["now_ms"] > clock.now_ms():
            clock.set(command["now_ms"])
        try:
            if op == "open_url":
                migrate = command.get("migrate", True)
                runstore.open(command["url"], clock=ManualClock(0), migrate=migrate).close()
                outcome: object = "opened"
            elif op == "claim_and_own":
                assert store is not None
                pending = RunSnapshot("pending", None, None)
                outcome = store.claim_and_own(command["run_id"], pending, me, command["now_ms"])
            elif op == "steal":
                assert store is not None
                victim = OwnerId(*command["owner"])
                now = command["now_ms"]
                expected = RunSnapshot("running", victim, command["heartbeat_at_ms"])
                evidence = LivenessEvidence(victim, now, "cross-host-unreachable-stale")
                outcome = store.steal(command["run_id"], expected, me, now, evidence)
            else:
                raise AssertionError(f"unknown op {op!r}")
        except RunStoreError as error:
            cause = error.cause
            print(
                json.dumps(
                    {"error": error.code, "reason": cause.get("reason") or cause.get("stage")}
                )
            )
        else:
            name = outcome if isinstance(outcome, str) else type(outcome).__name__
            print(json.dumps({"outcome": name}), flush=True)
        sys.stdout.flush()
    if store is not None:
        store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
