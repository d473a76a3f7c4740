"""The reference worker: ``runstore.worker.Worker`` finds runs, keeps their
leases, runs a handler on each, and settles each run under the fence.

An engine brings the handler, a function of one ``Job``; the worker brings
the part where fencing bugs are born:

- **Finding work.** Claimable runs (pending or suspended, unclaimed) through
  ``claim_next`` (``claim_next_many`` when it holds more than one free slot).
  Once per heartbeat interval on its clock it also looks for stale
  ``running`` runs (``list_runs(stale_at=...)``) and abandoned claims
  (``list_runs(claim_stale_at=...)``) and takes them over with liveness
  evidence, never without: on its own host the pid probe (``same-host-pid-dead``)
  or, when the pid still exists (a frozen process, a reused pid), the lease
  (``lease-expired``); on another host the lease (``cross-host-unreachable-stale``).
  The store still requires the heartbeat to be stale in every case.
- **Holding work.** Every held run is kept alive by one fleet supervisor
  (``runstore.ownership.supervise_many``): one ``heartbeat_many`` per pulse.
- **Endings.** The handler returns JSON text: the run completes with it,
  guarded on no cancellation request; if one came, the worker acknowledges it
  and settles the run ``cancelled`` with that text. The handler raises, or
  returns something that is not JSON text: the run settles ``failed`` and
  keeps its last checkpoint; the error's type and the place it was raised
  (never its message) go into an attempt record (step ``runstore.worker``)
  where the store keeps attempts. A ``PersistenceFailedError`` (storage
  failed under the handler, in a checkpoint say) is not the handler's fault:
  the run is left to its lease, keeping its last durable state, and taken
  over once stale (retrying at once would spin on a failure that lasts).
  ``LeaseLost`` or a refused write means the run belongs to someone else:
  nothing is written and the worker moves on. A
  run taken over more than ``max_takeovers`` times (its ``stolen`` ownership
  facts) is settled ``failed`` without running the handler again.
- **Stopping.** ``stop(grace_s)`` (or SIGTERM/SIGINT after
  ``install_signal_handlers``) stops taking work; held runs get the grace to
  finish and are then suspended (a fenced write), so that a peer takes them
  at once; a handler still running after that has every later write refused.
- **Waking up.** On PostgreSQL the store's listener (LISTEN/NOTIFY) wakes an
  idle worker when a run becomes claimable; polling with jittered backoff
  covers a lost notification, and is all there is on SQLite.

Time (leases, scans, grace, timeouts) is read only through the injected
``Clock``; the idle waits between polls are real time.

**asyncio.** ``AsyncWorker(store, handler, ...)`` is the same worker on an
asyncio store (``runstore.aopen``'s ``AsyncRunStore``), with ``await
worker.run()`` and ``await worker.stop(grace_s)``; ``handler`` is a coroutine
function given an ``AsyncJob`` (``await job.checkpoint(...)``, ``await
job.cancel_requested()``). Its handlers are tasks on one loop, at most
``concurrency`` of them; the fleet supervisor runs on that loop too
(``async with supervise_many(...)``) and awaits the store's coroutines there.
A lost lease cancels the handler's task; so do a handler timeout and the end
of the grace, after the worker has written the run's end. Both workers make
the same decisions from the same code (``_steps``: each is a sequence of store
calls that ``Worker`` runs and ``AsyncWorker`` awaits).

May import: ``runstore.ownership``, ``runstore.aio`` (an asyncio store's
attempt store), ``runstore.attempts``, ``runstore.consensus`` and the core
modules of ``runstore``; never a backend (a store's listener is found on the
store).
"""

from ._async import AsyncWorker as AsyncWorker
from ._job import AsyncJob as AsyncJob
from ._job import EventKind as EventKind
from ._job import Job as Job
from ._job import PollingWakeup as PollingWakeup
from ._job import Wakeup as Wakeup
from ._job import WorkerEvent as WorkerEvent
from ._steps import ATTEMPT_STEP as ATTEMPT_STEP
from ._worker import Worker as Worker

__all__ = [
    "ATTEMPT_STEP",
    "AsyncJob",
    "AsyncWorker",
    "EventKind",
    "Job",
    "PollingWakeup",
    "Wakeup",
    "Worker",
    "WorkerEvent",
]
