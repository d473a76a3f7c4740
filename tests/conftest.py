from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runstore import ManualClock, RunStore
from runstore.stateful._base._profiles import load_profile
from runstore.stateful._targets._postgres import _memory_folder

from . import _postgres
from ._stores import ASYNC_FACTORIES, GENERAL_PATH_FACTORIES, STORE_FACTORIES

load_profile()

#: Test modules whose store-level tests run on PostgreSQL's general path too,
#: and through the asyncio API (``ASYNC_FACTORIES``).
BOTH_PATHS = ("test_golden_",)
#: The golden module of input admission (364 cases a store) does not run
#: through the asyncio API: admission is the synchronous store's own code
#: there, and tests/aio shows each operation's arguments reach it unchanged
#: (the same parameters, and a read-only store's refusals, operation by
#: operation). Every other golden module does: on ``sqlite-async`` in the
#: default run, on ``postgres-async`` in CI's campaign step (``campaign``).
NOT_THROUGH_ASYNC = ("test_golden_boundary",)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """``store`` runs every test on each of ``STORE_FACTORIES``; the golden
    tests also on ``GENERAL_PATH_FACTORIES`` and, through the asyncio API, on
    ``ASYNC_FACTORIES``."""
    if "store" not in metafunc.fixturenames:
        return
    for mark in metafunc.definition.iter_markers("parametrize"):
        names = mark.args[0] if mark.args else mark.kwargs.get("argnames", ())
        if "store" in (names.replace(" ", "").split(",") if isinstance(names, str) else names):
            return  # the test gives ``store`` values of its own
    definitions = metafunc._arg2fixturedefs.get("store") or ()
    if definitions and definitions[-1].func is not store.__wrapped__:  # type: ignore[attr-defined]
        return  # a module's own ``store`` fixture, with its own parameters
    ids: list[Any] = sorted(STORE_FACTORIES)
    params: list[Any] = []
    if metafunc.module.__name__.rpartition(".")[2].startswith(BOTH_PATHS):
        ids += sorted(GENERAL_PATH_FACTORIES)
        if not metafunc.module.__name__.endswith(NOT_THROUGH_ASYNC):
            ids.append("sqlite-async")
            params.append(pytest.param("postgres-async", marks=pytest.mark.campaign))
    metafunc.parametrize("store", [*ids, *params], indirect=True)


@pytest.fixture(autouse=True)
def _drop_test_databases() -> Iterator[None]:
    """Drop the PostgreSQL databases a test created, after everything else."""
    yield
    _postgres.drop_created()


@pytest.fixture
def clock() -> ManualClock:
    """The store clock, starting at 0; tests move it, never sleep."""
    return ManualClock(0)


@pytest.fixture
def store(request: pytest.FixtureRequest, clock: ManualClock, tmp_path: Path) -> Iterator[RunStore]:
    """Every store under test (the model and each adapter configuration)."""
    build = (
        STORE_FACTORIES.get(request.param)
        or GENERAL_PATH_FACTORIES.get(request.param)
        or ASYNC_FACTORIES[request.param]
    )
    opened = build(clock, tmp_path)
    try:
        yield opened
        # Whatever a test did, the store must still be internally consistent.
        opened.check_invariants()
    finally:
        opened.close()


#: The run's temporary folder (``tmp_path``) when this file put it on a tmpfs.
_memory_basetemp: Path | None = None
#: The run's ``TMPDIR`` when this file put it on a tmpfs (it was unset before).
_memory_tmpdir: Path | None = None


def pytest_configure(config: pytest.Config) -> None:
    """The tests' temporary files on a tmpfs with room to spare (as the tests'
    PostgreSQL cluster is: ``_memory_folder``), unless ``--basetemp`` says
    where: SQLite files there cost the tests a tenth less time than on our
    machines' disks. Removed when the run ends, failed or not (memory is
    not a place to leave them); pass ``--basetemp`` to keep them.

    The suite's own scratch folders (a machine's database files, a walk's
    copies of source states, a check's files: ``tempfile``'s) go there too,
    by ``TMPDIR``, which the workers and every process a test starts
    inherit, unless ``TMPDIR`` is set already (measured alone, the attempt
    scope's walk of a SQLite file over LocalConsensus: 13.0 s there, 14.0 s
    and 15.0 s on the disk; a machine's runs gain less, within the noise). The
    folder is open to every user as ``/tmp`` is (sticky), so a check's child
    that runs as another user still reaches the folders made for it."""
    global _memory_basetemp, _memory_tmpdir
    if config.option.basetemp or hasattr(config, "workerinput"):
        return  # chosen on the command line, or by the xdist controller
    memory = _memory_folder()
    if memory is None:
        return
    _memory_basetemp = Path(tempfile.mkdtemp(prefix="runstore-pytest-", dir=memory))
    config.option.basetemp = str(_memory_basetemp)
    if os.environ.get("TMPDIR"):
        return
    _memory_tmpdir = Path(tempfile.mkdtemp(prefix="runstore-pytest-tmp-", dir=memory))
    os.chmod(_memory_tmpdir, 0o1777)
    os.environ["TMPDIR"] = str(_memory_tmpdir)
    tempfile.tempdir = None  # gettempdir() reads TMPDIR again


def pytest_unconfigure(config: pytest.Config) -> None:
    if _memory_basetemp is not None:  # set by the controller only
        shutil.rmtree(_memory_basetemp, ignore_errors=True)
    if _memory_tmpdir is not None:
        os.environ.pop("TMPDIR", None)
        tempfile.tempdir = None
        shutil.rmtree(_memory_tmpdir, ignore_errors=True)


#: Under pytest-xdist: each worker's clone figures, gathered by the controller.
_worker_clone_seconds: list[tuple[list[float], list[float]]] = []


def pytest_sessionfinish(session: pytest.Session) -> None:
    """An xdist worker hands its PostgreSQL clone figures to the controller."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["runstore_clone_seconds"] = _postgres.clone_seconds()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """The controller keeps a finished worker's clone figures (pytest-xdist's hook)."""
    figures = getattr(node, "workeroutput", {}).get("runstore_clone_seconds")
    if figures is not None:
        _worker_clone_seconds.append(figures)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Say what the PostgreSQL tests cost: databases cloned and how fast (every
    worker's, under pytest-xdist; each worker has a cluster of its own)."""
    clones, waits = _postgres.clone_seconds()
    for worker_clones, worker_waits in _worker_clone_seconds:
        clones, waits = clones + list(worker_clones), waits + list(worker_waits)
    if clones:

        def median_ms(values: list[float]) -> float:
            return sorted(values)[len(values) // 2] * 1000

        terminalreporter.write_line(
            f"PostgreSQL: {len(clones)} databases cloned from the template "
            f"(median {median_ms(clones):.1f} ms, max {max(clones) * 1000:.1f} ms); "
            f"tests waited a median {median_ms(waits):.1f} ms, "
            f"{sum(waits):.1f} s in all"
        )
