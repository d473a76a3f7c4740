"""Smoke tests of ModelConsensus and the model transaction it runs in."""

from __future__ import annotations

import pytest

from runstore import LivenessEvidence, OwnerId
from runstore.consensus import (
    Cleared,
    FenceLostError,
    Granted,
    Lease,
    Lost,
    Promoted,
    Rejected,
    Renewed,
)
from runstore.model import ModelConsensus, ModelTransaction, model_transaction
from runstore.model._leases import matches_evidence

A = OwnerId("host-a", 1, "nonce-a")
A2 = OwnerId("host-a", 9, "nonce-z")
B = OwnerId("host-b", 2, "nonce-b")


def owned_by_a(consensus: ModelConsensus) -> None:
    with model_transaction() as tx:
        assert consensus.claim(tx, "r", A, 0) == Granted(0)
        assert consensus.activate(tx, "r", A, 0, 5) == Promoted()


def test_claim_then_activate_spends_the_grant() -> None:
    """The exact grant activates once; presenting it again is Lost."""
    consensus = ModelConsensus()
    owned_by_a(consensus)
    with model_transaction() as tx:
        assert consensus.lease(tx, "r") == Lease("r", A, 0, 5, None, None)
        assert consensus.activate(tx, "r", A, 0, 6) == Lost()
        assert consensus.claim(tx, "r", B, 6) == Rejected("owner_held")


def test_a_raised_exception_rolls_every_change_back() -> None:
    """Leaving the block by an exception undoes the strategy's changes, newest first."""
    consensus = ModelConsensus()
    owned_by_a(consensus)

    def abort() -> None:
        with model_transaction() as tx:
            consensus.heartbeat(tx, "r", A, 100)
            consensus.release_ownership(tx, "r", A)
            raise KeyError("abort")

    with pytest.raises(KeyError):
        abort()
    assert consensus.leases() == (Lease("r", A, 0, 5, None, None),)


def test_rollback_only_undoes_without_an_exception() -> None:
    """rollback_only() makes a normal exit roll back."""
    consensus = ModelConsensus()
    with model_transaction() as tx:
        consensus.claim(tx, "r", A, 0)
        tx.rollback_only()
    assert consensus.leases() == ()
    assert tx.ended == "rollback"


def test_the_model_transaction_has_no_connection_and_ends_once() -> None:
    """connection raises RuntimeError; a finished transaction refuses callbacks."""
    tx = ModelTransaction()
    with pytest.raises(RuntimeError):
        _ = tx.connection
    tx.commit()
    with pytest.raises(RuntimeError):
        tx.on_rollback(lambda: None)


def test_heartbeat_never_moves_the_stamp_backwards() -> None:
    """heartbeat answers max(old, now); strangers are Lost."""
    consensus = ModelConsensus()
    owned_by_a(consensus)
    with model_transaction() as tx:
        assert consensus.heartbeat(tx, "r", A, 250) == Renewed(250)
        assert consensus.heartbeat(tx, "r", A, 150) == Renewed(250)
        assert consensus.heartbeat(tx, "r", B, 300) == Lost()
        assert consensus.heartbeat(tx, "unknown", A, 300) == Lost()


def test_steal_needs_matching_evidence_and_a_stale_owner() -> None:
    """owner_live at exactly the cutoff, granted one millisecond later."""
    consensus = ModelConsensus()
    owned_by_a(consensus)
    at_cutoff = LivenessEvidence(A, 30_005, "cross-host-unreachable-stale")
    past = LivenessEvidence(A, 30_006, "cross-host-unreachable-stale")
    with model_transaction() as tx:
        assert consensus.steal(tx, "r", B, 30_005, at_cutoff) == Rejected("owner_live")
        assert consensus.steal(tx, "r", B, 30_005, past) == Rejected("evidence_invalid")
        assert consensus.steal(tx, "r", B, 30_006, past) == Granted(30_006)
        assert consensus.steal(tx, "r", B, 30_006, past) == Rejected("already_claimed")
        assert consensus.reconfirm(tx, "r", A, 30_006) == Lost()
        assert consensus.heartbeat(tx, "r", A, 30_006) == Renewed(30_006)


def test_the_two_releases_are_split() -> None:
    """release_claim never touches ownership; release_ownership drops the pending claim."""
    consensus = ModelConsensus()
    owned_by_a(consensus)
    with model_transaction() as tx:
        consensus.steal(tx, "r", A, 30_006, LivenessEvidence(A, 30_006, "lease-expired"))
        consensus.release_claim(tx, "r", A, 30_006)
        assert consensus.lease(tx, "r") == Lease("r", A, 0, 5, None, None)
        consensus.steal(tx, "r", B, 30_006, LivenessEvidence(A, 30_006, "lease-expired"))
        consensus.release_ownership(tx, "r", B)
        assert consensus.lease(tx, "r") == Lease("r", A, 0, 5, B, 30_006)
        consensus.release_ownership(tx, "r", A)
        assert consensus.lease(tx, "r") is None
        with pytest.raises(FenceLostError):
            consensus.guard(tx, "r", A)


def test_recover_clears_only_an_exact_stale_claim() -> None:
    """claim_fresh at exactly 30 000 ms, claim_changed for another grant, then Cleared."""
    consensus = ModelConsensus()
    evidence = LivenessEvidence(A, 30_000, "lease-expired")
    later = LivenessEvidence(A, 30_001, "lease-expired")
    with model_transaction() as tx:
        consensus.claim(tx, "r", A, 0)
        assert consensus.recover(tx, "r", A, 0, B, 30_000, evidence) == Rejected("claim_fresh")
        assert consensus.recover(tx, "r", A, 1, B, 30_001, later) == Rejected("claim_changed")
        assert consensus.recover(tx, "r", A, 0, B, 30_001, later) == Cleared()
        assert consensus.lease(tx, "r") is None
        assert consensus.claim(tx, "r", B, 30_001) == Granted(30_001)


def test_evidence_kinds_bind_the_observer_host() -> None:
    """Same-host evidence needs the owner's host, cross-host another, lease-expired any."""
    same = LivenessEvidence(A, 7, "same-host-pid-dead")
    cross = LivenessEvidence(A, 7, "cross-host-unreachable-stale")
    expired = LivenessEvidence(A, 7, "lease-expired")
    assert matches_evidence(A, A2, 7, same)
    assert not matches_evidence(A, B, 7, same)
    assert matches_evidence(A, B, 7, cross)
    assert not matches_evidence(A, A2, 7, cross)
    assert matches_evidence(A, A, 7, expired)
    assert matches_evidence(A, B, 7, expired)
    assert not matches_evidence(A, B, 8, expired)
    assert not matches_evidence(B, B, 7, expired)
