"""Replaying a level of the walk in worker processes, for a store rebuilt by replay.

A store the explorer cannot copy (anyone's factory) is rebuilt on a fresh store
from the factory, with the setup and the shortest path to the source, before
every transition that changed its state; one node's transitions need nothing
of another's. So the nodes of a level are handed to worker processes (started at the first level
that has enough nodes), each a Python process running ``_main`` with stores
of its own from the factory, which it imports itself by name (``MODULE:FACTORY``, or a built-in
SQLite target's name): no store, connection or pool of the parent is shared.
A worker is sent a node as its shortest path, rebuilds the node on the
reference, applies every transition from it to its own store as ``Replayer``
does (``_from_node``: reads first, every check, every write read back) and
answers with the divergence, if any, a read-back finding, and its counts.
Meanwhile the parent expands the level on the reference.

The parent takes a level's answers in the walk's order: the first divergence
in that order is the one a walk in one process meets first, and a read-back
finding is reported once its level has no divergence, as ``Replayer.later``
does. Jobs and answers are pickled over the worker's standard input and
output (the worker's own prints go to its standard error).
"""

from __future__ import annotations

import os
import pickle
import selectors
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable
from typing import IO, Any

import attrs

from runstore.model import ModelRunStore

from .._base._capabilities import Capabilities
from ._replay import Divergence, Progress, Replayer, Sut, _from_node
from ._scope import Move, Scope, scope_named, start_ms
from ._walk import Dial, Node, SharedWalker, Walk, Walker, apply, start

#: A level with fewer nodes is replayed in the parent (a worker's start costs more).
LEVEL_AT_LEAST = 32
#: Scopes walked in one process whatever is asked (a worker's start costs more).
IN_ONE_PROCESS = ("tiny",)
#: What a worker process runs.
_ENTRY = "from runstore.stateful._explore._workers import _main; _main()"


@attrs.frozen
class Answer:
    """A worker's answer for one node: its index, the divergence and the read-back finding
    (None: none), the transitions applied and the fresh stores built; ``error`` names a
    failure of the worker itself (the factory's error, say)."""

    index: int
    divergence: Divergence | None
    later: Divergence | None
    transitions: int
    rebuilds: int
    error: str | None = None


def worker_count(requested: int | None) -> int:
    """The number of worker processes: ``requested``, or the machine's cores for None."""
    if requested is not None:
        return max(1, requested)
    return max(1, os.cpu_count() or 1)


class Workers:
    """Worker processes replaying nodes against stores of ``spec``'s factory."""

    def __init__(self, spec: str, capabilities: Capabilities, scope: Scope, count: int) -> None:
        self.processes: list[subprocess.Popen[bytes]] = []
        self.setup = (list(sys.path), spec, capabilities, scope.name)
        self.count = count

    def _start(self) -> None:
        """Start the processes (at the first level that needs them)."""
        try:
            for _ in range(self.count):
                process = subprocess.Popen(
                    [sys.executable, "-c", _ENTRY],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                )
                self.processes.append(process)
                _send(process, self.setup)
        except BaseException:
            self.close()
            raise

    def run(
        self,
        jobs: list[tuple[int, list[tuple[Move, Any]]]],
        deadline: float | None,
        meanwhile: Callable[[], bool],
        diverged: Callable[[int], None],
    ) -> dict[int, Answer]:
        """Replay every node of ``jobs`` (index and shortest path, in the walk's order), one
        at a time per worker, none started after ``deadline`` (``time.monotonic``): the
        answers by index. While no answer is waiting, ``meanwhile()`` is called until it
        returns False. An answer with a divergence is passed to ``diverged(index)``, and no
        job after it is started (the ones before it are still needed: an earlier node's
        divergence comes first)."""
        if not self.processes:
            self._start()
        pending = deque(jobs)
        answers: dict[int, Answer] = {}
        busy: set[int] = set()
        selector = selectors.DefaultSelector()

        def feed(number: int) -> None:
            if not pending or (deadline is not None and time.monotonic() > deadline):
                return
            _send(self.processes[number], pending.popleft())
            busy.add(number)

        try:
            for number, process in enumerate(self.processes):
                assert process.stdout is not None
                selector.register(process.stdout, selectors.EVENT_READ, number)
                feed(number)
            more = True
            while busy:
                events = selector.select(timeout=0 if more else None)
                for key, _ in events:
                    number = key.data
                    answer = _receive(self.processes[number])
                    busy.discard(number)
                    if answer.error is not None:
                        raise RuntimeError(f"an explore worker failed: {answer.error}")
                    answers[answer.index] = answer
                    if answer.divergence is not None:
                        diverged(answer.index)
                        while pending and pending[-1][0] > answer.index:
                            pending.pop()
                    feed(number)
                if more and not events:
                    more = meanwhile()
        finally:
            selector.close()
        return answers

    def close(self) -> None:
        """End the workers (each closes its stores and removes its folder)."""
        for process in self.processes:
            try:
                _send(process, None)
                assert process.stdin is not None
                process.stdin.close()
            except (OSError, ValueError):
                pass
        for process in self.processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            if process.stdout is not None:
                process.stdout.close()
        self.processes = []


def _send(process: subprocess.Popen[bytes], message: Any) -> None:
    assert process.stdin is not None
    pickle.dump(message, process.stdin, protocol=pickle.HIGHEST_PROTOCOL)
    process.stdin.flush()


def _receive(process: subprocess.Popen[bytes]) -> Answer:
    assert process.stdout is not None
    try:
        answer = pickle.load(process.stdout)
    except EOFError:
        raise RuntimeError(f"an explore worker ended (exit status {process.poll()})") from None
    assert isinstance(answer, Answer)
    return answer


def walk_levels(
    walker: Walker | SharedWalker,
    replayer: Replayer,
    workers: Workers | None,
    deadline: float | None,
    clock: Callable[[], float],
) -> bool:
    """The walk of ``_run_scope``, a level at a time, each level of ``LEVEL_AT_LEAST`` nodes
    or more replayed by ``workers`` while the parent expands it on the reference (a smaller
    one, or every one without workers, in this process). True when every level was walked
    with no failure and no read-back finding; False when the walk stopped (a divergence, a
    finding, a broken reference invariant, or ``deadline`` passed)."""
    graph = walker.graph
    scope = graph.scope
    progress = replayer.progress
    index = 0
    while index < len(graph.nodes):
        depth = graph.nodes[index].depth
        if replayer.later(depth):
            return False
        if depth >= scope.depth:
            break
        end = index
        while end < len(graph.nodes) and graph.nodes[end].depth == depth:
            end += 1
        if workers is None or end - index < LEVEL_AT_LEAST:
            for i in range(index, end):
                if deadline is not None and clock() > deadline:
                    return False
                if not walker.expand(i, keep=True):
                    return False
                if replayer.node(i, walker.last, walker.born) is not None:
                    return False
            index = end
            continue
        if deadline is not None and clock() > deadline:
            return False
        jobs = [(i, graph.path(i)) for i in range(index, end)]
        expanding = _Expansion(walker, index, end)
        answers = workers.run(jobs, deadline, expanding.step, expanding.diverged)
        while expanding.step():
            pass
        for i in range(index, expanding.end):
            answer = answers.get(i)
            if answer is None:  # not started before the deadline
                return False
            progress.transitions += answer.transitions
            progress.rebuilds += answer.rebuilds
            progress.depth = max(progress.depth, depth + 1)
            if answer.later is not None and progress.later is None:
                progress.later = answer.later
                replayer.later_level = depth
            if answer.divergence is not None:
                progress.divergence = answer.divergence
                return False
        if expanding.end < end:  # the reference broke an invariant (``graph.failure``)
            return False
        index = end
    return not replayer.later(scope.depth + 1)


class _Expansion:
    """A level's expansion on the reference, a node at a time (``step``); ``end`` is the
    level's end, or the node whose expansion broke an invariant."""

    def __init__(self, walker: Walker | SharedWalker, index: int, end: int) -> None:
        self.walker = walker
        self.next = index
        self.end = end
        #: No node after this one is expanded: a node before it diverged on the store.
        self.last = end

    def diverged(self, index: int) -> None:
        """Node ``index`` diverged: expand none after it (a walk in one process stops there)."""
        self.last = min(self.last, index)

    def step(self) -> bool:
        """Expand the next node: False when none is left (or the expansion failed)."""
        if self.next >= self.end or self.next > self.last:
            return False
        at = self.next
        self.next += 1
        if not self.walker.expand(at):
            self.end = at
            return False
        return True


# -- the worker --------------------------------------------------------------------


def _factory(spec: str) -> Any:
    from .._targets._blocking import blocking_factory
    from .._targets._builtin import BUILTIN_TARGETS, load_factory

    if ":" in spec:
        return blocking_factory(load_factory(spec))
    return BUILTIN_TARGETS[spec].store_factory


def _chain(scope: Scope, path: list[tuple[Move, Any]]) -> Walk:
    """A walk holding the start and the nodes along ``path`` (the node replayed is last)."""
    model, dial = start(scope)
    graph = Walk(scope)
    node = Node(model._state, dial.ms, -1, None, None, 0)
    graph.nodes.append(node)
    for move, _ in path:
        outcome, state, clock_ms = apply(model, dial, node, move)
        node = Node(state, clock_ms, len(graph.nodes) - 1, move, outcome, node.depth + 1)
        graph.nodes.append(node)
    return graph


def _serve(inbound: IO[bytes], outbound: IO[bytes]) -> None:
    paths, spec, capabilities, scope_name = pickle.load(inbound)
    sys.path[:] = paths
    scope = scope_named(scope_name)
    sut: Sut | None = None
    model = ModelRunStore(clock=Dial(start_ms()))
    dial = model._clock
    assert isinstance(dial, Dial)
    try:
        while True:
            job = pickle.load(inbound)
            if job is None:
                return
            index, path = job
            try:
                if sut is None:
                    sut = Sut(_factory(spec), capabilities, scope, restore=False)
                graph = _chain(scope, path)
                last = len(graph.nodes) - 1
                progress = Progress()
                found = _from_node(graph, last, graph.nodes[last], sut, model, dial, progress)
                answer = Answer(
                    index, found, progress.later, progress.transitions, progress.rebuilds
                )
            except Exception as error:
                answer = Answer(index, None, None, 0, 0, f"{type(error).__name__}: {error}")
            pickle.dump(answer, outbound, protocol=pickle.HIGHEST_PROTOCOL)
            outbound.flush()
    finally:
        if sut is not None:
            sut.close()


def _main() -> None:
    # The answers go out on a copy of standard output; anything the store prints goes to
    # standard error.
    outbound = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    _serve(sys.stdin.buffer, outbound)
