"""The conformance suite drives async stores: ``run_conformance`` takes an
async store factory (its stores behind the synchronous stand-in,
``runstore.stateful._targets._blocking``), and the built-in targets
``sqlite-async`` and ``postgres-async`` (``runstore.aopen`` on a SQLite file,
and on PostgreSQL with a pool of two connections) pass it, as they pass the
explorer's small scope.

In the default run: a short conformance run of ``sqlite-async``, the async
zoo (single bugs of an async store, each caught), a bug on the second
connection of a pool caught (the pool is exercised), and ``runstore fuzz``
taking the targets. Runs under the loaded profile are campaigns (``-m
campaign``, CI's campaign step); the default budget and the small scopes are
``deep`` as well. Their measured times are in their docstrings.
"""

from __future__ import annotations

import importlib
import io
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.errors import FlakyFailure
from hypothesis.stateful import run_state_machine_as_test

import runstore
from runstore.stateful import StoreCrashed, conformance_machines, explore, run_conformance
from runstore.stateful._base._observe import Observer, observing
from runstore.stateful._campaigns._budget import default_settings
from runstore.stateful._campaigns._fuzz import fuzz_target, machines_for, resolve_target
from runstore.stateful._explore._replay import Sut
from runstore.stateful._explore._scope import scope_named
from runstore.stateful._explore._workers import _factory
from runstore.stateful._targets._aio import open_sqlite_async, postgres_async_factory
from runstore.stateful._targets._blocking import attempt_store_over
from runstore.stateful._targets._builtin import BUILTIN_TARGETS, load_factory, store_target

from ... import _postgres
from .test_regression_files import _pytest

#: Single bugs of an async store (``tests/zoo``), each caught by the check it names.
ASYNC_ZOO = (
    "async_transition_drops_guard",
    "async_heartbeat_wrong_run",
    "async_heartbeat_answers_early",
)
#: The PostgreSQL examples, at most (each is a fresh database and two connections).
EXAMPLES = 40

SQLITE_ASYNC = BUILTIN_TARGETS["sqlite-async"]
POSTGRES_ASYNC = BUILTIN_TARGETS["postgres-async"]


def short(examples: int = 4, steps: int = 20, *, shrink: bool = True) -> settings:
    """A short, repeatable run (without shrinking: a failure as it was found)."""
    phases = (Phase.explicit, Phase.reuse, Phase.generate) + ((Phase.shrink,) if shrink else ())
    return settings(
        max_examples=examples,
        stateful_step_count=steps,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        phases=phases,
    )


def test_the_async_sqlite_target_conforms_in_a_short_run() -> None:
    """``runstore.aopen`` on a SQLite file, as an ``async def`` factory: the
    run-store machine and the attempt machine (over ``AsyncAttemptStore``),
    crashes, faults and raw edits included, agree with the reference."""
    machines = conformance_machines(
        store_factory=open_sqlite_async, capabilities=SQLITE_ASYNC.capabilities
    )
    assert [m.budget_kind for m in machines] == ["store", "attempts"]
    run_conformance(
        store_factory=open_sqlite_async,
        capabilities=SQLITE_ASYNC.capabilities,
        settings=short(),
        explore=False,
    )


def _run_default_budget(machines: list) -> None:
    for machine in machines:
        run_state_machine_as_test(machine, settings=default_settings(machine, shrink=False))


@pytest.mark.parametrize("name", ASYNC_ZOO)
def test_an_async_store_bug_is_caught_by_its_expected_check(name: str) -> None:
    """Each broken async store fails one of ``run_conformance``'s machines with
    the check its module names, within that machine's default budget (the
    first examples, in practice: under two seconds each)."""
    module = importlib.import_module(f"tests.zoo.{name}")
    observer = Observer()
    machines = conformance_machines(store_factory=module.factory, capabilities=module.capabilities)
    with observing(observer), pytest.raises(AssertionError) as caught:
        _run_default_budget(machines)
    assert type(caught.value).__name__ == module.EXPECTED_CHECK


def test_a_bug_on_the_second_connection_of_a_pool_is_caught() -> None:
    """The ``postgres-async`` target's store has two connections, and a
    program's calls meet both: a store whose second connection's SQL store
    fails every ``get`` is caught (were every call sent to the first, it
    would pass)."""
    _postgres.require_server()
    opened = postgres_async_factory()

    async def second_connection_broken(clock, path):
        store = await opened(clock, path)
        second = store.sync_stores[1]

        class Broken(type(second)):
            def get(self, run_id):
                raise RuntimeError("the second connection is broken")

        second.__class__ = Broken
        return store

    machine = conformance_machines(
        store_factory=second_connection_broken, capabilities=POSTGRES_ASYNC.capabilities
    )[0]
    # Which connection serves a call is the store's own scheduling, so a
    # replay of the failing program may meet only the first one: Hypothesis
    # then reports the same crash inside a FlakyFailure.
    with pytest.raises((StoreCrashed, FlakyFailure)) as caught:
        run_state_machine_as_test(machine, settings=short(examples=3, shrink=False))
    crashes = [caught.value]
    if isinstance(caught.value, FlakyFailure):
        crashes = list(caught.value.exceptions)
    assert any(
        isinstance(crash, StoreCrashed) and "RuntimeError" in str(crash) for crash in crashes
    ), crashes


def test_runstore_fuzz_and_explore_take_the_async_targets() -> None:
    """``runstore fuzz --target sqlite-async`` puts the run-store machine and
    the attempt machine (over ``AsyncAttemptStore``) on it; the explorer's
    workers import the target by name. (A fuzz campaign on an async store runs
    in ``test_a_fuzz_failure_of_an_async_store_becomes_a_failing_regression_file``.)"""
    target = resolve_target("sqlite-async")
    machines = machines_for(target)
    assert [m.budget_kind for m in machines] == ["store", "attempts"]
    assert machines[1].attempt_store_factory is attempt_store_over
    assert _factory("sqlite-async") is SQLITE_ASYNC.store_factory
    assert POSTGRES_ASYNC.spec is not None
    assert load_factory(POSTGRES_ASYNC.spec) is POSTGRES_ASYNC.store_factory


def test_the_explorer_restores_an_async_store_of_ours_and_replays_one_with_data() -> None:
    """The explorer copies and restores ``runstore.aopen``'s store through its
    first connection (it holds nothing of its own); a subclass that keeps a
    member of its own (it may hold data) is rebuilt by replay instead."""
    scope = scope_named("tiny")

    async def keeps_a_cache(clock, path):
        store = await open_sqlite_async(clock, path)
        store.cache = {}
        return store

    for factory, kind in ((open_sqlite_async, "sqlite"), (keeps_a_cache, None)):
        sut = Sut(factory, SQLITE_ASYNC.capabilities, scope)
        try:
            sut.build([])
            assert sut.owned() == kind
        finally:
            sut.close()


# -- campaigns ---------------------------------------------------------------------


async def fixed_async_store(clock, path):
    """``runstore.aopen``'s store in memory: the async zoo's bugs, fixed."""
    return await runstore.aopen(":memory:", clock=clock)


@pytest.mark.campaign
def test_a_fuzz_failure_of_an_async_store_becomes_a_failing_regression_file(tmp_path: Path):
    """``runstore fuzz --store`` on an async zoo bug writes a file that opens
    the store through the stand-in, as the machines did; it fails while the
    bug is there, and passes once its import names a correct async store
    (24 s)."""
    stream = io.StringIO()
    bug = "tests.zoo.async_heartbeat_wrong_run"
    written = fuzz_target(
        store_target(f"{bug}:factory"),
        seconds=None,
        examples=200,
        seed_value=1,
        db_dir=tmp_path / "db",
        out_dir=tmp_path / "out",
        stream=stream,
    )
    assert written is not None, stream.getvalue()
    source = written.read_text()
    assert "blocking_factory(open_store)(clock, path)" in source
    failed = _pytest(written)
    assert failed.returncode == 1, failed.stdout
    fixed = tmp_path / "fixed" / written.name
    fixed.parent.mkdir()
    broken = f"from {bug} import factory as open_store"
    assert broken in source
    here = "tests.stateful.campaigns.test_async_conformance"
    fixed.write_text(source.replace(broken, f"from {here} import fixed_async_store as open_store"))
    passed = _pytest(fixed)
    assert passed.returncode == 0, passed.stdout


@pytest.mark.campaign
def test_the_async_sqlite_target_conforms_under_the_loaded_profile() -> None:
    """The loaded profile (``ci`` in CI), machines only: ``sqlite-async``
    conforms. CI's campaign step runs this one; the default budget below is
    deep, as CI has no two minutes to spare for it: the async store's lanes
    run the very SQLite store whose default budget CI's campaign step runs
    (``test_conformance.py``), so what the async run adds is the hand-over,
    which this run and the short run of the default test command cover."""
    run_conformance(
        store_factory=SQLITE_ASYNC.store_factory,
        capabilities=SQLITE_ASYNC.capabilities,
        settings=settings(),
        explore=False,
    )


@pytest.mark.campaign
@pytest.mark.deep
def test_the_async_sqlite_target_conforms() -> None:
    """The default budget, machines only (the small scope is its own test):
    ``sqlite-async`` conforms (118 s, 103 s of CPU, at load 3; 114 s in CI's
    campaign step at load 2, which is why it is deep now)."""
    run_conformance(
        store_factory=SQLITE_ASYNC.store_factory,
        capabilities=SQLITE_ASYNC.capabilities,
        explore=False,
    )


@pytest.mark.campaign
def test_the_async_postgres_target_conforms() -> None:
    """The loaded profile (at most ``EXAMPLES`` examples per machine, each a
    fresh database), machines only: ``postgres-async`` conforms, its calls
    spread over a pool of two connections (83 s under the ``ci`` profile, at
    load 3)."""
    _postgres.require_server()
    current = settings()
    run_conformance(
        store_factory=POSTGRES_ASYNC.store_factory,
        capabilities=POSTGRES_ASYNC.capabilities,
        settings=settings(current, max_examples=min(current.max_examples, EXAMPLES)),
        explore=False,
    )


@pytest.mark.campaign
@pytest.mark.deep
def test_the_async_sqlite_target_exhausts_the_small_scope() -> None:
    """``explore(target="sqlite-async")``: the small scope and then the
    attempt scope, every transition applied through the async store (the
    source states restored through its connection), exhausted clean (232 s,
    189 s of CPU, at load 3 to 5: deep, as CI's campaign step has no four
    minutes to spare; the loaded profile's run above is CI's)."""
    began = time.monotonic()
    result = explore(target="sqlite-async", scope="small")
    assert result.exhausted, result.describe()
    assert result.failure is None, result.describe()
    assert result.attempts is not None
    assert result.attempts.exhausted
    print(f"sqlite-async small scope: {time.monotonic() - began:.0f} s; {result.describe()}")


@pytest.mark.campaign
@pytest.mark.deep
def test_the_async_postgres_target_exhausts_the_small_scope() -> None:
    """``explore(target="postgres-async")``: the small scope and the attempt
    scope on PostgreSQL through the async store, exhausted clean (747 s, 302 s
    of the walk's CPU, at load 4 to 6: deep, near a quarter of an hour)."""
    _postgres.require_server()
    began = time.monotonic()
    result = explore(target="postgres-async", scope="small")
    assert result.exhausted, result.describe()
    assert result.failure is None, result.describe()
    print(f"postgres-async small scope: {time.monotonic() - began:.0f} s; {result.describe()}")
