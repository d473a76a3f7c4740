"""``run_conformance`` consumed as a third party would: one call per strategy
or store, under its default budget (or the profile ``HYPOTHESIS_PROFILE``
names, when set). The unmutated built-in strategies and stores pass it: the
default budget raises no false alarm. (SqlConsensus's default run is in
test_conformance_reach.py, which also measures its reach.)

The built-ins' default runs take a minute or more each: they are a campaign
(``-m campaign``, a step of its own in ``.ci/run``), which the README's
``python -m pytest`` leaves out."""

from __future__ import annotations

from pathlib import Path

import pytest

import runstore
from runstore import ManualClock
from runstore.consensus import LocalConsensus
from runstore.model import ModelRunStore
from runstore.stateful import Capabilities, run_conformance
from runstore.stateful._base._profiles import profile_settings


@pytest.mark.campaign
def test_local_consensus_conforms():
    """LocalConsensus conforms too, including rollback and rebuilding its
    leases from the rows when the store reopens, and with attempts interleaved."""
    run_conformance(consensus_factory=LocalConsensus)


def in_memory_store(clock: ManualClock, path: Path) -> runstore.SqliteRunStore:
    return runstore.open(":memory:", clock=clock)


@pytest.mark.campaign
@pytest.mark.deep
def test_sqlite_store_in_memory_conforms():
    """A store factory alone: the in-memory adapter, which cannot reopen but
    offers the fault seam (and, being the adapter, also gets the attempt machine).

    The machines only: the exhaustive walks the default run adds (the small
    scope, then the attempt scope) are of ``runstore.open(":memory:")``, the
    adapter in memory over ``SqlConsensus`` with these capabilities, which is
    the store ``run_conformance(consensus_factory=SqlConsensus)`` walks through
    the adapter (test_conformance_reach.py): the same walks, made there.

    ``deep``: CI leaves it out. Its store is the SQL code of that default run
    (which also crashes and reopens its file, and injects faults); its rules
    are the same machines' less the reopening ones; and the store-factory-alone
    path of ``run_conformance`` under the default budget is CI's on PostgreSQL
    and through the asyncio API (a minute of CI time for no check of its own)."""
    run_conformance(
        store_factory=in_memory_store,
        capabilities=Capabilities(reopen=False, fault_injection=True),
        explore=False,
    )


class WithoutState:
    """A store that offers only the protocol's public reads (no ``state()``)."""

    def __init__(self, clock: ManualClock) -> None:
        self._inner = ModelRunStore(clock=clock)

    def __getattr__(self, name: str) -> object:
        if name == "state":
            raise AttributeError(name)
        return getattr(self._inner, name)


def test_store_without_state_is_compared_through_public_reads():
    """``whole_state=False``: the suite compares rows, facts, revisions and the
    change feed read through the public API. Under the ``ci`` profile: the
    default budget's verdicts are the campaigns' (this is the README's run)."""
    run_conformance(
        store_factory=lambda clock, path: WithoutState(clock),
        capabilities=Capabilities(reopen=False, whole_state=False, lease_introspection=False),
        settings=profile_settings("ci"),
        # The exhaustive walk through public reads is tests/stateful/explore's.
        explore=False,
    )
