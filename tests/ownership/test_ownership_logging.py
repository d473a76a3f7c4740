"""The supervisor's log lines never carry what user code said, at any level.

Run state may hold credentials, and a failing callback or store may quote it
in its exception message (or hold it in a local its traceback shows). With
every logger at DEBUG, while supervision meets failing ``on_reconfirm``,
``on_lapse`` and ``on_cancel_requested`` callbacks, a store whose writes and
``interrupt()`` raise, and a store that crashes the supervisor, every record:

- holds no text of the run's state (message, arguments, extra fields, the
  formatted record with any traceback);
- from a ``runstore.*`` logger, carries no ``exc_info`` or ``stack_info``;
- names the exception's type and the place: the callback's name, the store
  operation, or the code location where a crash was raised.

The state's secret is made at run time, so no source line holds it, and the
capture sees every logger, not just ``runstore``'s. A ``ManualClock`` drives
the supervisor; nothing sleeps for lease timing.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import json
import logging
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import runstore
from runstore import Activated, ManualClock, OwnerId, PersistenceFailedError, RunStoreError
from runstore.ownership import LeaseLost, Supervision, asupervise, supervise

RUN = "report-7"
ME = OwnerId("host-a", 1, "n1")
PACKAGE = Path(runstore.__file__).resolve().parent


class Capture(logging.Handler):
    """Every record of every logger, with all a handler could write of it."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def written(self, record: logging.LogRecord) -> str:
        # The formatted line (traceback and stack included) and every attribute.
        return self.format(record) + repr(record.__dict__)

    def ours(self) -> list[logging.LogRecord]:
        return [r for r in self.records if r.name == "runstore" or r.name.startswith("runstore.")]


@contextlib.contextmanager
def everything_logged() -> Iterator[Capture]:
    capture = Capture()
    root = logging.getLogger()
    previous = root.level
    root.addHandler(capture)
    root.setLevel(logging.DEBUG)
    try:
        yield capture
    finally:
        root.removeHandler(capture)
        root.setLevel(previous)


def leaks(capture: Capture, secret: str) -> list[str]:
    """What is wrong with the captured records, as short descriptions."""
    wrong = []
    for record in capture.records:
        if secret in capture.written(record):
            wrong.append(f"{record.name} {record.getMessage()!r} holds the run's state")
    for record in capture.ours():
        if record.exc_info is not None or record.exc_text is not None:
            wrong.append(f"{record.getMessage()!r} carries a traceback")
        if record.stack_info is not None:
            wrong.append(f"{record.getMessage()!r} carries a stack")
    return wrong


class Owned:
    """A real store holding one owned run whose state carries a secret, and a
    wrapper over it whose calls fail, quoting that state, when told to."""

    def __init__(self) -> None:
        self.secret = "SEKRIT-" + os.urandom(8).hex()
        self.clock = ManualClock(0)
        self.store = runstore.open(":memory:", clock=self.clock)
        self.store.create(RUN, json.dumps({"api_key": self.secret}))
        row = self.store.get(RUN)
        assert self.store.claim_and_own(RUN, row, ME, 0) == Activated()
        self.failing: set[str] = set()
        self.stall = threading.Event()  # set: heartbeats block until released
        self.released = threading.Event()
        self.stalled = threading.Event()
        self.failure: type[BaseException] = RuntimeError

    def run_state(self) -> str:
        return str(self.store.get(RUN).state_json)

    def quoting(self, operation: str) -> BaseException:
        return self.failure(f"{operation} failed in state {self.run_state()}")

    # -- the store the supervisor sees -------------------------------------

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def heartbeat(self, run_id: str, owner: OwnerId, now_ms: int) -> Any:
        if self.stall.is_set():
            self.stalled.set()
            self.released.wait(10)
        if "heartbeat" in self.failing:
            raise self.quoting("heartbeat")
        return self.store.heartbeat(run_id, owner, now_ms)

    def reconfirm(self, run_id: str, owner: OwnerId, now_ms: int) -> Any:
        if "reconfirm" in self.failing:
            raise self.quoting("reconfirm")
        return self.store.reconfirm(run_id, owner, now_ms)

    def interrupt(self) -> None:
        if "interrupt" in self.failing:
            raise RuntimeError(f"cannot interrupt in state {self.run_state()}")


@pytest.fixture
def owned() -> Iterator[Owned]:
    env = Owned()
    try:
        yield env
    finally:
        env.released.set()
        env.store.close()


def settle(lease: Supervision) -> None:
    assert lease.wait_idle(), "the supervisor did not settle"


def supervised(env: Owned, body: Callable[[Supervision], None], **callbacks: Any) -> LeaseLost:
    """Run ``body`` under a threaded supervisor that never injects; the
    ``LeaseLost`` the block ended with (it must end with one)."""
    try:
        with supervise(env, RUN, ME, clock=env.clock, interrupt_thread=False, **callbacks) as lease:
            body(lease)
    except LeaseLost as lost:
        return lost
    raise AssertionError("the lease was never lost")


def lapse_at_the_budget(env: Owned) -> Callable[[Supervision], None]:
    def body(lease: Supervision) -> None:
        settle(lease)
        env.clock.advance(1_000)
        settle(lease)
        env.clock.set(19_000)
        assert lease.lost.wait(5)

    return body


def callback_records(capture: Capture, name: str) -> list[logging.LogRecord]:
    return [r for r in capture.ours() if getattr(r, "callback", None) == name]


def quoting_callback(env: Owned, fired: threading.Event) -> Any:
    def callback(*_args: object) -> None:
        fired.set()
        raise ValueError(f"cannot go on in state {env.run_state()}")

    return callback


def test_a_failing_on_cancel_requested_is_logged_by_type_and_name(owned: Owned) -> None:
    """A cancel callback quoting the state: one WARNING naming the callback and
    ``ValueError``; nothing of the state, no traceback, at DEBUG."""
    fired = threading.Event()
    owned.store.request_cancel(RUN, 0)
    with (
        everything_logged() as capture,
        supervise(
            owned,
            RUN,
            ME,
            clock=owned.clock,
            on_cancel_requested=quoting_callback(owned, fired),
            interrupt_thread=False,
        ) as lease,
    ):
        settle(lease)
        owned.clock.advance(1_000)
        settle(lease)
    assert fired.is_set()
    assert leaks(capture, owned.secret) == []
    [record] = callback_records(capture, "on_cancel_requested")
    assert record.levelno == logging.WARNING
    assert record.getMessage() == (
        f"run supervisor callback failed (run_id={RUN}, callback=on_cancel_requested,"
        " error=ValueError)"
    )
    assert record.error_type == "ValueError"  # type: ignore[attr-defined]


def test_a_failing_on_reconfirm_is_logged_by_type_and_name(owned: Owned) -> None:
    """Heartbeats fail quoting the state, the reconfirm renews, the receipt
    raises: the lease lapses and no record holds the state."""
    fired = threading.Event()
    owned.failing = {"heartbeat"}
    with everything_logged() as capture:
        lost = supervised(
            owned, lapse_at_the_budget(owned), on_reconfirm=quoting_callback(owned, fired)
        )
    assert fired.is_set()
    assert lost.reason == "lapsed"
    assert leaks(capture, owned.secret) == []
    [record] = callback_records(capture, "on_reconfirm")
    assert "callback=on_reconfirm, error=ValueError" in record.getMessage()
    [write] = [r for r in capture.ours() if r.getMessage().startswith("run heartbeat write")]
    assert write.getMessage() == f"run heartbeat write failed (run_id={RUN}, code=RuntimeError)"


def test_a_failing_on_lapse_is_logged_by_type_and_name(owned: Owned) -> None:
    """Every write fails quoting the state and ``on_lapse`` raises: the lapse and
    the callback are logged, the state nowhere."""
    fired = threading.Event()
    owned.failing = {"heartbeat", "reconfirm"}
    owned.failure = PersistenceFailedError  # a store error: its code is logged
    with everything_logged() as capture:
        lost = supervised(
            owned, lapse_at_the_budget(owned), on_lapse=quoting_callback(owned, fired)
        )
    assert lost.reason == "lapsed"
    assert fired.is_set()
    assert leaks(capture, owned.secret) == []
    [record] = callback_records(capture, "on_lapse")
    assert "callback=on_lapse, error=ValueError" in record.getMessage()
    messages = [r.getMessage() for r in capture.ours()]
    assert f"run heartbeat write failed (run_id={RUN}, code=persistence_failed)" in messages


def test_a_store_error_with_an_unknown_code_is_logged_by_type(owned: Owned) -> None:
    """A store of one's own may put anything in ``RunStoreError.code``: a code
    that is not one of the known codes is never logged, the type is."""

    class OddError(RunStoreError):
        pass

    def odd(text: str) -> BaseException:
        error = OddError("persistence_failed", "heartbeat", "x")
        error.code = text  # type: ignore[assignment]
        return error

    owned.failing = {"heartbeat"}
    owned.quoting = lambda operation: odd(owned.run_state())  # type: ignore[method-assign]
    with (
        everything_logged() as capture,
        supervise(owned, RUN, ME, clock=owned.clock, interrupt_thread=False) as lease,
    ):
        settle(lease)
        owned.clock.advance(1_000)
        settle(lease)
    assert leaks(capture, owned.secret) == []
    assert [r.getMessage() for r in capture.ours()] == [
        f"run heartbeat write failed (run_id={RUN}, code=OddError)"
    ]


def test_a_failing_store_interrupt_is_logged_by_type(owned: Owned) -> None:
    """A heartbeat that never returns is interrupted at the lapse; an
    ``interrupt()`` that raises quoting the state is logged (DEBUG) by type."""
    owned.failing = {"reconfirm", "interrupt"}

    def body(lease: Supervision) -> None:
        settle(lease)
        owned.stall.set()
        owned.clock.advance(1_000)
        assert owned.stalled.wait(5)
        assert owned.clock.wait_for_sleepers(1)  # only the deadline waits
        owned.clock.set(19_000)
        assert lease.lost.wait(5)

    with everything_logged() as capture:
        assert supervised(owned, body).reason == "lapsed"
    owned.released.set()
    assert leaks(capture, owned.secret) == []
    [record] = [r for r in capture.ours() if r.getMessage().startswith("store interrupt")]
    assert record.levelno == logging.DEBUG
    assert record.getMessage() == f"store interrupt failed (run_id={RUN}, code=RuntimeError)"
    assert record.operation == "interrupt"  # type: ignore[attr-defined]


class Crash(BaseException):
    """Not an ``Exception``: it kills the supervisor."""


def test_a_crashed_thread_supervisor_is_logged_by_type_and_place(owned: Owned) -> None:
    """A store raising a ``BaseException`` quoting the state kills the supervisor:
    one ERROR naming the type and the raising function, without a traceback."""
    owned.failing = {"heartbeat"}
    owned.failure = Crash

    def body(lease: Supervision) -> None:
        settle(lease)
        owned.clock.advance(1_000)
        assert lease.lost.wait(5)

    with everything_logged() as capture:
        assert "supervisor" in str(supervised(owned, body))
    assert leaks(capture, owned.secret) == []
    [record] = [r for r in capture.ours() if r.levelno == logging.ERROR]
    assert record.error_type == "Crash"  # type: ignore[attr-defined]
    assert record.failure_site.startswith(f"{__name__}.Owned.heartbeat:")  # type: ignore[attr-defined]
    assert "error=Crash, at=" in record.getMessage()


def test_the_asyncio_face_logs_the_same_way(owned: Owned) -> None:
    """``asupervise`` with a coroutine cancel callback and then a crashing store:
    the callback and the crash are named, the state is nowhere."""
    fired = asyncio.Event()

    async def on_cancel_requested() -> None:
        fired.set()
        raise KeyError(owned.run_state())

    async def work() -> None:
        owned.store.request_cancel(RUN, 0)
        async with asupervise(
            owned, RUN, ME, clock=owned.clock, on_cancel_requested=on_cancel_requested
        ) as lease:
            assert await asyncio.to_thread(lease.wait_idle)
            owned.clock.advance(1_000)
            assert await asyncio.to_thread(lease.wait_idle)
            assert fired.is_set()
            owned.failing = {"heartbeat"}
            owned.failure = Crash
            owned.clock.advance(1_000)
            await asyncio.sleep(10)

    with everything_logged() as capture, pytest.raises(LeaseLost, match="supervisor"):
        asyncio.run(work())
    assert leaks(capture, owned.secret) == []
    [callback] = callback_records(capture, "on_cancel_requested")
    assert "error=KeyError" in callback.getMessage()
    [crash] = [r for r in capture.ours() if r.levelno == logging.ERROR]
    assert crash.error_type == "Crash"  # type: ignore[attr-defined]


def test_the_check_catches_a_traceback_or_a_quoted_state() -> None:
    """The checks above can fail: a record with ``exc_info`` from an error that
    quotes the state, or with the state in an extra field, is reported."""
    secret = "SEKRIT-" + os.urandom(8).hex()
    logger = logging.getLogger("runstore.ownership")
    with everything_logged() as capture:
        try:
            raise ValueError(secret)
        except ValueError:
            logger.debug("callback failure", exc_info=True)
        logger.warning("failed", extra={"detail": {"api_key": secret}})
        logger.info("done", stack_info=True)
    assert len(leaks(capture, secret)) == 4
    assert leaks(capture, "nothing-like-it")[0].endswith("carries a traceback")


# --- the package as a whole ------------------------------------------------------

LOG_METHODS = {"debug", "info", "warning", "error", "exception", "critical", "log"}


def logging_calls(source: str) -> Iterator[ast.Call]:
    """Calls of a logging method on a name or attribute called like a logger."""
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        if node.func.attr not in LOG_METHODS:
            continue
        target = node.func.value
        name = target.id if isinstance(target, ast.Name) else getattr(target, "attr", "")
        if "log" in name.lower():
            yield node


def offending(source: str) -> list[str]:
    """Logging calls that would attach a traceback or a stack."""
    found = []
    for call in logging_calls(source):
        assert isinstance(call.func, ast.Attribute)
        if call.func.attr == "exception":
            found.append(f"line {call.lineno}: .exception()")
        for keyword in call.keywords:
            if keyword.arg in {"exc_info", "stack_info"} or keyword.arg is None:
                found.append(f"line {call.lineno}: {keyword.arg or '**kwargs'}")
    return found


def test_no_logging_call_in_the_package_attaches_a_traceback() -> None:
    """No ``runstore`` module logs with ``exc_info``, ``stack_info`` or
    ``logger.exception``: a traceback's text quotes the exception's message."""
    found = {
        path.relative_to(PACKAGE).as_posix(): bad
        for path in sorted(PACKAGE.rglob("*.py"))
        if (bad := offending(path.read_text(encoding="utf-8")))
    }
    assert found == {}
    # The scan sees the package's logging calls at all, and would flag one.
    core = (PACKAGE / "ownership" / "_core.py").read_text(encoding="utf-8")
    assert len(list(logging_calls(core))) >= 4
    assert offending("logger.debug('x', exc_info=True)\nlog.exception('y')\n") == [
        "line 1: exc_info",
        "line 2: .exception()",
    ]
