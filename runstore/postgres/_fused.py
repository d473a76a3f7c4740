"""The one-round-trip path of a PostgreSQL store whose strategy is ``SqlConsensus``.

The shared core (``runstore._sql._store``) admits every operation's
arguments and makes the decisions that need no database (evidence that does
not match, a read-only store, the ``claim_and_own`` pre-check); then, when
the store has a ``Fused``, it asks it for the operation before running its
own transaction. ``Fused`` sends one statement, a call of the operation's
server-side function (``_fused_sql``), as its own transaction through
``TransactionManager.once``, and turns the function's answer into the
operation's outcome. Each method returns None when the call must take the
general path (inside another write on the same thread, or with a test's
fault plan armed); the store then runs its own transaction.

``renew_many`` sends the renewals of several runs together, each its own
statement and transaction (``TransactionManager.once_many``), for
``SqlRunStore._renew_each``.

Only ``SqlConsensus`` exactly (not a subclass, which may change any
decision) is fused: the functions do its lease changes themselves. Every
other strategy keeps the general path, with strategy calls through
``tx.connection``.

Fused: every write of one run, ``request_cancel_lineage``, ``heartbeat_many``,
``claim_next`` and ``claim_next_many`` (one round trip when the server proves
that its rows will decode, else three: the rows are then decoded before the
commit).
Reads are single statements already. ``purge_settled`` and
``compact_changes`` keep the general path: batch maintenance of up to
``limit`` runs in one transaction of about nine round trips, which measured
under 1% of the call (1 000 runs purged in 173 ms, at about 100 µs a round
trip on a busy machine).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, TypeVar

from .._errors import RunStoreError
from .._outcomes import (
    AbandonClaimOutcome,
    Abandoned,
    Activated,
    ActivateOutcome,
    AlreadyClaimed,
    ClaimAndOwnOutcome,
    ClaimChanged,
    Claimed,
    ClaimFresh,
    ClaimLost,
    ClaimOutcome,
    FenceLost,
    GuardFailed,
    HeartbeatFresh,
    HeartbeatOutcome,
    NotFound,
    RecoverClaimOutcome,
    Recovered,
    SnapshotChanged,
    StealOutcome,
    Transitioned,
    TransitionOutcome,
    Updated,
)
from .._values import OwnerId, RunSnapshot
from ..consensus._sql import SqlConsensus
from ._tx import TransactionManager

T = TypeVar("T")

_TAGS: Final[dict[str, Any]] = {
    "not_found": NotFound(),
    "already_claimed": AlreadyClaimed(),
    "heartbeat_fresh": HeartbeatFresh(),
    "snapshot_changed": SnapshotChanged(),
    "activated": Activated(),
    "claim_lost": ClaimLost(),
    "abandoned": Abandoned(),
    "recovered": Recovered(),
    "claim_changed": ClaimChanged(),
    "claim_fresh": ClaimFresh(),
    "updated": Updated(),
    "fence_lost": FenceLost(),
    "transitioned": Transitioned(),
    "guard_failed": GuardFailed(),
}

_SNAPSHOT: Final = "$2::text, $3::text, $4::bigint, $5::text, $6::bigint"
CLAIM: Final = (
    f"SELECT flows_op_claim($1::text, {_SNAPSHOT}, $7::bigint, $8::text, $9::bigint, "
    "$10::text, $11::bigint)"
)
STEAL: Final = (
    f"SELECT flows_op_steal($1::text, {_SNAPSHOT}, $7::bigint, $8::text, $9::bigint, "
    "$10::text, $11::bigint)"
)
CLAIM_AND_OWN: Final = (
    f"SELECT flows_op_claim_and_own($1::text, {_SNAPSHOT}, $7::bigint, $8::text, $9::bigint, "
    "$10::text, $11::bigint, $12::text)"
)
ACTIVATE: Final = (
    f"SELECT flows_op_activate($1::text, {_SNAPSHOT}, $7::text, $8::bigint, $9::text, "
    "$10::bigint, $11::bigint)"
)
ABANDON_CLAIM: Final = (
    "SELECT flows_op_abandon_claim($1::text, $2::text, $3::bigint, $4::text, $5::bigint)"
)
RECOVER_CLAIM: Final = (
    "SELECT flows_op_recover_claim($1::text, $2::text, $3::bigint, $4::text, $5::bigint, "
    "$6::bigint)"
)
RENEW: Final = (
    "SELECT flows_op_renew($1::text, $2::text, $3::bigint, $4::text, $5::bigint, $6::boolean)"
)
TRANSITION_OWNED: Final = (
    "SELECT flows_op_transition_owned($1::text, $2::text, $3::bigint, $4::text, $5::text, "
    "$6::text, $7::bigint, $8::text)"
)
HEARTBEAT_MANY: Final = (
    "SELECT run_id, outcome FROM flows_op_heartbeat_many($1::text[], $2::text, $3::bigint, "
    "$4::text, $5::bigint)"
)
CLAIM_NEXT: Final = (
    "SELECT * FROM flows_op_claim_next($1::text, $2::text, $3::text, $4::bigint, $5::text, "
    "$6::bigint, $7::bigint)"
)
CLAIM_NEXT_ONCE: Final = (
    "SELECT * FROM flows_op_claim_next_once($1::text, $2::text, $3::text, $4::bigint, $5::text, "
    "$6::bigint, $7::bigint)"
)
CLAIM_NEXT_MANY: Final = (
    "SELECT * FROM flows_op_claim_next_many($1::bigint, $2::text, $3::text, $4::text, "
    "$5::bigint, $6::text, $7::bigint, $8::bigint)"
)
CLAIM_NEXT_MANY_ONCE: Final = (
    "SELECT * FROM flows_op_claim_next_many_once($1::bigint, $2::text, $3::text, $4::text, "
    "$5::bigint, $6::text, $7::bigint, $8::bigint)"
)
REQUEST_CANCEL: Final = (
    "SELECT marked, requested_at, status FROM flows_op_request_cancel($1::text, $2::bigint)"
)
REQUEST_CANCEL_LINEAGE: Final = (
    "SELECT marked, requested_at, status FROM flows_op_request_cancel_lineage($1::text, $2::bigint)"
)
#: ``create``'s two inserts as one statement (the state row's foreign key is
#: checked at the end of the statement, when the run row exists); a round
#: first takes a key-share lock on its lineage's root, as the general path's
#: ``CREATE_RUN`` does (see there why).
CREATE: Final = """
WITH root AS (SELECT 1 AS held FROM flows_runs WHERE run_id = $4::text FOR KEY SHARE),
run AS (
  INSERT INTO flows_runs
    (run_id, status, created_at_ms, parent_run_id, lineage_id, round_ordinal)
  SELECT $1::text, 'pending', $2::bigint, $3::text, $4::text, $5::bigint
  WHERE (SELECT count(*) FROM root) >= 0
  RETURNING run_id
)
INSERT INTO flows_run_state (run_id, state_json) SELECT run_id, $6::text FROM run
"""


def fusable(consensus: object) -> bool:
    """Whether a store with this strategy may take the one-round-trip path."""
    return type(consensus) is SqlConsensus


def _snapshot(snapshot: RunSnapshot) -> tuple[Any, ...]:
    owner = snapshot.owner
    if owner is None:
        return (snapshot.status, None, None, None, snapshot.heartbeat_at_ms)
    return (snapshot.status, owner.host_id, owner.pid, owner.nonce, snapshot.heartbeat_at_ms)


def _who(owner: OwnerId) -> tuple[str, int, str]:
    return (owner.host_id, owner.pid, owner.nonce)


class Fused:
    """Each write operation as one statement (see the module docstring)."""

    def __init__(self, tm: TransactionManager) -> None:
        self._tm = tm

    def _tag(
        self, method: str, statement: str, params: tuple[Any, ...], run_id: str, now: int = 0
    ) -> Any:
        """The function's answer as an outcome (``claimed`` is ``Claimed(now)``)."""
        done = self._tm.once(method, statement, params, run_id=run_id)
        if done is None:
            return None
        tag = done[0][0][0]
        return Claimed(now) if tag == "claimed" else _TAGS[tag]

    def create(
        self,
        run_id: str,
        created_at: int,
        parent: str | None,
        lineage: str | None,
        ordinal: int | None,
        state: str,
    ) -> bool:
        params = (run_id, created_at, parent, lineage, ordinal, state)
        return self._tm.once("create", CREATE, params, run_id=run_id) is not None

    def claim(
        self, run_id: str, snapshot: RunSnapshot, who: OwnerId, now: int, cutoff: int
    ) -> ClaimOutcome | None:
        params = (run_id, *_snapshot(snapshot), cutoff, *_who(who), now)
        return self._tag("claim", CLAIM, params, run_id, now)  # type: ignore[no-any-return]

    def steal(
        self, run_id: str, snapshot: RunSnapshot, who: OwnerId, now: int, cutoff: int
    ) -> StealOutcome | None:
        params = (run_id, *_snapshot(snapshot), cutoff, *_who(who), now)
        return self._tag("steal", STEAL, params, run_id, now)  # type: ignore[no-any-return]

    def claim_and_own(
        self,
        run_id: str,
        snapshot: RunSnapshot,
        who: OwnerId,
        now: int,
        cutoff: int,
    ) -> ClaimAndOwnOutcome | None:
        previous = snapshot.owner
        mode = "claim" if previous is None else "reown" if previous == who else "steal"
        params = (run_id, *_snapshot(snapshot), cutoff, *_who(who), now, mode)
        return self._tag(  # type: ignore[no-any-return]
            "claim_and_own", CLAIM_AND_OWN, params, run_id
        )

    def activate(
        self, run_id: str, who: OwnerId, token: int, snapshot: RunSnapshot, activated_at: int
    ) -> ActivateOutcome | None:
        params = (run_id, *_snapshot(snapshot), *_who(who), token, activated_at)
        return self._tag("activate", ACTIVATE, params, run_id)  # type: ignore[no-any-return]

    def abandon_claim(self, run_id: str, who: OwnerId, token: int) -> AbandonClaimOutcome | None:
        params = (run_id, *_who(who), token)
        return self._tag(  # type: ignore[no-any-return]
            "abandon_claim", ABANDON_CLAIM, params, run_id
        )

    def recover_claim(
        self, run_id: str, stale: OwnerId, token: int, cutoff: int
    ) -> RecoverClaimOutcome | None:
        params = (run_id, *_who(stale), token, cutoff)
        return self._tag(  # type: ignore[no-any-return]
            "recover_claim", RECOVER_CLAIM, params, run_id
        )

    def renew(self, method: str, run_id: str, who: OwnerId, now: int) -> HeartbeatOutcome | None:
        params = (run_id, *_who(who), now, method == "reconfirm")
        return self._tag(method, RENEW, params, run_id)  # type: ignore[no-any-return]

    def renew_many(
        self, method: str, renewals: list[tuple[str, OwnerId, int]]
    ) -> list[HeartbeatOutcome | RunStoreError | None] | None:
        """``renew`` of each ``(run_id, who, now)``, sent together, each its own
        transaction (``TransactionManager.once_many``): per renewal its
        outcome, its error, or None (run it by itself)."""
        reconfirm = method == "reconfirm"
        batch = [(run_id, *_who(who), now, reconfirm) for run_id, who, now in renewals]
        done = self._tm.once_many(method, RENEW, batch, [entry[0] for entry in renewals])
        if done is None:
            return None
        return [_TAGS[answer[0][0][0]] if isinstance(answer, tuple) else answer for answer in done]

    def transition_owned(
        self,
        run_id: str,
        who: OwnerId,
        requirement: str | None,
        status: str,
        finished: int | None,
        state: str | None,
    ) -> TransitionOutcome | None:
        params = (run_id, *_who(who), requirement, status, finished, state)
        return self._tag(  # type: ignore[no-any-return]
            "transition_owned", TRANSITION_OWNED, params, run_id
        )

    def heartbeat_many(
        self, who: OwnerId, ordered: list[str], now: int
    ) -> dict[str, HeartbeatOutcome] | None:
        done = self._tm.once("heartbeat_many", HEARTBEAT_MANY, (ordered, *_who(who), now))
        if done is None:
            return None
        return {str(run_id): _TAGS[tag] for run_id, tag in done[0]}

    def claim_next(
        self,
        who: OwnerId,
        now: int,
        wanted: tuple[str, str],
        cutoff: int,
        decode: Callable[[tuple[Any, ...]], T],
    ) -> T | bool | None:
        """The claimed run's row as ``decode`` makes it, None when there was
        none, or True when the call must take the general path.

        A run whose stored row no longer decodes must not be claimed (the
        operation fails whole, as the general path's does). One round trip
        when the server proves the row will decode (migration 2007); else
        the claim rolls back and is made again with the row decoded before
        ``COMMIT`` is sent (two more)."""

        def check(rows: list[Any]) -> T | None:
            return decode(tuple(rows[0])) if rows else None

        params = (*wanted, *_who(who), now, cutoff)
        done = self._tm.once(
            "claim_next", CLAIM_NEXT_ONCE, params, check=check, unproven=CLAIM_NEXT
        )
        if done is None:
            return True
        return done[0][0]  # type: ignore[no-any-return]

    def claim_next_many(
        self,
        who: OwnerId,
        now: int,
        limit: int,
        wanted: tuple[str, str],
        cutoff: int,
        decode: Callable[[tuple[Any, ...]], T],
    ) -> list[T] | bool:
        """The claimed runs' rows as ``decode`` makes them, oldest first, or
        True when the call must take the general path. As ``claim_next``:
        one round trip when the server proves that every row will decode
        (migration 2011), else the claims roll back and are made again with
        every row decoded before ``COMMIT`` is sent (two more)."""

        def check(rows: list[Any]) -> list[T]:
            return [decode(tuple(row)) for row in rows]

        params = (limit, *wanted, *_who(who), now, cutoff)
        done = self._tm.once(
            "claim_next_many",
            CLAIM_NEXT_MANY_ONCE,
            params,
            check=check,
            unproven=CLAIM_NEXT_MANY,
        )
        if done is None:
            return True
        return done[0][0]  # type: ignore[no-any-return]

    def request_cancel(
        self, method: str, run_id: str, now: int
    ) -> tuple[bool, list[tuple[Any, Any]]] | None:
        """(marked, the rows that explain a miss), or None for the general path."""
        statement = REQUEST_CANCEL if method == "request_cancel" else REQUEST_CANCEL_LINEAGE
        done = self._tm.once(method, statement, (run_id, now), run_id=run_id)
        if done is None:
            return None
        rows = done[0]
        if rows and rows[0][0]:
            return True, []
        return False, [(requested_at, status) for _marked, requested_at, status in rows]

    def acknowledge_cancel(self, statement: str, params: tuple[Any, ...]) -> bool | None:
        done = self._tm.once("acknowledge_cancel", statement, params)
        return None if done is None else done[1] > 0
