"""``explore`` of a strategy at its own interface.

``explore(consensus_factory=...)`` walks a strategy twice: here, at the
``Consensus`` interface against ``ModelConsensus`` (``stateful._explore._strategy``),
and then inside the SQLite adapter against ``ModelRunStore``. The adapter checks
the snapshot, the staleness cutoff and the evidence itself before it asks the
strategy, so a strategy bug on one of those rules is masked there and seen
here. This module runs the interface walk and reports its failure as the
strategy machine reports one, written as that machine's regression file;
``explore`` (``_explore``, which imports this module, never the reverse) turns
it into an ``Exploration`` and joins the two walks.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from .._base._observe import Failure
from .._explore._strategy import (
    StrategyWalk,
    expected_state,
    strategy_log,
    strategy_scope,
    walk_strategy,
)
from ._regression import write_regression

#: The names the two walks of a strategy carry in reports.
INTERFACE = "strategy interface"
ADAPTER = "through the SQLite adapter"


@attrs.frozen
class InterfaceWalk:
    """What the walk at a strategy's interface did: the graph, the failure (as the strategy
    machine reports one) and its regression file, the depth k of the pass without
    deduplication, the seconds it took, and the names of the scope and of what was walked."""

    graph: StrategyWalk
    failure: Failure | None
    path: Path | None
    k: int
    elapsed_s: float
    scope: str
    target: str


def explore_interface(
    factory: Callable[[], Any],
    *,
    name: str,
    spec: str | None,
    scope: str,
    deadline: float | None,
    clock: Callable[[], float] = time.monotonic,
    out: Path | None = None,
    restore: bool = True,
    depth_k: int | None = None,
) -> InterfaceWalk:
    """Walk the strategy scope ``scope`` at the interface of the strategy ``factory()`` builds
    (named ``name``, importable as ``spec`` when not None) until ``deadline`` (by ``clock``);
    the shortest failing program is written to ``out`` as a regression file."""
    chosen = strategy_scope(scope)
    began = clock()
    graph = walk_strategy(
        factory, chosen, deadline=deadline, clock=clock, restore=restore, depth_k=depth_k
    )
    failure = None
    path = None
    found = graph.divergence
    if found is not None:
        failure = Failure(
            machine="consensus",
            target=name,
            log=strategy_log(found.program),
            expected_state=expected_state(chosen, found.leases),
            error=f"{found.check}: {found.message}",
            check=found.check,
        )
        if out is not None and spec is not None:
            path = write_regression(failure, out, spec=spec, kind="consensus")
    return InterfaceWalk(
        graph=graph,
        failure=failure,
        path=path,
        k=chosen.depth_k if depth_k is None else depth_k,
        elapsed_s=clock() - began,
        scope=chosen.name,
        target=f"{name} ({INTERFACE})",
    )
