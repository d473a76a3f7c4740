"""Moves that change nothing are seen to have done so once per run of them (issue 25).

A move the reference says changes nothing (a read, a refusal) is judged as
leaving the store's state as it was read, and whether it did is seen once
before the node's next write and at its end, and once after a write's
read-back: on a store the explorer cannot copy (anyone's factory) by reading
the state, on our own stores by their change token. When the state moved
after all, the source is put back (rebuilt, or our store's copy restored)
and the moves applied again one at a time, the state read after each, so the
move that moved it is named in a shortest program, as a walk that reads the
state after every move names it. The planted bugs are the model as a store
(not ours) and our SQLite and PostgreSQL stores, each with a move the
reference says changes nothing that writes.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import runstore
from runstore import ManualClock
from runstore.model import ModelRunStore
from runstore.stateful import Capabilities, explore

MODEL_ONLY = Capabilities(reopen=False)


class RefusedHeartbeatWrites(ModelRunStore):
    """A planted bug: a heartbeat refused on a run nobody owns asks for its cancellation
    (a refusal that writes)."""

    def heartbeat(self, run_id, owner, now_ms):
        out = super().heartbeat(run_id, owner, now_ms)
        row = self._state.rows.get(run_id)
        if row is not None and row.owner is None and row.cancel_requested_at_ms is None:
            self.request_cancel(run_id, self._clock.now_ms())
        return out


class ListingWritesWhileRunning(ModelRunStore):
    """A planted bug: an unfiltered ``list_runs`` asks for the cancellation of a running run
    (a read that writes, only once a write made a run running)."""

    def list_runs(self, *args, **kwargs):
        page = super().list_runs(*args, **kwargs)
        if not args and not kwargs:
            for run_id, row in self._state.rows.items():
                if row.status == "running" and row.cancel_requested_at_ms is None:
                    self.request_cancel(run_id, self._clock.now_ms())
                    break
        return page


def _refused_heartbeat(clock: ManualClock, path: Path) -> ModelRunStore:
    return RefusedHeartbeatWrites(clock=clock)


def _listing_writes(clock: ManualClock, path: Path) -> ModelRunStore:
    return ListingWritesWhileRunning(clock=clock)


def _moves(program: str) -> list[str]:
    return [line for line in program.splitlines() if line and not line.startswith("create(")]


def test_a_refusal_that_writes_is_named_in_a_one_move_program() -> None:
    """The refused heartbeat on the start's unowned run moves the state: the program is that
    one heartbeat, and the check is the state's."""
    result = explore(
        store_factory=_refused_heartbeat, capabilities=MODEL_ONLY, scope="tiny", depth_k=0
    )
    assert result.failure is not None, result.describe()
    moves = _moves(result.failure.program)
    assert len(moves) == 1, result.failure.program
    assert moves[0].startswith("heartbeat("), result.failure.program
    assert result.failure.check == "UnfencedWriteAccepted", result.failure


def test_a_read_back_that_writes_is_named_after_its_write() -> None:
    """The unfiltered listing writes once a run is running: found after the first write that
    makes one running, as the read that moved the state (two moves)."""
    result = explore(
        store_factory=_listing_writes, capabilities=MODEL_ONLY, scope="tiny", depth_k=0
    )
    assert result.failure is not None, result.describe()
    moves = _moves(result.failure.program)
    assert len(moves) == 2, result.failure.program
    assert moves[-1].startswith("list_runs("), result.failure.program
    assert result.failure.check == "RevisionMismatch", result.failure


# -- our own stores: the change token in place of a read --------------------------------


class _RefusalThatWrites:
    """Mixed into one of our stores: as ``RefusedHeartbeatWrites``."""

    def heartbeat(self, run_id, owner, now_ms):
        out = super().heartbeat(run_id, owner, now_ms)
        row = self.get(run_id)
        if row is not None and row.owner is None and row.cancel_requested_at_ms is None:
            self.request_cancel(run_id, self.clock.now_ms())
        return out


class _ListingThatWrites:
    """Mixed into one of our stores: as ``ListingWritesWhileRunning``."""

    def list_runs(self, *args, **kwargs):
        page = super().list_runs(*args, **kwargs)
        if not args and not kwargs:
            for row in page.runs:
                if row.status == "running" and row.cancel_requested_at_ms is None:
                    self.request_cancel(row.run_id, self.clock.now_ms())
                    break
        return page


def _ours(backend: str, mistake: type) -> Callable[[ManualClock, Path], Any]:
    """A factory of our own ``backend`` store with ``mistake``'s methods first (a subclass
    with no member of its own, which the explorer copies and puts back)."""
    if backend == "postgresql":
        from runstore.stateful._targets._postgres import postgres_store_factory

        from ..._postgres import require_server

        require_server()
        inner = postgres_store_factory()
    else:

        def inner(clock: ManualClock, path: Path) -> Any:
            return runstore.open(path, clock=clock)

    def factory(clock: ManualClock, path: Path) -> Any:
        store = inner(clock, path)
        store.__class__ = type(mistake.__name__, (mistake, type(store)), {})
        return store

    return factory


BACKENDS = pytest.mark.parametrize("backend", ["sqlite", "postgresql"])


@BACKENDS
def test_on_our_store_a_refusal_that_writes_is_named_in_a_one_move_program(
    backend: str,
) -> None:
    """On our own store the moves that change nothing are not read after each: the change
    token (SQLite's count of changed rows, PostgreSQL's trigger-moved counter) says the
    refused heartbeat moved the data, and the program is that one heartbeat."""
    result = explore(store_factory=_ours(backend, _RefusalThatWrites), scope="tiny", depth_k=0)
    assert result.failure is not None, result.describe()
    assert result.restores > 0, "the store was not taken for one of ours"
    moves = _moves(result.failure.program)
    assert len(moves) == 1, result.failure.program
    assert moves[0].startswith("heartbeat("), result.failure.program


@BACKENDS
def test_on_our_store_a_read_back_that_writes_is_named_after_its_write(backend: str) -> None:
    """As on a store not ours: the listing that writes is named after the write that made a
    run running, the source put back from its copy (the walk's other copies stay usable)."""
    result = explore(store_factory=_ours(backend, _ListingThatWrites), scope="tiny", depth_k=0)
    assert result.failure is not None, result.describe()
    assert result.restores > 0, "the store was not taken for one of ours"
    moves = _moves(result.failure.program)
    assert len(moves) == 2, result.failure.program
    assert moves[-1].startswith("list_runs("), result.failure.program
