"""``explore`` of a strategy at its own interface, as an ``Exploration``.

``explore(consensus_factory=...)`` walks a strategy twice: here, at the
``Consensus`` interface against ``ModelConsensus`` (``stateful._explore._strategy``),
and then inside the SQLite adapter against ``ModelRunStore``. The adapter checks
the snapshot, the staleness cutoff and the evidence itself before it asks the
strategy, so a strategy bug on one of those rules is masked there and seen
here. This module turns the interface walk into an ``Exploration`` (its
shortest failing program written as the strategy machine's regression file)
and joins the two walks' results.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .._base._observe import Failure
from .._explore._strategy import expected_state, strategy_log, strategy_scope, walk_strategy
from ._explore import Counterexample, Exploration, program_text
from ._regression import write_regression

#: The names the two walks of a strategy carry in reports.
INTERFACE = "strategy interface"
ADAPTER = "through the SQLite adapter"


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
) -> Exploration:
    """Walk the strategy scope ``scope`` at the interface of the strategy ``factory()`` builds
    (named ``name``, importable as ``spec`` when not None) until ``deadline`` (by ``clock``);
    the shortest failing program is written to ``out`` as a regression file."""
    chosen = strategy_scope(scope)
    began = clock()
    graph = walk_strategy(
        factory, chosen, deadline=deadline, clock=clock, restore=restore, depth_k=depth_k
    )
    target = f"{name} ({INTERFACE})"
    counterexample = None
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
        path = None
        if out is not None and spec is not None:
            path = write_regression(failure, out, spec=spec, kind="consensus")
        counterexample = Counterexample(
            program=program_text(failure),
            check=found.check,
            path=path,
            message=found.message,
            target=target,
        )
    k = chosen.depth_k if depth_k is None else depth_k
    return Exploration(
        exhausted=graph.exhausted and found is None,
        states=len(graph.nodes),
        transitions=graph.transitions,
        depth=graph.depth,
        elapsed_s=clock() - began,
        failure=counterexample,
        scope=chosen.name,
        target=target,
        programs=graph.programs,
        programs_depth=k if graph.programs else 0,
        rebuilds=graph.rebuilds,
        restores=graph.restores,
    )


def joined(name: str, parts: tuple[Exploration, ...]) -> Exploration:
    """One ``Exploration`` of ``parts`` (the walks of one strategy, in the order made):
    exhausted when every part was, the counts summed, the first failure, and the last
    part's walk of the attempt scope, if it made one."""
    failure = next((part.failure for part in parts if part.failure is not None), None)
    return Exploration(
        exhausted=all(part.exhausted for part in parts) and failure is None,
        states=sum(part.states for part in parts),
        transitions=sum(part.transitions for part in parts),
        depth=max(part.depth for part in parts),
        elapsed_s=sum(part.elapsed_s for part in parts),
        failure=failure,
        scope=parts[0].scope,
        target=name,
        programs=sum(part.programs for part in parts),
        programs_depth=max(part.programs_depth for part in parts),
        rebuilds=sum(part.rebuilds for part in parts),
        restores=sum(part.restores for part in parts),
        parts=parts,
        attempts=parts[-1].attempts,
    )
