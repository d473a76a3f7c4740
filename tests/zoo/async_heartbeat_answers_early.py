"""An async store whose ``heartbeat`` answers ``Updated()`` at once and
leaves the write to a task of its own: the caller is told its lease was
renewed before the store knows (a fenced-out owner hears ``Updated``, a
refused call too: the first program's malformed heartbeat shows it).

``runstore.aopen``'s store with one method replaced; the conformance suite
drives it through its synchronous stand-in. Not in ``ZOO`` (its test is
``tests/stateful/campaigns/test_async_zoo.py``)."""

import asyncio

import runstore
from runstore import Updated
from runstore.aio import AsyncRunStore
from runstore.stateful import Capabilities

KIND = "store"
EXPECTED_CHECK = "AdmissionViolation"

#: In memory: no reopen; the SQL stores' fault seam is there.
capabilities = Capabilities(reopen=False, fault_injection=True)


class AnswersEarly(AsyncRunStore):
    async def heartbeat(self, run_id, owner, now_ms):
        pending = getattr(self, "pending", None)
        if pending is None:
            pending = self.pending = set()
        task = asyncio.ensure_future(super().heartbeat(run_id, owner, now_ms))
        pending.add(task)
        task.add_done_callback(_forget)
        task.add_done_callback(pending.discard)
        return Updated()


def _forget(task):
    """Whatever the write raised is never heard of (asyncio would log it)."""
    if not task.cancelled():
        task.exception()


async def factory(clock, path):
    store = await runstore.aopen(":memory:", clock=clock)
    store.__class__ = AnswersEarly
    return store
