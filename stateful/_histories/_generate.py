"""Concurrent histories generated from the reference model, linearizable by
construction (for testing the checker and for its benchmark).

``generate_history`` runs several simulated clients, each a torture
``Worker`` walking the same few runs, against one ``ModelRunStore``. Every
call is executed on the model at a *linearization point* on a virtual
timeline, and gets an interval around that point: invoked some time before
it (after the client's previous call returned) and returning some time after
it (before the client's next call). Intervals of different clients overlap,
so the checker has real orders to search, and the points themselves are a
legal order: the history is linearizable. Each client's store clock is the
virtual time plus that client's skew, and the readings the model takes are
recorded with the call, as a ``RecordingClock`` would.

Faults: with ``pending`` probability a call is recorded without a return and
its client dies there (a new incarnation, a new owner, takes its place); the
call either took effect on the model or, with ``lost`` probability, never
reached it. ``mutate`` changes one recorded answer afterwards (see
``inject_violation``): the history is then usually, though not always, no
longer linearizable (another order may explain the new answer), so tests
that need certainty ask a brute-force oracle (``brute_force``).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator, Sequence
from typing import Any

import attrs

from runstore import (
    AlreadyClaimed,
    Claimed,
    FenceLost,
    OwnerId,
    RunRow,
    RunStoreError,
    SnapshotChanged,
    Updated,
)
from runstore.model import ModelRunStore

from ._history import Operation, OperationStatus
from ._spec import Spec, initial_state, make_node, matches
from ._workload import Worker


class _VirtualClock:
    """The model's clock: the current call's client time, readings recorded."""

    def __init__(self) -> None:
        self.ms = 0
        self.readings: list[int] = []

    def now_ms(self) -> int:
        self.readings.append(self.ms)
        return self.ms

    def sleep_until(self, deadline_ms: int) -> None:
        raise RuntimeError("virtual time does not wait")

    async def asleep_until(self, deadline_ms: int) -> None:
        raise RuntimeError("virtual time does not wait")


class _Died(Exception):
    """A client's call was left pending: the client stops here."""


@attrs.define
class _Open:
    """A client's last call, whose return is decided when its next call comes."""

    op: Operation
    point: int


class _Simulation:
    def __init__(
        self,
        seed: int,
        *,
        clients: int,
        runs: int,
        settle: bool,
        lineages: bool,
        overlap_ns: int,
        pending: float,
        lost: float,
        skew_ms: int,
        speed: float,
        workloads: Sequence[str] = ("mixed",),
    ) -> None:
        self.rng = random.Random(seed)
        self.workloads = tuple(workloads)
        self.clock = _VirtualClock()
        self.model = ModelRunStore(self.clock)
        self.clock.readings.clear()
        self.overlap_ns = overlap_ns
        self.pending = pending
        self.lost = lost
        self.speed = speed
        self.now_ns = 10_000_000
        self.ids = itertools.count(1)
        self.operations: list[Operation] = []
        self.open: dict[int, _Open | None] = {}
        self.last_return: dict[int, int] = {}
        self.skews = [self.rng.randint(-skew_ms, skew_ms) for _ in range(clients)]
        self.workers: list[Worker] = []
        self.incarnations = [0] * clients
        self.settle, self.lineages, self.window = settle, lineages, runs
        for index in range(clients):
            self.workers.append(self._worker(index))

    def _worker(self, index: int) -> Worker:
        self.incarnations[index] += 1
        me = OwnerId(f"host-{index}", 100 + index, f"n{self.incarnations[index]}")
        worker = Worker(
            _ClientStore(self, index),
            _ClientClock(self, index),
            me,
            random.Random(self.rng.randrange(2**32)),
            "r",
            self.window,
            settle=self.settle,
            lineages=self.lineages,
            workloads=self.workloads,
            # Every client in the same phase: a phase is 60 recorded calls.
            phase=lambda: len(self.operations) // 60,
        )
        if index < len(self.workers):
            # A new incarnation joins the window where its predecessor was.
            worker.frontier = self.workers[index].frontier
        return worker

    def client_ms(self, index: int) -> int:
        return 1_000_000 + self.skews[index] + int(self.now_ns * self.speed)

    def call(self, index: int, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        rng = self.rng
        self.now_ns += rng.randrange(1, self.overlap_ns // 2 + 2)
        point = self.now_ns
        self._close(index, point)
        earliest = max(self.last_return.get(index, 0) + 1, point - self.overlap_ns)
        invoked = rng.randrange(earliest, point + 1)
        self.clock.ms = self.client_ms(index)
        self.clock.readings = []
        dies = rng.random() < self.pending
        reached = not (dies and rng.random() < self.lost)
        value: Any = None
        error: str | None = None
        raised: RunStoreError | None = None
        if reached:
            try:
                value = getattr(self.model, method)(*args, **kwargs)
            except RunStoreError as failure:
                error, raised = failure.code, failure
        op = Operation(
            id=f"c{index}.{self.incarnations[index]}:{next(self.ids)}",
            process=f"c{index}.{self.incarnations[index]}",
            method=method,
            args=args,
            kwargs=kwargs,
            invoked_ns=invoked,
            returned_ns=None,
            status="pending",
            value=value,
            error=error,
            unknown=True,
            clock_ms=tuple(self.clock.readings),
        )
        if dies:
            self.operations.append(attrs.evolve(op, value=None, error=None))
            self.open[index] = None
            self.last_return.pop(index, None)
            raise _Died
        self.open[index] = _Open(op, point)
        if raised is not None:
            raise raised
        return value

    def _close(self, index: int, before: int) -> None:
        """Give the client's previous call its return, before ``before``."""
        previous = self.open.get(index)
        if previous is None:
            return
        op = previous.op
        latest = min(before - 1, previous.point + self.overlap_ns)
        returned = self.rng.randrange(previous.point, max(previous.point, latest) + 1)
        status: OperationStatus = "error" if op.error is not None else "ok"
        self.operations.append(
            attrs.evolve(
                op,
                returned_ns=returned,
                status=status,
                unknown=op.error == "persistence_failed",
            )
        )
        self.last_return[index] = returned
        self.open[index] = None

    def run(self, operations: int) -> list[Operation]:
        while len(self.operations) < operations:
            index = self.rng.randrange(len(self.workers))
            try:
                self.workers[index].step()
            except _Died:
                self.workers[index] = self._worker(index)
        for index in range(len(self.workers)):
            self._close(index, self.now_ns + self.overlap_ns + 1)
        self.operations.sort(key=lambda op: (op.invoked_ns, op.id))
        return self.operations


class _ClientStore:
    """What a simulated client's worker calls: every method goes to the model
    through the simulation, which records it."""

    def __init__(self, simulation: _Simulation, index: int) -> None:
        self._simulation = simulation
        self._index = index

    def __getattr__(self, method: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            return self._simulation.call(self._index, method, args, kwargs)

        return call


class _ClientClock:
    def __init__(self, simulation: _Simulation, index: int) -> None:
        self._simulation = simulation
        self._index = index

    def now_ms(self) -> int:
        return self._simulation.client_ms(self._index)


def generate_history(
    seed: int,
    operations: int = 200,
    *,
    clients: int = 4,
    runs: int = 2,
    settle: bool = True,
    lineages: bool = True,
    overlap_ns: int = 3_000,
    pending: float = 0.0,
    lost: float = 0.5,
    skew_ms: int = 5_000,
    speed: float = 0.05,
    workloads: Sequence[str] = ("mixed",),
) -> list[Operation]:
    """A linearizable history of about ``operations`` calls (see the module
    docstring). ``speed``: store-clock milliseconds per nanosecond of the
    virtual timeline (a call takes about ``overlap_ns / 4`` of it; at the
    default a lease goes stale after about 800 calls). ``workloads``: the
    torture workloads the clients take turns at, all in the same one at a
    time (``runstore.stateful._histories._workload.WORKLOADS``); a held
    owner skips its turns until its lease is stale."""
    simulation = _Simulation(
        seed,
        clients=clients,
        runs=runs,
        settle=settle,
        lineages=lineages,
        overlap_ns=overlap_ns,
        pending=pending,
        lost=lost,
        skew_ms=skew_ms,
        speed=speed,
        workloads=workloads,
    )
    return simulation.run(operations)


_SWAPS: dict[type, Any] = {
    Claimed: AlreadyClaimed(),
    AlreadyClaimed: Claimed(0),
    Updated: FenceLost(),
    FenceLost: Updated(),
    SnapshotChanged: AlreadyClaimed(),
}


def inject_violation(history: Sequence[Operation], seed: int) -> tuple[list[Operation], str]:
    """A copy of ``history`` with one definite answer changed, and which.

    Outcomes are swapped for a neighbour (``Claimed`` for ``AlreadyClaimed``,
    ``Updated`` for ``FenceLost``, ...); a read's row gets another
    heartbeat; ``create``'s success becomes a ``constraint`` error.
    """
    rng = random.Random(seed)
    candidates = [
        index
        for index, op in enumerate(history)
        if op.definite
        and (
            (op.status == "ok" and (type(op.value) in _SWAPS or isinstance(op.value, RunRow)))
            or (op.method == "create" and op.status == "ok")
        )
    ]
    if not candidates:
        raise ValueError("nothing in the history to change")
    index = rng.choice(candidates)
    op = history[index]
    if op.method == "create":
        changed = attrs.evolve(op, status="error", error="constraint", value=None)
    elif isinstance(op.value, RunRow):
        beat = op.value.heartbeat_at_ms
        changed = attrs.evolve(op, value=attrs.evolve(op.value, heartbeat_at_ms=(beat or 0) + 1))
    else:
        changed = attrs.evolve(op, value=_SWAPS[type(op.value)])
    mutated = list(history)
    mutated[index] = changed
    return mutated, op.id


def _orders(ops: Sequence[Operation]) -> Iterator[tuple[Operation, ...]]:
    """Every order of ``ops`` that respects real time."""
    if not ops:
        yield ()
        return
    for index, op in enumerate(ops):
        rest = [o for j, o in enumerate(ops) if j != index]
        if any(o.returned_ns is not None and o.returned_ns < op.invoked_ns for o in rest):
            continue
        for tail in _orders(rest):
            yield (op, *tail)


def brute_force(ops: Sequence[Operation]) -> bool:
    """Linearizability by enumeration, for small histories (the test oracle).

    Operations of unknown outcome are each either left out or kept with
    their answer ignored. Exponential: a dozen operations at most.
    """
    unknown = [op for op in ops if op.unknown]
    definite = [op for op in ops if not op.unknown]
    for keep in itertools.product((False, True), repeat=len(unknown)):
        chosen = definite + [op for op, kept in zip(unknown, keep, strict=True) if kept]
        # An unknown operation's return does not bind anything.
        chosen = [attrs.evolve(op, returned_ns=None) if op.unknown else op for op in chosen]
        for order in _orders(chosen):
            spec = Spec()
            node = make_node(initial_state(None))
            for op in order:
                node, result = spec.apply(node, op)
                if not op.unknown and not matches(op, result):
                    break
            else:
                return True
    return False
