"""The grants docs/guides/postgresql.md lists are enough, and needed.

The guide's ``sql`` block is run as written: a role with exactly those
grants opens a schema its owner migrated and uses every operation, attempts
included; the same role without them is refused with ``persistence_failed``.
"""

from __future__ import annotations

import re
import urllib.parse
from pathlib import Path
from typing import Any

import pytest

from runstore import Activated, ManualClock, OwnerId, RunSnapshot, RunStoreError, Transitioned
from runstore.attempts import Attempt, AttemptStore, FinishAttempt, Inserted

from .. import _postgres
from ..docs.test_docs import fenced_blocks

postgres = pytest.importorskip("runstore.postgres")
psycopg = pytest.importorskip("psycopg")

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "postgresql.md"
OWNER = OwnerId("host-a", 1, "nonce-a")


def guide_grants() -> str:
    (block,) = [b for b in fenced_blocks(GUIDE.read_text(encoding="utf-8")) if b.language == "sql"]
    assert "GRANT" in block.source
    return block.source


def as_role(url: str, role: str) -> str:
    parts = urllib.parse.urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{role}@{host}"))


@pytest.fixture
def worker_url() -> Any:
    """A database whose schema ``runstore`` its owner migrated, and a login
    role ``worker`` with no grants yet (skipped when roles cannot be made)."""
    url = _postgres.database_url()
    name = urllib.parse.unquote(urllib.parse.urlsplit(url).path.lstrip("/"))
    role = f"worker_{re.sub(r'[^a-z0-9]', '_', name)}"
    server = _postgres.require_server()
    try:
        server.admin(f"CREATE ROLE {role} LOGIN")
    except psycopg.Error:
        pytest.skip("the test server's role cannot create roles")
    postgres.open(url, clock=ManualClock(0), schema="runstore").close()
    try:
        yield url, role
    finally:
        with psycopg.connect(url, autocommit=True) as connection:
            connection.execute(f"DROP OWNED BY {role}")  # its grants in this database
        server.admin(f"DROP ROLE IF EXISTS {role}")


def test_the_guides_grants_are_enough(worker_url: Any) -> None:
    url, role = worker_url
    with psycopg.connect(url, autocommit=True) as owner:
        owner.execute(guide_grants().replace("worker", role))
    target = as_role(url, role)
    with postgres.open(target, clock=ManualClock(0), schema="runstore") as store:
        attempts = AttemptStore(store)
        store.create("r", "{}")
        assert store.claim_and_own("r", RunSnapshot("pending", None, None), OWNER, 0) == (
            Activated()
        )
        assert attempts.put(Attempt("r", "step", 1, "running", 0, meta={}), OWNER) == Inserted()
        attempts.finish(FinishAttempt("r", "step", 1, "done", 3), OWNER)
        assert store.request_cancel_lineage("r", 4).__class__.__name__ == "CancelRequested"
        assert store.transition_owned("r", OWNER, "completed", '{"done": true}') == (Transitioned())
        assert store.revision() == 4
        store.check_invariants()
        attempts.check_invariants()


def test_without_the_grants_the_role_is_refused(worker_url: Any) -> None:
    url, role = worker_url
    with pytest.raises(RunStoreError) as caught:
        postgres.open(as_role(url, role), clock=ManualClock(0), schema="runstore")
    assert caught.value.code == "persistence_failed"
    assert caught.value.cause["sqlstate"] == "42501"
