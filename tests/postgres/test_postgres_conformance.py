"""``run_conformance`` on PostgreSQL stores: the run-store machine and the
attempt machine against the reference, with crashes (every connection to the
database ended, then the store reopened) and the fault seam, and the
server-clock machine (the store's clock checked against the server's); and,
with fewer examples of the profile's longer programs, the session machine
(the server ends the store's idle sessions) and the schema machine (the
schema option).

Each example gets a fresh database. The PostgreSQL examples are fewer than the
loaded profile's (at most ``EXAMPLES``): every one of them pays for a database
and a round trip per statement, and the SQLite runs cover the profile's full
count of the same machines.

The store machines' runs take a minute or more each: they are a campaign
(``-m campaign``, a step of its own in ``.ci/run``), which the README's
``python -m pytest`` leaves out.
"""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from runstore.stateful import (
    Capabilities,
    SchemaOptionCheck,
    SessionLossCheck,
    conformance_machines,
    run_conformance,
)
from runstore.stateful._targets._postgres import postgres_store_factory

from .. import _postgres

EXAMPLES = 40
#: Examples of the session and schema machines (each step waits for the server).
SESSION_EXAMPLES = 8


@pytest.mark.campaign
@pytest.mark.parametrize("fast_path", [True, False], ids=["one-round-trip", "general"])
def test_postgres_store_conforms(fast_path: bool) -> None:
    """PostgresRunStore over SqlConsensus matches ModelRunStore step by step,
    and with AttemptStore rules interleaved matches ModelAttemptStore, and
    refuses lease operations exactly while its clock is too far from the
    server's, on both paths: one server-side function per operation (the
    default), and the general path's statement per step."""
    _postgres.require_server()
    current = settings()
    run_conformance(
        store_factory=postgres_store_factory(fast_path=fast_path),
        capabilities=Capabilities(reopen=True, fault_injection=True, server_clock=True),
        settings=settings(current, max_examples=min(current.max_examples, EXAMPLES)),
    )


@pytest.mark.parametrize("fast_path", [True, False], ids=["one-round-trip", "general"])
def test_postgres_session_and_schema_conform(fast_path: bool) -> None:
    """With ``postgres_server=True``: the store's next operation after the
    server ended its idle sessions answers as the reference does, and the
    schema option opens (and refuses) as documented, in programs as long as
    the profile's (the default budget's are shorter)."""
    _postgres.require_server()
    current = settings()
    machines = conformance_machines(
        store_factory=postgres_store_factory(fast_path=fast_path),
        capabilities=Capabilities(reopen=True, postgres_server=True),
    )
    chosen = [m for m in machines if issubclass(m, SessionLossCheck | SchemaOptionCheck)]
    assert len(chosen) == 2
    for machine in chosen:
        run_state_machine_as_test(
            machine,
            settings=settings(current, max_examples=min(current.max_examples, SESSION_EXAMPLES)),
        )
