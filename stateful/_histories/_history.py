"""Recording what concurrent clients of a store saw: operations with intervals.

A *history* is a list of ``Operation`` records: for each call a client made,
its method and arguments, when it was invoked and when it returned (or that it
never did), what it answered or the ``RunStoreError.code`` it raised, and the
store-clock readings the store took while running it. ``check_history``
(``runstore.stateful._histories._linearize``) decides whether some order of those
operations, one that respects real time, is a legal run of the reference model.

Recording::

    recorder = HistoryRecorder("history/worker-1.jsonl", process="worker-1")
    store = recorder.record(runstore.open(db, clock=RecordingClock(SystemClock())))

``record`` wraps any ``RunStore``: every call through the wrapper is written
as an ``invoke`` line before it starts and a ``return`` (or ``error``) line
after it ends, each stamped with ``time.monotonic_ns()``. On Linux that is the
system-wide ``CLOCK_MONOTONIC``, so stamps from different processes on one
host are comparable; across hosts they are not, and histories from several
hosts cannot be checked together. A ``RecordingClock`` given to the store as its
clock writes a ``clock`` line for each reading the store takes while one of
its calls runs on the same thread, which is how the specification later
replays the exact ``created_at``/activation/settle stamps and skew bound the
store used.

Lines are written with one unbuffered ``write`` each, before the call
proceeds, so a process killed with SIGKILL leaves a well-formed prefix: its
last call has an ``invoke`` line and no ``return``, and is read back as
*pending* (it may or may not have taken effect). A call that raised
``persistence_failed`` is recorded as having an unknown outcome too: the error
says it rolled back, but a store losing its connection during ``COMMIT``
cannot know. ``KeyboardInterrupt`` and other exceptions outside ``Exception``
leave the call pending.

History files are created with mode 0600: they hold run state exactly as the
store holds it (the checker needs it to compare reads), so they deserve the
database file's care. A recorder without a path keeps its lines in memory
(``operations()`` reads them), for threads of one process.

Each line is one JSON object (``runstore.stateful._histories._codec`` encodes values):

- ``{"e": "invoke", "op", "process", "pid", "thread", "method", "args", "kwargs", "t"}``
- ``{"e": "clock", "op", "ms"}``
- ``{"e": "return", "op", "t", "value"}``
- ``{"e": "error", "op", "t", "code", "type", "unknown"}`` (``code`` is None
  when the exception was not a ``RunStoreError``)

Operation ids are ``"<process>:<n>"``; process labels must be unique across
the files checked together (the default label includes the pid and a random
suffix).
"""

from __future__ import annotations

import itertools
import json
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Self, TypeAlias, cast

import attrs

from runstore import Clock, RunStoreError

from ._codec import decode, encode
from ._text import call_text

OperationStatus: TypeAlias = Literal["ok", "error", "pending"]

#: Error codes whose operations may or may not have taken effect.
UNKNOWN_OUTCOME_CODES: frozenset[str] = frozenset({"persistence_failed"})


@attrs.frozen(eq=False)
class Operation:
    """One recorded call: what was asked, when, and what came back.

    ``status`` is ``"ok"`` (``value`` holds the answer), ``"error"``
    (``error`` holds the ``RunStoreError.code``, or ``"exception:<Type>"`` for
    anything else) or ``"pending"`` (no return was recorded; ``returned_ns`` is
    None). ``unknown`` is True when the call may or may not have taken effect:
    pending calls and ``persistence_failed`` errors. ``clock_ms`` are the store
    clock readings taken during the call, in order.
    """

    id: str
    process: str
    method: str
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]
    invoked_ns: int
    returned_ns: int | None
    status: OperationStatus
    value: Any = None
    error: str | None = None
    unknown: bool = False
    clock_ms: tuple[int, ...] = ()
    pid: int | None = None
    thread: str | None = None

    @property
    def definite(self) -> bool:
        """The call took effect exactly as it answered (not ``unknown``)."""
        return not self.unknown

    def call_text(self) -> str:
        """``method(arg, ..., key=value)`` with run state shown by length only."""
        return call_text(self.method, self.args, self.kwargs)

    def __repr__(self) -> str:
        ends = "pending" if self.returned_ns is None else f"{self.returned_ns}"
        return f"Operation({self.id} {self.method} [{self.invoked_ns}, {ends}] {self.status})"


_current = threading.local()


def _current_op() -> tuple[HistoryRecorder, str] | None:
    return cast("tuple[HistoryRecorder, str] | None", getattr(_current, "op", None))


class RecordingClock:
    """A store clock that reports each reading to the call running on this thread.

    Give it to the store (``runstore.open(path, clock=RecordingClock(inner))``)
    and wrap the store with ``HistoryRecorder.record``; readings the store takes
    outside a recorded call (or on another thread) are not written anywhere.
    Waiting is delegated to ``inner``.
    """

    def __init__(self, inner: Clock) -> None:
        self.inner = inner

    def now_ms(self) -> int:
        reading = self.inner.now_ms()
        current = _current_op()
        if current is not None:
            recorder, op_id = current
            recorder._emit({"e": "clock", "op": op_id, "ms": reading})
        return reading

    def sleep_until(self, deadline_ms: int) -> None:
        self.inner.sleep_until(deadline_ms)

    async def asleep_until(self, deadline_ms: int) -> None:
        await self.inner.asleep_until(deadline_ms)

    def __repr__(self) -> str:
        return f"RecordingClock({self.inner!r})"


class HistoryRecorder:
    """Writes the history of every store call made through ``record(store)``.

    ``path``: a JSON-lines file to append to (created 0600), or None to keep
    the lines in memory. ``process``: this client's label, unique among the
    histories checked together (default: host, pid and a random suffix).
    ``now_ns``: the interval clock, ``time.monotonic_ns`` unless a test
    supplies its own. Safe to share between threads; each thread is a separate
    sequential client of the store.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        process: str | None = None,
        now_ns: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        if process is None:
            process = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
        self.process = process
        self.path = None if path is None else Path(path)
        self._now_ns = now_ns
        self._sequence = itertools.count(1)
        self._lock = threading.Lock()
        self._lines: list[dict[str, Any]] = []
        self._fd: int | None = None
        if self.path is not None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

    def record(self, store: Any) -> RecordingStore:
        """A wrapper of ``store`` that records every call made through it."""
        return RecordingStore(store, self)

    def operations(self) -> list[Operation]:
        """The operations recorded so far (in memory or in this recorder's file)."""
        if self.path is not None:
            return load_history([self.path])
        with self._lock:
            lines = list(self._lines)
        return operations_from_events(lines)

    def close(self) -> None:
        """Close the history file (the in-memory lines stay). Repeatable."""
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- the wrapper's calls ----------------------------------------------------

    def _emit(self, event: dict[str, Any]) -> None:
        if self.path is None:
            with self._lock:
                self._lines.append(event)
            return
        data = (json.dumps(event, separators=(",", ":")) + "\n").encode()
        with self._lock:
            if self._fd is None:
                raise ValueError("the history recorder is closed")
            os.write(self._fd, data)

    def call(self, target: Any, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Call ``target.<method>(*args, **kwargs)`` and record it."""
        op_id = f"{self.process}:{next(self._sequence)}"
        invoked = self._now_ns()
        self._emit(
            {
                "e": "invoke",
                "op": op_id,
                "process": self.process,
                "pid": os.getpid(),
                "thread": threading.current_thread().name,
                "method": method,
                "args": encode(args),
                "kwargs": encode(dict(kwargs)),
                "t": invoked,
            }
        )
        outer = getattr(_current, "op", None)
        _current.op = (self, op_id)
        try:
            value = getattr(target, method)(*args, **kwargs)
        except RunStoreError as error:
            returned = self._now_ns()
            _current.op = outer
            self._emit(
                {
                    "e": "error",
                    "op": op_id,
                    "t": returned,
                    "code": error.code,
                    "type": type(error).__name__,
                    "unknown": error.code in UNKNOWN_OUTCOME_CODES,
                }
            )
            raise
        except Exception as error:
            returned = self._now_ns()
            _current.op = outer
            self._emit(
                {
                    "e": "error",
                    "op": op_id,
                    "t": returned,
                    "code": None,
                    "type": type(error).__name__,
                    "unknown": False,
                }
            )
            raise
        except BaseException:
            _current.op = outer  # no return line: the call stays pending
            raise
        returned = self._now_ns()
        _current.op = outer
        self._emit({"e": "return", "op": op_id, "t": returned, "value": encode(value)})
        return value


#: Calls a wrapper passes through without recording (lifetime, not operations).
_UNRECORDED = frozenset({"close", "interrupt"})


class RecordingStore:
    """A ``RunStore`` that records each call it forwards to the wrapped store.

    Every public method of the wrapped store is recorded, including ones this
    version does not know (so later operations are recorded as they appear);
    ``close`` and ``interrupt`` are forwarded unrecorded, and so is any
    attribute that is not a method. ``wrapped`` is the store itself.
    """

    def __init__(self, store: Any, recorder: HistoryRecorder) -> None:
        self.wrapped = store
        self.recorder = recorder

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return self.recorder.call(self.wrapped, method, args, kwargs)

    def __getattr__(self, name: str) -> Any:
        value = getattr(self.wrapped, name)
        if name.startswith("_") or name in _UNRECORDED or not callable(value):
            return value

        def recorded(*args: Any, **kwargs: Any) -> Any:
            return self.recorder.call(self.wrapped, name, args, kwargs)

        return recorded

    # The protocol, spelled out so the wrapper is a RunStore for type checkers.
    def create(
        self,
        run_id: str,
        state_json: str,
        *,
        parent_run_id: str | None = None,
        lineage_id: str | None = None,
        round_ordinal: int | None = None,
    ) -> None:
        kwargs = {
            "parent_run_id": parent_run_id,
            "lineage_id": lineage_id,
            "round_ordinal": round_ordinal,
        }
        self._call("create", run_id, state_json, **kwargs)

    def get(self, run_id: str) -> Any:
        return self._call("get", run_id)

    def lineage(self, run_id: str) -> Any:
        return self._call("lineage", run_id)

    def latest_round(self, run_id: str) -> Any:
        return self._call("latest_round", run_id)

    def request_cancel(self, run_id: str, now_ms: int) -> Any:
        return self._call("request_cancel", run_id, now_ms)

    def request_cancel_lineage(self, run_id: str, now_ms: int) -> Any:
        return self._call("request_cancel_lineage", run_id, now_ms)

    def acknowledge_cancel(self, run_id: str, owner: Any, now_ms: int) -> Any:
        return self._call("acknowledge_cancel", run_id, owner, now_ms)

    def claim(self, run_id: str, expected: Any, claimant: Any, now_ms: int) -> Any:
        return self._call("claim", run_id, expected, claimant, now_ms)

    def claim_and_own(
        self, run_id: str, expected: Any, owner: Any, now_ms: int, evidence: Any = None
    ) -> Any:
        return self._call("claim_and_own", run_id, expected, owner, now_ms, evidence)

    def activate(self, run_id: str, claimant: Any, claimed_at_ms: int, expected: Any) -> Any:
        return self._call("activate", run_id, claimant, claimed_at_ms, expected)

    def abandon_claim(self, run_id: str, claimant: Any, claimed_at_ms: int) -> Any:
        return self._call("abandon_claim", run_id, claimant, claimed_at_ms)

    def recover_claim(
        self,
        run_id: str,
        stale_claimant: Any,
        claimed_at_ms: int,
        observer: Any,
        now_ms: int,
        evidence: Any,
    ) -> Any:
        return self._call(
            "recover_claim", run_id, stale_claimant, claimed_at_ms, observer, now_ms, evidence
        )

    def heartbeat(self, run_id: str, owner: Any, now_ms: int) -> Any:
        return self._call("heartbeat", run_id, owner, now_ms)

    def reconfirm(self, run_id: str, owner: Any, now_ms: int) -> Any:
        return self._call("reconfirm", run_id, owner, now_ms)

    def transition_owned(
        self,
        run_id: str,
        owner: Any,
        to_status: Any,
        state_json: str | None = None,
        guard: Any = None,
    ) -> Any:
        return self._call("transition_owned", run_id, owner, to_status, state_json, guard)

    def steal(self, run_id: str, expected: Any, claimant: Any, now_ms: int, evidence: Any) -> Any:
        return self._call("steal", run_id, expected, claimant, now_ms, evidence)

    def ownership_facts(self, run_id: str) -> Any:
        return self._call("ownership_facts", run_id)

    def revision(self) -> Any:
        return self._call("revision")

    def changes(self, after_revision: int) -> Any:
        return self._call("changes", after_revision)

    def state(self) -> Any:
        return self._call("state")

    def check_invariants(self) -> None:
        self._call("check_invariants")

    def close(self) -> None:
        self.wrapped.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RecordingStore({self.wrapped!r}, process={self.recorder.process!r})"


# -- reading histories back -----------------------------------------------------------


def _events(path: Path) -> Iterator[dict[str, Any]]:
    """The events of one file. A torn last line (a kill mid-write) is dropped."""
    with open(path, encoding="utf-8") as handle:
        lines = [line for line in handle.read().split("\n") if line.strip()]
    for number, line in enumerate(lines):
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            if number == len(lines) - 1:
                return
            raise ValueError(f"{path}: line {number + 1} is not a history line") from None
        if type(event) is not dict:
            raise ValueError(f"{path}: line {number + 1} is not a history line")
        yield event


def load_history(paths: Iterable[str | os.PathLike[str]]) -> list[Operation]:
    """The operations of the given history files, together.

    ``ValueError`` when two files share an operation id (process labels must
    be unique) or a line is not a history line (a torn last line is dropped).
    """
    events: list[dict[str, Any]] = []
    for path in paths:
        events.extend(_events(Path(path)))
    return operations_from_events(events)


def operations_from_events(events: Iterable[Mapping[str, Any]]) -> list[Operation]:
    """Assemble ``Operation`` records from history events, in invocation order."""
    invokes: dict[str, Mapping[str, Any]] = {}
    ends: dict[str, Mapping[str, Any]] = {}
    readings: dict[str, list[int]] = {}
    for event in events:
        kind = event.get("e")
        op_id = event.get("op")
        if type(op_id) is not str:
            raise ValueError("a history event without an operation id")
        if kind == "invoke":
            if op_id in invokes:
                raise ValueError(f"operation id {op_id!r} appears twice (process labels clash)")
            invokes[op_id] = event
        elif kind == "clock":
            readings.setdefault(op_id, []).append(event["ms"])
        elif kind in ("return", "error"):
            if op_id in ends:
                raise ValueError(f"operation {op_id!r} returned twice")
            ends[op_id] = event
        else:
            raise ValueError(f"unknown history event {kind!r}")
    orphans = set(ends) - set(invokes)
    if orphans:
        raise ValueError(f"operations returned without an invoke: {sorted(orphans)[:3]}")
    operations = [
        _operation(invoke, ends.get(op_id), tuple(readings.get(op_id, ())))
        for op_id, invoke in invokes.items()
    ]
    operations.sort(key=lambda op: (op.invoked_ns, op.id))
    return operations


def _operation(
    invoke: Mapping[str, Any], end: Mapping[str, Any] | None, clock_ms: tuple[int, ...]
) -> Operation:
    args = decode(invoke["args"])
    kwargs = decode(invoke["kwargs"])
    common: dict[str, Any] = {
        "id": invoke["op"],
        "process": str(invoke.get("process", "")),
        "method": str(invoke["method"]),
        "args": tuple(args),
        "kwargs": dict(kwargs),
        "invoked_ns": int(invoke["t"]),
        "clock_ms": clock_ms,
        "pid": invoke.get("pid"),
        "thread": invoke.get("thread"),
    }
    if end is None:
        return Operation(returned_ns=None, status="pending", unknown=True, **common)
    if end["e"] == "return":
        return Operation(
            returned_ns=int(end["t"]), status="ok", value=decode(end["value"]), **common
        )
    code = end.get("code")
    error = code if type(code) is str else f"exception:{end.get('type')}"
    return Operation(
        returned_ns=int(end["t"]),
        status="error",
        error=error,
        unknown=bool(end.get("unknown", False)),
        **common,
    )


def operation(
    method: str,
    *args: Any,
    invoked: int,
    returned: int | None,
    value: Any = None,
    error: str | None = None,
    unknown: bool | None = None,
    clock: Iterable[int] = (),
    process: str = "p",
    id: str | None = None,
    **kwargs: Any,
) -> Operation:
    """Build one ``Operation`` by hand (tests, examples, histories from elsewhere).

    ``returned=None`` makes it pending; ``error`` a ``RunStoreError`` code; a
    ``persistence_failed`` error is unknown unless ``unknown=False`` says so.
    """
    if returned is None:
        status: OperationStatus = "pending"
        unknown = True
    elif error is not None:
        status = "error"
        if unknown is None:
            unknown = error in UNKNOWN_OUTCOME_CODES
    else:
        status = "ok"
        unknown = False if unknown is None else unknown
    return Operation(
        id=id if id is not None else f"{process}:{next(_hand_ids)}",
        process=process,
        method=method,
        args=tuple(args),
        kwargs=dict(kwargs),
        invoked_ns=invoked,
        returned_ns=returned,
        status=status,
        value=value,
        error=error,
        unknown=bool(unknown),
        clock_ms=tuple(clock),
    )


_hand_ids = itertools.count(1)
