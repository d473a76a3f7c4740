"""Exhaustive exploration of the attempt store's own scope.

The attempt scope (one run, the small scope's three owners, two attempts of
one step, every attempt operation on finite domains and the run moves that
change the fence) is walked over ``ModelRunStore`` with ``ModelAttemptStore``
and applied to the attempt stores over a store. The default run walks the
model, the two-move scope against SQLite, and every attempt zoo entry (each
found within a second or two); the shipped stores exhausting the whole
four-move scope, the command and the regression files are campaigns
(``-m campaign``).
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from runstore import ManualClock
from runstore.attempts import AttemptStore
from runstore.model import ModelRunStore
from runstore.stateful import explore
from runstore.stateful._explore._attempts import (
    ATTEMPT_SCOPES,
    AttemptWalker,
    attempt_moves,
    walk_attempts,
)

ROOT = Path(__file__).resolve().parents[3]
TINY = ATTEMPT_SCOPES["attempts-tiny"]
SCOPE = ATTEMPT_SCOPES["attempts"]

#: Every answer of every attempt operation (outcome class, or the error code).
EVERY_ANSWER = {
    "attempt_put": {
        "Inserted",
        "Upserted",
        "ExistingSame",
        "Conflict",
        "FenceLost",
        "RunNotFound",
        "raised invalid_attempt",
    },
    "attempt_heartbeat": {
        "Updated",
        "FenceLost",
        "NotFound",
        "StateChanged",
        "raised invalid_attempt",
    },
    "attempt_finish": {
        "Finished",
        "FenceLost",
        "NotFound",
        "StateChanged",
        "raised invalid_attempt",
    },
    "attempt_patch": {"Patched", "FenceLost", "NotFound", "raised invalid_attempt"},
    "attempt_get": {"Attempt", "NoneType"},
}

#: Attempt zoo entry -> (failing check, moves after the setup) found in the attempt scope.
FOUND: dict[str, tuple[str, int]] = {
    "attempt_patch_unfenced": ("UnfencedAttemptWrite", 3),
    "attempt_heartbeat_overwrites": ("AttemptHeartbeatRegressed", 3),
    "attempt_finish_rewrites": ("OutcomeMismatch", 3),
    "attempt_upsert_any_state": ("SettledAttemptChanged", 3),
    "attempt_cap_counts_characters": ("AdmissionViolation", 1),
}


def model_store(clock: ManualClock, path: Path) -> ModelRunStore:
    """The reference model as a store under test (no attempt store can be built over it)."""
    return ModelRunStore(clock=clock)


def test_the_attempt_scope_is_exhausted_on_the_model() -> None:
    """The reference alone: every state of the attempt scope reached, every run and attempt
    invariant held on every step, and every answer of every attempt operation given."""
    graph = walk_attempts(SCOPE)
    assert graph.exhausted
    assert graph.failure is None
    assert graph.depth == SCOPE.depth
    assert len(graph.nodes) > 500
    for method, answers in EVERY_ANSWER.items():
        reached = {shape for name, shape in graph.outcomes if name == method}
        assert answers <= reached, (method, sorted(answers - reached))


def test_the_canonical_attempt_walk_agrees_with_the_unabstracted_one() -> None:
    """Identifying states (owners of one host interchangeable) changes neither the verdict
    nor the answers each operation gave, and reaches no more states than the exact walk."""
    canonical = walk_attempts(TINY)
    exact = walk_attempts(TINY, canonical=False)
    assert canonical.exhausted
    assert exact.exhausted
    assert canonical.failure is None
    assert exact.failure is None
    assert canonical.outcomes == exact.outcomes
    assert len(canonical.nodes) < len(exact.nodes)


def test_every_move_of_an_attempt_state_is_listed_in_a_fixed_order() -> None:
    """The moves of a state are the same list every time (a walk is deterministic), and
    every attempt operation is among them."""
    walker = AttemptWalker(TINY)
    root = walker.graph.nodes[0]
    first = attempt_moves(TINY, root.runs, root.attempts, root.clock_ms)
    again = attempt_moves(TINY, root.runs, root.attempts, root.clock_ms)
    assert first == again
    assert {move.method for move in first} >= set(EVERY_ANSWER) | {
        "claim_and_own",
        "transition_owned",
    }


@pytest.mark.parametrize("restore", [True, False], ids=["restored", "replayed"])
def test_the_shipped_attempt_store_exhausts_the_two_move_scope(restore: bool) -> None:
    """``AttemptStore`` over the in-memory adapter agrees with the reference on every
    transition of the two-move attempt scope, whether each source state is restored from a
    copy or replayed on a fresh store."""
    result = explore(target="sqlite-sql", scope="attempts-tiny", restore=restore)
    assert result.clean, result.describe()
    assert result.scope == "attempts-tiny"
    assert (result.restores > 0) == restore
    assert result.rebuilds == 1 if restore else result.rebuilds > 1


class CachingAttemptStore(AttemptStore):
    """An attempt store keeping something of its own in memory (here, the ids it was
    asked about): a copy of the database would not put it back."""

    def __init__(self, store: Any, **options: Any) -> None:
        super().__init__(store, **options)
        self.asked: list[Any] = []

    def get(self, attempt_id: Any) -> Any:
        self.asked.append(attempt_id)
        return super().get(attempt_id)


def test_an_attempt_store_holding_data_of_its_own_is_replayed() -> None:
    """An attempt store that keeps a member a restore would not put back is rebuilt by
    replay, never restored."""
    result = explore(target="sqlite-sql", scope="attempts-tiny", attempt_store=CachingAttemptStore)
    assert result.clean, result.describe()
    assert result.restores == 0
    assert result.rebuilds > 1


@pytest.mark.parametrize("name", sorted(FOUND))
def test_the_attempt_scope_finds_each_attempt_zoo_entry(name: str) -> None:
    """Each broken attempt store of the zoo is found in the attempt scope as a shortest
    program failing the recorded check; restoring copies finds the same program as
    replaying."""
    check, length = FOUND[name]
    module = importlib.import_module(f"tests.zoo.{name}")
    assert module.KIND == "attempts"
    found = []
    for restore in (True, False):
        result = explore(
            target="sqlite-sql",
            scope="attempts",
            attempt_store=module.attempt_store,
            restore=restore,
        )
        assert result.failure is not None, result.describe()
        assert not result.exhausted
        assert result.failure.check == check, result.describe()
        steps = [line for line in result.failure.program.splitlines() if line]
        assert len([s for s in steps if not s.startswith("create(")]) == length
        found.append(result.failure.program)
    assert found[0] == found[1]


def test_the_attempt_zoo_is_all_here() -> None:
    """Every ``tests/zoo/attempt_*.py`` module is one the attempt scope is shown to find."""
    modules = {path.stem for path in (ROOT / "tests" / "zoo").glob("attempt_*.py")}
    assert modules == set(FOUND)


@pytest.mark.campaign
def test_a_run_scope_is_followed_by_the_attempt_scope_when_asked() -> None:
    """``attempts=True`` walks the attempt scope after the run scope (its result is
    ``attempts``); None leaves it out of the tiny scope; a store no attempt store can be
    built over is refused with ``ValueError``."""
    with_attempts = explore(scope="tiny", attempts=True)
    assert with_attempts.attempts is not None
    assert with_attempts.attempts.scope == "attempts"
    assert with_attempts.attempts.clean
    assert with_attempts.clean
    assert "scope attempts on model: exhausted" in with_attempts.describe()
    assert explore(scope="tiny").attempts is None
    with pytest.raises(ValueError, match="attempt"):
        explore(store_factory=model_store, scope="tiny", attempts=True)


def test_an_attempt_failure_after_the_run_scope_is_the_exploration_s(tmp_path: Path) -> None:
    """A failure of the attempt scope that follows a run scope is the whole exploration's
    failure (not exhausted, not clean), with its regression file."""
    module = importlib.import_module("tests.zoo.attempt_cap_counts_characters")
    result = explore(
        target="sqlite-sql",
        scope="tiny",
        attempts=True,
        attempt_store=module.attempt_store,
        out=tmp_path,
        depth_k=0,
    )
    assert result.attempts is not None
    assert result.failure is not None
    assert result.failure == result.attempts.failure
    assert result.failure.check == "AdmissionViolation"
    assert not result.exhausted
    assert not result.clean
    assert result.failure.path is not None
    assert result.failure.path.exists()


@pytest.mark.campaign
def test_the_attempt_regression_file_fails_exactly_while_the_bug_is_there(
    tmp_path: Path,
) -> None:
    """The regression file of an attempt failure fails with the broken attempt store and
    passes with ``AttemptStore``."""
    result = explore(
        target="sqlite-sql",
        scope="attempts",
        attempt_store="tests.zoo.attempt_patch_unfenced:attempt_store",
        out=tmp_path / "out",
    )
    assert result.failure is not None
    assert result.failure.path is not None
    broken = result.failure.path
    source = broken.read_text(encoding="utf-8")
    line = "from tests.zoo.attempt_patch_unfenced import UnfencedPatch as AttemptStore"
    assert line in source
    fixed = broken.with_name("test_fixed.py")
    fixed.write_text(
        source.replace(line, "from runstore.attempts import AttemptStore"), encoding="utf-8"
    )
    command = [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider"]
    options = {"cwd": ROOT, "capture_output": True, "text": True, "timeout": 300}
    failing = subprocess.run([*command, str(broken)], **options)  # type: ignore[call-overload]
    assert failing.returncode == 1, failing.stdout[-2000:]
    assert "UnfencedAttemptWrite" in failing.stdout
    passing = subprocess.run([*command, str(fixed)], **options)  # type: ignore[call-overload]
    assert passing.returncode == 0, passing.stdout[-2000:]


@pytest.mark.campaign
def test_the_command_walks_the_attempt_scope(tmp_path: Path) -> None:
    """``runstore explore --scope attempts`` exits 0 on the model and 1 on a broken attempt
    store given with ``--attempt-store``."""
    base = [sys.executable, "-m", "runstore", "explore", "--scope", "attempts"]
    options = {"cwd": ROOT, "capture_output": True, "text": True, "timeout": 300}
    clean = subprocess.run(base, **options)  # type: ignore[call-overload]
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "scope attempts on model: exhausted" in clean.stdout
    broken = subprocess.run(  # type: ignore[call-overload]
        [
            *base,
            "--target",
            "sqlite-sql",
            "--attempt-store",
            "tests.zoo.attempt_heartbeat_overwrites:attempt_store",
            "--out",
            str(tmp_path),
        ],
        **options,
    )
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert "AttemptHeartbeatRegressed" in broken.stdout


@pytest.mark.campaign
@pytest.mark.parametrize("target", ["sqlite-file-local"])
def test_the_shipped_sqlite_stores_exhaust_the_attempt_scope(target: str) -> None:
    """``AttemptStore`` over the shipped SQLite store on a file over ``LocalConsensus``
    exhausts the four-move attempt scope clean (restoring copies of the source states; about
    a minute at load 15). The same walk over the in-memory store over ``SqlConsensus``
    (``sqlite-sql``) is made by ``run_conformance(consensus_factory=SqlConsensus)``
    (``test_conformance_reach.py``), which raises unless it is exhausted clean; the one over
    the in-memory store over ``LocalConsensus`` by ``test_conformance.py``."""
    result = explore(target=target, scope="attempts")
    assert result.clean, result.describe()
    assert result.depth == SCOPE.depth


@pytest.mark.campaign
@pytest.mark.deep
@pytest.mark.parametrize("fast_path", [True, False], ids=["one-round-trip", "general"])
def test_the_postgres_store_exhausts_the_attempt_scope(fast_path: bool) -> None:
    """``AttemptStore`` over the PostgreSQL store, both paths, exhausts the four-move attempt
    scope clean (restoring copies of the source states; 351 s and 245 s at load 17)."""
    from runstore.consensus import SqlConsensus
    from runstore.stateful._targets._postgres import postgres_store_factory

    factory = postgres_store_factory(SqlConsensus, fast_path=fast_path)
    result = explore(store_factory=factory, scope="attempts")
    assert result.clean, result.describe()


@pytest.mark.campaign
@pytest.mark.deep
def test_the_shipped_attempt_store_exhausts_the_five_move_scope() -> None:
    """``AttemptStore`` over the in-memory adapter exhausts the five-move attempt scope
    (``attempts-medium``) clean (several minutes on a busy machine)."""
    result = explore(target="sqlite-sql", scope="attempts-medium")
    assert result.clean, result.describe()
    assert result.depth == ATTEMPT_SCOPES["attempts-medium"].depth
