"""A copy of the adapter's ``transition_owned`` with three switches, one per
zoo bug, so each bug is a single change to otherwise unchanged code."""

from runstore import _boundary as admit
from runstore._outcomes import GuardFailed, Transitioned
from runstore._values import TERMINAL_STATUSES
from runstore.consensus._types import FenceLostError
from runstore.sqlite import SqliteRunStore
from runstore.sqlite import _queries as q
from runstore.sqlite._store import _FENCE_LOST, _NOT_FOUND, _fact, _write_invariant

_CLEAR_CLAIM = "claim_host_id = NULL, claim_pid = NULL, claim_nonce = NULL, claimed_at_ms = NULL"
assert _CLEAR_CLAIM in q.TRANSITION_SETTLE_WRITE, "the adapter's settle query changed"
_SETTLE_KEEPING_CLAIM = q.TRANSITION_SETTLE_WRITE.replace(
    _CLEAR_CLAIM, "claim_host_id = claim_host_id"
)


def _wrote(cursor):
    """Whether a guarded write matched, with or without ``RETURNING``."""
    if cursor.description is not None:
        return cursor.fetchone() is not None
    return cursor.rowcount > 0


class PatchedTransition(SqliteRunStore):
    keep_claim = False
    record_release = True
    write_state_when_settling = True

    def transition_owned(self, run_id, owner, to_status, state_json=None, guard=None):
        method = "transition_owned"
        rid, who, status, state, checked = admit.admit_transition_owned(
            run_id, owner, to_status, state_json, guard
        )
        transitioned_at = self._clock.now_ms()
        requirement = None if checked is None else checked.cancel_requested
        params = (rid, who.host_id, who.pid, who.nonce, requirement)

        def body(tx):
            execute = tx.connection.execute
            consensus = tx.consensus
            try:
                consensus.guard(tx, rid, who)
                held = True
            except FenceLostError:
                held = False
            if held:
                if status == "running":
                    wrote = _wrote(execute(q.TRANSITION_RUNNING_WRITE, params))
                else:
                    finished = transitioned_at if status in TERMINAL_STATUSES else None
                    settle = _SETTLE_KEEPING_CLAIM if self.keep_claim else q.TRANSITION_SETTLE_WRITE
                    wrote = _wrote(execute(settle, (*params, status, finished)))
                if wrote:
                    if state is not None and (
                        status == "running" or self.write_state_when_settling
                    ):
                        execute(q.STATE_WRITE, (rid, state))
                    if status != "running":
                        consensus.release_ownership(tx, rid, who)
                        if self.record_release:
                            _fact(tx, rid, "released", who, None)
                    return Transitioned()
            row = execute(q.TRANSITION_CLASSIFY, params).fetchone()
            if row is None:
                return _NOT_FOUND
            owned, blocked = row
            if not held or not owned:
                return _FENCE_LOST
            if blocked:
                return GuardFailed()
            raise _write_invariant(method, rid)

        return self._tm.write(method, body)
