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
    """... naming every grant of the guide it lacks, as GRANT names them."""
    url, role = worker_url
    with pytest.raises(RunStoreError) as caught:
        postgres.open(as_role(url, role), clock=ManualClock(0), schema="runstore")
    error = caught.value
    assert error.code == "persistence_failed"
    assert error.cause["reason"] == "insufficient-privilege"
    everything = "SELECT, INSERT, UPDATE, DELETE ON runstore."
    assert error.cause["missing_grants"] == [
        "USAGE ON SCHEMA runstore",
        "SELECT ON runstore.flows_migrations",
        *(
            everything + table
            for table in (
                "flows_runs",
                "flows_run_state",
                "flows_ownership_facts",
                "flows_consensus_leases",
                "flows_attempts",
                "flows_run_changes",
                "flows_run_source",
            )
        ),
        "SELECT, INSERT, DELETE ON runstore.flows_change_log",
    ]
    assert "permission denied" in error.message
    assert "USAGE ON SCHEMA runstore" in error.message
    # Each grant the guide lists is one the store checks.
    for grant in error.cause["missing_grants"]:
        privileges, _, target = grant.partition(" ON ")
        target = target.removeprefix("SCHEMA ")
        assert target in guide_grants()
        assert all(p in guide_grants() for p in privileges.split(", "))


def test_a_role_that_may_not_create_the_schema_is_told_the_grant(worker_url: Any) -> None:
    url, role = worker_url
    name = urllib.parse.unquote(urllib.parse.urlsplit(url).path.lstrip("/"))
    with pytest.raises(RunStoreError) as caught:
        postgres.open(as_role(url, role), clock=ManualClock(0), schema="another")
    error = caught.value
    assert error.cause["reason"] == "insufficient-privilege"
    assert error.cause["missing_grants"] == [f"CREATE ON DATABASE {quoted(name)}"]
    assert "permission denied" in error.message


def quoted(name: str) -> str:
    return name if re.fullmatch(r"[a-z_][a-z0-9_$]*", name) else '"' + name + '"'


@pytest.mark.parametrize(
    ("revoke", "operation", "missing"),
    [
        (
            "REVOKE INSERT ON runstore.flows_change_log FROM {role}",
            "create",
            "INSERT ON runstore.flows_change_log",
        ),
        (
            "REVOKE SELECT ON runstore.flows_runs FROM {role}",
            "get",
            "SELECT ON runstore.flows_runs",
        ),
        (
            "REVOKE EXECUTE ON FUNCTION runstore.flows_op_renew FROM PUBLIC",
            "heartbeat",
            "EXECUTE ON FUNCTION runstore.flows_op_renew(",
        ),
        (
            "REVOKE INSERT ON runstore.flows_ownership_facts FROM {role}",
            "claim_and_own",
            "INSERT ON runstore.flows_ownership_facts",
        ),
    ],
    ids=["create", "get", "heartbeat", "claim_and_own"],
)
def test_an_operation_names_the_grant_its_role_lacks(
    worker_url: Any, revoke: str, operation: str, missing: str
) -> None:
    url, role = worker_url
    with psycopg.connect(url, autocommit=True) as owner:
        owner.execute(guide_grants().replace("worker", role))
        with postgres.open(url, clock=ManualClock(0), schema="runstore") as store:
            store.create("r", "{}")
            if operation == "heartbeat":
                assert store.claim_and_own("r", RunSnapshot("pending", None, None), OWNER, 0) == (
                    Activated()
                )
        owner.execute(revoke.format(role=role))
    calls = {
        "create": lambda store: store.create("s", "{}"),
        "get": lambda store: store.get("r"),
        "heartbeat": lambda store: store.heartbeat("r", OWNER, 5),
        "claim_and_own": lambda store: store.claim_and_own(
            "r", RunSnapshot("pending", None, None), OWNER, 0
        ),
    }
    with postgres.open(as_role(url, role), clock=ManualClock(0), schema="runstore") as store:
        with pytest.raises(RunStoreError) as caught:
            calls[operation](store)
        error = caught.value
        assert error.code == "persistence_failed"
        assert error.cause["reason"] == "insufficient-privilege"
        assert error.cause["sqlstate"] == "42501"
        (named,) = error.cause["missing_grants"]
        assert named.startswith(missing)
        assert named in error.message
        assert "permission denied" in error.message
        assert error.__cause__ is None
        assert error.__context__ is None


def test_a_read_only_store_is_told_only_what_it_reads(worker_url: Any) -> None:
    url, role = worker_url
    with psycopg.connect(url, autocommit=True) as owner:
        owner.execute(f"GRANT USAGE ON SCHEMA runstore TO {role}")
        owner.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA runstore TO {role}")
        owner.execute(f"REVOKE SELECT ON runstore.flows_runs FROM {role}")
    with postgres.open(
        as_role(url, role), clock=ManualClock(0), schema="runstore", read_only=True
    ) as store:
        with pytest.raises(RunStoreError) as caught:
            store.get("r")
        assert caught.value.cause["missing_grants"] == ["SELECT ON runstore.flows_runs"]
