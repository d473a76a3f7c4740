"""Stop every worker a test started, even when the test failed."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ._harness import STARTED


@pytest.fixture(autouse=True)
def _stop_started_workers() -> Iterator[None]:
    yield
    while STARTED:
        running = STARTED.pop()
        running.worker.stop(0)
        running.thread.join(5)
