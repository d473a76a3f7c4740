"""The invariants every committed model state satisfies.

``check_state`` raises ``AssertionError`` whose message names the first broken
invariant and the run it was found on. It is the model's ``check_invariants``
and documents, as executable statements, what "consistent" means for any
store: row shape, lease/row agreement (contract.md "Decided here" 2), facts
that replay to the row's ownership, dense fact positions, and revisions that
account for every row.
"""

from __future__ import annotations

from typing import NoReturn

from runstore._values import TERMINAL_STATUSES, Lease, OwnerId, OwnershipFact, RunRow

from ._state import ModelState


def _fail(name: str, run_id: str | None = None, detail: str = "") -> NoReturn:
    where = f" (run {run_id!r})" if run_id is not None else ""
    raise AssertionError(f"invariant broken: {name}{where}{': ' + detail if detail else ''}")


def check_row(row: RunRow) -> None:
    """The shape invariants of one run row."""
    running = row.status == "running"
    if running != (row.owner is not None) or running != (row.heartbeat_at_ms is not None):
        _fail("running iff owner and heartbeat set", row.run_id)
    if (row.claim is None) != (row.claimed_at_ms is None):
        _fail("claim fields all set or none", row.run_id)
    if (row.status in TERMINAL_STATUSES) != (row.finished_at_ms is not None):
        _fail("finished_at_ms set iff terminal", row.run_id)
    if (row.lineage_id is None) != (row.round_ordinal is None):
        _fail("lineage_id and round_ordinal set together", row.run_id)
    if (row.status == "pending") != (row.started_at_ms is None):
        # Only activation leaves pending, and it stamps the start.
        _fail("started_at_ms set iff the run left pending", row.run_id)


def check_lease_agreement(row: RunRow, lease: Lease | None) -> None:
    """The strategy's lease and the run row say the same thing."""
    if lease is None:
        if row.owner is not None or row.claim is not None:
            _fail("no lease means no owner and no claim", row.run_id)
        return
    if lease.owner is None and lease.claim is None:
        _fail("an empty lease is pruned", row.run_id)
    if (lease.owner is None) != (lease.granted_at_ms is None) or (lease.owner is None) != (
        lease.heartbeat_at_ms is None
    ):
        _fail("lease owner, grant and heartbeat set together", row.run_id)
    if (lease.claim is None) != (lease.claimed_at_ms is None):
        _fail("lease claim and claim time set together", row.run_id)
    if lease.owner != row.owner or lease.heartbeat_at_ms != row.heartbeat_at_ms:
        _fail("lease owner and heartbeat equal the row's", row.run_id)
    if lease.claim != row.claim or lease.claimed_at_ms != row.claimed_at_ms:
        _fail("lease claim and claim time equal the row's", row.run_id)


def replay(
    facts: tuple[OwnershipFact, ...],
) -> tuple[OwnerId | None, int | None, OwnerId | None, int | None]:
    """Owner, owner grant, claim and claim time rebuilt from a run's facts."""
    owner: OwnerId | None = None
    granted: int | None = None
    claim: OwnerId | None = None
    claimed: int | None = None
    for fact in facts:
        if fact.transition in ("claimed", "stolen"):
            claim, claimed = fact.owner, fact.granted_at_ms
        elif fact.transition == "activated":
            owner, granted, claim, claimed = fact.owner, fact.granted_at_ms, None, None
        elif fact.transition == "released" and fact.granted_at_ms is None:
            owner, granted, claim, claimed = None, None, None, None
        elif (claim, claimed) == (fact.owner, fact.granted_at_ms):
            # released(X, t) or expired(X, t): that exact claim is gone.
            claim, claimed = None, None
    return owner, granted, claim, claimed


def check_state(state: ModelState) -> None:
    """Raise ``AssertionError`` naming the first broken invariant of ``state``."""
    for run_id, row in state.rows.items():
        if row.run_id != run_id:
            _fail("rows are keyed by their run id", run_id)
        check_row(row)
        lease = state.leases.get(run_id)
        check_lease_agreement(row, lease)
        facts = state.facts.get(run_id, ())
        if [fact.position for fact in facts] != list(range(1, len(facts) + 1)):
            _fail("fact positions are 1, 2, 3, ... without gaps", run_id)
        if any(fact.run_id != run_id for fact in facts):
            _fail("facts belong to their run's stream", run_id)
        owner, granted, claim, claimed = replay(facts)
        if owner != row.owner:
            _fail("replaying the facts rebuilds the owner", run_id)
        if (claim, claimed) != (row.claim, row.claimed_at_ms):
            _fail("replaying the facts rebuilds the claim", run_id)
        if lease is not None and lease.owner is not None and lease.granted_at_ms != granted:
            _fail("the lease's grant is the last activation's grant", run_id)
        if run_id not in state.changes:
            _fail("every row has a change", run_id)
    for run_id in state.leases:
        if run_id not in state.rows:
            _fail("every lease belongs to a run", run_id)
    for run_id in state.facts:
        if run_id not in state.rows:
            _fail("every fact stream belongs to a run", run_id)
    for run_id, acknowledgement in state.acknowledgements.items():
        acknowledged = state.rows.get(run_id)
        if acknowledged is None or acknowledgement.run_id != run_id:
            _fail("every acknowledgement belongs to a run", run_id)
        elif acknowledged.cancel_requested_at_ms is None:
            _fail("an acknowledged run has a cancellation request", run_id)
    revisions = [*state.changes.values(), *state.tombstones.values()]
    # The newest change, or the newest tombstone compaction dropped.
    if state.revision != max([*revisions, state.compacted_through]):
        _fail("revision equals the highest change revision", None, f"{state.revision}")
    if len(set(revisions)) != len(revisions) or any(r <= 0 for r in revisions):
        _fail("change revisions are positive and distinct")
    for run_id in state.changes:
        if run_id not in state.rows:
            _fail("every live change names an existing run", run_id)
    for run_id in state.tombstones:
        if run_id in state.rows or run_id in state.changes:
            _fail("a tombstone names a deleted run only", run_id)
    check_indexes(state)


def check_indexes(state: ModelState) -> None:
    """The ordered indexes agree with the rows and the change maps."""
    keys = sorted((row.created_at_ms, run_id) for run_id, row in state.rows.items())
    if list(state.order) != keys:
        _fail("the listing index holds exactly every run's (created_at_ms, run_id)")
    latest = {**state.changes, **state.tombstones}
    if dict(state.feed) != {revision: run_id for run_id, revision in latest.items()}:
        _fail("the revision index maps each latest revision to its run id")
