"""The fence invariants of ``runstore.stateful``: each fires on a state (or a
step) that breaks it, and none fires on what the reference model produces."""

from __future__ import annotations

import attrs
import pytest

from runstore import (
    Activated,
    CancelRequested,
    Claimed,
    FenceLost,
    Lease,
    LivenessEvidence,
    ManualClock,
    OwnerId,
    OwnershipFact,
    RunChange,
    RunRow,
    RunSnapshot,
    StoreState,
    Transitioned,
    Updated,
)
from runstore.model import ModelRunStore
from runstore.stateful import (
    INVARIANTS,
    Call,
    ClaimFieldsViolation,
    CommittedStateLost,
    FactReplayMismatch,
    FailedOperationVisible,
    FinishedTerminalViolation,
    HeartbeatRegressed,
    InvariantViolation,
    LeaseRowDisagreement,
    OwnerWithoutGrant,
    Raised,
    RevisionMismatch,
    RunningOwnershipViolation,
    StateNotPreserved,
    StealWithoutStaleness,
    Step,
    TerminalChangedViolation,
    UnfencedWriteAccepted,
    check_state,
    check_transition,
)

ALICE = OwnerId("h1", 1, "n0")
BOB = OwnerId("h2", 1, "n0")


def row(run_id: str = "a", **fields: object) -> RunRow:
    base = RunRow(
        run_id=run_id,
        status="pending",
        created_at_ms=0,
        started_at_ms=None,
        finished_at_ms=None,
        owner=None,
        heartbeat_at_ms=None,
        claim=None,
        claimed_at_ms=None,
        parent_run_id=None,
        cancel_requested_at_ms=None,
        lineage_id=None,
        round_ordinal=None,
        state_json="{}",
    )
    return attrs.evolve(base, **fields)


def running(run_id: str = "a", owner: OwnerId = ALICE, heartbeat: int = 1000, **more: object):
    return row(
        run_id, status="running", owner=owner, heartbeat_at_ms=heartbeat, started_at_ms=0, **more
    )


def owner_lease(r: RunRow, granted: int = 0) -> Lease:
    return Lease(r.run_id, r.owner, granted, r.heartbeat_at_ms, r.claim, r.claimed_at_ms)


def state(
    *rows: RunRow,
    leases: tuple[Lease, ...] | None = None,
    facts: tuple[OwnershipFact, ...] | None = None,
    revision: int | None = None,
    changes: tuple[RunChange, ...] | None = None,
) -> StoreState:
    """A state whose leases, facts and change feed agree with ``rows`` unless given."""
    if leases is None:
        leases = tuple(owner_lease(r) for r in rows if r.owner is not None or r.claim is not None)
    if facts is None:
        built: list[OwnershipFact] = []
        for r in rows:
            position = 0
            if r.owner is not None:
                built.append(OwnershipFact(r.run_id, "claimed", r.owner, 0, position + 1))
                built.append(OwnershipFact(r.run_id, "activated", r.owner, 0, position + 2))
                position += 2
            if r.claim is not None:
                built.append(
                    OwnershipFact(r.run_id, "claimed", r.claim, r.claimed_at_ms, position + 1)
                )
        facts = tuple(built)
    if changes is None:
        changes = tuple(RunChange(r.run_id, i + 1, False) for i, r in enumerate(rows))
    if revision is None:
        revision = max((c.revision for c in changes), default=0)
    return StoreState(rows=rows, leases=leases, facts=facts, revision=revision, changes=changes)


def bumped(before: StoreState, after_rows: tuple[RunRow, ...], **more: object) -> StoreState:
    """``after_rows`` written by one step: each changed row gets the next revision."""
    revision = before.revision
    changes = {c.run_id: c.revision for c in before.changes}
    old = {r.run_id: r for r in before.rows}
    for r in after_rows:
        if old.get(r.run_id) != r:
            revision += 1
            changes[r.run_id] = revision
    feed = tuple(
        RunChange(run_id, rev, False) for run_id, rev in sorted(changes.items(), key=lambda x: x[1])
    )
    fields: dict[str, object] = {"rows": after_rows, "revision": revision, "changes": feed}
    fields.update(more)
    return attrs.evolve(before, **fields)


def step(method: str, outcome: object, **arguments: object) -> Step:
    return Step(Call(method, tuple(arguments.items())), outcome)


def test_every_invariant_has_its_own_exception_type():
    """Each invariant raises a distinct ``InvariantViolation`` subclass of ``AssertionError``."""
    assert len(set(INVARIANTS)) == len(INVARIANTS) >= 11
    for kind in INVARIANTS:
        assert issubclass(kind, InvariantViolation)
        assert issubclass(kind, AssertionError)


def test_running_without_an_owner_fires():
    """A running row without owner and heartbeat breaks the ownership invariant."""
    broken = state(row(status="running", started_at_ms=0))
    with pytest.raises(RunningOwnershipViolation):
        check_state(broken)


def test_owner_on_a_pending_run_fires():
    """An owner on a run that is not running breaks the ownership invariant."""
    broken = state(row(owner=ALICE, heartbeat_at_ms=5), leases=())
    with pytest.raises(RunningOwnershipViolation):
        check_state(broken, leases=False)


def test_claimant_without_a_claim_time_fires():
    """A claimant without a claim time breaks the claim-fields invariant."""
    broken = state(row(claim=BOB), leases=(), facts=())
    with pytest.raises(ClaimFieldsViolation):
        check_state(broken)


def test_finished_time_on_a_live_run_fires():
    """``finished_at_ms`` on a suspended run breaks the finished-iff-terminal invariant."""
    with pytest.raises(FinishedTerminalViolation):
        check_state(state(row(status="suspended", finished_at_ms=9)))


def test_settled_run_without_finished_time_fires():
    """A completed run without ``finished_at_ms`` breaks the same invariant."""
    with pytest.raises(FinishedTerminalViolation):
        check_state(state(row(status="completed")))


def test_lease_owner_that_differs_from_the_row_fires():
    """A lease naming another owner than the row breaks lease/row agreement."""
    r = running()
    broken = state(r, leases=(attrs.evolve(owner_lease(r), owner=BOB),))
    with pytest.raises(LeaseRowDisagreement):
        check_state(broken)


def test_lease_heartbeat_that_differs_from_the_row_fires():
    """A lease heartbeat other than the row's breaks lease/row agreement."""
    r = running(heartbeat=1000)
    broken = state(r, leases=(attrs.evolve(owner_lease(r), heartbeat_at_ms=999),))
    with pytest.raises(LeaseRowDisagreement):
        check_state(broken)


def test_claim_left_on_the_row_after_the_lease_dropped_it_fires():
    """A row claim the strategy no longer holds breaks lease/row agreement."""
    broken = state(row(claim=BOB, claimed_at_ms=7), leases=())
    with pytest.raises(LeaseRowDisagreement):
        check_state(broken)


def test_lease_agreement_is_skipped_without_introspection():
    """``leases=False`` skips lease agreement for stores that do not expose leases."""
    check_state(state(running(), leases=()), leases=False)


def test_facts_that_rebuild_another_owner_fire():
    """Facts whose replay gives a different owner than the row break fact replay."""
    r = running()
    facts = (
        OwnershipFact("a", "claimed", BOB, 0, 1),
        OwnershipFact("a", "activated", BOB, 0, 2),
    )
    with pytest.raises(FactReplayMismatch):
        check_state(state(r, facts=facts))


def test_fact_stream_with_a_gap_fires():
    """Fact positions must run 1, 2, 3, ... without gaps."""
    r = running()
    facts = (
        OwnershipFact("a", "claimed", ALICE, 0, 1),
        OwnershipFact("a", "activated", ALICE, 0, 3),
    )
    with pytest.raises(FactReplayMismatch):
        check_state(state(r, facts=facts))


def test_released_fact_without_grant_clears_owner_and_claim():
    """Replaying ``released(X, None)`` leaves no owner and no claim."""
    facts = (
        OwnershipFact("a", "claimed", ALICE, 0, 1),
        OwnershipFact("a", "activated", ALICE, 0, 2),
        OwnershipFact("a", "released", ALICE, None, 3),
    )
    check_state(state(row(status="suspended"), facts=facts))


def test_change_feed_missing_a_row_fires():
    """Every row has an entry in the change feed."""
    broken = state(row("a"), row("b"), changes=(RunChange("a", 1, False),), revision=2)
    with pytest.raises(RevisionMismatch):
        check_state(broken)


def test_settled_run_that_changes_fires():
    """A settled run must never change again."""
    before = state(row(status="completed", finished_at_ms=5))
    after = bumped(before, (row(status="completed", finished_at_ms=6),))
    with pytest.raises(TerminalChangedViolation):
        check_transition(before, after, step("request_cancel", Transitioned(), run_id="a"))


def test_heartbeat_accepted_from_a_non_owner_fires():
    """A heartbeat answered ``Updated`` for someone other than the owner of record."""
    r = running()
    before = state(r)
    after = bumped(before, (r,))
    with pytest.raises(UnfencedWriteAccepted):
        check_transition(before, after, step("heartbeat", Updated(), run_id="a", owner=BOB))


def test_transition_by_a_non_owner_that_writes_fires():
    """A refused transition that still changed the run is an accepted unfenced write."""
    r = running()
    before = state(r)
    moved = attrs.evolve(r, state_json='{"x":1}')
    after = bumped(before, (moved,))
    with pytest.raises(UnfencedWriteAccepted):
        check_transition(
            before,
            after,
            step("transition_owned", FenceLost(), run_id="a", owner=BOB, to_status="running"),
        )


def test_running_run_changed_by_an_unrelated_step_fires():
    """A running run's heartbeat moves only through its owner's write."""
    r = running(heartbeat=1000)
    before = state(r)
    after = bumped(before, (attrs.evolve(r, heartbeat_at_ms=2000),))
    with pytest.raises(UnfencedWriteAccepted):
        check_transition(before, after, step("claim", Claimed(5), run_id="b", claimant=BOB))


def test_heartbeat_moving_backwards_fires():
    """The heartbeat never moves backwards while the owner stays the same."""
    r = running(heartbeat=5000)
    before = state(r)
    after = bumped(
        before,
        (attrs.evolve(r, heartbeat_at_ms=4000),),
        leases=(owner_lease(attrs.evolve(r, heartbeat_at_ms=4000)),),
    )
    with pytest.raises(HeartbeatRegressed):
        check_transition(before, after, step("heartbeat", Updated(), run_id="a", owner=ALICE))


def test_steal_granted_on_a_heartbeat_exactly_30000_old_fires():
    """A steal needs a heartbeat strictly older than ``now - 30000``."""
    r = running(heartbeat=1000)
    before = state(r)
    claimed = attrs.evolve(r, claim=BOB, claimed_at_ms=31000)
    after = bumped(before, (claimed,))
    evidence = LivenessEvidence(ALICE, 31000, "cross-host-unreachable-stale")
    with pytest.raises(StealWithoutStaleness):
        check_transition(
            before,
            after,
            step(
                "steal",
                Claimed(31000),
                run_id="a",
                expected=r.snapshot,
                claimant=BOB,
                now_ms=31000,
                evidence=evidence,
            ),
        )


def test_steal_with_evidence_of_the_wrong_host_relation_fires():
    """``same-host-pid-dead`` from another host is not matching evidence."""
    r = running(heartbeat=1000)
    before = state(r)
    after = bumped(before, (attrs.evolve(r, claim=BOB, claimed_at_ms=40000),))
    evidence = LivenessEvidence(ALICE, 40000, "same-host-pid-dead")
    with pytest.raises(StealWithoutStaleness):
        check_transition(
            before,
            after,
            step(
                "steal",
                Claimed(40000),
                run_id="a",
                expected=r.snapshot,
                claimant=BOB,
                now_ms=40000,
                evidence=evidence,
            ),
        )


def test_takeover_through_claim_and_own_on_a_fresh_run_fires():
    """``claim_and_own`` over another owner needs staleness as well as evidence."""
    r = running(heartbeat=20000)
    before = state(r)
    after = bumped(before, (running(owner=BOB, heartbeat=40000),))
    evidence = LivenessEvidence(ALICE, 40000, "lease-expired")
    with pytest.raises(StealWithoutStaleness):
        check_transition(
            before,
            after,
            step(
                "claim_and_own",
                Activated(),
                run_id="a",
                expected=RunSnapshot("running", ALICE, 20000),
                owner=BOB,
                now_ms=40000,
                evidence=evidence,
            ),
        )


def test_owner_appearing_without_a_grant_fires():
    """A run gains an owner only by activating that owner's own claim."""
    before = state(row())
    after = bumped(before, (running(owner=BOB),))
    with pytest.raises(OwnerWithoutGrant):
        check_transition(
            before, after, step("request_cancel", CancelRequested(5), run_id="a", now_ms=5)
        )


def test_facts_appended_to_an_untouched_run_fire():
    """A step appends facts only to the run it operated on."""
    before = state(row("a"), row("b"))
    extra = (*before.facts, OwnershipFact("b", "released", BOB, 3, 1))
    after = attrs.evolve(before, facts=extra)
    with pytest.raises(FactReplayMismatch):
        check_transition(before, after, step("get", row("a"), run_id="a"))


def test_revision_not_moved_by_an_accepted_heartbeat_fires():
    """An ``Updated`` heartbeat writes the row: the revision moves by one."""
    r = running()
    before = state(r)
    with pytest.raises(RevisionMismatch):
        check_transition(before, before, step("heartbeat", Updated(), run_id="a", owner=ALICE))


def test_revision_moved_by_a_read_fires():
    """A read writes nothing: the revision stays put."""
    before = state(row())
    after = attrs.evolve(before, revision=before.revision + 1)
    with pytest.raises(RevisionMismatch):
        check_transition(before, after, step("get", row(), run_id="a"))


def test_state_text_changed_without_a_write_fires():
    """A run keeps the state last written, byte for byte."""
    r = running()
    before = state(r)
    after = bumped(before, (attrs.evolve(r, state_json="{ }"),))
    with pytest.raises(StateNotPreserved):
        check_transition(before, after, step("heartbeat", Updated(), run_id="a", owner=ALICE))


def test_settling_that_drops_the_new_state_fires():
    """A transition with new state must store exactly that text."""
    r = running()
    before = state(r)
    settled = row(status="completed", finished_at_ms=9, started_at_ms=0)
    after = bumped(before, (settled,), leases=())
    with pytest.raises(StateNotPreserved):
        check_transition(
            before,
            after,
            step(
                "transition_owned",
                Transitioned(),
                run_id="a",
                owner=ALICE,
                to_status="completed",
                state_json='{"done":true}',
            ),
        )


def test_failed_operation_leaving_a_trace_fires():
    """An operation that raised must leave the state exactly as it was."""
    r = running()
    before = state(r)
    after = bumped(before, (attrs.evolve(r, heartbeat_at_ms=2000),))
    with pytest.raises(FailedOperationVisible):
        check_transition(
            before,
            after,
            step("heartbeat", Raised("persistence_failed", "heartbeat"), run_id="a", owner=ALICE),
        )


def test_reopen_that_loses_a_row_fires():
    """Reopening a store keeps every committed row, fact and revision."""
    before = state(row("a"), row("b"))
    after = state(row("a"))
    with pytest.raises(CommittedStateLost):
        check_transition(before, after, Step(Call("reopen"), None))


def test_reference_model_histories_pass_every_invariant():
    """A history driven through the reference model satisfies every invariant."""
    clock = ManualClock(100_000)
    model = ModelRunStore(clock=clock)
    states = [model.state()]
    steps: list[Step] = []

    def do(method: str, **arguments: object) -> object:
        outcome = getattr(model, method)(**arguments)
        states.append(model.state())
        steps.append(Step(Call(method, tuple(arguments.items())), outcome))
        return outcome

    do("create", run_id="a", state_json="{}")
    claimed = do(
        "claim",
        run_id="a",
        expected=RunSnapshot("pending", None, None),
        claimant=ALICE,
        now_ms=100_000,
    )
    assert claimed == Claimed(100_000)
    do("activate", run_id="a", claimant=ALICE, claimed_at_ms=100_000, expected=model.get("a"))
    do("heartbeat", run_id="a", owner=ALICE, now_ms=100_500)
    clock.set(140_000)
    evidence = LivenessEvidence(ALICE, 140_000, "cross-host-unreachable-stale")
    stolen = do(
        "steal",
        run_id="a",
        expected=model.get("a"),
        claimant=BOB,
        now_ms=140_000,
        evidence=evidence,
    )
    assert stolen == Claimed(140_000)
    snapshot = RunSnapshot("running", ALICE, 100_500)
    do("activate", run_id="a", claimant=BOB, claimed_at_ms=140_000, expected=snapshot)
    do("request_cancel", run_id="a", now_ms=140_001)
    do("acknowledge_cancel", run_id="a", owner=BOB, now_ms=140_002)
    do("acknowledge_cancel", run_id="a", owner=BOB, now_ms=140_003)
    do("transition_owned", run_id="a", owner=BOB, to_status="cancelled", state_json='{"x":1}')
    for before, after, taken in zip(states[:-1], states[1:], steps, strict=True):
        check_state(after)
        check_transition(before, after, taken)


def _stolen(r: RunRow, thief: OwnerId, token: int) -> tuple[OwnershipFact, ...]:
    return (
        OwnershipFact(r.run_id, "claimed", r.owner, 0, 1),
        OwnershipFact(r.run_id, "activated", r.owner, 0, 2),
        OwnershipFact(r.run_id, "stolen", thief, token, 3),
    )


def test_activating_a_steal_after_the_owner_heartbeated_is_allowed():
    """Staleness is judged when the steal is granted: the owner may heartbeat
    afterwards and the thief may still activate with the current snapshot
    (only ``reconfirm`` notices the pending claim)."""
    r = running(heartbeat=190_003, claim=BOB, claimed_at_ms=200_003)
    before = state(r, facts=_stolen(r, BOB, 200_003))
    taken = running(owner=BOB, heartbeat=200_010)
    facts = (*before.facts, OwnershipFact("a", "activated", BOB, 200_003, 4))
    after = bumped(before, (taken,), facts=facts, leases=(owner_lease(taken, 200_003),))
    check_transition(
        before,
        after,
        step(
            "activate",
            Activated(),
            run_id="a",
            claimant=BOB,
            claimed_at_ms=200_003,
            expected=r.snapshot,
        ),
    )


def test_taking_a_running_run_through_a_plain_claim_fires():
    """A claim no steal granted must never hand over a running run."""
    r = running(heartbeat=190_003, claim=BOB, claimed_at_ms=200_003)
    facts = (*_stolen(r, BOB, 200_003)[:2], OwnershipFact("a", "claimed", BOB, 200_003, 3))
    before = state(r, facts=facts)
    taken = running(owner=BOB, heartbeat=200_010)
    after = bumped(before, (taken,), leases=(owner_lease(taken, 200_003),))
    with pytest.raises(StealWithoutStaleness):
        check_transition(
            before,
            after,
            step(
                "activate",
                Activated(),
                run_id="a",
                claimant=BOB,
                claimed_at_ms=200_003,
                expected=r.snapshot,
            ),
        )


# --- heartbeats are judged within one ownership grant ------------------------------

SELF = OwnerId("h1", 2, "n0")


def _self_steal_history(store, clock: ManualClock) -> list[tuple[StoreState, StoreState, Step]]:
    """An owner takes its own stale run back (``lease-expired``), heartbeats at
    a reading 10 s ahead of the store clock (inside the skew allowance), then
    activates; activation stamps the store clock, below that heartbeat."""
    steps = [
        ("create", {"run_id": "lin", "state_json": "{}"}, None),
        (
            "claim_and_own",
            {
                "run_id": "lin",
                "expected": RunSnapshot("pending", None, None),
                "owner": SELF,
                "now_ms": 100_000,
            },
            None,
        ),
        (
            "steal",
            {
                "run_id": "lin",
                "expected": RunSnapshot("running", SELF, 100_000),
                "claimant": SELF,
                "now_ms": 150_000,
                "evidence": LivenessEvidence(SELF, 150_000, "lease-expired"),
            },
            140_000,
        ),
        ("heartbeat", {"run_id": "lin", "owner": SELF, "now_ms": 150_000}, None),
        (
            "activate",
            {
                "run_id": "lin",
                "claimant": SELF,
                "claimed_at_ms": 150_000,
                "expected": RunSnapshot("running", SELF, 150_000),
            },
            None,
        ),
    ]
    history = []
    before = store.state()
    for method, arguments, clock_at in steps:
        if clock_at is not None:
            clock.set(clock_at)
        outcome = getattr(store, method)(**arguments)
        after = store.state()
        history.append((before, after, Step(Call(method, tuple(arguments.items())), outcome)))
        before = after
    return history


@pytest.mark.parametrize("kind", ["reference model", "sqlite"])
def test_reactivation_by_the_same_owner_may_move_the_heartbeat_back(kind: str):
    """Issue 10, item 9: activation stamps the store clock (the seed), so a
    self-steal's activation may put the heartbeat below the owner's last
    (ahead-of-clock) heartbeat. That is a new grant: no invariant fires, on the
    reference model nor on the SQLite store."""
    clock = ManualClock(100_000)
    store = ModelRunStore(clock=clock) if kind == "reference model" else None
    if store is None:
        import runstore

        store = runstore.open(":memory:", clock=clock)
    try:
        history = _self_steal_history(store, clock)
    finally:
        close = getattr(store, "close", None)
        if callable(close):
            close()
    outcomes = [taken.outcome for _, _, taken in history]
    assert outcomes[1:] == [Activated(), Claimed(150_000), Updated(), Activated()]
    last_before, last_after, _ = history[-1]
    assert last_before.rows[0].heartbeat_at_ms == 150_000
    assert last_after.rows[0].heartbeat_at_ms == 140_000  # activation stamped the store clock
    for before, after, taken in history:
        check_state(after)
        check_transition(before, after, taken)


def test_heartbeat_moving_back_inside_one_grant_still_fires_after_a_self_steal():
    """After the self-steal's activation, the new grant's heartbeat must not move
    back again: a later heartbeat that lowers it fires ``HeartbeatRegressed``."""
    clock = ManualClock(100_000)
    model = ModelRunStore(clock=clock)
    history = _self_steal_history(model, clock)
    before = history[-1][1]
    (r,) = before.rows
    lowered = attrs.evolve(r, heartbeat_at_ms=r.heartbeat_at_ms - 1)
    lease = attrs.evolve(before.leases[0], heartbeat_at_ms=lowered.heartbeat_at_ms)
    after = bumped(before, (lowered,), leases=(lease,))
    with pytest.raises(HeartbeatRegressed):
        check_transition(before, after, step("heartbeat", Updated(), run_id="lin", owner=SELF))


def test_a_forged_activation_fact_does_not_excuse_a_regressed_heartbeat():
    """Only an accepted ``activate``/``claim_and_own`` of the run starts a new
    grant: a heartbeat that appends an ``activated`` fact and moves the stamp
    back still fires."""
    r = running(heartbeat=5000)
    before = state(r)
    lowered = attrs.evolve(r, heartbeat_at_ms=4000)
    facts = (*before.facts, OwnershipFact("a", "activated", ALICE, 4000, 3))
    after = bumped(before, (lowered,), facts=facts, leases=(owner_lease(lowered, 4000),))
    with pytest.raises(HeartbeatRegressed):
        check_transition(before, after, step("heartbeat", Updated(), run_id="a", owner=ALICE))


def test_a_non_monotonic_strategy_heartbeat_fires_inside_one_grant():
    """The zoo's ``heartbeat_regresses`` strategy (the caller's time stored,
    not the larger stamp) on a real SQLite store: a late, older heartbeat
    inside one grant moves the lease back and fires ``HeartbeatRegressed``."""
    import runstore
    from tests.zoo.heartbeat_regresses import factory

    clock = ManualClock(100_000)
    store = runstore.open(":memory:", clock=clock, consensus=factory())
    try:
        store.create("a", "{}")
        pending = RunSnapshot("pending", None, None)
        assert store.claim_and_own("a", pending, ALICE, 100_000) == Activated()
        assert store.heartbeat("a", ALICE, 105_000) == Updated()
        before = store.state()
        outcome = store.heartbeat("a", ALICE, 101_000)
        after = store.state()
    finally:
        store.close()
    assert after.leases[0].heartbeat_at_ms == 101_000  # the row keeps the larger stamp
    taken = Step(
        Call("heartbeat", (("run_id", "a"), ("owner", ALICE), ("now_ms", 101_000))), outcome
    )
    with pytest.raises(HeartbeatRegressed):
        check_transition(before, after, taken)
