"""Ported upstream cases: lineage reads and cancellation (upstream-semantics.md §9.2 "Lineage").

Rules from §4.3 (membership), §4.4 (latest round), §4.5 (request_cancel) and
§4.6 (request_cancel_lineage). SQL-only and left to the adapter's tests: the
failed lineage UPDATE that must roll back every round, the statement count
(one UPDATE whatever the history length, no ``state_json`` in the SQL), the
silently ignored UPDATE reported as a write-invariant failure, and an unknown
stored status reported as ``decode_failed``. The statement-count case is kept
here in functional form: many settled rounds, one live round, one row write.
"""

from __future__ import annotations

import pytest

from runstore import (
    Activated,
    AlreadyRequested,
    CancelRequested,
    ManualClock,
    NotFound,
    RunChange,
    RunStore,
    RunStoreError,
    Terminal,
    Transitioned,
)

from ._golden import OWNER_A, activate_new


def _settle(
    store: RunStore, clock: ManualClock, run_id: str, status: str, **options: object
) -> None:
    """Create ``run_id`` with ``options`` and drive it to ``status`` under OWNER_A."""
    store.create(run_id, "{}", **options)  # type: ignore[arg-type]
    pending = store.get(run_id).snapshot
    assert store.claim_and_own(run_id, pending, OWNER_A, clock.now_ms()) == Activated()
    assert store.transition_owned(run_id, OWNER_A, status) == Transitioned()  # type: ignore[arg-type]


def _requests(store: RunStore) -> dict[str, int | None]:
    return {row.run_id: row.cancel_requested_at_ms for row in store.state().rows}


# --- request_cancel -----------------------------------------------------------------


def test_request_cancel_records_intent_once(store: RunStore, clock: ManualClock) -> None:
    """request_cancel records intent once; a repeat reports the original time; a settled run
    reports Terminal; a missing run NotFound."""
    store.create("run-cancel", "{}")
    assert store.request_cancel("run-cancel", 5) == CancelRequested(5)
    revision = store.revision()
    assert store.request_cancel("run-cancel", 9) == AlreadyRequested(5)
    assert store.revision() == revision
    assert store.get("run-cancel").cancel_requested_at_ms == 5
    assert store.request_cancel("missing", 1) == NotFound()

    _settle(store, clock, "run-done", "failed")
    revision = store.revision()
    assert store.request_cancel("run-done", 1) == Terminal("failed")
    assert store.revision() == revision
    assert store.get("run-done").cancel_requested_at_ms is None


def test_a_settled_run_reports_its_ending_even_with_an_earlier_request(
    store: RunStore, clock: ManualClock
) -> None:
    """status is read before the request column: a settled run that was asked to cancel
    reports Terminal, not AlreadyRequested."""
    activate_new(store, clock, "run-asked", OWNER_A)
    assert store.request_cancel("run-asked", 2) == CancelRequested(2)
    assert store.transition_owned("run-asked", OWNER_A, "completed") == Transitioned()
    assert store.request_cancel("run-asked", 3) == Terminal("completed")
    assert store.request_cancel_lineage("run-asked", 3) == Terminal("completed")


# --- lineage membership ----------------------------------------------------------


def test_lineage_membership_excludes_fork_ancestry_and_independent_lineages(
    store: RunStore,
) -> None:
    """membership excludes fork ancestry and a same-named run of an independent lineage."""
    store.create("zzz", "{}")
    # "a" is round 1 of lineage "zzz"; "a-1" is round 1 of a lineage that is
    # merely named "a", so the run "a" is not its root.
    store.create("a", "{}", lineage_id="zzz", round_ordinal=1)
    store.create("a-1", "{}", lineage_id="a", round_ordinal=1)
    store.create("fork", "{}", parent_run_id="zzz")

    assert [row.run_id for row in store.lineage("zzz")] == ["zzz", "a"]
    assert [row.run_id for row in store.lineage("a")] == ["zzz", "a"]
    assert [row.run_id for row in store.lineage("a-1")] == ["a-1"]
    assert [row.run_id for row in store.lineage("fork")] == ["fork"]
    assert store.lineage("unknown") == []

    assert store.latest_round("zzz").run_id == "a"
    assert store.latest_round("a").run_id == "a"
    assert store.latest_round("a-1").run_id == "a-1"
    assert store.latest_round("fork").run_id == "fork"
    with pytest.raises(RunStoreError) as missing:
        store.latest_round("unknown")
    assert (missing.value.code, missing.value.method) == ("not_found_row", "latest_round")

    assert store.request_cancel_lineage("a-1", 3) == CancelRequested(3)
    assert _requests(store) == {"a": None, "a-1": 3, "fork": None, "zzz": None}


def test_lineage_orders_rounds_by_ordinal_then_run_id(store: RunStore) -> None:
    """rounds are read in round order (a root without ordinal is round 0), ties by run id."""
    store.create("root", "{}")
    store.create("b-round", "{}", lineage_id="root", round_ordinal=2)
    store.create("z-round", "{}", lineage_id="root", round_ordinal=1)
    store.create("a-round", "{}", lineage_id="root", round_ordinal=3)
    # A round numbered 0 ties with the root's implicit 0 and sorts by run id.
    store.create("0-round", "{}", lineage_id="root", round_ordinal=0)
    assert [row.run_id for row in store.lineage("b-round")] == [
        "0-round",
        "root",
        "z-round",
        "b-round",
        "a-round",
    ]
    latest = store.latest_round("root")
    assert (latest.run_id, latest.lineage_id, latest.round_ordinal) == ("a-round", "root", 3)


def test_lineage_rows_are_whole_decoded_rows(store: RunStore) -> None:
    """lineage answers the same rows get does."""
    store.create("root", '{"r":0}')
    store.create("round-1", '{"r":1}', lineage_id="root", round_ordinal=1, parent_run_id="root")
    assert store.lineage("root") == [store.get("root"), store.get("round-1")]
    assert store.get("round-1").parent_run_id == "root"


# --- request_cancel_lineage ------------------------------------------------------------


def test_new_request_dominates_an_already_requested_round_without_overwriting_it(
    store: RunStore,
) -> None:
    """a new lineage request marks every live unrequested round and keeps earlier times."""
    store.create("lin", "{}")
    store.create("lin-1", "{}", lineage_id="lin", round_ordinal=1)
    store.create("lin-2", "{}", lineage_id="lin", round_ordinal=2)
    assert store.request_cancel("lin-2", 5) == CancelRequested(5)
    revision = store.revision()
    assert store.request_cancel_lineage("lin-1", 9) == CancelRequested(9)
    assert _requests(store) == {"lin": 9, "lin-1": 9, "lin-2": 5}
    # One row write per round it marked.
    assert store.revision() == revision + 2
    # Everything live is now requested: the last live round in round order answers.
    assert store.request_cancel_lineage("lin", 11) == AlreadyRequested(5)
    assert store.revision() == revision + 2


def test_completed_root_history_is_unchanged(store: RunStore, clock: ManualClock) -> None:
    """a settled root is never marked; the live round is."""
    _settle(store, clock, "root", "completed")
    store.create("root-1", "{}", lineage_id="root", round_ordinal=1)
    root_before = store.get("root")
    assert store.request_cancel_lineage("root-1", 4) == CancelRequested(4)
    assert store.get("root") == root_before
    assert store.get("root-1").cancel_requested_at_ms == 4


def test_many_settled_rounds_cost_one_row_write(store: RunStore, clock: ManualClock) -> None:
    """a long settled history adds no writes: only the live round is marked."""
    store.create("hist", "{}")
    assert store.claim_and_own("hist", store.get("hist").snapshot, OWNER_A, 0) == Activated()
    assert store.transition_owned("hist", OWNER_A, "completed") == Transitioned()
    for ordinal in range(1, 40):
        _settle(
            store,
            clock,
            f"hist-{ordinal:03}",
            "completed",
            lineage_id="hist",
            round_ordinal=ordinal,
        )
    store.create("hist-live", "{}", lineage_id="hist", round_ordinal=40)
    revision = store.revision()
    assert store.request_cancel_lineage("hist", 6) == CancelRequested(6)
    assert store.revision() == revision + 1
    assert store.changes(revision) == [RunChange("hist-live", revision + 1, False)]


def test_all_settled_rounds_report_terminal_of_the_last_round(
    store: RunStore, clock: ManualClock
) -> None:
    """all settled -> Terminal(last status), in round order (not run id order)."""
    _settle(store, clock, "zeta", "completed")
    _settle(store, clock, "beta", "failed", lineage_id="zeta", round_ordinal=2)
    _settle(store, clock, "alpha", "cancelled", lineage_id="zeta", round_ordinal=1)
    revision = store.revision()
    assert store.request_cancel_lineage("alpha", 8) == Terminal("failed")
    assert store.revision() == revision


def test_earlier_live_request_dominates_a_later_settled_round(
    store: RunStore, clock: ManualClock
) -> None:
    """an earlier live requested round dominates a later settled round."""
    store.create("live-root", "{}")
    assert store.request_cancel("live-root", 2) == CancelRequested(2)
    _settle(store, clock, "settled-1", "completed", lineage_id="live-root", round_ordinal=1)
    assert store.request_cancel_lineage("settled-1", 7) == AlreadyRequested(2)


def test_a_later_live_request_dominates_an_earlier_settled_round(
    store: RunStore, clock: ManualClock
) -> None:
    """a terminal predecessor never hides a live round's request."""
    _settle(store, clock, "old-root", "failed")
    store.create("old-root-1", "{}", lineage_id="old-root", round_ordinal=1)
    assert store.request_cancel("old-root-1", 3) == CancelRequested(3)
    assert store.request_cancel_lineage("old-root", 7) == AlreadyRequested(3)


def test_request_cancel_lineage_of_a_missing_run_is_not_found(store: RunStore) -> None:
    """an unknown id has no lineage: NotFound."""
    assert store.request_cancel_lineage("missing", 1) == NotFound()
    assert store.revision() == 0


@pytest.mark.parametrize(
    ("run_id", "now_ms"),
    [("", 1), ("lin-\ud800", 1), ("lin", -1), ("lin", 1.5), ("lin", True), ("lin", 2**53)],
    ids=["empty-id", "surrogate-id", "negative", "fraction", "bool", "unsafe"],
)
def test_invalid_lineage_requests_are_refused_before_mutation(
    store: RunStore, run_id: str, now_ms: object
) -> None:
    """invalid ids and times are refused before any round is marked."""
    store.create("lin", "{}")
    store.create("lin-1", "{}", lineage_id="lin", round_ordinal=1)
    before = store.state()
    with pytest.raises(RunStoreError) as failure:
        store.request_cancel_lineage(run_id, now_ms)  # type: ignore[arg-type]
    assert (failure.value.code, failure.value.method) == ("invalid_run", "request_cancel_lineage")
    assert store.state() == before


def test_one_lineage_cancel_numbers_its_rounds_in_run_id_order(store: RunStore) -> None:
    """The rounds one request_cancel_lineage marks get consecutive revisions in
    run id order, not round order (decided for runstore: the order a single
    UPDATE over a table keyed by run id applies)."""
    store.create("m-root", "{}")
    store.create("z-round-1", "{}", lineage_id="m-root", round_ordinal=1)
    store.create("a-round-2", "{}", lineage_id="m-root", round_ordinal=2)
    before = store.revision()
    assert store.request_cancel_lineage("z-round-1", 5) == CancelRequested(5)
    assert [(c.run_id, c.revision) for c in store.changes(before)] == [
        ("a-round-2", before + 1),
        ("m-root", before + 2),
        ("z-round-1", before + 3),
    ]
