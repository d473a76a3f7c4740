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
        """Reserve ``run_id`` for ``claimant`` inside the store's write transaction ``tx``, if the
        run has neither an owner nor a pending claim; ``now_ms`` (the caller's reading) becomes
        the claim's token. Returns ``Granted(now_ms)``, ``Rejected("already_claimed")`` while
        another claim is pending, or ``Rejected("owner_held")`` while someone owns the run. The
        reference rule; any change registers its undo with ``tx.on_rollback``."""
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
        """Claim ``run_id`` for ``claimant`` over its stale owner, inside ``tx``. ``evidence`` must
        name the lease's owner, be taken at exactly ``now_ms`` and be of a kind ``claimant`` may
        observe (``same-host-pid-dead`` only from the owner's host,
        ``cross-host-unreachable-stale`` only from another, ``lease-expired`` from anywhere), and
        the owner's heartbeat must be more than ``HEARTBEAT_STALE_AFTER_MS`` older than
        ``now_ms``. Returns ``Granted(now_ms)``; else ``Rejected`` with ``"evidence_invalid"``,
        ``"already_claimed"`` (a claim is pending) or ``"owner_live"`` (the heartbeat is fresh).
        The reference rule; any change registers its undo with ``tx.on_rollback``."""
        with self._lock:
            outcome, lease = _leases.steal(self._get(run_id), run_id, claimant, now_ms, evidence)
            self._put(tx, run_id, lease)
            return outcome

    def activate(
        self, tx: Transaction, run_id: str, owner: OwnerId, granted_at_ms: int, now_ms: int
    ) -> PromoteOutcome:
        """Turn the exact pending claim of ``owner`` made at ``granted_at_ms`` on ``run_id`` into
        ownership, with heartbeat ``now_ms``, inside ``tx``. Returns ``Promoted()``, or
        ``Lost()`` when that claim is not the one pending; the grant is spent, so presenting it
        again is ``Lost()``. The reference rule; any change registers its undo with
        ``tx.on_rollback``."""
        with self._lock:
            outcome, lease = _leases.activate(self._get(run_id), owner, granted_at_ms, now_ms)
            self._put(tx, run_id, lease)
            return outcome

    def heartbeat(self, tx: Transaction, run_id: str, owner: OwnerId, now_ms: int) -> RenewOutcome:
        """Renew ``owner``'s lease on ``run_id`` to the later of its stamp and ``now_ms``, inside
        ``tx``; a pending claim does not matter. Returns ``Renewed(stamp)``, or ``Lost()`` when
        ``owner`` does not hold the run. Repeat it freely. The reference rule; any change
        registers its undo with ``tx.on_rollback``."""
        with self._lock:
            outcome, lease = _leases.heartbeat(self._get(run_id), owner, now_ms)
            self._put(tx, run_id, lease)
            return outcome

    def reconfirm(self, tx: Transaction, run_id: str, owner: OwnerId, now_ms: int) -> RenewOutcome:
        """Like ``heartbeat`` for ``owner`` on ``run_id`` at ``now_ms`` inside ``tx``, but
        ``Lost()`` while any claim is pending on the run (someone is taking it over). Returns
        ``Renewed(stamp)`` or ``Lost()``. The reference rule; any change registers its undo with
        ``tx.on_rollback``."""
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
        """Clear ``stale_claimant``'s exact claim made at ``granted_at_ms`` on ``run_id``, inside
        ``tx``, once it is more than ``HEARTBEAT_STALE_AFTER_MS`` older than ``now_ms``;
        ownership is untouched. ``evidence`` must name ``stale_claimant``, be taken at ``now_ms``
        and be of a kind ``observer`` may observe. Returns ``Cleared()``, else ``Rejected`` with
        ``"evidence_invalid"``, ``"claim_changed"`` (that claim is not the pending one, also once
        it was cleared) or ``"claim_fresh"``. The reference rule; any change registers its undo
        with ``tx.on_rollback``."""
        with self._lock:
            outcome, lease = _leases.recover(
                self._get(run_id), stale_claimant, granted_at_ms, observer, now_ms, evidence
            )
            self._put(tx, run_id, lease)
            return outcome

    def release_claim(
        self, tx: Transaction, run_id: str, claimant: OwnerId, granted_at_ms: int
    ) -> None:
        """Drop ``claimant``'s exact claim made at ``granted_at_ms`` on ``run_id``, inside ``tx``;
        ownership is never touched. If that claim is not there, silently do nothing. The
        reference rule; any change registers its undo with ``tx.on_rollback``."""
        with self._lock:
            self._put(tx, run_id, _leases.release_claim(self._get(run_id), claimant, granted_at_ms))

    def release_ownership(self, tx: Transaction, run_id: str, owner: OwnerId) -> None:
        """If ``owner`` holds ``run_id``, drop its ownership and any pending claim (whoever made
        it), inside ``tx``. Otherwise silently do nothing. The reference rule; any change
        registers its undo with ``tx.on_rollback``."""
        with self._lock:
            self._put(tx, run_id, _leases.release_ownership(self._get(run_id), owner))

    def guard(self, tx: Transaction, run_id: str, owner: OwnerId) -> None:
        """Return when ``owner`` holds the lease on ``run_id`` (a pending claim is not a lease);
        otherwise raise ``FenceLostError``. Stores call it inside ``tx`` before every fenced
        write."""
        with self._lock:
            if not _leases.holds(self._get(run_id), owner):
                raise FenceLostError(run_id)

    def lease(self, tx: Transaction, run_id: str) -> Lease | None:
        """The strategy's view of ``run_id`` as a ``Lease``, or ``None`` when nobody owns or claims
        it; read inside ``tx``, for comparison and invariants."""
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
