"""``ModelConsensus``: the reference consensus strategy, held in memory.

It answers every ``runstore.consensus.Consensus`` call with the rules of
``runstore.model._leases`` (upstream-semantics.md section 5.4, with the release
split of contract.md), and keeps one ``Lease`` per run in a dictionary. Every
change it makes inside a transaction registers its undo with
``tx.on_rollback``, so a rolled-back transaction leaves the strategy exactly as
it was. It never reads a clock: staleness is judged against the caller's
``now_ms``. Calls are serialized by a lock, so it may be shared between
threads; it is not shared between processes.

Repetition: ``claim`` and ``steal`` answer ``Rejected("already_claimed")`` once
a claim is pending; a spent grant presented to ``activate`` again is ``Lost``;
``heartbeat`` and ``reconfirm`` may be repeated freely (the stamp never moves
backwards); ``release_claim`` and ``release_ownership`` silently do nothing
when there is nothing of the caller's to release; ``recover`` of an already
cleared claim answers ``Rejected("claim_changed")``.
"""

from __future__ import annotations

import threading

from runstore._values import Lease, LivenessEvidence, OwnerId
from runstore.consensus._types import (
    FenceLostError,
    GrantOutcome,
    PromoteOutcome,
    RecoverOutcome,
    RenewOutcome,
    Transaction,
)

from . import _leases


class ModelConsensus:
    """The reference strategy: in-memory leases, undone with their transaction."""

    def __init__(self) -> None:
        self._leases: dict[str, Lease] = {}
        self._lock = threading.RLock()

    # -- helpers -----------------------------------------------------------

    def _get(self, run_id: str) -> Lease | None:
        return self._leases.get(run_id)

    def _put(self, tx: Transaction, run_id: str, new: Lease | None) -> None:
        """Install ``new`` as the run's lease and register the undo with ``tx``."""
        old = self._leases.get(run_id)
        if new == old:
            return
        self._store(run_id, new)

        def undo() -> None:
            with self._lock:
                self._store(run_id, old)

        tx.on_rollback(undo)

    def _store(self, run_id: str, lease: Lease | None) -> None:
        if lease is None:
            self._leases.pop(run_id, None)
        else:
            self._leases[run_id] = lease

    # -- the Consensus protocol ----------------------------------------------

    def claim(self, tx: Transaction, run_id: str, claimant: OwnerId, now_ms: int) -> GrantOutcome:
        """Reserve an unowned, unclaimed run; the grant time is ``now_ms``."""
        with self._lock:
            outcome, lease = _leases.claim(self._get(run_id), run_id, claimant, now_ms)
            self._put(tx, run_id, lease)
            return outcome

    def steal(
        self,
        tx: Transaction,
        run_id: str,
        claimant: OwnerId,
        now_ms: int,
        evidence: LivenessEvidence,
    ) -> GrantOutcome:
        """Claim a run over its stale owner named by matching ``evidence``."""
        with self._lock:
            outcome, lease = _leases.steal(self._get(run_id), run_id, claimant, now_ms, evidence)
            self._put(tx, run_id, lease)
            return outcome

    def activate(
        self, tx: Transaction, run_id: str, owner: OwnerId, granted_at_ms: int, now_ms: int
    ) -> PromoteOutcome:
        """Turn the exact claim into ownership with heartbeat ``now_ms``."""
        with self._lock:
            outcome, lease = _leases.activate(self._get(run_id), owner, granted_at_ms, now_ms)
            self._put(tx, run_id, lease)
            return outcome

    def heartbeat(self, tx: Transaction, run_id: str, owner: OwnerId, now_ms: int) -> RenewOutcome:
        """Renew the owner's lease to ``max(old, now_ms)``."""
        with self._lock:
            outcome, lease = _leases.heartbeat(self._get(run_id), owner, now_ms)
            self._put(tx, run_id, lease)
            return outcome

    def reconfirm(self, tx: Transaction, run_id: str, owner: OwnerId, now_ms: int) -> RenewOutcome:
        """Like ``heartbeat``, but ``Lost`` while any claim is pending."""
        with self._lock:
            outcome, lease = _leases.reconfirm(self._get(run_id), owner, now_ms)
            self._put(tx, run_id, lease)
            return outcome

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
        """Clear a third party's exact claim once it is stale."""
        with self._lock:
            outcome, lease = _leases.recover(
                self._get(run_id), stale_claimant, granted_at_ms, observer, now_ms, evidence
            )
            self._put(tx, run_id, lease)
            return outcome

    def release_claim(
        self, tx: Transaction, run_id: str, claimant: OwnerId, granted_at_ms: int
    ) -> None:
        """Drop exactly that claim; ownership is never touched."""
        with self._lock:
            self._put(tx, run_id, _leases.release_claim(self._get(run_id), claimant, granted_at_ms))

    def release_ownership(self, tx: Transaction, run_id: str, owner: OwnerId) -> None:
        """If ``owner`` holds the run, drop its ownership and any pending claim."""
        with self._lock:
            self._put(tx, run_id, _leases.release_ownership(self._get(run_id), owner))

    def guard(self, tx: Transaction, run_id: str, owner: OwnerId) -> None:
        """Raise ``FenceLostError`` unless ``owner`` holds the run's lease."""
        with self._lock:
            if not _leases.holds(self._get(run_id), owner):
                raise FenceLostError(run_id)

    def lease(self, tx: Transaction, run_id: str) -> Lease | None:
        """The run's lease, or ``None`` when it has none."""
        with self._lock:
            return self._get(run_id)

    # -- introspection outside a transaction -------------------------------

    def leases(self) -> tuple[Lease, ...]:
        """Every lease the strategy holds, sorted by run id."""
        with self._lock:
            return tuple(self._leases[run_id] for run_id in sorted(self._leases))

    def __repr__(self) -> str:
        with self._lock:
            return f"ModelConsensus(leases={len(self._leases)})"
