"""A PostgreSQL ``transition_owned`` that tests ownership in a subquery of its one UPDATE.

The bug: the store writes a transition with one UPDATE whose ownership test
is a subquery on the strategy's lease table (``EXISTS (SELECT 1 FROM
flows_consensus_leases WHERE ... owner ...)``) instead of the row's owner
columns, and skips the run-row lock the other writes take first ("one
statement is atomic"). Under READ COMMITTED it is not: the subquery reads
the lease as it was when the statement began, and when the run's row was
changed meanwhile by a transaction that has since committed, PostgreSQL
re-checks the UPDATE's conditions on the new row only, never the subquery.

Only a takeover can slip into that window: a running run changes owner only
when a peer takes it over (``steal``, or ``claim_and_own`` with liveness
evidence), which needs the owner's lease stale, so the owner must be awake
and settling at the moment a peer takes the run over (a zombie). Its settle
then lands on the run its successor owns. The store runs on the
general path (``fast_path=False``): the window is the takeover's transaction,
from its row lock to its COMMIT, a few round trips. (On the one-round-trip
path a takeover holds the row lock for one server-side call only: the torture
missed that variant in 60 s.) PostgreSQL only: SQLite serializes whole write
transactions.
"""

from __future__ import annotations

import runstore
from runstore import TERMINAL_STATUSES, Transitioned
from runstore import _boundary as admit
from runstore.postgres import PostgresRunStore

KIND = "race"

_MISS = object()
_OWNER = "owner_host_id = $2::text AND owner_pid = $3::bigint AND owner_nonce = $4::text"
_BY_LEASE = (
    "EXISTS (SELECT 1 FROM flows_consensus_leases AS lease WHERE lease.run_id = $1::text"
    " AND lease.owner_host_id = $2::text AND lease.owner_pid = $3::bigint"
    " AND lease.owner_nonce = $4::text)"
)


def _by_lease(sql: str) -> str:
    assert _OWNER in sql, "the shipped write no longer names its owner this way"
    return sql.replace(_OWNER, _BY_LEASE)


class SettlesByLease(PostgresRunStore):
    def transition_owned(self, run_id, owner, to_status, state_json=None, guard=None):
        q = self._queries
        method = "transition_owned"
        rid, who, status, state, checked = admit.admit_transition_owned(
            run_id, owner, to_status, state_json, guard
        )
        transitioned_at = admit.clock_reading(method, self.clock)
        requirement = None if checked is None else checked.cancel_requested
        params = (rid, who.host_id, who.pid, who.nonce, requirement)
        finished = transitioned_at if status in TERMINAL_STATUSES else None

        def body(tx):
            execute = tx.connection.execute
            # The bug: no row lock first, and the owner is the lease's, read in a subquery.
            if status == "running":
                wrote = execute(_by_lease(q.TRANSITION_RUNNING_WRITE), params)
            else:
                wrote = execute(_by_lease(q.TRANSITION_SETTLE_WRITE), (*params, status, finished))
            if not wrote.rowcount:
                return _MISS
            if state is not None:
                execute(q.STATE_WRITE, (rid, state))
            if status != "running":
                tx.consensus.release_ownership(tx, rid, who)
                self._fact(tx, rid, "released", who, None)
            return Transitioned()

        answer = self._tm.write(method, body)
        if answer is _MISS:
            # The shipped answer for a miss (fence lost, guard failed, not found).
            return super().transition_owned(run_id, owner, to_status, state_json, guard)
        return answer


def factory(clock, url):
    store = runstore.open(url, clock=clock, fast_path=False)
    store.__class__ = SettlesByLease
    return store
