"""``runstore worker MODULE:HANDLER --db TARGET``: one worker process.

The command imports the handler (``MODULE:ATTR``, the current directory
importable, as ``runstore fuzz --store`` loads factories), opens the store (a
SQLite path or a ``postgresql://`` URL, whose password is never printed),
and runs a ``runstore.worker.Worker`` over it with an owner of its own
(``--host-id``, this process's pid, a fresh nonce) until SIGTERM or SIGINT:
then it stops taking work, gives the runs it holds ``--grace-seconds`` to
finish, suspends the rest (fenced, so a peer takes them at once) and exits 0.

Every event is one line on standard output, written as it happens: a run
taken, taken over (with its evidence kind and the previous owner), settled
(with its status), lost, or suspended; plus one line when the worker starts,
one when a signal asks it to stop (``stopping``, with the grace) and one when
it has stopped. ``--json`` writes each as one JSON object. Nothing of
a run's state is ever printed.

Exit status: 0 after a clean stop; 1 when the worker itself failed (its
error's type is printed, not its message); 2 for a usage error (a handler
that cannot be loaded, a target that cannot be opened).

``--clock-file PATH`` runs the store and the worker on a ``FileClock``, a
clock that a test or a demonstration moves for several processes at once.

A handler that is a coroutine function (``async def handler(job)``) runs
under ``runstore.worker.AsyncWorker`` on an asyncio store
(``runstore.aopen``; on PostgreSQL a pool of one connection per handler, at
most 8), with the same options, lines and exit statuses; its job is an
``AsyncJob``.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import inspect
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any, TextIO

from .._clock import Clock, SystemClock
from .._errors import RunStoreError
from ._clocks import FileClock
from ._ops._common import Failure, cannot_open, open_store, shown
from ._ops._format import owner_json, owner_text, printable, printable_lines

#: Exit codes.
OK = 0
FAILED = 1
USAGE = 2


def add_parser(commands: Any) -> None:
    """The ``worker`` subcommand's parser, added to ``commands``."""
    worker = commands.add_parser(
        "worker",
        help="run one worker process: take runs, call a handler, settle them",
        description="Take pending, suspended and abandoned runs from the store, call the"
        " handler on each, and settle it with what the handler returned. SIGTERM or SIGINT"
        " stops taking work, gives held runs the grace period to finish and suspends the"
        " rest. One line per event on standard output. Exit 0 after a clean stop, 1 when"
        " the worker failed, 2 on a usage error.",
    )
    worker.add_argument(
        "handler",
        metavar="MODULE:HANDLER",
        help="the handler, a callable taking a runstore.worker.Job (the current directory is"
        " importable); a coroutine function runs under AsyncWorker with an AsyncJob",
    )
    worker.add_argument(
        "--db",
        required=True,
        metavar="TARGET",
        help="a SQLite database path or a postgresql:// URL",
    )
    worker.add_argument(
        "--concurrency",
        type=_positive_int,
        default=1,
        metavar="N",
        help="handler threads: runs held at most at once (default %(default)s)",
    )
    worker.add_argument(
        "--host-id",
        metavar="ID",
        help="the host part of this worker's owner id (default: the host name)",
    )
    worker.add_argument(
        "--grace-seconds",
        type=_non_negative_float,
        default=30.0,
        metavar="S",
        help="after SIGTERM or SIGINT, how long held runs may still finish before they are"
        " suspended (default %(default)s)",
    )
    worker.add_argument(
        "--json", action="store_true", help="one JSON object per line instead of text"
    )
    worker.add_argument(
        "--clock-file",
        metavar="PATH",
        help="for tests and demonstrations: read the time from a clock file that another"
        " process moves (8 bytes, milliseconds, little-endian) instead of the wall clock",
    )


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, not {value}")
    return value


def _non_negative_float(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {text}")
    return value


def load_handler(spec: str) -> Callable[[Any], object]:
    """``MODULE:HANDLER`` imported, with the current directory importable;
    ``Failure`` (exit 2) saying why it cannot be."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise Failure(f"the handler wants MODULE:HANDLER, not {printable(spec)!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        found: Any = importlib.import_module(module_name)
        for part in attribute.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError) as error:
        raise Failure(f"cannot load the handler {printable(spec)!r}: {error}") from None
    except Exception as error:  # the module itself failed: its message is its own
        raise Failure(
            f"cannot load the handler {printable(spec)!r}: importing it raised"
            f" {type(error).__name__}"
        ) from None
    if not callable(found):
        raise Failure(f"the handler {printable(spec)!r} is not callable")
    return found  # type: ignore[no-any-return]


class EventLog:
    """Writes one line per worker event to ``out``, from any thread."""

    def __init__(self, out: TextIO, *, as_json: bool) -> None:
        self._out = out
        self._json = as_json
        self._lock = threading.Lock()

    def line(self, fields: dict[str, Any], text: str) -> None:
        """Write ``fields`` as JSON or ``text`` (made printable), then flush."""
        written = json.dumps(fields, sort_keys=False) if self._json else printable_lines(text)
        with self._lock:
            self._out.write(written + "\n")
            self._out.flush()

    def event(self, event: Any) -> None:
        """One line for a ``WorkerEvent``."""
        fields: dict[str, Any] = {
            "event": event.kind,
            "run_id": event.run_id,
            "owner": owner_json(event.owner),
            "at_ms": event.at_ms,
        }
        text = f"{event.at_ms} {event.kind} {event.run_id}"
        if event.status is not None:
            fields["status"] = event.status
            text += f" {event.status}"
        if event.kind == "taken_over":
            fields["evidence"] = event.evidence
            fields["previous_owner"] = owner_json(event.previous_owner)
            text += f" from {owner_text(event.previous_owner)} (evidence: {event.evidence})"
        if event.reason is not None:
            fields["reason"] = event.reason
            text += f" ({event.reason})"
        if event.error_type is not None:
            fields["error_type"] = event.error_type
            text += f" [{event.error_type}]"
        self.line(fields, text)


def _install_signal_handlers(
    worker: Any,
    log: EventLog,
    grace_s: float,
    clock: Clock | None,
    stop: Callable[[float], object] | None = None,
) -> list[threading.Thread]:
    """SIGTERM and SIGINT call ``stop(grace_s)`` (by default ``worker.stop``; a
    second signal ``stop(0)``: suspend what is held at once) and log a
    ``stopping`` line.

    The line is written from a thread of its own: a signal handler runs in
    the main thread between two of its steps, maybe while that thread holds
    the log's lock. Returns the list of those threads, to join before the
    last line."""
    received: list[int] = []
    writers: list[threading.Thread] = []
    now = (clock or SystemClock()).now_ms

    def handle(signum: int, frame: FrameType | None) -> None:
        received.append(signum)
        grace = grace_s if len(received) == 1 else 0.0
        at_ms = now()
        (stop or worker.stop)(grace)
        name = signal.Signals(signum).name
        fields = {
            "event": "stopping",
            "owner": owner_json(worker.owner),
            "at_ms": at_ms,
            "signal": name,
            "grace_ms": int(grace * 1000),
        }
        text = f"{at_ms} stopping on {name}: held runs get {grace:g} s, then are suspended"
        writer = threading.Thread(target=log.line, args=(fields, text), daemon=True)
        writers.append(writer)
        writer.start()

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)
    return writers


def _clock(args: argparse.Namespace) -> Clock | None:
    if args.clock_file is None:
        return None
    try:
        return FileClock(args.clock_file)
    except (OSError, ValueError) as error:
        why = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
        raise Failure(f"cannot read the clock file {printable(args.clock_file)}: {why}") from None


def _is_async(handler: object) -> bool:
    """A coroutine function (or an object whose ``__call__`` is one)."""
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
        getattr(handler, "__call__", None)  # noqa: B004 - an instance with an async __call__
    )


def _warnings_handler() -> logging.Handler:
    """The library's warnings (a failed look for work, a failed settle) on
    standard error; its events are the log lines."""
    warnings = logging.StreamHandler(sys.stderr)
    warnings.setLevel(logging.WARNING)
    warnings.setFormatter(logging.Formatter("runstore worker: %(levelname)s: %(message)s"))
    return warnings


def _started(log: EventLog, worker: Any, args: argparse.Namespace) -> None:
    log.line(
        {
            "event": "started",
            "owner": owner_json(worker.owner),
            "db": shown(args.db),
            "concurrency": args.concurrency,
        },
        f"worker {owner_text(worker.owner)} started on {shown(args.db)}"
        f" (concurrency {args.concurrency})",
    )


def _failed(log: EventLog, worker: Any, error: BaseException) -> int:
    # A run's state may be in an error's message: the type only.
    log.line(
        {"event": "failed", "owner": owner_json(worker.owner), "error": type(error).__name__},
        f"worker {owner_text(worker.owner)} failed: {type(error).__name__}",
    )
    return FAILED


def _stopped(log: EventLog, worker: Any, writers: list[threading.Thread]) -> int:
    for writer in list(writers):
        writer.join()
    log.line(
        {"event": "stopped", "owner": owner_json(worker.owner)},
        f"worker {owner_text(worker.owner)} stopped",
    )
    return OK


def _usage(text: str) -> int:
    sys.stderr.write(printable_lines(f"runstore worker: {text}") + "\n")
    return USAGE


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """``runstore worker``: returns the exit status."""
    from ..worker import Worker

    out = sys.stdout if out is None else out
    log = EventLog(out, as_json=args.json)
    try:
        handler = load_handler(args.handler)
        clock = _clock(args)
        if _is_async(handler):
            return asyncio.run(_run_async(args, handler, clock, log))
        store = open_store(args.db, clock=clock)
    except Failure as failure:
        sys.stderr.write(printable_lines(f"runstore worker: {failure.text}") + "\n")
        return failure.code
    warnings = _warnings_handler()
    logging.getLogger("runstore").addHandler(warnings)
    try:
        try:
            # On PostgreSQL each slot gets a connection of its own, so that several
            # slots commit at once (one store serializes its callers).
            many = args.concurrency > 1 and args.db.lower().startswith(
                ("postgresql://", "postgres://")
            )
            worker = Worker(
                store,
                handler,
                owner=None,
                host_id=args.host_id,
                concurrency=args.concurrency,
                clock=clock,
                on_event=log.event,
                slot_store=(lambda: open_store(args.db, clock=clock)) if many else None,
            )
        except (RunStoreError, ValueError, TypeError) as error:
            return _usage(error.message if isinstance(error, RunStoreError) else str(error))
        writers = _install_signal_handlers(worker, log, args.grace_seconds, clock)
        _started(log, worker, args)
        try:
            worker.run()
        except Exception as error:
            return _failed(log, worker, error)
    finally:
        logging.getLogger("runstore").removeHandler(warnings)
        store.close()
    return _stopped(log, worker, writers)


async def _run_async(
    args: argparse.Namespace, handler: Any, clock: Clock | None, log: EventLog
) -> int:
    """``runstore worker`` with a coroutine-function handler: an ``AsyncWorker`` on
    an asyncio store, on this loop."""
    from .._open import aopen, is_postgres_url
    from ..worker import AsyncWorker

    # On PostgreSQL a connection per handler (at most 8), so that handlers commit at once.
    pool_size = min(args.concurrency, 8) if is_postgres_url(args.db) else None
    try:
        store = await aopen(args.db, clock=clock, pool_size=pool_size)
    except RunStoreError as error:
        failure = cannot_open(args.db, error)
        sys.stderr.write(printable_lines(f"runstore worker: {failure.text}") + "\n")
        return failure.code
    warnings = _warnings_handler()
    logging.getLogger("runstore").addHandler(warnings)
    try:
        try:
            worker = AsyncWorker(
                store,
                handler,
                owner=None,
                host_id=args.host_id,
                concurrency=args.concurrency,
                clock=clock,
                on_event=log.event,
            )
        except (RunStoreError, ValueError, TypeError) as error:
            return _usage(error.message if isinstance(error, RunStoreError) else str(error))
        loop = asyncio.get_running_loop()
        stopping: set[asyncio.Future[None]] = set()

        def stop_soon(grace_s: float) -> None:
            # From a signal handler: the stop is started on the loop, as a task.
            def start() -> None:
                task = asyncio.ensure_future(worker.stop(grace_s))
                stopping.add(task)
                task.add_done_callback(stopping.discard)

            loop.call_soon_threadsafe(start)

        writers = _install_signal_handlers(worker, log, args.grace_seconds, clock, stop=stop_soon)
        _started(log, worker, args)
        try:
            await worker.run()
        except Exception as error:
            return _failed(log, worker, error)
    finally:
        logging.getLogger("runstore").removeHandler(warnings)
        await store.close()
    return _stopped(log, worker, writers)
