"""Stores and strategies the conformance suite knows how to build.

Built-in targets put the SQLite adapter under test in-memory and on a file,
with ``SqlConsensus`` or ``LocalConsensus``, the PostgreSQL store, and the
async stores ``runstore.aopen`` gives on a SQLite file and on PostgreSQL
(``sqlite-async``, ``postgres-async``: ``_aio``), behind the synchronous
stand-in the machines call (``_blocking``). A file-backed example starts from
a copy of a template database migrated once per process (``_template``), not
from a fresh migration. ``sqlite_raw_write_state`` edits a run's state behind the store's
back (the raw-corruption rule) and ``sqlite_fault_arm`` drives the adapter's
fault seam.

``load_factory("package.module:name")`` imports a third party's factory.
"""

from __future__ import annotations

import importlib
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from runstore._clock import ManualClock

from .._base._capabilities import FULL_STORE, Capabilities
from ._aio import postgres_async_store, sqlite_async_store
from ._blocking import blocking_factory
from ._template import template_database as template_database

StoreFactory = Callable[[ManualClock, Path], Any]
ConsensusFactory = Callable[[], Any]


def sqlite_store_factory(
    consensus_factory: ConsensusFactory, *, file: bool, durability: str = "normal"
) -> StoreFactory:
    """A factory for the SQLite adapter over a fresh strategy from
    ``consensus_factory``: in memory, or on ``path`` (copied from the template
    the first time, reopened as it is afterwards)."""

    def factory(clock: ManualClock, path: Path) -> Any:
        import runstore.sqlite

        if not file:
            return runstore.sqlite.open(":memory:", clock=clock, consensus=consensus_factory())
        if not path.exists():
            shutil.copyfile(template_database(), path)
        return runstore.sqlite.open(
            path,
            clock=clock,
            consensus=consensus_factory(),
            durability=durability,  # type: ignore[arg-type]
        )

    return factory


def sqlite_raw_write_state(store: Any, run_id: str, text: str) -> bool:
    """Overwrite a run's stored state with ``text`` by raw SQL, bypassing
    admission, and touch its row so the revision moves by one, as an outside
    ``UPDATE`` would. Answers whether the run existed."""

    def body(tx: Any) -> bool:
        connection = tx.connection
        mark = "$" if getattr(tx, "dialect", "sqlite") == "postgresql" else "?"
        found = connection.execute(
            f"UPDATE flows_run_state SET state_json = {mark}2 WHERE run_id = {mark}1",
            (run_id, text),
        ).rowcount
        if not found:
            return False
        connection.execute(
            f"UPDATE flows_runs SET status = status WHERE run_id = {mark}1", (run_id,)
        )
        return True

    return bool(store._write("raw_write_state", body))


def raw_writer_for(store_factory: StoreFactory) -> Callable[[Any, str, str], bool] | None:
    """How to corrupt rows of the stores ``store_factory`` builds: the store's
    own ``raw_write_state`` hook when it has one, raw SQL for the SQLite
    adapter, else ``None`` (the rule is off)."""

    def writer(store: Any, run_id: str, text: str) -> bool:
        hook = getattr(store, "raw_write_state", None)
        if callable(hook):
            return bool(hook(run_id, text))
        return sqlite_raw_write_state(store, run_id, text)

    return writer


@attrs.frozen
class Target:
    """Something to put under test: a store factory (for ``RunStoreComparison``)
    and/or a strategy factory (for ``ConsensusComparison``)."""

    name: str
    store_factory: StoreFactory | None = None
    capabilities: Capabilities = FULL_STORE
    consensus_factory: ConsensusFactory | None = None
    spec: str | None = None
    """``module:factory`` when the target was loaded by name (for regression files)."""
    kind: str = "store"


def _sql() -> Any:
    from runstore.consensus import SqlConsensus

    return SqlConsensus()


def _local() -> Any:
    from runstore.consensus import LocalConsensus

    return LocalConsensus()


def _postgres_sql_store(clock: ManualClock, path: Path) -> Any:
    from ._postgres import postgres_sql_store

    return postgres_sql_store(clock, path)


def _model_store(clock: ManualClock, _path: Path) -> Any:
    from runstore.model import ModelRunStore

    return ModelRunStore(clock=clock)


_IN_MEMORY = Capabilities(reopen=False, fault_injection=True)
_ON_FILE = Capabilities(reopen=True, fault_injection=True)

BUILTIN_TARGETS: dict[str, Target] = {
    "sqlite-sql": Target(
        "sqlite-sql", sqlite_store_factory(_sql, file=False), _IN_MEMORY, _sql, kind="builtin"
    ),
    "sqlite-local": Target(
        "sqlite-local",
        sqlite_store_factory(_local, file=False),
        _IN_MEMORY,
        _local,
        kind="builtin",
    ),
    "sqlite-file-sql": Target(
        "sqlite-file-sql", sqlite_store_factory(_sql, file=True), _ON_FILE, _sql, kind="builtin"
    ),
    "sqlite-file-local": Target(
        "sqlite-file-local",
        sqlite_store_factory(_local, file=True),
        _ON_FILE,
        _local,
        kind="builtin",
    ),
    "model": Target("model", _model_store, Capabilities(reopen=False), None, kind="builtin"),
    # A fresh database per example on RUNSTORE_TEST_POSTGRES or a throwaway
    # cluster (runstore.stateful._targets._postgres); a crash ends every connection.
    "postgres-sql": Target(
        "postgres-sql",
        _postgres_sql_store,
        Capabilities(reopen=True, fault_injection=True),
        None,
        spec="runstore.stateful._targets._postgres:postgres_sql_store",
        kind="builtin",
    ),
    # runstore.aopen's AsyncRunStore behind the synchronous stand-in (_blocking):
    # on a SQLite file (one connection), and on a fresh PostgreSQL database
    # with a pool of two connections.
    "sqlite-async": Target(
        "sqlite-async",
        sqlite_async_store,
        _ON_FILE,
        None,
        spec="runstore.stateful._targets._aio:sqlite_async_store",
        kind="builtin",
    ),
    "postgres-async": Target(
        "postgres-async",
        postgres_async_store,
        Capabilities(reopen=True, fault_injection=True),
        None,
        spec="runstore.stateful._targets._aio:postgres_async_store",
        kind="builtin",
    ),
}


def check_available(target: Target) -> None:
    """Raise ``ValueError`` saying why ``target`` cannot run here (a
    PostgreSQL target without a server), else do nothing."""
    if target.name.startswith("postgres-"):
        from ._postgres import Unavailable, server

        try:
            server()
        except Unavailable as why:
            raise ValueError(f"target {target.name} needs a PostgreSQL server: {why}") from None


def load_factory(spec: str) -> Any:
    """Import ``"package.module:attribute"`` and return the attribute."""
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise ValueError(f"expected MODULE:FACTORY, got {spec!r}")
    # As ``python -m`` would: the current directory's packages are importable.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ValueError(f"cannot import {module_name!r} for {spec!r}: {error}") from None
    value: Any = module
    for part in attribute.split("."):
        value = getattr(value, part)
    return value


def capabilities_of(factory: Any, default: Capabilities) -> Capabilities:
    """A factory (or its module) may declare ``capabilities``; else ``default``."""
    declared = getattr(factory, "capabilities", None)
    if isinstance(declared, Capabilities):
        return declared
    module = importlib.import_module(factory.__module__) if hasattr(factory, "__module__") else None
    declared = getattr(module, "capabilities", None)
    return declared if isinstance(declared, Capabilities) else default


def store_target(spec: str) -> Target:
    """A target for ``--store MODULE:FACTORY`` (an async store factory's
    stores behind the synchronous stand-in, ``_blocking``)."""
    factory = load_factory(spec)
    caps = capabilities_of(factory, Capabilities(reopen=True))
    return Target(spec, blocking_factory(factory), caps, None, spec=spec, kind="store")


def consensus_target(spec: str) -> Target:
    """A target for ``--consensus MODULE:FACTORY``: the strategy alone, and
    inside the SQLite adapter on a file."""
    factory = load_factory(spec)
    caps = capabilities_of(factory, _ON_FILE)
    return Target(
        spec,
        sqlite_store_factory(factory, file=caps.reopen),
        caps,
        factory,
        spec=spec,
        kind="consensus",
    )


def capability_overrides(text: str | None, *, no_reopen: bool = False) -> dict[str, bool]:
    """``--capabilities reopen=false,fault_injection=true`` (and ``--no-reopen``)
    as field overrides of ``Capabilities``."""
    known = {field.name for field in attrs.fields(Capabilities)}
    overrides: dict[str, bool] = {}
    for item in (text or "").split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, value = item.partition("=")
        name = name.strip().replace("-", "_")
        if name not in known:
            raise ValueError(
                f"unknown capability {name!r} in {text!r}; known: {', '.join(sorted(known))}"
            )
        flag = value.strip().lower() if sep else "true"
        if flag not in ("true", "false", "1", "0", "yes", "no"):
            raise ValueError(f"capability {name!r} wants true or false, got {value!r}")
        overrides[name] = flag in ("true", "1", "yes")
    if no_reopen:
        overrides["reopen"] = False
    return overrides


def with_capabilities(target: Target, overrides: dict[str, bool]) -> Target:
    """``target`` with the capabilities given on the command line applied over
    the ones its factory declares."""
    if not overrides:
        return target
    caps = attrs.evolve(target.capabilities, **overrides)
    if target.kind == "consensus" and target.consensus_factory is not None:
        # The adapter over the strategy lives on a file only when it can reopen.
        factory = sqlite_store_factory(target.consensus_factory, file=caps.reopen)
        return attrs.evolve(target, capabilities=caps, store_factory=factory)
    return attrs.evolve(target, capabilities=caps)
