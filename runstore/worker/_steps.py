"""The worker's decisions, written once for ``Worker`` (threads) and ``AsyncWorker`` (asyncio).

What a worker decides does not depend on how it waits for the store. Each
decision that needs the store is a generator that yields ``Call``s (which
operation, on which target, with which arguments) and receives their answers;
it holds no connection and never blocks. ``run_steps`` answers the calls on a
blocking store, ``arun_steps`` awaits them on an asyncio store. A call that
raises has its error thrown back into the generator at the ``yield``, so the
steps handle errors as straight-line code would, and an error they do not
handle leaves the driver as it would leave a direct call.

Targets: ``"store"`` (the run store), ``"attempts"`` (its attempt store, for a
failure's record) and ``"worker"`` (the worker itself, for what only it can do:
start a run it took over).

Here are: the evidence policy of a takeover (``evidence_for``), finding work
(``claim_steps``, ``scan_steps``, ``recover_claim_steps``, ``take_over_steps``),
preparing a run (``state_steps``, ``too_many_takeovers_steps``), the verdict on
a handler's ending (``verdict``), and each run's end under the fence
(``complete_steps``, ``fail_steps``, ``suspend_steps``), with what to report
(``Ending``).

May import: ``runstore.ownership`` (the liveness probes), ``runstore.attempts``
(an attempt record) and the core modules; it holds no store and no thread.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Generator
from typing import Any, Literal, TypeAlias, TypeVar

import attrs

from .._boundary import admit_state
from .._clock import Clock
from .._errors import InvalidRunError, PersistenceFailedError
from .._outcomes import Activated, GuardFailed, Recovered, Transitioned
from .._values import LivenessEvidence, OwnerId, RunRow, TransitionGuard
from ..ownership import LeaseLost, LivenessContext, lease_liveness, same_host_pid_probe

logger = logging.getLogger("runstore.worker")

R = TypeVar("R")

ATTEMPT_STEP = "runstore.worker"
"""The ``step_key_digest`` of the attempt record a worker writes when a handler fails:
one attempt per execution, numbered by the run's activations."""

COMPLETE_GUARD = TransitionGuard(cancel_requested="absent")

Target: TypeAlias = Literal["store", "attempts", "worker"]


@attrs.frozen
class Call:
    """One call a step wants made: ``getattr(target, method)(*args, **kwargs)``."""

    target: Target
    method: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = attrs.field(factory=dict)


def store(method: str, *args: Any, **kwargs: Any) -> Call:
    """A call on the run store."""
    return Call("store", method, args, kwargs)


Steps: TypeAlias = Generator[Call, Any, R]


def run_steps(steps: Steps[R], targets: dict[str, Any]) -> R:
    """Run ``steps`` to their end, answering each call on a blocking target."""
    try:
        call = next(steps)
        while True:
            try:
                answer = getattr(targets[call.target], call.method)(*call.args, **call.kwargs)
            except Exception as error:
                call = steps.throw(error)
            else:
                call = steps.send(answer)
    except StopIteration as done:
        result: R = done.value
        return result
    finally:
        steps.close()


async def arun_steps(steps: Steps[R], targets: dict[str, Any]) -> R:
    """Run ``steps`` to their end, awaiting each call on an asyncio target (its
    operations are coroutine functions). A cancellation closes the steps."""
    try:
        call = next(steps)
        while True:
            try:
                answer = await getattr(targets[call.target], call.method)(*call.args, **call.kwargs)
            except Exception as error:
                call = steps.throw(error)
            else:
                call = steps.send(answer)
    except StopIteration as done:
        result: R = done.value
        return result
    finally:
        steps.close()


# -- what to report -------------------------------------------------------------------


@attrs.frozen
class Ending:
    """How a run's end went: ``settled`` (with the status written), ``suspended``, or
    ``lost`` (the run is someone else's; nothing was written); ``reason`` and
    ``error_type`` as ``WorkerEvent``'s."""

    kind: Literal["settled", "suspended", "lost"]
    status: str | None = None
    reason: str | None = None
    error_type: str | None = None


def type_name(error: BaseException) -> str:
    """The qualified name of ``error``'s type (never its message)."""
    kind = type(error)
    module = kind.__module__
    return kind.__qualname__ if module == "builtins" else f"{module}.{kind.__qualname__}"


def site(error: BaseException) -> dict[str, Any] | None:
    """Where ``error`` was raised: the innermost frame of its traceback."""
    frames = traceback.extract_tb(error.__traceback__)
    if not frames:
        return None
    last = frames[-1]
    return {"file": last.filename, "line": last.lineno, "function": last.name}


# -- finding work ---------------------------------------------------------------------


def evidence_for(
    me: OwnerId, owner: OwnerId, heartbeat_at_ms: int | None, now: int
) -> LivenessEvidence | None:
    """Evidence that ``owner`` is gone, or None. Same host: the pid probe (a dead
    pid), else the lease (a frozen or reused pid must not strand its runs);
    another host: the lease past staleness. The store checks staleness itself."""
    context = LivenessContext(me, heartbeat_at_ms, now)
    if owner.host_id == me.host_id:
        if not same_host_pid_probe(owner, context):
            return LivenessEvidence(owner, now, "same-host-pid-dead")
        if not lease_liveness()(owner, context):
            return LivenessEvidence(owner, now, "lease-expired")
        return None
    if lease_liveness()(owner, context):
        return None
    return LivenessEvidence(owner, now, "cross-host-unreachable-stale")


def claim_steps(me: OwnerId, now: int, free: int, *, can_batch: bool) -> Steps[list[RunRow]]:
    """Claim up to ``free`` claimable runs: one ``claim_next_many`` when the store
    has it and more than one slot is free, else one ``claim_next``."""
    if can_batch and free > 1:
        rows = yield store("claim_next_many", me, now, free)
        return list(rows)
    row = yield store("claim_next", me, now)
    return [] if row is None else [row]


def recover_claim_steps(row: RunRow, me: OwnerId, now: int) -> Steps[None]:
    """Clear a claim whose claimant is gone (with evidence), so its run becomes claimable."""
    claimant, token = row.claim, row.claimed_at_ms
    if claimant is None or token is None or claimant == me:
        return
    evidence = evidence_for(me, claimant, token, now)
    if evidence is None:
        return
    outcome = yield store("recover_claim", row.run_id, claimant, token, me, now, evidence)
    if isinstance(outcome, Recovered):
        logger.info(
            "recovered an abandoned claim on %s (evidence %s)",
            row.run_id,
            evidence.kind,
            extra={"run_id": row.run_id, "evidence": evidence.kind},
        )


def scan_steps(me: OwnerId, now: int, free: int) -> Steps[tuple[int, bool]]:
    """Look for stale work: abandoned claims first (clearing one makes its run
    claimable), then stale running runs, each offered to the worker's
    ``_take_over(row, now)`` (True when it took and started the run). Returns how
    many it took, and whether more stale runs wait than there were free slots
    (then the next slot that frees scans again before it takes new work)."""
    limit = min(1000, max(10, free))
    page = yield store("list_runs", claim_stale_at=now, limit=limit)
    for row in page.runs:
        yield from recover_claim_steps(row, me, now)
    page = yield store("list_runs", stale_at=now, limit=limit)
    taken = 0
    for row in page.runs:
        if taken >= free:
            return taken, True
        if (yield Call("worker", "_take_over", (row, now))):
            taken += 1
    return taken, False


def take_over_steps(
    row: RunRow, me: OwnerId, now: int
) -> Steps[tuple[RunRow, str, OwnerId] | None]:
    """Take a stale running run: with evidence from another owner, without from this
    worker's own (the worker has checked that nothing of its own still holds it).
    Returns (the run as taken, the takeover kind: the evidence kind or
    ``"own_stale"``, the previous owner), or None when it was not taken."""
    previous = row.owner
    if previous is None:
        return None
    evidence = None
    if previous != me:
        evidence = evidence_for(me, previous, row.heartbeat_at_ms, now)
        if evidence is None:
            return None
    outcome = yield store("claim_and_own", row.run_id, row, me, now, evidence)
    if not isinstance(outcome, Activated):
        return None
    taken = yield store("get", row.run_id)
    return taken, (evidence.kind if evidence is not None else "own_stale"), previous


# -- holding work ---------------------------------------------------------------------


def state_steps(row: RunRow) -> Steps[str]:
    """The run's state: the row's own, or read when the row came without it."""
    if row.state_json is not None:
        return row.state_json
    full = yield store("get", row.run_id)
    text: str = full.state_json
    return text


def too_many_takeovers_steps(run_id: str, max_takeovers: int) -> Steps[bool]:
    """Whether the run was taken over (its ``stolen`` facts) more than ``max_takeovers`` times."""
    facts = yield store("ownership_facts", run_id)
    return sum(1 for fact in facts if fact.transition == "stolen") > max_takeovers


@attrs.frozen
class Verdict:
    """What to do once a handler ended: ``complete`` with its result, ``fail`` the
    run (``reason``), ``lose`` it (``reason``: say so, write nothing), or
    ``nothing`` (the worker itself already ended the run)."""

    action: Literal["complete", "fail", "lose", "nothing"]
    reason: str | None = None


def verdict(error: BaseException | None, *, ended_by_worker: bool, lost: bool) -> Verdict:
    """The verdict on a handler that returned (``error`` None) or raised ``error``.

    ``LeaseLost`` or a run known lost: the run is someone else's. A
    ``PersistenceFailedError`` (storage failed under the handler, in a
    checkpoint say) is not the handler's fault: the run is left to its lease,
    keeping its last durable state, and taken over once stale (retrying at
    once would spin on a failure that lasts). Any other error fails the run.
    """
    if error is None:
        if ended_by_worker:
            return Verdict("nothing")
        if lost:
            return Verdict("lose", "lease_lost")
        return Verdict("complete")
    if isinstance(error, LeaseLost):
        return Verdict("lose", "lease_lost")
    if isinstance(error, PersistenceFailedError):
        return Verdict("lose", "lease_lost" if ended_by_worker else "storage_failed")
    if not ended_by_worker and not lost:
        return Verdict("fail", "handler_raised")
    return Verdict("lose", "lease_lost")


# -- endings ----------------------------------------------------------------------------


def complete_steps(
    job: Any, me: OwnerId, result: object, clock: Clock, *, attempts: bool
) -> Steps[Ending]:
    """Settle ``completed`` with the handler's result, guarded on no cancellation
    request; if one came, acknowledge it and settle ``cancelled`` with that text.
    A result that is not JSON text fails the run instead (``not_json``)."""
    try:
        text = admit_state("Worker", result)
    except InvalidRunError:
        return (
            yield from fail_steps(
                job, me, clock, reason="not_json", error=None, returned=result, attempts=attempts
            )
        )
    outcome = yield store("transition_owned", job.run_id, me, "completed", text, COMPLETE_GUARD)
    if isinstance(outcome, Transitioned):
        return Ending("settled", "completed")
    if isinstance(outcome, GuardFailed):
        yield store("acknowledge_cancel", job.run_id, me, clock.now_ms())
        outcome = yield store("transition_owned", job.run_id, me, "cancelled", text)
        if isinstance(outcome, Transitioned):
            return Ending("settled", "cancelled", reason="cancel_requested")
    return Ending("lost", reason="fence_lost")


def failure_record(
    reason: str, error: BaseException | None, returned: object
) -> tuple[str, dict[str, Any]]:
    """A failure's error type and attempt record: the type and site of an error,
    never its message."""
    if error is not None:
        error_type = type_name(error)
        record: dict[str, Any] = {"type": error_type, "site": site(error)}
    elif reason == "not_json":
        error_type = "runstore.worker.NotJsonText"
        record = {"type": error_type, "returned": type(returned).__qualname__}
    else:
        error_type = f"runstore.worker.{reason}"
        record = {"type": error_type}
    record["reason"] = reason
    return error_type, record


def fail_steps(
    job: Any,
    me: OwnerId,
    clock: Clock,
    *,
    reason: str,
    error: BaseException | None,
    returned: object = None,
    attempts: bool,
) -> Steps[Ending]:
    """Settle ``failed`` keeping the last checkpoint, after the attempt record
    (when ``attempts``: the worker has an attempt store)."""
    error_type, record = failure_record(reason, error, returned)
    if attempts:
        yield from attempt_steps(job, me, record, clock)
    outcome = yield store("transition_owned", job.run_id, me, "failed")
    if isinstance(outcome, Transitioned):
        return Ending("settled", "failed", reason=reason, error_type=error_type)
    return Ending("lost", reason="fence_lost")


def attempt_steps(job: Any, me: OwnerId, record: dict[str, Any], clock: Clock) -> Steps[None]:
    """Write the attempt record of a failed execution; a failure to write it is
    logged (the type only) and the run still settles."""
    from ..attempts import Attempt

    try:
        facts = yield store("ownership_facts", job.run_id)
        number = sum(1 for fact in facts if fact.transition == "activated")
        attempt = Attempt(
            job.run_id,
            ATTEMPT_STEP,
            number,
            "failed",
            job.taken_at_ms,
            finished_at_ms=clock.now_ms(),
            error=record,
            meta={
                "owner": {"host_id": me.host_id, "pid": me.pid, "nonce": me.nonce},
                "takeover": job.takeover,
            },
        )
        yield Call("attempts", "put", (attempt, me))
    except Exception as failure:
        logger.warning(
            "writing the attempt record of %s failed (%s)",
            job.run_id,
            type_name(failure),
            extra={"run_id": job.run_id},
        )


def suspend_steps(run_id: str, me: OwnerId) -> Steps[Ending]:
    """Release a held run at the end of the grace (a fenced write), so that a peer
    takes it at once."""
    outcome = yield store("transition_owned", run_id, me, "suspended")
    if isinstance(outcome, Transitioned):
        return Ending("suspended", reason="grace_expired")
    return Ending("lost", reason="fence_lost")
