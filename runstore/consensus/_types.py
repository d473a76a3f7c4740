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


@attrs.frozen
class Granted:
    """A claim or steal was granted at ``granted_at_ms`` (the fence token)."""

    granted_at_ms: int


@attrs.frozen
class Rejected:
    """The strategy refused; ``reason`` says why."""

    reason: RejectionReason


@attrs.frozen
class Promoted:
    """The exact claim became ownership."""


@attrs.frozen
class Renewed:
    """The owner's lease now stands at ``heartbeat_at_ms``."""

    heartbeat_at_ms: int


@attrs.frozen
class Lost:
    """The caller does not hold what it presented."""


@attrs.frozen
class Cleared:
    """The stale claim was cleared."""


GrantOutcome: TypeAlias = Granted | Rejected
PromoteOutcome: TypeAlias = Promoted | Lost
RenewOutcome: TypeAlias = Renewed | Lost
RecoverOutcome: TypeAlias = Cleared | Rejected

ConsensusErrorCode: TypeAlias = Literal["fence_lost", "persistence_failed"]


class ConsensusError(Exception):
    """Raised by a strategy when it cannot answer (``persistence_failed``) or,
    from ``guard``, when the fence is gone (``fence_lost``)."""

    def __init__(self, code: ConsensusErrorCode, text: str = "") -> None:
        self.code: ConsensusErrorCode = code
        super().__init__(f"{code}: {text}" if text else code)


class FenceLostError(ConsensusError):
    """Raised by ``Consensus.guard`` when the owner no longer holds the run."""

    def __init__(self, run_id: str | None = None) -> None:
        super().__init__("fence_lost", "the run is no longer held by this owner")
        self.run_id = run_id


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
        """Run ``fn`` after the transaction commits."""
        ...

    def on_rollback(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` if the transaction rolls back (in reverse registration order)."""
        ...


@runtime_checkable
class Consensus(Protocol):
    """A strategy that decides who holds each run."""

    def claim(
        self, tx: Transaction, run_id: str, claimant: OwnerId, now_ms: int
    ) -> GrantOutcome: ...

    def steal(
        self,
        tx: Transaction,
        run_id: str,
        claimant: OwnerId,
        now_ms: int,
        evidence: LivenessEvidence,
    ) -> GrantOutcome: ...

    def activate(
        self, tx: Transaction, run_id: str, owner: OwnerId, granted_at_ms: int, now_ms: int
    ) -> PromoteOutcome: ...

    def heartbeat(
        self, tx: Transaction, run_id: str, owner: OwnerId, now_ms: int
    ) -> RenewOutcome: ...

    def reconfirm(
        self, tx: Transaction, run_id: str, owner: OwnerId, now_ms: int
    ) -> RenewOutcome: ...

    def recover(
        self,
        tx: Transaction,
        run_id: str,
        stale_claimant: OwnerId,
        granted_at_ms: int,
        observer: OwnerId,
        now_ms: int,
        evidence: LivenessEvidence,
    ) -> RecoverOutcome: ...

    def release_claim(
        self, tx: Transaction, run_id: str, claimant: OwnerId, granted_at_ms: int
    ) -> None: ...

    def release_ownership(self, tx: Transaction, run_id: str, owner: OwnerId) -> None: ...

    def guard(self, tx: Transaction, run_id: str, owner: OwnerId) -> None: ...

    def lease(self, tx: Transaction, run_id: str) -> Lease | None: ...
