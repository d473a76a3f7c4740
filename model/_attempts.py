"""``ModelAttemptStore``: the reference attempt store, on plain Python values.

The oracle for ``runstore.attempts.AttemptStore``. It keeps its attempts in
its own immutable mapping and reads each run's fence from a run store through
that store's public ``get``; it shares nothing with the SQLite attempt store
but the values, outcomes, errors and input admission. Every write computes
the next mapping and commits by replacing the old one, so a failure before
the commit leaves the store as it was.

The decision ladders below restate upstream's predicates directly:

- put: insert when the attempt is new and the run is fenced; in upsert mode
  replace an in-progress attempt under the fence; otherwise run missing, then
  fence lost, then compare with the stored attempt (strict JSON equality);
- heartbeat and finish: write when the attempt is in progress and fenced;
  otherwise attempt missing, then fence lost, then state changed;
- patch: write when fenced (any state); otherwise attempt missing, then fence
  lost.
"""

from __future__ import annotations

import copy
import threading
import weakref
from collections.abc import Collection, Mapping
from types import MappingProxyType
from typing import Protocol, TypeAlias

import attrs

from runstore._boundary import canonical_json, is_identifier, is_timestamp, json_value_complaint
from runstore._errors import RunStoreError
from runstore._values import OwnerId, RunRow
from runstore.attempts._boundary import (
    DEFAULT_IN_PROGRESS_STATES,
    DEFAULT_MAX_CHECKPOINT_BYTES,
    DEFAULT_PUT_MODE,
    MAXIMUM_CHECKPOINT_BYTES,
    admit_finish,
    admit_get,
    admit_heartbeat,
    admit_options,
    admit_patch,
    admit_put,
)
from runstore.attempts._errors import AttemptStoreError
from runstore.attempts._outcomes import (
    AttemptHeartbeatOutcome,
    Conflict,
    ExistingSame,
    FenceLost,
    Finished,
    FinishOutcome,
    Inserted,
    NotFound,
    Patched,
    PatchOutcome,
    PutOutcome,
    RunNotFound,
    StateChanged,
    Updated,
    Upserted,
)
from runstore.attempts._values import (
    ABSENT,
    Attempt,
    AttemptId,
    AttemptOptions,
    AttemptPatch,
    FinishAttempt,
    PutMode,
)

_Key: TypeAlias = tuple[str, str, int]


def _key(ident: AttemptId) -> _Key:
    return (ident.run_id, ident.step_key_digest, ident.attempt)


def _copied(record: Attempt) -> Attempt:
    # Hand out copies: a caller mutating a returned dict must not reach the model.
    return copy.deepcopy(record)


def _utf8_length(value: object) -> int:
    return len(canonical_json(value).encode("utf-8"))


class _RunReader(Protocol):
    """All the model needs of a run store: ``get``."""

    def get(self, run_id: str) -> RunRow: ...


class _Table:
    """The attempts of one run store: what ``flows_attempts`` is to a database.

    Shared by every ``ModelAttemptStore`` built over the same run store, as
    every ``AttemptStore`` over one SQLite store shares one table.
    """

    def __init__(self) -> None:
        self.attempts: Mapping[_Key, Attempt] = MappingProxyType({})
        self.lock = threading.RLock()


_TABLES: weakref.WeakKeyDictionary[object, _Table] = weakref.WeakKeyDictionary()
_TABLES_LOCK = threading.Lock()


def _table_of(run_store: object) -> _Table:
    with _TABLES_LOCK:
        try:
            table = _TABLES.get(run_store)
            if table is None:
                table = _TABLES[run_store] = _Table()
            return table
        except TypeError:  # not weakly referenceable or not hashable: keep a private table
            return _Table()


def forget_attempts(run_store: object, run_ids: Collection[str]) -> None:
    """Drop every attempt of ``run_ids`` from ``run_store``'s table (the
    model's ``purge_settled`` deletes a purged run's attempts with it)."""
    with _TABLES_LOCK:
        try:
            table = _TABLES.get(run_store)
        except TypeError:
            return
    if table is None:
        return
    gone = set(run_ids)
    with table.lock:
        table.attempts = MappingProxyType(
            {key: record for key, record in table.attempts.items() if record.run_id not in gone}
        )


class ModelAttemptStore:
    """The reference ``AttemptStore`` over a run store (normally a
    ``ModelRunStore``), with the same options and outcomes.

    Every model attempt store built over the same run store sees the same
    attempts, as SQLite attempt stores over one database do. Options are
    admitted when the store is built (``AttemptStoreError``
    ``invalid_attempt``, method ``options``).

    ``ModelAttemptStore(model_store, *, in_progress_states=("running",),
    max_checkpoint_bytes=1 << 20, put_mode="insert")``: ``model_store`` is
    the run store whose fence every write checks; ``in_progress_states``,
    ``max_checkpoint_bytes`` and ``put_mode`` are ``AttemptStore``'s options,
    with the same defaults and rules.
    """

    def __init__(
        self,
        model_store: _RunReader,
        *,
        in_progress_states: tuple[str, ...] | list[str] = DEFAULT_IN_PROGRESS_STATES,
        max_checkpoint_bytes: int = DEFAULT_MAX_CHECKPOINT_BYTES,
        put_mode: PutMode = DEFAULT_PUT_MODE,
    ) -> None:
        self._options: AttemptOptions = admit_options(
            in_progress_states, max_checkpoint_bytes, put_mode
        )
        self._runs = model_store
        self._table = _table_of(model_store)

    @property
    def options(self) -> AttemptOptions:
        """The options this store was built with, as admitted (an ``AttemptOptions``)."""
        return self._options

    # -- plumbing ----------------------------------------------------------------

    def _run(self, method: str, run_id: str) -> RunRow | None:
        """The run row, or None when the run does not exist."""
        try:
            return self._runs.get(run_id)
        except RunStoreError as error:
            if error.code == "not_found_row":
                return None
            if error.code == "decode_failed":
                # Attempt writes never read run state, so a run whose stored
                # state was corrupted behind the store's back still fences.
                raw = self._raw_run(run_id)
                if raw is not None:
                    return raw
            raise _from_run_store(method, error) from None

    def _raw_run(self, run_id: str) -> RunRow | None:
        state = getattr(self._runs, "model_state", None)
        rows = getattr(state, "rows", None)
        if isinstance(rows, Mapping):
            row = rows.get(run_id)
            if isinstance(row, RunRow):
                return row
        return None

    def _in_progress(self, record: Attempt) -> bool:
        return record.state in self._options.in_progress_states

    @property
    def _attempts(self) -> Mapping[_Key, Attempt]:
        return self._table.attempts

    @property
    def _lock(self) -> threading.RLock:
        return self._table.lock

    def _commit(self, key: _Key, record: Attempt) -> None:
        following = dict(self._table.attempts)
        following[key] = record
        self._table.attempts = MappingProxyType(following)

    # -- operations ----------------------------------------------------------------

    def put(self, attempt: Attempt, owner: OwnerId) -> PutOutcome:
        """Insert ``attempt`` if it is new and ``owner`` holds the run's fence; in upsert mode,
        replace it while it is in progress and fenced (``Upserted``). Otherwise ``RunNotFound()``
        (no such run), ``FenceLost()`` (``owner`` does not own it), else ``ExistingSame()`` or
        ``Conflict()`` by strict comparison with the stored attempt, which is left alone. As
        ``AttemptStore.put``."""
        record, who, _ = admit_put(attempt, owner, self._options)
        key = _key(record.id)
        with self._lock:
            run = self._run("put", record.run_id)
            fenced = _fence_holds(run, who)
            existing = self._attempts.get(key)
            if existing is None and fenced:
                self._commit(key, record)
                return Inserted()
            if (
                self._options.put_mode == "upsert"
                and existing is not None
                and self._in_progress(existing)
                and fenced
            ):
                self._commit(key, record)
                return Upserted()
            if run is None:
                return RunNotFound()
            if not fenced:
                return FenceLost()
            if existing is None:
                raise AttemptStoreError("unknown", "put", "attempt disappeared during put")
            return ExistingSame() if existing == record else Conflict()

    def get(self, attempt_id: AttemptId | Attempt) -> Attempt | None:
        """The attempt ``attempt_id`` names (an ``AttemptId``, or an ``Attempt`` standing for its
        own id), or None. Not fenced."""
        ident = admit_get(attempt_id)
        with self._lock:
            record = self._attempts.get(_key(ident))
        return None if record is None else _copied(record)

    def heartbeat(
        self,
        run_id: str,
        step_key_digest: str,
        attempt: int,
        owner: OwnerId,
        now_ms: int,
        checkpoint: object = ABSENT,
    ) -> AttemptHeartbeatOutcome:
        """Advance the heartbeat of the in-progress attempt that ``run_id``, ``step_key_digest`` and
        ``attempt`` name to the later of its stamp and ``now_ms``, under ``owner``'s fence, and
        replace its checkpoint with ``checkpoint`` unless that is ``ABSENT``. Returns
        ``Updated()``, ``NotFound()``, ``FenceLost()`` or ``StateChanged()``, as
        ``AttemptStore.heartbeat``."""
        ident, who, now, value, _ = admit_heartbeat(
            run_id, step_key_digest, attempt, owner, now_ms, checkpoint, self._options
        )
        key = _key(ident)
        with self._lock:
            existing = self._attempts.get(key)
            fenced = _fence_holds(self._run("heartbeat", ident.run_id), who)
            if existing is not None and self._in_progress(existing) and fenced:
                old = existing.heartbeat_at_ms
                self._commit(
                    key,
                    attrs.evolve(
                        existing,
                        heartbeat_at_ms=now if old is None else max(old, now),
                        checkpoint=existing.checkpoint if value is ABSENT else value,
                    ),
                )
                return Updated()
            if existing is None:
                return NotFound()
            if not fenced:
                return FenceLost()
            return StateChanged()

    def finish(self, finish: FinishAttempt, owner: OwnerId) -> FinishOutcome:
        """Settle the in-progress attempt ``finish`` names under ``owner``'s fence: write its state
        and finish time, and replace error, outcome and meta where given. Returns ``Finished()``,
        ``NotFound()``, ``FenceLost()`` or ``StateChanged()`` (a second finish), as
        ``AttemptStore.finish``."""
        request, who, _ = admit_finish(finish, owner, self._options)
        key = _key(request.id)
        with self._lock:
            existing = self._attempts.get(key)
            fenced = _fence_holds(self._run("finish", request.run_id), who)
            if existing is not None and self._in_progress(existing) and fenced:
                self._commit(
                    key,
                    attrs.evolve(
                        existing,
                        state=request.state,
                        finished_at_ms=request.finished_at_ms,
                        error=existing.error if request.error is ABSENT else request.error,
                        outcome=(
                            existing.outcome if request.outcome is ABSENT else request.outcome
                        ),
                        meta=existing.meta if request.meta is ABSENT else request.meta,
                    ),
                )
                return Finished()
            if existing is None:
                return NotFound()
            if not fenced:
                return FenceLost()
            return StateChanged()

    def patch(
        self, attempt_id: AttemptId | Attempt, patch: AttemptPatch, owner: OwnerId
    ) -> PatchOutcome:
        """Replace the fields ``patch`` gives on the attempt ``attempt_id`` names, in any state,
        under ``owner``'s fence. Returns ``Patched()`` (also for an empty patch), ``NotFound()``
        or ``FenceLost()``, as ``AttemptStore.patch``."""
        ident, fields, who, _ = admit_patch(attempt_id, patch, owner, self._options)
        key = _key(ident)
        with self._lock:
            existing = self._attempts.get(key)
            fenced = _fence_holds(self._run("patch", ident.run_id), who)
            if existing is not None and fenced:
                changes = {
                    name: getattr(fields, name)
                    for name in ("checkpoint", "error", "outcome", "meta")
                    if getattr(fields, name) is not ABSENT
                }
                self._commit(key, attrs.evolve(existing, **changes))
                return Patched()
            if existing is None:
                return NotFound()
            return FenceLost()

    # -- comparison --------------------------------------------------------------------

    def state(self) -> tuple[Attempt, ...]:
        """Every attempt, sorted by run id, step key digest and attempt number."""
        with self._lock:
            attempts = self._attempts
        return tuple(_copied(attempts[key]) for key in sorted(attempts))

    def check_invariants(self, *, max_checkpoint_bytes: int = MAXIMUM_CHECKPOINT_BYTES) -> None:
        """Raise ``AssertionError`` naming the first broken invariant: a
        malformed record, a checkpoint over ``max_checkpoint_bytes`` (by default
        the 16 MiB ceiling, since another store over the same run store may
        have a larger cap than this one), an attempt whose run does not exist."""
        with self._lock:
            attempts = self._attempts
        cap = max_checkpoint_bytes
        for key, record in attempts.items():
            assert type(record) is Attempt, "attempt: a record is not an Attempt"
            assert key == _key(record.id), "attempt: stored under another id"
            assert is_identifier(record.run_id), "attempt: run id is not durable text"
            assert is_identifier(record.step_key_digest), "attempt: step key is not durable text"
            assert is_timestamp(record.attempt), "attempt: number out of range"
            assert is_identifier(record.state), "attempt: state is not durable text"
            for name in ("started_at_ms", "finished_at_ms", "heartbeat_at_ms"):
                stamp = getattr(record, name)
                assert (stamp is None and name != "started_at_ms") or is_timestamp(stamp), (
                    f"attempt: {name} out of range"
                )
            assert record.meta is not ABSENT, "attempt: meta is absent"
            for name in ("checkpoint", "error", "outcome", "meta"):
                value = getattr(record, name)
                assert value is ABSENT or json_value_complaint(value) is None, (
                    f"attempt: {name} is not admissible JSON"
                )
            assert record.checkpoint is ABSENT or _utf8_length(record.checkpoint) <= cap, (
                "attempt: checkpoint exceeds the cap"
            )
            assert self._run("check_invariants", record.run_id) is not None, (
                "attempt: its run does not exist"
            )

    def __repr__(self) -> str:
        with self._lock:
            count = len(self._attempts)
        return f"ModelAttemptStore(attempts={count}, put_mode={self._options.put_mode!r})"


def _fence_holds(run: RunRow | None, owner: OwnerId) -> bool:
    """The run fence: the run exists, is running, and ``owner`` owns it."""
    return run is not None and run.status == "running" and run.owner == owner


def _from_run_store(method: str, error: RunStoreError) -> AttemptStoreError:
    code = error.code
    translated: AttemptStoreError
    if code == "constraint":
        translated = AttemptStoreError("constraint", method, "database operation failed")
    elif code == "persistence_failed":
        translated = AttemptStoreError("persistence_failed", method, "database operation failed")
    else:
        translated = AttemptStoreError("unknown", method, "the run store failed")
    translated.cause["run_store_code"] = code
    return translated
