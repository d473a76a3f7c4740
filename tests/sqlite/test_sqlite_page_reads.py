"""A page that holds a row edited behind the store's back is refused, as the row alone is.

``list_runs`` and ``changes`` decode a page column by column (issue 28,
"Reads"); each corruption of ``test_sqlite_decode`` is planted on one run of
three, and the page is ``decode_failed`` with the cause ``get`` gives for
that run. A listing without run state does not read the state, so only the
corruptions of the run's own columns refuse it.
"""

from __future__ import annotations

import pytest

from runstore import RunStoreError
from runstore.sqlite import SqliteRunStore

from .._sqlite import SECRET, memory_and_file_store, raw, unchecked
from .test_sqlite_decode import PENDING_CORRUPTIONS

#: Corruptions that touch only the state table: a listing without state
#: cannot see them.
STATE_ONLY = {
    "invalid UTF-8 in state",
    "invalid JSON state",
    "empty state",
    "state too deep",
    "state with a lone surrogate escape",
    "state as a blob",
    "missing state",
}


store = memory_and_file_store()


def corrupt_middle(store: SqliteRunStore, corruption: str) -> None:
    for rid in ("run-a", "run-b", "run-c"):
        store.create(rid, f'{{"secret":"{SECRET}"}}')
        store.clock.advance(1)
    with unchecked(raw(store)) as connection:
        connection.execute(PENDING_CORRUPTIONS[corruption] + " WHERE run_id = 'run-b'")


@pytest.mark.parametrize("corruption", list(PENDING_CORRUPTIONS))
def test_a_page_with_a_corrupt_row_is_refused_as_the_row_is(
    store: SqliteRunStore, corruption: str
) -> None:
    """list_runs with state refuses the page with the cause get gives the row;
    without state, it refuses every corruption of the run's own columns."""
    corrupt_middle(store, corruption)
    with pytest.raises(RunStoreError) as alone:
        store.get("run-b")
    with pytest.raises(RunStoreError) as paged:
        store.list_runs(with_state=True)
    assert paged.value.code == alone.value.code == "decode_failed"
    assert paged.value.method == "list_runs"
    assert paged.value.cause == alone.value.cause
    assert SECRET not in str(paged.value)
    assert SECRET not in repr(paged.value.cause)
    if corruption in STATE_ONLY:
        assert [row.run_id for row in store.list_runs().runs] == ["run-a", "run-b", "run-c"]
    else:
        with pytest.raises(RunStoreError) as stateless:
            store.list_runs()
        assert stateless.value.code == "decode_failed"
        assert stateless.value.cause["stage"] == alone.value.cause["stage"]
    # The rows around it still read one by one.
    assert store.get("run-a").run_id == "run-a"


def test_a_change_page_with_a_corrupt_entry_is_refused(store: SqliteRunStore) -> None:
    """changes refuses a page whose entry was edited to hold no revision."""
    for rid in ("run-a", "run-b", "run-c"):
        store.create(rid, "{}")
    with unchecked(raw(store)) as connection:
        connection.execute("UPDATE flows_run_changes SET deleted = 2 WHERE run_id = 'run-b'")
    with pytest.raises(RunStoreError) as caught:
        store.changes(0)
    assert caught.value.code == "decode_failed"
    assert caught.value.method == "changes"
    assert caught.value.cause == {"stage": "change-schema"}
