"""The explorer's zoo (issue 25): short-program bugs that today's default
``run_conformance`` lets through, and ``explore`` finds as shortest programs.

Each module named in ``tests.zoo.EXPLORE_ZOO`` is one realistic bug (a small
change to the shipped SQLite store) of a kind the suite claims to check: a
write's guard skipped on one code path (``BUG_KIND = "fencing"``: the store's
own checks; its owner and evidence checks are made twice, by the store and by
the strategy, so one change in either is masked by the other), state lost by one
transition, a read lagging an acknowledged write, an ordering or filter rule
of a read broken.
Each survived the whole default budget of ``run_conformance`` at 9e899fd
(before the explorer joined it); ``tests/zoo/EXPLORE_ZOO.md`` records those
runs and the explorer's. Here ``explore`` must find each one, at the scope its
module names (``EXPLORE_SCOPE``), as a program of exactly ``SHORTEST`` moves
after the scope's setup, failing the check the module expects
(``EXPECTED_CHECK``): breadth-first, so no shorter program shows the bug.

Walking the small scope up to a finding takes from under a second to 17 s per
entry on a two-core machine at load 5 (the set: 56 s; 421 s at load 17 with
an earlier explorer), so the set is a campaign; one entry found in the tiny
scope (about a second) stays in the default run.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

import pytest

import runstore.stateful as stateful

from ...zoo import EXPLORE_ZOO

explore = getattr(stateful, "explore", None)

pytestmark = pytest.mark.skipif(
    explore is None, reason="runstore.stateful has no explore yet (issue 25's explorer)"
)

#: The entry the default run explores, in the tiny scope (one run, depth 3).
CHEAP = "list_stale_cutoff_inclusive"


def _entry(name: str) -> ModuleType:
    return importlib.import_module(f"tests.zoo.{name}")


def _under_test(module: ModuleType) -> dict[str, Any]:
    if module.KIND == "consensus":
        return {"consensus_factory": module.factory}
    return {"store_factory": module.factory, "capabilities": module.capabilities}


def _moves(program: str) -> list[str]:
    """The program's moves after the scope's setup (its ``create`` lines)."""
    return [line for line in program.splitlines() if line and not line.startswith("create(")]


def _found(name: str, scope: str) -> Any:
    module = _entry(name)
    result = explore(scope=scope, **_under_test(module))
    failure = result.failure
    assert failure is not None, f"{name}: explore({scope}) found nothing: {result.describe()}"
    print(f"explore zoo {name} [{scope}] {result.elapsed_s:.1f} s:\n{failure.program}")
    assert failure.check == module.EXPECTED_CHECK, result.describe()
    return failure


def test_the_explore_zoo_has_two_entries_of_each_kind():
    """At least two entries per kind of bug the issue names, none also in ``ZOO`` (whose
    test expects today's run_conformance to catch every entry)."""
    from ...zoo import ZOO

    assert not set(EXPLORE_ZOO) & set(ZOO)
    kinds: dict[str, int] = {}
    for name in EXPLORE_ZOO:
        module = _entry(name)
        kinds[module.BUG_KIND] = kinds.get(module.BUG_KIND, 0) + 1
        assert module.EXPLORE_SCOPE in ("tiny", "small", "medium", "large")
        assert module.SHORTEST >= 1
    assert set(kinds) == {"fencing", "state-lost", "read-lag", "read-order"}, kinds
    assert min(kinds.values()) >= 2, kinds


def test_explore_finds_the_cheap_entry_in_the_tiny_scope():
    """The stale filter's inclusive cutoff: one run, an owner, the clock onto the staleness
    cutoff, a listing: three moves, found in the tiny scope in seconds."""
    failure = _found(CHEAP, "tiny")
    moves = _moves(failure.program)
    assert len(moves) == 3, failure.program
    assert moves[-1].startswith("list_runs(stale_at="), failure.program


@pytest.mark.campaign
@pytest.mark.parametrize("name", EXPLORE_ZOO)
def test_explore_finds_each_entry_as_a_shortest_program(name: str) -> None:
    """``explore`` at the entry's scope fails it with its expected check, as a program of
    exactly ``SHORTEST`` moves after the setup."""
    module = _entry(name)
    failure = _found(name, module.EXPLORE_SCOPE)
    assert len(_moves(failure.program)) == module.SHORTEST, failure.program
