"""``AttemptStore``: durable step attempts in the run store's database.

Every write is one statement pair inside the run store's write transaction
(retried as a whole on a transient failure, covered by the fault seam), after
the run store's ``LOCK_RUN`` for the attempt's run: a guarded
``INSERT``/``UPDATE ... RETURNING`` whose ``WHERE`` carries the whole
predicate, including the run fence as an ``EXISTS`` over ``flows_runs``; only
when it writes nothing does a classifying ``SELECT`` pick the loss, in the
order upstream reports it. Reads are plain ``SELECT``s, and every row read is
decoded again (``decode_failed`` names the column, never its content).

The SQL is the backend's (``runstore.sqlite._attempt_queries`` or
``runstore.postgres._attempt_queries``, the same names), handed over by the
run store it is built on (``SqlRunStore._attempt_queries``): this package
imports no backend. Everything else is shared.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any, TypeVar

from .. import _telemetry
from .._boundary import canonical_json, is_identifier, is_timestamp
from .._errors import RunStoreError
from .._sql._store import SqlRunStore
from .._values import OwnerId
from ._boundary import (
    DEFAULT_IN_PROGRESS_STATES,
    DEFAULT_MAX_CHECKPOINT_BYTES,
    DEFAULT_PUT_MODE,
    MAXIMUM_CHECKPOINT_BYTES,
    Encoded,
    admit_finish,
    admit_get,
    admit_heartbeat,
    admit_options,
    admit_patch,
    admit_put,
    invalid,
    stored_json_complaint,
)
from ._errors import AttemptStoreError
from ._outcomes import (
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
from ._values import (
    ABSENT,
    Absent,
    Attempt,
    AttemptId,
    AttemptOptions,
    AttemptPatch,
    FinishAttempt,
    JsonValue,
    PutMode,
)

T = TypeVar("T")


class _Runner:
    """The connection, running the backend's statements with named parameters."""

    __slots__ = ("_connection", "_sql")

    def __init__(self, connection: Any, sql: ModuleType) -> None:
        self._connection = connection
        self._sql = sql

    def execute(self, statement: str, params: Mapping[str, Any] | None = None) -> Any:
        if params is None:
            return self._connection.execute(statement)
        return self._connection.execute(*self._sql.bind(statement, params))


def _id_params(ident: AttemptId) -> dict[str, Any]:
    return {
        "run_id": ident.run_id,
        "step_key_digest": ident.step_key_digest,
        "attempt": ident.attempt,
    }


def _owner_params(owner: OwnerId) -> dict[str, Any]:
    return {"host_id": owner.host_id, "pid": owner.pid, "nonce": owner.nonce}


def _json_params(encoded: Encoded) -> dict[str, Any]:
    return {
        "checkpoint_json": encoded.checkpoint,
        "error_json": encoded.error,
        "outcome_json": encoded.outcome,
        "meta_json": encoded.meta,
    }


@_telemetry.instrument_attempt_store
class AttemptStore:
    """Durable step attempts over a run store's database, fenced by the run's owner.

    ``store`` is an open SQL run store (``runstore.open(...)``, SQLite or
    PostgreSQL); the attempt store shares its connection, its transactions
    and its retry and fault handling, and does not own it (closing the run
    store ends it).

    Options, checked here (``AttemptStoreError`` ``invalid_attempt``, method
    ``options``):

    - ``in_progress_states``: the states heartbeat and finish act on and upsert
      may replace; a non-empty tuple or list of at most 256 distinct durable
      identifiers, default ``("running",)``;
    - ``max_checkpoint_bytes``: the checkpoint cap in UTF-8 bytes of the
      stored encoding, an ``int`` from 1 to 16 MiB, default 1 MiB;
    - ``put_mode``: ``"insert"`` (an existing attempt is only compared) or
      ``"upsert"`` (an existing in-progress attempt is replaced).

    Every write (``put``, ``heartbeat``, ``finish``, ``patch``) runs in one
    write transaction and requires the run fence: the run exists, is
    ``running`` and is owned by exactly ``owner``. Lost races are outcome
    values; misuse and failures raise ``AttemptStoreError``.
    """

    def __init__(
        self,
        store: SqlRunStore,
        *,
        in_progress_states: tuple[str, ...] | list[str] = DEFAULT_IN_PROGRESS_STATES,
        max_checkpoint_bytes: int = DEFAULT_MAX_CHECKPOINT_BYTES,
        put_mode: PutMode = DEFAULT_PUT_MODE,
    ) -> None:
        self._options: AttemptOptions = admit_options(
            in_progress_states, max_checkpoint_bytes, put_mode
        )
        if not isinstance(store, SqlRunStore):
            raise invalid("options", "store", "must be a runstore SQL store") from None
        self._store = store
        self._sql: ModuleType = store._attempt_queries
        states = self._options.in_progress_states
        self._states = {f"s{index}": state for index, state in enumerate(states)}
        mark = self._sql.IN_PROGRESS_MARK
        marks = ", ".join(mark.format(name=name) for name in self._states)
        self._put_upsert = self._sql.PUT_UPSERT.format(in_progress=marks)
        self._heartbeat = self._sql.HEARTBEAT.format(in_progress=marks)
        self._finish = self._sql.FINISH.format(in_progress=marks)

    @property
    def options(self) -> AttemptOptions:
        """The options this store was built with, as admitted (an ``AttemptOptions``)."""
        return self._options

    # -- plumbing ------------------------------------------------------------------

    def _write(self, method: str, run_id: str, body: Callable[[_Runner], T]) -> T:
        """``body`` in one write transaction of the run store, the run locked."""

        def attempt(tx: Any) -> T:
            self._store._lock(tx, run_id)
            return body(_Runner(tx.connection, self._sql))

        try:
            return self._store._write(method, attempt)
        except RunStoreError as error:
            raise _from_run_store(method, error) from None

    def _read(self, method: str, body: Callable[[_Runner], T]) -> T:
        try:
            return self._store._read(method, lambda c: body(_Runner(c, self._sql)))
        except RunStoreError as error:
            raise _from_run_store(method, error) from None

    # -- operations ------------------------------------------------------------------

    def put(self, attempt: Attempt, owner: OwnerId) -> PutOutcome:
        """Insert ``attempt`` if it is new and ``owner`` holds the run's fence.

        Otherwise, in upsert mode, replace it (every column) while it is in
        progress and fenced (``Upserted``). Otherwise: ``RunNotFound`` when the
        run does not exist, ``FenceLost`` when the caller does not own it, and
        else ``ExistingSame`` or ``Conflict`` by strict comparison with the
        stored attempt, which is left alone. Repeating a put answers
        ``ExistingSame`` (insert mode) or ``Upserted`` (upsert, in progress).
        """
        record, who, encoded = admit_put(attempt, owner, self._options)
        params = {
            **_id_params(record.id),
            **_owner_params(who),
            **_json_params(encoded),
            "state": record.state,
            "started_at_ms": record.started_at_ms,
            "finished_at_ms": record.finished_at_ms,
            "heartbeat_at_ms": record.heartbeat_at_ms,
        }
        upsert = self._options.put_mode == "upsert"
        upsert_params = {**params, **self._states}

        def body(connection: _Runner) -> PutOutcome:
            if connection.execute(self._sql.PUT_INSERT, params).fetchall():
                return Inserted()
            if upsert and connection.execute(self._put_upsert, upsert_params).fetchall():
                return Upserted()
            run_exists, fenced = connection.execute(self._sql.PUT_CLASSIFY, params).fetchone()
            if not run_exists:
                return RunNotFound()
            if not fenced:
                return FenceLost()
            row = connection.execute(self._sql.SELECT_ONE, params).fetchone()
            if row is None:
                raise AttemptStoreError("unknown", "put", "attempt disappeared during put")
            return ExistingSame() if _decoded("put", row) == record else Conflict()

        return self._write("put", record.id.run_id, body)

    def get(self, attempt_id: AttemptId | Attempt) -> Attempt | None:
        """The attempt ``attempt_id`` names (an ``AttemptId``, or an ``Attempt``
        standing for its own id), or None when there is none. Not fenced."""
        ident = admit_get(attempt_id)
        params = _id_params(ident)

        def body(connection: _Runner) -> Attempt | None:
            row = connection.execute(self._sql.SELECT_ONE, params).fetchone()
            return None if row is None else _decoded("get", row)

        return self._read("get", body)

    def heartbeat(
        self,
        run_id: str,
        step_key_digest: str,
        attempt: int,
        owner: OwnerId,
        now_ms: int,
        checkpoint: JsonValue | Absent = ABSENT,
    ) -> AttemptHeartbeatOutcome:
        """Advance the heartbeat of the in-progress attempt that ``run_id``,
        ``step_key_digest`` and ``attempt`` name to the later of its stamp and
        ``now_ms``, under ``owner``'s fence, and replace its checkpoint with
        ``checkpoint`` unless that is ``ABSENT``.

        ``now_ms`` is the caller's reading: any timestamp, no skew rule. An
        older reading still answers ``Updated`` without moving the stamp.
        Otherwise: ``NotFound`` (no such attempt), ``FenceLost`` (run missing
        or not owned by ``owner``), ``StateChanged`` (the attempt settled).
        """
        ident, who, now, _, text = admit_heartbeat(
            run_id, step_key_digest, attempt, owner, now_ms, checkpoint, self._options
        )
        params = {
            **_id_params(ident),
            **_owner_params(who),
            **self._states,
            "now_ms": now,
            "checkpoint_json": text,
        }

        def body(connection: _Runner) -> AttemptHeartbeatOutcome:
            if connection.execute(self._heartbeat, params).fetchall():
                return Updated()
            exists, fenced = connection.execute(self._sql.CLASSIFY, params).fetchone()
            if not exists:
                return NotFound()
            if not fenced:
                return FenceLost()
            return StateChanged()

        return self._write("heartbeat", ident.run_id, body)

    def finish(self, finish: FinishAttempt, owner: OwnerId) -> FinishOutcome:
        """Settle the in-progress attempt ``finish`` names, under ``owner``'s
        fence: write its state and finish time, and replace error, outcome and
        meta where given.

        The state must not be an in-progress state (``invalid_attempt``).
        Otherwise as ``heartbeat``: ``NotFound``, ``FenceLost``,
        ``StateChanged`` (a second finish answers this).
        """
        request, who, encoded = admit_finish(finish, owner, self._options)
        params = {
            **_id_params(request.id),
            **_owner_params(who),
            **_json_params(encoded),
            **self._states,
            "state": request.state,
            "finished_at_ms": request.finished_at_ms,
        }

        def body(connection: _Runner) -> FinishOutcome:
            if connection.execute(self._finish, params).fetchall():
                return Finished()
            exists, fenced = connection.execute(self._sql.CLASSIFY, params).fetchone()
            if not exists:
                return NotFound()
            if not fenced:
                return FenceLost()
            return StateChanged()

        return self._write("finish", request.id.run_id, body)

    def patch(
        self, attempt_id: AttemptId | Attempt, patch: AttemptPatch, owner: OwnerId
    ) -> PatchOutcome:
        """Replace the fields ``patch`` gives on the attempt ``attempt_id`` names
        (an ``AttemptId`` or an ``Attempt``), in any state, under ``owner``'s fence.

        An empty patch writes nothing new and still answers ``Patched`` when
        fenced. Otherwise ``NotFound`` (no such attempt), then ``FenceLost``.
        """
        ident, _, who, encoded = admit_patch(attempt_id, patch, owner, self._options)
        params = {**_id_params(ident), **_owner_params(who), **_json_params(encoded)}

        def body(connection: _Runner) -> PatchOutcome:
            if connection.execute(self._sql.PATCH, params).fetchall():
                return Patched()
            exists, _fenced = connection.execute(self._sql.CLASSIFY, params).fetchone()
            if not exists:
                return NotFound()
            return FenceLost()

        return self._write("patch", ident.run_id, body)

    # -- comparison ------------------------------------------------------------------

    def state(self) -> tuple[Attempt, ...]:
        """Every attempt, sorted by run id, step key digest and attempt number."""

        def body(connection: _Runner) -> tuple[Attempt, ...]:
            return tuple(_decoded("state", row) for row in connection.execute(self._sql.SELECT_ALL))

        return self._read("state", body)

    def check_invariants(self, *, max_checkpoint_bytes: int = MAXIMUM_CHECKPOINT_BYTES) -> None:
        """Raise ``AssertionError`` naming the first broken invariant: a row
        that does not decode, a checkpoint over ``max_checkpoint_bytes`` (by
        default the 16 MiB ceiling, since another store over the same database
        may have a larger cap than this one), an attempt whose run does not
        exist."""
        try:
            attempts = self.state()
        except AttemptStoreError as error:
            raise AssertionError(
                f"attempt: a stored row does not decode ({error.message})"
            ) from None
        cap = max_checkpoint_bytes
        for record in attempts:
            if record.checkpoint is not ABSENT:
                size = len(canonical_json(record.checkpoint).encode("utf-8"))
                assert size <= cap, "attempt: checkpoint exceeds the cap"
        orphans = self._read(
            "check_invariants", lambda c: c.execute(self._sql.ORPHANS).fetchone()[0]
        )
        assert orphans == 0, "attempt: its run does not exist"

    def __repr__(self) -> str:
        return f"AttemptStore(put_mode={self._options.put_mode!r})"


# -- decoding ----------------------------------------------------------------------


def _corrupt(method: str, column: str, detail: str) -> AttemptStoreError:
    return AttemptStoreError(
        "decode_failed",
        method,
        f"could not decode flows_attempts row: {column} {detail}",
        {"column": column, "detail": detail, "stage": "row"},
    )


def _decoded(method: str, row: tuple[object, ...]) -> Attempt:
    """One ``flows_attempts`` row, checked as strictly as input is admitted."""
    (run_id, step, number, state, started, finished, beat, checkpoint, error, outcome, meta) = row
    for column, value in (("run_id", run_id), ("step_key_digest", step), ("state", state)):
        if not is_identifier(value):
            raise _corrupt(method, column, "is not durable text")
    for column, value in (
        ("attempt", number),
        ("started_at_ms", started),
        ("finished_at_ms", finished),
        ("heartbeat_at_ms", beat),
    ):
        optional = column in ("finished_at_ms", "heartbeat_at_ms")
        if not ((optional and value is None) or is_timestamp(value)):
            raise _corrupt(method, column, "is not a non-negative safe integer")
    if meta is None:
        raise _corrupt(method, "meta_json", "is missing")
    values: dict[str, JsonValue | Absent] = {}
    for name, text, cap in (
        ("checkpoint", checkpoint, MAXIMUM_CHECKPOINT_BYTES),
        ("error", error, None),
        ("outcome", outcome, None),
        ("meta", meta, None),
    ):
        if text is None:
            values[name] = ABSENT
            continue
        value, complaint = stored_json_complaint(text, cap=cap)
        if complaint is not None:
            raise _corrupt(method, f"{name}_json", complaint)
        values[name] = value  # type: ignore[assignment]
    return Attempt(
        run_id,  # type: ignore[arg-type]
        step,  # type: ignore[arg-type]
        number,  # type: ignore[arg-type]
        state,  # type: ignore[arg-type]
        started,  # type: ignore[arg-type]
        finished_at_ms=finished,  # type: ignore[arg-type]
        heartbeat_at_ms=beat,  # type: ignore[arg-type]
        checkpoint=values["checkpoint"],
        error=values["error"],
        outcome=values["outcome"],
        meta=values["meta"],
    )


def _from_run_store(method: str, error: RunStoreError) -> AttemptStoreError:
    """Translate a run-store failure: constraint and persistence_failed keep
    their code, anything else is unknown. The cause keeps only codes."""
    code = error.code
    if isinstance(error.cause, dict) and error.cause.get("stage") == "read-only":
        refused = AttemptStoreError("persistence_failed", method, "the run store is open read-only")
        refused.cause.update(category="persistence_failed", run_store_code=code, stage="read-only")
        return refused
    if isinstance(error.cause, dict) and error.cause.get("stage") == "event-loop":
        refused = AttemptStoreError(
            "persistence_failed",
            method,
            "a blocking call on an event loop's thread: use runstore.aio.AsyncAttemptStore",
        )
        refused.cause.update(category="persistence_failed", run_store_code=code, stage="event-loop")
        return refused
    if code == "constraint" or code == "persistence_failed":
        translated = AttemptStoreError(code, method, "database operation failed")
    else:
        translated = AttemptStoreError("unknown", method, "the run store failed")
    translated.cause.update(category=translated.code, run_store_code=code)
    database = error.cause.get("database_code") if isinstance(error.cause, dict) else None
    if isinstance(database, str):
        translated.cause["database_code"] = database
    return translated
