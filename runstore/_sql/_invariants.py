"""``check_invariants()`` for the SQL stores: consistency queries over the database.

Each check raises ``AssertionError`` whose message starts with the invariant's
name. Checked, in order:

- the revision bookkeeping (one source row; its revision is the newest change;
  live change entries match live runs and tombstones match deleted ones);
- every run has its state and every state, fact and lease belongs to a run;
- every run row decodes (shape, ownership and claim invariants, admissible
  state);
- fact positions are dense, and replaying a run's facts rebuilds its owner
  and claim;
- the lease and the row agree (contract.md, Decided here 2): no lease means no
  owner and no claim; the lease's owner, heartbeat, claim and claim time are
  the row's. With ``SqlConsensus`` this is one join (which also finds orphan
  and empty lease rows, and checks the grant time against the last
  activation); any other strategy is asked for each run's ``lease()``.

The queries are the backend's (``INVARIANT_QUERIES``, ``SQL_LEASE_CHECKS``,
``ALL_RUNS``, ``ALL_FACTS`` of its queries module); the judging is shared.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from .._errors import RunStoreError
from .._values import OwnerId, RunRow
from ..consensus._sql import SqlConsensus
from ._decode import decode_run


def _fail(invariant: str, found: Any) -> AssertionError:
    return AssertionError(f"{invariant}: violated (found {found!r})")


def _replay(facts: list[tuple[Any, ...]]) -> tuple[OwnerId | None, tuple[OwnerId, int] | None]:
    """The owner and claim a run's facts rebuild (contract.md, fact replay)."""
    owner: OwnerId | None = None
    claim: tuple[OwnerId, int] | None = None
    for _position, transition, host, pid, nonce, granted in facts:
        who = OwnerId(host, pid, nonce)
        if transition in ("claimed", "stolen"):
            claim = (who, granted)
        elif transition == "activated":
            owner, claim = who, None
        elif transition == "released" and granted is None:
            owner, claim = None, None
        elif transition == "expired" or (transition == "released" and claim == (who, granted)):
            claim = None
    return owner, claim


def check_store_invariants(tx: Any, q: ModuleType) -> None:
    """Run the checks on ``tx`` (a snapshot transaction) with queries ``q``."""
    execute = tx.connection.execute
    for invariant, query in q.INVARIANT_QUERIES:
        found = execute(query).fetchone()
        if found is not None and found[0]:
            raise _fail(invariant, found[0])

    rows: list[RunRow] = []
    for raw in execute(q.ALL_RUNS).fetchall():
        try:
            rows.append(decode_run("check_invariants", raw))
        except RunStoreError as error:
            raise _fail("every run row decodes", error.cause) from None

    facts: dict[str, list[tuple[Any, ...]]] = {}
    for run_id, *fact in execute(q.ALL_FACTS).fetchall():
        facts.setdefault(run_id, []).append(tuple(fact))
    for row in rows:
        owner, claim = _replay(facts.get(row.run_id, []))
        row_claim = None if row.claim is None else (row.claim, row.claimed_at_ms)
        if owner != row.owner or claim != row_claim:
            raise _fail("replaying the facts rebuilds owner and claim", row.run_id)

    consensus = tx.consensus
    if isinstance(consensus, SqlConsensus):
        for invariant, query in q.SQL_LEASE_CHECKS:
            found = execute(query).fetchone()
            if found is not None:
                raise _fail(invariant, found[0])
        return
    for row in rows:
        lease = consensus.lease(tx, row.run_id)
        if lease is None:
            agree = row.owner is None and row.claim is None
        else:
            agree = (
                lease.owner == row.owner
                and lease.heartbeat_at_ms == row.heartbeat_at_ms
                and lease.claim == row.claim
                and lease.claimed_at_ms == row.claimed_at_ms
            )
        if not agree:
            raise _fail("lease and row agree", row.run_id)
