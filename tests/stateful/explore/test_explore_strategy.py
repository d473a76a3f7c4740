"""The explorer at a strategy's own interface (issue 25).

``explore(consensus_factory=...)`` walks a strategy at its ``Consensus``
interface against ``ModelConsensus`` before it walks it inside the SQLite
adapter. The strategy zoo's bugs that the adapter masks (its own snapshot,
cutoff and evidence rules refuse first) are found there as shortest programs;
each entry is found at the scope recorded here, failing the recorded check, as
a program of the recorded number of transactions and clock moves. Each takes
well under a second, so they run by default; the shipped strategies' clean
walks of the small and medium strategy scopes are a campaign.
"""

from __future__ import annotations

import importlib
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from runstore.consensus import LocalConsensus, SqlConsensus
from runstore.stateful import explore
from runstore.stateful._explore._strategy import STRATEGY_SCOPES, walk_strategy

from ...zoo import ZOO

#: Strategy entry -> (scope, failing check, moves), found at the strategy interface.
FOUND_AT_INTERFACE: dict[str, tuple[str, str, int]] = {
    "guard_always_passes": ("tiny", "OutcomeMismatch", 1),
    "local_not_rolled_back": ("tiny", "RollbackLeak", 1),
    "activation_ignores_grant": ("tiny", "OutcomeMismatch", 2),
    "evidence_wrong_host": ("tiny", "OutcomeMismatch", 2),
    "steal_cutoff_inclusive": ("tiny", "OutcomeMismatch", 2),
    "heartbeat_regresses": ("tiny", "OutcomeMismatch", 3),
    "release_claim_drops_owner": ("tiny", "LeaseMismatch", 3),
    "reconfirm_ignores_claim": ("tiny", "OutcomeMismatch", 3),
    # A crashed incarnation's batch renewal: the small scope has one (the tiny has not).
    "batch_heartbeat_ignores_nonce": ("small", "OutcomeMismatch", 2),
}

SHIPPED = {"SqlConsensus": SqlConsensus, "LocalConsensus": LocalConsensus}


def _factory(name: str):
    module = importlib.import_module(f"tests.zoo.{name}")
    assert module.KIND == "consensus"
    return module.factory


def test_every_strategy_entry_of_the_zoo_is_found_at_the_interface() -> None:
    """Every strategy entry of ``ZOO`` (a ``consensus`` factory) is listed here."""
    strategies = {
        name for name in ZOO if importlib.import_module(f"tests.zoo.{name}").KIND == "consensus"
    }
    assert strategies == set(FOUND_AT_INTERFACE)


@pytest.mark.parametrize("name", sorted(FOUND_AT_INTERFACE))
def test_explore_finds_the_strategy_entry_at_its_interface(name: str, tmp_path: Path) -> None:
    """``explore(consensus_factory=...)`` stops at the interface walk with the entry's
    shortest program; restoring copies and replaying find the same one."""
    scope, check, moves = FOUND_AT_INTERFACE[name]
    result = explore(consensus_factory=_factory(name), scope=scope, out=tmp_path)
    failure = result.failure
    assert failure is not None, result.describe()
    assert failure.check == check, result.describe()
    assert failure.target.endswith("(strategy interface)")
    assert len([line for line in failure.program.splitlines() if line]) == moves
    assert not result.exhausted
    assert len(result.parts) == 1  # the adapter walk is not made after a failure
    assert failure.path is not None
    assert failure.path.exists()
    replayed = explore(consensus_factory=_factory(name), scope=scope, restore=False)
    assert replayed.failure is not None
    assert (replayed.failure.check, replayed.failure.program) == (check, failure.program)
    assert replayed.restores == 0


def test_the_regression_file_fails_while_the_bug_is_there(tmp_path: Path) -> None:
    """The interface walk's regression file (the strategy machine's format) fails on the
    planted bug and passes on the shipped strategy it was planted in."""
    result = explore(consensus_factory=_factory("evidence_wrong_host"), scope="tiny", out=tmp_path)
    assert result.failure is not None
    assert result.failure.path is not None
    source = result.failure.path.read_text()

    def test_of(text: str, name: str):
        spec = importlib.util.spec_from_loader(name, loader=None)
        assert spec is not None
        module = importlib.util.module_from_spec(spec)
        exec(compile(text, name, "exec"), module.__dict__)
        tests = [value for key, value in vars(module).items() if key.startswith("test_")]
        assert len(tests) == 1
        return tests[0]

    with pytest.raises(AssertionError):
        test_of(source, "planted")()
    shipped = source.replace(
        "from tests.zoo.evidence_wrong_host import factory as make_strategy",
        "from runstore.consensus import LocalConsensus as make_strategy",
    )
    assert shipped != source
    test_of(shipped, "shipped")()


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_a_shipped_strategy_exhausts_the_tiny_interface_scope(name: str) -> None:
    """The tiny strategy scope at the interface: exhausted clean, the same graph whether
    source states are restored from copies or rebuilt by replay."""
    scope = STRATEGY_SCOPES["tiny"]
    restored = walk_strategy(SHIPPED[name], scope)
    replayed = walk_strategy(SHIPPED[name], scope, restore=False, depth_k=0)
    model = walk_strategy(None, scope)
    for graph in (restored, replayed):
        assert graph.exhausted
        assert graph.divergence is None
        assert len(graph.nodes) == len(model.nodes)
    assert restored.programs > 0  # the pass without deduplication, on fresh strategies
    assert restored.transitions - restored.programs == replayed.transitions
    assert restored.restores > 0
    assert replayed.restores == 0
    assert model.exhausted
    assert model.depth == scope.depth


def test_the_canonical_form_identifies_only_owners_of_one_host() -> None:
    """Walking the small strategy scope without owner symmetry reaches more states, never
    fewer, with the same answers on the reference."""
    import attrs

    scope = STRATEGY_SCOPES["small"]
    exact = attrs.evolve(scope, owner_classes=((0,), (1,), (2,)), depth=2)
    folded = attrs.evolve(scope, depth=2)
    assert len(walk_strategy(None, exact).nodes) > len(walk_strategy(None, folded).nodes)


@pytest.mark.campaign
@pytest.mark.deep
@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_a_shipped_strategy_exhausts_the_medium_interface_scope(name: str) -> None:
    """The shipped strategies exhaust the medium strategy scope clean at their own
    interface (the pass without deduplication included), a walk much longer than the small
    one: ``deep``. The small walk is the first of ``run_conformance``'s default runs of
    each (``test_conformance_reach.py``, ``test_conformance.py``), which raise unless it is
    exhausted clean."""
    graph = walk_strategy(SHIPPED[name], STRATEGY_SCOPES["medium"])
    assert graph.divergence is None, graph.divergence
    assert graph.exhausted


def test_the_command_walks_a_strategy_at_its_interface(tmp_path: Path) -> None:
    """``runstore explore --consensus MODULE:FACTORY`` walks the strategy's interface first:
    a guard that always passes is a one-move program there, exit 1, its regression file
    written."""
    root = Path(__file__).resolve().parents[3]
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "runstore",
            "explore",
            "--consensus",
            "tests.zoo.guard_always_passes:factory",
            "--scope",
            "tiny",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        cwd=root,
        timeout=300,
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "(strategy interface): stopped at the first failure" in done.stdout
    assert "tx[guard(run_id='a'" in done.stdout
    assert list(tmp_path.glob("test_regression_*.py"))


@pytest.mark.campaign
def test_sql_consensus_hosted_on_postgresql_exhausts_the_tiny_interface_scope() -> None:
    """``SqlConsensus`` in PostgreSQL's dialect, called at its interface inside transactions
    of a PostgreSQL store (a fresh database for each replay: no copies are restored off
    SQLite), exhausts the tiny strategy scope clean."""
    import runstore.postgres
    from runstore import ManualClock
    from runstore.stateful._targets._postgres import server

    found = server()
    urls: list[str] = []

    def host(strategy):
        while urls:
            found.drop(urls.pop())
        urls.append(found.fresh_database())
        return runstore.postgres.open(urls[-1], clock=ManualClock(0), consensus=strategy)

    try:
        graph = walk_strategy(SqlConsensus, STRATEGY_SCOPES["tiny"], host=host, depth_k=0)
    finally:
        while urls:
            found.drop(urls.pop())
    assert graph.divergence is None, graph.divergence
    assert graph.exhausted
    assert graph.restores == 0
    print(f"PostgreSQL host: {len(graph.nodes)} states, {graph.rebuilds} fresh databases")
