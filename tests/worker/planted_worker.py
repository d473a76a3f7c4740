"""``runstore worker`` with a bug planted in the worker, to show that the fleet
tests catch it (``tests/worker/test_worker_fleet_processes.py``).

Run as ``python -m tests.worker.planted_worker worker MODULE:HANDLER ...`` with
``RUNSTORE_TEST_PLANT`` naming the bug:

- ``zombie_settles``: a worker that ignores the fence. A refused checkpoint
  is not reported, a lost lease is not noticed, and a refused completion, or
  a run found lost, is logged as ``settled completed`` all the same: a
  frozen worker that wakes up claims to have finished runs its peers
  finished (the store refuses every one of its writes).
- ``slow_scans``: a worker that looks for stale runs once a minute instead
  of once per heartbeat interval: takeovers come late.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from runstore.cli import main
from runstore.worker import _job, _worker

#: The environment variable naming the planted bug.
PLANT_VARIABLE = "RUNSTORE_TEST_PLANT"


def zombie_settles() -> None:
    def checkpoint(self: Any, state_json: str) -> None:
        self._store.transition_owned(self.run_id, self.owner, "running", state_json)
        self.state_json = state_json

    def complete(self: Any, held: Any, result: object) -> None:
        job = held.job
        self._store.transition_owned(job.run_id, self._owner, "completed", result)
        self._emit("settled", job.run_id, status="completed")

    def lose(self: Any, held: Any, reason: str) -> None:
        complete(self, held, held.job.state_json)

    _job.Job.checkpoint = checkpoint  # type: ignore[method-assign]
    _worker.Worker._lose = lose  # type: ignore[method-assign]
    _worker.Worker._on_lost = lambda self, error: None  # type: ignore[method-assign]
    _worker.Worker._complete = complete  # type: ignore[method-assign]


def slow_scans() -> None:
    init = _worker.Worker.__init__

    def slow(self: Any, *args: Any, **options: Any) -> None:
        options["scan_interval_ms"] = 60_000
        init(self, *args, **options)

    _worker.Worker.__init__ = slow  # type: ignore[method-assign]


PLANTS = {"zombie_settles": zombie_settles, "slow_scans": slow_scans}

if __name__ == "__main__":
    PLANTS[os.environ[PLANT_VARIABLE]]()
    raise SystemExit(main(sys.argv[1:]))
