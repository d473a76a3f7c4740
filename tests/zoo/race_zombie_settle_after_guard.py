"""A ``transition_owned`` whose write trusts the strategy's guard.

The bug: the store asks the strategy whether the caller holds the lease
(``guard``, a read of the lease) and then writes the transition with an
UPDATE that still requires a running run but no longer names its owner ("the
guard just said so"). On SQLite the transaction is left to the sqlite3
driver, which begins it just before the UPDATE, so the guard's read runs
outside it; on PostgreSQL the run-row lock is left out ("the guard read the
lease"), and under READ COMMITTED the UPDATE does not re-check the owner.

Only a takeover can slip between the two: a running run changes owner only
when a peer takes it over (``steal``, or ``claim_and_own`` with liveness
evidence), and that needs the owner's lease stale. So the owner must be
awake and writing while a peer finds its lease stale and takes it: a zombie.
It then settles the run its successor now owns, which no order of the calls
explains. Both backends.
"""

from __future__ import annotations

from runstore import TERMINAL_STATUSES, Transitioned
from runstore import _boundary as admit
from runstore.consensus import FenceLostError

from . import _races

KIND = "race"

_MISS = object()
_OWNER = {
    "sqlite": "owner_host_id = ?2 AND owner_pid = ?3 AND owner_nonce = ?4",
    "postgresql": "owner_host_id = $2::text AND owner_pid = $3::bigint AND owner_nonce = $4::text",
}


def _trusting(sql: str, dialect: str) -> str:
    """``sql`` with its owner test turned off (``TRUE OR (...)``, so every
    parameter is still used): the UPDATE names the run and its status only."""
    owner = _OWNER[dialect]
    assert owner in sql, "the shipped write no longer names its owner this way"
    return sql.replace(owner, f"(TRUE OR ({owner}))")


class SettlesAfterGuard:
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
            try:
                tx.consensus.guard(tx, rid, who)
            except FenceLostError:
                return _MISS
            # The bug: the guard stands for the owner test of the write.
            if status == "running":
                wrote = execute(_trusting(q.TRANSITION_RUNNING_WRITE, self.dialect), params)
            else:
                settle = _trusting(q.TRANSITION_SETTLE_WRITE, self.dialect)
                wrote = execute(settle, (*params, status, finished))
            if not wrote.rowcount:
                return _MISS
            if state is not None:
                execute(q.STATE_WRITE, (rid, state))
            if status != "running":
                tx.consensus.release_ownership(tx, rid, who)
                self._fact(tx, rid, "released", who, None)
            return Transitioned()

        if self.dialect == "sqlite":
            answer = _races.deferred_write(self._tm, "driver")(method, body)
        else:
            answer = self._tm.write(method, body)
        if answer is _MISS:
            # The shipped answer for a miss (fence lost, guard failed, not found).
            return super().transition_owned(run_id, owner, to_status, state_json, guard)
        return answer


def factory(clock, target):
    return _races.with_mistake(_races.open_target(clock, target), SettlesAfterGuard)
