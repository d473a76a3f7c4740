"""Processes that open one PostgreSQL schema at once, and rolling upgrades.

Several processes opening a schema that needs migrating (missing, or from
an earlier version) serialize on the schema's advisory lock: each step is
applied once, by whichever got the lock first, and every process opens.
For deployments that migrate once (``runstore migrate DB``), processes
opened with ``migrate=False`` refuse a schema that still needs it and open
it once it is migrated.

The rolling-upgrade policy (docs/guides/fleet.md): a release's migrations
only add (tables, nullable columns, indexes, functions), so a store an
older release opened before the upgrade keeps serving afterwards, and an
older release refuses to *open* a schema with migrations it does not know,
naming them, and changes nothing.
"""

from __future__ import annotations

import subprocess
import sys
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest

from runstore import Activated, ManualClock, OwnerId, RunSnapshot, UnsupportedDatabaseError

from .. import _postgres
from .test_postgres_concurrency import _Racers

postgres = pytest.importorskip("runstore.postgres")
psycopg = pytest.importorskip("psycopg")

from runstore.postgres import _migrations  # noqa: E402

OPENERS = 4
OWNER = OwnerId("host-a", 1, "nonce-a")
PENDING = RunSnapshot("pending", None, None)


def with_schema(url: str, schema: str) -> str:
    parts = urllib.parse.urlsplit(url)
    query = [*urllib.parse.parse_qsl(parts.query), ("schema", schema)]
    return urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(query)))


@pytest.fixture
def url() -> str:
    return _postgres.database_url()


@pytest.fixture(scope="module")
def racers() -> Iterator[_Racers]:
    """Opener processes, started once: each command names its URL."""
    started = _Racers("postgresql://unused", OPENERS, lazy=True)
    yield started
    started.close()


def _recorded(url: str, schema: str) -> list[int]:
    with psycopg.connect(url) as connection:
        rows = connection.execute(f"SELECT id FROM {schema}.flows_migrations ORDER BY id")
        return [row[0] for row in rows]


def _open_all(racers: _Racers, target: str) -> list[dict[str, Any]]:
    return racers.broadcast(op="open_url", url=target)


@pytest.mark.processes
@pytest.mark.timeout(120)
def test_processes_opening_a_missing_schema_all_open_it(url: str, racers: _Racers) -> None:
    answers = _open_all(racers, with_schema(url, "fresh"))
    assert answers == [{"outcome": "opened"}] * OPENERS
    assert _recorded(url, "fresh") == sorted(m.id for m in _migrations.MIGRATIONS)


@pytest.mark.processes
@pytest.mark.timeout(120)
def test_processes_opening_an_earlier_schema_upgrade_it_once(url: str, racers: _Racers) -> None:
    _postgres.build_schema(url, "earlier", 3)
    with psycopg.connect(url, autocommit=True) as raw:
        raw.execute(
            "INSERT INTO earlier.flows_runs (run_id, status, created_at_ms, state_json) "
            "VALUES ('kept', 'pending', 1, '{}')"
        )
    answers = _open_all(racers, with_schema(url, "earlier"))
    assert answers == [{"outcome": "opened"}] * OPENERS
    assert _recorded(url, "earlier") == sorted(m.id for m in _migrations.MIGRATIONS)
    with postgres.open(url, clock=ManualClock(0), schema="earlier") as store:
        assert store.get("kept").state_json == "{}"
        assert store.revision() == 1
        store.check_invariants()


@pytest.mark.processes
@pytest.mark.timeout(120)
def test_migrate_once_then_open_without_migrating(url: str, racers: _Racers) -> None:
    """Processes opened with migrate=False refuse the pending schema (and
    change nothing); after ``runstore migrate`` they all open it."""
    _postgres.build_schema(url, "deploy", 3)
    target = with_schema(url, "deploy")
    answers = racers.broadcast(op="open_url", url=target, migrate=False)
    assert [a.get("error") for a in answers] == ["persistence_failed"] * OPENERS
    assert _recorded(url, "deploy") == sorted(m.id for m in _migrations.MIGRATIONS[:3])
    done = subprocess.run(
        [sys.executable, "-m", "runstore", "migrate", target],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    answers = racers.broadcast(op="open_url", url=target, migrate=False)
    assert answers == [{"outcome": "opened"}] * OPENERS


# A migration of some later release: additive, as the policy requires.
_LATER_ID = 9001
_LATER = f"""
CREATE INDEX flows_runs_later_idx ON flows_runs (created_at_ms);
ALTER TABLE flows_runs ADD COLUMN later_note TEXT;
INSERT INTO flows_migrations (id, name) VALUES ({_LATER_ID}, 'later release');
"""


def test_a_store_opened_before_a_later_release_migrates_keeps_serving(url: str) -> None:
    with postgres.open(url, clock=ManualClock(0)) as store:
        store.create("r", "{}")
        with psycopg.connect(url, autocommit=True) as later:
            later.execute(_LATER)
        assert store.claim_and_own("r", PENDING, OWNER, 0) == Activated()
        assert store.heartbeat("r", OWNER, 5).__class__.__name__ == "Updated"
        assert store.transition_owned(
            "r", OWNER, "completed", '{"done": 1}'
        ).__class__.__name__ == ("Transitioned")
        assert store.get("r").status == "completed"
        store.check_invariants()
    with pytest.raises(UnsupportedDatabaseError) as caught:
        postgres.open(url, clock=ManualClock(0))
    assert caught.value.cause["unknown_migrations"] == [_LATER_ID]
    assert "newer than this version" in caught.value.message
