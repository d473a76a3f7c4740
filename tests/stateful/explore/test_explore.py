"""Exhaustive exploration: the walk, its canonical form, stores and regression files.

The default run uses the ``tiny`` scope (one run, two owners on two hosts,
three moves deep), which walks in well under a second; the shipped stores at
the small and medium scopes are campaigns (``-m campaign``).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import attrs
import pytest
from hypothesis import settings

from runstore import ManualClock, RunStoreError
from runstore._values import LivenessEvidence
from runstore.model import ModelRunStore
from runstore.stateful import (
    Capabilities,
    ConformanceError,
    Counterexample,
    Exploration,
    OutcomeMismatch,
    explore,
    run_conformance,
)
from runstore.stateful._campaigns import _conformance
from runstore.stateful._explore._scope import (
    SCOPES,
    cursors_for,
    moves,
    scope_named,
    stale_snapshot,
    start_ms,
)
from runstore.stateful._explore._walk import Walker, start, walk

ROOT = Path(__file__).resolve().parents[3]
TINY = SCOPES["tiny"]


class StealsWithoutEvidence(ModelRunStore):
    """A planted bug: ``steal`` without evidence is taken as if the owner's host had
    vouched that it is gone (the fencing rule's evidence skipped on one code path)."""

    def steal(self, run_id, expected, claimant, now_ms, evidence):
        if evidence is None and getattr(expected, "owner", None) is not None:
            same = expected.owner.host_id == claimant.host_id
            kind = "same-host-pid-dead" if same else "cross-host-unreachable-stale"
            evidence = LivenessEvidence(expected.owner, now_ms, kind)
        return super().steal(run_id, expected, claimant, now_ms, evidence)


def steals_without_evidence(clock: ManualClock, path: Path) -> ModelRunStore:
    """The planted store, as a store factory."""
    return StealsWithoutEvidence(clock=clock)


def model_store(clock: ManualClock, path: Path) -> ModelRunStore:
    """The reference model as a store under test."""
    return ModelRunStore(clock=clock)


MODEL_ONLY = Capabilities(reopen=False)


def test_the_tiny_scope_is_exhausted_on_the_model() -> None:
    """The model alone: every state of the tiny scope reached, every invariant held."""
    result = explore(scope="tiny")
    assert isinstance(result, Exploration)
    assert result.exhausted
    assert result.failure is None
    assert result.clean
    assert result.depth == TINY.depth
    assert result.states > 50
    assert result.transitions > result.states


def test_the_canonical_walk_agrees_with_the_unabstracted_one() -> None:
    """Identifying states (time relative to the clock, owners of one host interchangeable)
    changes neither the verdict nor the set of answers each operation gave, and reaches no
    more states than the exact walk."""
    canonical = walk(TINY)
    exact = walk(TINY, canonical=False)
    assert canonical.exhausted
    assert exact.exhausted
    assert canonical.failure is None
    assert exact.failure is None
    assert canonical.outcomes == exact.outcomes
    assert len(canonical.nodes) <= len(exact.nodes)


def test_owner_symmetry_identifies_states() -> None:
    """At the small scope's first level, a claim by h1:p1 and one by h1:p2 reach one
    canonical state; one by h2:p1 another."""
    scope = attrs.evolve(scope_named("small"), depth=1)
    canonical, exact = walk(scope), walk(scope, canonical=False)
    assert len(canonical.nodes) < len(exact.nodes)


def test_every_move_of_a_state_is_listed_in_a_fixed_order() -> None:
    """The same state gives the same moves, so a walk is deterministic."""
    model, dial = start(TINY)
    first = moves(TINY, model._state, dial.ms)
    assert first == moves(TINY, model._state, dial.ms)
    methods = {getattr(move, "method", "tick") for move in first}
    assert {"claim", "claim_and_own", "steal", "transition_owned", "list_runs"} <= methods


def test_a_stale_snapshot_is_never_the_current_one() -> None:
    """The stale snapshot a scope passes differs from the row's own."""
    model, _ = start(scope_named("small"))
    for row in model._state.rows.values():
        assert stale_snapshot(row) != row.snapshot


def test_the_model_as_a_store_exhausts_the_tiny_scope_clean() -> None:
    """No false alarm: the reference put under test as a store agrees on every transition."""
    result = explore(store_factory=model_store, capabilities=MODEL_ONLY, scope="tiny")
    assert result.clean, result.describe()
    assert result.programs > 0
    assert result.programs_depth == TINY.depth_k


def test_a_planted_bug_is_found_as_a_shortest_program(tmp_path: Path) -> None:
    """A steal without evidence taken as if it had some: found two moves deep (own the run,
    steal it with no evidence, which the contract refuses), written as a regression file."""
    result = explore(
        store_factory=steals_without_evidence,
        capabilities=MODEL_ONLY,
        scope="tiny",
        out=tmp_path,
    )
    assert not result.exhausted
    found = result.failure
    assert isinstance(found, Counterexample)
    assert found.check in ("OutcomeMismatch", "StealWithoutStaleness")
    steps = found.program.splitlines()
    assert steps[-1].startswith("steal(")
    assert "evidence=None" in steps[-1]
    # the setup's create, then the two moves: no shorter program shows it
    assert len(steps) == 3
    assert "state_json='" not in found.program
    assert '"n"' not in found.program
    assert found.path is not None
    assert found.path.exists()


def _run_regression(path: Path, tmp_path: Path) -> BaseException | None:
    spec = importlib.util.spec_from_file_location(f"regression_{path.stem}", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    tests = [getattr(module, name) for name in dir(module) if name.startswith("test_")]
    assert len(tests) == 1
    try:
        tests[0](tmp_path)
    except BaseException as error:
        return error
    return None


def test_the_regression_file_fails_exactly_while_the_bug_is_there(tmp_path: Path) -> None:
    """The file written for the shortest program fails against the planted store and passes
    once the store is the reference (the bug fixed)."""
    result = explore(
        store_factory=steals_without_evidence,
        capabilities=MODEL_ONLY,
        scope="tiny",
        out=tmp_path / "out",
    )
    assert result.failure is not None
    assert result.failure.path is not None
    path = result.failure.path
    failed = _run_regression(path, tmp_path / "buggy")
    assert isinstance(failed, AssertionError)
    fixed = path.with_name("test_fixed.py")
    fixed.write_text(
        path.read_text().replace("import steals_without_evidence as", "import model_store as")
    )
    assert "model_store as open_store" in fixed.read_text()
    assert _run_regression(fixed, tmp_path / "fixed") is None


def test_a_run_out_of_time_is_not_exhausted() -> None:
    """A walk cut by its time budget says how far it got and is not exhausted."""
    ticks = iter(range(1_000_000))
    result = explore(scope="small", seconds=5, clock=lambda: float(next(ticks)))
    assert not result.exhausted
    assert result.failure is None
    assert result.states > 0
    assert result.transitions > 0


def test_bad_arguments_are_value_errors() -> None:
    """An unknown scope or target, or two things under test, raise ``ValueError``."""
    with pytest.raises(ValueError, match="unknown scope"):
        explore(scope="huge")
    with pytest.raises(ValueError, match="unknown target"):
        explore(target="no-such-target")
    with pytest.raises(ValueError, match="one of"):
        explore(target="model", store_factory=model_store)


def test_the_walker_reports_a_broken_reference_invariant() -> None:
    """An invariant the reference itself breaks stops the walk as the suite's defect."""
    walker = Walker(TINY)
    assert walker.expand(0)
    assert walker.graph.failure is None


def _cli(*arguments: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "runstore", "explore", *arguments],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
        check=False,
    )


def test_the_command_exits_2_on_a_usage_error() -> None:
    """``runstore explore`` with an unknown target says so and exits 2."""
    done = _cli("--target", "no-such-target")
    assert done.returncode == 2
    assert "unknown target" in done.stderr


def test_the_command_exits_0_when_the_scope_is_exhausted_clean() -> None:
    """The model alone in the tiny scope: exhausted, exit 0, the figures printed."""
    done = _cli("--target", "model", "--scope", "tiny")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "exhausted" in done.stdout
    assert " states, " in done.stdout


def test_the_command_exits_3_when_time_runs_out() -> None:
    """A budget too small for the scope: exit 3, saying how far the walk got."""
    done = _cli("--scope", "medium", "--seconds", "0.5")
    assert done.returncode == 3, done.stdout + done.stderr
    assert "time ran out first" in done.stdout
    assert "states" in done.stdout
    assert "depth" in done.stdout


def test_the_command_exits_1_on_a_divergence(tmp_path: Path) -> None:
    """A planted bug: exit 1, the shortest program printed and written (1 wins over 3: a
    budget the walk outlives still reports what it found first)."""
    done = _cli(
        "--store",
        "tests.stateful.explore.test_explore:steals_without_evidence",
        "--capabilities",
        "reopen=false",
        "--out",
        str(tmp_path),
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "steal(" in done.stdout
    assert list(tmp_path.glob("test_regression_*.py"))


class CompactsWrong(ModelRunStore):
    """A planted bug the machines' one short program does not reach: ``compact_changes``
    answers one more than it removed."""

    def compact_changes(self, through_revision, *, limit=1000):
        return super().compact_changes(through_revision, limit=limit) + 1


SMOKE = settings(max_examples=1, stateful_step_count=1, derandomize=True, database=None)


def test_run_conformance_walks_the_small_scope_when_asked() -> None:
    """``explore=True`` adds the small scope's walk to a run with ``settings``; what it finds
    is raised as the failing check, with the shortest program."""
    with pytest.raises(OutcomeMismatch) as caught:
        run_conformance(
            store_factory=lambda clock, path: CompactsWrong(clock=clock),
            capabilities=MODEL_ONLY,
            settings=SMOKE,
            explore=True,
        )
    text = str(caught.value)
    assert "exhaustive exploration of the small scope" in text
    assert "compact_changes(" in text


def test_run_conformance_fails_a_walk_not_exhausted_in_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A small scope not exhausted within the budget fails the run: a partial walk is never
    a pass."""
    monkeypatch.setattr(_conformance, "EXPLORE_SECONDS", 0.0)
    with pytest.raises(ConformanceError, match="not exhausted"):
        run_conformance(
            store_factory=model_store, capabilities=MODEL_ONLY, settings=SMOKE, explore=True
        )


@pytest.mark.parametrize("name", sorted(SCOPES))
def test_every_scope_s_setup_is_admitted(name: str) -> None:
    """The reference creates every run of every scope (a refused setup would walk nothing)."""
    scope = scope_named(name)
    model, _ = start(scope)
    assert sorted(model._state.rows) == sorted(scope.run_ids)
    assert moves(scope, model._state, start_ms())


def test_the_medium_scope_holds_every_program_of_the_small_one_and_one_move_more() -> None:
    """Up to depth 3 the medium scope's moves are the small scope's; its fourth move takes
    narrower domains (a subset of the full moves, at the clock's reading, with no evidence
    or one of the three kinds), never wider ones."""
    from runstore.stateful._explore._scope import at_depth

    small, medium = scope_named("small"), scope_named("medium")
    assert medium.depth == small.depth + 1
    model, _ = start(medium)
    state, clock = model._state, start_ms()
    full = moves(small, state, clock)
    for depth in range(small.depth):
        assert moves(at_depth(medium, depth), state, clock) == full
    last = moves(at_depth(medium, medium.depth - 1), state, clock)
    assert set(map(repr, last)) < set(map(repr, full))
    assert len(last) < len(full) * 3 // 5
    assert at_depth(small, small.depth - 1) is small


def test_the_lineage_scope_is_the_small_one_over_a_root_and_its_second_round() -> None:
    """The lineage scope keeps the small scope's owners, readings, edges and depth; its runs
    are a root and that root's second lineage round, and its reads add ``list_runs`` with
    cursors. The small and medium scopes take no cursors."""
    small, lineage = scope_named("small"), scope_named("lineage")
    assert attrs.evolve(lineage, name="small", runs=small.runs, cursors=False) == small
    assert lineage.runs == (("a", {}), ("a-2", {"lineage_id": "a", "round_ordinal": 2}))
    assert not small.cursors
    assert not scope_named("medium").cursors
    model, _ = start(lineage)
    assert [row.run_id for row in model.lineage("a-2")] == ["a", "a-2"]
    after = [
        m
        for m in moves(lineage, model._state, start_ms())
        if getattr(m, "method", None) == "list_runs" and "after" in m.keywords  # type: ignore[union-attr]
    ]
    assert len(after) == len(cursors_for("a")) == 5


def test_a_forged_cursor_is_refused_and_changes_nothing() -> None:
    """Of the lineage scope's cursors, the first two (a listing key's own) page on from the
    root; the rest are refused with ``invalid_run`` on ``after``, and nothing changes."""
    model, _ = start(scope_named("lineage"))
    before = model._state
    (key, filters), (key_again, narrowed), *forged = cursors_for("a")
    assert [r.run_id for r in model.list_runs(after=key, **filters).runs] == ["a-2"]
    assert [r.run_id for r in model.list_runs(after=key_again, **narrowed).runs] == ["a-2"]
    for after, more in forged:
        with pytest.raises(RunStoreError) as refused:
            model.list_runs(after=after, **more)
        assert (refused.value.code, refused.value.cause.get("field")) == ("invalid_run", "after")
        assert model._state == before


def test_the_cli_walks_the_lineage_scope_and_names_it() -> None:
    """``--scope lineage`` is accepted, and an unknown scope's error lists it."""
    with pytest.raises(ValueError, match="lineage"):
        scope_named("huge")
    done = _cli("--scope", "lineage", "--seconds", "0.5")
    assert done.returncode == 3, done.stdout + done.stderr
    assert "scope lineage" in done.stdout


@pytest.mark.campaign
@pytest.mark.deep
def test_sqlite_in_memory_exhausts_the_lineage_scope_clean() -> None:
    """No false alarm: the shipped SQLite store in memory exhausts the lineage scope clean,
    with the same states and transitions as the model (192 s, 82 s of CPU, at load 6 to 8)."""
    alone = explore(scope="lineage", attempts=False)
    result = explore(target="sqlite-sql", scope="lineage", attempts=False)
    assert result.exhausted, result.describe()
    assert result.failure is None, result.describe()
    assert (result.states, result.depth) == (alone.states, alone.depth) == (7917, 3)


@pytest.mark.parametrize("target", ["sqlite-sql", "sqlite-file-local"])
def test_restoring_copies_agrees_with_replaying(target: str) -> None:
    """Where the store is ours, each source state is restored from a copy (SQLite's backup
    API) instead of replayed on a fresh store: the tiny scope's walk gives the same verdict
    and counts both ways, and the restoring walk builds one fresh store (the start's)."""
    restored = explore(target=target, scope="tiny", depth_k=0)
    replayed = explore(target=target, scope="tiny", depth_k=0, restore=False)
    assert restored.clean
    assert replayed.clean
    assert (restored.states, restored.transitions, restored.depth) == (
        replayed.states,
        replayed.transitions,
        replayed.depth,
    )
    assert restored.rebuilds == 1
    assert restored.restores > 100
    assert replayed.restores == 0
    assert replayed.rebuilds == restored.restores + 1


def test_a_store_not_ours_is_replayed() -> None:
    """Anyone's factory (here the model as a store) is rebuilt by replay, never restored."""
    result = explore(store_factory=model_store, scope="tiny", depth_k=0, capabilities=MODEL_ONLY)
    assert result.clean
    assert result.restores == 0
    assert result.rebuilds > 1


#: The tiny scope two moves deep: 56 states and 1 110 transitions (the whole tiny scope has
#: 307 and 6 894), every operation of the tiny scope among them.
TINY_TWO = attrs.evolve(TINY, depth=2)


def _walk_postgres(factory, *, restore: bool) -> Exploration:
    """``TINY_TWO`` walked on a PostgreSQL store factory (no pass without deduplication),
    restoring copies of the source states or rebuilding each by replay."""
    import time

    from runstore.stateful._base._capabilities import FULL_STORE
    from runstore.stateful._campaigns._explore import _run_scope
    from runstore.stateful._targets._builtin import Target

    target = Target("postgres", factory, FULL_STORE, None, kind="store")
    began = time.monotonic()
    return _run_scope(TINY_TWO, target, None, None, 0, time.monotonic, restore, began)


def test_two_moves_of_the_tiny_scope_make_every_move_the_scope_makes() -> None:
    """``TINY_TWO`` (the PostgreSQL restore tests' walk) calls every operation the whole tiny
    scope calls, and reaches states a restore puts back from a copy."""
    whole, two = walk(TINY), walk(TINY_TWO)
    assert {method for method, _ in two.outcomes} == {method for method, _ in whole.outcomes}
    assert (len(two.nodes), two.transitions) == (56, 1110)
    assert any(node.depth == 1 for node in two.nodes)


@pytest.mark.campaign
@pytest.mark.parametrize("fast_path", [True, False], ids=["one-round-trip", "general"])
def test_restoring_postgres_copies_agrees_with_replaying(fast_path: bool) -> None:
    """On PostgreSQL, both paths, a source state is restored by emptying and refilling the
    store's tables and setting its sequences back (one transaction, triggers off): the walk
    of the tiny scope two moves deep (every operation of the scope, restores at every source
    state of depth 1) agrees with the walk that clones a fresh database and replays. A
    restore that leaves a table out is caught on this walk
    (``test_a_postgres_restore_that_leaves_a_table_out_is_caught``)."""
    from runstore.consensus import SqlConsensus
    from runstore.stateful._targets._postgres import postgres_store_factory

    factory = postgres_store_factory(SqlConsensus, fast_path=fast_path)
    restored = _walk_postgres(factory, restore=True)
    replayed = _walk_postgres(factory, restore=False)
    assert restored.clean, restored.describe()
    assert replayed.clean, replayed.describe()
    assert (restored.states, restored.transitions) == (replayed.states, replayed.transitions)
    assert restored.states == 56
    assert restored.rebuilds == 1
    assert restored.restores > 50
    assert replayed.rebuilds == restored.restores + 1


@pytest.mark.campaign
def test_a_postgres_restore_that_leaves_a_table_out_is_caught(monkeypatch) -> None:
    """A planted restore bug: every table but the runs is put back from the copy (the runs
    keep what the last transition left). The restoring walk of ``TINY_TWO`` is not clean:
    the PostgreSQL restore test above can fail."""
    from runstore.consensus import SqlConsensus
    from runstore.stateful._explore import _replay
    from runstore.stateful._targets._postgres import postgres_store_factory

    real = _replay._postgres_restore

    def leaves_the_runs(store, stash, number, positions):
        kept = [entry for entry in stash.tables if not entry[0].endswith('."flows_runs"')]
        assert len(kept) == len(stash.tables) - 1
        real(store, attrs.evolve(stash, tables=kept), number, positions)

    monkeypatch.setattr(_replay, "_postgres_restore", leaves_the_runs)
    factory = postgres_store_factory(SqlConsensus, fast_path=True)
    planted = _walk_postgres(factory, restore=True)
    # The first restore puts back a copy whose runs disagree with its leases.
    assert planted.failure is not None, planted.describe()
    assert planted.restores >= 1
