"""Handlers for ``runstore worker`` processes started by the tests
(``tests/worker/test_worker_fleet_processes.py``, ``tests/cli/test_worker_cli.py``).

They run in the worker process and wait on the clock file the test moves
(``FileClock``, named by ``CLOCK_VARIABLE`` in the environment), so a run
stays in flight until the test has moved time on: never on real time.
"""

from __future__ import annotations

import json
import os

from runstore.cli._clocks import FileClock
from runstore.worker import AsyncJob, Job

#: The environment variable naming the clock file the handlers wait on.
CLOCK_VARIABLE = "RUNSTORE_TEST_CLOCK_FILE"
#: How many checkpoints ``checkpoints`` writes, and how far apart on the clock.
STEPS = 3
STEP_MS = 250

_clock: FileClock | None = None


def clock() -> FileClock:
    """The shared clock of this process (opened once)."""
    global _clock
    if _clock is None:
        _clock = FileClock(os.environ[CLOCK_VARIABLE])
    return _clock


def checkpoints(job: Job) -> str:
    """Checkpoint ``STEPS`` times, ``STEP_MS`` apart on the shared clock, resuming
    from the last checkpoint after a takeover; return the state marked done."""
    state = json.loads(job.state_json)
    step = state.get("step", 0)
    while step < STEPS:
        clock().sleep_until(clock().now_ms() + STEP_MS)
        step += 1
        state["step"] = step
        job.checkpoint(json.dumps(state))
    state["done"] = True
    return json.dumps(state)


def at_once(job: Job) -> str:
    """Complete the run with its state as it is."""
    return job.state_json


def until_lost(job: Job) -> str:
    """Never return on its own: checkpoint once, then wait on the clock until the
    run is lost (suspended at the end of the grace, or taken over), and try one
    more checkpoint, which the fence refuses."""
    job.checkpoint(json.dumps({"holding": True}))
    while not job.lost:
        clock().sleep_until(clock().now_ms() + 100)
    job.checkpoint(json.dumps({"late": True}))
    return json.dumps({"unreachable": True})


async def at_once_async(job: AsyncJob) -> str:
    """``at_once`` as a coroutine function: ``runstore worker`` runs it under AsyncWorker."""
    return job.state_json


async def until_lost_async(job: AsyncJob) -> str:
    """``until_lost`` as a coroutine function: checkpoint once, then wait on the clock
    until the worker cancels the task (the grace ran out, or the run was lost)."""
    await job.checkpoint(json.dumps({"holding": True}))
    while True:
        await clock().asleep_until(clock().now_ms() + 100)
