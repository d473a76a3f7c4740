"""The attempt invariants, as pure functions over attempt state tuples.

An attempt state is what ``AttemptStore.state()`` and
``ModelAttemptStore.state()`` return: every ``Attempt``, sorted by id. Each
check fails with its own ``AttemptInvariantViolation`` subclass, so a test can
tell which one fired:

- ``check_attempt_state(attempts, runs)`` judges one state: every attempt's
  run exists, and no checkpoint is larger than the largest cap any attempt
  store over the database was built with;
- ``check_attempt_step(before, after, step, ...)`` judges one step of the
  machine (an attempt operation, or any run-store operation, or a reopen): no
  attempt write from anyone but the run's owner of record (judged on the run
  state *before* the write) is accepted or changes anything; only an accepted
  write changes the attempt table, and only the attempt it names; a settled
  attempt never changes state or finish time again; an attempt's heartbeat
  never moves backwards (only a whole-record replacement by ``put`` in upsert
  mode may rewrite it); a checkpoint a store writes fits that store's cap;
  an attempt operation never moves the run store's revision; a reopen keeps
  every committed attempt.

Attempt operations appear in a ``Step`` under the method names
``attempt_put``, ``attempt_get``, ``attempt_heartbeat``, ``attempt_finish`` and
``attempt_patch``, with the arguments of the ``AttemptStore`` method of the
same name (plus ``config``, which names the attempt store that was called).

Neither function reads a store, a clock or Hypothesis.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence

from runstore._boundary import canonical_json
from runstore._values import TERMINAL_STATUSES, OwnerId, RunRow, StoreState
from runstore.attempts import (
    ABSENT,
    Attempt,
    AttemptId,
    Finished,
    Inserted,
    Patched,
    Updated,
    Upserted,
)

from .._base._steps import Step
from ._invariants import InvariantViolation


class AttemptInvariantViolation(InvariantViolation):
    """Base of every attempt invariant failure; the subclass names the invariant."""


class SettledAttemptChanged(AttemptInvariantViolation):
    """A settled attempt (its state in no store's in-progress states) changed
    its state or its finish time, or disappeared."""


class UnfencedAttemptWrite(AttemptInvariantViolation):
    """An attempt write was accepted from, or changed an attempt for, someone
    who was not the owner of record of a running run when the write began."""


class CheckpointOverCap(AttemptInvariantViolation):
    """A stored checkpoint is larger (in UTF-8 bytes of its canonical
    encoding) than the cap of the store that wrote it."""


class AttemptHeartbeatRegressed(AttemptInvariantViolation):
    """An attempt's heartbeat moved backwards, or was cleared, other than by a
    whole-record replacement (``put`` answering ``Upserted``)."""


class AttemptRunMissing(AttemptInvariantViolation):
    """An attempt is stored for a run that does not exist."""


class AttemptWriteMovedRevision(AttemptInvariantViolation):
    """An attempt operation moved the run store's revision (attempt rows are
    not run rows, and the change feed must not see them)."""


class AttemptChangedWithoutWrite(AttemptInvariantViolation):
    """The attempt table changed through a step that was not an accepted
    attempt write, or an accepted write changed an attempt other than its own."""


class CommittedAttemptLost(AttemptInvariantViolation):
    """Reopening the store lost or changed committed attempts."""


ATTEMPT_INVARIANTS: tuple[type[AttemptInvariantViolation], ...] = (
    SettledAttemptChanged,
    UnfencedAttemptWrite,
    CheckpointOverCap,
    AttemptHeartbeatRegressed,
    AttemptRunMissing,
    AttemptWriteMovedRevision,
    AttemptChangedWithoutWrite,
    CommittedAttemptLost,
)
"""Every attempt invariant exception class, each an ``AttemptInvariantViolation``: catch or list
them by class."""

#: The attempt operations, as ``Step`` method names.
ATTEMPT_METHODS = frozenset(
    {"attempt_put", "attempt_get", "attempt_heartbeat", "attempt_finish", "attempt_patch"}
)
#: The attempt operations that write (the fenced ones).
ATTEMPT_WRITES = frozenset({"attempt_put", "attempt_heartbeat", "attempt_finish", "attempt_patch"})
#: The outcomes that mean a write was accepted.
ACCEPTED = (Inserted, Upserted, Updated, Finished, Patched)

_Key = tuple[str, str, int]


def _key(record: Attempt | AttemptId) -> _Key:
    return (record.run_id, record.step_key_digest, record.attempt)


def _table(attempts: Iterable[Attempt]) -> dict[_Key, Attempt]:
    return {_key(record): record for record in attempts}


def checkpoint_bytes(record: Attempt) -> int:
    """The size of an attempt's checkpoint as the cap counts it (0 when absent)."""
    if record.checkpoint is ABSENT:
        return 0
    return len(canonical_json(record.checkpoint).encode("utf-8"))


def addressed(step: Step) -> _Key | None:
    """The attempt id an attempt operation names, or None (not an attempt
    operation, or arguments too malformed to name one)."""
    method = step.method
    if method == "attempt_put":
        record = step.get("attempt")
        return _key(record) if isinstance(record, Attempt) else None
    if method == "attempt_finish":
        request = step.get("finish")
        names = (getattr(request, n, None) for n in ("run_id", "step_key_digest", "attempt"))
        run_id, step_key, number = names
    elif method in ("attempt_get", "attempt_patch"):
        ident = step.get("attempt_id")
        if not isinstance(ident, AttemptId):
            return None
        run_id, step_key, number = ident.run_id, ident.step_key_digest, ident.attempt
    elif method == "attempt_heartbeat":
        run_id, step_key, number = (
            step.get("run_id"),
            step.get("step_key_digest"),
            step.get("attempt"),
        )
    else:
        return None
    if isinstance(run_id, str) and isinstance(step_key, str) and isinstance(number, int):
        return (run_id, step_key, number)
    return None


def wrote_checkpoint(step: Step) -> bool:
    """Whether an attempt operation writes a checkpoint (``put`` always writes
    the whole record; ``heartbeat`` and ``patch`` only when given one). Only
    such a write is held to its store's cap: another store over the same table
    may have written a larger checkpoint under a larger cap."""
    if step.method == "attempt_put":
        return True
    if step.method == "attempt_heartbeat":
        return step.get("checkpoint", ABSENT) is not ABSENT
    if step.method == "attempt_patch":
        return getattr(step.get("patch"), "checkpoint", ABSENT) is not ABSENT
    return False


# --- one state -------------------------------------------------------------------


def check_attempt_state(
    attempts: Sequence[Attempt],
    runs: StoreState | Iterable[RunRow],
    *,
    max_checkpoint_bytes: int,
) -> None:
    """Raise the first broken single-state invariant of ``attempts`` (every
    stored attempt); return None when all hold.

    ``runs`` is the run state at the same moment (a ``StoreState`` or its
    rows); ``max_checkpoint_bytes`` is the largest cap of any attempt store
    writing to the database.
    """
    rows = runs.rows if isinstance(runs, StoreState) else tuple(runs)
    run_ids = {row.run_id for row in rows}
    for record in attempts:
        if record.run_id not in run_ids:
            raise AttemptRunMissing(
                f"attempt {_key(record)!r} is stored but run {record.run_id!r} does not exist"
            )
        size = checkpoint_bytes(record)
        if size > max_checkpoint_bytes:
            raise CheckpointOverCap(
                f"attempt {_key(record)!r}: checkpoint of {size} bytes, "
                f"over every cap ({max_checkpoint_bytes})"
            )


# --- one step ----------------------------------------------------------------------


def check_attempt_step(
    before: Sequence[Attempt],
    after: Sequence[Attempt],
    step: Step,
    *,
    runs_before: StoreState | Iterable[RunRow],
    revision_before: int,
    revision_after: int,
    in_progress_states: Collection[str],
    max_checkpoint_bytes: int | None = None,
) -> None:
    """Raise the first broken attempt invariant of ``step``, which took the
    attempts from ``before`` to ``after``; return None when all hold.

    - ``runs_before``: the run state when the step began (the fence is judged
      on it; pass the reference model's);
    - ``revision_before``/``revision_after``: the run store's revision around
      the step;
    - ``in_progress_states``: every in-progress state of every attempt store
      over the database (an attempt in none of them is settled);
    - ``max_checkpoint_bytes``: the cap of the attempt store the step called
      (``None`` for steps that are not attempt operations).
    """
    old, new = _table(before), _table(after)
    if step.method == "reopen":
        if old != new:
            raise CommittedAttemptLost(_difference("the reopened store", old, new))
        return
    rows = runs_before.rows if isinstance(runs_before, StoreState) else tuple(runs_before)
    is_attempt = step.method in ATTEMPT_METHODS
    target = addressed(step) if is_attempt else None
    accepted = (
        step.method in ATTEMPT_WRITES and not step.raised and isinstance(step.outcome, ACCEPTED)
    )
    changed = {key for key in old.keys() | new.keys() if old.get(key) != new.get(key)}

    if step.method in ATTEMPT_WRITES:
        _check_fence(rows, step, target, accepted, changed)
    if is_attempt and revision_after != revision_before:
        raise AttemptWriteMovedRevision(
            f"{step.call.describe()} -> {step.outcome!r} moved the run revision "
            f"{revision_before} -> {revision_after}"
        )
    stray = changed - {target} if accepted else changed
    if step.method == "purge_settled" and not step.raised:
        # A purge deletes the attempts of the settled runs it deletes.
        settled = {row.run_id for row in rows if row.status in TERMINAL_STATUSES}
        stray = {key for key in stray if not (key not in new and key[0] in settled)}
    if stray:
        key = sorted(stray)[0]
        raise AttemptChangedWithoutWrite(
            f"{step.call.describe()} -> {step.outcome!r} changed attempt {key!r}"
        )
    _check_settled(old, new, step, in_progress_states)
    _check_heartbeats(old, new, step, target)
    if accepted and wrote_checkpoint(step) and max_checkpoint_bytes is not None:
        record = new.get(target) if target is not None else None
        size = 0 if record is None else checkpoint_bytes(record)
        if size > max_checkpoint_bytes:
            raise CheckpointOverCap(
                f"{step.call.describe()} stored a checkpoint of {size} bytes "
                f"over its store's cap of {max_checkpoint_bytes}"
            )


def _owner_of_record(rows: Iterable[RunRow], run_id: object) -> OwnerId | None:
    for row in rows:
        if row.run_id == run_id:
            return row.owner if row.status == "running" else None
    return None


def _check_fence(
    rows: Sequence[RunRow],
    step: Step,
    target: _Key | None,
    accepted: bool,
    changed: set[_Key],
) -> None:
    caller = step.get("owner")
    run_id = None if target is None else target[0]
    owner = _owner_of_record(rows, run_id)
    if owner is not None and caller == owner:
        return
    if accepted or changed:
        raise UnfencedAttemptWrite(
            f"{step.call.describe()} by {caller!r} -> {step.outcome!r}"
            + (f" (changed {sorted(changed)!r})" if changed else "")
            + f"; run {run_id!r} was owned by {owner!r}"
        )


def _check_settled(
    old: Mapping[_Key, Attempt],
    new: Mapping[_Key, Attempt],
    step: Step,
    in_progress_states: Collection[str],
) -> None:
    for key, record in old.items():
        if record.state in in_progress_states:
            continue
        later = new.get(key)
        if later is None and step.method == "purge_settled" and not step.raised:
            continue  # deleted with its purged run (judged in check_attempt_step)
        if later is None or (later.state, later.finished_at_ms) != (
            record.state,
            record.finished_at_ms,
        ):
            shown = None if later is None else (later.state, later.finished_at_ms)
            raise SettledAttemptChanged(
                f"settled attempt {key!r} ({record.state}, finished {record.finished_at_ms!r})"
                f" became {shown!r} through {step.call.describe()}"
            )


def _check_heartbeats(
    old: Mapping[_Key, Attempt],
    new: Mapping[_Key, Attempt],
    step: Step,
    target: _Key | None,
) -> None:
    replaced = (
        step.method == "attempt_put" and not step.raised and isinstance(step.outcome, Upserted)
    )
    for key, record in old.items():
        stamp = record.heartbeat_at_ms
        later = new.get(key)
        if stamp is None or later is None or (replaced and key == target):
            continue
        if later.heartbeat_at_ms is None or later.heartbeat_at_ms < stamp:
            raise AttemptHeartbeatRegressed(
                f"attempt {key!r}: heartbeat {stamp} -> {later.heartbeat_at_ms!r} through "
                f"{step.call.describe()}"
            )


def _difference(where: str, old: Mapping[_Key, Attempt], new: Mapping[_Key, Attempt]) -> str:
    lost = sorted(old.keys() - new.keys())
    gained = sorted(new.keys() - old.keys())
    changed = sorted(key for key in old.keys() & new.keys() if old[key] != new[key])
    return f"{where}: lost {lost!r}, gained {gained!r}, changed {changed!r}"
