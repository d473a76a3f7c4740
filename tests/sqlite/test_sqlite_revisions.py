"""Execution revisions as the triggers keep them, including for raw SQL writers.

Upstream's ExecutionRevisions cases that need SQL: a raw DELETE leaves a
tombstone; recreating the id gives a newer live revision; a counter at
2**53 - 1 and a missing source row refuse every mutation and change nothing;
a run id cannot be renamed; the acknowledgement is stored as upstream stores it.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from runstore import Activated, CancelRequested, ManualClock, RunChange, RunStoreError
from runstore.sqlite import SqliteRunStore

from .._sqlite import OWNER, PENDING, logical_dump, memory_and_file_store, open_store, raw

MAX = 2**53 - 1


store = memory_and_file_store()


def test_the_source_is_32_lowercase_hex_and_survives_reopening(
    clock: ManualClock, tmp_path: Path
) -> None:
    """The database's identity is random, lowercase hex, and stable on disk."""
    with open_store("file", clock, tmp_path) as first:
        (source,) = raw(first).execute("SELECT source FROM flows_run_source").fetchone()
    assert len(source) == 32
    assert source == source.lower()
    int(source, 16)
    with open_store("file", clock, tmp_path) as again:
        assert raw(again).execute("SELECT source FROM flows_run_source").fetchone() == (source,)
    with open_store("memory", clock, tmp_path) as other:
        assert raw(other).execute("SELECT source FROM flows_run_source").fetchone() != (source,)


def test_a_raw_delete_leaves_a_tombstone_and_recreating_is_newer(store: SqliteRunStore) -> None:
    """Deleting a run behind the store bumps the revision and keeps a tombstone;
    the same id created again gets a newer live revision."""
    store.create("a", "{}")
    store.create("b", "{}")
    assert store.revision() == 2
    raw(store).execute("DELETE FROM flows_runs WHERE run_id = 'a'")
    assert store.revision() == 3
    assert store.changes(2) == [RunChange("a", 3, True)]
    assert store.changes(0) == [RunChange("b", 2, False), RunChange("a", 3, True)]
    assert raw(store).execute("SELECT count(*) FROM flows_run_state").fetchone() == (1,)
    store.create("a", '{"again":true}')
    assert store.changes(2) == [RunChange("a", 4, False)]
    assert store.get("a").state_json == '{"again":true}'
    store.check_invariants()


@pytest.mark.parametrize(
    "mutation",
    [
        "INSERT INTO flows_runs (run_id, status, created_at_ms) VALUES ('raw', 'pending', 0)",
        "UPDATE flows_runs SET cancel_requested_at_ms = 1 WHERE run_id = 'run'",
        "DELETE FROM flows_runs WHERE run_id = 'run'",
    ],
)
def test_revision_overflow_refuses_raw_mutations(store: SqliteRunStore, mutation: str) -> None:
    """At 2**53 - 1 the next revision breaks its CHECK and the write aborts."""
    store.create("run", "{}")
    raw(store).execute("UPDATE flows_run_source SET revision = ?", (MAX,))
    before = logical_dump(store)
    with pytest.raises(sqlite3.IntegrityError):
        raw(store).execute(mutation)
    assert logical_dump(store) == before


def test_revision_overflow_refuses_every_store_write(store: SqliteRunStore) -> None:
    """Through the store the overflow is a constraint error and nothing changes."""
    store.create("run", "{}")
    raw(store).execute("UPDATE flows_run_source SET revision = ?", (MAX,))
    before = logical_dump(store)
    for call in (
        lambda: store.create("other", "{}"),
        lambda: store.claim_and_own("run", PENDING, OWNER, 0),
        lambda: store.request_cancel("run", 1),
    ):
        with pytest.raises(RunStoreError) as caught:
            call()
        assert caught.value.code == "constraint"
    assert logical_dump(store) == before
    assert store.revision() == MAX


@pytest.mark.parametrize(
    "mutation",
    [
        "INSERT INTO flows_runs (run_id, status, created_at_ms) VALUES ('raw', 'pending', 0)",
        "UPDATE flows_runs SET cancel_requested_at_ms = 1 WHERE run_id = 'run'",
        "DELETE FROM flows_runs WHERE run_id = 'run'",
    ],
)
def test_a_missing_source_refuses_raw_mutations(store: SqliteRunStore, mutation: str) -> None:
    """Without the source row no run row may change, whoever writes it."""
    store.create("run", "{}")
    raw(store).execute("DELETE FROM flows_run_source")
    with pytest.raises(sqlite3.IntegrityError, match="execution source identity is missing"):
        raw(store).execute(mutation)
    assert [row.run_id for row in store.state().rows] == ["run"]


def test_a_missing_source_refuses_store_writes_and_revision(store: SqliteRunStore) -> None:
    """The store cannot write or report a revision without its source."""
    store.create("run", "{}")
    raw(store).execute("DELETE FROM flows_run_source")
    with pytest.raises(RunStoreError) as caught:
        store.request_cancel("run", 1)
    assert caught.value.code == "constraint"
    with pytest.raises(RunStoreError) as caught:
        store.revision()
    assert caught.value.code == "persistence_failed"
    assert store.get("run").cancel_requested_at_ms is None


def test_a_run_id_cannot_be_renamed(store: SqliteRunStore) -> None:
    """The identity trigger refuses any rename, even of an unreferenced run."""
    store.create("run", "{}")
    with pytest.raises(sqlite3.IntegrityError, match="run identity is immutable"):
        raw(store).execute("UPDATE flows_runs SET run_id = 'renamed' WHERE run_id = 'run'")
    assert store.get("run").run_id == "run"


def test_the_acknowledgement_is_stored_as_upstream_stores_it(store: SqliteRunStore) -> None:
    """The first acknowledgement is kept as {observedAtMs, owner}; repeats keep it
    but still count one revision each."""
    store.create("run", "{}")
    assert store.claim_and_own("run", PENDING, OWNER, 0) == Activated()
    assert store.request_cancel("run", 2) == CancelRequested(2)
    revision = store.revision()
    assert store.acknowledge_cancel("run", OWNER, 4) is True
    assert store.acknowledge_cancel("run", OWNER, 9) is True
    assert store.revision() == revision + 2
    (text,) = raw(store).execute("SELECT cancel_acknowledgement_json FROM flows_runs").fetchone()
    assert json.loads(text) == {
        "observedAtMs": 4,
        "owner": {"hostId": OWNER.host_id, "pid": OWNER.pid, "nonce": OWNER.nonce},
    }
    (acknowledgement,) = store.state().acknowledgements
    assert acknowledgement.observed_at_ms == 4
    assert acknowledgement.owner == OWNER


def test_a_refused_write_leaves_the_revision_alone(store: SqliteRunStore) -> None:
    """A failed INSERT (duplicate id) rolls its trigger work back too."""
    store.create("run", "{}")
    before = logical_dump(store)
    with pytest.raises(RunStoreError) as caught:
        store.create("run", "{}")
    assert caught.value.code == "constraint"
    with pytest.raises(RunStoreError) as caught:
        store.create("child", "{}", parent_run_id="nobody")
    assert caught.value.code == "constraint"
    assert logical_dump(store) == before
