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
store used. A store that runs its calls on threads of its own (an async
store's, whose SQL store runs on its connection's thread) reads its clock
off the caller's thread: give each caller whose calls come one at a time a
store of its own over a ``HandedRecordingClock``, and hand it the call
before each (``hand()``, on the caller's thread, inside the recorded call).

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
    """The operation's id, unique in the histories checked together (``process:sequence``)."""
    process: str
    """The label of the client that made it."""
    method: str
    """The operation's name."""
    args: tuple[Any, ...]
    """Its positional arguments."""
    kwargs: Mapping[str, Any]
    """Its keyword arguments."""
    invoked_ns: int
    """When it was invoked, on the recorder's interval clock (ns)."""
    returned_ns: int | None
    """When it returned or raised, or None while pending."""
    status: OperationStatus
    """``"ok"``, ``"error"`` or ``"pending"``."""
    value: Any = None
    """What it answered, when ``status`` is ``"ok"``."""
    error: str | None = None
    """The ``RunStoreError`` code it raised, or ``"exception:<Type>"`` for anything else."""
    unknown: bool = False
    """True when it may or may not have taken effect (pending, or ``persistence_failed``)."""
    clock_ms: tuple[int, ...] = ()
    """The store clock readings taken during the call, in order."""
    pid: int | None = None
    """The recording process's pid, when recorded."""
    thread: str | None = None
    """The recording thread's name, when recorded."""

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

    ``RecordingClock(inner)``: ``inner`` is the clock it reads and waits on. Give it to the
    store (``runstore.open(path, clock=RecordingClock(inner))``) and wrap the store with
    ``HistoryRecorder.record``; readings the store takes outside a recorded call (or on
    another thread) are not written anywhere.
    """

    def __init__(self, inner: Clock) -> None:
        self.inner = inner
        """The clock read and waited on."""

    def now_ms(self) -> int:
        """``inner``'s reading, written to the history of the call running on this thread, if
        any."""
        reading = self.inner.now_ms()
        current = _current_op()
        if current is not None:
            recorder, op_id = current
            recorder._emit({"e": "clock", "op": op_id, "ms": reading})
        return reading

    def sleep_until(self, deadline_ms: int) -> None:
        """Wait on ``inner`` until ``deadline_ms``."""
        self.inner.sleep_until(deadline_ms)

    async def asleep_until(self, deadline_ms: int) -> None:
        """Wait on ``inner`` until ``deadline_ms``, in a coroutine."""
        await self.inner.asleep_until(deadline_ms)

    def __repr__(self) -> str:
        return f"RecordingClock({self.inner!r})"


class HandedRecordingClock(RecordingClock):
    """A store clock that reports each reading to the call it was handed, on
    whichever thread the store reads it.

    ``HandedRecordingClock(inner)``: ``inner`` is the clock read and waited on.
    ``hand()``, called on the caller's thread inside a recorded call, hands it
    that call; ``release()`` ends it. Readings outside a handed call are not
    written anywhere. Meant for one caller whose calls come one at a time,
    with a store of its own (an async store, whose calls run on threads of
    its own, where ``RecordingClock`` would see no call)."""

    def __init__(self, inner: Clock) -> None:
        super().__init__(inner)
        self.current: tuple[HistoryRecorder, str] | None = None
        """The call the readings go to (its recorder and its id), or None."""

    def hand(self) -> None:
        """Hand the clock the call running on this thread (None outside one)."""
        self.current = _current_op()

    def release(self) -> None:
        """The handed call is over: readings go nowhere until the next."""
        self.current = None

    def now_ms(self) -> int:
        """``inner``'s reading, written to the history of the handed call, if any."""
        reading = self.inner.now_ms()
        current = self.current
        if current is not None:
            recorder, op_id = current
            recorder._emit({"e": "clock", "op": op_id, "ms": reading})
        return reading

    def __repr__(self) -> str:
        return f"HandedRecordingClock({self.inner!r})"


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
        """This client's label, unique among the histories checked together."""
        self.path = None if path is None else Path(path)
        """The JSON-lines file the history is appended to, or None when it is kept in memory."""
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
        """Call ``target.<method>(*args, **kwargs)`` (``method`` of ``target`` with ``args`` and
        ``kwargs``), record its invocation and its return or error, and return what it
        answered (re-raising what it raised)."""
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

    ``RecordingStore(store, recorder)`` (built by ``HistoryRecorder.record``) wraps ``store``
    and writes each call to ``recorder``. Every public method of the wrapped store is
    recorded, including ones this version does not know (so later operations are recorded as
    they appear); ``close`` and ``interrupt`` are forwarded unrecorded, and so is any
    attribute that is not a method. Its operations answer and raise exactly what the wrapped
    store's do (see ``RunStore``).
    """

    def __init__(self, store: Any, recorder: HistoryRecorder) -> None:
        self.wrapped = store
        """The store the calls are forwarded to."""
        self.recorder = recorder
        """The ``HistoryRecorder`` each call is written to."""

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
        """Forwarded to the wrapped store and recorded. Insert the ``pending`` run ``run_id``
        with ``state_json`` (strict JSON text, stored byte for byte), stamped
        ``created_at_ms`` by the store clock. ``parent_run_id`` names the run it was forked
        from, which must exist; ``lineage_id`` with ``round_ordinal`` makes it that round of a
        lineage (the lineage's first run has the lineage's id). Returns None.

        Raises ``ConstraintError`` for a duplicate id, a parent that does not exist or a taken
        ``(lineage_id, round_ordinal)``, so creating the same id twice fails the second time;
        ``InvalidRunError`` for an inadmissible argument, a ``lineage_id`` without a
        ``round_ordinal`` or a run id starting with ``flows.companion/``.
        """
        kwargs = {
            "parent_run_id": parent_run_id,
            "lineage_id": lineage_id,
            "round_ordinal": round_ordinal,
        }
        self._call("create", run_id, state_json, **kwargs)

    def get(self, run_id: str) -> Any:
        """Forwarded to the wrapped store and recorded. The run ``run_id`` as a ``RunRow``, with
        its state. Raises ``RunNotFoundError`` (``not_found_row``) when there is none and
        ``DecodeFailedError`` when its stored row is broken."""
        return self._call("get", run_id)

    def lineage(self, run_id: str) -> Any:
        """Forwarded to the wrapped store and recorded. Every round of the lineage that contains
        ``run_id``, in round order: the runs naming that lineage, and the run whose id it is.
        A run outside any lineage is a lineage of one; an unknown ``run_id`` gives ``[]``."""
        return self._call("lineage", run_id)

    def latest_round(self, run_id: str) -> Any:
        """Forwarded to the wrapped store and recorded. The highest round of the lineage that
        contains ``run_id`` (the run itself when it has no lineage). Raises
        ``RunNotFoundError`` when no run has that id."""
        return self._call("latest_round", run_id)

    def request_cancel(self, run_id: str, now_ms: int) -> Any:
        """Forwarded to the wrapped store and recorded. Record cancellation intent on the live
        run ``run_id`` at ``now_ms`` (the caller's reading). Returns
        ``CancelRequested(now_ms)``; a repeat answers ``AlreadyRequested`` with the original
        time, a settled run ``Terminal(status)`` and an unknown run ``NotFound()``. Only
        intent is recorded: the owner sees it (``acknowledge_cancel``) and settles the run."""
        return self._call("request_cancel", run_id, now_ms)

    def request_cancel_lineage(self, run_id: str, now_ms: int) -> Any:
        """Forwarded to the wrapped store and recorded. Record cancellation intent at ``now_ms``
        on every live, unrequested round of the lineage that contains ``run_id``. Returns
        ``CancelRequested(now_ms)`` when at least one round was marked (earlier requests keep
        their time); otherwise ``AlreadyRequested`` with a live round's earlier time,
        ``Terminal`` with the last round's status when every round has settled, or
        ``NotFound()``."""
        return self._call("request_cancel_lineage", run_id, now_ms)

    def acknowledge_cancel(self, run_id: str, owner: Any, now_ms: int) -> Any:
        """Forwarded to the wrapped store and recorded. Record that ``owner`` has seen the
        cancellation request on ``run_id``, at ``now_ms``. Returns True when the run is
        running under ``owner`` with a request on it (a repeat keeps the first
        acknowledgement, still writes the row and answers True again); False, writing nothing,
        when there is no request or ``owner`` does not own the run."""
        return self._call("acknowledge_cancel", run_id, owner, now_ms)

    def claim(self, run_id: str, expected: Any, claimant: Any, now_ms: int) -> Any:
        """Forwarded to the wrapped store and recorded. Reserve the run ``run_id`` for
        ``claimant`` while it still matches ``expected`` (a ``RunSnapshot``, or a ``RunRow``
        standing for its snapshot) and is pending or suspended with no claim; ``now_ms``
        becomes the claim's token. Follow with ``activate`` (or ``abandon_claim``).

        Returns ``Claimed(now_ms)``; ``NotFound()``; ``AlreadyClaimed()`` while another claim
        is pending (a second claim answers this too); ``HeartbeatFresh()`` when the run is
        running with a fresh heartbeat; ``SnapshotChanged()`` when it no longer matches
        ``expected``, is running with a stale heartbeat (``claim`` never takes a running run:
        see ``steal``) or has settled.
        """
        return self._call("claim", run_id, expected, claimant, now_ms)

    def claim_and_own(
        self, run_id: str, expected: Any, owner: Any, now_ms: int, evidence: Any = None
    ) -> Any:
        """Forwarded to the wrapped store and recorded. Claim and activate ``run_id`` for
        ``owner`` in one step while it still matches ``expected``, with ``now_ms`` as the
        heartbeat (and as the start, if the run never started). Taking a run from another
        running owner needs that owner's heartbeat to be stale and ``evidence`` (a
        ``LivenessEvidence`` taken at ``now_ms``) that names it; re-owning one's own stale run
        drops the old grant and takes a fresh one.

        Returns ``Activated()``; ``NotFound()``; ``AlreadyClaimed()``; ``HeartbeatFresh()``
        (the run is running with a fresh heartbeat, the caller's own included);
        ``SnapshotChanged()`` (the run moved or settled; also a repeat once owned);
        ``EvidenceRequired()`` when the snapshot holds and its other owner is stale but no
        fitting evidence came (a read only: nothing was written).
        """
        return self._call("claim_and_own", run_id, expected, owner, now_ms, evidence)

    def activate(self, run_id: str, claimant: Any, claimed_at_ms: int, expected: Any) -> Any:
        """Forwarded to the wrapped store and recorded. Trade ``claimant``'s exact claim, the one
        ``claim`` or ``steal`` answered with ``claimed_at_ms``, for ownership of ``run_id``
        while the run still matches ``expected``. The store clock stamps the heartbeat (and
        the start, the first time).

        Returns ``Activated()``; ``ClaimLost()`` when that claim is not on the run (abandoned,
        recovered, already activated, or a wrong token), changing nothing;
        ``SnapshotChanged()`` when the run moved since ``expected`` (typically the owner that
        was stolen from heartbeated), in which case the claim is released.
        """
        return self._call("activate", run_id, claimant, claimed_at_ms, expected)

    def abandon_claim(self, run_id: str, claimant: Any, claimed_at_ms: int) -> Any:
        """Forwarded to the wrapped store and recorded. Drop ``claimant``'s exact claim on
        ``run_id``, the one made at ``claimed_at_ms``; ownership is untouched. Returns
        ``Abandoned()``, or ``ClaimLost()`` when there is no such claim (a repeat answers
        this)."""
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
        """Forwarded to the wrapped store and recorded. Clear ``stale_claimant``'s claim on
        ``run_id`` made at ``claimed_at_ms``, once it is stale at ``now_ms``, on ``evidence``
        that ``observer`` holds about the claimant (taken at ``now_ms``). The run is not
        handed to ``observer``.

        Returns ``Recovered()``; ``NotFound()``; ``ClaimFresh()`` while the claim is at most
        ``HEARTBEAT_STALE_AFTER_MS`` old; ``ClaimChanged()`` when that claim is not the one on
        the run (a repeat answers this); ``LivenessUnconfirmed()`` when the evidence does not
        fit, before the run is looked at.
        """
        return self._call(
            "recover_claim", run_id, stale_claimant, claimed_at_ms, observer, now_ms, evidence
        )

    def heartbeat(self, run_id: str, owner: Any, now_ms: int) -> Any:
        """Forwarded to the wrapped store and recorded. Renew ``owner``'s lease on ``run_id`` to
        the later of its stamp and ``now_ms``; a pending claim does not stop it. Returns
        ``Updated()`` (also for an older ``now_ms``, which does not move the stamp back),
        ``FenceLost()`` when ``owner`` does not own the run, or ``NotFound()``. Repeat it
        freely: every ``HEARTBEAT_INTERVAL_MS`` while the work runs."""
        return self._call("heartbeat", run_id, owner, now_ms)

    def reconfirm(self, run_id: str, owner: Any, now_ms: int) -> Any:
        """Forwarded to the wrapped store and recorded. Like ``heartbeat`` for ``owner`` on
        ``run_id`` at ``now_ms``, but ``FenceLost()`` while any claim is pending on the run:
        the check a supervisor makes before it trusts a lease it could not renew for a while.
        Returns ``Updated()``, ``FenceLost()`` or ``NotFound()``."""
        return self._call("reconfirm", run_id, owner, now_ms)

    def transition_owned(
        self,
        run_id: str,
        owner: Any,
        to_status: Any,
        state_json: str | None = None,
        guard: Any = None,
    ) -> Any:
        """Forwarded to the wrapped store and recorded. Move the run ``run_id`` that ``owner``
        owns to ``to_status`` (any status but ``pending``), replacing its state with
        ``state_json`` when that is given, if ``guard`` (a ``TransitionGuard``) holds.
        ``running`` keeps ownership; any other status releases it and any pending claim, and a
        terminal one stamps ``finished_at_ms`` from the store clock.

        Returns ``Transitioned()``; ``FenceLost()`` when ``owner`` does not own the run (also
        a repeat after a release), writing nothing; ``NotFound()``; ``GuardFailed()`` when
        ``owner`` owns the run but ``guard`` does not hold.
        """
        return self._call("transition_owned", run_id, owner, to_status, state_json, guard)

    def steal(self, run_id: str, expected: Any, claimant: Any, now_ms: int, evidence: Any) -> Any:
        """Forwarded to the wrapped store and recorded. Claim the stale running run ``run_id``
        for ``claimant`` while it still matches ``expected``, on ``evidence`` (taken at
        ``now_ms``) that names its owner; ``now_ms`` becomes the claim's token. The old owner
        stays on the row until ``activate``.

        Returns ``Claimed(now_ms)``; ``NotFound()``; ``AlreadyClaimed()`` while another claim
        is pending (a repeat answers this); ``HeartbeatFresh()`` while the owner's heartbeat
        is fresh, whatever the evidence; ``SnapshotChanged()`` when the run moved or settled;
        ``LivenessUnconfirmed()`` when ``evidence`` does not fit (wrong owner, another
        instant, a kind that does not fit the host relation), before the run is looked at.
        """
        return self._call("steal", run_id, expected, claimant, now_ms, evidence)

    def ownership_facts(self, run_id: str) -> Any:
        """Forwarded to the wrapped store and recorded. The ownership transitions of ``run_id``
        as ``OwnershipFact``s, in order (positions 1, 2, 3, ...); ``[]`` for an unknown run.
        Replaying them rebuilds the run's owner and claim."""
        return self._call("ownership_facts", run_id)

    def revision(self) -> Any:
        """Forwarded to the wrapped store and recorded. The database's execution revision: how
        many run rows were ever written (inserted, updated or deleted), whatever the
        operations answered."""
        return self._call("revision")

    def changes(self, after_revision: int) -> Any:
        """Forwarded to the wrapped store and recorded. The latest change of each run id whose
        revision is above ``after_revision``, as ``RunChange``s in ascending revision order; a
        purged run shows as a tombstone (``deleted=True``). Pass the last revision you
        processed to read what happened since."""
        return self._call("changes", after_revision)

    def state(self) -> Any:
        """Forwarded to the wrapped store and recorded. Everything the store holds (rows, leases,
        facts, revision, changes, acknowledgements) as a ``StoreState``, sorted so two stores
        compare with ``==``."""
        return self._call("state")

    def check_invariants(self) -> None:
        """Forwarded to the wrapped store and recorded. Return when every invariant holds; raise
        ``AssertionError`` naming the first broken one (a row that breaks its shape, a lease
        that disagrees with its row, facts that do not replay to the row, ...)."""
        self._call("check_invariants")

    def close(self) -> None:
        """Close the wrapped store (not recorded). Closing twice does nothing."""
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
    """The operations of the history files at ``paths``, together, in invocation order.
    ``ValueError`` when two files share an operation id (process labels must be unique) or a
    line is not a history line (a torn last line is dropped)."""
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
    """Build one ``Operation`` by hand (tests, examples, histories from elsewhere): ``method``
    called with ``args`` and ``kwargs``, invoked at ``invoked`` and returned at ``returned``
    (ns; None makes it pending), answering ``value`` or raising the ``RunStoreError`` code
    ``error``, by the client ``process``, with the store clock readings ``clock`` and the id
    ``id`` (one is made when None). A ``persistence_failed`` error is unknown unless
    ``unknown=False`` says so."""
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
