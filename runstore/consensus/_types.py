"""The ``Consensus`` strategy interface and its values.

A strategy arbitrates who holds a run: the pending claim, the owner, the
heartbeat lease and the fence. The store calls it inside its own write
transaction, and mirrors the answer on the run row in that same transaction,
so the row and the lease always agree after a commit.

Required methods (each called with the store's open ``Transaction`` first):

- ``claim``: reserve an unowned, unclaimed run; the grant time is ``now_ms``.
- ``steal``: an evidence-gated claim over a stale owner.
- ``activate``: turn the exact claim (same claimant, same grant time) into
  ownership with heartbeat ``now_ms``; the grant is spent.
- ``heartbeat``: renew the owner's lease to ``max(old, now_ms)``.
- ``reconfirm``: the same, but ``Lost`` while any claim is pending.
- ``recover``: clear a third party's exact stale claim.
- ``release_claim``: drop exactly that claim; never touches ownership. If the
  claim is not there, silently do nothing.
- ``release_ownership``: if ``owner`` holds the run, drop its ownership and
  any pending claim. Otherwise silently do nothing.
- ``guard``: raise ``FenceLostError`` unless ``owner`` holds the lease.
- ``lease``: the strategy's current view of one run, for comparison and
  invariants.

Optional: ``on_open(tx)``. A store calls it once, inside a write transaction,
when it opens a database, so a strategy that keeps its leases elsewhere
(``LocalConsensus``) can rebuild them from the run rows, as the lease backfill
migration does for ``SqlConsensus``.

Optional: ``heartbeat_many(tx, run_ids, owner, now_ms) -> dict[str,
RenewOutcome]``, the batch ``heartbeat``. ``run_ids`` are
distinct and sorted; the answer maps each to what ``heartbeat`` alone would
answer (a missing key counts as ``Lost()``). A store's ``heartbeat_many``
calls it once when the strategy has it, and otherwise calls ``heartbeat``
once per run id, in run id order, in the same transaction. ``SqlConsensus``
implements it with one set-based statement.

A strategy that keeps its state in the store's database uses
``tx.connection``, in the SQL of ``tx.dialect`` (``"sqlite"`` or
``"postgresql"``); one that keeps it elsewhere registers the undo of each
change with ``tx.on_rollback`` so a rolled-back operation leaves no trace.
Staleness is always judged against the caller's ``now_ms``, never a clock the
strategy reads.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, Protocol, TypeAlias, runtime_checkable

import attrs

from .._values import Lease as Lease
from .._values import LivenessEvidence, OwnerId

RejectionReason: TypeAlias = Literal[
    "already_claimed",
    "owner_held",
    "owner_live",
    "evidence_invalid",
    "claim_fresh",
    "claim_changed",
    "unavailable",
]
"""Why a strategy refused: ``already_claimed`` (a claim is pending), ``owner_held`` (someone owns
the run), ``owner_live`` (the owner's heartbeat is fresh), ``evidence_invalid`` (the evidence
does not match), ``claim_fresh`` (the claim to recover is not stale yet), ``claim_changed`` (that
claim is not the pending one) or ``unavailable`` (the strategy grants nothing)."""


@attrs.frozen
class Granted:
    """A claim or steal was granted at ``granted_at_ms`` (the fence token)."""

    granted_at_ms: int
    """The grant's time, the caller's ``now_ms``: the claim token the store writes on the row."""


@attrs.frozen
class Rejected:
    """The strategy refused; ``reason`` says why."""

    reason: RejectionReason
    """Why, a ``RejectionReason``."""


@attrs.frozen
class Promoted:
    """The exact claim became ownership."""


@attrs.frozen
class Renewed:
    """The owner's lease now stands at ``heartbeat_at_ms``."""

    heartbeat_at_ms: int
    """The lease's heartbeat after the renewal (never earlier than before)."""


@attrs.frozen
class Lost:
    """The caller does not hold what it presented."""


@attrs.frozen
class Cleared:
    """The stale claim was cleared."""


GrantOutcome: TypeAlias = Granted | Rejected
"""What ``claim`` and ``steal`` answer: ``Granted`` or ``Rejected``."""
PromoteOutcome: TypeAlias = Promoted | Lost
"""What ``activate`` answers: ``Promoted`` or ``Lost``."""
RenewOutcome: TypeAlias = Renewed | Lost
"""What ``heartbeat`` and ``reconfirm`` answer: ``Renewed`` or ``Lost``."""
RecoverOutcome: TypeAlias = Cleared | Rejected
"""What ``recover`` answers: ``Cleared`` or ``Rejected``."""

ConsensusErrorCode: TypeAlias = Literal["fence_lost", "persistence_failed"]
"""A ``ConsensusError``'s code: ``fence_lost`` (from ``guard``) or ``persistence_failed`` (the
strategy cannot answer)."""


class ConsensusError(Exception):
    """Raised by a strategy when it cannot answer (``persistence_failed``) or, from ``guard``, when
    the fence is gone (``fence_lost``).

    Built as ``ConsensusError(code, text)``: ``code`` a ``ConsensusErrorCode``, ``text`` an
    optional explanation for the message (never run state). A store turns it into
    ``RunStoreError`` ``persistence_failed`` (or its fence loss into the operation's
    ``FenceLost`` outcome).
    """

    def __init__(self, code: ConsensusErrorCode, text: str = "") -> None:
        self.code: ConsensusErrorCode = code
        """``fence_lost`` or ``persistence_failed``: branch on this."""
        super().__init__(f"{code}: {text}" if text else code)


class FenceLostError(ConsensusError):
    """Raised by ``Consensus.guard`` when the owner no longer holds the run; its code is
    ``fence_lost``. Built as ``FenceLostError(run_id)``, where ``run_id`` (optional) is the run
    whose fence was lost."""

    def __init__(self, run_id: str | None = None) -> None:
        super().__init__("fence_lost", "the run is no longer held by this owner")
        self.run_id = run_id
        """The run whose fence was lost, when the strategy said which."""
        """The run whose fence was lost, when the strategy said which."""


@runtime_checkable
class Transaction(Protocol):
    """The store's open write transaction, as a strategy sees it.

    A SQL store's transaction also has ``dialect``: ``"sqlite"`` (``connection``
    is a ``sqlite3.Connection``, parameters ``?1``) or ``"postgresql"``
    (``connection`` is a ``psycopg.Connection`` whose ``execute`` takes
    ``$1``-style parameters). A transaction without ``dialect`` is SQLite's.
    Our SQL stores' transactions also carry ``lease_queries``, the statements
    ``SqlConsensus`` runs in their dialect; that is between ``SqlConsensus``
    and those stores, not part of this protocol.
    """

    @property
    def connection(self) -> Any:
        """The store's connection, inside the transaction (see ``dialect``).
        Stores without a database (the model) raise ``RuntimeError``."""
        ...

    def on_commit(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` (no arguments) after the transaction commits; not at all if it rolls back."""
        ...

    def on_rollback(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` (no arguments) if the transaction rolls back, in reverse registration order:
        register the undo of each change a strategy keeps outside the database."""
        ...


@runtime_checkable
class Consensus(Protocol):
    """A strategy that decides who holds each run.

    Required: the ten methods below, each called with the store's open write transaction ``tx``
    first and a run id. Optional: ``on_open(tx)``, called once inside a write transaction when a
    store opens a database, to rebuild leases kept elsewhere from the run rows
    (``run_ownership``); and ``heartbeat_many(tx, run_ids, owner, now_ms)``, the batch
    ``heartbeat`` (``run_ids`` distinct and sorted; a missing key counts as ``Lost()``).
    Staleness is judged against the caller's ``now_ms``, never a clock the strategy reads. A
    strategy that cannot answer raises ``ConsensusError("persistence_failed")``; the store then
    fails the operation with ``persistence_failed`` and rolls it back.
    """

    def claim(self, tx: Transaction, run_id: str, claimant: OwnerId, now_ms: int) -> GrantOutcome:
        """Reserve ``run_id`` for ``claimant`` inside the store's write transaction ``tx``, if the
        run has neither an owner nor a pending claim; ``now_ms`` (the caller's reading) becomes
        the claim's token. Returns ``Granted(now_ms)``, ``Rejected("already_claimed")`` while
        another claim is pending, or ``Rejected("owner_held")`` while someone owns the run."""
        ...

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
        ``"already_claimed"`` (a claim is pending) or ``"owner_live"`` (the heartbeat is fresh)."""
        ...

    def activate(
        self, tx: Transaction, run_id: str, owner: OwnerId, granted_at_ms: int, now_ms: int
    ) -> PromoteOutcome:
        """Turn the exact pending claim of ``owner`` made at ``granted_at_ms`` on ``run_id`` into
        ownership, with heartbeat ``now_ms``, inside ``tx``. Returns ``Promoted()``, or
        ``Lost()`` when that claim is not the one pending; the grant is spent, so presenting it
        again is ``Lost()``."""
        ...

    def heartbeat(self, tx: Transaction, run_id: str, owner: OwnerId, now_ms: int) -> RenewOutcome:
        """Renew ``owner``'s lease on ``run_id`` to the later of its stamp and ``now_ms``, inside
        ``tx``; a pending claim does not matter. Returns ``Renewed(stamp)``, or ``Lost()`` when
        ``owner`` does not hold the run. Repeat it freely."""
        ...

    def reconfirm(self, tx: Transaction, run_id: str, owner: OwnerId, now_ms: int) -> RenewOutcome:
        """Like ``heartbeat`` for ``owner`` on ``run_id`` at ``now_ms`` inside ``tx``, but
        ``Lost()`` while any claim is pending on the run (someone is taking it over). Returns
        ``Renewed(stamp)`` or ``Lost()``."""
        ...

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
        it was cleared) or ``"claim_fresh"``."""
        ...

    def release_claim(
        self, tx: Transaction, run_id: str, claimant: OwnerId, granted_at_ms: int
    ) -> None:
        """Drop ``claimant``'s exact claim made at ``granted_at_ms`` on ``run_id``, inside ``tx``;
        ownership is never touched. If that claim is not there, silently do nothing."""
        ...

    def release_ownership(self, tx: Transaction, run_id: str, owner: OwnerId) -> None:
        """If ``owner`` holds ``run_id``, drop its ownership and any pending claim (whoever made
        it), inside ``tx``. Otherwise silently do nothing."""
        ...

    def guard(self, tx: Transaction, run_id: str, owner: OwnerId) -> None:
        """Return when ``owner`` holds the lease on ``run_id`` (a pending claim is not a lease);
        otherwise raise ``FenceLostError``. Stores call it inside ``tx`` before every fenced
        write."""
        ...

    def lease(self, tx: Transaction, run_id: str) -> Lease | None:
        """The strategy's view of ``run_id`` as a ``Lease``, or ``None`` when nobody owns or claims
        it; read inside ``tx``, for comparison and invariants."""
        ...
