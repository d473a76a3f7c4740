"""Liveness checks and takeover evidence (runstore.ownership, upstream §6)."""

from __future__ import annotations

import errno
import os

import pytest

from runstore import (
    Activated,
    Claimed,
    EvidenceRequired,
    HeartbeatFresh,
    LivenessEvidence,
    LivenessUnconfirmed,
    ManualClock,
    OwnerId,
    RunSnapshot,
    RunStore,
)
from runstore.ownership import (
    LivenessCheck,
    LivenessContext,
    LivenessProbe,
    lease_liveness,
    same_host_pid_probe,
    takeover_evidence,
)

ME = OwnerId("host-a", 4242, "me")
PEER_SAME_HOST = OwnerId("host-a", 777, "peer")
PEER_OTHER_HOST = OwnerId("host-b", 777, "peer")


def context(now_ms: int = 100_000, heartbeat_at_ms: int | None = 0) -> LivenessContext:
    return LivenessContext(ME, heartbeat_at_ms, now_ms)


def running_snapshot(owner: OwnerId, heartbeat_at_ms: int = 0) -> RunSnapshot:
    return RunSnapshot("running", owner, heartbeat_at_ms)


@pytest.fixture
def kill_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """Replace os.kill with a recorder that returns (the process exists)."""
    calls: list[tuple[int, int]] = []

    def fake_kill(pid: int, sig: int) -> None:
        calls.append((pid, sig))

    monkeypatch.setattr(os, "kill", fake_kill)
    return calls


# --- lease_liveness -------------------------------------------------------------


def test_lease_liveness_is_alive_up_to_exactly_the_cutoff() -> None:
    """A heartbeat exactly stale_after old is alive; one millisecond older is not."""
    check = lease_liveness()
    assert check(PEER_SAME_HOST, context(now_ms=30_000, heartbeat_at_ms=0)) is True
    assert check(PEER_SAME_HOST, context(now_ms=30_001, heartbeat_at_ms=0)) is False
    assert check(PEER_SAME_HOST, context(now_ms=29_999, heartbeat_at_ms=0)) is True


def test_lease_liveness_without_a_heartbeat_is_not_alive() -> None:
    """A run with no persisted heartbeat has no lease to be alive on."""
    assert lease_liveness()(PEER_SAME_HOST, context(heartbeat_at_ms=None)) is False


def test_lease_liveness_takes_its_own_cutoff() -> None:
    """stale_after_ms moves the cutoff; a heartbeat in the future is alive."""
    check = lease_liveness(5_000)
    assert check(PEER_SAME_HOST, context(now_ms=5_000, heartbeat_at_ms=0)) is True
    assert check(PEER_SAME_HOST, context(now_ms=5_001, heartbeat_at_ms=0)) is False
    assert check(PEER_SAME_HOST, context(now_ms=0, heartbeat_at_ms=10)) is True


@pytest.mark.parametrize("bad", [-1, 1.5, True, "30000", None])
def test_lease_liveness_refuses_a_malformed_cutoff(bad: object) -> None:
    """The cutoff is a non-negative int."""
    with pytest.raises(ValueError):
        lease_liveness(bad)  # type: ignore[arg-type]


def test_lease_liveness_never_probes_the_process(kill_calls: list[tuple[int, int]]) -> None:
    """The lease check answers from the heartbeat alone."""
    lease_liveness()(PEER_SAME_HOST, context())
    assert kill_calls == []


# --- same_host_pid_probe ----------------------------------------------------------


def test_probe_answers_not_alive_for_another_host_without_probing(
    kill_calls: list[tuple[int, int]],
) -> None:
    """A foreign owner is never probed; False lets the lease decide."""
    assert same_host_pid_probe(PEER_OTHER_HOST, context()) is False
    assert kill_calls == []


@pytest.mark.parametrize("pid", [0, -1, 2**53, 2**64, True, 1.0, "12"])
def test_probe_treats_an_invalid_pid_as_alive_without_probing(
    pid: object, kill_calls: list[tuple[int, int]]
) -> None:
    """A pid that is not a positive safe integer cannot be asked: alive."""
    owner = OwnerId("host-a", pid, "peer")  # type: ignore[arg-type]
    assert same_host_pid_probe(owner, context()) is True
    assert kill_calls == []


def test_probe_sends_signal_zero_and_a_return_means_alive(
    kill_calls: list[tuple[int, int]],
) -> None:
    """os.kill(pid, 0) returning means the process exists."""
    assert same_host_pid_probe(PEER_SAME_HOST, context()) is True
    assert kill_calls == [(777, 0)]


def test_probe_largest_safe_pid_is_asked(kill_calls: list[tuple[int, int]]) -> None:
    """2**53 - 1 is still a pid the probe asks about."""
    owner = OwnerId("host-a", 2**53 - 1, "peer")
    same_host_pid_probe(owner, context())
    assert kill_calls == [(2**53 - 1, 0)]


@pytest.mark.parametrize(
    ("raised", "alive"),
    [
        (ProcessLookupError(errno.ESRCH, "No such process"), False),
        (PermissionError(errno.EPERM, "Operation not permitted"), True),
        (OSError(errno.EINVAL, "Invalid argument"), True),
        (OSError(errno.EACCES, "Permission denied"), True),
        (OverflowError("signed integer is greater than maximum"), True),
        (RuntimeError("anything else"), True),
    ],
)
def test_probe_reads_only_process_lookup_error_as_death(
    monkeypatch: pytest.MonkeyPatch, raised: BaseException, alive: bool
) -> None:
    """ESRCH is the sole death answer; every other failure is read as life."""

    def fake_kill(pid: int, sig: int) -> None:
        raise raised

    monkeypatch.setattr(os, "kill", fake_kill)
    assert same_host_pid_probe(PEER_SAME_HOST, context()) is alive


def test_probe_of_this_process_is_alive_whatever_the_nonce() -> None:
    """The same pid with another nonce (an earlier incarnation) is always alive."""
    earlier_me = OwnerId(ME.host_id, os.getpid(), "an-earlier-nonce")
    assert same_host_pid_probe(earlier_me, context()) is True


def test_probe_ignores_the_heartbeat() -> None:
    """A live pid is alive however stale its lease; the probe asks the OS only."""
    me_again = OwnerId(ME.host_id, os.getpid(), "x")
    assert same_host_pid_probe(me_again, context(now_ms=10**9, heartbeat_at_ms=0)) is True


# --- takeover_evidence -------------------------------------------------------------


def test_evidence_from_a_dead_same_host_owner_is_pid_dead() -> None:
    """Same host and the check says gone: same-host-pid-dead, bound to now_ms."""
    evidence = takeover_evidence(
        running_snapshot(PEER_SAME_HOST), ME, 31_000, check=lambda owner, ctx: False
    )
    assert evidence == LivenessEvidence(PEER_SAME_HOST, 31_000, "same-host-pid-dead")


def test_evidence_from_another_host_is_cross_host_unreachable_stale() -> None:
    """A foreign owner (never probed) yields cross-host-unreachable-stale."""
    evidence = takeover_evidence(running_snapshot(PEER_OTHER_HOST), ME, 31_000)
    assert evidence == LivenessEvidence(PEER_OTHER_HOST, 31_000, "cross-host-unreachable-stale")


def test_no_evidence_while_the_check_says_alive() -> None:
    """A live owner gets no evidence: the takeover is refused before it is tried."""
    assert (
        takeover_evidence(running_snapshot(PEER_OTHER_HOST), ME, 31_000, check=lambda o, c: True)
        is None
    )
    alive_me = OwnerId(ME.host_id, os.getpid(), "old")
    assert takeover_evidence(running_snapshot(alive_me), ME, 31_000) is None


def test_no_evidence_for_a_run_without_an_owner() -> None:
    """Nobody to replace: a pending snapshot needs no evidence."""
    assert takeover_evidence(RunSnapshot("pending", None, None), ME, 5) is None


def test_lease_expired_evidence_on_request() -> None:
    """lease_expired=True asks for the host-neutral kind, still gated by the check."""
    snapshot = running_snapshot(OwnerId(ME.host_id, os.getpid(), "old"), heartbeat_at_ms=0)
    assert takeover_evidence(snapshot, ME, 31_000, lease_expired=True) is None
    evidence = takeover_evidence(snapshot, ME, 31_000, check=lease_liveness(), lease_expired=True)
    assert evidence == LivenessEvidence(snapshot.owner, 31_000, "lease-expired")
    assert (
        takeover_evidence(snapshot, ME, 30_000, check=lease_liveness(), lease_expired=True) is None
    )


def test_evidence_check_sees_claimant_heartbeat_and_now() -> None:
    """The check is asked about the snapshot's owner with the full context."""
    seen: list[tuple[OwnerId, LivenessContext]] = []

    def check(owner: OwnerId, ctx: LivenessContext) -> bool:
        seen.append((owner, ctx))
        return True

    takeover_evidence(running_snapshot(PEER_SAME_HOST, 1234), ME, 40_000, check=check)
    assert seen == [(PEER_SAME_HOST, LivenessContext(ME, 1234, 40_000))]


def test_checks_and_probes_fit_their_protocols() -> None:
    """The shipped checks are LivenessChecks; a probe can be built on takeover_evidence."""
    checks: list[LivenessCheck] = [lease_liveness(), same_host_pid_probe]

    def probe(
        expected_owner: OwnerId, claimant: OwnerId, checked_at_ms: int
    ) -> LivenessEvidence | None:
        snapshot = RunSnapshot("running", expected_owner, 0)
        return takeover_evidence(snapshot, claimant, checked_at_ms, check=checks[0])

    typed: LivenessProbe = probe
    assert typed(PEER_OTHER_HOST, ME, 30_001) == LivenessEvidence(
        PEER_OTHER_HOST, 30_001, "cross-host-unreachable-stale"
    )
    assert typed(PEER_OTHER_HOST, ME, 30_000) is None


# --- evidence against the stores -----------------------------------------------------


def own(store: RunStore, run_id: str, owner: OwnerId, now_ms: int) -> None:
    store.create(run_id, "{}")
    assert store.claim_and_own(run_id, store.get(run_id), owner, now_ms) == Activated()


def test_lease_expired_evidence_is_accepted_across_hosts(
    store: RunStore, clock: ManualClock
) -> None:
    """lease-expired from another host takes a stale run; the row moves to the claimant."""
    own(store, "r", PEER_OTHER_HOST, 0)
    clock.set(30_001)
    row = store.get("r")
    evidence = takeover_evidence(row, ME, 30_001, check=lease_liveness(), lease_expired=True)
    assert evidence is not None
    assert store.claim_and_own("r", row, ME, 30_001, evidence) == Activated()
    assert store.get("r").owner == ME


def test_evidence_cannot_take_a_fresh_lease(store: RunStore, clock: ManualClock) -> None:
    """Matching evidence on a heartbeat exactly 30 000 ms old is still HeartbeatFresh."""
    own(store, "r", PEER_OTHER_HOST, 0)
    clock.set(30_000)
    row = store.get("r")
    evidence = LivenessEvidence(PEER_OTHER_HOST, 30_000, "lease-expired")
    assert store.claim_and_own("r", row, ME, 30_000, evidence) == HeartbeatFresh()
    assert store.steal("r", row, ME, 30_000, evidence) == HeartbeatFresh()


def test_evidence_about_another_owner_is_unconfirmed(store: RunStore, clock: ManualClock) -> None:
    """Evidence naming someone other than the snapshot's owner is not evidence."""
    own(store, "r", PEER_OTHER_HOST, 0)
    clock.set(30_001)
    row = store.get("r")
    wrong = LivenessEvidence(OwnerId("host-b", 777, "someone-else"), 30_001, "lease-expired")
    assert store.steal("r", row, ME, 30_001, wrong) == LivenessUnconfirmed()
    assert store.claim_and_own("r", row, ME, 30_001, wrong) == EvidenceRequired()


def test_evidence_is_bound_to_the_instant_of_its_call(store: RunStore, clock: ManualClock) -> None:
    """Evidence built for now_ms is refused one millisecond later, accepted at now_ms."""
    own(store, "r", PEER_OTHER_HOST, 0)
    clock.set(30_002)
    row = store.get("r")
    evidence = takeover_evidence(row, ME, 30_001)
    assert evidence is not None
    assert store.steal("r", row, ME, 30_002, evidence) == LivenessUnconfirmed()
    assert store.steal("r", row, ME, 30_001, evidence) == Claimed(30_001)


def test_same_host_kind_is_refused_across_hosts(store: RunStore, clock: ManualClock) -> None:
    """The kind takeover_evidence picks is the one the store admits for the host relation."""
    own(store, "r", PEER_SAME_HOST, 0)
    clock.set(30_001)
    row = store.get("r")
    foreigner = OwnerId("host-z", 1, "z")
    wrong_kind = LivenessEvidence(PEER_SAME_HOST, 30_001, "same-host-pid-dead")
    assert store.steal("r", row, foreigner, 30_001, wrong_kind) == LivenessUnconfirmed()
    right = takeover_evidence(row, ME, 30_001, check=lambda owner, ctx: False)
    assert right is not None
    assert right.kind == "same-host-pid-dead"
    assert store.claim_and_own("r", row, ME, 30_001, right) == Activated()


def test_the_contracts_ownership_names_are_exported() -> None:
    """runstore.ownership exports the contract's names, each once, in isort order."""
    import runstore.ownership as ownership

    for name in [
        "LivenessCheck",
        "LivenessProbe",
        "LivenessContext",
        "lease_liveness",
        "same_host_pid_probe",
        "takeover_evidence",
        "supervise",
        "asupervise",
        "LeaseLost",
        "Supervision",
    ]:
        assert name in ownership.__all__, name
    assert len(set(ownership.__all__)) == len(ownership.__all__)

    def isort_style(name: str) -> tuple[int, str]:  # constants, classes, functions
        return (0 if name.isupper() else 1 if name[0].isupper() else 2, name)

    assert ownership.__all__ == sorted(ownership.__all__, key=isort_style)
    public = {
        name
        for name, value in vars(ownership).items()
        if not name.startswith("_") and not isinstance(value, type(ownership))
    }
    assert public == set(ownership.__all__)
