"""What both workers admit and report: their options (``admit_options``), their events
(``emit``) and the attempt store a failure's record goes to (``attempt_store``).

May import: ``runstore.aio`` and ``runstore.attempts`` (the attempt stores),
``runstore.consensus`` (the method check) and the core modules."""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import Callable
from typing import Any

import attrs

from .._boundary import admit_clock, admit_owner
from .._clock import Clock, SystemClock
from .._errors import InvalidRunError
from .._values import OwnerId
from ..consensus._admit import missing_methods
from ._job import EventKind, WorkerEvent
from ._steps import type_name

logger = logging.getLogger("runstore.worker")

#: What a worker calls on its store.
STORE_METHODS = (
    "get",
    "claim_next",
    "claim_and_own",
    "recover_claim",
    "transition_owned",
    "acknowledge_cancel",
    "list_runs",
    "ownership_facts",
    "heartbeat_many",
    "reconfirm",
)


@attrs.frozen
class Options:
    """A worker's options, admitted."""

    owner: OwnerId
    clock: Clock
    concurrency: int
    max_takeovers: int
    handler_timeout_ms: int | None
    poll_interval_s: float
    scan_interval_ms: int


def admit_options(
    method: str,
    store: Any,
    handler: object,
    *,
    owner: OwnerId | None,
    host_id: str | None,
    concurrency: int,
    clock: Clock | None,
    max_takeovers: int,
    handler_timeout_ms: int | None,
    poll_interval_s: float,
    scan_interval_ms: int,
) -> Options:
    """The options of a worker (``method`` names it in errors), or ``InvalidRunError``."""
    missing = missing_methods(store, STORE_METHODS)
    if missing:
        detail = f"must be a run store (missing or not callable: {', '.join(missing)})"
        raise InvalidRunError(method, {"field": "store", "detail": detail})
    if not callable(handler):
        raise InvalidRunError(method, {"field": "handler", "detail": "must be callable"})
    for name, value, low in (
        ("concurrency", concurrency, 1),
        ("max_takeovers", max_takeovers, 0),
        ("scan_interval_ms", scan_interval_ms, 1),
    ):
        if type(value) is not int or value < low:
            raise InvalidRunError(
                method, {"field": name, "detail": f"must be an int of at least {low}"}
            )
    if handler_timeout_ms is not None and (
        type(handler_timeout_ms) is not int or handler_timeout_ms < 1
    ):
        raise InvalidRunError(
            method, {"field": "handler_timeout_ms", "detail": "must be None or an int >= 1"}
        )
    if type(poll_interval_s) not in (int, float) or not 0 < poll_interval_s <= 3600:
        raise InvalidRunError(
            method, {"field": "poll_interval_s", "detail": "must be a number in (0, 3600]"}
        )
    if owner is None:
        host = host_id if host_id is not None else (socket.gethostname() or "localhost")
        owner = OwnerId(host, os.getpid(), uuid.uuid4().hex)
    elif host_id is not None:
        raise InvalidRunError(
            method, {"field": "host_id", "detail": "give owner or host_id, not both"}
        )
    if clock is None:
        # The store's own clock, so that leases, scans and stamps agree.
        clock = getattr(store, "clock", None) or SystemClock()
    return Options(
        owner=admit_owner(method, "owner", owner),
        clock=admit_clock(method, clock),
        concurrency=concurrency,
        max_takeovers=max_takeovers,
        handler_timeout_ms=handler_timeout_ms,
        poll_interval_s=float(poll_interval_s),
        scan_interval_ms=scan_interval_ms,
    )


def emit(
    owner: OwnerId,
    clock: Clock,
    on_event: Callable[[WorkerEvent], object] | None,
    kind: EventKind,
    run_id: str,
    **details: Any,
) -> None:
    """Report one ``WorkerEvent``: logged on ``runstore.worker`` and handed to ``on_event``."""
    event = WorkerEvent(kind, run_id, owner, clock.now_ms(), **details)
    parts = [f"{name}={value}" for name, value in details.items() if value is not None]
    logger.info(
        "%s %s%s",
        kind,
        run_id,
        (" " + " ".join(parts)) if parts else "",
        extra={"run_id": run_id, "event": kind},
    )
    if on_event is not None:
        try:
            on_event(event)
        except Exception as error:
            logger.warning("on_event failed (%s)", type_name(error))


def attempt_store(store: Any) -> Any:
    """An attempt store over ``store`` when it keeps attempts, else None: an
    ``AttemptStore`` over a blocking SQL store, an ``AsyncAttemptStore`` over an
    ``AsyncRunStore``."""
    try:
        from ..aio import AsyncAttemptStore, AsyncRunStore
        from ..attempts import AttemptStore, AttemptStoreError
    except ImportError:  # pragma: no cover
        return None
    if isinstance(store, AsyncRunStore):
        return AsyncAttemptStore(store)
    try:
        return AttemptStore(store)
    except AttemptStoreError:
        return None
