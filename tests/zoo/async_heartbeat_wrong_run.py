"""An async store whose ``heartbeat`` renews the wrong run: a heartbeat of
``a`` goes to ``b`` and one of ``b`` to ``a`` (a mix-up of arguments in an
asyncio face that forwards its calls).

``runstore.aopen``'s store with one method replaced; the conformance suite
drives it through its synchronous stand-in. Not in ``ZOO`` (its test is
``tests/stateful/campaigns/test_async_zoo.py``)."""

import runstore
from runstore.aio import AsyncRunStore
from runstore.stateful import Capabilities

KIND = "store"
EXPECTED_CHECK = "OutcomeMismatch"

#: In memory: no reopen; the SQL stores' fault seam is there.
capabilities = Capabilities(reopen=False, fault_injection=True)

_SWAPPED = {"a": "b", "b": "a"}


class WrongRun(AsyncRunStore):
    async def heartbeat(self, run_id, owner, now_ms):
        return await super().heartbeat(_SWAPPED.get(run_id, run_id), owner, now_ms)


async def factory(clock, path):
    store = await runstore.aopen(":memory:", clock=clock)
    store.__class__ = WrongRun
    return store
