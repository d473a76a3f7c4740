"""``run_conformance``: the one call a third party makes to check its store or
its consensus strategy against the reference model."""

from __future__ import annotations

import attrs
from hypothesis import settings as Settings
from hypothesis.stateful import RuleBasedStateMachine, run_state_machine_as_test

from ._attempt_machine import attempt_comparison_for, builds_sqlite_stores
from ._capabilities import FULL_STORE, Capabilities
from ._consensus_machine import ConsensusFactory, consensus_comparison_for
from ._machine import StoreFactory, comparison_for
from ._targets import raw_writer_for, sqlite_store_factory


def conformance_machines(
    *,
    store_factory: StoreFactory | None = None,
    consensus_factory: ConsensusFactory | None = None,
    capabilities: Capabilities = FULL_STORE,
) -> list[type[RuleBasedStateMachine]]:
    """The machines ``run_conformance`` runs, in order, for these arguments."""
    if store_factory is None and consensus_factory is None:
        raise TypeError("run_conformance needs a store_factory, a consensus_factory, or both")
    machines: list[type[RuleBasedStateMachine]] = []
    if consensus_factory is not None:
        name = getattr(consensus_factory, "__qualname__", "strategy")
        machines.append(consensus_comparison_for(consensus_factory, capabilities, name=name))
        if store_factory is None:
            # The strategy inside the SQLite adapter, on a file: the adapter
            # offers state(), its fault seam and reopening.
            in_adapter = attrs.evolve(capabilities, whole_state=True, fault_injection=True)
            factory = sqlite_store_factory(consensus_factory, file=in_adapter.reopen)
            machines.append(
                comparison_for(
                    factory, in_adapter, name=f"sqlite+{name}", raw_writer=raw_writer_for(factory)
                )
            )
            machines.append(
                attempt_comparison_for(
                    factory,
                    in_adapter,
                    name=f"sqlite+{name}+attempts",
                    raw_writer=raw_writer_for(factory),
                )
            )
    if store_factory is not None:
        name = getattr(store_factory, "__qualname__", "store")
        machines.append(
            comparison_for(
                store_factory,
                capabilities,
                name=name,
                raw_writer=raw_writer_for(store_factory),
            )
        )
        if builds_sqlite_stores(store_factory):
            # Attempts live in the SQLite adapter's database: the same store
            # again, with attempt rules interleaved.
            machines.append(
                attempt_comparison_for(
                    store_factory,
                    capabilities,
                    name=f"{name}+attempts",
                    raw_writer=raw_writer_for(store_factory),
                )
            )
    return machines


def run_conformance(
    *,
    store_factory: StoreFactory | None = None,
    consensus_factory: ConsensusFactory | None = None,
    capabilities: Capabilities = FULL_STORE,
    settings: Settings | None = None,
) -> None:
    """Check a store, a consensus strategy, or both against the reference model.

    ``store_factory(clock, path)`` builds the store under test on the shared
    ``ManualClock``; after a simulated crash it is called again with the same
    ``path`` to reopen. ``consensus_factory()`` builds a fresh strategy: it is
    compared with ``ModelConsensus`` at the strategy interface and, unless a
    ``store_factory`` is also given, inside the SQLite adapter against
    ``ModelRunStore``. When the store under test is the SQLite adapter (a
    ``runstore.sqlite.SqliteRunStore``, as every strategy is put inside), the
    run-store machine runs a second time with ``AttemptStore`` rules
    interleaved, against ``ModelAttemptStore``. ``capabilities`` says what the
    store can do (see ``Capabilities``). ``settings`` defaults to the loaded
    Hypothesis profile.

    Returns when everything conforms; raises Hypothesis's failure, with the
    shrunk program printed, when something does not.
    """
    for machine in conformance_machines(
        store_factory=store_factory,
        consensus_factory=consensus_factory,
        capabilities=capabilities,
    ):
        run_state_machine_as_test(machine, settings=settings or Settings())
