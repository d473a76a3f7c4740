"""Rows edited behind the store's back are refused on read, never trusted.

Upstream's RunStore "typed errors" cases that need SQL: each corruption is
planted with CHECK constraints switched off, and every read of the row
(``get``, ``lineage``, ``latest_round``) is ``decode_failed`` with a cause
that carries no run state; ``state()`` still describes the database. A dropped
table is ``persistence_failed``.
"""

from __future__ import annotations

import pytest

from runstore import Activated, RunStoreError
from runstore.sqlite import SqliteRunStore

from .._sqlite import OWNER, PENDING, SECRET, memory_and_file_store, raw, unchecked

store = memory_and_file_store()


PENDING_CORRUPTIONS = {
    "corrupt created_at": "UPDATE flows_runs SET created_at_ms = 'yesterday'",
    "negative created_at": "UPDATE flows_runs SET created_at_ms = -1",
    "fractional created_at": "UPDATE flows_runs SET created_at_ms = 10.5",
    "created_at beyond 2**53-1": "UPDATE flows_runs SET created_at_ms = 9007199254740992",
    "unknown status": "UPDATE flows_runs SET status = 'paused'",
    "partial owner": "UPDATE flows_runs SET owner_host_id = 'host-a'",
    "heartbeat without owner": "UPDATE flows_runs SET heartbeat_at_ms = 5",
    "running without owner": "UPDATE flows_runs SET status = 'running'",
    "partial claim": "UPDATE flows_runs SET claim_host_id = 'host-a'",
    "claim time without claim": "UPDATE flows_runs SET claimed_at_ms = 5",
    "claim without time": (
        "UPDATE flows_runs SET claim_host_id = 'h', claim_pid = 1, claim_nonce = 'n'"
    ),
    "claim pid as text": (
        "UPDATE flows_runs SET claim_host_id = 'h', claim_pid = 'one', claim_nonce = 'n', "
        "claimed_at_ms = 5"
    ),
    "empty lineage id": "UPDATE flows_runs SET lineage_id = '', round_ordinal = 1",
    "lone surrogate in parent": "UPDATE flows_runs SET parent_run_id = char(55296)",
    "invalid UTF-8 in state": "UPDATE flows_run_state SET state_json = CAST(x'22ff22' AS TEXT)",
    "invalid JSON state": f"UPDATE flows_run_state SET state_json = 'not-json {SECRET}'",
    "empty state": "UPDATE flows_run_state SET state_json = ''",
    "state too deep": "UPDATE flows_run_state SET state_json = "
    f"'{'[' * 130}\"{SECRET}\"{']' * 130}'",
    "state with a lone surrogate escape": (
        f'UPDATE flows_run_state SET state_json = \'{{"value":"\\uD800","k":"{SECRET}"}}\''
    ),
    "state as a blob": "UPDATE flows_run_state SET state_json = x'7b7d'",
    "run id as a blob": "UPDATE flows_runs SET lineage_id = x'6c', round_ordinal = 1",
    "missing state": "DELETE FROM flows_run_state",
}


@pytest.mark.parametrize("corruption", list(PENDING_CORRUPTIONS))
def test_a_corrupted_row_is_decode_failed_on_every_read(
    store: SqliteRunStore, corruption: str
) -> None:
    """Each planted corruption makes get, lineage and latest_round raise decode_failed."""
    store.create("run", f'{{"secret":"{SECRET}"}}')
    with unchecked(raw(store)) as connection:
        connection.execute(PENDING_CORRUPTIONS[corruption])
    for read in (store.get, store.lineage, store.latest_round):
        with pytest.raises(RunStoreError) as caught:
            read("run")
        error = caught.value
        assert error.code == "decode_failed", corruption
        assert error.method in ("get", "lineage", "latest_round")
        assert SECRET not in str(error)
        assert SECRET not in repr(error.cause)
        assert error.__cause__ is None
    # The whole-state view describes the damage instead of refusing it.
    assert len(store.state().rows) == 1
    with pytest.raises(AssertionError, match=r"every run row decodes|every run has its state"):
        store.check_invariants()


RUNNING_CORRUPTIONS = {
    "fractional heartbeat": "UPDATE flows_runs SET heartbeat_at_ms = 1.5",
    "owner pid as text": "UPDATE flows_runs SET owner_pid = 'pid'",
    "owner without heartbeat": "UPDATE flows_runs SET heartbeat_at_ms = NULL",
    "empty owner nonce": "UPDATE flows_runs SET owner_nonce = ''",
    "owner host with NUL": "UPDATE flows_runs SET owner_host_id = 'a' || char(0) || 'b'",
    "settled with an owner": "UPDATE flows_runs SET status = 'completed'",
    "started_at negative": "UPDATE flows_runs SET started_at_ms = -5",
}


@pytest.mark.parametrize("corruption", list(RUNNING_CORRUPTIONS))
def test_a_corrupted_running_row_is_decode_failed(store: SqliteRunStore, corruption: str) -> None:
    """Corruptions of an owned row's ownership columns are decode_failed too."""
    store.create("run", "{}")
    assert store.claim_and_own("run", PENDING, OWNER, 0) == Activated()
    with unchecked(raw(store)) as connection:
        connection.execute(RUNNING_CORRUPTIONS[corruption])
    with pytest.raises(RunStoreError) as caught:
        store.get("run")
    assert caught.value.code == "decode_failed"


def test_the_invariant_cause_names_flags_not_state(store: SqliteRunStore) -> None:
    """The cause of an invariant failure reports flags and times, never the text."""
    store.create("run", "{}")
    with unchecked(raw(store)) as connection:
        connection.execute(f"UPDATE flows_run_state SET state_json = '{SECRET}'")
    with pytest.raises(RunStoreError) as caught:
        store.get("run")
    assert caught.value.cause == {
        "run_id": "run",
        "stage": "invariants",
        "status": "pending",
        "heartbeat_at_ms": None,
        "claimed_at_ms": None,
        "has_owner_columns": False,
        "has_claim_columns": False,
        "state_json_valid": False,
    }


def test_state_reports_a_corrupt_state_as_its_raw_text(store: SqliteRunStore) -> None:
    """state() never raises on a corrupt row; the stored text is returned as is."""
    store.create("run", "{}")
    with unchecked(raw(store)) as connection:
        connection.execute("UPDATE flows_run_state SET state_json = 'not-json'")
        connection.execute("UPDATE flows_runs SET owner_host_id = 'half'")
    (row,) = store.state().rows
    assert row.state_json == "not-json"
    assert row.owner is not None
    assert row.owner.host_id == "half"


def test_a_corrupt_fact_is_decode_failed(store: SqliteRunStore) -> None:
    """ownership_facts re-validates its rows too."""
    store.create("run", "{}")
    assert store.claim_and_own("run", PENDING, OWNER, 0) == Activated()
    with unchecked(raw(store)) as connection:
        connection.execute("UPDATE flows_ownership_facts SET transition = 'borrowed'")
    with pytest.raises(RunStoreError) as caught:
        store.ownership_facts("run")
    assert caught.value.code == "decode_failed"


def test_a_dropped_runs_table_is_persistence_failed(store: SqliteRunStore) -> None:
    """Without flows_runs every read and write is persistence_failed, payload-free."""
    store.create("run", f'{{"k":"{SECRET}"}}')
    with unchecked(raw(store)) as connection:
        connection.execute("DROP TABLE flows_runs")
    calls = [
        lambda: store.get("run"),
        lambda: store.lineage("run"),
        lambda: store.create("other", f'{{"k":"{SECRET}"}}'),
        lambda: store.claim_and_own("run", PENDING, OWNER, 0),
        lambda: store.request_cancel("run", 1),
    ]
    for call in calls:
        with pytest.raises(RunStoreError) as caught:
            call()
        error = caught.value
        assert error.code == "persistence_failed"
        assert error.__cause__ is None
        assert error.__context__ is None
        assert "no such table" not in str(error)
        assert SECRET not in repr(error)


def test_a_dropped_lease_table_is_persistence_failed_and_changes_nothing(
    store: SqliteRunStore,
) -> None:
    """DROP TABLE flows_consensus_leases: the strategy fails, the store says
    persistence_failed, and the row is untouched."""
    store.create("run", "{}")
    before = store.get("run")
    revision = store.revision()
    raw(store).execute("DROP TABLE flows_consensus_leases")
    with pytest.raises(RunStoreError) as caught:
        store.claim_and_own("run", PENDING, OWNER, 0)
    assert caught.value.code == "persistence_failed"
    assert caught.value.cause["consensus_code"] == "persistence_failed"
    with pytest.raises(RunStoreError) as caught:
        store.heartbeat("run", OWNER, 0)
    assert caught.value.code == "persistence_failed"
    assert store.get("run") == before
    assert store.revision() == revision
    assert store.ownership_facts("run") == []
