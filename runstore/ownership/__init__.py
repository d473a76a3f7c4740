"""Owning a run for real: keeping its lease alive, and taking it over with evidence.

A store is half of ownership. This module is the other half:

- the owner's side, ``supervise`` (threads) and ``asupervise`` (asyncio):
  heartbeat the lease every ``HEARTBEAT_INTERVAL_MS`` while the owned work
  runs, tolerate failing writes for ``HEARTBEAT_WRITE_TOLERANCE_MS``, and
  interrupt the work with ``LeaseLost`` the moment the fence is gone or the
  lease lapses; ``supervise_many`` (a ``Fleet``) does the same for many runs
  of one owner with one ``heartbeat_many`` per pulse;
- the peer's side, ``LivenessCheck``/``LivenessProbe``, ``lease_liveness``,
  ``same_host_pid_probe`` and ``takeover_evidence``: decide that a recorded
  owner is gone and produce the ``LivenessEvidence`` the store verifies before
  it admits a takeover.

Time is read only through the injected ``Clock``: drive a ``ManualClock`` in
tests and nothing here sleeps in wall time.

May import: ``runstore.consensus`` and the core modules of ``runstore`` (it
works on any store through the ``RunStore`` protocol); never a backend.
"""

from .._constants import HEARTBEAT_INTERVAL_MS as HEARTBEAT_INTERVAL_MS
from .._constants import HEARTBEAT_SKEW_ALLOWANCE_MS as HEARTBEAT_SKEW_ALLOWANCE_MS
from .._constants import HEARTBEAT_STALE_AFTER_MS as HEARTBEAT_STALE_AFTER_MS
from .._constants import HEARTBEAT_WRITE_TOLERANCE_MS as HEARTBEAT_WRITE_TOLERANCE_MS
from .._values import LivenessEvidence as LivenessEvidence
from .._values import OwnerId as OwnerId
from ._core import LeaseLost as LeaseLost
from ._core import Supervision as Supervision
from ._faces import AsyncSupervisor as AsyncSupervisor
from ._faces import ThreadSupervisor as ThreadSupervisor
from ._faces import asupervise as asupervise
from ._faces import supervise as supervise
from ._fleet import Fleet as Fleet
from ._fleet import supervise_many as supervise_many
from ._liveness import LivenessCheck as LivenessCheck
from ._liveness import LivenessContext as LivenessContext
from ._liveness import LivenessProbe as LivenessProbe
from ._liveness import lease_liveness as lease_liveness
from ._liveness import same_host_pid_probe as same_host_pid_probe
from ._liveness import takeover_evidence as takeover_evidence

__all__ = [
    "HEARTBEAT_INTERVAL_MS",
    "HEARTBEAT_SKEW_ALLOWANCE_MS",
    "HEARTBEAT_STALE_AFTER_MS",
    "HEARTBEAT_WRITE_TOLERANCE_MS",
    "AsyncSupervisor",
    "Fleet",
    "LeaseLost",
    "LivenessCheck",
    "LivenessContext",
    "LivenessEvidence",
    "LivenessProbe",
    "OwnerId",
    "Supervision",
    "ThreadSupervisor",
    "asupervise",
    "lease_liveness",
    "same_host_pid_probe",
    "supervise",
    "supervise_many",
    "takeover_evidence",
]
