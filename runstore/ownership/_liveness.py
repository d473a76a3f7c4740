"""Liveness: deciding, with evidence, that a recorded owner is gone.

A stale heartbeat says an owner stopped writing, not that it stopped working.
Before a peer takes a run over it asks a ``LivenessCheck`` whether the recorded
owner is still alive; when the answer is no, ``takeover_evidence`` turns that
answer into the ``LivenessEvidence`` the store verifies. The store itself never
probes anything: it checks that the evidence names the snapshot's owner, was
taken at the consuming call's ``now_ms`` exactly, and has a kind that fits the
host relation, and it still requires the heartbeat to be stale.
"""

from __future__ import annotations

import os
import sys
from typing import Protocol

import attrs

from .._constants import HEARTBEAT_STALE_AFTER_MS, MAX_SAFE_INTEGER
from .._values import LivenessEvidence, OwnerId, RunRow, RunSnapshot


@attrs.frozen
class LivenessContext:
    """What a ``LivenessCheck`` is told besides the owner it asks about.

    ``claimant`` is the process that wants the run, ``heartbeat_at_ms`` the
    persisted heartbeat (``None`` when the run has none) and ``now_ms`` the
    reading the takeover will be made against.
    """

    claimant: OwnerId
    """The process that wants the run."""
    heartbeat_at_ms: int | None
    """The run's persisted heartbeat, or ``None`` when it has none."""
    now_ms: int
    """The reading the takeover will be made against."""


class LivenessCheck(Protocol):
    """Is the recorded owner still working? ``True`` means alive: refuse the takeover.

    A check must fail closed: any answer it cannot be sure of is ``True``.
    """

    def __call__(self, expected_owner: OwnerId, context: LivenessContext, /) -> bool: ...


class LivenessProbe(Protocol):
    """An evidence factory: given the owner to replace, the claimant and the
    instant of the consuming call, produce ``LivenessEvidence`` or ``None``
    (no evidence: leave the owner alone)."""

    def __call__(
        self, expected_owner: OwnerId, claimant: OwnerId, checked_at_ms: int, /
    ) -> LivenessEvidence | None: ...


def lease_liveness(stale_after_ms: int = HEARTBEAT_STALE_AFTER_MS) -> LivenessCheck:
    """A check that trusts only the lease: the owner is alive while its persisted
    heartbeat is at most ``stale_after_ms`` old (exactly that old is alive).

    It is the weakest answer and the one every host can give: it expires on its
    own, so even a process that has nothing else to ask can reclaim the runs of
    an owner that was killed, once their leases are stale. A run with no
    heartbeat has no lease to be alive on.
    """
    if type(stale_after_ms) is not int or stale_after_ms < 0:
        raise ValueError("stale_after_ms must be a non-negative int")

    def check(expected_owner: OwnerId, context: LivenessContext, /) -> bool:
        heartbeat = context.heartbeat_at_ms
        return heartbeat is not None and heartbeat >= context.now_ms - stale_after_ms

    check.__name__ = check.__qualname__ = f"lease_liveness({stale_after_ms})"
    return check


def same_host_pid_probe(expected_owner: OwnerId, context: LivenessContext, /) -> bool:
    """A check that asks the operating system whether ``expected_owner``'s pid
    exists, for the claimant ``context`` names. True means alive.

    - An owner on another host is never probed: the answer is ``False``, which
      proves nothing by itself and leaves the decision to the lease (the store
      still refuses a takeover while the heartbeat is fresh).
    - A pid that is not a positive integer up to ``2**53 - 1`` is alive.
    - ``os.kill(pid, 0)`` sends no signal. If it returns, the process exists:
      alive. ``ProcessLookupError`` is the only answer that means dead; every
      other failure (``PermissionError``, an out-of-range pid, ...) is alive,
      because an answer we do not understand is not death.
    - On Windows ``os.kill`` would terminate the process, so nothing is probed
      and every same-host owner is alive.

    Limits inherent to asking a pid: an owner recorded with the claimant's own
    pid (an earlier incarnation of this process, with another nonce) is always
    alive, because that pid is this process; a dead owner whose pid was reused
    by an unrelated process stays alive until that process ends, which delays
    reclaim without breaking it; and a child process that was killed but not
    yet reaped is a zombie whose pid still exists, so a supervisor of child
    processes must ``wait()`` for them before their runs can be reclaimed.
    Use ``lease_liveness`` with ``lease-expired`` evidence when those limits
    matter more than the probe.
    """
    if expected_owner.host_id != context.claimant.host_id:
        return False
    pid: object = expected_owner.pid
    if type(pid) is not int or not 0 < pid <= MAX_SAFE_INTEGER:
        return True
    if sys.platform == "win32":  # pragma: no cover - os.kill terminates on Windows
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except Exception:
        # EPERM, EINVAL, OverflowError for a pid beyond pid_t: not death.
        return True
    return True


def takeover_evidence(
    expected: RunSnapshot | RunRow,
    claimant: OwnerId,
    now_ms: int,
    *,
    check: LivenessCheck = same_host_pid_probe,
    lease_expired: bool = False,
) -> LivenessEvidence | None:
    """The evidence for ``claimant`` to take ``expected``'s owner's run, or ``None``.

    ``None`` when the snapshot has no owner (there is nobody to replace and no
    evidence is needed) or when ``check`` says the owner is alive. Otherwise the
    evidence names the snapshot's owner, is bound to ``now_ms`` (pass the same
    reading to the ``claim_and_own``, ``steal`` or ``recover_claim`` that
    consumes it; one millisecond later it is refused), and has the kind the
    host relation calls for: ``same-host-pid-dead`` when ``claimant`` shares
    the owner's host, ``cross-host-unreachable-stale`` when it does not. With
    ``lease_expired=True`` the kind is ``lease-expired``, which any host may
    present and which asserts only that the heartbeat is past the cutoff (pair
    it with ``check=lease_liveness()``; the store verifies the cutoff itself).
    """
    owner = expected.owner
    if owner is None:
        return None
    context = LivenessContext(claimant, expected.heartbeat_at_ms, now_ms)
    if check(owner, context):
        return None
    if lease_expired:
        return LivenessEvidence(owner, now_ms, "lease-expired")
    if owner.host_id == claimant.host_id:
        return LivenessEvidence(owner, now_ms, "same-host-pid-dead")
    return LivenessEvidence(owner, now_ms, "cross-host-unreachable-stale")
