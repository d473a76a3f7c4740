"""``RunAttemptComparison``: the run-store machine with attempts interleaved.

A subclass of ``RunStoreComparison``: every run rule (claims, steals,
takeovers, settling, crashes and reopening, faults, clock moves) stays, and
attempt rules join them, so attempt writes land before, during and after
ownership changes. Two attempt stores share each side's attempt table, as two
``AttemptStore`` objects over one database do:

- ``insert``: the defaults (in-progress ``("running",)``, 1 MiB cap, insert);
- ``upsert``: in-progress ``("queued", "running")``, a 64-byte checkpoint cap
  (so the byte boundary is cheap to hit) and upsert mode.

The reference side is ``ModelAttemptStore`` over the machine's
``ModelRunStore``; the store side is ``attempt_store_factory`` (by default
``AttemptStore``) over the store under test, built again after every reopen.
After every step, attempt step or run step alike, the machine checks in this
order: the attempt step invariants on the store and then the reference; the
run machine's own checks (run invariants, same outcome, same run state); the
attempt state invariants; and that both attempt tables are equal. (These run
per step, not as a Hypothesis ``@invariant``: a composite rule makes several
steps, and each is checked.)

Attempt calls join the run calls in the machine's log (``AttemptPerformed``),
so a failure carries the whole program and the reference's attempts, and
``runstore fuzz`` writes it back as a plain regression file.

Domains are small: two step keys, attempts 1 and 2, the owner of record, a
displaced owner (someone who owned the run before), a claimant, a stranger
and a crashed incarnation as writers, and JSON values chosen so that ``True``,
``1`` and ``1.0``, ``null`` and absent, and checkpoints one byte either side of
the cap (in ASCII, two-byte and astral text) all meet.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Final, TypeVar

import attrs
from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from runstore._boundary import canonical_json
from runstore._errors import RunStoreError
from runstore._outcomes import Claimed
from runstore._values import OwnerId, RunRow
from runstore.attempts import (
    ABSENT,
    DEFAULT_MAX_CHECKPOINT_BYTES,
    Absent,
    Attempt,
    AttemptId,
    AttemptPatch,
    AttemptStore,
    AttemptStoreError,
    FinishAttempt,
    JsonValue,
)
from runstore.model import ModelAttemptStore

from .._base import _observe
from .._base._capabilities import FULL_STORE, Capabilities
from .._base._compare import DifferentialMismatch
from .._base._domain import PROCESS_COUNT, RUN_IDS
from .._base._observe import AttemptPerformed, Failure, say
from .._base._steps import Call, Crashed, Raised, Step, call, cause_of
from .._checks._attempt_invariants import (
    ACCEPTED,
    AttemptInvariantViolation,
    addressed,
    check_attempt_state,
    check_attempt_step,
)
from .._checks._edits import copyable
from .._checks._faults import (
    FAULT_BUDGET,
    FAULTS,
    expected_attempt_fault_cause,
    fault_plan,
    fired_faults,
    plan_faults,
)
from .._checks._invariants import (
    AdmissionViolation,
    ReferenceInvariantViolation,
    StoreCrashed,
    check_cause,
)
from .._checks._oversize import judge_oversized_checkpoint
from .._targets._blocking import blocking_factory
from ._run_store import (
    PROCESSES,
    RunStoreComparison,
    StoreFactory,
    check_reference,
)

T = TypeVar("T")


class AttemptStateMismatch(DifferentialMismatch):
    """After a step the two sides hold different attempts."""


@attrs.frozen
class AttemptConfig:
    """The options one attempt store is built with."""

    in_progress_states: tuple[str, ...]
    max_checkpoint_bytes: int
    put_mode: str

    def options(self) -> dict[str, Any]:
        return {
            "in_progress_states": self.in_progress_states,
            "max_checkpoint_bytes": self.max_checkpoint_bytes,
            "put_mode": self.put_mode,
        }


#: The two attempt stores each side holds over one table.
CONFIGS: Final[Mapping[str, AttemptConfig]] = {
    "insert": AttemptConfig(("running",), DEFAULT_MAX_CHECKPOINT_BYTES, "insert"),
    "upsert": AttemptConfig(("queued", "running"), 64, "upsert"),
}
#: Every state some attempt store counts as in progress (the rest are settled).
IN_PROGRESS: Final = frozenset(s for c in CONFIGS.values() for s in c.in_progress_states)
#: The largest cap of any attempt store over the table.
LARGEST_CAP: Final = max(c.max_checkpoint_bytes for c in CONFIGS.values())

STEP_KEYS: Final = ("s1", "s2")
NUMBERS: Final = (1, 2)
PUT_STATES: Final = ("running", "running", "queued", "succeeded", "failed")
FINISH_STATES: Final = ("succeeded", "failed", "succeeded", "queued", "running")
#: Who writes: the owner of record (most often), someone who owned the run
#: before it changed hands, its claimant, two strangers, a crashed incarnation.
WRITERS: Final = ("owner", "owner", "owner", "owner", "displaced", "claimant", 0, 3, "ghost")
ATTEMPT_RUNS: Final = ("running", "running", "running", *RUN_IDS, "nope")

#: Checkpoints at the 64-byte cap and one past it, as UTF-8 bytes of the
#: canonical encoding count them: ASCII, two-byte and astral characters.
AT_CAP_ASCII: Final = "a" * 62  # 64 bytes
OVER_CAP_ASCII: Final = "a" * 63  # 65 bytes
AT_CAP_TWO_BYTE: Final = "\u00e9" * 31  # 64 bytes, 33 characters
OVER_CAP_TWO_BYTE: Final = "\u00e9" * 32  # 66 bytes, 34 characters
UNDER_CAP_ASTRAL: Final = "\U0001d11e" * 15  # 62 bytes, 17 characters
OVER_CAP_ASTRAL: Final = "\U0001d11e" * 16  # 66 bytes, 18 characters

#: JSON values that Python calls equal and the stores do not, both orders of
#: one object's keys, null, and (as ``ABSENT``) no value at all.
JSON_VALUES: Final[tuple[JsonValue | Absent, ...]] = (
    ABSENT,
    ABSENT,
    None,
    True,
    1,
    1.0,
    False,
    0,
    "x",
    {"k": 1},
    {"k": True},
    {"k": 1.0},
    {"a": 1, "b": [True, None]},
    {"b": [True, None], "a": 1},
    [1, True, 1.0, None],
    {"nul": "\u0000", "astral": "\U0001d11e"},
)
CHECKPOINTS: Final[tuple[JsonValue | Absent, ...]] = (
    *JSON_VALUES,
    AT_CAP_ASCII,
    OVER_CAP_ASCII,
    AT_CAP_TWO_BYTE,
    OVER_CAP_TWO_BYTE,
    UNDER_CAP_ASTRAL,
    OVER_CAP_ASTRAL,
    {"k": "a" * 56},  # 64 bytes
)
#: ``meta`` is required by ``put``: absent (rarely) is refused on both sides.
METAS: Final[tuple[JsonValue | Absent, ...]] = (
    {},
    {},
    {"try": 1},
    {"try": 1.0},
    None,
    True,
    ABSENT,
)

CONFIG = st.sampled_from(tuple(CONFIGS))

#: ``max_checkpoint_bytes`` at and past the ends of contract.md's range
#: (1 to 16 MiB), as the suite's own literals, and whether each is admitted.
_OPTION_EDGES: Final[tuple[tuple[object, bool], ...]] = (
    (0, False),
    (1, True),
    (16 * 1024 * 1024, True),
    (16 * 1024 * 1024 + 1, False),
    (True, False),
)
ATTEMPT_RUN = st.sampled_from(ATTEMPT_RUNS)
STEP = st.sampled_from(STEP_KEYS)
NUMBER = st.sampled_from(NUMBERS)
WRITER = st.sampled_from(WRITERS)
#: Which attempt a rule addresses: the one last written, the one before it,
#: or the drawn run, step key and number.
PICK = st.sampled_from(("latest", "latest", "earlier", "given", "given"))
JSONS = st.sampled_from(JSON_VALUES)

#: The writes the attempt fault rule arms a fault for.
FAULTED_WRITES: Final = ("put", "heartbeat", "finish", "patch", "upsert")


def perform_attempt(stores: Mapping[str, Any], op: Call) -> Any:
    """Apply an attempt ``op`` to the attempt store its ``config`` names and
    return the outcome, a ``Raised`` (an ``AttemptStoreError``) or a
    ``Crashed`` (anything else). Attempt operations raise ``AttemptStoreError``
    only: a ``RunStoreError`` escaping one is a crash too, so it can never pass
    for the reference's ``AttemptStoreError`` with the same code."""
    store = stores[op.get("config")]
    method = getattr(store, op.method.removeprefix("attempt_"))
    args = [v for k, v in op.arguments if k != "config" and k not in op.keywords]
    kwargs = {k: v for k, v in op.arguments if k in op.keywords}
    try:
        return method(*args, **kwargs)
    except AttemptStoreError as error:
        cause = cause_of(error)
        field = cause.get("field")
        return Raised(
            str(error.code), str(error.method), field if isinstance(field, str) else None, cause
        )
    except RunStoreError as error:
        # Code and operation only: the message is not compared, nor kept.
        return Crashed("RunStoreError", f"{error.code} from {error.method}")
    except Exception as error:
        return Crashed(type(error).__name__, str(error)[:200])


def _over_cap(op: Call) -> bool:
    """Whether ``op`` carries a checkpoint larger (in UTF-8 bytes of its
    canonical encoding) than the cap of the attempt store it calls."""
    config = CONFIGS.get(op.get("config"))
    if config is None:
        return False
    if op.method == "attempt_put":
        record = op.get("attempt")
        checkpoint = record.checkpoint if isinstance(record, Attempt) else ABSENT
    elif op.method == "attempt_patch":
        fields = op.get("patch")
        checkpoint = fields.checkpoint if isinstance(fields, AttemptPatch) else ABSENT
    else:
        checkpoint = op.get("checkpoint", ABSENT)
    if checkpoint is ABSENT:
        return False
    try:
        size = len(canonical_json(checkpoint).encode("utf-8"))
    except (TypeError, ValueError):
        return False  # not JSON at all: refused, but not the cap's verdict
    return size > config.max_checkpoint_bytes


def _check_options_kept(attempts: Any, config: AttemptConfig) -> None:
    """An attempt store that reports its ``options`` reports those it was
    built with (the reference admits options with the same code, so a store
    that turns ``"insert"`` into ``"upsert"`` would otherwise agree with it)."""
    options = getattr(attempts, "options", None)
    if options is None:
        return
    kept = (
        tuple(getattr(options, "in_progress_states", ())),
        getattr(options, "max_checkpoint_bytes", None),
        getattr(options, "put_mode", None),
    )
    asked = (config.in_progress_states, config.max_checkpoint_bytes, config.put_mode)
    if kept != asked:
        raise AdmissionViolation(f"an attempt store built with {asked!r} reports {kept!r}")


def _check_option_bounds(factory: Callable[..., Any], store: Any) -> None:
    """``max_checkpoint_bytes`` at either end of contract.md's range builds
    an attempt store; one past either end (or a bool) is refused with
    ``invalid_attempt``."""
    for value, admitted in _OPTION_EDGES:
        try:
            factory(store, max_checkpoint_bytes=value)
        except AttemptStoreError as error:
            if admitted or error.code != "invalid_attempt":
                raise AdmissionViolation(
                    f"AttemptStore(max_checkpoint_bytes={value!r}) raised {error.code}; "
                    f"contract.md says {'admitted' if admitted else 'invalid_attempt'}"
                ) from None
        except Exception as error:
            raise StoreCrashed(
                f"AttemptStore(max_checkpoint_bytes={value!r}) raised {type(error).__name__}"
            ) from None
        else:
            if not admitted:
                raise AdmissionViolation(
                    f"AttemptStore(max_checkpoint_bytes={value!r}) was built; "
                    "contract.md's range is 1 to 16 MiB"
                )


def logged(op: Call, expected: Any, plan: tuple[Any, ...] | None = None) -> AttemptPerformed:
    """The log entry of an attempt ``op``: the ``AttemptStore`` call it makes
    (the method without its ``attempt_`` prefix, the arguments without
    ``config``) on the attempt store ``config`` names."""
    made = Call(
        op.method.removeprefix("attempt_"),
        tuple((k, v) for k, v in op.arguments if k != "config"),
        op.keywords - {"config"},
    )
    return AttemptPerformed(op.get("config"), made, expected, plan)


def retyped(value: JsonValue | Absent) -> JsonValue | Absent:
    """A value Python calls equal (or nearly) that the stores must not:
    ``True``/``1``/``1.0`` rotate, ``null`` and absent swap; containers change
    their first member."""
    if value is ABSENT:
        return None
    if value is None:
        return ABSENT
    if value is True:
        return 1
    if value is False:
        return 0.0
    if type(value) is int:
        return float(value)
    if type(value) is float:
        return True
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [retyped(value[0]), *value[1:]] if value else [None]  # type: ignore[list-item]
    if isinstance(value, dict):
        if not value:
            return {"": None}
        first = next(iter(value))
        inner = retyped(value[first])
        return {**value, first: None if inner is ABSENT else inner}
    return value


class RunAttemptComparison(RunStoreComparison):
    """``ModelRunStore`` + ``ModelAttemptStore`` against the store under test and
    ``attempt_store_factory`` over it, step by step.

    Every rule of ``RunStoreComparison`` stays, and attempt rules interleave with them, so
    attempt writes land before, during and after claims, takeovers, settling, crashes and
    faults. Two attempt stores share the table on each side (``config``: ``"insert"`` with the
    defaults, ``"upsert"`` with ``queued`` and ``running`` in progress and a 64-byte
    checkpoint cap). A ``writer`` is the run's owner of record, a ``"displaced"`` former
    owner, its claimant, a stranger process or a crashed incarnation. Build one with
    ``attempt_comparison_for``.
    """

    budget_kind: ClassVar[str] = "attempts"
    """Which default budget ``run_conformance`` gives this machine: ``"attempts"``."""

    attempt_store_factory: ClassVar[Callable[..., Any]] = AttemptStore
    """Builds the attempt store under test: ``factory(store, **options)``."""
    oversize_judged: ClassVar[bool] = False
    """Whether a program of this machine has judged an oversized stored checkpoint."""

    def __init__(self) -> None:
        # ``_open_store`` (called by the base) builds the store-side attempt stores.
        super().__init__()
        self.model_attempt_stores: dict[str, ModelAttemptStore] = {
            name: ModelAttemptStore(self.model, **config.options())
            for name, config in CONFIGS.items()
        }
        """The reference's attempt stores over the model, by configuration name."""
        self.model_attempts: tuple[Attempt, ...] = ()
        """The reference's attempts after the last step."""
        self.store_attempts: tuple[Attempt, ...] = ()
        """The store's attempts after the last step."""
        self.displaced: dict[str, list[OwnerId]] = {}
        """Per run, the owners it had before the current one, oldest first."""
        self.recent: list[AttemptId] = []
        """The attempts written last, the most recent at the end."""

    def _open_store(self) -> Any:
        store = super()._open_store()
        factory = type(self).attempt_store_factory
        if not hasattr(self, "attempt_stores"):  # the first open, not a reopen
            _check_option_bounds(factory, store)
        self.attempt_stores: dict[str, Any] = {
            name: factory(store, **config.options()) for name, config in CONFIGS.items()
        }
        for name, config in CONFIGS.items():
            _check_options_kept(self.attempt_stores[name], config)
        return store

    def _self_checks(self) -> list[Callable[[], None]]:
        """The run store's own check, then each attempt store's (at the
        largest cap: another store over the table may hold a larger
        checkpoint than its own cap)."""
        checks = super()._self_checks()
        for attempts in self.attempt_stores.values():
            check = getattr(attempts, "check_invariants", None)
            if callable(check):
                checks.append(functools.partial(check, max_checkpoint_bytes=LARGEST_CAP))
        return checks

    def _store_checks_itself(self) -> None:
        """The stores' own checks, then a stored checkpoint past every
        store's cap on a copy of the file (``_oversize``): reading it must
        fail with ``decode_failed``. It writes 16 MiB, so once it has passed
        the machine stops judging it; until then (a failure must repeat when
        Hypothesis replays or shrinks it) every program that wrote an
        attempt judges it."""
        super()._store_checks_itself()
        machine = type(self)
        factory = machine.store_factory
        if machine.oversize_judged or factory is None or not copyable(self.store, self.path):
            return
        now = self.clock.now_ms()
        try:
            for attempt in self.store_attempts:
                if judge_oversized_checkpoint(
                    factory, machine.attempt_store_factory, self.path, now, attempt.id
                ):
                    machine.oversize_judged = True
                    return
        except AssertionError as error:
            observer = _observe.current()
            if observer is not None:
                observer.failed(self._failure(error))
            raise

    # -- the differential step -----------------------------------------------------

    def _do_attempt(self, op: Call, *, admission: bool | None = None) -> Any:
        """Apply an attempt ``op`` to both sides and run every check (with
        ``admission``, the suite's own verdict on the input too; a checkpoint
        over its store's cap must always be refused)."""
        if admission is None and _over_cap(op):
            admission = False
        model_out = perform_attempt(self.model_attempt_stores, op)
        store_out = perform_attempt(self.attempt_stores, op)
        self.log.append(logged(op, model_out))
        self._settle(Step(op, model_out), Step(op, store_out), admission=admission)
        self._written(Step(op, model_out))
        return model_out

    def _written(self, step: Step) -> None:
        """Remember the attempts written last, for rules to address again."""
        key = addressed(step)
        if key is None or not isinstance(step.outcome, ACCEPTED):
            return
        ident = AttemptId(*key)
        if ident in self.recent:
            self.recent.remove(ident)
        self.recent.append(ident)
        del self.recent[:-4]

    def _settle(self, model_step: Step, store_step: Step, **checks: Any) -> None:
        """The attempt checks around the run machine's (``checks``: its
        keyword options, passed on)."""
        runs_before = self.model_state
        before_model, before_store = self.model_attempts, self.store_attempts
        model_revision, store_revision = self.model_state.revision, self.store_state.revision
        self.model_attempts = self.model_attempt_stores["insert"].state()
        self.store_attempts = self.attempt_stores["insert"].state()
        config = CONFIGS.get(model_step.call.get("config"))
        cap = None if config is None else config.max_checkpoint_bytes
        try:
            # The reference first, runs and attempts: an invariant it breaks is
            # the suite's defect, and must never be reported against the store.
            caps = self.capabilities
            check_reference(
                runs_before,
                self._model_view(),
                model_step,
                leases=caps.lease_introspection and caps.whole_state,
            )
            try:
                check_attempt_step(
                    before_model,
                    self.model_attempts,
                    model_step,
                    runs_before=runs_before,
                    revision_before=model_revision,
                    revision_after=self.model.revision(),
                    in_progress_states=IN_PROGRESS,
                    max_checkpoint_bytes=cap,
                )
            except AttemptInvariantViolation as error:
                raise ReferenceInvariantViolation.of(error) from None
            check_attempt_step(
                before_store,
                self.store_attempts,
                store_step,
                runs_before=runs_before,
                revision_before=store_revision,
                revision_after=self.store.revision(),
                in_progress_states=IN_PROGRESS,
                max_checkpoint_bytes=cap,
            )
        except AssertionError as error:
            self._report(error)
            raise
        super()._settle(model_step, store_step, **checks)
        try:
            try:
                check_attempt_state(
                    self.model_attempts, self.model_state, max_checkpoint_bytes=LARGEST_CAP
                )
            except AttemptInvariantViolation as error:
                raise ReferenceInvariantViolation.of(error) from None
            check_attempt_state(
                self.store_attempts, self.store_state, max_checkpoint_bytes=LARGEST_CAP
            )
            if self.model_attempts != self.store_attempts:
                say(f"reference attempts:\n{shown(self.model_attempts)}")
                say(f"store attempts:\n{shown(self.store_attempts)}")
                raise AttemptStateMismatch(
                    f"after {model_step.call.describe()}:\n"
                    + _attempt_difference(self.model_attempts, self.store_attempts)
                )
        except AssertionError as error:
            self._report(error)
            raise
        self._remember_owners(runs_before.rows)

    def _report(self, error: AssertionError) -> None:
        self.failed = True
        observer = _observe.current()
        if observer is not None:
            observer.failed(self._failure(error))

    def _failure(self, error: AssertionError) -> Failure:
        """The run machine's failure, with the attempts the reference holds."""
        return attrs.evolve(
            super()._failure(error), machine="attempts", expected_attempts=self.model_attempts
        )

    def _remember_owners(self, rows_before: tuple[RunRow, ...]) -> None:
        now = {row.run_id: row for row in self.model_state.rows}
        for row in rows_before:
            later = now.get(row.run_id)
            if row.owner is not None and (later is None or later.owner != row.owner):
                past = self.displaced.setdefault(row.run_id, [])
                if row.owner not in past:
                    past.append(row.owner)
                    del past[:-4]

    # -- arguments -------------------------------------------------------------------

    def _writer(self, selector: object, run: str) -> OwnerId:
        """An attempt writer: ``"displaced"`` is the run's latest former owner
        (a crashed incarnation when it never changed hands)."""
        if selector == "displaced":
            past = self.displaced.get(run)
            return past[-1] if past else self.world.actor("ghost", run)
        return self.world.actor(selector, run)

    def _address(self, run: str, step: str, number: int, pick: str) -> AttemptId:
        """The attempt last written (``"latest"``), the one before it
        (``"earlier"``), or the drawn one (``"given"``, or when too few were
        written)."""
        back = {"latest": 1, "earlier": 2}.get(pick, 0)
        if back and len(self.recent) >= back:
            return self.recent[-back]
        return AttemptId(self.world.run(run), step, number)

    def _stored(self, run: str, step: str, number: int) -> Attempt | None:
        for record in self.model_attempts:
            if (record.run_id, record.step_key_digest, record.attempt) == (run, step, number):
                return record
        return None

    def _reading(self, who: OwnerId, delta: int = 0) -> int:
        return max(0, self.world.reading(who) + delta)

    def _put(self, config: str, record: Attempt, who: OwnerId) -> Any:
        return self._do_attempt(
            call("attempt_put", ("config", config), ("attempt", record), ("owner", who))
        )

    def _heartbeat(
        self,
        config: str,
        ident: AttemptId,
        who: OwnerId,
        now: int,
        checkpoint: JsonValue | Absent = ABSENT,
    ) -> Any:
        return self._do_attempt(
            call(
                "attempt_heartbeat",
                ("config", config),
                ("run_id", ident.run_id),
                ("step_key_digest", ident.step_key_digest),
                ("attempt", ident.attempt),
                ("owner", who),
                ("now_ms", now),
                ("checkpoint", checkpoint),
            )
        )

    def _finish(self, config: str, request: FinishAttempt, who: OwnerId) -> Any:
        return self._do_attempt(
            call("attempt_finish", ("config", config), ("finish", request), ("owner", who))
        )

    def _patch(self, config: str, ident: AttemptId, fields: AttemptPatch, who: OwnerId) -> Any:
        return self._do_attempt(
            call(
                "attempt_patch",
                ("config", config),
                ("attempt_id", ident),
                ("patch", fields),
                ("owner", who),
            )
        )

    # -- attempt rules -----------------------------------------------------------------

    @rule(
        config=CONFIG,
        run=ATTEMPT_RUN,
        step=STEP,
        number=NUMBER,
        pick=PICK,
        writer=WRITER,
        own=st.booleans(),
        variant=st.sampled_from(("new", "new", "stored", "stored", "retyped")),
        state=st.sampled_from(PUT_STATES),
        stamps=st.sampled_from(("started", "beating", "finished")),
        checkpoint=st.sampled_from(CHECKPOINTS),
        error=JSONS,
        outcome=JSONS,
        meta=st.sampled_from(METAS),
    )
    def attempt_put(
        self,
        config: str,
        run: str,
        step: str,
        number: int,
        pick: str,
        writer: object,
        own: bool,
        variant: str,
        state: str,
        stamps: str,
        checkpoint: JsonValue | Absent,
        error: JsonValue | Absent,
        outcome: JsonValue | Absent,
        meta: JsonValue | Absent,
    ) -> None:
        """``put`` by ``writer`` through the store ``config`` of a new record, the stored one
        again, or the stored one with one JSON value retyped (``variant``: ``"new"``,
        ``"stored"``, ``"retyped"``, as ``True`` for ``1`` or ``null`` for absent). ``config``
        names the attempt store (``"insert"``: the defaults; ``"upsert"``: upsert mode,
        ``queued`` and ``running`` in progress, a 64-byte cap); the attempt is the last one
        written (``pick`` ``"latest"``), the one before (``"earlier"``) or the one ``run``,
        ``step`` and ``number`` name (``"given"``). A new record has ``state``, the stamps
        ``stamps`` names (started only, beating, finished), and ``checkpoint``, ``error``,
        ``outcome`` and ``meta`` (JSON values Python calls equal and the stores do not, at and
        over the checkpoint cap, or ``ABSENT``). With ``own``, a process first takes the run."""
        ident = self._address(run, step, number, pick)
        run, step, number = ident.run_id, ident.step_key_digest, ident.attempt
        if own:
            self._owned(run, 0)
        who = self._writer(writer, run)
        now = self._reading(who)
        stored = self._stored(run, step, number)
        if variant == "stored" and stored is not None:
            record = stored
        elif variant == "retyped" and stored is not None:
            record = _retype_one(stored)
        else:
            record = Attempt(
                run,
                step,
                number,
                state,
                now,
                heartbeat_at_ms=now if stamps == "beating" else None,
                finished_at_ms=now if stamps == "finished" else None,
                checkpoint=checkpoint,
                error=error,
                outcome=outcome,
                meta=meta,
            )
        self._put(config, record, who)

    @rule(config=CONFIG, run=ATTEMPT_RUN, step=STEP, number=NUMBER, pick=PICK)
    def attempt_get(self, config: str, run: str, step: str, number: int, pick: str) -> None:
        """``get`` of an attempt through the store ``config``: ``config`` names the attempt store
        (``"insert"``: the defaults; ``"upsert"``: upsert mode, ``queued`` and ``running`` in
        progress, a 64-byte cap); the attempt is the last one written (``pick`` ``"latest"``),
        the one before (``"earlier"``) or the one ``run``, ``step`` and ``number`` name
        (``"given"``)."""
        ident = self._address(run, step, number, pick)
        self._do_attempt(call("attempt_get", ("config", config), ("attempt_id", ident)))

    @rule(
        config=CONFIG,
        run=ATTEMPT_RUN,
        step=STEP,
        number=NUMBER,
        pick=PICK,
        writer=WRITER,
        at=st.sampled_from(("reading", "reading", "behind", "ahead", "stored", "stored-1")),
        checkpoint=st.sampled_from((ABSENT, ABSENT, *CHECKPOINTS)),
    )
    def attempt_heartbeat(
        self,
        config: str,
        run: str,
        step: str,
        number: int,
        pick: str,
        writer: object,
        at: str,
        checkpoint: JsonValue | Absent,
    ) -> None:
        """A heartbeat by ``writer`` through the store ``config`` at ``at`` (the writer's
        reading, behind or ahead of it, or at the stored stamp or one before it), with
        ``checkpoint`` or without (``ABSENT``); when it moved the stamp forward, the beat it
        replaced then arrives late, by the same writer. ``config`` names the attempt store
        (``"insert"``: the defaults; ``"upsert"``: upsert mode, ``queued`` and ``running`` in
        progress, a 64-byte cap); the attempt is the last one written (``pick`` ``"latest"``),
        the one before (``"earlier"``) or the one ``run``, ``step`` and ``number`` name
        (``"given"``)."""
        ident = self._address(run, step, number, pick)
        run, step, number = ident.run_id, ident.step_key_digest, ident.attempt
        who = self._writer(writer, run)
        stored = self._stored(run, step, number)
        beat = None if stored is None else stored.heartbeat_at_ms
        if at.startswith("stored") and beat is not None:
            now = max(0, beat - (1 if at == "stored-1" else 0))
        else:
            now = self._reading(who, {"behind": -5000, "ahead": 5000}.get(at, 0))
        self._heartbeat(config, AttemptId(run, step, number), who, now, checkpoint)
        moved = self._stored(run, step, number)
        if beat is not None and moved is not None and (moved.heartbeat_at_ms or 0) > beat:
            # The beat this one replaced arrives late: it must not move the
            # stamp back (a rare interleaving for the draws alone to reach).
            self._heartbeat(config, AttemptId(run, step, number), who, beat)

    @rule(
        config=CONFIG,
        run=ATTEMPT_RUN,
        step=STEP,
        number=NUMBER,
        pick=PICK,
        writer=WRITER,
        state=st.sampled_from(FINISH_STATES),
        at=st.sampled_from((0, 0, 1, -1, 700)),
        error=JSONS,
        outcome=JSONS,
        meta=JSONS,
    )
    def attempt_finish(
        self,
        config: str,
        run: str,
        step: str,
        number: int,
        pick: str,
        writer: object,
        state: str,
        at: int,
        error: JsonValue | Absent,
        outcome: JsonValue | Absent,
        meta: JsonValue | Absent,
    ) -> None:
        """``finish`` by ``writer`` through the store ``config`` into ``state`` (an in-progress
        state is refused by admission), at the writer's reading plus ``at``, with ``error``,
        ``outcome`` and ``meta``. ``config`` names the attempt store (``"insert"``: the
        defaults; ``"upsert"``: upsert mode, ``queued`` and ``running`` in progress, a 64-byte
        cap); the attempt is the last one written (``pick`` ``"latest"``), the one before
        (``"earlier"``) or the one ``run``, ``step`` and ``number`` name (``"given"``)."""
        ident = self._address(run, step, number, pick)
        run, step, number = ident.run_id, ident.step_key_digest, ident.attempt
        who = self._writer(writer, run)
        request = FinishAttempt(
            run,
            step,
            number,
            state,
            self._reading(who, at),
            error=error,
            outcome=outcome,
            meta=meta,
        )
        self._finish(config, request, who)

    @rule(
        config=CONFIG,
        run=ATTEMPT_RUN,
        step=STEP,
        number=NUMBER,
        pick=PICK,
        writer=WRITER,
        checkpoint=st.sampled_from((ABSENT, ABSENT, *CHECKPOINTS)),
        error=JSONS,
        outcome=JSONS,
        meta=JSONS,
    )
    def attempt_patch(
        self,
        config: str,
        run: str,
        step: str,
        number: int,
        pick: str,
        writer: object,
        checkpoint: JsonValue | Absent,
        error: JsonValue | Absent,
        outcome: JsonValue | Absent,
        meta: JsonValue | Absent,
    ) -> None:
        """``patch`` by ``writer`` through the store ``config`` of ``checkpoint``, ``error``,
        ``outcome`` and ``meta`` (each may be ``ABSENT``); it works on settled attempts too,
        under the fence. ``config`` names the attempt store (``"insert"``: the defaults;
        ``"upsert"``: upsert mode, ``queued`` and ``running`` in progress, a 64-byte cap); the
        attempt is the last one written (``pick`` ``"latest"``), the one before
        (``"earlier"``) or the one ``run``, ``step`` and ``number`` name (``"given"``)."""
        ident = self._address(run, step, number, pick)
        who = self._writer(writer, ident.run_id)
        fields = AttemptPatch(checkpoint=checkpoint, error=error, outcome=outcome, meta=meta)
        self._patch(config, ident, fields, who)

    # -- composite rules for the races ------------------------------------------------

    @rule(
        config=CONFIG,
        run=ATTEMPT_RUN,
        thief=PROCESSES,
        late=st.sampled_from(("finish", "patch", "heartbeat", "put")),
        winner_first=st.booleans(),
    )
    def displaced_owner_writes(
        self, config: str, run: str, thief: int, late: str, winner_first: bool
    ) -> None:
        """An owner of ``run`` starts an attempt through the store ``config``, the process
        ``thief`` takes the run over (steal at the staleness edge, then activate), and the old
        owner's late write (``late``: ``finish``, ``patch``, ``heartbeat`` or ``put``) races
        the new owner's, the winner's first when ``winner_first``."""
        run = self.world.run(run)
        row = self._owned(run, (thief + 1) % PROCESS_COUNT)
        if row is None or row.owner is None or row.heartbeat_at_ms is None:
            return
        old = row.owner
        ident = AttemptId(run, "s1", 1)
        self._put(config, _fresh(ident, "running", self._reading(old)), old)
        self._set_clock(row.heartbeat_at_ms + 30_001)
        new = self.world.process(thief)
        now = self.clock.now_ms()
        proof = self.world.evidence("fit", old, new, now)
        out = self._do(
            call(
                "steal",
                ("run_id", run),
                ("expected", row.snapshot),
                ("claimant", new),
                ("now_ms", now),
                ("evidence", proof),
            )
        )
        if isinstance(out, Claimed):
            self._do(
                call(
                    "activate",
                    ("run_id", run),
                    ("claimant", new),
                    ("claimed_at_ms", out.claimed_at_ms),
                    ("expected", row.snapshot),
                )
            )
        for who in (new, old) if winner_first else (old, new):
            self._late_write(config, late, ident, who)

    def _late_write(self, config: str, late: str, ident: AttemptId, who: OwnerId) -> None:
        now = self._reading(who)
        if late == "finish":
            self._finish(
                config,
                FinishAttempt(
                    ident.run_id,
                    ident.step_key_digest,
                    ident.attempt,
                    "failed",
                    now,
                    outcome={"by": who.nonce},
                ),
                who,
            )
        elif late == "patch":
            self._patch(config, ident, AttemptPatch(outcome={"by": who.nonce}), who)
        elif late == "heartbeat":
            self._heartbeat(config, ident, who, now, {"by": who.nonce})
        else:
            self._put(config, _fresh(ident, "running", now, meta={"by": who.nonce}), who)

    @rule(
        config=CONFIG,
        run=ATTEMPT_RUN,
        run_first=st.booleans(),
        to_status=st.sampled_from(("completed", "failed", "cancelled", "suspended")),
        attempt_state=st.sampled_from(("succeeded", "failed")),
    )
    def run_and_attempt_settle(
        self, config: str, run: str, run_first: bool, to_status: str, attempt_state: str
    ) -> None:
        """The run-terminal against attempt-terminal race on ``run``: its owner settles (or
        suspends) the run as ``to_status`` and finishes its attempt as ``attempt_state``
        through the store ``config``, the run first when ``run_first``, then patches the
        attempt."""
        run = self.world.run(run)
        row = self._owned(run, 0)
        if row is None or row.owner is None:
            return
        owner = row.owner
        ident = AttemptId(run, "s2", 1)
        self._put(config, _fresh(ident, "running", self._reading(owner)), owner)
        request = FinishAttempt(
            run, "s2", 1, attempt_state, self._reading(owner, 1), outcome={"done": True}
        )
        settle = call(
            "transition_owned",
            ("run_id", run),
            ("owner", owner),
            ("to_status", to_status),
            state_json='{"settled":true}',
        )
        if run_first:
            self._do(settle)
            self._finish(config, request, owner)
        else:
            self._finish(config, request, owner)
            self._do(settle)
        self._patch(config, ident, AttemptPatch(error={"late": 1}), owner)

    @rule(
        run=ATTEMPT_RUN,
        step=STEP,
        number=NUMBER,
        first=st.sampled_from(("queued", "running")),
        settle=st.sampled_from(("finish", "put", "finish-insert")),
    )
    def upsert_while_in_progress(
        self, run: str, step: str, number: int, first: str, settle: str
    ) -> None:
        """Upsert replaces an attempt only while it is in progress: put the attempt ``run``,
        ``step`` and ``number`` name in state ``first``, replace it, settle it (``settle``: by
        finish, by an upserted settled record, or by the insert store finishing a queued
        attempt), then try to replace it again."""
        run = self.world.run(run)
        row = self._owned(run, 0)
        if row is None or row.owner is None:
            return
        owner = row.owner
        ident = AttemptId(run, step, number)
        now = self._reading(owner)
        self._put("upsert", _fresh(ident, first, now), owner)
        self._put("upsert", _fresh(ident, "running", now + 1, checkpoint={"page": 2}), owner)
        if settle == "finish":
            self._finish("upsert", FinishAttempt(run, step, number, "succeeded", now + 2), owner)
        elif settle == "put":
            self._put("upsert", _fresh(ident, "failed", now + 2, finished=now + 2), owner)
        else:
            self._finish("insert", FinishAttempt(run, step, number, "queued", now + 2), owner)
        self._put("upsert", _fresh(ident, "running", now + 3, checkpoint={"page": 3}), owner)
        self._heartbeat("upsert", ident, owner, now + 4)
        stored = self._stored(run, step, number)
        if stored is not None:
            # The settled record itself: the same, by strict comparison.
            self._put("insert", stored, owner)
            self._put("upsert", stored, owner)

    @precondition(lambda self: self.capabilities.fault_injection)
    @rule(write=st.sampled_from(FAULTED_WRITES), fault=st.sampled_from(FAULTS), step=STEP)
    def faulted_attempt(self, write: str, fault: str, step: str) -> None:
        """An attempt write (``write``: put, upsert, heartbeat, finish or patch, on step
        ``step``) with the fault plan ``fault`` armed: a lasting failure raises
        ``persistence_failed`` and leaves both sides unchanged; transient ones within the
        budget do not change the outcome. The error's cause keeps the run store's codes."""
        run = self.world.run("running")
        who = self.world.actor("owner", run)
        ident = AttemptId(run, step, 1)
        now = self._reading(who)
        config = "upsert" if write == "upsert" else "insert"
        if write in ("put", "upsert"):
            op = call(
                "attempt_put",
                ("config", config),
                ("attempt", _fresh(ident, "running", now, checkpoint={"f": fault})),
                ("owner", who),
            )
        elif write == "heartbeat":
            op = call(
                "attempt_heartbeat",
                ("config", config),
                ("run_id", run),
                ("step_key_digest", step),
                ("attempt", 1),
                ("owner", who),
                ("now_ms", now),
                ("checkpoint", {"f": fault}),
            )
        elif write == "finish":
            op = call(
                "attempt_finish",
                ("config", config),
                ("finish", FinishAttempt(run, step, 1, "succeeded", now)),
                ("owner", who),
            )
        else:
            op = call(
                "attempt_patch",
                ("config", config),
                ("attempt_id", ident),
                ("patch", AttemptPatch(meta={"f": fault})),
                ("owner", who),
            )
        plan = fault_plan(fault)
        self.store._install_faults(plan)
        try:
            store_out = perform_attempt(self.attempt_stores, op)
        finally:
            self.store._install_faults(None)
        fired = self._judged(lambda: fired_faults(plan, fault))
        lasting = any(not f.transient for f in fired) or (
            sum(f.transient for f in fired) >= FAULT_BUDGET
        )
        say(f"fault plan {fault!r} on attempt {write}: fired {fired!r}")
        if lasting:
            model_out: Any = Raised("persistence_failed", op.method.removeprefix("attempt_"))
        else:
            model_out = perform_attempt(self.model_attempt_stores, op)
        self.log.append(logged(op, model_out, plan_faults(fault)))
        self._settle(Step(op, model_out), Step(op, store_out))
        if lasting:
            shown = f"{op.describe()} under fault plan {fault!r} (fired {fired!r})"
            expected = expected_attempt_fault_cause(fired)
            self._judged(lambda: check_cause(store_out, expected, shown))


def _fresh(
    ident: AttemptId,
    state: str,
    now: int,
    *,
    finished: int | None = None,
    checkpoint: JsonValue | Absent = ABSENT,
    meta: JsonValue | Absent = None,
) -> Attempt:
    return Attempt(
        ident.run_id,
        ident.step_key_digest,
        ident.attempt,
        state,
        now,
        finished_at_ms=finished,
        heartbeat_at_ms=now,
        checkpoint=checkpoint,
        meta={} if meta is None else meta,
    )


def _retype_one(record: Attempt) -> Attempt:
    """The record with one JSON value retyped: the first of outcome, error and
    checkpoint that is set, else the absent outcome (which becomes null)."""
    for name in ("outcome", "error", "checkpoint"):
        value = getattr(record, name)
        if value is not ABSENT:
            changes: dict[str, Any] = {name: retyped(value)}
            return attrs.evolve(record, **changes)
    return attrs.evolve(record, outcome=None)


def _attempt_difference(expected: tuple[Attempt, ...], actual: tuple[Attempt, ...]) -> str:
    """Which attempts differ, and in which fields (JSON values are not shown:
    the notes above the failure print both sides in full)."""
    left = {(a.run_id, a.step_key_digest, a.attempt): a for a in expected}
    right = {(a.run_id, a.step_key_digest, a.attempt): a for a in actual}
    lines = []
    for key in sorted(left.keys() | right.keys()):
        a, b = left.get(key), right.get(key)
        if a is None or b is None:
            lines.append(f"attempt {key!r}: only on the {'store' if a is None else 'reference'}")
        elif a != b:
            fields = [f.name for f in attrs.fields(Attempt) if _differs(a, b, f.name)]
            lines.append(f"attempt {key!r}: differs in {', '.join(fields)}")
    return "\n".join(lines[:20])


def _differs(left: Attempt, right: Attempt, name: str) -> bool:
    """Whether one field differs, compared as the record compares it."""
    swapped: dict[str, Any] = {name: getattr(right, name)}
    return attrs.evolve(left, **swapped) != left


def shown(records: tuple[Attempt, ...]) -> str:
    """Attempts with their JSON values spelled out (for the notes of a failing
    example: the machine's values are generated test data)."""
    lines = []
    for record in records:
        values = {
            name: getattr(record, name)
            for name in ("checkpoint", "error", "outcome", "meta")
            if getattr(record, name) is not ABSENT
        }
        lines.append(f"  {record!r} {values!r}")
    return "\n".join(lines) or "  (none)"


def attempt_comparison_for(
    store_factory: StoreFactory,
    capabilities: Capabilities = FULL_STORE,
    *,
    name: str = "store",
    raw_writer: Callable[[Any, str, str], bool] | None = None,
    attempt_store: Callable[..., Any] = AttemptStore,
) -> type[RunAttemptComparison]:
    """A ``RunAttemptComparison`` subclass for ``store_factory`` (SQL stores, or stores
    ``attempt_store`` can be built over), with its ``capabilities``, named ``name`` in
    reports, with ``raw_writer`` as ``comparison_for`` takes it, and ``attempt_store(store,
    **options)`` building the attempt stores under test (``AttemptStore`` by default)."""
    namespace: dict[str, Any] = {
        "store_factory": staticmethod(blocking_factory(store_factory)),
        "capabilities": capabilities,
        "target": name,
        "raw_writer": None if raw_writer is None else staticmethod(raw_writer),
        "attempt_store_factory": staticmethod(attempt_store),
    }
    safe = "".join(ch if ch.isalnum() else "_" for ch in name)
    return type(f"RunAttemptComparison_{safe}", (RunAttemptComparison,), namespace)
