"""An async store whose ``transition_owned`` drops its ``guard``: every
guarded settle is made as if unguarded (a cancellation the guard demands, or
forbids, is no longer looked at).

``runstore.aopen``'s store with one method replaced; the conformance suite
drives it through its synchronous stand-in. Not in ``ZOO`` (its test is
``tests/stateful/campaigns/test_async_zoo.py``)."""

import runstore
from runstore.aio import AsyncRunStore
from runstore.stateful import Capabilities

KIND = "store"
EXPECTED_CHECK = "AdmissionViolation"

#: In memory: no reopen; the SQL stores' fault seam is there.
capabilities = Capabilities(reopen=False, fault_injection=True)


class DropsGuard(AsyncRunStore):
    async def transition_owned(self, run_id, owner, to_status, state_json=None, guard=None):
        return await super().transition_owned(run_id, owner, to_status, state_json)


async def factory(clock, path):
    store = await runstore.aopen(":memory:", clock=clock)
    store.__class__ = DropsGuard
    return store
