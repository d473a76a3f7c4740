"""The lineage cancel in SQL: one set-based UPDATE, metadata only.

Upstream's Lineage cases that look at the statements: however many settled
rounds a lineage has, ``request_cancel_lineage`` issues one UPDATE (and one
SELECT when it marks nothing), and no statement mentions run state. Also the
write-invariant and rollback cases that need a trigger planted in the file.
"""

from __future__ import annotations

import pytest

from runstore import (
    AlreadyRequested,
    CancelRequested,
    NotFound,
    RunStoreError,
    Terminal,
)
from runstore.sqlite import SqliteRunStore

from .._sqlite import memory_and_file_store, raw, statements, unchecked

store = memory_and_file_store()


def _settled_history(store: SqliteRunStore, rounds: int) -> None:
    """A root and ``rounds`` completed rounds of lineage ``root``, written raw
    (they are valid rows; the store's own path would take 3 writes each)."""
    store.create("root", '{"big": "' + "x" * 1000 + '"}')
    connection = raw(store)
    connection.execute("BEGIN")
    connection.execute(
        "UPDATE flows_runs SET status = 'completed', finished_at_ms = 1 WHERE run_id = 'root'"
    )
    for ordinal in range(1, rounds + 1):
        run_id = f"round-{ordinal:04d}"
        connection.execute(
            "INSERT INTO flows_runs (run_id, status, created_at_ms, finished_at_ms, "
            "lineage_id, round_ordinal) VALUES (?, 'completed', 0, 1, 'root', ?)",
            (run_id, ordinal),
        )
        connection.execute(
            "INSERT INTO flows_run_state (run_id, state_json) VALUES (?, '{}')", (run_id,)
        )
    connection.execute("COMMIT")


def test_cancel_over_a_thousand_settled_rounds_is_one_update(store: SqliteRunStore) -> None:
    """1 000 settled rounds and one live round: one UPDATE, no state_json anywhere."""
    _settled_history(store, 1000)
    store.create("live", "{}", lineage_id="root", round_ordinal=1001)
    outcome, issued = statements(store, lambda: store.request_cancel_lineage("round-0500", 7))
    assert outcome == CancelRequested(7)
    assert len(issued) == 1
    assert issued[0].lstrip().upper().startswith("UPDATE")
    assert all("state_json" not in text for text in issued)
    assert store.get("live").cancel_requested_at_ms == 7
    assert store.get("round-0001").cancel_requested_at_ms is None


def test_a_repeated_lineage_cancel_is_one_update_and_one_select(store: SqliteRunStore) -> None:
    """A cancel that marks nothing adds exactly one SELECT of metadata columns."""
    _settled_history(store, 1000)
    store.create("live", "{}", lineage_id="root", round_ordinal=1001)
    assert store.request_cancel_lineage("root", 7) == CancelRequested(7)
    outcome, issued = statements(store, lambda: store.request_cancel_lineage("root", 9))
    assert outcome == AlreadyRequested(7)
    assert [text.lstrip().split()[0].upper() for text in issued] == ["UPDATE", "SELECT"]
    assert all("state_json" not in text for text in issued)


def test_an_all_settled_lineage_answers_terminal_in_two_statements(store: SqliteRunStore) -> None:
    """Every round settled: Terminal of the last round, still UPDATE + SELECT."""
    _settled_history(store, 1000)
    revision = store.revision()
    outcome, issued = statements(store, lambda: store.request_cancel_lineage("root", 9))
    assert outcome == Terminal("completed")
    assert len(issued) == 2
    assert store.revision() == revision


def test_single_run_cancel_reads_no_state(store: SqliteRunStore) -> None:
    """request_cancel and its miss classification never mention run state."""
    store.create("run", "{}")
    for now in (5, 6):
        _, issued = statements(store, lambda now=now: store.request_cancel("run", now))
        assert all("state_json" not in text for text in issued)
    _, issued = statements(store, lambda: store.request_cancel("missing", 1))
    assert len(issued) == 2


@pytest.mark.parametrize("operation", ["request_cancel", "request_cancel_lineage"])
def test_a_silently_ignored_update_is_a_write_invariant_failure(
    store: SqliteRunStore, operation: str
) -> None:
    """A trigger that swallows the UPDATE leaves a live unrequested row, which
    the miss classification reports as persistence_failed (write-invariant)."""
    store.create("run", "{}")
    raw(store).execute(
        "CREATE TRIGGER swallow BEFORE UPDATE OF cancel_requested_at_ms ON flows_runs "
        "BEGIN SELECT RAISE(IGNORE); END"
    )
    revision = store.revision()
    with pytest.raises(RunStoreError) as caught:
        getattr(store, operation)("run", 5)
    assert caught.value.code == "persistence_failed"
    assert caught.value.cause == {"run_id": "run", "stage": "write-invariant"}
    assert store.revision() == revision


def test_a_failed_lineage_update_rolls_back_every_round_and_a_retry_succeeds(
    store: SqliteRunStore,
) -> None:
    """One round refusing its update undoes the marks on the others."""
    store.create("root", "{}")
    for ordinal in (1, 2, 3):
        store.create(f"r{ordinal}", "{}", lineage_id="root", round_ordinal=ordinal)
    raw(store).execute(
        "CREATE TRIGGER refuse_r2 BEFORE UPDATE OF cancel_requested_at_ms ON flows_runs "
        "WHEN OLD.run_id = 'r2' BEGIN SELECT RAISE(ABORT, 'refused'); END"
    )
    revision = store.revision()
    with pytest.raises(RunStoreError) as caught:
        store.request_cancel_lineage("r3", 5)
    assert caught.value.code == "constraint"
    assert [row.cancel_requested_at_ms for row in store.lineage("root")] == [None] * 4
    assert store.revision() == revision
    raw(store).execute("DROP TRIGGER refuse_r2")
    assert store.request_cancel_lineage("r3", 6) == CancelRequested(6)
    assert [row.cancel_requested_at_ms for row in store.lineage("root")] == [6] * 4
    assert store.revision() == revision + 4


@pytest.mark.parametrize("operation", ["request_cancel", "request_cancel_lineage"])
def test_an_unknown_status_in_the_miss_is_decode_failed(
    store: SqliteRunStore, operation: str
) -> None:
    """Classifying a miss decodes the status and refuses one it does not know."""
    store.create("run", "{}")
    assert store.request_cancel("run", 1) == CancelRequested(1)
    with unchecked(raw(store)) as connection:
        connection.execute("UPDATE flows_runs SET status = 'paused'")
    with pytest.raises(RunStoreError) as caught:
        getattr(store, operation)("run", 5)
    assert caught.value.code == "decode_failed"


def test_lineage_membership_ignores_forks_and_foreign_lineages(store: SqliteRunStore) -> None:
    """Fork children and a same-named run of another lineage are not members."""
    store.create("root", "{}")
    store.create("round", "{}", lineage_id="root", round_ordinal=1)
    store.create("fork", "{}", parent_run_id="root")
    store.create("other", "{}", lineage_id="elsewhere", round_ordinal=1)
    assert store.request_cancel_lineage("round", 3) == CancelRequested(3)
    assert [row.run_id for row in store.lineage("root")] == ["root", "round"]
    assert store.get("fork").cancel_requested_at_ms is None
    assert store.get("other").cancel_requested_at_ms is None
    assert store.request_cancel_lineage("nobody", 3) == NotFound()


def test_the_rounds_one_cancel_marks_are_numbered_in_run_id_order(store: SqliteRunStore) -> None:
    """One UPDATE marks every live round; SQLite applies a multi-row UPDATE
    with triggers in primary-key order, so the revisions follow run ids (not
    round order). Pinned so a SQLite that changes this is noticed."""
    store.create("m-root", "{}")
    store.create("z-round-1", "{}", lineage_id="m-root", round_ordinal=1)
    store.create("a-round-2", "{}", lineage_id="m-root", round_ordinal=2)
    revision = store.revision()
    assert store.request_cancel_lineage("m-root", 5) == CancelRequested(5)
    assert [(change.run_id, change.revision) for change in store.changes(revision)] == [
        ("a-round-2", revision + 1),
        ("m-root", revision + 2),
        ("z-round-1", revision + 3),
    ]
