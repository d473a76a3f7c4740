"""``runstore.open``'s modes on both backends: ``read_only=True`` never writes
and refuses every write, ``migrate=False`` refuses a database that needs
migrating, and neither creates what is missing.

A read-only store answers every read (``get``, ``lineage``, ``latest_round``,
``ownership_facts``, ``revision``, ``changes``, ``state``,
``check_invariants``, ``list_runs`` when the store has it, the attempt
reads) as a writable one does, and raises ``persistence_failed`` with
``cause["stage"] == "read-only"`` from every write operation, even one that
would have answered a loss without writing, while bad input is still
``invalid_run``. Nothing in the database changes: on SQLite the bytes and
modes of the file and of its side files (and their absence), on PostgreSQL
every row of the schema. A database with pending migrations is refused by
both modes, naming the steps, and left as it was.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

import runstore
from runstore import (
    LivenessEvidence,
    ManualClock,
    OwnerId,
    RunSnapshot,
    RunStoreError,
    UnsupportedDatabaseError,
)
from runstore.attempts import Attempt, AttemptStore, AttemptStoreError, FinishAttempt
from runstore.consensus import LocalConsensus
from runstore.sqlite import _migrations

from .. import _postgres

OWNER = OwnerId("host-a", 1, "nonce-a")
OTHER = OwnerId("host-b", 2, "nonce-b")
PENDING = RunSnapshot("pending", None, None)
NOW = 100_000


def _populate(store: Any, clock: ManualClock) -> None:
    """A pending run, a running one with an attempt, a lineage of two rounds,
    a settled run."""
    store.create("pending", '{"secret": "p"}')
    store.create("running", '{"secret": "r"}')
    store.create("round-1", "{}", lineage_id="L", round_ordinal=1)
    store.create("round-2", "{}", parent_run_id="round-1", lineage_id="L", round_ordinal=2)
    store.create("done", "{}")
    clock.set(NOW)
    assert store.claim_and_own("running", PENDING, OWNER, NOW) == runstore.Activated()
    assert store.claim_and_own("done", PENDING, OWNER, NOW) == runstore.Activated()
    assert store.transition_owned("done", OWNER, "completed") == runstore.Transitioned()
    AttemptStore(store).put(Attempt("running", "step", 1, "running", NOW, meta={}), OWNER)


@attrs.frozen
class Backend:
    """A migrated, populated database and how to look at it from outside."""

    name: str
    target: str
    #: Everything stored, as bytes: changes whenever anything is written.
    fingerprint: Callable[[], object]


def _sqlite_fingerprint(path: Path) -> Callable[[], object]:
    def look() -> object:
        found = []
        for suffix in ("", "-wal", "-shm", "-journal"):
            name = Path(f"{path}{suffix}")
            if name.exists():
                info = name.stat()
                found.append((suffix, name.read_bytes(), stat.S_IMODE(info.st_mode)))
        return (sorted(os.listdir(path.parent)), found)

    return look


def _postgres_fingerprint(url: str) -> Callable[[], object]:
    psycopg = pytest.importorskip("psycopg")

    def look() -> object:
        digest = hashlib.sha256()
        with psycopg.connect(url, autocommit=True) as connection:
            tables = connection.execute(
                "SELECT table_name FROM information_schema.tables "
                "WHERE table_schema = current_schema() ORDER BY table_name"
            ).fetchall()
            for (table,) in tables:
                rows = connection.execute(
                    f'SELECT t::text FROM "{table}" AS t ORDER BY t::text COLLATE "C"'
                ).fetchall()
                digest.update(repr((table, rows)).encode())
        return ([t for (t,) in tables], digest.hexdigest())

    return look


@pytest.fixture(params=["sqlite-file", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    clock = ManualClock(0)
    if request.param == "sqlite-file":
        path = tmp_path / "runs.db"
        target = str(path)
        look = _sqlite_fingerprint(path)
    else:
        pytest.importorskip("runstore.postgres")
        target = _postgres.database_url()
        look = _postgres_fingerprint(target)
    with runstore.open(target, clock=clock) as store:
        _populate(store, clock)
    return Backend(request.param, target, look)


def _writes(store: Any) -> dict[str, Callable[[], object]]:
    """Every write operation, with arguments a writable store would act on
    (or answer a loss to without a transaction: steal and recover_claim with
    evidence that does not match)."""
    running = store.get("running")
    evidence = LivenessEvidence(OTHER, NOW, "same-host-pid-dead")
    attempts = AttemptStore(store)
    writes: dict[str, Callable[[], object]] = {
        "create": lambda: store.create("new", "{}"),
        "request_cancel": lambda: store.request_cancel("running", NOW),
        "request_cancel_lineage": lambda: store.request_cancel_lineage("round-2", NOW),
        "acknowledge_cancel": lambda: store.acknowledge_cancel("running", OWNER, NOW),
        "claim": lambda: store.claim("pending", PENDING, OTHER, NOW),
        "claim_and_own": lambda: store.claim_and_own("pending", PENDING, OTHER, NOW),
        "claim_and_own_without_evidence": lambda: store.claim_and_own(
            "running", running, OTHER, NOW
        ),
        "activate": lambda: store.activate("pending", OTHER, NOW, PENDING),
        "abandon_claim": lambda: store.abandon_claim("pending", OTHER, NOW),
        "recover_claim": lambda: store.recover_claim("pending", OTHER, NOW, OWNER, NOW, evidence),
        "heartbeat": lambda: store.heartbeat("running", OWNER, NOW + 1),
        "reconfirm": lambda: store.reconfirm("running", OWNER, NOW + 1),
        "transition_owned": lambda: store.transition_owned("running", OWNER, "completed"),
        "steal": lambda: store.steal("running", running, OTHER, NOW, evidence),
        "attempt put": lambda: attempts.put(
            Attempt("running", "step", 2, "running", NOW, meta={}), OWNER
        ),
        "attempt heartbeat": lambda: attempts.heartbeat("running", "step", 1, OWNER, NOW + 1),
        "attempt finish": lambda: attempts.finish(
            FinishAttempt("running", "step", 1, "succeeded", NOW + 1), OWNER
        ),
    }
    if hasattr(store, "heartbeat_many"):
        writes["heartbeat_many"] = lambda: store.heartbeat_many(OWNER, ["running"], NOW + 1)
    if hasattr(store, "claim_next"):
        writes["claim_next"] = lambda: store.claim_next(OTHER, NOW)
    if hasattr(store, "purge_settled"):
        writes["purge_settled"] = lambda: store.purge_settled(NOW + 1)
    return writes


def _reads(store: Any) -> dict[str, object]:
    attempts = AttemptStore(store)
    found: dict[str, object] = {
        "get": store.get("running"),
        "lineage": store.lineage("round-1"),
        "latest_round": store.latest_round("round-1"),
        "ownership_facts": store.ownership_facts("running"),
        "revision": store.revision(),
        "changes": store.changes(0),
        "state": store.state(),
        "check_invariants": store.check_invariants(),
        "attempts": attempts.state(),
        "attempt": attempts.get(Attempt("running", "step", 1, "running", NOW, meta={})),
        "attempt invariants": attempts.check_invariants(),
    }
    if hasattr(store, "list_runs"):
        found["list_runs"] = store.list_runs(status="running")
    return found


def test_a_read_only_store_reads_what_a_writable_one_does(backend: Backend) -> None:
    with runstore.open(backend.target, clock=ManualClock(NOW)) as writable:
        expected = _reads(writable)
    before = backend.fingerprint()
    with runstore.open(backend.target, clock=ManualClock(NOW), read_only=True) as store:
        assert store.read_only
        assert "read_only=True" in repr(store)
        assert _reads(store) == expected
    assert backend.fingerprint() == before


def test_every_write_on_a_read_only_store_is_refused(backend: Backend) -> None:
    before = backend.fingerprint()
    with runstore.open(backend.target, clock=ManualClock(NOW), read_only=True) as store:
        for name, write in _writes(store).items():
            with pytest.raises((RunStoreError, AttemptStoreError)) as caught:
                write()
            error = caught.value
            assert error.code == "persistence_failed", name
            assert error.cause["stage"] == "read-only", name
            assert "read-only" in str(error), name
            assert error.__cause__ is None, name
            assert error.__context__ is None or error.__suppress_context__, name
    assert backend.fingerprint() == before


def test_the_same_writes_act_on_a_writable_store(backend: Backend) -> None:
    """The control: each refused write would have run (answered without
    raising) on the same database opened writable."""
    with runstore.open(backend.target, clock=ManualClock(NOW)) as store:
        assert not store.read_only
        for name, write in _writes(store).items():
            write()  # an outcome value, never an exception
            assert name


def test_bad_input_to_a_read_only_store_is_still_invalid_run(backend: Backend) -> None:
    with runstore.open(backend.target, clock=ManualClock(NOW), read_only=True) as store:
        with pytest.raises(RunStoreError) as caught:
            store.create("", "{}")
        assert caught.value.code == "invalid_run"
        with pytest.raises(RunStoreError) as caught:
            store.steal("running", store.get("running"), OTHER, -1, None)  # type: ignore[arg-type]
        assert caught.value.code == "invalid_run"


def test_read_only_and_migrate_must_be_booleans(backend: Backend) -> None:
    for option in ("read_only", "migrate"):
        with pytest.raises(RunStoreError) as caught:
            runstore.open(backend.target, **{option: 1})
        assert caught.value.code == "invalid_run"
        assert caught.value.cause["field"] == option


def test_a_database_opened_with_migrate_false_is_writable(backend: Backend) -> None:
    with runstore.open(backend.target, clock=ManualClock(NOW), migrate=False) as store:
        assert not store.read_only
        store.create("more", "{}")
        store.check_invariants()


def test_a_read_only_strategy_hook_runs_in_a_snapshot(tmp_path: Path) -> None:
    """LocalConsensus rebuilds its leases in ``on_open``: on a read-only store
    it reads them from the rows, and the store's state shows them."""
    path = tmp_path / "runs.db"
    clock = ManualClock(0)
    with runstore.open(path, clock=clock, consensus=LocalConsensus()) as store:
        _populate(store, clock)
        leases = store.state().leases
    assert leases
    with runstore.open(path, consensus=LocalConsensus(), read_only=True) as store:
        assert store.state().leases == leases
        store.check_invariants()


# -- what is missing stays missing -------------------------------------------------------


@pytest.mark.parametrize("mode", ["read_only", "migrate"])
def test_a_missing_sqlite_file_is_refused_and_not_created(tmp_path: Path, mode: str) -> None:
    path = tmp_path / "absent.db"
    options = {"read_only": True} if mode == "read_only" else {"migrate": False}
    with pytest.raises(RunStoreError) as caught:
        runstore.open(path, **options)
    error = caught.value
    assert error.code == "persistence_failed"
    assert error.cause["stage"] == "missing"
    assert "the database file does not exist" in str(error)
    assert os.listdir(tmp_path) == []


def test_memory_cannot_be_opened_read_only() -> None:
    with pytest.raises(RunStoreError) as caught:
        runstore.open(":memory:", read_only=True)
    assert caught.value.code == "invalid_run"
    assert caught.value.cause["field"] == "read_only"


@pytest.mark.parametrize("mode", ["read_only", "migrate"])
def test_a_missing_postgres_schema_is_refused_and_not_created(mode: str) -> None:
    pytest.importorskip("runstore.postgres")
    psycopg = pytest.importorskip("psycopg")
    url = _postgres.database_url()
    options = {"read_only": True} if mode == "read_only" else {"migrate": False}
    with pytest.raises(RunStoreError) as caught:
        runstore.open(url, schema="absent", **options)
    error = caught.value
    assert error.code == "persistence_failed"
    assert error.cause["stage"] == "missing"
    assert "the schema does not exist" in str(error)
    with psycopg.connect(url) as connection:
        found = connection.execute("SELECT 1 FROM pg_namespace WHERE nspname = 'absent'").fetchone()
    assert found is None


# -- a database that needs migrating --------------------------------------------------------


@pytest.fixture(params=["sqlite-file", "postgres"])
def outdated(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """A database migrated up to (not including) the last two steps."""
    count = len(_migrations.MIGRATIONS) - 2
    if request.param == "sqlite-file":
        path = tmp_path / "old.db"
        connection = sqlite3.connect(path, isolation_level=None)
        connection.execute("PRAGMA journal_mode = WAL")
        _migrations.apply(connection, count)
        connection.close()
        yield Backend(request.param, str(path), _sqlite_fingerprint(path))
        return
    pytest.importorskip("runstore.postgres")
    psycopg = pytest.importorskip("psycopg")
    from runstore.postgres import _migrations as pg_migrations

    url = _postgres.database_url()
    with psycopg.connect(url, autocommit=True, cursor_factory=psycopg.RawCursor) as c:
        c.execute("CREATE SCHEMA old")
        c.execute("SET search_path TO old")
        pg_migrations.apply(c.execute, "old", count)
    yield Backend(
        request.param,
        _with_query(url, "schema=old"),
        _postgres_fingerprint(_with_query(url, "options=-csearch_path%3Dold")),
    )


def _with_query(url: str, pair: str) -> str:
    return f"{url}&{pair}" if "?" in url else f"{url}?{pair}"


@pytest.mark.parametrize("mode", ["read_only", "migrate"])
def test_a_database_that_needs_migrating_is_refused_naming_the_steps(
    outdated: Backend, mode: str
) -> None:
    options = {"read_only": True} if mode == "read_only" else {"migrate": False}
    before = outdated.fingerprint()
    with pytest.raises(UnsupportedDatabaseError) as caught:
        runstore.open(outdated.target, **options)
    error = caught.value
    pending = _migrations.MIGRATIONS[-2:]
    expected = {"stage": "needs-migration", "pending_migrations": [step.id for step in pending]}
    if outdated.name == "postgres":
        expected["reason"] = "needs-migration"  # every persistence_failed there names one
    assert error.cause == expected
    for step in pending:
        assert f"{step.id} {step.name}" in str(error)
    assert "runstore migrate" in str(error)
    assert outdated.fingerprint() == before
    # The control: an ordinary open migrates it.
    with runstore.open(outdated.target) as store:
        store.check_invariants()
    assert outdated.fingerprint() != before
