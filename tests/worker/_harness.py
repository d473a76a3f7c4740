"""A worker run in a thread of the test, and its events, waited for without
sleeping on lease timing (the clock is a ``ManualClock`` the test moves)."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from runstore import ManualClock
from runstore.worker import Job, Worker, WorkerEvent

WAIT_S = 20.0

#: Every worker started and not yet stopped, so that a failed test's worker is
#: stopped at its teardown (``tests/worker/conftest.py``) instead of running on.
STARTED: list[Running] = []


class Running:
    """A ``Worker`` running in a daemon thread; ``events`` collects its events."""

    def __init__(
        self,
        store: Any,
        handler: Callable[[Job], object],
        clock: ManualClock,
        **options: Any,
    ) -> None:
        self.events: queue.Queue[WorkerEvent] = queue.Queue()
        self.seen: list[WorkerEvent] = []
        options.setdefault("poll_interval_s", 0.05)
        self.worker = Worker(store, handler, clock=clock, on_event=self.events.put, **options)
        self.thread = threading.Thread(target=self.worker.run, daemon=True)
        self.thread.start()
        STARTED.append(self)

    def wait_for(self, kind: str, run_id: str | None = None) -> WorkerEvent:
        """The next event of ``kind`` (for ``run_id``), waiting for progress."""
        deadline = time.monotonic() + WAIT_S
        for event in self.seen:
            if event.kind == kind and (run_id is None or event.run_id == run_id):
                self.seen.remove(event)
                return event
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"no {kind} event for {run_id}; saw {self.seen}")
            try:
                event = self.events.get(timeout=remaining)
            except queue.Empty:
                continue
            if event.kind == kind and (run_id is None or event.run_id == run_id):
                return event
            self.seen.append(event)

    def stop(self, grace_s: float = 0.0) -> None:
        """Stop the worker and wait for ``run()`` to return."""
        self.worker.stop(grace_s)
        if self in STARTED:
            STARTED.remove(self)
        self.thread.join(WAIT_S)
        assert not self.thread.is_alive(), "the worker did not stop"

    def drain_events(self) -> list[WorkerEvent]:
        """Every event not yet taken by ``wait_for``."""
        out = list(self.seen)
        self.seen.clear()
        while True:
            try:
                out.append(self.events.get_nowait())
            except queue.Empty:
                return out
