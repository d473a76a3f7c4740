"""The child process of ``test_telemetry.py``: drives every outcome, reports what was recorded.

OpenTelemetry's global providers are set once per process, so the telemetry
tests run here, in a process of their own: ``runstore`` is imported and a
store opened first, and only then are the SDK's providers set (with the
in-memory span exporter and metric reader), as an application that
configures telemetry after importing its libraries would.

The configuration arrives as JSON on stdin (never on the command line: a
database URL there would show a password to anyone listing processes):
``{"target": ":memory:" | a file path | a PostgreSQL URL, "fast_path": bool
| null, "plant": null | a planted defect}``. The answer is one JSON object on
stdout: per scenario, the counters that moved (as ``name{key=value,...}``
with their increase) and the spans its measured call finished; plus the
whole export of every span and metric point, for the secret scan.

A scenario prepares what it needs (its own runs, named after it), then
returns the one call that is measured. Its expectation sits beside it:
the span name, the outcome, and exactly the counters that must move.
"""

from __future__ import annotations

import contextvars
import json
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any, NamedTuple

import runstore
from runstore import (
    LivenessEvidence,
    ManualClock,
    OwnerId,
    RunSnapshot,
    TransitionGuard,
)
from runstore.attempts import Attempt, AttemptId, AttemptPatch, AttemptStore, FinishAttempt
from runstore.consensus import SqlConsensus
from runstore.ownership import LeaseLost, supervise, supervise_many
from runstore.sqlite import Fault, FaultPlan

OWNER_A = OwnerId("host-a", 101, "owner-a")
OWNER_B = OwnerId("host-a", 202, "owner-b")
OWNER_C = OwnerId("host-c", 303, "owner-c")
PENDING = RunSnapshot("pending", None, None)

#: Markers that must never reach telemetry: run state, attempt values, the
#: database password.
STATE_SECRET = "STATE-SECRET-7f3a"
ATTEMPT_SECRET = "ATTEMPT-SECRET-91bc"
URL_SECRET = "URL-SECRET-c0d4"
SECRETS = (STATE_SECRET, ATTEMPT_SECRET, URL_SECRET)
STATE = json.dumps({"token": STATE_SECRET, "step": 0})

STALE = 31_000
BACKENDS = ("sqlite", "postgresql")


class SignalClock(ManualClock):
    """A ManualClock that, when armed, sends this process SIGINT from its next
    reading: a real KeyboardInterrupt arriving in the middle of an operation."""

    armed = False

    def now_ms(self) -> int:
        if self.armed:
            self.armed = False
            signal.raise_signal(signal.SIGINT)
        return super().now_ms()


class StallingConsensus(SqlConsensus):
    """``SqlConsensus`` whose heartbeat, when armed, first runs a statement
    that does not end by itself (a stuck disk, a lock never granted), so that
    ``store.interrupt()`` has something to abort."""

    armed = threading.Event()
    started = threading.Event()

    def heartbeat(self, tx: Any, run_id: str, owner: OwnerId, now_ms: int) -> Any:
        if self.armed.is_set():
            self.armed.clear()
            self.started.set()
            if tx.dialect == "postgresql":
                tx.connection.execute("SELECT pg_sleep(60)")
            else:
                tx.connection.execute(
                    "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) "
                    "SELECT count(*) FROM n WHERE i < 0"
                ).fetchone()
        return super().heartbeat(tx, run_id, owner, now_ms)


class Ctx:
    """What a scenario works with: the store, its clock, the attempt store."""

    def __init__(self, store: Any, clock: SignalClock, config: dict[str, Any]) -> None:
        self.store = store
        self.clock = clock
        self.attempts = AttemptStore(store)
        self.config = config
        self.name = ""
        self._stalling: Any = None

    @property
    def now(self) -> int:
        return self.clock.now_ms()

    def run(self, suffix: str = "") -> str:
        return f"{self.name}{suffix}"

    def created(self, suffix: str = "") -> str:
        rid = self.run(suffix)
        self.store.create(rid, STATE)
        return rid

    def running(self, owner: OwnerId = OWNER_A, suffix: str = "") -> Any:
        rid = self.created(suffix)
        assert type(self.store.claim_and_own(rid, PENDING, owner, self.now)).__name__ == (
            "Activated"
        )
        return self.store.get(rid)

    def stalling(self) -> Any:
        """A second store on the same database whose strategy can stall."""
        if self._stalling is None:
            self._stalling = open_store(self.config, self.clock, StallingConsensus())
        return self._stalling


def evidence(expected: OwnerId, claimant: OwnerId, now: int) -> LivenessEvidence:
    kind = (
        "same-host-pid-dead"
        if expected.host_id == claimant.host_id
        else "cross-host-unreachable-stale"
    )
    return LivenessEvidence(expected, now, kind)


class Scenario(NamedTuple):
    name: str
    prepare: Callable[[Ctx], Callable[[], object]]
    span: str
    outcome: str
    counters: dict[str, int]
    backends: tuple[str, ...]


SCENARIOS: list[Scenario] = []


def scenario(
    name: str,
    span: str,
    outcome: str,
    counters: dict[str, int] | None = None,
    backends: tuple[str, ...] = BACKENDS,
) -> Callable[[Callable[[Ctx], Callable[[], object]]], Callable[[Ctx], Callable[[], object]]]:
    def register(
        prepare: Callable[[Ctx], Callable[[], object]],
    ) -> Callable[[Ctx], Callable[[], object]]:
        SCENARIOS.append(Scenario(name, prepare, span, outcome, counters or {}, backends))
        return prepare

    return register


def claims(op: str, outcome: str, amount: int = 1) -> dict[str, int]:
    return {f"flows_run_claims{{op={op},outcome={outcome}}}": amount}


def beats(outcome: str, amount: int = 1) -> dict[str, int]:
    return {f"flows_run_heartbeats{{outcome={outcome}}}": amount}


def takeovers(op: str, evidence: str) -> dict[str, int]:
    return {f"runstore_takeovers{{evidence={evidence},op={op}}}": 1}


def moves(outcome: str, to: str) -> dict[str, int]:
    return {f"flows_run_transitions{{outcome={outcome},to={to}}}": 1}


def interrupted(ctx: Ctx, call: Callable[[], object]) -> Callable[[], object]:
    """``call`` with a SIGINT arriving at its first store clock reading
    (its own arguments are read before it is armed)."""

    def act() -> object:
        ctx.clock.armed = True
        try:
            return call()
        finally:
            ctx.clock.armed = False

    return act


# --- claim ------------------------------------------------------------------------


@scenario("claim-claimed", "RunStore.claim", "claimed", claims("claim", "claimed"))
def _(ctx: Ctx) -> Callable[[], object]:
    rid = ctx.created()
    return lambda: ctx.store.claim(rid, PENDING, OWNER_A, ctx.now)


@scenario("claim-not-found", "RunStore.claim", "not_found", claims("claim", "not_found"))
def _(ctx: Ctx) -> Callable[[], object]:
    return lambda: ctx.store.claim(ctx.run(), PENDING, OWNER_A, ctx.now)


@scenario(
    "claim-already-claimed", "RunStore.claim", "already_claimed", claims("claim", "already_claimed")
)
def _(ctx: Ctx) -> Callable[[], object]:
    rid = ctx.created()
    ctx.store.claim(rid, PENDING, OWNER_A, ctx.now)
    return lambda: ctx.store.claim(rid, PENDING, OWNER_B, ctx.now)


@scenario(
    "claim-heartbeat-fresh", "RunStore.claim", "heartbeat_fresh", claims("claim", "heartbeat_fresh")
)
def _(ctx: Ctx) -> Callable[[], object]:
    row = ctx.running()
    return lambda: ctx.store.claim(row.run_id, row.snapshot, OWNER_B, ctx.now)


@scenario(
    "claim-snapshot-changed",
    "RunStore.claim",
    "snapshot_changed",
    claims("claim", "snapshot_changed"),
)
def _(ctx: Ctx) -> Callable[[], object]:
    rid = ctx.created()
    suspended = RunSnapshot("suspended", None, None)
    return lambda: ctx.store.claim(rid, suspended, OWNER_A, ctx.now)


@scenario("claim-failure", "RunStore.claim", "failure", claims("claim", "failure"))
def _(ctx: Ctx) -> Callable[[], object]:
    return lambda: ctx.store.claim("", PENDING, OWNER_A, ctx.now)


@scenario("claim-interrupt", "RunStore.claim", "interrupt", claims("claim", "interrupt"))
def _(ctx: Ctx) -> Callable[[], object]:
    rid = ctx.created()
    now = ctx.now
    return interrupted(ctx, lambda: ctx.store.claim(rid, PENDING, OWNER_A, now))


# --- claim_and_own ------------------------------------------------------------------


@scenario(
    "claim-and-own-activated",
    "RunStore.claim_and_own",
    "activated",
    claims("claim_and_own", "activated"),
)
def _(ctx: Ctx) -> Callable[[], object]:
    rid = ctx.created()
    return lambda: ctx.store.claim_and_own(rid, PENDING, OWNER_A, ctx.now)


@scenario(
    "claim-and-own-not-found",
    "RunStore.claim_and_own",
    "not_found",
    claims("claim_and_own", "not_found"),
)
def _(ctx: Ctx) -> Callable[[], object]:
    return lambda: ctx.store.claim_and_own(ctx.run(), PENDING, OWNER_A, ctx.now)


@scenario(
    "claim-and-own-already-claimed",
    "RunStore.claim_and_own",
    "already_claimed",
    claims("claim_and_own", "already_claimed"),
)
def _(ctx: Ctx) -> Callable[[], object]:
    rid = ctx.created()
    ctx.store.claim(rid, PENDING, OWNER_A, ctx.now)
    return lambda: ctx.store.claim_and_own(rid, PENDING, OWNER_B, ctx.now)


@scenario(
    "claim-and-own-heartbeat-fresh",
    "RunStore.claim_and_own",
    "heartbeat_fresh",
    claims("claim_and_own", "heartbeat_fresh"),
)
def _(ctx: Ctx) -> Callable[[], object]:
    row = ctx.running()
    return lambda: ctx.store.claim_and_own(row.run_id, row.snapshot, OWNER_B, ctx.now)


@scenario(
    "claim-and-own-snapshot-changed",
    "RunStore.claim_and_own",
    "snapshot_changed",
    claims("claim_and_own", "snapshot_changed"),
)
def _(ctx: Ctx) -> Callable[[], object]:
    rid = ctx.created()
    suspended = RunSnapshot("suspended", None, None)
    return lambda: ctx.store.claim_and_own(rid, suspended, OWNER_A, ctx.now)


@scenario(
    "claim-and-own-evidence-required",
    "RunStore.claim_and_own",
    "evidence_required",
    claims("claim_and_own", "evidence_required"),
)
def _(ctx: Ctx) -> Callable[[], object]:
    row = ctx.running()
    ctx.clock.advance(STALE)
    return lambda: ctx.store.claim_and_own(row.run_id, row.snapshot, OWNER_B, ctx.now)


@scenario(
    "claim-and-own-takeover",
    "RunStore.claim_and_own",
    "activated",
    {**claims("claim_and_own", "activated"), **takeovers("claim_and_own", "same-host-pid-dead")},
)
def _(ctx: Ctx) -> Callable[[], object]:
    """The documented takeover: a stale owner's run, taken with evidence."""
    row = ctx.running()
    ctx.clock.advance(STALE)
    now = ctx.now
    proof = evidence(OWNER_A, OWNER_B, now)
    return lambda: ctx.store.claim_and_own(row.run_id, row.snapshot, OWNER_B, now, proof)


@scenario(
    "claim-and-own-takeover-lease-expired",
    "RunStore.claim_and_own",
    "activated",
    {**claims("claim_and_own", "activated"), **takeovers("claim_and_own", "lease-expired")},
)
def _(ctx: Ctx) -> Callable[[], object]:
    row = ctx.running()
    ctx.clock.advance(STALE)
    now = ctx.now
    proof = LivenessEvidence(OWNER_A, now, "lease-expired")
    return lambda: ctx.store.claim_and_own(row.run_id, row.snapshot, OWNER_C, now, proof)


@scenario(
    "claim-and-own-re-own",
    "RunStore.claim_and_own",
    "activated",
    claims("claim_and_own", "activated"),
)
def _(ctx: Ctx) -> Callable[[], object]:
    """Re-owning one's own stale run displaces nobody: no takeover."""
    row = ctx.running()
    ctx.clock.advance(STALE)
    return lambda: ctx.store.claim_and_own(row.run_id, row.snapshot, OWNER_A, ctx.now)


@scenario(
    "claim-and-own-refused-with-evidence",
    "RunStore.claim_and_own",
    "heartbeat_fresh",
    claims("claim_and_own", "heartbeat_fresh"),
)
def _(ctx: Ctx) -> Callable[[], object]:
    """Evidence against a fresh heartbeat: refused, and no takeover counted."""
    row = ctx.running()
    now = ctx.now
    proof = evidence(OWNER_A, OWNER_B, now)
    return lambda: ctx.store.claim_and_own(row.run_id, row.snapshot, OWNER_B, now, proof)


@scenario(
    "claim-and-own-failure",
    "RunStore.claim_and_own",
    "failure",
    claims("claim_and_own", "failure"),
)
def _(ctx: Ctx) -> Callable[[], object]:
    return lambda: ctx.store.claim_and_own(ctx.run(), "not a snapshot", OWNER_A, ctx.now)


@scenario(
    "claim-and-own-interrupt",
    "RunStore.claim_and_own",
    "interrupt",
    claims("claim_and_own", "interrupt"),
)
def _(ctx: Ctx) -> Callable[[], object]:
    rid = ctx.created()
    now = ctx.now
    return interrupted(ctx, lambda: ctx.store.claim_and_own(rid, PENDING, OWNER_A, now))


# --- activate, abandon_claim ------------------------------------------------------------


@scenario("activate-activated", "RunStore.activate", "activated", claims("activate", "activated"))
def _(ctx: Ctx) -> Callable[[], object]:
    rid = ctx.created()
    now = ctx.now
    ctx.store.claim(rid, PENDING, OWNER_A, now)
    return lambda: ctx.store.activate(rid, OWNER_A, now, PENDING)


@scenario(
    "activate-claim-lost", "RunStore.activate", "claim_lost", claims("activate", "claim_lost")
)
def _(ctx: Ctx) -> Callable[[], object]:
    return lambda: ctx.store.activate(ctx.run(), OWNER_A, ctx.now, PENDING)


@scenario(
    "activate-snapshot-changed",
    "RunStore.activate",
    "snapshot_changed",
    claims("activate", "snapshot_changed"),
)
def _(ctx: Ctx) -> Callable[[], object]:
    rid = ctx.created()
    now = ctx.now
    ctx.store.claim(rid, PENDING, OWNER_A, now)
    suspended = RunSnapshot("suspended", None, None)
    return lambda: ctx.store.activate(rid, OWNER_A, now, suspended)


@scenario("activate-failure", "RunStore.activate", "failure", claims("activate", "failure"))
def _(ctx: Ctx) -> Callable[[], object]:
    return lambda: ctx.store.activate(ctx.run(), OWNER_A, -1, PENDING)


@scenario(
    "abandon-claim-abandoned",
    "RunStore.abandon_claim",
    "abandoned",
    claims("abandon_claim", "abandoned"),
)
def _(ctx: Ctx) -> Callable[[], object]:
    rid = ctx.created()
    now = ctx.now
    ctx.store.claim(rid, PENDING, OWNER_A, now)
    return lambda: ctx.store.abandon_claim(rid, OWNER_A, now)


@scenario(
    "abandon-claim-claim-lost",
    "RunStore.abandon_claim",
    "claim_lost",
    claims("abandon_claim", "claim_lost"),
)
def _(ctx: Ctx) -> Callable[[], object]:
    return lambda: ctx.store.abandon_claim(ctx.run(), OWNER_A, ctx.now)


@scenario(
    "abandon-claim-failure",
    "RunStore.abandon_claim",
    "failure",
    claims("abandon_claim", "failure"),
)
def _(ctx: Ctx) -> Callable[[], object]:
    return lambda: ctx.store.abandon_claim(ctx.run(), "not an owner", ctx.now)


# --- recover_claim -----------------------------------------------------------------------


def _stale_claim(ctx: Ctx) -> tuple[str, int]:
    rid = ctx.created()
    claimed_at = ctx.now
    ctx.store.claim(rid, PENDING, OWNER_A, claimed_at)
    ctx.clock.advance(STALE)
    return rid, claimed_at


@scenario(
    "recover-claim-recovered",
    "RunStore.recover_claim",
    "recovered",
    claims("recover_claim", "recovered"),
)
def _(ctx: Ctx) -> Callable[[], object]:
    rid, at = _stale_claim(ctx)
    now = ctx.now
    proof = evidence(OWNER_A, OWNER_B, now)
    return lambda: ctx.store.recover_claim(rid, OWNER_A, at, OWNER_B, now, proof)


@scenario(
    "recover-claim-not-found",
    "RunStore.recover_claim",
    "not_found",
    claims("recover_claim", "not_found"),
)
def _(ctx: Ctx) -> Callable[[], object]:
    now = ctx.now
    proof = evidence(OWNER_A, OWNER_B, now)
    return lambda: ctx.store.recover_claim(ctx.run(), OWNER_A, 0, OWNER_B, now, proof)


@scenario(
    "recover-claim-claim-fresh",
    "RunStore.recover_claim",
    "claim_fresh",
    claims("recover_claim", "claim_fresh"),
)
def _(ctx: Ctx) -> Callable[[], object]:
    rid = ctx.created()
    now = ctx.now
    ctx.store.claim(rid, PENDING, OWNER_A, now)
    proof = evidence(OWNER_A, OWNER_B, now)
    return lambda: ctx.store.recover_claim(rid, OWNER_A, now, OWNER_B, now, proof)


@scenario(
    "recover-claim-claim-changed",
    "RunStore.recover_claim",
    "claim_changed",
    claims("recover_claim", "claim_changed"),
)
def _(ctx: Ctx) -> Callable[[], object]:
    rid = ctx.created()
    now = ctx.now
    proof = evidence(OWNER_A, OWNER_B, now)
    return lambda: ctx.store.recover_claim(rid, OWNER_A, now, OWNER_B, now, proof)


@scenario(
    "recover-claim-liveness-unconfirmed",
    "RunStore.recover_claim",
    "liveness_unconfirmed",
    claims("recover_claim", "liveness_unconfirmed"),
)
def _(ctx: Ctx) -> Callable[[], object]:
    rid, at = _stale_claim(ctx)
    now = ctx.now
    wrong = evidence(OWNER_C, OWNER_B, now)
    return lambda: ctx.store.recover_claim(rid, OWNER_A, at, OWNER_B, now, wrong)


@scenario(
    "recover-claim-failure",
    "RunStore.recover_claim",
    "failure",
    claims("recover_claim", "failure"),
)
def _(ctx: Ctx) -> Callable[[], object]:
    now = ctx.now
    return lambda: ctx.store.recover_claim(ctx.run(), OWNER_A, 0, OWNER_B, now, "no evidence")


# --- steal ----------------------------------------------------------------------------------


@scenario(
    "steal-claimed",
    "RunStore.steal",
    "claimed",
    {**claims("steal", "claimed"), **takeovers("steal", "cross-host-unreachable-stale")},
)
def _(ctx: Ctx) -> Callable[[], object]:
    row = ctx.running()
    ctx.clock.advance(STALE)
    now = ctx.now
    proof = evidence(OWNER_A, OWNER_C, now)
    return lambda: ctx.store.steal(row.run_id, row.snapshot, OWNER_C, now, proof)


@scenario("steal-self", "RunStore.steal", "claimed", claims("steal", "claimed"))
def _(ctx: Ctx) -> Callable[[], object]:
    """An owner stealing its own stale run displaces nobody: no takeover."""
    row = ctx.running()
    ctx.clock.advance(STALE)
    now = ctx.now
    proof = LivenessEvidence(OWNER_A, now, "lease-expired")
    return lambda: ctx.store.steal(row.run_id, row.snapshot, OWNER_A, now, proof)


@scenario(
    "steal-liveness-unconfirmed",
    "RunStore.steal",
    "liveness_unconfirmed",
    claims("steal", "liveness_unconfirmed"),
)
def _(ctx: Ctx) -> Callable[[], object]:
    row = ctx.running()
    ctx.clock.advance(STALE)
    now = ctx.now
    wrong = evidence(OWNER_B, OWNER_C, now)
    return lambda: ctx.store.steal(row.run_id, row.snapshot, OWNER_C, now, wrong)


@scenario(
    "steal-heartbeat-fresh", "RunStore.steal", "heartbeat_fresh", claims("steal", "heartbeat_fresh")
)
def _(ctx: Ctx) -> Callable[[], object]:
    row = ctx.running()
    now = ctx.now
    proof = evidence(OWNER_A, OWNER_C, now)
    return lambda: ctx.store.steal(row.run_id, row.snapshot, OWNER_C, now, proof)


@scenario(
    "steal-snapshot-changed",
    "RunStore.steal",
    "snapshot_changed",
    claims("steal", "snapshot_changed"),
)
def _(ctx: Ctx) -> Callable[[], object]:
    row = ctx.running()
    ctx.clock.advance(STALE)
    ctx.store.heartbeat(row.run_id, OWNER_A, ctx.now)
    ctx.clock.advance(STALE)
    now = ctx.now
    proof = evidence(OWNER_A, OWNER_C, now)
    return lambda: ctx.store.steal(row.run_id, row.snapshot, OWNER_C, now, proof)


@scenario(
    "steal-already-claimed",
    "RunStore.steal",
    "already_claimed",
    claims("steal", "already_claimed"),
)
def _(ctx: Ctx) -> Callable[[], object]:
    row = ctx.running()
    ctx.clock.advance(STALE)
    now = ctx.now
    ctx.store.steal(row.run_id, row.snapshot, OWNER_C, now, evidence(OWNER_A, OWNER_C, now))
    proof = evidence(OWNER_A, OWNER_B, now)
    return lambda: ctx.store.steal(row.run_id, row.snapshot, OWNER_B, now, proof)


@scenario("steal-not-found", "RunStore.steal", "not_found", claims("steal", "not_found"))
def _(ctx: Ctx) -> Callable[[], object]:
    now = ctx.now
    gone = RunSnapshot("running", OWNER_A, now - STALE)
    proof = evidence(OWNER_A, OWNER_C, now)
    return lambda: ctx.store.steal(ctx.run(), gone, OWNER_C, now, proof)


@scenario("steal-failure", "RunStore.steal", "failure", claims("steal", "failure"))
def _(ctx: Ctx) -> Callable[[], object]:
    row = ctx.running()
    return lambda: ctx.store.steal(row.run_id, row.snapshot, OWNER_C, ctx.now, "no evidence")


@scenario("steal-interrupt", "RunStore.steal", "interrupt", claims("steal", "interrupt"))
def _(ctx: Ctx) -> Callable[[], object]:
    row = ctx.running()
    ctx.clock.advance(STALE)
    now = ctx.now
    proof = evidence(OWNER_A, OWNER_C, now)
    return interrupted(ctx, lambda: ctx.store.steal(row.run_id, row.snapshot, OWNER_C, now, proof))


# --- heartbeat and reconfirm -------------------------------------------------------------


for _method in ("heartbeat", "reconfirm"):

    @scenario(f"{_method}-updated", f"RunStore.{_method}", "updated", beats("updated"))
    def _(ctx: Ctx, method: str = _method) -> Callable[[], object]:
        row = ctx.running()
        return lambda: getattr(ctx.store, method)(row.run_id, OWNER_A, ctx.now)

    @scenario(f"{_method}-fence-lost", f"RunStore.{_method}", "fence_lost", beats("fence_lost"))
    def _(ctx: Ctx, method: str = _method) -> Callable[[], object]:
        row = ctx.running()
        return lambda: getattr(ctx.store, method)(row.run_id, OWNER_B, ctx.now)

    @scenario(f"{_method}-not-found", f"RunStore.{_method}", "not_found", beats("not_found"))
    def _(ctx: Ctx, method: str = _method) -> Callable[[], object]:
        return lambda: getattr(ctx.store, method)(ctx.run(), OWNER_A, ctx.now)

    @scenario(f"{_method}-failure", f"RunStore.{_method}", "failure", beats("failure"))
    def _(ctx: Ctx, method: str = _method) -> Callable[[], object]:
        return lambda: getattr(ctx.store, method)(ctx.run(), OWNER_A, "now")

    @scenario(f"{_method}-interrupt", f"RunStore.{_method}", "interrupt", beats("interrupt"))
    def _(ctx: Ctx, method: str = _method) -> Callable[[], object]:
        row = ctx.running()
        call = getattr(ctx.store, method)
        now = ctx.now
        return interrupted(ctx, lambda: call(row.run_id, OWNER_A, now))


@scenario("heartbeat-interrupted-statement", "RunStore.heartbeat", "interrupt", beats("interrupt"))
def _(ctx: Ctx) -> Callable[[], object]:
    """``store.interrupt()`` aborts the statement a heartbeat is running."""
    row = ctx.running()
    stalling = ctx.stalling()

    def act() -> object:
        answers: list[object] = []

        def beat() -> None:
            try:
                answers.append(stalling.heartbeat(row.run_id, OWNER_A, ctx.now))
            except BaseException as error:
                answers.append(error)

        StallingConsensus.started.clear()
        StallingConsensus.armed.set()
        # The worker carries this thread's context: its span is the work's child.
        worker = threading.Thread(target=contextvars.copy_context().run, args=(beat,))
        worker.start()
        assert StallingConsensus.started.wait(10)
        while worker.is_alive():
            stalling.interrupt()
            worker.join(0.01)
        (answer,) = answers
        if isinstance(answer, BaseException):
            raise answer
        return answer

    return act


# --- transition_owned -------------------------------------------------------------------


@scenario(
    "transition-transitioned",
    "RunStore.transition_owned",
    "transitioned",
    moves("transitioned", "completed"),
)
def _(ctx: Ctx) -> Callable[[], object]:
    row = ctx.running()
    return lambda: ctx.store.transition_owned(row.run_id, OWNER_A, "completed", STATE)


@scenario(
    "transition-fence-lost",
    "RunStore.transition_owned",
    "fence_lost",
    moves("fence_lost", "failed"),
)
def _(ctx: Ctx) -> Callable[[], object]:
    row = ctx.running()
    return lambda: ctx.store.transition_owned(row.run_id, OWNER_B, "failed")


@scenario(
    "transition-not-found",
    "RunStore.transition_owned",
    "not_found",
    moves("not_found", "suspended"),
)
def _(ctx: Ctx) -> Callable[[], object]:
    return lambda: ctx.store.transition_owned(ctx.run(), OWNER_A, "suspended")


@scenario(
    "transition-guard-failed",
    "RunStore.transition_owned",
    "guard_failed",
    moves("guard_failed", "completed"),
)
def _(ctx: Ctx) -> Callable[[], object]:
    row = ctx.running()
    guard = TransitionGuard(cancel_requested="present")
    return lambda: ctx.store.transition_owned(row.run_id, OWNER_A, "completed", guard=guard)


@scenario(
    "transition-failure-named-status",
    "RunStore.transition_owned",
    "failure",
    moves("failure", "pending"),
)
def _(ctx: Ctx) -> Callable[[], object]:
    row = ctx.running()
    return lambda: ctx.store.transition_owned(row.run_id, OWNER_A, "pending")


@scenario(
    "transition-failure-not-a-status",
    "RunStore.transition_owned",
    "failure",
    moves("failure", "invalid"),
)
def _(ctx: Ctx) -> Callable[[], object]:
    row = ctx.running()
    return lambda: ctx.store.transition_owned(row.run_id, OWNER_A, STATE_SECRET)


@scenario(
    "transition-interrupt",
    "RunStore.transition_owned",
    "interrupt",
    moves("interrupt", "completed"),
)
def _(ctx: Ctx) -> Callable[[], object]:
    row = ctx.running()
    return interrupted(
        ctx, lambda: ctx.store.transition_owned(row.run_id, OWNER_A, "completed", STATE)
    )


# --- claim_next and heartbeat_many ----------------------------------------------------------


@scenario(
    "claim-next-activated", "RunStore.claim_next", "activated", claims("claim_next", "activated")
)
def _(ctx: Ctx) -> Callable[[], object]:
    ctx.created()
    return lambda: ctx.store.claim_next(OWNER_A, ctx.now)


@scenario("claim-next-none", "RunStore.claim_next", "none", claims("claim_next", "none"))
def _(ctx: Ctx) -> Callable[[], object]:
    # Every claimable run of the earlier scenarios is taken first.
    while ctx.store.claim_next(OWNER_B, ctx.now) is not None:
        pass
    return lambda: ctx.store.claim_next(OWNER_A, ctx.now)


@scenario("claim-next-failure", "RunStore.claim_next", "failure", claims("claim_next", "failure"))
def _(ctx: Ctx) -> Callable[[], object]:
    return lambda: ctx.store.claim_next(OWNER_A, ctx.now, status="completed")


@scenario(
    "claim-next-interrupt", "RunStore.claim_next", "interrupt", claims("claim_next", "interrupt")
)
def _(ctx: Ctx) -> Callable[[], object]:
    ctx.created()
    now = ctx.now
    return interrupted(ctx, lambda: ctx.store.claim_next(OWNER_A, now))


@scenario(
    "claim-next-many-activated",
    "RunStore.claim_next_many",
    "activated",
    claims("claim_next_many", "activated", 2),
)
def _(ctx: Ctx) -> Callable[[], object]:
    # One count per run taken: the two runs created here, every other taken first.
    while ctx.store.claim_next(OWNER_B, ctx.now) is not None:
        pass
    ctx.created("-1")
    ctx.created("-2")
    return lambda: ctx.store.claim_next_many(OWNER_A, ctx.now, 5)


@scenario(
    "claim-next-many-none",
    "RunStore.claim_next_many",
    "none",
    claims("claim_next_many", "none"),
)
def _(ctx: Ctx) -> Callable[[], object]:
    while ctx.store.claim_next(OWNER_B, ctx.now) is not None:
        pass
    return lambda: ctx.store.claim_next_many(OWNER_A, ctx.now, 5)


@scenario(
    "claim-next-many-failure",
    "RunStore.claim_next_many",
    "failure",
    claims("claim_next_many", "failure"),
)
def _(ctx: Ctx) -> Callable[[], object]:
    return lambda: ctx.store.claim_next_many(OWNER_A, ctx.now, 0)


@scenario(
    "heartbeat-many-each-run",
    "RunStore.heartbeat_many",
    "success",
    {**beats("updated", 2), **beats("fence_lost"), **beats("not_found")},
)
def _(ctx: Ctx) -> Callable[[], object]:
    ids = [ctx.running(suffix="-1").run_id, ctx.running(suffix="-2").run_id]
    ids.append(ctx.running(OWNER_B, suffix="-3").run_id)
    ids.append(ctx.run("-4"))
    return lambda: ctx.store.heartbeat_many(OWNER_A, ids, ctx.now)


@scenario("heartbeat-many-failure", "RunStore.heartbeat_many", "failure", beats("failure", 3))
def _(ctx: Ctx) -> Callable[[], object]:
    rid = ctx.running().run_id
    return lambda: ctx.store.heartbeat_many(OWNER_A, [rid, "other", rid], ctx.now)


@scenario("heartbeat-many-interrupt", "RunStore.heartbeat_many", "interrupt", beats("interrupt", 2))
def _(ctx: Ctx) -> Callable[[], object]:
    ids = [ctx.running(suffix="-1").run_id, ctx.running(suffix="-2").run_id]
    now = ctx.now
    return interrupted(ctx, lambda: ctx.store.heartbeat_many(OWNER_A, ids, now))


# --- operations without a counter ------------------------------------------------------------


@scenario("create-success", "RunStore.create", "success")
def _(ctx: Ctx) -> Callable[[], object]:
    return lambda: ctx.store.create(ctx.run(), STATE)


@scenario("create-failure", "RunStore.create", "failure")
def _(ctx: Ctx) -> Callable[[], object]:
    rid = ctx.created()
    return lambda: ctx.store.create(rid, STATE)


@scenario("create-interrupt", "RunStore.create", "interrupt")
def _(ctx: Ctx) -> Callable[[], object]:
    return interrupted(ctx, lambda: ctx.store.create(ctx.run(), STATE))


@scenario("get-success", "RunStore.get", "success")
def _(ctx: Ctx) -> Callable[[], object]:
    rid = ctx.created()
    return lambda: ctx.store.get(rid)


@scenario("get-failure", "RunStore.get", "failure")
def _(ctx: Ctx) -> Callable[[], object]:
    return lambda: ctx.store.get(ctx.run())


@scenario("lineage-success", "RunStore.lineage", "success")
def _(ctx: Ctx) -> Callable[[], object]:
    rid = ctx.created()
    return lambda: ctx.store.lineage(rid)


@scenario("latest-round-success", "RunStore.latest_round", "success")
def _(ctx: Ctx) -> Callable[[], object]:
    rid = ctx.created()
    return lambda: ctx.store.latest_round(rid)


@scenario("request-cancel-cancel-requested", "RunStore.request_cancel", "cancel_requested")
def _(ctx: Ctx) -> Callable[[], object]:
    rid = ctx.created()
    return lambda: ctx.store.request_cancel(rid, ctx.now)


@scenario("request-cancel-already-requested", "RunStore.request_cancel", "already_requested")
def _(ctx: Ctx) -> Callable[[], object]:
    rid = ctx.created()
    ctx.store.request_cancel(rid, ctx.now)
    return lambda: ctx.store.request_cancel(rid, ctx.now)


@scenario("request-cancel-terminal", "RunStore.request_cancel", "terminal")
def _(ctx: Ctx) -> Callable[[], object]:
    row = ctx.running()
    ctx.store.transition_owned(row.run_id, OWNER_A, "completed")
    return lambda: ctx.store.request_cancel(row.run_id, ctx.now)


@scenario("request-cancel-not-found", "RunStore.request_cancel", "not_found")
def _(ctx: Ctx) -> Callable[[], object]:
    return lambda: ctx.store.request_cancel(ctx.run(), ctx.now)


@scenario("request-cancel-failure", "RunStore.request_cancel", "failure")
def _(ctx: Ctx) -> Callable[[], object]:
    return lambda: ctx.store.request_cancel(ctx.run(), -5)


@scenario(
    "request-cancel-lineage-cancel-requested", "RunStore.request_cancel_lineage", "cancel_requested"
)
def _(ctx: Ctx) -> Callable[[], object]:
    rid = ctx.created()
    return lambda: ctx.store.request_cancel_lineage(rid, ctx.now)


@scenario("acknowledge-cancel-success", "RunStore.acknowledge_cancel", "success")
def _(ctx: Ctx) -> Callable[[], object]:
    row = ctx.running()
    ctx.store.request_cancel(row.run_id, ctx.now)
    return lambda: ctx.store.acknowledge_cancel(row.run_id, OWNER_A, ctx.now)


@scenario("list-runs-success", "RunStore.list_runs", "success")
def _(ctx: Ctx) -> Callable[[], object]:
    return lambda: ctx.store.list_runs(limit=5, with_state=True)


@scenario("purge-settled-success", "RunStore.purge_settled", "success")
def _(ctx: Ctx) -> Callable[[], object]:
    row = ctx.running()
    ctx.store.transition_owned(row.run_id, OWNER_A, "completed")
    ctx.clock.advance(1)
    return lambda: ctx.store.purge_settled(ctx.now, limit=1)


@scenario("purge-candidates-success", "RunStore.purge_candidates", "success")
def _(ctx: Ctx) -> Callable[[], object]:
    row = ctx.running()
    ctx.store.transition_owned(row.run_id, OWNER_A, "completed")
    ctx.clock.advance(1)
    return lambda: ctx.store.purge_candidates(ctx.now, limit=1)


@scenario("compact-changes-success", "RunStore.compact_changes", "success")
def _(ctx: Ctx) -> Callable[[], object]:
    return lambda: ctx.store.compact_changes(ctx.store.revision())


@scenario("ownership-facts-success", "RunStore.ownership_facts", "success")
def _(ctx: Ctx) -> Callable[[], object]:
    row = ctx.running()
    return lambda: ctx.store.ownership_facts(row.run_id)


@scenario("revision-success", "RunStore.revision", "success")
def _(ctx: Ctx) -> Callable[[], object]:
    return lambda: ctx.store.revision()


@scenario("changes-success", "RunStore.changes", "success")
def _(ctx: Ctx) -> Callable[[], object]:
    return lambda: ctx.store.changes(0)


@scenario("state-success", "RunStore.state", "success")
def _(ctx: Ctx) -> Callable[[], object]:
    return lambda: ctx.store.state()


@scenario("check-invariants-success", "RunStore.check_invariants", "success")
def _(ctx: Ctx) -> Callable[[], object]:
    return lambda: ctx.store.check_invariants()


# --- the attempt store ---------------------------------------------------------------------


def _attempt(rid: str, **values: Any) -> Attempt:
    return Attempt(
        rid,
        "step-1",
        0,
        "running",
        0,
        checkpoint={"secret": ATTEMPT_SECRET},
        meta={"note": ATTEMPT_SECRET},
        **values,
    )


@scenario("attempt-put-inserted", "AttemptStore.put", "inserted")
def _(ctx: Ctx) -> Callable[[], object]:
    row = ctx.running()
    return lambda: ctx.attempts.put(_attempt(row.run_id), OWNER_A)


@scenario("attempt-put-fence-lost", "AttemptStore.put", "fence_lost")
def _(ctx: Ctx) -> Callable[[], object]:
    row = ctx.running()
    return lambda: ctx.attempts.put(_attempt(row.run_id), OWNER_B)


@scenario("attempt-put-run-not-found", "AttemptStore.put", "run_not_found")
def _(ctx: Ctx) -> Callable[[], object]:
    return lambda: ctx.attempts.put(_attempt(ctx.run()), OWNER_A)


@scenario("attempt-put-conflict", "AttemptStore.put", "conflict")
def _(ctx: Ctx) -> Callable[[], object]:
    row = ctx.running()
    ctx.attempts.put(_attempt(row.run_id), OWNER_A)
    other = _attempt(row.run_id, error={"why": ATTEMPT_SECRET})
    return lambda: ctx.attempts.put(other, OWNER_A)


@scenario("attempt-get-success", "AttemptStore.get", "success")
def _(ctx: Ctx) -> Callable[[], object]:
    row = ctx.running()
    ctx.attempts.put(_attempt(row.run_id), OWNER_A)
    return lambda: ctx.attempts.get(AttemptId(row.run_id, "step-1", 0))


@scenario("attempt-heartbeat-updated", "AttemptStore.heartbeat", "updated")
def _(ctx: Ctx) -> Callable[[], object]:
    row = ctx.running()
    ctx.attempts.put(_attempt(row.run_id), OWNER_A)
    checkpoint = {"secret": ATTEMPT_SECRET, "n": 2}
    return lambda: ctx.attempts.heartbeat(row.run_id, "step-1", 0, OWNER_A, ctx.now, checkpoint)


@scenario("attempt-heartbeat-not-found", "AttemptStore.heartbeat", "not_found")
def _(ctx: Ctx) -> Callable[[], object]:
    row = ctx.running()
    return lambda: ctx.attempts.heartbeat(row.run_id, "step-1", 0, OWNER_A, ctx.now)


@scenario("attempt-finish-finished", "AttemptStore.finish", "finished")
def _(ctx: Ctx) -> Callable[[], object]:
    row = ctx.running()
    ctx.attempts.put(_attempt(row.run_id), OWNER_A)
    done = FinishAttempt(
        row.run_id, "step-1", 0, "succeeded", ctx.now, outcome={"secret": ATTEMPT_SECRET}
    )
    return lambda: ctx.attempts.finish(done, OWNER_A)


@scenario("attempt-finish-state-changed", "AttemptStore.finish", "state_changed")
def _(ctx: Ctx) -> Callable[[], object]:
    row = ctx.running()
    ctx.attempts.put(_attempt(row.run_id), OWNER_A)
    done = FinishAttempt(row.run_id, "step-1", 0, "succeeded", ctx.now)
    ctx.attempts.finish(done, OWNER_A)
    return lambda: ctx.attempts.finish(done, OWNER_A)


@scenario("attempt-patch-patched", "AttemptStore.patch", "patched")
def _(ctx: Ctx) -> Callable[[], object]:
    row = ctx.running()
    ctx.attempts.put(_attempt(row.run_id), OWNER_A)
    patch = AttemptPatch(meta={"secret": ATTEMPT_SECRET})
    return lambda: ctx.attempts.patch(AttemptId(row.run_id, "step-1", 0), patch, OWNER_A)


@scenario("attempt-patch-failure", "AttemptStore.patch", "failure")
def _(ctx: Ctx) -> Callable[[], object]:
    row = ctx.running()
    return lambda: ctx.attempts.patch(AttemptId(row.run_id, "step-1", -1), AttemptPatch(), OWNER_A)


@scenario("attempt-state-success", "AttemptStore.state", "success")
def _(ctx: Ctx) -> Callable[[], object]:
    return lambda: ctx.attempts.state()


# --- supervisors ------------------------------------------------------------------------------


def events(supervisor: str, **counts: int) -> dict[str, int]:
    return {
        f"runstore_supervisor_events{{event={event},supervisor={supervisor}}}": amount
        for event, amount in counts.items()
    }


def _failing_heartbeats(ctx: Ctx, count: int) -> None:
    """The next ``count`` write attempts of the store fail (not transient)."""
    ctx.store._install_faults(FaultPlan(*[Fault("statement", 0)] * count))


def _supervised(ctx: Ctx, fleet: bool, run_id: str, moves: list[int]) -> Callable[[], object]:
    """Supervise ``run_id`` (cooperatively) while the clock visits ``moves``."""

    def act() -> object:
        try:
            if fleet:
                keeper = supervise_many(
                    ctx.store, OWNER_A, [run_id], clock=ctx.clock, interrupt_thread=False
                )
                lease = keeper[run_id]
                with keeper:
                    assert keeper.wait_idle()
                    for now in moves:
                        ctx.clock.set(now)
                        assert keeper.wait_idle()
                return lease.error
            with supervise(
                ctx.store, run_id, OWNER_A, clock=ctx.clock, interrupt_thread=False
            ) as lease:
                assert lease.wait_idle()
                for now in moves:
                    ctx.clock.set(now)
                    assert lease.wait_idle()
        except LeaseLost as error:
            return error
        finally:
            ctx.store._install_faults(None)
        return None

    return act


for _kind in ("supervise", "fleet"):
    _fleet = _kind == "fleet"

    @scenario(
        f"{_kind}-reconfirmed",
        "work",
        "reconfirmed",
        {
            **beats("failure", 18),
            # A fleet also pulses right after the reconfirm, at the same reading.
            **beats("updated", 2 if _fleet else 1),
            **events(_kind, write_failed=1, reconfirmed=1),
        },
        backends=("sqlite",),
    )
    def _(ctx: Ctx, fleet: bool = _fleet) -> Callable[[], object]:
        row = ctx.running()
        start = ctx.now
        _failing_heartbeats(ctx, 18)
        return _supervised(
            ctx, fleet, row.run_id, [start + ms for ms in range(1_000, 19_001, 1_000)]
        )

    @scenario(
        f"{_kind}-lapsed",
        "work",
        "lapsed",
        {**beats("failure", 19), **events(_kind, write_failed=1, lapsed=1)},
        backends=("sqlite",),
    )
    def _(ctx: Ctx, fleet: bool = _fleet) -> Callable[[], object]:
        row = ctx.running()
        start = ctx.now
        _failing_heartbeats(ctx, 40)
        return _supervised(
            ctx, fleet, row.run_id, [start + ms for ms in range(1_000, 19_001, 1_000)]
        )

    @scenario(
        f"{_kind}-fence-lost",
        "work",
        "fence_lost",
        {**beats("fence_lost"), **events(_kind, fence_lost=1)},
        backends=("sqlite",),
    )
    def _(ctx: Ctx, fleet: bool = _fleet) -> Callable[[], object]:
        row = ctx.running()
        ctx.clock.advance(STALE)
        now = ctx.now
        proof = evidence(OWNER_A, OWNER_C, now)
        stolen = ctx.store.claim_and_own(row.run_id, row.snapshot, OWNER_C, now, proof)
        assert type(stolen).__name__ == "Activated"
        return _supervised(ctx, fleet, row.run_id, [now + 1_000])

    @scenario(
        f"{_kind}-released",
        "work",
        "released",
        {**beats("fence_lost"), **events(_kind, released=1)},
        backends=("sqlite",),
    )
    def _(ctx: Ctx, fleet: bool = _fleet) -> Callable[[], object]:
        row = ctx.running()
        ctx.store.transition_owned(row.run_id, OWNER_A, "completed")
        return _supervised(ctx, fleet, row.run_id, [ctx.now + 1_000])


# --- the runner ------------------------------------------------------------------------------


def open_store(config: dict[str, Any], clock: ManualClock, consensus: Any = None) -> Any:
    options: dict[str, Any] = {}
    if config.get("fast_path") is not None:
        options["fast_path"] = config["fast_path"]
    return runstore.open(
        config["target"], clock=clock, consensus=consensus or SqlConsensus(), **options
    )


def _counter_key(name: str, attributes: dict[str, Any]) -> str:
    inner = ",".join(f"{key}={attributes[key]}" for key in sorted(attributes))
    return f"{name}{{{inner}}}"


def main() -> None:
    # A child started from a shell's background job inherits SIGINT ignored;
    # the interrupt scenarios need Python's own handler (KeyboardInterrupt).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    config = json.loads(sys.stdin.read())
    backend = "postgresql" if config["target"].startswith("postgresql") else "sqlite"
    clock = SignalClock(0)
    store = open_store(config, clock)
    plant(config.get("plant"))

    # Only now, with runstore imported and a store open, is telemetry configured.
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()  # cleared per scenario
    everything = InMemorySpanExporter()  # never cleared: for the secret scan
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    provider.add_span_processor(SimpleSpanProcessor(everything))
    trace.set_tracer_provider(provider)
    reader = InMemoryMetricReader()
    metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
    tracer = trace.get_tracer("tests.telemetry")

    def counters() -> dict[str, int]:
        found: dict[str, int] = {}
        data = reader.get_metrics_data()
        for resource in data.resource_metrics if data is not None else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    for point in metric.data.data_points:
                        found[_counter_key(metric.name, dict(point.attributes))] = point.value
        return found

    ctx = Ctx(store, clock, config)
    results: dict[str, Any] = {}
    for case in SCENARIOS:
        if backend not in case.backends:
            continue
        ctx.name = f"{case.name}-"
        act = case.prepare(ctx)
        before = counters()
        exporter.clear()
        answer: object = None
        with tracer.start_as_current_span("work", record_exception=False) as work:
            try:
                answer = act()
            except BaseException as error:
                answer = error
        moved = {
            key: value - before.get(key, 0)
            for key, value in counters().items()
            if value != before.get(key, 0)
        }
        work_id = work.get_span_context().span_id
        spans = [
            {
                "name": span.name,
                "attributes": dict(span.attributes or {}),
                "status": span.status.status_code.name,
                "description": span.status.description,
                "events": [
                    {"name": event.name, "attributes": dict(event.attributes or {})}
                    for event in span.events
                ],
            }
            for span in exporter.get_finished_spans()
            if span.context.span_id == work_id
            or (span.parent is not None and span.parent.span_id == work_id)
        ]
        results[case.name] = {
            "answer": _describe(answer),
            "counters": moved,
            "spans": spans,
        }
    store.close()
    if ctx._stalling is not None:
        ctx._stalling.close()
    metrics_json = reader.get_metrics_data().to_json()
    json.dump(
        {
            "backend": backend,
            "results": results,
            "export": {
                "metrics": metrics_json,
                "spans": [span.to_json() for span in everything.get_finished_spans()],
            },
        },
        sys.stdout,
    )


def _describe(answer: object) -> str:
    if isinstance(answer, BaseException):
        code = getattr(answer, "code", None)
        return f"{type(answer).__name__}({code})" if code else type(answer).__name__
    return type(answer).__name__


def plant(defect: str | None) -> None:
    """Re-instrument one operation with a planted defect (the checks' own test)."""
    if defect is None:
        return
    from runstore import _telemetry
    from runstore._sql._store import SqlRunStore

    if defect == "state-as-run-id":
        # create's run id read from the wrong parameter: run state in a span.
        bare = SqlRunStore.create.__wrapped__  # type: ignore[attr-defined]
        op = _telemetry.Operation("plain", "state_json")
        SqlRunStore.create = _telemetry._wrap(  # type: ignore[method-assign]
            "RunStore", "create", bare, op, lambda store: store.dialect
        )
    elif defect == "reconfirm-counted-as-steal":
        # reconfirm counted by the wrong counter.
        bare = SqlRunStore.reconfirm.__wrapped__  # type: ignore[attr-defined]
        op = _telemetry.Operation("claim", "run_id", ("owner", "runstore.owner_host_id"))
        SqlRunStore.reconfirm = _telemetry._wrap(  # type: ignore[method-assign]
            "RunStore", "steal", bare, op, lambda store: store.dialect
        )
    else:
        raise SystemExit(f"unknown defect {defect!r}")


if __name__ == "__main__":
    main()
