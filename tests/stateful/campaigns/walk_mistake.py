"""A torture store factory with a mistake planted in the torture's own walk,
not in the store: after 20 steps an owner's step raises. The store is the
shipped SQLite store, so every answer is right; only the run is cut short.
``runstore torture --store tests.stateful.campaigns.walk_mistake:factory``
must not pass it as a whole run."""

from __future__ import annotations

from typing import Any

import runstore
from runstore.stateful._histories import _workload

STEPS = 20


def factory(clock: Any, target: str) -> Any:
    step = _workload.Worker.step
    if not getattr(step, "planted", False):

        def planted(self: _workload.Worker) -> None:
            if self.steps >= STEPS:
                raise RuntimeError("a mistake planted in the walk")
            step(self)

        planted.planted = True  # type: ignore[attr-defined]
        _workload.Worker.step = planted  # type: ignore[method-assign]
    return runstore.open(target, clock=clock, durability="normal")
