"""What a handler is given (``Job``, ``AsyncJob``), what a worker reports
(``WorkerEvent``), and how an idle worker waits (``Wakeup``, ``PollingWakeup``)."""

from __future__ import annotations

import random
import threading
from typing import Any, Literal, Protocol, TypeAlias, runtime_checkable

import attrs

from .._outcomes import FenceLost, NotFound, Transitioned
from .._values import EvidenceKind, OwnerId, RunStatus
from ..ownership import LeaseLost

EventKind: TypeAlias = Literal["taken", "taken_over", "settled", "lost", "suspended"]
"""What happened to a run in a worker: ``taken`` (a claimable run was claimed),
``taken_over`` (a stale run was taken with evidence; a run whose claim was
abandoned is cleared with ``recover_claim`` and then ``taken``),
``settled`` (the worker wrote its end: ``completed``, ``failed`` or
``cancelled``), ``lost`` (the run belongs to someone else now; nothing was
written) and ``suspended`` (the worker ran out of grace and released it)."""


@attrs.frozen
class WorkerEvent:
    """One thing that happened to one run in a worker; see ``EventKind``.

    It never carries run state or an error's message: both may hold
    credentials.
    """

    kind: EventKind
    """What happened (``EventKind``)."""
    run_id: str
    """The run it happened to."""
    owner: OwnerId
    """The worker's own identity."""
    at_ms: int
    """When, by the worker's clock."""
    status: RunStatus | None = None
    """For ``settled``: the status written (``completed``, ``failed`` or ``cancelled``)."""
    evidence: EvidenceKind | None = None
    """For ``taken_over`` of a running run: the kind of liveness evidence presented."""
    previous_owner: OwnerId | None = None
    """For ``taken_over``: the owner (or stale claimant) that was replaced."""
    reason: str | None = None
    """Why, where there is more to say: ``handler_raised``, ``not_json``,
    ``handler_timeout``, ``too_many_takeovers``, ``cancel_requested``,
    ``lease_lost``, ``fence_lost`` (a settling write was refused),
    ``grace_expired`` and ``storage_failed`` (with ``lost``: a
    ``PersistenceFailedError`` reached the worker from the handler, a
    checkpoint's say; the run is not failed but left to its lease, and taken
    over once stale)."""
    error_type: str | None = None
    """For a failure: the qualified name of the exception's type (never its message)."""


@runtime_checkable
class Wakeup(Protocol):
    """How an idle worker waits for work: ``wait`` blocks for at most ``timeout_s``
    seconds and answers True when work may have appeared (a notification), False
    when the time ran out; ``close`` releases what it holds. PostgreSQL stores
    hand one out (``store.open_listener()``); ``PollingWakeup`` is the
    fallback."""

    def wait(self, timeout_s: float) -> bool:
        """Block up to ``timeout_s`` seconds; True when notified."""
        ...

    def close(self) -> None:
        """Release the wakeup's resources."""
        ...


class PollingWakeup:
    """A wakeup without notifications: ``wait`` sleeps out its timeout (or until
    ``notify`` is called, from any thread) and the worker polls with jittered
    backoff between ``wait`` calls."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def wait(self, timeout_s: float) -> bool:
        """Sleep up to ``timeout_s`` seconds (a float); True only when ``notify``
        was called meanwhile."""
        notified = self._event.wait(max(0.0, timeout_s))
        self._event.clear()
        return notified

    def notify(self) -> None:
        """Wake the waiter now."""
        self._event.set()

    def close(self) -> None:
        """Wake any waiter; nothing else to release."""
        self._event.set()


def backoff_s(previous_s: float, floor_s: float, ceiling_s: float, rng: random.Random) -> float:
    """The next idle wait: double the previous, between ``floor_s`` and
    ``ceiling_s``, with a random part so that idle workers do not poll in step."""
    base = min(ceiling_s, max(floor_s, previous_s * 2))
    return base * (0.5 + rng.random() / 2)


class _JobBase:
    """What both kinds of job hold: the run, the worker's owner, the state, how the run
    was taken, and whether it is still the worker's."""

    __slots__ = ("_lost", "_store", "owner", "run_id", "state_json", "taken_at_ms", "takeover")

    def __init__(
        self,
        store: Any,
        run_id: str,
        owner: OwnerId,
        state_json: str,
        takeover: str | None,
        taken_at_ms: int,
    ) -> None:
        self._store = store
        self._lost = threading.Event()
        self.run_id = run_id
        """The run's id."""
        self.owner = owner
        """The worker's ``OwnerId``: the owner of record while the job runs."""
        self.state_json = state_json
        """The run's state: as taken, then as last checkpointed."""
        self.takeover = takeover
        """``None`` for a claimable run; the evidence kind for a takeover; ``"own_stale"``
        for this worker's own stale run taken back."""
        self.taken_at_ms = taken_at_ms
        """When the worker took the run, by its clock."""

    def _refused(self) -> LeaseLost:
        return LeaseLost(run_id=self.run_id, reason="fence_lost", outcome=FenceLost())

    def _checkpointed(self, state_json: str, outcome: object) -> None:
        """Record a checkpoint's answer: the new state, or the run lost (``LeaseLost``)."""
        if isinstance(outcome, Transitioned):
            self.state_json = state_json
            return
        assert isinstance(outcome, FenceLost | NotFound)
        self._lost.set()
        raise LeaseLost(run_id=self.run_id, reason="fence_lost", outcome=outcome)

    @property
    def lost(self) -> bool:
        """True once the worker knows the run is no longer its own (another owner,
        a lapsed lease, or the worker suspended it at the end of its grace)."""
        return self._lost.is_set()

    def check(self) -> None:
        """Raise ``LeaseLost`` when ``lost`` is true; return otherwise."""
        if self._lost.is_set():
            raise self._refused()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(run_id={self.run_id!r}, owner={self.owner!r}, "
            f"takeover={self.takeover!r})"
        )


class Job(_JobBase):
    """One run a worker holds, as its handler sees it.

    ``Job(store, run_id, owner, state_json, takeover, taken_at_ms)`` is built by
    the worker: ``store`` is the run store, ``run_id`` the run, ``owner`` the
    worker's ``OwnerId``, ``state_json`` the state when the run was taken (then
    the last checkpoint), ``takeover`` ``None`` for a claimable run, the evidence
    kind for a run taken over from another owner and ``"own_stale"`` for this
    worker's own stale run taken back, and ``taken_at_ms`` when the worker took
    it, by its clock; all but ``store`` are plain attributes.

    ``checkpoint`` saves progress under the fence; ``cancel_requested`` reads
    whether someone asked to cancel the run; ``lost`` and ``check()`` tell
    whether the run still belongs to this worker.

    The repr never shows the state.
    """

    __slots__ = ()

    def checkpoint(self, state_json: str) -> None:
        """Save ``state_json`` (JSON text) as the run's state, keeping it ``running``:
        a fenced ``transition_owned``. Raises ``LeaseLost`` (``reason="fence_lost"``)
        when this worker no longer owns the run; nothing is written then. A value
        that is not JSON text raises ``InvalidRunError`` and writes nothing."""
        if self._lost.is_set():
            raise self._refused()
        outcome = self._store.transition_owned(self.run_id, self.owner, "running", state_json)
        self._checkpointed(state_json, outcome)

    @property
    def cancel_requested(self) -> bool:
        """True when cancellation of the run has been requested (read from the store
        on every access). The worker does not interrupt a handler for it: a handler
        that can stop early checks this, and its return then settles the run
        ``cancelled``."""
        row = self._store.get(self.run_id)
        return row.cancel_requested_at_ms is not None


class AsyncJob(_JobBase):
    """One run an ``AsyncWorker`` holds, as its handler (a coroutine function) sees it.

    The same attributes as ``Job`` (``run_id``, ``owner``, ``state_json``,
    ``takeover``, ``taken_at_ms``, ``lost``, ``check()``); what reads or writes the
    store is a coroutine: ``await job.checkpoint(state_json)`` and ``await
    job.cancel_requested()``. When the run's lease is lost the handler's task is
    cancelled (let the ``CancelledError`` propagate).

    The repr never shows the state.
    """

    __slots__ = ()

    async def checkpoint(self, state_json: str) -> None:
        """``Job.checkpoint``, awaited: save ``state_json`` under the fence, or raise
        ``LeaseLost`` (nothing written) when the run is no longer this worker's."""
        if self._lost.is_set():
            raise self._refused()
        outcome = await self._store.transition_owned(self.run_id, self.owner, "running", state_json)
        self._checkpointed(state_json, outcome)

    async def cancel_requested(self) -> bool:
        """True when cancellation of the run has been requested (read from the store
        on every call); see ``Job.cancel_requested``."""
        row = await self._store.get(self.run_id)
        return row.cancel_requested_at_ms is not None
