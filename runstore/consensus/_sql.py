"""``SqlConsensus``: leases kept in the store's own database and transaction.

Each run's lease is one row of ``flows_consensus_leases`` (owner, grant time,
heartbeat, pending claim), read and written through ``tx.connection`` inside
the store's write transaction, so a rolled-back operation leaves no lease
change behind and nothing needs an undo hook. A row with neither owner nor
claim is deleted. Each method is a single guarded statement where SQL can say
it; when the guard misses, one more read names the reason.

The statements are the backend's, handed in as a dialect is handed to a SQL
core: our stores' transactions carry ``tx.lease_queries``, the module of
statements in their SQL (``runstore.sqlite._lease_queries``,
``runstore.postgres._lease_queries``: the same names, and
``DATABASE_ERRORS``, the errors a statement raises when storage fails). A
transaction that carries none (one a store of someone else's hands over, with
just ``connection`` and ``dialect`` as the seam promises) gets the statements
its backend registered for ``tx.dialect`` (``register_lease_statements``,
called by each backend when it is imported; SQLite's when ``tx`` names no
dialect, since ``import runstore`` always loads the SQLite backend). This
module imports no backend. A dialect nobody registered is refused before
anything is read or written: ``ConsensusError("persistence_failed")``.

Storage failures are raised as ``ConsensusError("persistence_failed")`` caused
by the database error, so the store can still tell a transient failure
(``SQLITE_BUSY``, a PostgreSQL serialization failure) and retry it from a
lasting one.

Staleness is judged against the caller's ``now_ms``: a lease is stale when its
heartbeat is strictly older than ``now_ms - HEARTBEAT_STALE_AFTER_MS``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any, TypeVar

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

_LOST = Lost()


#: Each backend's lease statements by dialect name, as the backend registered them.
_REGISTERED: dict[str, ModuleType] = {}


def register_lease_statements(dialect: str, statements: ModuleType) -> None:
    """Make ``statements`` the lease statements of transactions whose
    ``dialect`` is ``dialect`` and that carry none of their own. Called once
    by each backend as it is imported; registering a dialect again replaces
    its statements."""
    _REGISTERED[dialect] = statements


def _statements(tx: Transaction) -> ModuleType:
    """The lease statements ``tx`` carries (``tx.lease_queries``), else those
    registered for its dialect (``"sqlite"`` when it names none); refused when
    there are none."""
    found = getattr(tx, "lease_queries", None)
    if isinstance(found, ModuleType):
        return found
    dialect = getattr(tx, "dialect", "sqlite")
    registered = _REGISTERED.get(dialect) if type(dialect) is str else None
    if registered is None:
        raise ConsensusError(
            "persistence_failed",
            "SqlConsensus has no lease statements for this transaction: it carries none "
            "(tx.lease_queries) and no backend registered its dialect",
        )
    return registered


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

    Works on the transactions of the SQLite and PostgreSQL stores, which
    carry its statements in their SQL (``tx.lease_queries``), and on any
    transaction whose ``connection`` is a SQLite or psycopg connection and
    whose ``dialect`` says which (``"sqlite"`` when absent). Handed a
    transaction of a dialect no backend registered, every method raises
    ``ConsensusError("persistence_failed")`` before it reads or writes
    anything (``steal`` and ``recover`` still answer ``evidence_invalid`` for
    evidence that does not match, which they judge before any SQL).
    """

    def __repr__(self) -> str:
        return "SqlConsensus()"

    def _run(self, tx: Transaction, fn: Callable[[ModuleType], T]) -> T:
        """Run ``fn`` with the statements of ``tx``'s dialect."""
        statements = _statements(tx)
        try:
            return fn(statements)
        except statements.DATABASE_ERRORS as error:
            failure = error
        # Chained so the store can classify (and retry) the database error.
        raise ConsensusError("persistence_failed", "lease storage failed") from failure

    def claim(self, tx: Transaction, run_id: str, claimant: OwnerId, now_ms: int) -> GrantOutcome:
        """Reserve ``run_id`` for ``claimant`` inside the store's write transaction ``tx``, if the
        run has neither an owner nor a pending claim; ``now_ms`` (the caller's reading) becomes
        the claim's token. Returns ``Granted(now_ms)``, ``Rejected("already_claimed")`` while
        another claim is pending, or ``Rejected("owner_held")`` while someone owns the run. Reads
        and writes the run's ``flows_consensus_leases`` row through ``tx.connection``; a storage
        failure raises ``ConsensusError("persistence_failed")``."""

        def run(s: ModuleType) -> GrantOutcome:
            execute = tx.connection.execute
            granted = execute(
                s.CLAIM, (run_id, claimant.host_id, claimant.pid, claimant.nonce, now_ms)
            ).rowcount
            if granted:
                return Granted(now_ms)
            lease = execute(s.LEASE, (run_id,)).fetchone()
            if lease is not None and lease[5] is not None:
                return Rejected("already_claimed")
            return Rejected("owner_held")

        return self._run(tx, run)

    def claim_and_activate(
        self, tx: Transaction, run_id: str, owner: OwnerId, now_ms: int
    ) -> GrantOutcome:
        """``claim`` then ``activate`` of that grant for ``owner`` on ``run_id`` at ``now_ms``, in
        one statement inside ``tx``: the store takes an unowned run with it when its strategy is
        exactly ``SqlConsensus`` (``claim_and_own``, ``claim_next``, ``claim_next_many``).
        ``Granted(now_ms)`` means ``owner`` now owns the lease, granted and heartbeated at
        ``now_ms``; a refusal is ``claim``'s."""
        s = _statements(tx)
        try:
            execute = tx.connection.execute
            params = (run_id, owner.host_id, owner.pid, owner.nonce, now_ms)
            if execute(s.CLAIM_ACTIVATE, params).rowcount:
                return Granted(now_ms)
            lease = execute(s.LEASE, (run_id,)).fetchone()
            if lease is not None and lease[5] is not None:
                return Rejected("already_claimed")
            return Rejected("owner_held")
        except s.DATABASE_ERRORS as error:
            failure = error
        raise ConsensusError("persistence_failed", "lease storage failed") from failure

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
        Reads and writes the run's ``flows_consensus_leases`` row through ``tx.connection``; a
        storage failure raises ``ConsensusError("persistence_failed")``."""
        expected = evidence.expected_owner
        if not evidence_matches(expected, claimant, now_ms, evidence):
            return Rejected("evidence_invalid")

        def run(s: ModuleType) -> GrantOutcome:
            execute = tx.connection.execute
            granted = execute(
                s.STEAL,
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
            row = execute(s.LEASE, (run_id,)).fetchone()
            if row is None:
                return Rejected("evidence_invalid")
            lease = _lease(run_id, row)
            if lease.claim is not None:
                return Rejected("already_claimed")
            if lease.owner != expected:
                return Rejected("evidence_invalid")
            return Rejected("owner_live")

        return self._run(tx, run)

    def activate(
        self, tx: Transaction, run_id: str, owner: OwnerId, granted_at_ms: int, now_ms: int
    ) -> PromoteOutcome:
        """Turn the exact pending claim of ``owner`` made at ``granted_at_ms`` on ``run_id`` into
        ownership, with heartbeat ``now_ms``, inside ``tx``. Returns ``Promoted()``, or
        ``Lost()`` when that claim is not the one pending; the grant is spent, so presenting it
        again is ``Lost()``. Reads and writes the run's ``flows_consensus_leases`` row through
        ``tx.connection``; a storage failure raises ``ConsensusError("persistence_failed")``."""

        def run(s: ModuleType) -> PromoteOutcome:
            promoted = tx.connection.execute(
                s.ACTIVATE,
                (run_id, owner.host_id, owner.pid, owner.nonce, granted_at_ms, now_ms),
            ).rowcount
            return Promoted() if promoted else Lost()

        return self._run(tx, run)

    def _renew(
        self, which: int, tx: Transaction, run_id: str, owner: OwnerId, now_ms: int
    ) -> RenewOutcome:
        # The hottest strategy call: no closure, one statement when it renews.
        s = _statements(tx)
        statement, held = (
            (s.HEARTBEAT, s.HEARTBEAT_HELD) if which else (s.RECONFIRM, s.RECONFIRM_HELD)
        )
        params = (run_id, owner.host_id, owner.pid, owner.nonce, now_ms)
        try:
            execute = tx.connection.execute
            cursor = execute(statement, params)
            if cursor.description is not None:  # it returns the stamp (PostgreSQL)
                row = cursor.fetchone()
                return _LOST if row is None else Renewed(row[0])
            if cursor.rowcount:
                return Renewed(now_ms)
            stamp = execute(held, params[:4]).fetchone()
            return _LOST if stamp is None else Renewed(stamp[0])
        except s.DATABASE_ERRORS as error:
            failure = error
        raise ConsensusError("persistence_failed", "lease storage failed") from failure

    def heartbeat(self, tx: Transaction, run_id: str, owner: OwnerId, now_ms: int) -> RenewOutcome:
        """Renew ``owner``'s lease on ``run_id`` to the later of its stamp and ``now_ms``, inside
        ``tx``; a pending claim does not matter. Returns ``Renewed(stamp)``, or ``Lost()`` when
        ``owner`` does not hold the run. Repeat it freely. Reads and writes the run's
        ``flows_consensus_leases`` row through ``tx.connection``; a storage failure raises
        ``ConsensusError("persistence_failed")``."""
        return self._renew(1, tx, run_id, owner, now_ms)

    def reconfirm(self, tx: Transaction, run_id: str, owner: OwnerId, now_ms: int) -> RenewOutcome:
        """Like ``heartbeat`` for ``owner`` on ``run_id`` at ``now_ms`` inside ``tx``, but
        ``Lost()`` while any claim is pending on the run (someone is taking it over). Returns
        ``Renewed(stamp)`` or ``Lost()``. Reads and writes the run's ``flows_consensus_leases``
        row through ``tx.connection``; a storage failure raises
        ``ConsensusError("persistence_failed")``."""
        return self._renew(0, tx, run_id, owner, now_ms)

    def heartbeat_many(
        self, tx: Transaction, run_ids: Sequence[str], owner: OwnerId, now_ms: int
    ) -> dict[str, RenewOutcome]:
        """``heartbeat`` of each of ``run_ids`` for ``owner`` at ``now_ms``, in one set-based UPDATE
        inside ``tx``: the leases ``owner`` holds among them are renewed (``Renewed``), every
        other run is ``Lost()``. Returns a dict keyed by run id."""

        def run(s: ModuleType) -> dict[str, RenewOutcome]:
            execute = tx.connection.execute
            params = (s.ids_param(run_ids), owner.host_id, owner.pid, owner.nonce, now_ms)
            cursor = execute(s.HEARTBEAT_MANY, params)
            if cursor.description is not None:  # renewed runs and stamps (PostgreSQL)
                stamps = dict(cursor.fetchall())
            elif cursor.rowcount == len(run_ids):
                renewed = Renewed(now_ms)
                return dict.fromkeys(run_ids, renewed)
            else:
                stamps = dict(execute(s.HEARTBEAT_MANY_HELD, params[:4]).fetchall())
            return {
                rid: _LOST if (stamp := stamps.get(rid)) is None else Renewed(stamp)
                for rid in run_ids
            }

        return self._run(tx, run)

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
        it was cleared) or ``"claim_fresh"``. Reads and writes the run's
        ``flows_consensus_leases`` row through ``tx.connection``; a storage failure raises
        ``ConsensusError("persistence_failed")``."""
        if not evidence_matches(stale_claimant, observer, now_ms, evidence):
            return Rejected("evidence_invalid")

        def run(s: ModuleType) -> RecoverOutcome:
            execute = tx.connection.execute
            claim = (
                run_id,
                stale_claimant.host_id,
                stale_claimant.pid,
                stale_claimant.nonce,
                granted_at_ms,
                now_ms - HEARTBEAT_STALE_AFTER_MS,
            )
            if execute(s.RECOVER, claim).rowcount:
                execute(s.PRUNE, (run_id,))
                return Cleared()
            row = execute(s.LEASE, (run_id,)).fetchone()
            if row is None:
                return Rejected("claim_changed")
            lease = _lease(run_id, row)
            if lease.claim != stale_claimant or lease.claimed_at_ms != granted_at_ms:
                return Rejected("claim_changed")
            return Rejected("claim_fresh")

        return self._run(tx, run)

    def release_claim(
        self, tx: Transaction, run_id: str, claimant: OwnerId, granted_at_ms: int
    ) -> None:
        """Drop ``claimant``'s exact claim made at ``granted_at_ms`` on ``run_id``, inside ``tx``;
        ownership is never touched. If that claim is not there, silently do nothing. Reads and
        writes the run's ``flows_consensus_leases`` row through ``tx.connection``; a storage
        failure raises ``ConsensusError("persistence_failed")``."""

        def run(s: ModuleType) -> None:
            execute = tx.connection.execute
            released = execute(
                s.RELEASE_CLAIM,
                (run_id, claimant.host_id, claimant.pid, claimant.nonce, granted_at_ms),
            ).fetchone()
            # (Tested in Python: SQLite 3.40 answers ``x IS NULL`` wrongly
            # inside RETURNING.)
            if released is not None and released[0] is None:
                execute(s.PRUNE, (run_id,))

        self._run(tx, run)

    def release_ownership(self, tx: Transaction, run_id: str, owner: OwnerId) -> None:
        """If ``owner`` holds ``run_id``, drop its ownership and any pending claim (whoever made
        it), inside ``tx``. Otherwise silently do nothing. Reads and writes the run's
        ``flows_consensus_leases`` row through ``tx.connection``; a storage failure raises
        ``ConsensusError("persistence_failed")``."""

        def run(s: ModuleType) -> None:
            tx.connection.execute(
                s.RELEASE_OWNERSHIP, (run_id, owner.host_id, owner.pid, owner.nonce)
            )

        self._run(tx, run)

    def guard(self, tx: Transaction, run_id: str, owner: OwnerId) -> None:
        """Return when ``owner`` holds the lease on ``run_id`` (a pending claim is not a lease);
        otherwise raise ``FenceLostError``. Stores call it inside ``tx`` before every fenced
        write. Reads and writes the run's ``flows_consensus_leases`` row through
        ``tx.connection``; a storage failure raises ``ConsensusError("persistence_failed")``."""

        def run(s: ModuleType) -> bool:
            row = tx.connection.execute(
                s.GUARD, (run_id, owner.host_id, owner.pid, owner.nonce)
            ).fetchone()
            return row is not None

        if not self._run(tx, run):
            raise FenceLostError(run_id)

    def lease(self, tx: Transaction, run_id: str) -> Lease | None:
        """The strategy's view of ``run_id`` as a ``Lease``, or ``None`` when nobody owns or claims
        it; read inside ``tx``, for comparison and invariants. Reads and writes the run's
        ``flows_consensus_leases`` row through ``tx.connection``; a storage failure raises
        ``ConsensusError("persistence_failed")``."""

        def run(s: ModuleType) -> Lease | None:
            row = tx.connection.execute(s.LEASE, (run_id,)).fetchone()
            return None if row is None else _lease(run_id, row)

        return self._run(tx, run)

    def leases(self, tx: Transaction) -> list[Lease]:
        """Every lease, sorted by run id, read in one query through ``tx`` (a store's ``state()``
        uses it when a strategy has it)."""

        def run(s: ModuleType) -> list[Lease]:
            rows = tx.connection.execute(s.ALL_LEASES).fetchall()
            return [_lease(row[0], row[1:]) for row in rows]

        return self._run(tx, run)
