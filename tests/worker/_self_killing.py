"""A worker process whose handler kills its own process (SIGKILL) every time.

Run as ``python _self_killing.py DB NOW_MS MAX_TAKEOVERS``: it opens the SQLite
file on a ``ManualClock`` standing at ``NOW_MS``, takes work (a claimable run,
or a stale one taken over with evidence), and exits 0 once it has settled a
run (it prints the event) or, with nothing to take, after its first look.
"""

from __future__ import annotations

import os
import signal
import sys

import runstore
from runstore.worker import Job, Worker, WorkerEvent


def main() -> None:
    path, now_ms, max_takeovers = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    clock = runstore.ManualClock(now_ms)
    with runstore.open(path, clock=clock) as store:

        def handler(job: Job) -> str:
            job.checkpoint('{"about_to": "die"}')
            os.kill(os.getpid(), signal.SIGKILL)
            raise AssertionError("unreachable")

        worker: Worker

        def on_event(event: WorkerEvent) -> None:
            print(event.kind, event.run_id, event.status, event.reason, event.evidence, flush=True)
            if event.kind == "settled":
                worker.stop(0)

        worker = Worker(
            store,
            handler,
            host_id="host-k",
            clock=clock,
            max_takeovers=max_takeovers,
            on_event=on_event,
            poll_interval_s=0.05,
        )
        worker.run()


if __name__ == "__main__":
    main()
