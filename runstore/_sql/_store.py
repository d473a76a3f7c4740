"""``SqlRunStore``: every ``RunStore`` operation, decided once for both backends.

Each operation admits its arguments through ``runstore._boundary`` (shared
with the model, so both refuse the same inputs in the same order), then runs as
one write transaction of the backend's transaction manager. A write on an
existing run first runs ``LOCK_RUN`` (nothing on SQLite, whose ``BEGIN
IMMEDIATE`` serializes the file; the run row ``FOR UPDATE`` on PostgreSQL)
unless its first statement is the guarded UPDATE itself; then a
``*_CLASSIFY`` query evaluates the operation's compare-and-swap predicate in SQL over the row's
metadata, the strategy is asked (it is authoritative: where it refuses what the
row admitted, the row-classified loss is the answer), and a ``*_WRITE`` query
repeats the predicate in its ``WHERE`` clause and reports by its change count
whether it wrote. Ownership facts are
appended in the same transaction. Lost races are outcome values; nothing here
reads run state on a write path.

Reads (``get``, ``lineage``, ``latest_round``, ``ownership_facts``,
``revision``, ``changes``) are plain SELECTs, re-validating every row.

The SQL is the backend's: ``_queries`` is its queries module
(``runstore.sqlite._queries`` or ``runstore.postgres._queries``, the same
names), ``_tm`` its transaction manager (``write``, ``read``, ``snapshot``,
``lock``, ``faults``, ``retry``, ``interrupt``, ``close``). A subclass sets
``_queries`` and builds ``_tm``; everything else is here.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Collection, Sequence
from types import ModuleType, TracebackType
from typing import Any, ClassVar, Final, Protocol, Self, TypeVar

from .. import _boundary as admit
from .. import _telemetry
from .._clock import Clock
from .._constants import HEARTBEAT_STALE_AFTER_MS
from .._errors import DecodeFailedError, PersistenceFailedError, RunNotFoundError, RunStoreError
from .._outcomes import (
    AbandonClaimOutcome,
    Abandoned,
    Activated,
    ActivateOutcome,
    AlreadyClaimed,
    AlreadyRequested,
    CancelRequested,
    ClaimAndOwnOutcome,
    ClaimChanged,
    Claimed,
    ClaimFresh,
    ClaimLost,
    ClaimOutcome,
    EvidenceRequired,
    FenceLost,
    GuardFailed,
    HeartbeatFresh,
    HeartbeatOutcome,
    LivenessUnconfirmed,
    NotFound,
    RecoverClaimOutcome,
    Recovered,
    RequestCancelOutcome,
    SnapshotChanged,
    StealOutcome,
    Terminal,
    Transitioned,
    TransitionOutcome,
    Updated,
)
from .._values import (
    RUN_STATUSES,
    TERMINAL_STATUSES,
    LivenessEvidence,
    OwnerId,
    OwnershipFact,
    RunChange,
    RunPage,
    RunRow,
    RunSnapshot,
    RunStatus,
    StoreState,
    TransitionGuard,
)
from ..consensus._sql import SqlConsensus
from ..consensus._types import FenceLostError, Granted, Lost, Promoted, Rejected
from ._decode import (
    acknowledgement_json,
    decode_acknowledgement,
    decode_changes,
    decode_fact,
    decode_run,
    decode_runs,
    raw_fact,
    raw_run,
)
from ._faults import FaultPlan, RetryPolicy
from ._invariants import check_store_invariants
from ._modes import read_only_refusal
from ._tx import RollbackAndReturn

#: A backend's write transaction (``connection``, ``consensus``, ``dialect``,
#: ``on_commit``, ``on_rollback``); each backend's ``_tx`` defines it.
Transaction = Any


class TransactionManager(Protocol):
    """What the core needs of a backend's transaction manager."""

    lock: Any
    faults: FaultPlan | None
    retry: RetryPolicy
    connection: Any
    loop_guard: bool

    def write(self, method: str, body: Callable[[Any], T]) -> T: ...

    def read(self, method: str, body: Callable[[Any], T]) -> T: ...

    def snapshot(self, method: str, body: Callable[[Any], T], *, keep: bool = False) -> T: ...

    def interrupt(self) -> None: ...

    def close(self) -> None: ...


T = TypeVar("T")

_LOSSES: Final[dict[str, AlreadyClaimed | HeartbeatFresh | SnapshotChanged]] = {
    "already_claimed": AlreadyClaimed(),
    "heartbeat_fresh": HeartbeatFresh(),
    "snapshot_changed": SnapshotChanged(),
}
_NOT_FOUND: Final = NotFound()
_UPDATED: Final = Updated()
_LOST: Final = Lost()
_FENCE_LOST: Final = FenceLost()
_CLAIM_LOST: Final = ClaimLost()
_ACTIVATED: Final = Activated()
_SNAPSHOT_CHANGED: Final = SnapshotChanged()


def _snapshot(run_id: str, expected: RunSnapshot) -> tuple[Any, ...]:
    """``?1`` and the snapshot parameters ``?2``-``?6`` of every classify query."""
    owner = expected.owner
    if owner is None:
        return (run_id, expected.status, None, None, None, expected.heartbeat_at_ms)
    return (
        run_id,
        expected.status,
        owner.host_id,
        owner.pid,
        owner.nonce,
        expected.heartbeat_at_ms,
    )


def _evidence_matches(
    expected_owner: OwnerId, observer: OwnerId, now_ms: int, evidence: LivenessEvidence
) -> bool:
    """The evidence names ``expected_owner``, was taken at exactly ``now_ms``,
    and its kind fits the host relation between that owner and ``observer``."""
    if evidence.checked_at_ms != now_ms or evidence.expected_owner != expected_owner:
        return False
    if evidence.kind == "same-host-pid-dead":
        return expected_owner.host_id == observer.host_id
    if evidence.kind == "cross-host-unreachable-stale":
        return expected_owner.host_id != observer.host_id
    return True


def _write_invariant(method: str, run_id: str) -> PersistenceFailedError:
    # The guarded write missed a row its classify query admitted moments before
    # in the same serialized transaction: something wrote behind the store.
    return PersistenceFailedError(
        method,
        "guarded update missed a row it had admitted",
        {"run_id": run_id, "stage": "write-invariant"},
    )


@_telemetry.instrument_run_store
class SqlRunStore:
    """A ``RunStore`` over a SQL database; ``SqliteRunStore`` and
    ``PostgresRunStore`` are its backends.

    One store object may be shared by several threads (a worker and its
    heartbeat thread, say): it serializes its use of its connection. It is a
    context manager, and closing it twice does nothing.
    """

    #: The backend's named queries.
    _queries: ClassVar[ModuleType]
    #: The backend's attempt statements, which ``AttemptStore`` runs on this
    #: store's connection (``runstore.attempts`` imports no backend).
    _attempt_queries: ClassVar[ModuleType]

    def __init__(self, tm: TransactionManager, *, clock: Clock, consensus: Any) -> None:
        self._clock = clock
        self._consensus = consensus
        self._tm = tm
        self._closed = False
        #: The backend's one-statement operations, or None (see ``_fused``).
        self._fused: Any = None

    # -- the seams other modules use ------------------------------------------

    @property
    def clock(self) -> Clock:
        """The store clock (lifecycle stamps, the skew bound)."""
        return self._clock

    @property
    def consensus(self) -> Any:
        """The strategy this store arbitrates with."""
        return self._consensus

    @property
    def dialect(self) -> str:
        """``"sqlite"`` or ``"postgresql"``: which SQL ``tx.connection`` speaks."""
        raise NotImplementedError

    @property
    def read_only(self) -> bool:
        """Whether the store was opened with ``read_only=True``: every write
        operation raises ``persistence_failed`` (``cause["stage"] ==
        "read-only"``) after admitting its arguments, whatever it would have
        answered; reads work."""
        return bool(getattr(self._tm, "read_only", False))

    def _writable(self, method: str) -> None:
        """Refuse a write on a read-only store (for operations that may answer
        without a transaction; every other write is refused by ``_tm.write``)."""
        if self.read_only:
            raise read_only_refusal(method)

    def _write(self, method: str, body: Callable[[Transaction], T]) -> T:
        """Run ``body`` in one write transaction: the backend's ``BEGIN``,
        retry of transient failures, the fault seam, error classification."""
        return self._tm.write(method, body)

    def _read(self, method: str, body: Callable[[Any], T]) -> T:
        """Run ``body`` on the connection outside any write transaction."""
        return self._tm.read(method, body)

    def _install_faults(self, plan: FaultPlan | None) -> None:
        """Arm a fault plan for the following write attempts (None disarms)."""
        if plan is not None and type(plan) is not FaultPlan:
            raise TypeError("expected a FaultPlan or None")
        with self._tm.lock:
            self._tm.faults = plan

    @property
    def _retry_policy(self) -> RetryPolicy:
        return self._tm.retry

    @_retry_policy.setter
    def _retry_policy(self, policy: RetryPolicy) -> None:
        if type(policy) is not RetryPolicy:
            raise TypeError("expected a RetryPolicy")
        self._tm.retry = policy

    @property
    def _connection(self) -> Any:
        return self._tm.connection

    @property
    def fast_path(self) -> bool:
        """Whether write operations take the backend's one-round-trip path
        (PostgreSQL with ``SqlConsensus``; see ``runstore.postgres._fused``).
        Each operation is then one statement, a server-side function that
        makes the same decision as the transaction below it would."""
        return self._fused is not None

    def _lock(self, tx: Transaction, run_id: str) -> None:
        """Serialize this run's compare-and-swap (see ``LOCK_RUN``)."""
        lock = self._queries.LOCK_RUN
        if lock:
            tx.connection.execute(lock, (run_id,))

    # -- create and reads --------------------------------------------------------

    def create(
        self,
        run_id: str,
        state_json: str,
        *,
        parent_run_id: str | None = None,
        lineage_id: str | None = None,
        round_ordinal: int | None = None,
    ) -> None:
        q = self._queries
        rid, state, parent, lineage, ordinal = admit.admit_create(
            run_id, state_json, parent_run_id, lineage_id, round_ordinal
        )
        created_at = admit.clock_reading("create", self._clock)
        fused = self._fused
        if fused is not None and fused.create(rid, created_at, parent, lineage, ordinal, state):
            return

        def body(tx: Transaction) -> None:
            execute = tx.connection.execute
            execute(q.CREATE_RUN, (rid, created_at, parent, lineage, ordinal))
            execute(q.CREATE_STATE, (rid, state))

        self._tm.write("create", body)

    def get(self, run_id: str) -> RunRow:
        q = self._queries
        rid = admit.admit_run_id("get", run_id)
        row = self._tm.read("get", lambda c: c.execute(q.GET, (rid,)).fetchone())
        if row is None:
            raise RunNotFoundError("get", rid)
        return decode_run("get", row)

    def lineage(self, run_id: str) -> list[RunRow]:
        q = self._queries
        rid = admit.admit_run_id("lineage", run_id)
        rows = self._tm.read("lineage", lambda c: c.execute(q.LINEAGE, (rid,)).fetchall())
        return decode_runs("lineage", rows)

    def latest_round(self, run_id: str) -> RunRow:
        q = self._queries
        rid = admit.admit_run_id("latest_round", run_id)
        row = self._tm.read("latest_round", lambda c: c.execute(q.LATEST_ROUND, (rid,)).fetchone())
        if row is None:
            raise RunNotFoundError("latest_round", rid)
        return decode_run("latest_round", row)

    # -- cancellation --------------------------------------------------------------

    def request_cancel(self, run_id: str, now_ms: int) -> RequestCancelOutcome:
        q = self._queries
        rid, now = admit.admit_request_cancel("request_cancel", run_id, now_ms)
        fused = self._fused
        if fused is not None and (done := fused.request_cancel("request_cancel", rid, now)):
            marked, rows = done
            if marked:
                return CancelRequested(now)
            return _classify_cancellation_miss("request_cancel", rid, rows)

        def body(tx: Transaction) -> RequestCancelOutcome:
            execute = tx.connection.execute
            if execute(q.REQUEST_CANCEL_WRITE, (rid, now)).rowcount:
                return CancelRequested(now)
            rows = execute(q.REQUEST_CANCEL_MISS, (rid,)).fetchall()
            return _classify_cancellation_miss("request_cancel", rid, rows)

        return self._tm.write("request_cancel", body)

    def request_cancel_lineage(self, run_id: str, now_ms: int) -> RequestCancelOutcome:
        """One set-based UPDATE over the lineage's metadata, however long its
        history. SQLite applies it (and its revision triggers) in run id order,
        so the rounds it marks get consecutive revisions in run id order."""
        q = self._queries
        method = "request_cancel_lineage"
        rid, now = admit.admit_request_cancel(method, run_id, now_ms)
        fused = self._fused
        if fused is not None and (done := fused.request_cancel(method, rid, now)):
            marked, rows = done
            if marked:
                return CancelRequested(now)
            return _classify_cancellation_miss(method, rid, rows)

        def body(tx: Transaction) -> RequestCancelOutcome:
            execute = tx.connection.execute
            if execute(q.REQUEST_CANCEL_LINEAGE_WRITE, (rid, now)).rowcount:
                return CancelRequested(now)
            rows = execute(q.REQUEST_CANCEL_LINEAGE_MISS, (rid,)).fetchall()
            return _classify_cancellation_miss(method, rid, rows)

        return self._tm.write(method, body)

    def acknowledge_cancel(self, run_id: str, owner: OwnerId, now_ms: int) -> bool:
        q = self._queries
        rid, who, now = admit.admit_acknowledge_cancel(run_id, owner, now_ms)
        params = (rid, who.host_id, who.pid, who.nonce, acknowledgement_json(now, who))
        fused = self._fused
        if fused is not None:
            seen = fused.acknowledge_cancel(q.ACKNOWLEDGE_CANCEL_WRITE, params)
            if seen is not None:
                return bool(seen)

        def body(tx: Transaction) -> bool:
            return bool(tx.connection.execute(q.ACKNOWLEDGE_CANCEL_WRITE, params).rowcount > 0)

        return self._tm.write("acknowledge_cancel", body)

    # -- claims ----------------------------------------------------------------------

    def claim(
        self, run_id: str, expected: RunSnapshot | RunRow, claimant: OwnerId, now_ms: int
    ) -> ClaimOutcome:
        q = self._queries
        rid, snapshot, who, now = admit.admit_claim(run_id, expected, claimant, now_ms, self._clock)
        classify_params = (*_snapshot(rid, snapshot), now - HEARTBEAT_STALE_AFTER_MS)
        fused = self._fused
        if fused is not None:
            answer = fused.claim(rid, snapshot, who, now, now - HEARTBEAT_STALE_AFTER_MS)
            if answer is not None:
                return answer  # type: ignore[no-any-return]

        def body(tx: Transaction) -> ClaimOutcome:
            execute = tx.connection.execute
            self._lock(tx, rid)
            row = execute(q.CLAIM_CLASSIFY, classify_params).fetchone()
            if row is None:
                return _NOT_FOUND
            admissible, loss, last = row
            if not admissible:
                return _LOSSES[loss]
            grant = tx.consensus.claim(tx, rid, who, now)
            if type(grant) is not Granted:
                # The strategy is authoritative: the row admitted what it refused.
                return _LOSSES[loss]
            granted = grant.granted_at_ms
            wrote = execute(
                q.CLAIM_WRITE, (*classify_params, who.host_id, who.pid, who.nonce, granted)
            ).rowcount
            if wrote != 1:
                raise _write_invariant("claim", rid)
            self._fact(tx, rid, "claimed", who, granted, last + 1)
            return Claimed(granted)

        return self._tm.write("claim", body)

    def claim_and_own(
        self,
        run_id: str,
        expected: RunSnapshot | RunRow,
        owner: OwnerId,
        now_ms: int,
        evidence: LivenessEvidence | None = None,
    ) -> ClaimAndOwnOutcome:
        q = self._queries
        method = "claim_and_own"
        rid, snapshot, who, now, proof = admit.admit_claim_and_own(
            run_id, expected, owner, now_ms, evidence, self._clock
        )
        self._writable(method)
        classify_params = (*_snapshot(rid, snapshot), now - HEARTBEAT_STALE_AFTER_MS)
        previous = snapshot.owner
        if (
            snapshot.status == "running"
            and previous != who
            and not (
                proof is not None
                and previous is not None
                and _evidence_matches(previous, who, now, proof)
            )
        ):
            # Replacing another owner without matching evidence: no
            # compare-and-swap runs. An unchanged stale row asks for evidence;
            # a fresh heartbeat is reported as such (evidence cannot beat it).
            def precheck(connection: Any) -> ClaimAndOwnOutcome:
                row = connection.execute(q.CLAIM_AND_OWN_PRECHECK, classify_params).fetchone()
                if row is None:
                    return _NOT_FOUND
                loss, unchanged = row
                if loss == "snapshot_changed" and unchanged:
                    return EvidenceRequired()
                return _LOSSES[loss]

            return self._tm.read(method, precheck)

        fused = self._fused
        if fused is not None:
            answer = fused.claim_and_own(rid, snapshot, who, now, now - HEARTBEAT_STALE_AFTER_MS)
            if answer is not None:
                return answer  # type: ignore[no-any-return]

        def body(tx: Transaction) -> ClaimAndOwnOutcome:
            return self._claim_and_own_in(tx, rid, previous, who, now, proof, classify_params)

        return self._tm.write(method, body)

    def _claim_and_own_in(
        self,
        tx: Transaction,
        rid: str,
        previous: OwnerId | None,
        who: OwnerId,
        now: int,
        proof: LivenessEvidence | None,
        classify_params: tuple[Any, ...],
        last: int | None = None,
    ) -> ClaimAndOwnOutcome:
        """``claim_and_own``'s compare-and-swap inside ``tx`` (also ``claim_next``'s):
        ``previous`` is the snapshot's owner, ``classify_params`` the classify
        query's parameters (the snapshot and the staleness cutoff); ``last``
        the run's last fact position when the caller read it with the row."""
        q = self._queries
        method = "claim_and_own"
        execute = tx.connection.execute
        self._lock(tx, rid)
        if previous is None:
            return self._take_unowned(tx, rid, who, now, classify_params, last)
        row = execute(q.CLAIM_AND_OWN_CLASSIFY, classify_params).fetchone()
        if row is None:
            return _NOT_FOUND
        admissible, loss_tag, last = row
        loss = _LOSSES[loss_tag]
        if not admissible:
            return loss
        consensus = tx.consensus
        transition = "claimed"
        if previous == who:
            # Re-owning one's own stale run: release, then a fresh grant
            # (a new generation, fenced by the new grant time).
            consensus.release_ownership(tx, rid, who)
            last += 1
            self._fact(tx, rid, "released", who, None, last)
            grant = consensus.claim(tx, rid, who, now)
        else:
            assert proof is not None
            grant = consensus.steal(tx, rid, who, now, proof)
            transition = "stolen"
        if type(grant) is not Granted:
            # Nothing of this operation may stay (contract.md, Decided here 1).
            raise RollbackAndReturn(loss)
        granted = grant.granted_at_ms
        if type(consensus.activate(tx, rid, who, granted, now)) is not Promoted:
            raise RollbackAndReturn(loss)
        execute(q.FACTS_GRANT_ACTIVATED_AT, (rid, transition, *_who(who), granted, last + 1))
        wrote = execute(
            q.CLAIM_AND_OWN_WRITE, (*classify_params, who.host_id, who.pid, who.nonce, now)
        ).rowcount
        if wrote != 1:
            raise _write_invariant(method, rid)
        return _ACTIVATED

    def _take_unowned(
        self,
        tx: Transaction,
        rid: str,
        who: OwnerId,
        now: int,
        classify_params: tuple[Any, ...],
        last: int | None = None,
    ) -> ClaimAndOwnOutcome:
        """``claim_and_own`` of a run with no owner (pending or suspended),
        write first: the guarded row write, then the strategy's claim and
        activation and the two facts; only a write that missed classifies the
        row. A row the write admitted had no claim and no running owner, so a
        strategy that refuses it after all answers ``SnapshotChanged`` (and
        everything rolls back)."""
        q = self._queries
        execute = tx.connection.execute
        params = (*classify_params, who.host_id, who.pid, who.nonce, now)
        if execute(q.CLAIM_AND_OWN_WRITE, params).rowcount != 1:
            row = execute(q.CLAIM_AND_OWN_CLASSIFY, classify_params).fetchone()
            if row is None:
                return _NOT_FOUND
            if row[0]:
                raise _write_invariant("claim_and_own", rid)
            return _LOSSES[row[1]]
        consensus = tx.consensus
        if type(consensus) is SqlConsensus:
            # Exactly SqlConsensus (no fault armed): its claim and activation
            # of that grant in one statement.
            grant = consensus.claim_and_activate(tx, rid, who, now)
            if type(grant) is not Granted:
                raise RollbackAndReturn(_SNAPSHOT_CHANGED)
            granted = grant.granted_at_ms
        else:
            grant = consensus.claim(tx, rid, who, now)
            if type(grant) is not Granted:
                raise RollbackAndReturn(_SNAPSHOT_CHANGED)
            granted = grant.granted_at_ms
            if type(consensus.activate(tx, rid, who, granted, now)) is not Promoted:
                raise RollbackAndReturn(_SNAPSHOT_CHANGED)
        facts = q.FACTS_CLAIMED_ACTIVATED
        if last is None and facts is not None:
            execute(facts, (rid, "claimed", *_who(who), granted))
        else:
            if last is None:
                last = execute(q.LAST_FACT_POSITION, (rid,)).fetchone()[0]
            execute(q.FACTS_GRANT_ACTIVATED_AT, (rid, "claimed", *_who(who), granted, last + 1))
        return _ACTIVATED

    def activate(
        self,
        run_id: str,
        claimant: OwnerId,
        claimed_at_ms: int,
        expected: RunSnapshot | RunRow,
    ) -> ActivateOutcome:
        q = self._queries
        rid, who, token, snapshot = admit.admit_activate(run_id, claimant, claimed_at_ms, expected)
        activated_at = admit.clock_reading("activate", self._clock)
        claim = (who.host_id, who.pid, who.nonce, token)
        params = (*_snapshot(rid, snapshot), *claim)
        fused = self._fused
        if fused is not None:
            answer = fused.activate(rid, who, token, snapshot, activated_at)
            if answer is not None:
                return answer  # type: ignore[no-any-return]

        def body(tx: Transaction) -> ActivateOutcome:
            execute = tx.connection.execute
            self._lock(tx, rid)
            row = execute(q.ACTIVATE_CLASSIFY, params).fetchone()
            if row is None or not row[0]:
                return _CLAIM_LOST  # a foreign claim is never cleared
            consensus = tx.consensus
            last = row[2]
            if not row[1]:
                # The claim stands but the snapshot moved: give the claim back
                # (this clean-up commits with the loss).
                consensus.release_claim(tx, rid, who, token)
                self._fact(tx, rid, "released", who, token, last + 1)
                execute(q.CLEAR_CLAIM, (rid, *claim))
                return _SNAPSHOT_CHANGED
            if type(consensus.activate(tx, rid, who, token, activated_at)) is not Promoted:
                # The strategy no longer holds this claim: the row follows it.
                execute(q.CLEAR_CLAIM, (rid, *claim))
                return _CLAIM_LOST
            if execute(q.ACTIVATE_WRITE, (*params, activated_at)).rowcount != 1:
                raise _write_invariant("activate", rid)
            self._fact(tx, rid, "activated", who, token, last + 1)
            return _ACTIVATED

        return self._tm.write("activate", body)

    def abandon_claim(
        self, run_id: str, claimant: OwnerId, claimed_at_ms: int
    ) -> AbandonClaimOutcome:
        q = self._queries
        rid, who, token = admit.admit_abandon_claim(run_id, claimant, claimed_at_ms)
        fused = self._fused
        if fused is not None:
            answer = fused.abandon_claim(rid, who, token)
            if answer is not None:
                return answer  # type: ignore[no-any-return]

        def body(tx: Transaction) -> AbandonClaimOutcome:
            cleared = tx.connection.execute(
                q.CLEAR_CLAIM, (rid, who.host_id, who.pid, who.nonce, token)
            ).rowcount
            if not cleared:
                return _CLAIM_LOST
            tx.consensus.release_claim(tx, rid, who, token)
            self._fact(tx, rid, "released", who, token)
            return Abandoned()

        return self._tm.write("abandon_claim", body)

    def recover_claim(
        self,
        run_id: str,
        stale_claimant: OwnerId,
        claimed_at_ms: int,
        observer: OwnerId,
        now_ms: int,
        evidence: LivenessEvidence,
    ) -> RecoverClaimOutcome:
        q = self._queries
        rid, stale, token, who, now, proof = admit.admit_recover_claim(
            run_id, stale_claimant, claimed_at_ms, observer, now_ms, evidence, self._clock
        )
        self._writable("recover_claim")
        if not _evidence_matches(stale, who, now, proof):
            return LivenessUnconfirmed()
        claim = (stale.host_id, stale.pid, stale.nonce, token)
        fused = self._fused
        if fused is not None:
            answer = fused.recover_claim(rid, stale, token, now - HEARTBEAT_STALE_AFTER_MS)
            if answer is not None:
                return answer  # type: ignore[no-any-return]

        def body(tx: Transaction) -> RecoverClaimOutcome:
            execute = tx.connection.execute
            self._lock(tx, rid)
            row = execute(
                q.RECOVER_CLAIM_CLASSIFY, (rid, *claim, now - HEARTBEAT_STALE_AFTER_MS)
            ).fetchone()
            if row is None:
                return _NOT_FOUND
            matches, fresh, last = row
            if not matches:
                return ClaimChanged()
            if fresh:
                return ClaimFresh()
            outcome = tx.consensus.recover(tx, rid, stale, token, who, now, proof)
            if type(outcome) is Rejected:
                return ClaimChanged()  # as the strategy knows it, the claim moved on
            if execute(q.CLEAR_CLAIM, (rid, *claim)).rowcount != 1:
                raise _write_invariant("recover_claim", rid)
            self._fact(tx, rid, "expired", stale, token, last + 1)
            return Recovered()

        return self._tm.write("recover_claim", body)

    # -- the owner's operations -------------------------------------------------------

    def heartbeat(self, run_id: str, owner: OwnerId, now_ms: int) -> HeartbeatOutcome:
        return self._renew("heartbeat", run_id, owner, now_ms)

    def reconfirm(self, run_id: str, owner: OwnerId, now_ms: int) -> HeartbeatOutcome:
        return self._renew("reconfirm", run_id, owner, now_ms)

    def _renew(
        self, method: str, run_id: object, owner: object, now_ms: object
    ) -> HeartbeatOutcome:
        q = self._queries
        rid, who, now = admit.admit_renewal(method, run_id, owner, now_ms, self._clock)
        fused = self._fused
        if fused is not None:
            answer = fused.renew(method, rid, who, now)
            if answer is not None:
                return answer  # type: ignore[no-any-return]

        def body(tx: Transaction) -> HeartbeatOutcome:
            self._lock(tx, rid)
            consensus = tx.consensus
            renew = consensus.heartbeat if method == "heartbeat" else consensus.reconfirm
            outcome = renew(tx, rid, who, now)
            execute = tx.connection.execute
            if type(outcome) is not Lost:
                # The row mirrors the strategy's stamp; a renewed lease over a
                # row this owner does not hold is reported, never hidden.
                stamp = outcome.heartbeat_at_ms
                if execute(q.RENEW_WRITE, (rid, who.host_id, who.pid, who.nonce, stamp)).rowcount:
                    return _UPDATED
            exists = execute(q.RUN_EXISTS, (rid,)).fetchone()
            return _NOT_FOUND if exists is None else _FENCE_LOST

        return self._tm.write(method, body)

    def _renew_each(
        self, method: str, renewals: list[tuple[object, object, object]]
    ) -> list[HeartbeatOutcome | Exception]:
        """``heartbeat`` (or ``reconfirm``, as ``method`` says) of each
        ``(run_id, owner, now_ms)``, in order: per renewal its outcome or the
        error the operation raises. Each is the operation it names, with its
        own transaction; the one-round-trip statements of a PostgreSQL store
        go to the server together (``Fused.renew_many``: one write, answers
        as the server commits each). Each renewal runs by itself, as the
        operation, where that path does not apply (this is how an
        ``AsyncRunStore`` lane serves the renewals queued for it), and all
        of them do while telemetry records, so that each is recorded."""
        each = getattr(self, method)
        results: list[HeartbeatOutcome | Exception | None] = [None] * len(renewals)
        fused = self._fused
        if fused is not None and len(renewals) > 1 and _telemetry.quiet():
            admitted: list[tuple[int, str, OwnerId, int]] = []
            for index, (run_id, owner, now_ms) in enumerate(renewals):
                try:
                    admitted.append(
                        (index, *admit.admit_renewal(method, run_id, owner, now_ms, self._clock))
                    )
                except RunStoreError as refused:
                    results[index] = refused
            answers = None
            if len(admitted) > 1:
                answers = fused.renew_many(method, [entry[1:] for entry in admitted])
            if answers is not None:
                for (index, _, _, _), answer in zip(admitted, answers, strict=True):
                    results[index] = answer
        for index, result in enumerate(results):
            if result is None:
                try:
                    results[index] = each(*renewals[index])
                except Exception as error:  # handed to that renewal's caller
                    results[index] = error
        return results  # type: ignore[return-value]

    def transition_owned(
        self,
        run_id: str,
        owner: OwnerId,
        to_status: RunStatus,
        state_json: str | None = None,
        guard: TransitionGuard | None = None,
    ) -> TransitionOutcome:
        q = self._queries
        method = "transition_owned"
        rid, who, status, state, checked = admit.admit_transition_owned(
            run_id, owner, to_status, state_json, guard
        )
        transitioned_at = admit.clock_reading(method, self._clock)
        requirement = None if checked is None else checked.cancel_requested
        params = (rid, who.host_id, who.pid, who.nonce, requirement)
        fused = self._fused
        if fused is not None:
            finished = transitioned_at if status in TERMINAL_STATUSES else None
            answer = fused.transition_owned(rid, who, requirement, status, finished, state)
            if answer is not None:
                return answer  # type: ignore[no-any-return]

        def body(tx: Transaction) -> TransitionOutcome:
            execute = tx.connection.execute
            self._lock(tx, rid)
            consensus = tx.consensus
            try:
                consensus.guard(tx, rid, who)
                held = True
            except FenceLostError:
                held = False
            if held:
                if status == "running":
                    wrote = execute(q.TRANSITION_RUNNING_WRITE, params).rowcount
                else:
                    finished = transitioned_at if status in TERMINAL_STATUSES else None
                    wrote = execute(q.TRANSITION_SETTLE_WRITE, (*params, status, finished)).rowcount
                if wrote:
                    if state is not None:
                        execute(q.STATE_WRITE, (rid, state))
                    if status != "running":
                        consensus.release_ownership(tx, rid, who)
                        self._fact(tx, rid, "released", who, None)
                    return Transitioned()
            row = execute(q.TRANSITION_CLASSIFY, params).fetchone()
            if row is None:
                return _NOT_FOUND
            owned, blocked = row
            if not held or not owned:
                return _FENCE_LOST
            if blocked:
                return GuardFailed()
            raise _write_invariant(method, rid)

        return self._tm.write(method, body)

    def steal(
        self,
        run_id: str,
        expected: RunSnapshot | RunRow,
        claimant: OwnerId,
        now_ms: int,
        evidence: LivenessEvidence,
    ) -> StealOutcome:
        q = self._queries
        rid, snapshot, who, now, proof = admit.admit_steal(
            run_id, expected, claimant, now_ms, evidence, self._clock
        )
        self._writable("steal")
        previous = snapshot.owner
        if (
            snapshot.status != "running"
            or previous is None
            or not _evidence_matches(previous, who, now, proof)
        ):
            return LivenessUnconfirmed()
        classify_params = (*_snapshot(rid, snapshot), now - HEARTBEAT_STALE_AFTER_MS)
        fused = self._fused
        if fused is not None:
            answer = fused.steal(rid, snapshot, who, now, now - HEARTBEAT_STALE_AFTER_MS)
            if answer is not None:
                return answer  # type: ignore[no-any-return]

        def body(tx: Transaction) -> StealOutcome:
            execute = tx.connection.execute
            self._lock(tx, rid)
            row = execute(q.STEAL_CLASSIFY, classify_params).fetchone()
            if row is None:
                return _NOT_FOUND
            admissible, loss, last = row
            if not admissible:
                return _LOSSES[loss]
            grant = tx.consensus.steal(tx, rid, who, now, proof)
            if type(grant) is not Granted:
                return _LOSSES[loss]
            granted = grant.granted_at_ms
            wrote = execute(
                q.STEAL_WRITE, (*classify_params, who.host_id, who.pid, who.nonce, granted)
            ).rowcount
            if wrote != 1:
                raise _write_invariant("steal", rid)
            self._fact(tx, rid, "stolen", who, granted, last + 1)
            return Claimed(granted)

        return self._tm.write("steal", body)

    # -- finding work, batch renewal, purging ---------------------------------------------

    def list_runs(
        self,
        *,
        status: RunStatus | Collection[RunStatus] | None = None,
        claimable_at: int | None = None,
        stale_at: int | None = None,
        claim_stale_at: int | None = None,
        cancel_requested: bool | None = None,
        lineage_id: str | None = None,
        parent_run_id: str | None = None,
        limit: int = 100,
        after: str | None = None,
        with_state: bool = False,
    ) -> RunPage:
        """One page of the runs matching every given filter, in listing order
        ``(created_at_ms, run_id)``: one SELECT (one snapshot) over an index
        in that order, reading one row more than the page to know whether
        another follows. See ``ModelRunStore.list_runs`` for the filters."""
        query = admit.admit_list_runs(
            status,
            claimable_at,
            stale_at,
            claim_stale_at,
            cancel_requested,
            lineage_id,
            parent_run_id,
            limit,
            after,
            with_state,
        )
        statement = _listing(self._queries, query)
        created, last = query.after if query.after is not None else (-1, "")
        params = (
            created,
            last,
            query.claimable_at,
            None if query.stale_at is None else query.stale_at - HEARTBEAT_STALE_AFTER_MS,
            None
            if query.claim_stale_at is None
            else query.claim_stale_at - HEARTBEAT_STALE_AFTER_MS,
            query.lineage_id,
            query.parent_run_id,
            query.limit + 1,
        )
        rows = self._tm.read("list_runs", lambda c: c.execute(statement, params).fetchall())
        stateless = not query.with_state
        runs = decode_runs("list_runs", rows[: query.limit], stateless=stateless)
        if len(rows) <= query.limit:
            return RunPage(tuple(runs), None)
        tail = runs[-1]
        return RunPage(tuple(runs), admit.encode_cursor(tail.created_at_ms, tail.run_id))

    def claim_next(
        self,
        owner: OwnerId,
        now_ms: int,
        *,
        status: RunStatus | Collection[RunStatus] = admit.CLAIMABLE_STATUSES,
    ) -> RunRow | None:
        """Claim and activate the oldest unclaimed run of ``status`` (pending
        and suspended by default), as ``claim_and_own`` with its current
        snapshot would, in one write transaction; its row (with state), or
        None when there is none. On PostgreSQL the pick skips rows other
        transactions hold, so concurrent workers take different runs. A run the
        strategy refuses is passed over (that attempt rolls back whole) and
        the next one is tried."""
        q = self._queries
        method = "claim_next"
        who, now, statuses = admit.admit_claim_next(owner, now_ms, status, self._clock)
        wanted = (statuses[0], statuses[-1])
        cutoff = now - HEARTBEAT_STALE_AFTER_MS
        after: tuple[int, str] = (-1, "")
        fused = self._fused
        if fused is not None:
            picked = fused.claim_next(who, now, wanted, cutoff, lambda row: decode_run(method, row))
            if picked is not True:
                return picked  # type: ignore[no-any-return]

        def body(tx: Transaction) -> RunRow | tuple[int, str] | None:
            execute = tx.connection.execute
            picked = execute(q.CLAIM_NEXT_PICK, (*after, *wanted)).fetchone()
            if picked is None:
                return None
            rid, picked_status, created = picked[0], picked[1], picked[2]
            params = (rid, picked_status, None, None, None, None, cutoff)
            # Decoded first, as the write will leave it (one decode, no
            # second row): a run whose state no longer decodes is not taken.
            # (A nineteenth column, where the backend reads one, is the run's
            # last fact position.)
            row = _activated_row(method, picked, who, now)
            last = picked[18] if len(picked) > 18 else None
            try:
                outcome = self._claim_and_own_in(tx, rid, None, who, now, None, params, last)
            except RollbackAndReturn:
                # The strategy refused this run: nothing of the attempt stays,
                # and the next pick looks after it.
                raise RollbackAndReturn((created, rid)) from None
            if outcome is not _ACTIVATED:
                raise _write_invariant(method, rid)
            return row

        while True:
            found = self._tm.write(method, body)
            if not isinstance(found, tuple):
                return found
            after = found

    def claim_next_many(
        self,
        owner: OwnerId,
        now_ms: int,
        limit: int,
        *,
        status: RunStatus | Collection[RunStatus] = admit.CLAIMABLE_STATUSES,
    ) -> list[RunRow]:
        """Claim and activate up to ``limit`` of the oldest unclaimed runs of
        ``status`` (pending and suspended by default), each as ``claim_next``
        would take it, in one write transaction; their rows (with state),
        oldest first. On PostgreSQL the picks skip rows other transactions
        hold, and with ``SqlConsensus`` the whole call is one statement. A run
        the strategy refuses is passed over: the transaction rolls back whole
        and is made again without it."""
        q = self._queries
        method = "claim_next_many"
        who, now, size, statuses = admit.admit_claim_next_many(
            owner, now_ms, limit, status, self._clock
        )
        wanted = (statuses[0], statuses[-1])
        cutoff = now - HEARTBEAT_STALE_AFTER_MS
        fused = self._fused
        if fused is not None:
            many = fused.claim_next_many(
                who, now, size, wanted, cutoff, lambda row: decode_run(method, row)
            )
            if many is not True:
                return many  # type: ignore[no-any-return]
        refused: set[str] = set()

        def body(tx: Transaction) -> list[RunRow] | str:
            execute = tx.connection.execute
            after: tuple[int, str] = (-1, "")
            taken: list[RunRow] = []
            while len(taken) < size:
                picked = execute(q.CLAIM_NEXT_PICK, (*after, *wanted)).fetchone()
                if picked is None:
                    break
                rid, picked_status, created = picked[0], picked[1], picked[2]
                after = (created, rid)
                if rid in refused:
                    continue
                params = (rid, picked_status, None, None, None, None, cutoff)
                # Decoded first: a run whose state no longer decodes fails
                # the call, and every claim made before it rolls back.
                row = _activated_row(method, picked, who, now)
                last = picked[18] if len(picked) > 18 else None
                try:
                    outcome = self._claim_and_own_in(tx, rid, None, who, now, None, params, last)
                except RollbackAndReturn:
                    # The strategy refused this run: the call is made again
                    # without it.
                    raise RollbackAndReturn(rid) from None
                if outcome is not _ACTIVATED:
                    raise _write_invariant(method, rid)
                taken.append(row)
            return taken

        while True:
            found = self._tm.write(method, body)
            if not isinstance(found, str):
                return found
            refused.add(found)

    def heartbeat_many(
        self, owner: OwnerId, run_ids: Sequence[str], now_ms: int
    ) -> dict[str, HeartbeatOutcome]:
        """Renew ``owner``'s leases on many runs in one write transaction, each
        answer what ``heartbeat`` alone would give (keys in ``run_ids``
        order). The strategy renews them all at once when it offers
        ``heartbeat_many`` (``SqlConsensus`` does, set-based), else one
        ``heartbeat`` call each; one set-based statement then writes the
        renewed rows in run id order (one revision each)."""
        q = self._queries
        method = "heartbeat_many"
        who, ids, now = admit.admit_heartbeat_many(owner, run_ids, now_ms, self._clock)
        ordered = sorted(ids)
        fused = self._fused
        if fused is not None and ordered:
            answers = fused.heartbeat_many(who, ordered, now)
            if answers is not None:
                return {rid: answers[rid] for rid in ids}

        def body(tx: Transaction) -> dict[str, HeartbeatOutcome]:
            execute = tx.connection.execute
            if not ordered:
                return {}
            if q.LOCK_RUNS:
                execute(q.LOCK_RUNS, (q.ids_param(ordered),))
            consensus = tx.consensus
            batch = getattr(consensus, "heartbeat_many", None)
            if batch is not None:
                renewals = batch(tx, ordered, who, now)
            else:
                renewals = {rid: consensus.heartbeat(tx, rid, who, now) for rid in ordered}
            pairs = [
                (rid, renewal.heartbeat_at_ms)
                for rid in ordered
                if type(renewal := renewals.get(rid, _LOST)) is not Lost
            ]
            written: set[str] | list[str] = []
            if pairs:
                params = (*q.stamps_param(pairs), who.host_id, who.pid, who.nonce)
                count = _count(execute(q.RENEW_MANY_WRITE, params))
                if count == len(pairs):
                    written = [rid for rid, _stamp in pairs]
                else:
                    # A renewed lease over a row this owner does not hold:
                    # reported (FenceLost), never hidden.
                    renewed = q.ids_param([rid for rid, _stamp in pairs])
                    owned = execute(q.OWNED_AMONG, (renewed, *_who(who))).fetchall()
                    written = [row[0] for row in owned]
            done = set(written)
            rest = [rid for rid in ordered if rid not in done]
            existing: set[str] = set()
            if rest:
                found = execute(q.EXISTING_AMONG, (q.ids_param(rest),)).fetchall()
                existing = {row[0] for row in found}
            return {
                rid: _UPDATED if rid in done else _FENCE_LOST if rid in existing else _NOT_FOUND
                for rid in ids
            }

        return self._tm.write(method, body)

    def purge_settled(self, before_ms: int, *, limit: int = 1000) -> int:
        """Delete up to ``limit`` settled runs finished before ``before_ms`` in
        one transaction (``ModelRunStore.purge_settled`` says which): their
        attempts, facts, state and any lease row first, then the runs in run id
        order, so the delete trigger numbers their tombstones in that order."""
        q = self._queries
        cutoff, size = admit.admit_purge_settled(before_ms, limit)

        def body(tx: Transaction) -> int:
            execute = tx.connection.execute
            if q.PURGE_SERIALIZE:
                execute(q.PURGE_SERIALIZE)
            found = [row[0] for row in execute(q.PURGE_CANDIDATES, (cutoff, size)).fetchall()]
            if found and q.PURGE_RECHECK:
                rows = execute(q.PURGE_RECHECK, (q.ids_param(found),)).fetchall()
                found = [row[0] for row in rows]
            if not found:
                return 0
            ids = q.ids_param(sorted(found))
            for statement in (q.PURGE_ATTEMPTS, q.PURGE_FACTS, q.PURGE_STATE, q.PURGE_LEASES):
                execute(statement, (ids,))
            purged = _count(execute(q.PURGE_RUNS, (ids,)))
            if purged != len(found):
                raise PersistenceFailedError(
                    "purge_settled",
                    "a purge deleted other runs than it chose",
                    {"stage": "write-invariant", "chosen": len(found), "deleted": purged},
                )
            return int(purged)

        return self._tm.write("purge_settled", body)

    def purge_candidates(self, before_ms: int, *, limit: int = 1000) -> list[RunRow]:
        """The runs ``purge_settled(before_ms, limit=limit)`` would purge now,
        in its order, without their state (``ModelRunStore.purge_candidates``):
        one SELECT of purge_settled's candidate query, which reads about as
        many rows as it returns; it writes and locks nothing, so it works on
        a read-only store. Not part of the ``RunStore``
        protocol (a store of someone else's need not offer it): ``runstore
        purge`` lists through it on the stores it opens.

        Raises ``InvalidRunError`` for what ``purge_settled`` refuses."""
        q = self._queries
        cutoff, size = admit.admit_purge_settled(before_ms, limit, "purge_candidates")
        rows = self._tm.read(
            "purge_candidates",
            lambda c: c.execute(q.PURGE_CANDIDATE_ROWS, (cutoff, size)).fetchall(),
        )
        return decode_runs("purge_candidates", rows, stateless=True)

    def compact_changes(self, through_revision: int, *, limit: int = 1000) -> int:
        """Drop up to ``limit`` tombstones at or below ``through_revision``,
        oldest first (``ModelRunStore.compact_changes``); the revision stays."""
        q = self._queries
        through, size = admit.admit_compact_changes(through_revision, limit)

        def body(tx: Transaction) -> int:
            execute = tx.connection.execute
            found = execute(q.COMPACT_CANDIDATES, (through, size)).fetchall()
            if not found:
                return 0
            dropped = execute(q.COMPACT_DELETE, (q.ids_param([row[0] for row in found]),))
            execute(q.COMPACT_RECORD, (max(row[1] for row in found),))
            return int(dropped.rowcount)

        return self._tm.write("compact_changes", body)

    # -- facts, revisions, whole state --------------------------------------------------

    def ownership_facts(self, run_id: str) -> list[OwnershipFact]:
        q = self._queries
        rid = admit.admit_run_id("ownership_facts", run_id)
        rows = self._tm.read(
            "ownership_facts", lambda c: c.execute(q.FACTS_OF_RUN, (rid,)).fetchall()
        )
        return [decode_fact("ownership_facts", row) for row in rows]

    def revision(self) -> int:
        q = self._queries
        row = self._tm.read("revision", lambda c: c.execute(q.REVISION).fetchone())
        if row is None or not admit.is_timestamp(row[0]):
            raise PersistenceFailedError(
                "revision", "execution source identity is missing", {"stage": "revision-source"}
            )
        return int(row[0])

    def changes(self, after_revision: int) -> list[RunChange]:
        q = self._queries
        after = admit.admit_changes(after_revision)
        rows = self._tm.read("changes", lambda c: c.execute(q.CHANGES, (after,)).fetchall())
        return decode_changes("changes", rows)

    def state(self) -> StoreState:
        """Everything the store holds. Never raises on a corrupt row: rows are
        reported as stored (a corrupt state is returned as its raw text)."""
        q = self._queries

        def body(tx: Transaction) -> StoreState:
            execute = tx.connection.execute
            rows = tuple(raw_run(row) for row in execute(q.ALL_RUNS).fetchall())
            consensus = tx.consensus
            bulk = getattr(consensus, "leases", None)
            if callable(bulk):
                leases = tuple(bulk(tx))
            else:
                found = (consensus.lease(tx, row.run_id) for row in rows)
                leases = tuple(lease for lease in found if lease is not None)
            facts = tuple(raw_fact(row) for row in execute(q.ALL_FACTS).fetchall())
            source = execute(q.REVISION).fetchone()
            changes = tuple(
                RunChange(run_id, revision, bool(deleted))
                for run_id, revision, deleted in execute(q.CHANGES, (-1,)).fetchall()
            )
            acknowledgements = tuple(
                ack
                for run_id, text in execute(q.ALL_ACKNOWLEDGEMENTS).fetchall()
                if (ack := decode_acknowledgement(run_id, text)) is not None
            )
            return StoreState(
                rows=tuple(sorted(rows, key=lambda r: r.run_id)),
                leases=tuple(sorted(leases, key=lambda lease: lease.run_id)),
                facts=facts,
                revision=source[0] if source is not None else -1,
                changes=changes,
                acknowledgements=acknowledgements,
            )

        number = q.NUMBER_CHANGES
        if number is not None:
            # A feed numbered by its readers (PostgreSQL): number every write
            # acknowledged so far, so the snapshot's feed shows it.
            numbering: str = number
            self._tm.read("state", lambda c: c.execute(numbering).fetchone())
        # Every row, lease and fact becomes an object here, and each
        # allocation counts towards the cyclic collector's next pass, whose
        # full passes walk every object alive: at 10^5 runs and more they
        # cost more than the decoding. Nothing built here forms a cycle, so
        # the collector waits until the snapshot is built.
        paused = gc.isenabled()
        if paused:
            gc.disable()
        try:
            return self._tm.snapshot("state", body)
        finally:
            if paused:
                gc.enable()

    def check_invariants(self) -> None:
        """Raise ``AssertionError`` naming the first broken invariant."""
        self._tm.snapshot("check_invariants", lambda tx: check_store_invariants(tx, self._queries))

    def _fact(
        self,
        tx: Transaction,
        run_id: str,
        transition: str,
        owner: OwnerId,
        granted_at_ms: int | None,
        position: int | None = None,
    ) -> None:
        """Append one fact: at ``position`` when a classify query told it, else
        one past the run's last."""
        q = self._queries
        params = (run_id, transition, owner.host_id, owner.pid, owner.nonce, granted_at_ms)
        if position is None:
            tx.connection.execute(q.FACT_APPEND, params)
        else:
            tx.connection.execute(q.FACT_AT, (*params, position))

    # -- lifetime -------------------------------------------------------------------------

    def interrupt(self) -> None:
        """Abort the SQL statement this store is running right now, from any thread.

        The interrupted operation rolls back whole and raises
        ``persistence_failed``, unless it was past the point of no return: on
        PostgreSQL a write whose commit the server answers as done after the
        cancel (a wait for a synchronous standby cut short) raises it with
        ``outcome_unknown`` true. An idle store is unaffected. The heartbeat
        supervisor calls this when a write it is waiting for outlives the lease
        budget. It takes no lock on purpose: the call it aborts holds it.
        """
        if self._closed:
            return
        self._tm.interrupt()

    def close(self) -> None:
        """Close the connection; closing twice does nothing."""
        with self._tm.lock:
            if self._closed:
                return
            self._closed = True
            self._tm.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _count(cursor: Any) -> int:
    """How many rows a counted write changed: its change count, or the count a
    server-side function answered (a statement that returns a row)."""
    if cursor.description is None:
        return int(cursor.rowcount)
    row = cursor.fetchone()
    return int(row[0]) if row is not None and row[0] is not None else 0


def _listing(q: ModuleType, query: admit.ListQuery) -> str:
    """The one SELECT of a ``list_runs`` page, from the backend's pieces
    (``LIST_*`` in its queries module; parameters as they describe)."""
    claimable = query.claimable_at is not None
    if query.with_state:
        columns = q.LIST_COLUMNS_WITH_STATE
        table = q.LIST_FROM_CLAIMABLE_WITH_STATE if claimable else q.LIST_FROM_WITH_STATE
    else:
        columns = q.LIST_COLUMNS
        table = q.LIST_FROM_CLAIMABLE if claimable else q.LIST_FROM
    filters = [q.LIST_PARAMETERS]
    if claimable:
        filters.append(q.LIST_CLAIMABLE)
    if query.stale_at is not None:
        filters.append(q.LIST_STALE)
    if query.claim_stale_at is not None:
        filters.append(q.LIST_CLAIM_STALE)
    if query.cancel_requested is not None:
        filters.append(
            q.LIST_CANCEL_WAITING if query.cancel_requested else q.LIST_CANCEL_NOT_WAITING
        )
    if query.lineage_id is not None:
        filters.append(q.LIST_LINEAGE)
    if query.parent_run_id is not None:
        filters.append(q.LIST_PARENT)
    if query.after is not None:
        filters.append(q.LIST_AFTER)

    def arm(status: str | None) -> str:
        chosen = filters if status is None else [q.LIST_STATUS.format(status=status), *filters]
        return f"SELECT {columns} {table} WHERE {' AND '.join(chosen)}"

    # The page's size, one row more than the page (a backend may write it
    # into the text as ``{limit}``; it is also passed as a parameter).
    limit = query.limit + 1
    statuses = query.statuses
    if statuses is None or len(statuses) == 1:
        order = q.LIST_ORDER.format(limit=limit)
        return f"{arm(None if statuses is None else statuses[0])} {order}"
    # One arm per status, each in listing order by the status index, merged.
    arms = " UNION ALL ".join(
        q.LIST_UNION_ARM.format(arm=arm(status), limit=limit) for status in statuses
    )
    return f"{arms} {q.LIST_UNION_ORDER.format(limit=limit)}"


def _who(owner: OwnerId) -> tuple[str, int, str]:
    return (owner.host_id, owner.pid, owner.nonce)


def _classify_cancellation_miss(
    method: str, run_id: str, rows: Sequence[tuple[Any, Any]]
) -> RequestCancelOutcome:
    """Name the outcome of a guarded cancellation UPDATE that matched nothing.

    ``rows`` are the run (or the lineage's rounds in order). A live request
    anywhere dominates a settled round; otherwise the last round's ending is
    reported. A live unrequested row cannot survive the UPDATE in one
    serialized transaction, so meeting one is a persistence failure.
    """
    outcome: RequestCancelOutcome = _NOT_FOUND
    for requested_at, status in rows:
        if type(status) is not str or status not in RUN_STATUSES:
            raise DecodeFailedError(
                method, "could not decode flows_runs status", {"run_id": run_id, "stage": "status"}
            )
        if status in TERMINAL_STATUSES:
            if type(outcome) is not AlreadyRequested:
                outcome = Terminal(status)  # type: ignore[arg-type]
            continue
        if requested_at is None:
            raise PersistenceFailedError(
                method,
                "guarded cancellation update missed a live unrequested row",
                {"run_id": run_id, "stage": "write-invariant"},
            )
        outcome = AlreadyRequested(requested_at)
    return outcome


def _activated_row(method: str, picked: Sequence[Any], who: OwnerId, now: int) -> RunRow:
    """``decode_run`` of ``_activated(picked, who, now)``, judging only what
    came from the database: the owner was admitted at the boundary, and the
    status, heartbeat, finish and claim are what the write sets. A column
    that does not pass is decoded in full, which raises ``decode_failed``
    with its usual cause."""
    run_id, created, started = picked[0], picked[2], picked[3]
    parent, cancel, lineage, round_ordinal, state = picked[13:18]
    is_identifier, is_timestamp = admit.is_identifier, admit.is_timestamp
    if not (
        is_identifier(run_id)
        and is_timestamp(created)
        and (started is None or is_timestamp(started))
        and (parent is None or is_identifier(parent))
        and (cancel is None or is_timestamp(cancel))
        and (lineage is None or is_identifier(lineage))
        and (round_ordinal is None or is_timestamp(round_ordinal))
        and type(state) is str
        and admit.json_text_complaint(state) is None
    ):
        return decode_run(method, _activated(picked, who, now))
    return RunRow(
        run_id=run_id,
        status="running",
        created_at_ms=created,
        started_at_ms=now if started is None else started,
        finished_at_ms=None,
        owner=who,
        heartbeat_at_ms=now,
        claim=None,
        claimed_at_ms=None,
        parent_run_id=parent,
        cancel_requested_at_ms=cancel,
        lineage_id=lineage,
        round_ordinal=round_ordinal,
        state_json=state,
    )


def _activated(picked: Sequence[Any], who: OwnerId, now: int) -> tuple[Any, ...]:
    """The picked row's first 18 columns (``GET``'s) as claim-and-own leaves
    them, activated by ``who`` at ``now`` (``CLAIM_AND_OWN_WRITE``'s columns;
    the pick admitted no claim): ``claim_next``'s run and each of
    ``claim_next_many``'s, decoded once."""
    started = picked[3] if picked[3] is not None else now
    return (
        picked[0],
        "running",
        picked[2],
        started,
        None,
        who.host_id,
        who.pid,
        who.nonce,
        now,
        None,
        None,
        None,
        None,
        *picked[13:18],
    )
