"""``NoopConsensus``: a strategy that grants nothing.

Every claim, steal and recovery is ``Rejected("unavailable")``; activation,
heartbeat and reconfirmation are ``Lost``; releases do nothing; ``guard``
always raises ``FenceLostError``; there is never a lease. A store built on it
can create and read runs but nobody can ever own one, which is what code that
must not take ownership (or tests of how callers handle refusal) wants.
"""

from __future__ import annotations

from .._values import Lease, LivenessEvidence, OwnerId
from ._types import (
    FenceLostError,
    GrantOutcome,
    Lost,
    PromoteOutcome,
    RecoverOutcome,
    Rejected,
    RenewOutcome,
    Transaction,
)


class NoopConsensus:
    """A strategy that refuses everything and holds no state."""

    def claim(self, tx: Transaction, run_id: str, claimant: OwnerId, now_ms: int) -> GrantOutcome:
        """Always ``Rejected("unavailable")``, whatever ``tx``, ``run_id``, ``claimant`` and
        ``now_ms`` are."""
        return Rejected("unavailable")

    def steal(
        self,
        tx: Transaction,
        run_id: str,
        claimant: OwnerId,
        now_ms: int,
        evidence: LivenessEvidence,
    ) -> GrantOutcome:
        """Always ``Rejected("unavailable")``, whatever ``tx``, ``run_id``, ``claimant``, ``now_ms``
        and ``evidence`` are."""
        return Rejected("unavailable")

    def activate(
        self, tx: Transaction, run_id: str, owner: OwnerId, granted_at_ms: int, now_ms: int
    ) -> PromoteOutcome:
        """Always ``Lost()``, whatever ``tx``, ``run_id``, ``owner``, ``granted_at_ms`` and
        ``now_ms`` are."""
        return Lost()

    def heartbeat(self, tx: Transaction, run_id: str, owner: OwnerId, now_ms: int) -> RenewOutcome:
        """Always ``Lost()``, whatever ``tx``, ``run_id``, ``owner`` and ``now_ms`` are."""
        return Lost()

    def reconfirm(self, tx: Transaction, run_id: str, owner: OwnerId, now_ms: int) -> RenewOutcome:
        """Always ``Lost()``, whatever ``tx``, ``run_id``, ``owner`` and ``now_ms`` are."""
        return Lost()

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
        """Always ``Rejected("unavailable")``, whatever ``tx``, ``run_id``, ``stale_claimant``,
        ``granted_at_ms``, ``observer``, ``now_ms`` and ``evidence`` are."""
        return Rejected("unavailable")

    def release_claim(
        self, tx: Transaction, run_id: str, claimant: OwnerId, granted_at_ms: int
    ) -> None:
        """Does nothing: there is never a claim to drop (``tx``, ``run_id``, ``claimant`` and
        ``granted_at_ms`` are ignored)."""

    def release_ownership(self, tx: Transaction, run_id: str, owner: OwnerId) -> None:
        """Does nothing: there is never an owner to drop (``tx``, ``run_id`` and ``owner`` are
        ignored)."""

    def guard(self, tx: Transaction, run_id: str, owner: OwnerId) -> None:
        """Always raises ``FenceLostError`` for ``run_id``: nobody holds anything, ``owner``
        included (``tx`` is not read)."""
        raise FenceLostError(run_id)

    def lease(self, tx: Transaction, run_id: str) -> Lease | None:
        """Always ``None``: there is never a lease (``tx`` and ``run_id`` are ignored)."""
        return None
