"""The attempt-store pairings every attempt test runs on, and their agreement.

A pairing is a run store and an attempt store over it: the model
(``ModelRunStore`` + ``ModelAttemptStore``), the SQLite adapter in memory and
in a file, and PostgreSQL (``runstore.open`` + ``AttemptStore``). ``env`` is
parametrized over all four; other attempt test files import it from here. The tests in
this file check the pairing itself and replay one script on every pairing to
compare whole attempt states.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

import runstore
from runstore import (
    Activated,
    LivenessEvidence,
    ManualClock,
    OwnerId,
    RunSnapshot,
    RunStore,
    Transitioned,
)
from runstore.attempts import (
    ABSENT,
    Attempt,
    AttemptId,
    AttemptPatch,
    AttemptStore,
    FinishAttempt,
)
from runstore.model import ModelAttemptStore, ModelRunStore

from .. import _postgres as _pg

OWNER = OwnerId("host-a", 100, "nonce-a")
RIVAL = OwnerId("host-b", 200, "nonce-b")
RUN = "run-1"
STEP = "step-digest-1"


def _model(clock: ManualClock, _tmp: Path) -> RunStore:
    return ModelRunStore(clock=clock)


def _sqlite_memory(clock: ManualClock, _tmp: Path) -> RunStore:
    return runstore.open(":memory:", clock=clock)  # type: ignore[return-value]


def _sqlite_file(clock: ManualClock, tmp: Path) -> RunStore:
    return runstore.open(tmp / "runs.db", clock=clock)  # type: ignore[return-value]


def _postgres(clock: ManualClock, _tmp: Path) -> RunStore:
    return _pg.open_store(clock)  # type: ignore[no-any-return]


RunFactory = Callable[[ManualClock, Path], RunStore]

PAIRINGS: dict[str, tuple[RunFactory, Callable[..., Any]]] = {
    "model": (_model, ModelAttemptStore),
    "sqlite-memory": (_sqlite_memory, AttemptStore),
    "sqlite-file": (_sqlite_file, AttemptStore),
    "postgres-sql": (_postgres, AttemptStore),
}


@attrs.define
class Env:
    """One pairing: a run store, an attempt store over it, and the clock."""

    kind: str
    clock: ManualClock
    runs: RunStore
    attempts: Any
    _build: Callable[..., Any]

    @property
    def is_sqlite(self) -> bool:
        return self.kind != "model"

    def attempt_store(self, **options: Any) -> Any:
        """Another attempt store over the same run store, with ``options``."""
        return self._build(self.runs, **options)

    def own(self, run_id: str = RUN, owner: OwnerId = OWNER) -> None:
        """Create ``run_id`` and make ``owner`` its running owner."""
        self.runs.create(run_id, '{"phase":"start"}')
        now = self.clock.now_ms()
        outcome = self.runs.claim_and_own(run_id, RunSnapshot("pending", None, None), owner, now)
        assert outcome == Activated()

    def take_over(self, run_id: str = RUN, new_owner: OwnerId = RIVAL) -> None:
        """Let the owner's lease go stale and hand the run to ``new_owner``."""
        row = self.runs.get(run_id)
        assert row.owner is not None
        self.clock.advance(30_001)
        now = self.clock.now_ms()
        evidence = LivenessEvidence(row.owner, now, "lease-expired")
        outcome = self.runs.claim_and_own(run_id, row.snapshot, new_owner, now, evidence)
        assert outcome == Activated()

    def settle(self, run_id: str = RUN, owner: OwnerId = OWNER, status: Any = "completed") -> None:
        """Move the owned run to ``status`` (which clears its owner unless running)."""
        assert self.runs.transition_owned(run_id, owner, status) == Transitioned()


def make_env(kind: str, clock: ManualClock, tmp_path: Path, **options: Any) -> Env:
    run_factory, build = PAIRINGS[kind]
    runs = run_factory(clock, tmp_path)
    return Env(kind, clock, runs, build(runs, **options), build)


@pytest.fixture(params=sorted(PAIRINGS))
def env(request: pytest.FixtureRequest, clock: ManualClock, tmp_path: Path) -> Iterator[Env]:
    """Every attempt-store pairing, checked for invariants after the test."""
    opened = make_env(request.param, clock, tmp_path)
    try:
        yield opened
        opened.attempts.check_invariants()
        opened.runs.check_invariants()
    finally:
        opened.runs.close()


def running(
    attempt: int = 1,
    *,
    run_id: str = RUN,
    step: str = STEP,
    state: str = "running",
    started_at_ms: int = 10,
    **fields: Any,
) -> Attempt:
    """An attempt record with sensible defaults (``meta={}``)."""
    fields.setdefault("meta", {})
    return Attempt(run_id, step, attempt, state, started_at_ms, **fields)


def ident(attempt: int = 1, *, run_id: str = RUN, step: str = STEP) -> AttemptId:
    return AttemptId(run_id, step, attempt)


# -- tests of the pairing itself ----------------------------------------------------


def test_a_fresh_pairing_holds_no_attempts(env: Env) -> None:
    """A new attempt store over a new run store has an empty state."""
    assert env.attempts.state() == ()
    assert env.attempts.get(ident()) is None


def test_own_makes_the_owner_hold_the_fence(env: Env) -> None:
    """After ``own`` the run is running and owned by the owner, as the fence requires."""
    env.own()
    row = env.runs.get(RUN)
    assert row.status == "running"
    assert row.owner == OWNER


def _script(env: Env) -> None:
    """One mixed sequence of every operation and most losses."""
    env.own()
    env.own("run-2", RIVAL)
    a = env.attempts
    a.put(running(1, checkpoint={"page": 1}, meta={"k": [1, 2.5, True, None]}), OWNER)
    a.put(running(2, error=None), OWNER)
    a.put(running(1, run_id="run-2", step="s\U0001f600"), RIVAL)
    a.put(running(3), RIVAL)
    a.heartbeat(RUN, STEP, 1, OWNER, 50, {"page": 2})
    a.heartbeat(RUN, STEP, 1, OWNER, 40)
    a.finish(FinishAttempt(RUN, STEP, 2, "failed", 5, error={"why": "boom"}), OWNER)
    a.patch(ident(2), AttemptPatch(meta={"retry": False}, outcome=None), OWNER)
    a.finish(FinishAttempt(RUN, STEP, 2, "succeeded", 6), OWNER)
    env.take_over("run-2", OWNER)
    a.heartbeat("run-2", "s\U0001f600", 1, RIVAL, 60)
    a.patch(ident(1, run_id="run-2", step="s\U0001f600"), AttemptPatch(error="late"), RIVAL)
    a.put(running(4, state="queued", outcome=[1, "x"]), OWNER)
    a.heartbeat(RUN, STEP, 4, OWNER, 70)


def test_every_pairing_ends_a_script_in_the_same_state(tmp_path: Path) -> None:
    """The same script leaves the model and both SQLite pairings with equal attempt states."""
    states = {}
    for kind in sorted(PAIRINGS):
        (tmp_path / kind).mkdir()
        env = make_env(kind, ManualClock(0), tmp_path / kind)
        try:
            _script(env)
            states[kind] = env.attempts.state()
            env.attempts.check_invariants()
        finally:
            env.runs.close()
    reference = states["model"]
    assert [record.id for record in reference] == [
        ident(1),
        ident(2),
        ident(4),
        ident(1, run_id="run-2", step="s\U0001f600"),
    ]
    assert reference[0].heartbeat_at_ms == 50
    assert reference[0].checkpoint == {"page": 2}
    assert reference[1].state == "failed"
    assert reference[1].outcome is None
    assert reference[2].heartbeat_at_ms is None
    assert reference[3].error is ABSENT
    for kind, state in states.items():
        assert state == reference, kind
