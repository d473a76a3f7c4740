"""A clean store is judged clean on a busy machine: with every core kept busy
(one CPU-burning child process per core, for the whole test, killed when it
ends), the checks that wait on real time pass the shipped stores, and so
does a ``run_conformance`` given Hypothesis's own settings (its 200 ms
deadline and too-slow health check), as a script run outside pytest gets
them. Before, that run failed on any machine (``DeadlineExceeded``: an
example is a whole program, and the opening check holds a lock for 0.3 s).

Each check runs under its default budget without shrinking, as the other
tests of the checks do, so a failure ends the test instead of a long shrink
under load.

A campaign run alone (``-m alone -n 0``, a step of its own in ``.ci/run``),
which the README's ``python -m pytest`` and CI's campaign step leave out:
its burners take the cores from every other test running beside it (the
README's run was about 40 s longer with it), and a test that gives real
processes real seconds to act (a fleet's takeovers) missed its bound beside
it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from runstore.consensus import LocalConsensus, SqlConsensus
from runstore.stateful import Capabilities, conformance_machines, opening_check_for, run_conformance
from runstore.stateful._campaigns._budget import default_settings, machine_kind

from ... import _postgres

pytestmark = [
    pytest.mark.campaign,
    pytest.mark.alone,
    pytest.mark.slow,
    pytest.mark.timeout(900),
]

#: A child that burns CPU until it is killed, or until the process that
#: started it is gone (it is then some other process's child).
BURN = "import os\nparent = os.getppid()\nwhile os.getppid() == parent:\n    pass\n"


def cores() -> int:
    """The cores this process may run on (not every core the host has)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


@pytest.fixture
def every_core_busy() -> Iterator[list[subprocess.Popen[bytes]]]:
    """One CPU-burning child per core while the test runs, killed after it."""
    burners = [
        subprocess.Popen(
            [sys.executable, "-c", BURN],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(cores())
    ]
    try:
        yield burners
    finally:
        for burner in burners:
            burner.kill()
        for burner in burners:
            burner.wait(30)


def burned_throughout(burners: list[subprocess.Popen[bytes]]) -> bool:
    return all(burner.poll() is None for burner in burners)


def test_the_opening_check_passes_with_every_core_busy(
    every_core_busy: list[subprocess.Popen[bytes]],
) -> None:
    """The opening check holds a file's lock for ``HOLD_S`` while an opener
    waits it out (5 s of retries), a read-only store waits out an exclusive
    holder, every open is bounded by ``WAIT_S``, and as root a child
    interpreter opens as ``nobody`` (bounded by ``CHILD_WAIT_S``): it passes
    ``runstore.open`` with the CPU taken."""
    machine = opening_check_for(SqlConsensus, name="loaded")
    run_state_machine_as_test(machine, settings=default_settings(machine, shrink=False))
    assert burned_throughout(every_core_busy)


def test_the_postgres_checks_pass_with_every_core_busy(
    every_core_busy: list[subprocess.Popen[bytes]],
) -> None:
    """The server-clock check (offsets judged within windows measured on the
    monotonic clock), the session check (ended backends gone within 5 s, a
    300 ms statement timeout, an interrupt answered within 3 s) and the
    schema check pass the PostgreSQL store with the CPU taken."""
    pytest.importorskip("runstore.postgres")
    _postgres.require_server()
    from runstore.stateful._targets._postgres import postgres_store_factory

    machines = conformance_machines(
        store_factory=postgres_store_factory(),
        capabilities=Capabilities(reopen=True, server_clock=True, postgres_server=True),
    )
    timed = [m for m in machines if machine_kind(m) in ("server-clock", "pg-session", "pg-schema")]
    assert len(timed) == 3
    for machine in timed:
        run_state_machine_as_test(machine, settings=default_settings(machine, shrink=False))
    assert burned_throughout(every_core_busy)


def test_a_run_with_hypothesis_own_settings_passes_with_every_core_busy(
    every_core_busy: list[subprocess.Popen[bytes]],
) -> None:
    """``run_conformance`` judges a clean strategy clean whatever settings it
    is given: here Hypothesis's own defaults (a 200 ms deadline per example,
    the too-slow health check on), derandomized and without an example
    database, with a smoke run's budget, as a script outside pytest would
    run it. Every machine runs: the strategy, the adapter over it on a file,
    the attempts and the opening check."""
    hypothesis_own = settings.get_profile("default")
    assert hypothesis_own.deadline is not None
    run_conformance(
        consensus_factory=LocalConsensus,
        settings=settings(
            hypothesis_own,
            max_examples=5,
            stateful_step_count=10,
            derandomize=True,
            database=None,
        ),
    )
    assert burned_throughout(every_core_busy)
