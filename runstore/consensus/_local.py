"""``LocalConsensus``: leases kept in this process's memory.

The strategy holds one ``Lease`` per run in a dictionary. Each change it makes
inside a store transaction registers its undo with ``tx.on_rollback``, so a
rolled-back operation leaves the leases exactly as they were (the original
in-memory strategy did not do this; we do). When a store opens a database it
calls ``on_open``, which rebuilds every lease from the run rows (read with
``run_ownership``), the same rule the lease backfill migration applies for
``SqlConsensus``.

It is for one process only. Two processes sharing one database file would each
hold their own view, and both could grant the same run. Use it for tests, for
embedded single-process use, and as a template for strategies that keep their
state outside the store's database.
"""

from __future__ import annotations

import threading

from .._constants import HEARTBEAT_STALE_AFTER_MS
from .._values import Lease, LivenessEvidence, OwnerId
from ._rows import run_ownership
from ._types import (
    Cleared,
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


def _evidence_matches(
    expected_owner: OwnerId, observer: OwnerId, now_ms: int, evidence: LivenessEvidence
) -> bool:
    """Whether ``evidence`` speaks about ``expected_owner``, was taken at
    ``now_ms`` exactly, and fits the host relation between owner and observer."""
    if evidence.expected_owner != expected_owner or evidence.checked_at_ms != now_ms:
        return False
    same_host = expected_owner.host_id == observer.host_id
    if evidence.kind == "same-host-pid-dead":
        return same_host
    if evidence.kind == "cross-host-unreachable-stale":
        return not same_host
    # "lease-expired" is host-neutral: the staleness cutoff decides.
    return evidence.kind == "lease-expired"


class LocalConsensus:
    """In-memory leases for a single process, rolled back with the store's
    transaction and rebuilt from the rows when a store opens.

    Never share one database between processes that each use a
    ``LocalConsensus``: each would hold its own view and both could grant.
    """

    def __init__(self) -> None:
        self._leases: dict[str, Lease] = {}
        # A store may call in from a worker thread and its heartbeat thread.
        self._lock = threading.Lock()

    # -- bookkeeping ---------------------------------------------------------

    def _put(self, tx: Transaction, run_id: str, lease: Lease | None) -> None:
        """Replace the run's lease (``None`` prunes it) and register the undo.

        Called with the lock held.
        """
        previous = self._leases.get(run_id)
        if previous == lease:
            return
        if lease is None or (lease.owner is None and lease.claim is None):
            self._leases.pop(run_id, None)
        else:
            self._leases[run_id] = lease

        def undo() -> None:
            with self._lock:
                if previous is None:
                    self._leases.pop(run_id, None)
                else:
                    self._leases[run_id] = previous

        tx.on_rollback(undo)

    def on_open(self, tx: Transaction) -> None:
        """Forget every lease and rebuild them from the run rows, read through ``tx`` with
        ``run_ownership(tx)``: one lease per running run or run with a pending claim. A running
        row's owner gets its heartbeat as both grant and heartbeat time (``RunOwnership.lease``,
        the lease-backfill rule). Calling it again rebuilds again; a rollback of ``tx`` restores
        the leases held before."""
        rebuilt: dict[str, Lease] = {}
        for row in run_ownership(tx):
            lease = row.lease
            if lease.owner is not None or lease.claim is not None:
                rebuilt[row.run_id] = lease
        with self._lock:
            previous = self._leases
            self._leases = rebuilt

            def undo() -> None:
                with self._lock:
                    self._leases = previous

            tx.on_rollback(undo)

    # -- the strategy --------------------------------------------------------

    def claim(self, tx: Transaction, run_id: str, claimant: OwnerId, now_ms: int) -> GrantOutcome:
        """Reserve ``run_id`` for ``claimant`` inside the store's write transaction ``tx``, if the
        run has neither an owner nor a pending claim; ``now_ms`` (the caller's reading) becomes
        the claim's token. Returns ``Granted(now_ms)``, ``Rejected("already_claimed")`` while
        another claim is pending, or ``Rejected("owner_held")`` while someone owns the run.
        Registers the undo of any change with ``tx.on_rollback``."""
        with self._lock:
            lease = self._leases.get(run_id)
            if lease is not None and lease.claim is not None:
                return Rejected("already_claimed")
            if lease is not None and lease.owner is not None:
                return Rejected("owner_held")
            self._put(tx, run_id, Lease(run_id, None, None, None, claimant, now_ms))
            return Granted(now_ms)

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
        Registers the undo of any change with ``tx.on_rollback``."""
        with self._lock:
            if not _evidence_matches(evidence.expected_owner, claimant, now_ms, evidence):
                return Rejected("evidence_invalid")
            lease = self._leases.get(run_id)
            if lease is not None and lease.claim is not None:
                return Rejected("already_claimed")
            if lease is None or lease.owner is None or lease.owner != evidence.expected_owner:
                return Rejected("evidence_invalid")
            # An owner without a heartbeat (rebuilt from a non-running row)
            # counts as live: there is nothing to prove it stale.
            if lease.heartbeat_at_ms is None or (
                lease.heartbeat_at_ms >= now_ms - HEARTBEAT_STALE_AFTER_MS
            ):
                return Rejected("owner_live")
            self._put(
                tx,
                run_id,
                Lease(
                    run_id,
                    lease.owner,
                    lease.granted_at_ms,
                    lease.heartbeat_at_ms,
                    claimant,
                    now_ms,
                ),
            )
            return Granted(now_ms)

    def activate(
        self, tx: Transaction, run_id: str, owner: OwnerId, granted_at_ms: int, now_ms: int
    ) -> PromoteOutcome:
        """Turn the exact pending claim of ``owner`` made at ``granted_at_ms`` on ``run_id`` into
        ownership, with heartbeat ``now_ms``, inside ``tx``. Returns ``Promoted()``, or
        ``Lost()`` when that claim is not the one pending; the grant is spent, so presenting it
        again is ``Lost()``. Registers the undo of any change with ``tx.on_rollback``."""
        with self._lock:
            lease = self._leases.get(run_id)
            if lease is None or lease.claim != owner or lease.claimed_at_ms != granted_at_ms:
                return Lost()
            self._put(tx, run_id, Lease(run_id, owner, granted_at_ms, now_ms, None, None))
            return Promoted()

    def _renew(
        self, tx: Transaction, run_id: str, owner: OwnerId, now_ms: int, *, claim_ok: bool
    ) -> RenewOutcome:
        with self._lock:
            lease = self._leases.get(run_id)
            if lease is None or lease.owner != owner:
                return Lost()
            if not claim_ok and lease.claim is not None:
                return Lost()
            old = lease.heartbeat_at_ms
            renewed = now_ms if old is None else max(old, now_ms)
            self._put(
                tx,
                run_id,
                Lease(
                    run_id,
                    lease.owner,
                    lease.granted_at_ms,
                    renewed,
                    lease.claim,
                    lease.claimed_at_ms,
                ),
            )
            return Renewed(renewed)

    def heartbeat(self, tx: Transaction, run_id: str, owner: OwnerId, now_ms: int) -> RenewOutcome:
        """Renew ``owner``'s lease on ``run_id`` to the later of its stamp and ``now_ms``, inside
        ``tx``; a pending claim does not matter. Returns ``Renewed(stamp)``, or ``Lost()`` when
        ``owner`` does not hold the run. Repeat it freely. Registers the undo of any change with
        ``tx.on_rollback``."""
        return self._renew(tx, run_id, owner, now_ms, claim_ok=True)

    def reconfirm(self, tx: Transaction, run_id: str, owner: OwnerId, now_ms: int) -> RenewOutcome:
        """Like ``heartbeat`` for ``owner`` on ``run_id`` at ``now_ms`` inside ``tx``, but
        ``Lost()`` while any claim is pending on the run (someone is taking it over). Returns
        ``Renewed(stamp)`` or ``Lost()``. Registers the undo of any change with
        ``tx.on_rollback``."""
        return self._renew(tx, run_id, owner, now_ms, claim_ok=False)

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
        it was cleared) or ``"claim_fresh"``. Registers the undo of any change with
        ``tx.on_rollback``."""
        with self._lock:
            if not _evidence_matches(stale_claimant, observer, now_ms, evidence):
                return Rejected("evidence_invalid")
            lease = self._leases.get(run_id)
            if (
                lease is None
                or lease.claim != stale_claimant
                or lease.claimed_at_ms != granted_at_ms
            ):
                return Rejected("claim_changed")
            if granted_at_ms >= now_ms - HEARTBEAT_STALE_AFTER_MS:
                return Rejected("claim_fresh")
            self._put(
                tx,
                run_id,
                Lease(run_id, lease.owner, lease.granted_at_ms, lease.heartbeat_at_ms, None, None),
            )
            return Cleared()

    def release_claim(
        self, tx: Transaction, run_id: str, claimant: OwnerId, granted_at_ms: int
    ) -> None:
        """Drop ``claimant``'s exact claim made at ``granted_at_ms`` on ``run_id``, inside ``tx``;
        ownership is never touched. If that claim is not there, silently do nothing. Registers
        the undo of any change with ``tx.on_rollback``."""
        with self._lock:
            lease = self._leases.get(run_id)
            if lease is None or lease.claim != claimant or lease.claimed_at_ms != granted_at_ms:
                return
            self._put(
                tx,
                run_id,
                Lease(run_id, lease.owner, lease.granted_at_ms, lease.heartbeat_at_ms, None, None),
            )

    def release_ownership(self, tx: Transaction, run_id: str, owner: OwnerId) -> None:
        """If ``owner`` holds ``run_id``, drop its ownership and any pending claim (whoever made
        it), inside ``tx``. Otherwise silently do nothing. Registers the undo of any change with
        ``tx.on_rollback``."""
        with self._lock:
            lease = self._leases.get(run_id)
            if lease is None or lease.owner != owner:
                return
            self._put(tx, run_id, None)

    def guard(self, tx: Transaction, run_id: str, owner: OwnerId) -> None:
        """Return when ``owner`` holds the lease on ``run_id`` (a pending claim is not a lease);
        otherwise raise ``FenceLostError``. Stores call it inside ``tx`` before every fenced
        write."""
        with self._lock:
            lease = self._leases.get(run_id)
            if lease is None or lease.owner != owner:
                raise FenceLostError(run_id)

    def lease(self, tx: Transaction, run_id: str) -> Lease | None:
        """The strategy's view of ``run_id`` as a ``Lease``, or ``None`` when nobody owns or claims
        it; read inside ``tx``, for comparison and invariants."""
        with self._lock:
            return self._leases.get(run_id)

    def leases(self, tx: Transaction) -> list[Lease]:
        """Every lease this process holds, sorted by run id (a store's ``state()`` uses it; ``tx``
        is not read)."""
        with self._lock:
            return [self._leases[run_id] for run_id in sorted(self._leases)]
