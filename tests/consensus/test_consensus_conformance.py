"""Strategy-level conformance: every shipped ``Consensus`` answers alike.

A port of upstream's ConsensusConformance suite (upstream-semantics.md §5.4,
§9.2) at the strategy interface, with contract.md's split of ``release`` into
``release_claim`` and ``release_ownership`` and its rule that a strategy's
change rolls back with the store's transaction. Each case runs against the
reference ``ModelConsensus``, ``LocalConsensus`` and ``SqlConsensus``; each
strategy is driven through a transaction of its own kind (a test-only
transaction for the in-memory strategies, the SQLite store's own write
transaction for ``SqlConsensus``). Strategies that have not landed yet are
skipped, not failed.

After every step the harness also checks the agreement-friendly shape of
``lease()``: a lease with neither owner nor claim is never reported; such a
run has no lease at all.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from runstore import LivenessEvidence, OwnerId
from runstore.consensus import (
    Cleared,
    Consensus,
    ConsensusError,
    FenceLostError,
    Granted,
    Lease,
    LocalConsensus,
    Lost,
    NoopConsensus,
    Promoted,
    Rejected,
    Renewed,
    Transaction,
)

from ._consensus_tx import FakeTransaction, RollBack

T = TypeVar("T")

RUN = "run-1"
OTHER = "run-2"
NEVER = "never-created"
RUN_IDS = (RUN, OTHER, NEVER)

A = OwnerId("host-a", 1, "nonce-a")
A2 = OwnerId("host-a", 2, "nonce-a2")  # same host as A, another process
A_RESTARTED = OwnerId("host-a", 1, "nonce-a-next")  # same host and pid, new nonce
B = OwnerId("host-b", 1, "nonce-b")
C = OwnerId("host-c", 1, "nonce-c")

STALE = 30_000


def cross(owner: OwnerId, at: int) -> LivenessEvidence:
    return LivenessEvidence(owner, at, "cross-host-unreachable-stale")


def same(owner: OwnerId, at: int) -> LivenessEvidence:
    return LivenessEvidence(owner, at, "same-host-pid-dead")


def expired(owner: OwnerId, at: int) -> LivenessEvidence:
    return LivenessEvidence(owner, at, "lease-expired")


# -- harnesses ---------------------------------------------------------------


class Harness:
    """Drives one strategy through transactions of the right kind.

    ``s.claim(run_id, ...)`` calls ``strategy.claim(tx, run_id, ...)`` in a
    committed transaction; ``s.rolled_back.claim(...)`` calls it in one that
    rolls back and returns what the strategy answered.
    """

    def __init__(self, strategy: Consensus) -> None:
        self.strategy = strategy
        self.rolled_back = _RolledBack(self)

    def transact(self, body: Callable[[Transaction], T]) -> T:
        tx = FakeTransaction()
        try:
            answer = body(tx)
        except BaseException:
            tx.rollback()
            raise
        tx.commit()
        return answer

    def transact_and_roll_back(self, body: Callable[[Transaction], T]) -> T:
        answers: list[T] = []
        with FakeTransaction() as tx:
            answers.append(body(tx))
            raise RollBack
        return answers[0]

    def close(self) -> None:
        pass

    def lease(self, run_id: str) -> Lease | None:
        return self.transact(lambda tx: self.strategy.lease(tx, run_id))

    def check_agreement_shape(self) -> None:
        for run_id in RUN_IDS:
            lease = self.lease(run_id)
            if lease is not None:
                assert lease.run_id == run_id
                assert lease.owner is not None or lease.claim is not None, (
                    f"{run_id}: an empty lease is reported instead of None: {lease}"
                )
                assert (lease.claim is None) == (lease.claimed_at_ms is None), lease
                if lease.owner is None:
                    assert lease.granted_at_ms is None, lease
                    assert lease.heartbeat_at_ms is None, lease

    def __getattr__(self, method: str) -> Callable[..., Any]:
        def call(*args: Any) -> Any:
            answer = self.transact(lambda tx: getattr(self.strategy, method)(tx, *args))
            self.check_agreement_shape()
            return answer

        return call


class _RolledBack:
    def __init__(self, harness: Harness) -> None:
        self._harness = harness

    def __getattr__(self, method: str) -> Callable[..., Any]:
        harness = self._harness

        def call(*args: Any) -> Any:
            answer = harness.transact_and_roll_back(
                lambda tx: getattr(harness.strategy, method)(tx, *args)
            )
            harness.check_agreement_shape()
            return answer

        return call


class SqlHarness(Harness):
    """Drives ``SqlConsensus`` through a real SQLite store's write transaction."""

    def __init__(self, strategy: Consensus, store: Any) -> None:
        super().__init__(strategy)
        self.store = store

    def transact(self, body: Callable[[Transaction], T]) -> T:
        # The store classifies a strategy's ConsensusError as persistence_failed;
        # here the strategy's own exception (guard's FenceLostError) is the answer.
        raised: list[ConsensusError] = []

        def guarded(tx: Transaction) -> T | None:
            try:
                return body(tx)
            except ConsensusError as error:
                raised.append(error)
                return None

        result = self.store._write("consensus_conformance", guarded)
        if raised:
            raise raised[0]
        return result  # type: ignore[no-any-return]

    def transact_and_roll_back(self, body: Callable[[Transaction], T]) -> T:
        answers: list[T] = []

        def failing(tx: Transaction) -> T:
            answers.append(body(tx))
            raise RollBack

        with pytest.raises(Exception) as raised:
            self.store._write("consensus_conformance", failing)
        # The store may wrap the failure; it must still be our deliberate one.
        chain: BaseException | None = raised.value
        seen = []
        while chain is not None:
            seen.append(chain)
            chain = chain.__cause__ or chain.__context__
        assert any(isinstance(e, RollBack) for e in seen), raised.value
        assert len(answers) == 1
        return answers[0]

    def close(self) -> None:
        self.store.close()


def _model_harness(_tmp: Path) -> Harness:
    model = pytest.importorskip("runstore.model")
    factory = getattr(model, "ModelConsensus", None)
    if factory is None:
        pytest.skip("runstore.model.ModelConsensus has not landed yet")
    return Harness(factory())


def _local_harness(_tmp: Path) -> Harness:
    return Harness(LocalConsensus())


def _sql_harness(tmp: Path) -> Harness:
    try:
        sql = importlib.import_module("runstore.consensus._sql")
    except ImportError:
        pytest.skip("runstore.consensus._sql has not landed yet")
    import runstore

    strategy = sql.SqlConsensus()
    try:
        store = runstore.open(tmp / "consensus.db", consensus=strategy)
    except NotImplementedError:
        pytest.skip("runstore.open has not landed yet")
    if not hasattr(store, "_write"):
        store.close()
        pytest.skip("the SQLite store exposes no _write(method, body) yet")
    return SqlHarness(strategy, store)


HARNESSES: dict[str, Callable[[Path], Harness]] = {
    "model": _model_harness,
    "local": _local_harness,
    "sql": _sql_harness,
}


@pytest.fixture(params=sorted(HARNESSES))
def s(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Harness]:
    """Each strategy under test, behind a harness that supplies transactions."""
    harness = HARNESSES[request.param](tmp_path)
    try:
        yield harness
    finally:
        harness.close()


def own(s: Harness, run_id: str, owner: OwnerId, at: int) -> None:
    """Make ``owner`` hold ``run_id`` with grant and heartbeat ``at``."""
    assert s.claim(run_id, owner, at) == Granted(at)
    assert s.activate(run_id, owner, at, at) == Promoted()


# -- claim -------------------------------------------------------------------


def test_one_claim_at_a_time(s: Harness) -> None:
    """A pending claim refuses every further claim, the claimant's own included."""
    assert s.claim(RUN, A, 100) == Granted(100)
    assert s.claim(RUN, B, 200) == Rejected("already_claimed")
    assert s.claim(RUN, A, 300) == Rejected("already_claimed")
    assert s.lease(RUN) == Lease(RUN, None, None, None, A, 100)


def test_claims_on_different_runs_are_independent(s: Harness) -> None:
    """A claim on one run does not touch another run."""
    assert s.claim(RUN, A, 100) == Granted(100)
    assert s.claim(OTHER, B, 100) == Granted(100)
    assert s.lease(OTHER) == Lease(OTHER, None, None, None, B, 100)


def test_owned_run_refuses_claims_owner_held(s: Harness) -> None:
    """An owned run with no pending claim refuses claims with owner_held, even the owner's."""
    own(s, RUN, A, 100)
    assert s.claim(RUN, B, 200) == Rejected("owner_held")
    assert s.claim(RUN, A, 200) == Rejected("owner_held")
    assert s.lease(RUN) == Lease(RUN, A, 100, 100, None, None)


def test_owned_run_with_pending_steal_refuses_claims_already_claimed(s: Harness) -> None:
    """A pending claim is reported before ownership."""
    own(s, RUN, A, 0)
    assert s.steal(RUN, B, 30_001, cross(A, 30_001)) == Granted(30_001)
    assert s.claim(RUN, C, 30_002) == Rejected("already_claimed")


# -- activate ----------------------------------------------------------------


def test_activation_needs_the_exact_grant(s: Harness) -> None:
    """Only the same claimant with the same grant time activates; the owner's heartbeat is now."""
    assert s.claim(RUN, A, 100) == Granted(100)
    assert s.activate(RUN, A, 99, 150) == Lost()
    assert s.activate(RUN, A, 101, 150) == Lost()
    assert s.activate(RUN, B, 100, 150) == Lost()
    assert s.activate(RUN, A2, 100, 150) == Lost()
    assert s.activate(RUN, A_RESTARTED, 100, 150) == Lost()
    assert s.lease(RUN) == Lease(RUN, None, None, None, A, 100)
    assert s.activate(RUN, A, 100, 150) == Promoted()
    assert s.lease(RUN) == Lease(RUN, A, 100, 150, None, None)


def test_spent_grant_is_lost(s: Harness) -> None:
    """Presenting a grant again after activating it is Lost and changes nothing."""
    own(s, RUN, A, 100)
    assert s.activate(RUN, A, 100, 200) == Lost()
    assert s.lease(RUN) == Lease(RUN, A, 100, 100, None, None)


def test_activate_without_a_lease_is_lost(s: Harness) -> None:
    """Activating on a run nobody claimed is Lost and leaves no lease."""
    assert s.activate(NEVER, A, 100, 100) == Lost()
    assert s.activate(RUN, A, 100, 100) == Lost()
    assert s.lease(RUN) is None


def test_activated_steal_replaces_the_owner(s: Harness) -> None:
    """A stealer's exact grant activates over the stale owner and clears its claim."""
    own(s, RUN, A, 0)
    assert s.steal(RUN, B, 30_001, cross(A, 30_001)) == Granted(30_001)
    assert s.activate(RUN, B, 30_001, 30_005) == Promoted()
    assert s.lease(RUN) == Lease(RUN, B, 30_001, 30_005, None, None)


# -- heartbeat and reconfirm -------------------------------------------------


def test_heartbeat_is_monotonic(s: Harness) -> None:
    """An older heartbeat renews without moving the stamp back: 250 then 150 stays 250."""
    own(s, RUN, A, 100)
    assert s.heartbeat(RUN, A, 250) == Renewed(250)
    assert s.heartbeat(RUN, A, 150) == Renewed(250)
    assert s.heartbeat(RUN, A, 250) == Renewed(250)
    assert s.lease(RUN) == Lease(RUN, A, 100, 250, None, None)


def test_heartbeat_from_strangers_is_lost(s: Harness) -> None:
    """Only the exact owner renews: other hosts, pids and nonces are Lost; so is an unknown run."""
    own(s, RUN, A, 100)
    for stranger in (B, A2, A_RESTARTED):
        assert s.heartbeat(RUN, stranger, 200) == Lost()
    assert s.heartbeat(NEVER, A, 200) == Lost()
    assert s.lease(RUN) == Lease(RUN, A, 100, 100, None, None)


def test_claim_alone_is_not_a_lease(s: Harness) -> None:
    """A claimant that has not activated cannot heartbeat or reconfirm."""
    assert s.claim(RUN, A, 100) == Granted(100)
    assert s.heartbeat(RUN, A, 200) == Lost()
    assert s.reconfirm(RUN, A, 200) == Lost()
    assert s.lease(RUN) == Lease(RUN, None, None, None, A, 100)


def test_heartbeat_ignores_a_pending_claim(s: Harness) -> None:
    """The owner keeps renewing while a stealer's claim is pending; the claim stays."""
    own(s, RUN, A, 0)
    assert s.steal(RUN, B, 30_001, cross(A, 30_001)) == Granted(30_001)
    assert s.heartbeat(RUN, A, 30_002) == Renewed(30_002)
    assert s.lease(RUN) == Lease(RUN, A, 0, 30_002, B, 30_001)


def test_reconfirm_renews_when_no_claim_is_pending(s: Harness) -> None:
    """Reconfirm renews monotonically like a heartbeat when nothing is pending."""
    own(s, RUN, A, 100)
    assert s.reconfirm(RUN, A, 19_000) == Renewed(19_000)
    assert s.reconfirm(RUN, A, 500) == Renewed(19_000)
    assert s.heartbeat(RUN, A, 0) == Renewed(19_000)
    assert s.reconfirm(RUN, B, 20_000) == Lost()
    assert s.reconfirm(NEVER, A, 20_000) == Lost()


def test_reconfirm_is_lost_while_a_claim_is_pending(s: Harness) -> None:
    """Reconfirm is Lost while a stealer's claim is pending, and renews again once it is gone."""
    own(s, RUN, A, 0)
    assert s.steal(RUN, B, 30_001, cross(A, 30_001)) == Granted(30_001)
    assert s.reconfirm(RUN, A, 30_002) == Lost()
    assert s.lease(RUN) == Lease(RUN, A, 0, 0, B, 30_001)
    s.release_claim(RUN, B, 30_001)
    assert s.reconfirm(RUN, A, 30_003) == Renewed(30_003)


# -- releases ----------------------------------------------------------------


def test_release_claim_drops_exactly_that_claim(s: Harness) -> None:
    """release_claim with another claimant or grant time does nothing; the exact one prunes."""
    assert s.claim(RUN, A, 100) == Granted(100)
    s.release_claim(RUN, A, 99)
    s.release_claim(RUN, B, 100)
    s.release_claim(RUN, A_RESTARTED, 100)
    s.release_claim(NEVER, A, 100)
    assert s.lease(RUN) == Lease(RUN, None, None, None, A, 100)
    s.release_claim(RUN, A, 100)
    assert s.lease(RUN) is None
    s.release_claim(RUN, A, 100)
    assert s.lease(RUN) is None


def test_release_claim_never_touches_ownership(s: Harness) -> None:
    """Dropping a stealer's claim keeps the owner; the owner's spent grant drops nothing."""
    own(s, RUN, A, 0)
    s.release_claim(RUN, A, 0)
    assert s.lease(RUN) == Lease(RUN, A, 0, 0, None, None)
    assert s.steal(RUN, B, 30_001, cross(A, 30_001)) == Granted(30_001)
    s.release_claim(RUN, B, 30_001)
    assert s.lease(RUN) == Lease(RUN, A, 0, 0, None, None)


def test_release_claim_of_a_self_steal_keeps_the_owner(s: Harness) -> None:
    """An owner that stole its own stale run and drops that claim is still the owner."""
    own(s, RUN, A, 0)
    assert s.steal(RUN, A, 30_001, expired(A, 30_001)) == Granted(30_001)
    s.release_claim(RUN, A, 30_001)
    assert s.lease(RUN) == Lease(RUN, A, 0, 0, None, None)
    assert s.heartbeat(RUN, A, 30_002) == Renewed(30_002)


def test_release_ownership_only_by_the_owner(s: Harness) -> None:
    """release_ownership by anyone but the owner, or on an unknown run, does nothing."""
    own(s, RUN, A, 100)
    for stranger in (B, A2, A_RESTARTED):
        s.release_ownership(RUN, stranger)
    s.release_ownership(NEVER, A)
    assert s.lease(RUN) == Lease(RUN, A, 100, 100, None, None)
    s.release_ownership(RUN, A)
    assert s.lease(RUN) is None
    s.release_ownership(RUN, A)
    assert s.lease(RUN) is None


def test_release_ownership_drops_a_pending_stealer_claim(s: Harness) -> None:
    """The owner releasing also drops the stealer's pending claim, so the run is free."""
    own(s, RUN, A, 0)
    assert s.steal(RUN, B, 30_001, cross(A, 30_001)) == Granted(30_001)
    s.release_ownership(RUN, B)
    assert s.lease(RUN) == Lease(RUN, A, 0, 0, B, 30_001)
    s.release_ownership(RUN, A)
    assert s.lease(RUN) is None
    assert s.activate(RUN, B, 30_001, 30_002) == Lost()
    assert s.claim(RUN, C, 30_003) == Granted(30_003)


def test_release_ownership_by_a_mere_claimant_does_nothing(s: Harness) -> None:
    """A claimant does not hold the run, so its release_ownership leaves the claim."""
    assert s.claim(RUN, A, 100) == Granted(100)
    s.release_ownership(RUN, A)
    assert s.lease(RUN) == Lease(RUN, None, None, None, A, 100)


# -- steal -------------------------------------------------------------------


@pytest.mark.parametrize("now", [10_000, 29_999, 30_000])
def test_steal_refuses_a_live_owner(s: Harness, now: int) -> None:
    """An owner whose heartbeat is at most 30 000 ms old is owner_live, even with evidence."""
    own(s, RUN, A, 0)
    assert s.steal(RUN, B, now, cross(A, now)) == Rejected("owner_live")
    assert s.steal(RUN, A2, now, same(A, now)) == Rejected("owner_live")
    assert s.steal(RUN, B, now, expired(A, now)) == Rejected("owner_live")
    assert s.lease(RUN) == Lease(RUN, A, 0, 0, None, None)


def test_steal_measures_staleness_from_the_latest_heartbeat(s: Harness) -> None:
    """A heartbeat moves the staleness cutoff; a stale grant time does not matter."""
    own(s, RUN, A, 0)
    assert s.heartbeat(RUN, A, 10_000) == Renewed(10_000)
    assert s.steal(RUN, B, 40_000, cross(A, 40_000)) == Rejected("owner_live")
    assert s.steal(RUN, B, 40_001, cross(A, 40_001)) == Granted(40_001)


@pytest.mark.parametrize(
    ("case", "claimant", "evidence"),
    [
        ("wrong checked_at", B, cross(A, 30_000)),
        ("later checked_at", B, cross(A, 30_002)),
        ("same-host kind from another host", B, same(A, 30_001)),
        ("cross-host kind from the same host", A2, cross(A, 30_001)),
        ("other owner named", B, cross(C, 30_001)),
        ("restarted owner named", B, cross(A_RESTARTED, 30_001)),
    ],
)
def test_steal_refuses_evidence_that_does_not_match(
    s: Harness, case: str, claimant: OwnerId, evidence: LivenessEvidence
) -> None:
    """Evidence must name the lease owner, be taken at now exactly, and fit the host relation."""
    own(s, RUN, A, 0)
    assert s.steal(RUN, claimant, 30_001, evidence) == Rejected("evidence_invalid"), case
    assert s.lease(RUN) == Lease(RUN, A, 0, 0, None, None)


def test_steal_of_an_unowned_run_is_evidence_invalid(s: Harness) -> None:
    """With no lease there is no owner to match; a pending claim is reported first."""
    assert s.steal(NEVER, B, 30_001, cross(A, 30_001)) == Rejected("evidence_invalid")
    assert s.lease(NEVER) is None
    assert s.claim(OTHER, A, 0) == Granted(0)
    assert s.steal(OTHER, B, 30_001, cross(A, 30_001)) == Rejected("already_claimed")
    assert s.steal(RUN, B, 30_001, cross(A, 30_001)) == Rejected("evidence_invalid")
    assert s.lease(RUN) is None


def test_steal_of_a_stale_owner_is_granted(s: Harness) -> None:
    """Matching evidence over an owner more than 30 000 ms stale grants a claim at now."""
    own(s, RUN, A, 0)
    assert s.steal(RUN, B, 30_001, cross(A, 30_001)) == Granted(30_001)
    assert s.lease(RUN) == Lease(RUN, A, 0, 0, B, 30_001)


def test_steal_by_a_same_host_observer(s: Harness) -> None:
    """same-host-pid-dead evidence from a process on the owner's host is accepted."""
    own(s, RUN, A, 0)
    assert s.steal(RUN, A2, 30_001, same(A, 30_001)) == Granted(30_001)


def test_rival_steal_is_already_claimed(s: Harness) -> None:
    """Once a steal is pending, a rival with matching evidence gets already_claimed."""
    own(s, RUN, A, 0)
    assert s.steal(RUN, B, 30_001, cross(A, 30_001)) == Granted(30_001)
    assert s.steal(RUN, C, 30_002, cross(A, 30_002)) == Rejected("already_claimed")
    assert s.steal(RUN, B, 30_002, cross(A, 30_002)) == Rejected("already_claimed")
    assert s.lease(RUN) == Lease(RUN, A, 0, 0, B, 30_001)


def test_steal_checks_evidence_before_a_pending_claim(s: Harness) -> None:
    """Evidence that does not match is evidence_invalid even when a claim is pending."""
    own(s, RUN, A, 0)
    assert s.steal(RUN, B, 30_001, cross(A, 30_001)) == Granted(30_001)
    assert s.steal(RUN, C, 30_002, cross(A, 30_001)) == Rejected("evidence_invalid")


@pytest.mark.parametrize(
    "claimant", [A, A2, A_RESTARTED, B], ids=["self", "same-host", "restart", "cross-host"]
)
def test_lease_expired_evidence_works_from_any_host(s: Harness, claimant: OwnerId) -> None:
    """lease-expired is host-neutral: any claimant, the owner itself included, may steal."""
    own(s, RUN, A, 0)
    assert s.steal(RUN, claimant, 30_000, expired(A, 30_000)) == Rejected("owner_live")
    assert s.steal(RUN, claimant, 30_001, expired(A, 30_001)) == Granted(30_001)
    assert s.lease(RUN) == Lease(RUN, A, 0, 0, claimant, 30_001)


# -- recover -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("case", "stale", "observer", "evidence"),
    [
        ("names someone else", B, C, cross(A, 31_001)),
        ("wrong checked_at", B, C, cross(B, 31_000)),
        ("same-host kind from another host", B, C, same(B, 31_001)),
        ("cross-host kind from the same host", B, OwnerId("host-b", 9, "n"), cross(B, 31_001)),
    ],
)
def test_recover_refuses_evidence_that_does_not_match(
    s: Harness, case: str, stale: OwnerId, observer: OwnerId, evidence: LivenessEvidence
) -> None:
    """Evidence must name the stale claimant, be taken at now, and fit the host relation."""
    assert s.claim(RUN, B, 1_000) == Granted(1_000)
    answer = s.recover(RUN, stale, 1_000, observer, 31_001, evidence)
    assert answer == Rejected("evidence_invalid"), case
    assert s.lease(RUN) == Lease(RUN, None, None, None, B, 1_000)


def test_recover_checks_evidence_before_the_claim(s: Harness) -> None:
    """Without a lease, mismatched evidence is still evidence_invalid, not claim_changed."""
    assert s.recover(NEVER, B, 1_000, C, 31_001, cross(B, 31_000)) == Rejected("evidence_invalid")


@pytest.mark.parametrize(
    ("case", "run_id", "stale", "granted_at"),
    [
        ("no lease", NEVER, B, 1_000),
        ("other grant time", RUN, B, 999),
        ("other claimant", RUN, C, 1_000),
        ("restarted claimant", RUN, OwnerId("host-b", 1, "nonce-b-next"), 1_000),
    ],
)
def test_recover_needs_the_exact_claim(
    s: Harness, case: str, run_id: str, stale: OwnerId, granted_at: int
) -> None:
    """A claim that is not exactly (claimant, grant time), or no lease at all, is claim_changed."""
    assert s.claim(RUN, B, 1_000) == Granted(1_000)
    observer = OwnerId("host-x", 1, "x")
    answer = s.recover(run_id, stale, granted_at, observer, 31_001, cross(stale, 31_001))
    assert answer == Rejected("claim_changed"), case
    assert s.lease(RUN) == Lease(RUN, None, None, None, B, 1_000)


@pytest.mark.parametrize("now", [1_000, 30_999, 31_000])
def test_recover_refuses_a_fresh_claim(s: Harness, now: int) -> None:
    """A claim at most 30 000 ms old is claim_fresh."""
    assert s.claim(RUN, B, 1_000) == Granted(1_000)
    assert s.recover(RUN, B, 1_000, C, now, cross(B, now)) == Rejected("claim_fresh")
    assert s.lease(RUN) == Lease(RUN, None, None, None, B, 1_000)


def test_recover_clears_a_stale_claim_and_frees_the_slot(s: Harness) -> None:
    """A claim more than 30 000 ms old is cleared, the lease pruned, and the run claimable."""
    assert s.claim(RUN, B, 1_000) == Granted(1_000)
    assert s.recover(RUN, B, 1_000, C, 31_001, cross(B, 31_001)) == Cleared()
    assert s.lease(RUN) is None
    assert s.recover(RUN, B, 1_000, C, 31_002, cross(B, 31_002)) == Rejected("claim_changed")
    assert s.activate(RUN, B, 1_000, 31_003) == Lost()
    assert s.claim(RUN, C, 31_004) == Granted(31_004)


@pytest.mark.parametrize(
    ("observer", "evidence_kind"),
    [
        (OwnerId("host-b", 2, "b2"), "same-host-pid-dead"),
        (C, "lease-expired"),
        (B, "lease-expired"),
    ],
    ids=["same-host", "expired-cross-host", "expired-self"],
)
def test_recover_accepts_every_matching_kind(
    s: Harness, observer: OwnerId, evidence_kind: Any
) -> None:
    """same-host-pid-dead from the claimant's host and lease-expired from anyone clear the claim."""
    assert s.claim(RUN, B, 1_000) == Granted(1_000)
    evidence = LivenessEvidence(B, 31_001, evidence_kind)
    assert s.recover(RUN, B, 1_000, observer, 31_001, evidence) == Cleared()


def test_recover_of_a_stealer_claim_keeps_the_owner(s: Harness) -> None:
    """Clearing a stale stealer's claim leaves the owner's lease as it was."""
    own(s, RUN, A, 0)
    assert s.steal(RUN, B, 30_001, cross(A, 30_001)) == Granted(30_001)
    assert s.recover(RUN, B, 30_001, C, 60_002, cross(B, 60_002)) == Cleared()
    assert s.lease(RUN) == Lease(RUN, A, 0, 0, None, None)


# -- guard -------------------------------------------------------------------


def test_guard_admits_only_the_owner(s: Harness) -> None:
    """guard passes for the owner and raises FenceLostError (code fence_lost) for anyone else."""
    with pytest.raises(FenceLostError) as raised:
        s.guard(NEVER, A)
    assert isinstance(raised.value, ConsensusError)
    assert raised.value.code == "fence_lost"
    assert s.claim(RUN, A, 0) == Granted(0)
    with pytest.raises(FenceLostError):
        s.guard(RUN, A)
    assert s.activate(RUN, A, 0, 0) == Promoted()
    assert s.guard(RUN, A) is None
    for stranger in (B, A2, A_RESTARTED):
        with pytest.raises(FenceLostError):
            s.guard(RUN, stranger)


def test_guard_follows_a_steal(s: Harness) -> None:
    """The old owner keeps the fence while a steal is pending and loses it once it activates."""
    own(s, RUN, A, 0)
    assert s.steal(RUN, B, 30_001, cross(A, 30_001)) == Granted(30_001)
    s.guard(RUN, A)
    with pytest.raises(FenceLostError):
        s.guard(RUN, B)
    assert s.activate(RUN, B, 30_001, 30_002) == Promoted()
    s.guard(RUN, B)
    with pytest.raises(FenceLostError):
        s.guard(RUN, A)


def test_guard_fails_after_release(s: Harness) -> None:
    """An owner that released its run no longer passes guard."""
    own(s, RUN, A, 0)
    s.release_ownership(RUN, A)
    with pytest.raises(FenceLostError):
        s.guard(RUN, A)


# -- rollback ----------------------------------------------------------------


def _unclaimed(s: Harness) -> None:
    pass


def _claimed(s: Harness) -> None:
    assert s.claim(RUN, A, 0) == Granted(0)


def _owned(s: Harness) -> None:
    own(s, RUN, A, 0)


def _stolen(s: Harness) -> None:
    own(s, RUN, A, 0)
    assert s.steal(RUN, B, 30_001, cross(A, 30_001)) == Granted(30_001)


ROLLBACK_CASES: list[tuple[str, Callable[[Harness], None], str, tuple[Any, ...], Any]] = [
    ("claim", _unclaimed, "claim", (RUN, A, 5), Granted(5)),
    ("activate", _claimed, "activate", (RUN, A, 0, 5), Promoted()),
    ("heartbeat", _owned, "heartbeat", (RUN, A, 5), Renewed(5)),
    ("reconfirm", _owned, "reconfirm", (RUN, A, 5), Renewed(5)),
    ("steal", _owned, "steal", (RUN, B, 30_001, cross(A, 30_001)), Granted(30_001)),
    ("activate-steal", _stolen, "activate", (RUN, B, 30_001, 30_002), Promoted()),
    ("recover", _claimed, "recover", (RUN, A, 0, C, 30_001, cross(A, 30_001)), Cleared()),
    ("release_claim", _claimed, "release_claim", (RUN, A, 0), None),
    ("release_claim-stealer", _stolen, "release_claim", (RUN, B, 30_001), None),
    ("release_ownership", _owned, "release_ownership", (RUN, A), None),
    ("release_ownership-stolen", _stolen, "release_ownership", (RUN, A), None),
]


@pytest.mark.parametrize(
    ("setup", "method", "args", "answer"),
    [case[1:] for case in ROLLBACK_CASES],
    ids=[case[0] for case in ROLLBACK_CASES],
)
def test_rolled_back_change_leaves_no_trace(
    s: Harness, setup: Callable[[Harness], None], method: str, args: tuple[Any, ...], answer: Any
) -> None:
    """A change made inside a transaction that rolls back is undone with it."""
    setup(s)
    before = s.lease(RUN)
    assert getattr(s.rolled_back, method)(*args) == answer
    assert s.lease(RUN) == before
    # The same change still works afterwards, committed.
    assert getattr(s, method)(*args) == answer


def test_several_changes_roll_back_together(s: Harness) -> None:
    """Claim, activate and heartbeat in one rolled-back transaction leave no lease."""

    def body(tx: Transaction) -> None:
        assert s.strategy.claim(tx, RUN, A, 0) == Granted(0)
        assert s.strategy.activate(tx, RUN, A, 0, 1) == Promoted()
        assert s.strategy.heartbeat(tx, RUN, A, 2) == Renewed(2)
        assert s.strategy.lease(tx, RUN) == Lease(RUN, A, 0, 2, None, None)

    s.transact_and_roll_back(body)
    assert s.lease(RUN) is None
    own(s, RUN, B, 10)

    def release_and_reclaim(tx: Transaction) -> None:
        s.strategy.release_ownership(tx, RUN, B)
        assert s.strategy.claim(tx, RUN, C, 11) == Granted(11)

    s.transact_and_roll_back(release_and_reclaim)
    assert s.lease(RUN) == Lease(RUN, B, 10, 10, None, None)


# -- agreement shape ---------------------------------------------------------


def test_empty_leases_are_never_reported(s: Harness) -> None:
    """Through a whole life cycle, a run with neither owner nor claim has no lease."""
    assert s.lease(RUN) is None
    own(s, RUN, A, 0)
    s.release_ownership(RUN, A)
    assert s.lease(RUN) is None
    assert s.claim(RUN, B, 1) == Granted(1)
    s.release_claim(RUN, B, 1)
    assert s.lease(RUN) is None
    assert s.claim(RUN, B, 2) == Granted(2)
    assert s.recover(RUN, B, 2, C, 30_003, cross(B, 30_003)) == Cleared()
    assert s.lease(RUN) is None


# -- the noop strategy -------------------------------------------------------


def test_noop_strategy_grants_nothing() -> None:
    """NoopConsensus rejects as unavailable, loses activation and renewal, and never fences."""
    noop = NoopConsensus()
    assert isinstance(noop, Consensus)
    with FakeTransaction() as tx:
        assert noop.claim(tx, RUN, A, 0) == Rejected("unavailable")
        assert noop.steal(tx, RUN, B, 30_001, cross(A, 30_001)) == Rejected("unavailable")
        assert noop.recover(tx, RUN, A, 0, C, 30_001, cross(A, 30_001)) == Rejected("unavailable")
        assert noop.activate(tx, RUN, A, 0, 0) == Lost()
        assert noop.heartbeat(tx, RUN, A, 0) == Lost()
        assert noop.reconfirm(tx, RUN, A, 0) == Lost()
        noop.release_claim(tx, RUN, A, 0)
        noop.release_ownership(tx, RUN, A)
        with pytest.raises(FenceLostError):
            noop.guard(tx, RUN, A)
        assert noop.lease(tx, RUN) is None
    assert tx.rollback_callbacks == []
    assert tx.commit_callbacks == []


def test_every_strategy_satisfies_the_protocol(s: Harness) -> None:
    """Each strategy under test is a runtime Consensus."""
    assert isinstance(s.strategy, Consensus)
