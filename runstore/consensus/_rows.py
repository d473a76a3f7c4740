"""``run_ownership(tx)``: the ownership every run row records, for ``on_open``.

A strategy that keeps its leases outside the store's database loses them when
its process ends, while the run rows keep saying who owns and who claims each
run. When a store opens it calls the strategy's ``on_open(tx)``; this helper
gives that hook the rows' side of the story, so the strategy can rebuild the
leases the rows imply without knowing the store's schema or SQL dialect.

The rows it yields are those the lease-backfill migration copies for
``SqlConsensus``: runs that are ``running`` (they have an owner) and runs with a
pending claim. ``RunOwnership.lease`` applies the backfill's rule.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final, get_args

import attrs

from .._values import Lease, OwnerId, RunStatus
from ._types import ConsensusError, Transaction

# The same columns on every dialect the store supports; unqualified, so a
# PostgreSQL store's search_path picks the schema.
_OWNED_OR_CLAIMED: Final = """
SELECT run_id, status,
       owner_host_id, owner_pid, owner_nonce, heartbeat_at_ms,
       claim_host_id, claim_pid, claim_nonce, claimed_at_ms
  FROM flows_runs
 WHERE status = 'running' OR claim_host_id IS NOT NULL
 ORDER BY run_id
"""

#: The query per ``tx.dialect``. A transaction without ``dialect`` is SQLite's.
QUERIES: Final[dict[str, str]] = {"sqlite": _OWNED_OR_CLAIMED, "postgresql": _OWNED_OR_CLAIMED}

_STATUSES: Final = frozenset(get_args(RunStatus))


@attrs.frozen
class RunOwnership:
    """What one run row records about who holds the run.

    ``owner`` and ``heartbeat_at_ms`` are set exactly when ``status`` is
    ``"running"``; ``claim`` and ``claimed_at_ms`` when a claim is pending (a
    stealer's claim may be pending on a running run).
    """

    run_id: str
    """The run's id."""
    status: RunStatus
    """The run's status: ``running``, or (with a pending claim) ``pending`` or ``suspended``."""
    owner: OwnerId | None
    """The owner of record; set exactly when ``status`` is ``running``."""
    heartbeat_at_ms: int | None
    """The owner's last heartbeat; set exactly when ``status`` is ``running``."""
    claim: OwnerId | None
    """The claimant of a pending claim, or ``None``."""
    claimed_at_ms: int | None
    """The pending claim's token, or ``None``."""

    @property
    def lease(self) -> Lease:
        """The lease these rows imply, by the lease-backfill rule: a running
        run's owner is granted at its heartbeat (the row keeps no grant time, so
        the heartbeat is read back as both); the claim is copied as it is."""
        running = self.status == "running"
        return Lease(
            run_id=self.run_id,
            owner=self.owner if running else None,
            granted_at_ms=self.heartbeat_at_ms if running else None,
            heartbeat_at_ms=self.heartbeat_at_ms if running else None,
            claim=self.claim,
            claimed_at_ms=self.claimed_at_ms,
        )


def _broken(columns: str) -> ConsensusError:
    # Name the columns, never the values: a corrupted row may hold anything.
    return ConsensusError("persistence_failed", f"a run row holds invalid {columns}")


def _identity(host: object, pid: object, nonce: object, columns: str) -> OwnerId | None:
    if host is None and pid is None and nonce is None:
        return None
    if type(host) is not str or type(pid) is not int or type(nonce) is not str:
        raise _broken(columns)
    return OwnerId(host, pid, nonce)


def _stamp(value: object, column: str) -> int | None:
    if value is not None and type(value) is not int:
        raise _broken(column)
    return value


def _decode(row: tuple[Any, ...]) -> RunOwnership:
    run_id, status, o_host, o_pid, o_nonce, heartbeat, c_host, c_pid, c_nonce, claimed_at = row
    if type(run_id) is not str or status not in _STATUSES:
        raise _broken("run_id or status")
    owned = RunOwnership(
        run_id=run_id,
        status=status,
        owner=_identity(o_host, o_pid, o_nonce, "owner columns"),
        heartbeat_at_ms=_stamp(heartbeat, "heartbeat_at_ms"),
        claim=_identity(c_host, c_pid, c_nonce, "claim columns"),
        claimed_at_ms=_stamp(claimed_at, "claimed_at_ms"),
    )
    if (owned.claim is None) != (owned.claimed_at_ms is None):
        raise _broken("claim columns")
    return owned


def run_ownership(tx: Transaction) -> Iterator[RunOwnership]:
    """Every run row that is owned (``running``) or claimed, in run id order.

    Reads ``tx.connection`` inside the caller's transaction ``tx`` (the one a
    strategy's ``on_open`` is given), with the query of ``tx.dialect``
    (``"sqlite"`` when the transaction has no ``dialect``).
    The query runs before this returns, so the answer is the rows as the
    transaction sees them now. Database errors propagate unchanged, so the
    store classifies (and retries) them as it does its own; a row that breaks
    the schema's rules raises ``ConsensusError("persistence_failed")`` naming
    the columns, never their values. A transaction without a database (the
    model's) raises ``RuntimeError`` from ``tx.connection``.
    """
    dialect = getattr(tx, "dialect", "sqlite")
    query = QUERIES.get(dialect) if type(dialect) is str else None
    if query is None:
        raise ConsensusError("persistence_failed", "run_ownership knows no such SQL dialect")
    rows = tx.connection.execute(query).fetchall()
    return iter([_decode(tuple(row)) for row in rows])
