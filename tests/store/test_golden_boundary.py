"""Ported upstream cases: RunStoreBoundary, mapped to Python admission.

upstream-semantics.md §9.2 "RunStoreBoundary" and §3.3-§3.4, restated by
contract.md's admission table: records must be exactly the contract's classes
(a ``RunRow`` where a snapshot is expected), identifiers exactly ``str``,
timestamps, pids and ordinals exactly ``int`` in ``[0, 2**53 - 1]``. Anything
else is ``invalid_run``, raised ``from None``, with nothing written.

Not applicable in Python: descriptor-only owner reads without proxy ``get``
traps, throwing proxies, and a proxy listing a vanished key (Python records
are classes whose type is checked before any attribute is read; the lookalike
classes below show no attribute is read). SQL-only: ``claim_and_own`` after
the row was deleted behind the store's back (the missing-run case is kept).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from runstore import (
    Activated,
    AlreadyClaimed,
    CancelRequested,
    Claimed,
    FenceLost,
    GuardFailed,
    LivenessEvidence,
    ManualClock,
    NotFound,
    OwnerId,
    RunSnapshot,
    RunStore,
    RunStoreError,
    Transitioned,
    TransitionGuard,
)

from ._golden import OWNER_A, OWNER_B, OWNER_C, PENDING, activate_new, stale_evidence


class _Str(str):
    """A str subclass: refused wherever the contract asks for exactly str."""


class _OwnerSubclass(OwnerId):
    """A subclass of OwnerId: refused (records are exactly the contract's classes)."""


class _SnapshotSubclass(RunSnapshot):
    """A subclass of RunSnapshot: refused."""


class _EvidenceSubclass(LivenessEvidence):
    """A subclass of LivenessEvidence: refused."""


class _Lookalike:
    """A foreign object with the right attribute names whose reads are counted."""

    reads = 0

    def __init__(self, **fields: object) -> None:
        self._fields = fields

    def __getattr__(self, name: str) -> object:
        if name.startswith("_"):
            raise AttributeError(name)
        type(self).reads += 1
        try:
            return self._fields[name]
        except KeyError:
            raise AttributeError(name) from None


def _expect_invalid(store: RunStore, method: str, call: Callable[[], object]) -> RunStoreError:
    """Run ``call``, expect invalid_run from ``method``, and check nothing changed."""
    before = store.state()
    with pytest.raises(RunStoreError) as failure:
        call()
    error = failure.value
    assert (error.code, error.method) == ("invalid_run", method)
    # Admission errors carry no exception chain (contract.md: raised from None).
    assert error.__cause__ is None
    assert error.__suppress_context__
    assert store.state() == before
    return error


# --- owners --------------------------------------------------------------------

BAD_OWNERS: dict[str, Any] = {
    "none": None,
    "dict": {"host_id": "host-a", "pid": 101, "nonce": "owner-a"},
    "tuple": ("host-a", 101, "owner-a"),
    "lookalike": _Lookalike(host_id="host-a", pid=101, nonce="owner-a"),
    "subclass": _OwnerSubclass("host-a", 101, "owner-a"),
    "str-subclass-host": OwnerId(_Str("host-a"), 101, "owner-a"),
    "str-subclass-nonce": OwnerId("host-a", 101, _Str("owner-a")),
    "bool-pid": OwnerId("host-a", True, "owner-a"),
    "negative-pid": OwnerId("host-a", -1, "owner-a"),
    "float-pid": OwnerId("host-a", 101.0, "owner-a"),
    "unsafe-pid": OwnerId("host-a", 2**53, "owner-a"),
    "empty-host": OwnerId("", 101, "owner-a"),
    "empty-nonce": OwnerId("host-a", 101, ""),
    "missing-nonce": OwnerId("host-a", 101, None),  # type: ignore[arg-type]
    "nul-host": OwnerId("host\x00a", 101, "owner-a"),
    "surrogate-nonce": OwnerId("host-a", 101, "owner-\ud800"),
    "long-host": OwnerId("h" * 1025, 101, "owner-a"),
}


def _owner_slots(store: RunStore) -> dict[str, tuple[str, Callable[[Any], object]]]:
    """Every owner-shaped argument, as (method, call taking the bad value)."""
    running = store.get("run-owned").snapshot
    return {
        "claim.claimant": ("claim", lambda bad: store.claim("run-pending", PENDING, bad, 0)),
        "claim_and_own.owner": (
            "claim_and_own",
            lambda bad: store.claim_and_own("run-pending", PENDING, bad, 0),
        ),
        "activate.claimant": (
            "activate",
            lambda bad: store.activate("run-pending", bad, 0, PENDING),
        ),
        "abandon_claim.claimant": (
            "abandon_claim",
            lambda bad: store.abandon_claim("run-pending", bad, 0),
        ),
        "recover_claim.stale_claimant": (
            "recover_claim",
            lambda bad: store.recover_claim(
                "run-pending", bad, 0, OWNER_B, 0, stale_evidence(OWNER_A, OWNER_B, 0)
            ),
        ),
        "recover_claim.observer": (
            "recover_claim",
            lambda bad: store.recover_claim(
                "run-pending", OWNER_A, 0, bad, 0, stale_evidence(OWNER_A, OWNER_B, 0)
            ),
        ),
        "heartbeat.owner": ("heartbeat", lambda bad: store.heartbeat("run-owned", bad, 0)),
        "reconfirm.owner": ("reconfirm", lambda bad: store.reconfirm("run-owned", bad, 0)),
        "transition_owned.owner": (
            "transition_owned",
            lambda bad: store.transition_owned("run-owned", bad, "completed"),
        ),
        "steal.claimant": (
            "steal",
            lambda bad: store.steal(
                "run-owned", running, bad, 0, stale_evidence(OWNER_A, OWNER_C, 0)
            ),
        ),
        "acknowledge_cancel.owner": (
            "acknowledge_cancel",
            lambda bad: store.acknowledge_cancel("run-owned", bad, 0),
        ),
        "expected.owner": (
            "claim",
            lambda bad: store.claim("run-owned", RunSnapshot("running", bad, 0), OWNER_C, 0),
        ),
        "evidence.expected_owner": (
            "steal",
            lambda bad: store.steal(
                "run-owned", running, OWNER_C, 0, LivenessEvidence(bad, 0, "lease-expired")
            ),
        ),
    }


OWNER_SLOTS = [
    "claim.claimant",
    "claim_and_own.owner",
    "activate.claimant",
    "abandon_claim.claimant",
    "recover_claim.stale_claimant",
    "recover_claim.observer",
    "heartbeat.owner",
    "reconfirm.owner",
    "transition_owned.owner",
    "steal.claimant",
    "acknowledge_cancel.owner",
    "expected.owner",
    "evidence.expected_owner",
]


@pytest.mark.parametrize("slot", OWNER_SLOTS)
@pytest.mark.parametrize("bad", list(BAD_OWNERS), ids=list(BAD_OWNERS))
def test_refuses_a_malformed_owner(
    store: RunStore, clock: ManualClock, slot: str, bad: str
) -> None:
    """owner refusals: None, dicts, tuples, foreign objects, subclasses, str-subclass fields,
    bool/negative/float/unsafe pids, empty, NUL, surrogate or over-long text, missing nonce."""
    activate_new(store, clock, "run-owned", OWNER_A)
    store.create("run-pending", "{}")
    method, call = _owner_slots(store)[slot]
    _Lookalike.reads = 0
    _expect_invalid(store, method, lambda: call(BAD_OWNERS[bad]))
    assert _Lookalike.reads == 0


def test_accepts_an_owner_at_the_limits(store: RunStore) -> None:
    """an owner with 1024-unit host and nonce, pid 0 or 2**53 - 1, and astral text is admitted."""
    store.create("run-limits", "{}")
    longest = OwnerId("h" * 1024, 2**53 - 1, "\U0001f600" * 512)
    assert store.claim_and_own("run-limits", PENDING, longest, 0) == Activated()
    assert store.get("run-limits").owner == longest
    store.create("run-zero-pid", "{}")
    assert store.claim_and_own("run-zero-pid", PENDING, OwnerId("h", 0, "n"), 0) == Activated()


# --- snapshots -------------------------------------------------------------------

BAD_SNAPSHOTS: dict[str, Any] = {
    "none": None,
    "dict": {"status": "pending", "owner": None, "heartbeat_at_ms": None},
    "tuple": ("pending", None, None),
    "lookalike": _Lookalike(status="pending", owner=None, heartbeat_at_ms=None),
    "subclass": _SnapshotSubclass("pending", None, None),
    "owner-record": OWNER_A,
    "unknown-status": RunSnapshot("unknown", None, None),  # type: ignore[arg-type]
    "str-subclass-status": RunSnapshot(_Str("pending"), None, None),  # type: ignore[arg-type]
    "negative-heartbeat": RunSnapshot("running", OWNER_A, -1),
    "bool-heartbeat": RunSnapshot("running", OWNER_A, True),
    "float-heartbeat": RunSnapshot("running", OWNER_A, 0.0),  # type: ignore[arg-type]
    "pending-with-owner": RunSnapshot("pending", OWNER_A, None),
    "pending-with-heartbeat": RunSnapshot("pending", None, 5),
    "running-without-owner": RunSnapshot("running", None, 0),
    "running-without-heartbeat": RunSnapshot("running", OWNER_A, None),
    "running-with-bad-owner": RunSnapshot("running", OwnerId("host-a", -1, "n"), 0),
}


@pytest.mark.parametrize("operation", ["claim", "claim_and_own", "activate", "steal"])
@pytest.mark.parametrize("bad", list(BAD_SNAPSHOTS), ids=list(BAD_SNAPSHOTS))
def test_refuses_a_malformed_snapshot(store: RunStore, operation: str, bad: str) -> None:
    """bad snapshots (foreign objects, unknown status, negative heartbeat, pending with owner,
    running without owner, ...) are invalid_run without reading a foreign object."""
    store.create("run-hostile", "{}")
    snapshot = BAD_SNAPSHOTS[bad]
    calls: dict[str, Callable[[], object]] = {
        "claim": lambda: store.claim("run-hostile", snapshot, OWNER_A, 0),
        "claim_and_own": lambda: store.claim_and_own("run-hostile", snapshot, OWNER_A, 0),
        "activate": lambda: store.activate("run-hostile", OWNER_A, 0, snapshot),
        "steal": lambda: store.steal(
            "run-hostile", snapshot, OWNER_C, 0, LivenessEvidence(OWNER_A, 0, "lease-expired")
        ),
    }
    _Lookalike.reads = 0
    _expect_invalid(store, operation, calls[operation])
    assert _Lookalike.reads == 0
    assert store.get("run-hostile").status == "pending"


# --- evidence --------------------------------------------------------------------

BAD_EVIDENCE: dict[str, Any] = {
    "dict": {"expected_owner": OWNER_A, "checked_at_ms": 0, "kind": "lease-expired"},
    "lookalike": _Lookalike(expected_owner=OWNER_A, checked_at_ms=0, kind="lease-expired"),
    "subclass": _EvidenceSubclass(OWNER_A, 0, "lease-expired"),
    "unknown-kind": LivenessEvidence(OWNER_A, 0, "kill-9"),  # type: ignore[arg-type]
    "str-subclass-kind": LivenessEvidence(OWNER_A, 0, _Str("lease-expired")),  # type: ignore[arg-type]
    "negative-checked-at": LivenessEvidence(OWNER_A, -1, "lease-expired"),
    "bool-checked-at": LivenessEvidence(OWNER_A, False, "lease-expired"),
    "float-checked-at": LivenessEvidence(OWNER_A, 0.0, "lease-expired"),  # type: ignore[arg-type]
    "foreign-owner": LivenessEvidence({"host_id": "host-a"}, 0, "lease-expired"),  # type: ignore[arg-type]
}


@pytest.mark.parametrize("operation", ["steal", "recover_claim", "claim_and_own"])
@pytest.mark.parametrize("bad", list(BAD_EVIDENCE), ids=list(BAD_EVIDENCE))
def test_refuses_malformed_evidence(
    store: RunStore, clock: ManualClock, operation: str, bad: str
) -> None:
    """evidence of an unknown kind, a foreign object, or malformed fields is invalid_run, even
    where claim_and_own would not need it."""
    running = activate_new(store, clock, "run-evidence", OWNER_A)
    store.create("run-evidence-pending", "{}")
    evidence = BAD_EVIDENCE[bad]
    calls: dict[str, Callable[[], object]] = {
        "steal": lambda: store.steal("run-evidence", running.snapshot, OWNER_C, 0, evidence),
        "recover_claim": lambda: store.recover_claim(
            "run-evidence", OWNER_A, 0, OWNER_C, 0, evidence
        ),
        # A pending snapshot needs no evidence, but a malformed one is still refused.
        "claim_and_own": lambda: store.claim_and_own(
            "run-evidence-pending", PENDING, OWNER_A, 0, evidence
        ),
    }
    _Lookalike.reads = 0
    _expect_invalid(store, operation, calls[operation])
    assert _Lookalike.reads == 0


@pytest.mark.parametrize("operation", ["steal", "recover_claim"])
def test_refuses_missing_evidence_where_it_is_required(
    store: RunStore, clock: ManualClock, operation: str
) -> None:
    """evidence None is refused by steal and recover_claim (claim_and_own treats it as absent)."""
    running = activate_new(store, clock, "run-no-evidence", OWNER_A)
    calls: dict[str, Callable[[], object]] = {
        "steal": lambda: store.steal("run-no-evidence", running.snapshot, OWNER_C, 0, None),  # type: ignore[arg-type]
        "recover_claim": lambda: store.recover_claim(
            "run-no-evidence",
            OWNER_A,
            0,
            OWNER_C,
            0,
            None,  # type: ignore[arg-type]
        ),
    }
    _expect_invalid(store, operation, calls[operation])
    store.create("run-absent-evidence", "{}")
    assert store.claim_and_own("run-absent-evidence", PENDING, OWNER_A, 0, None) == Activated()


# --- guards ----------------------------------------------------------------------


def test_an_empty_guard_is_accepted(store: RunStore, clock: ManualClock) -> None:
    """guard TransitionGuard() is accepted and checks nothing."""
    activate_new(store, clock, "run-guard", OWNER_A)
    assert store.transition_owned("run-guard", OWNER_A, "running", None, TransitionGuard()) == (
        Transitioned()
    )
    assert store.request_cancel("run-guard", 1) == CancelRequested(1)
    assert store.transition_owned("run-guard", OWNER_A, "completed", None, TransitionGuard()) == (
        Transitioned()
    )


@pytest.mark.parametrize(
    "guard",
    [
        TransitionGuard("maybe"),  # type: ignore[arg-type]
        TransitionGuard(_Str("absent")),  # type: ignore[arg-type]
        {},
        {"cancel_requested": "absent"},
        _Lookalike(cancel_requested="absent"),
        "absent",
    ],
    ids=["unknown-value", "str-subclass", "empty-dict", "dict", "lookalike", "bare-str"],
)
def test_refuses_a_malformed_guard(store: RunStore, clock: ManualClock, guard: object) -> None:
    """a guard that is not exactly a TransitionGuard with absent/present/None is invalid_run."""
    activate_new(store, clock, "run-bad-guard", OWNER_A)
    _Lookalike.reads = 0
    _expect_invalid(
        store,
        "transition_owned",
        lambda: store.transition_owned("run-bad-guard", OWNER_A, "completed", None, guard),  # type: ignore[arg-type]
    )
    assert _Lookalike.reads == 0


def test_guard_absent_and_present(store: RunStore, clock: ManualClock) -> None:
    """cancel_requested='absent' fails once intent exists, 'present' fails without it;
    a failed guard writes nothing; ownership is checked before the guard."""
    activate_new(store, clock, "run-guarded", OWNER_A)
    before = store.revision()
    assert (
        store.transition_owned(
            "run-guarded", OWNER_A, "completed", None, TransitionGuard("present")
        )
        == GuardFailed()
    )
    assert (
        store.transition_owned(
            "run-guarded", OWNER_B, "completed", None, TransitionGuard("present")
        )
        == FenceLost()
    )
    assert store.revision() == before
    assert store.request_cancel("run-guarded", 3) == CancelRequested(3)
    assert (
        store.transition_owned(
            "run-guarded", OWNER_A, "completed", '{"x":1}', TransitionGuard("absent")
        )
        == GuardFailed()
    )
    assert store.get("run-guarded").state_json == "{}"
    assert (
        store.transition_owned(
            "run-guarded", OWNER_A, "cancelled", None, TransitionGuard("present")
        )
        == Transitioned()
    )
    row = store.get("run-guarded")
    # The request column is never cleared by a transition.
    assert (row.status, row.cancel_requested_at_ms) == ("cancelled", 3)


# --- create ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "state",
    [{}, b"{}", 1, None, _Str("{}"), ["{}"]],
    ids=["dict", "bytes", "int", "none", "str-subclass", "list"],
)
def test_create_refuses_non_string_state(store: RunStore, state: object) -> None:
    """non-string create state is invalid_run."""
    _expect_invalid(store, "create", lambda: store.create("run-state", state))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "run_id",
    [
        1,
        None,
        b"run",
        _Str("run"),
        "",
        "r" * 1025,
        "\U0001f600" * 512 + "r",
        "run\x00",
        "run-\udfff",
    ],
    ids=[
        "int",
        "none",
        "bytes",
        "str-subclass",
        "empty",
        "1025",
        "astral-1025",
        "nul",
        "surrogate",
    ],
)
def test_create_refuses_a_malformed_run_id(store: RunStore, run_id: object) -> None:
    """run ids must be exactly str, 1 to 1024 UTF-16 units, without NUL or surrogates."""
    _expect_invalid(store, "create", lambda: store.create(run_id, "{}"))  # type: ignore[arg-type]


def test_create_accepts_run_ids_at_the_length_limit(store: RunStore) -> None:
    """1024 UTF-16 units is admitted, astral characters counting two."""
    store.create("r" * 1024, "{}")
    store.create("\U0001f600" * 512, "{}")
    assert store.get("\U0001f600" * 512).run_id == "\U0001f600" * 512


def test_create_refuses_a_companion_stream_id(store: RunStore) -> None:
    """companion id refused by create: a run id starting with flows.companion/ is invalid_run."""
    _expect_invalid(store, "create", lambda: store.create("flows.companion/run-store/ab", "{}"))
    store.create("flows.companionx", "{}")


@pytest.mark.parametrize(
    "options",
    [
        {"parent_run_id": 1},
        {"parent_run_id": ""},
        {"parent_run_id": _Str("root")},
        {"lineage_id": "root"},
        {"round_ordinal": 1},
        {"lineage_id": "root", "round_ordinal": -1},
        {"lineage_id": "root", "round_ordinal": True},
        {"lineage_id": "root", "round_ordinal": 1.0},
        {"lineage_id": "root", "round_ordinal": 2**53},
        {"lineage_id": "", "round_ordinal": 1},
        {"lineage_id": 7, "round_ordinal": 1},
    ],
    ids=[
        "numeric-parent",
        "empty-parent",
        "str-subclass-parent",
        "lineage-without-round",
        "round-without-lineage",
        "negative-round",
        "bool-round",
        "float-round",
        "unsafe-round",
        "empty-lineage",
        "numeric-lineage",
    ],
)
def test_create_refuses_bad_options(store: RunStore, options: dict[str, Any]) -> None:
    """bad options: numeric parent, lineage without round, round without lineage, negative round."""
    store.create("root", "{}")
    _expect_invalid(store, "create", lambda: store.create("child", "{}", **options))


def test_create_admits_arguments_in_order(store: RunStore) -> None:
    """create checks run id, then options, then state."""
    bad_id = _expect_invalid(store, "create", lambda: store.create("", "nope", parent_run_id=1))  # type: ignore[arg-type]
    assert bad_id.cause.get("field") == "run_id"
    bad_options = _expect_invalid(
        store, "create", lambda: store.create("x", "nope", parent_run_id=1)
    )  # type: ignore[arg-type]
    assert bad_options.cause.get("field") == "options"
    bad_state = _expect_invalid(store, "create", lambda: store.create("x", "nope"))
    assert bad_state.cause.get("field") == "state_json"


def test_create_refuses_missing_parents_and_duplicate_rounds(store: RunStore) -> None:
    """a missing parent and a taken (lineage_id, round_ordinal) are constraint errors."""
    with pytest.raises(RunStoreError) as missing_parent:
        store.create("orphan", "{}", parent_run_id="nobody")
    assert (missing_parent.value.code, missing_parent.value.method) == ("constraint", "create")
    store.create("root", "{}")
    store.create("round-1", "{}", lineage_id="root", round_ordinal=1)
    with pytest.raises(RunStoreError) as taken:
        store.create("round-1-again", "{}", lineage_id="root", round_ordinal=1)
    assert (taken.value.code, taken.value.method) == ("constraint", "create")
    assert [row.run_id for row in store.state().rows] == ["root", "round-1"]
    assert store.revision() == 2


# --- order and the remaining claim_and_own cases -----------------------------------


def test_claim_admits_arguments_in_order(store: RunStore) -> None:
    """claim checks run id, expected, claimant, then now_ms."""
    bad = RunSnapshot("unknown", None, None)  # type: ignore[arg-type]
    order = [
        ("run_id", lambda: store.claim("", bad, None, -1)),  # type: ignore[arg-type]
        ("expected", lambda: store.claim("x", bad, None, -1)),  # type: ignore[arg-type]
        ("claimant", lambda: store.claim("x", PENDING, None, -1)),  # type: ignore[arg-type]
        ("now_ms", lambda: store.claim("x", PENDING, OWNER_A, -1)),
    ]
    for field, call in order:
        assert _expect_invalid(store, "claim", call).cause.get("field") == field


def test_claim_and_own_on_a_missing_run_is_not_found(store: RunStore) -> None:
    """claim_and_own of a run that does not exist reports NotFound."""
    assert store.claim_and_own("missing", PENDING, OWNER_A, 0) == NotFound()
    assert store.state().rows == ()


def test_claim_and_own_on_a_foreign_claim_is_already_claimed(store: RunStore) -> None:
    """claim_and_own over a pending claim (anyone's) reports AlreadyClaimed."""
    store.create("run-claimed", "{}")
    assert store.claim("run-claimed", PENDING, OWNER_A, 0) == Claimed(0)
    before = store.state()
    assert store.claim_and_own("run-claimed", PENDING, OWNER_B, 0) == AlreadyClaimed()
    assert store.claim_and_own("run-claimed", PENDING, OWNER_A, 0) == AlreadyClaimed()
    assert store.state() == before


@pytest.mark.parametrize(
    ("method", "call"),
    [
        ("get", lambda s: s.get("")),
        ("lineage", lambda s: s.lineage(1)),
        ("latest_round", lambda s: s.latest_round("x\x00")),
        ("request_cancel", lambda s: s.request_cancel("x", -1)),
        ("request_cancel_lineage", lambda s: s.request_cancel_lineage("x", 1.5)),
        ("acknowledge_cancel", lambda s: s.acknowledge_cancel("x", OWNER_A, True)),
        ("ownership_facts", lambda s: s.ownership_facts(None)),
        ("changes", lambda s: s.changes(-1)),
    ],
    ids=[
        "get",
        "lineage",
        "latest_round",
        "request_cancel",
        "request_cancel_lineage",
        "acknowledge_cancel",
        "ownership_facts",
        "changes",
    ],
)
def test_reads_and_cancellation_refuse_malformed_arguments(
    store: RunStore, method: str, call: Callable[[RunStore], object]
) -> None:
    """reads, cancellation requests and acknowledgements admit their arguments too."""
    _expect_invalid(store, method, lambda: call(store))
