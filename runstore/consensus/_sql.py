"""``SqlConsensus``: leases kept in the store's own database and transaction.

Each run's lease is one row of ``flows_consensus_leases`` (owner, grant time,
heartbeat, pending claim), read and written through ``tx.connection`` inside
the store's write transaction, so a rolled-back operation leaves no lease
change behind and nothing needs an undo hook. A row with neither owner nor
claim is deleted. Each method is a single guarded statement where SQL can say
it; when the guard misses, one more read names the reason.

Storage failures are raised as ``ConsensusError("persistence_failed")`` caused
by the database error, so the store can still tell a transient ``SQLITE_BUSY``
(and retry) from a lasting failure.

Staleness is judged against the caller's ``now_ms``: a lease is stale when its
heartbeat is strictly older than ``now_ms - HEARTBEAT_STALE_AFTER_MS``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any, Final, TypeVar

from .._constants import HEARTBEAT_STALE_AFTER_MS
from .._values import Lease, LivenessEvidence, OwnerId
from ._types import (
    Cleared,
    ConsensusError,
    FenceLostError,
    Granted,
    GrantOutcome,
    Lost,
    Promoted,
    PromoteOutcome,
    RecoverOutcome,
    Rejected,
    Renewed,
    RenewOutcome,
    Transaction,
)

T = TypeVar("T")

_OWNER_IS: Final = "owner_host_id = ?2 AND owner_pid = ?3 AND owner_nonce = ?4"
_CLAIM_IS: Final = (
    "claim_host_id = ?2 AND claim_pid = ?3 AND claim_nonce = ?4 AND claimed_at_ms = ?5"
)

_CLAIM: Final = """
INSERT INTO flows_consensus_leases (run_id, claim_host_id, claim_pid, claim_nonce, claimed_at_ms)
VALUES (?1, ?2, ?3, ?4, ?5)
ON CONFLICT (run_id) DO UPDATE SET
  claim_host_id = excluded.claim_host_id, claim_pid = excluded.claim_pid,
  claim_nonce = excluded.claim_nonce, claimed_at_ms = excluded.claimed_at_ms
WHERE claim_host_id IS NULL AND owner_host_id IS NULL
"""
_STEAL: Final = f"""
UPDATE flows_consensus_leases
SET claim_host_id = ?5, claim_pid = ?6, claim_nonce = ?7, claimed_at_ms = ?8
WHERE run_id = ?1 AND {_OWNER_IS} AND claim_host_id IS NULL
  AND heartbeat_at_ms IS NOT NULL AND heartbeat_at_ms < ?9
"""
_ACTIVATE: Final = f"""
UPDATE flows_consensus_leases
SET owner_host_id = ?2, owner_pid = ?3, owner_nonce = ?4, granted_at_ms = ?5,
    heartbeat_at_ms = ?6,
    claim_host_id = NULL, claim_pid = NULL, claim_nonce = NULL, claimed_at_ms = NULL
WHERE run_id = ?1 AND {_CLAIM_IS}
"""
_HEARTBEAT: Final = f"""
UPDATE flows_consensus_leases SET heartbeat_at_ms = MAX(COALESCE(heartbeat_at_ms, ?5), ?5)
WHERE run_id = ?1 AND {_OWNER_IS}
RETURNING heartbeat_at_ms
"""
_RECONFIRM: Final = f"""
UPDATE flows_consensus_leases SET heartbeat_at_ms = MAX(COALESCE(heartbeat_at_ms, ?5), ?5)
WHERE run_id = ?1 AND {_OWNER_IS} AND claim_host_id IS NULL
RETURNING heartbeat_at_ms
"""
_RECOVER: Final = f"""
UPDATE flows_consensus_leases
SET claim_host_id = NULL, claim_pid = NULL, claim_nonce = NULL, claimed_at_ms = NULL
WHERE run_id = ?1 AND {_CLAIM_IS} AND claimed_at_ms < ?6
"""
_RELEASE_CLAIM: Final = f"""
UPDATE flows_consensus_leases
SET claim_host_id = NULL, claim_pid = NULL, claim_nonce = NULL, claimed_at_ms = NULL
WHERE run_id = ?1 AND {_CLAIM_IS}
RETURNING owner_host_id
"""
# Dropping ownership also drops any pending claim, which empties the lease.
_RELEASE_OWNERSHIP: Final = f"DELETE FROM flows_consensus_leases WHERE run_id = ?1 AND {_OWNER_IS}"
_PRUNE: Final = (
    "DELETE FROM flows_consensus_leases "
    "WHERE run_id = ?1 AND owner_host_id IS NULL AND claim_host_id IS NULL"
)
_GUARD: Final = f"SELECT 1 FROM flows_consensus_leases WHERE run_id = ?1 AND {_OWNER_IS}"
_LEASE: Final = """
SELECT owner_host_id, owner_pid, owner_nonce, granted_at_ms, heartbeat_at_ms,
       claim_host_id, claim_pid, claim_nonce, claimed_at_ms
FROM flows_consensus_leases WHERE run_id = ?1
"""
_ALL_LEASES: Final = """
SELECT run_id, owner_host_id, owner_pid, owner_nonce, granted_at_ms, heartbeat_at_ms,
       claim_host_id, claim_pid, claim_nonce, claimed_at_ms
FROM flows_consensus_leases ORDER BY run_id
"""


def evidence_matches(
    expected_owner: OwnerId, observer: OwnerId, now_ms: int, evidence: LivenessEvidence
) -> bool:
    """Whether ``evidence`` speaks about ``expected_owner`` at exactly ``now_ms``
    with the host relation its kind requires between that owner and ``observer``."""
    if evidence.expected_owner != expected_owner or evidence.checked_at_ms != now_ms:
        return False
    if evidence.kind == "same-host-pid-dead":
        return expected_owner.host_id == observer.host_id
    if evidence.kind == "cross-host-unreachable-stale":
        return expected_owner.host_id != observer.host_id
    return evidence.kind == "lease-expired"


def _identity(host: Any, pid: Any, nonce: Any) -> OwnerId | None:
    if host is None and pid is None and nonce is None:
        return None
    return OwnerId(host, pid, nonce)


def _lease(run_id: str, row: tuple[Any, ...]) -> Lease:
    return Lease(
        run_id=run_id,
        owner=_identity(row[0], row[1], row[2]),
        granted_at_ms=row[3],
        heartbeat_at_ms=row[4],
        claim=_identity(row[5], row[6], row[7]),
        claimed_at_ms=row[8],
    )


class SqlConsensus:
    """Leases in ``flows_consensus_leases``, in the store's transaction (the default).

    Safe across processes on one file: every decision is made under the
    store's write lock. Needs no ``on_open``: the lease-backfill migration
    gave every owned or claimed run its lease.
    """

    def __repr__(self) -> str:
        return "SqlConsensus()"

    def _run(self, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except sqlite3.Error as error:
            failure = error
        # Chained so the store can classify (and retry) the database error.
        raise ConsensusError("persistence_failed", "lease storage failed") from failure

    def claim(self, tx: Transaction, run_id: str, claimant: OwnerId, now_ms: int) -> GrantOutcome:
        def run() -> GrantOutcome:
            execute = tx.connection.execute
            granted = execute(
                _CLAIM, (run_id, claimant.host_id, claimant.pid, claimant.nonce, now_ms)
            ).rowcount
            if granted:
                return Granted(now_ms)
            lease = execute(_LEASE, (run_id,)).fetchone()
            if lease is not None and lease[5] is not None:
                return Rejected("already_claimed")
            return Rejected("owner_held")

        return self._run(run)

    def steal(
        self,
        tx: Transaction,
        run_id: str,
        claimant: OwnerId,
        now_ms: int,
        evidence: LivenessEvidence,
    ) -> GrantOutcome:
        expected = evidence.expected_owner
        if not evidence_matches(expected, claimant, now_ms, evidence):
            return Rejected("evidence_invalid")

        def run() -> GrantOutcome:
            execute = tx.connection.execute
            granted = execute(
                _STEAL,
                (
                    run_id,
                    expected.host_id,
                    expected.pid,
                    expected.nonce,
                    claimant.host_id,
                    claimant.pid,
                    claimant.nonce,
                    now_ms,
                    now_ms - HEARTBEAT_STALE_AFTER_MS,
                ),
            ).rowcount
            if granted:
                return Granted(now_ms)
            row = execute(_LEASE, (run_id,)).fetchone()
            if row is None:
                return Rejected("evidence_invalid")
            lease = _lease(run_id, row)
            if lease.claim is not None:
                return Rejected("already_claimed")
            if lease.owner != expected:
                return Rejected("evidence_invalid")
            return Rejected("owner_live")

        return self._run(run)

    def activate(
        self, tx: Transaction, run_id: str, owner: OwnerId, granted_at_ms: int, now_ms: int
    ) -> PromoteOutcome:
        def run() -> PromoteOutcome:
            promoted = tx.connection.execute(
                _ACTIVATE,
                (run_id, owner.host_id, owner.pid, owner.nonce, granted_at_ms, now_ms),
            ).rowcount
            return Promoted() if promoted else Lost()

        return self._run(run)

    def _renew(
        self, statement: str, tx: Transaction, run_id: str, owner: OwnerId, now_ms: int
    ) -> RenewOutcome:
        def run() -> RenewOutcome:
            renewed = tx.connection.execute(
                statement, (run_id, owner.host_id, owner.pid, owner.nonce, now_ms)
            ).fetchone()
            return Lost() if renewed is None else Renewed(renewed[0])

        return self._run(run)

    def heartbeat(self, tx: Transaction, run_id: str, owner: OwnerId, now_ms: int) -> RenewOutcome:
        return self._renew(_HEARTBEAT, tx, run_id, owner, now_ms)

    def reconfirm(self, tx: Transaction, run_id: str, owner: OwnerId, now_ms: int) -> RenewOutcome:
        return self._renew(_RECONFIRM, tx, run_id, owner, now_ms)

    def recover(
        self,
        tx: Transaction,
        run_id: str,
        stale_claimant: OwnerId,
        granted_at_ms: int,
        observer: OwnerId,
        now_ms: int,
        evidence: LivenessEvidence,
    ) -> RecoverOutcome:
        if not evidence_matches(stale_claimant, observer, now_ms, evidence):
            return Rejected("evidence_invalid")

        def run() -> RecoverOutcome:
            execute = tx.connection.execute
            claim = (
                run_id,
                stale_claimant.host_id,
                stale_claimant.pid,
                stale_claimant.nonce,
                granted_at_ms,
                now_ms - HEARTBEAT_STALE_AFTER_MS,
            )
            if execute(_RECOVER, claim).rowcount:
                execute(_PRUNE, (run_id,))
                return Cleared()
            row = execute(_LEASE, (run_id,)).fetchone()
            if row is None:
                return Rejected("claim_changed")
            lease = _lease(run_id, row)
            if lease.claim != stale_claimant or lease.claimed_at_ms != granted_at_ms:
                return Rejected("claim_changed")
            return Rejected("claim_fresh")

        return self._run(run)

    def release_claim(
        self, tx: Transaction, run_id: str, claimant: OwnerId, granted_at_ms: int
    ) -> None:
        def run() -> None:
            execute = tx.connection.execute
            released = execute(
                _RELEASE_CLAIM,
                (run_id, claimant.host_id, claimant.pid, claimant.nonce, granted_at_ms),
            ).fetchone()
            # (Tested in Python: SQLite 3.40 answers ``x IS NULL`` wrongly
            # inside RETURNING.)
            if released is not None and released[0] is None:
                execute(_PRUNE, (run_id,))

        self._run(run)

    def release_ownership(self, tx: Transaction, run_id: str, owner: OwnerId) -> None:
        def run() -> None:
            tx.connection.execute(
                _RELEASE_OWNERSHIP, (run_id, owner.host_id, owner.pid, owner.nonce)
            )

        self._run(run)

    def guard(self, tx: Transaction, run_id: str, owner: OwnerId) -> None:
        def run() -> bool:
            row = tx.connection.execute(
                _GUARD, (run_id, owner.host_id, owner.pid, owner.nonce)
            ).fetchone()
            return row is not None

        if not self._run(run):
            raise FenceLostError(run_id)

    def lease(self, tx: Transaction, run_id: str) -> Lease | None:
        def run() -> Lease | None:
            row = tx.connection.execute(_LEASE, (run_id,)).fetchone()
            return None if row is None else _lease(run_id, row)

        return self._run(run)

    def leases(self, tx: Transaction) -> list[Lease]:
        """Every lease, by run id (one query; ``state()`` uses it when present)."""

        def run() -> list[Lease]:
            rows = tx.connection.execute(_ALL_LEASES).fetchall()
            return [_lease(row[0], row[1:]) for row in rows]

        return self._run(run)
