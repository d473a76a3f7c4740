"""Faults for the fault rule: plans for the adapter's seam, and the writes to fault.

A store declares ``Capabilities(fault_injection=True)`` when it offers the
SQLite adapter's seam: ``store._install_faults(FaultPlan | None)`` and a
settable ``store._retry_policy`` (see ``runstore.sqlite._faults``). The
machine replays transient failures at once, within a budget of
``FAULT_BUDGET`` attempts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final

from runstore._values import LivenessEvidence, OwnerId, RunSnapshot
from runstore.sqlite import Fault, FaultPlan, RetryPolicy

from .._base._domain import World
from .._base._steps import Call, call
from ._invariants import MISSING, FaultSeamViolation

FAULT_BUDGET: Final = 3

_FAULTS: dict[str, tuple[Fault, ...]] = {
    "statement-0": (Fault("statement", 0),),
    "statement-1": (Fault("statement", 1),),
    "statement-2": (Fault("statement", 2),),
    "statement-3": (Fault("statement", 3),),
    "strategy-0": (Fault("strategy", 0),),
    "strategy-1": (Fault("strategy", 1),),
    "strategy-2": (Fault("strategy", 2),),
    "commit": (Fault("commit"),),
    "busy-once": (Fault("statement", 1, transient=True),),
    "busy-strategy": (Fault("strategy", 0, transient=True),),
    "busy-twice": (Fault("statement", 0, transient=True), Fault("commit", transient=True)),
    "busy-always": (Fault("commit", transient=True),) * FAULT_BUDGET,
}
FAULTS: Final = tuple(_FAULTS)


def plan_faults(name: str) -> tuple[Fault, ...]:
    return _FAULTS[name]


def fault_plan(name: str) -> FaultPlan:
    return FaultPlan(*_FAULTS[name])


def fired_faults(plan: FaultPlan, name: str) -> list[Fault]:
    """The faults of ``plan`` (armed as ``name``) that fired, once the seam
    is shown to have accounted for each armed fault exactly once: fired,
    missed or unused. The machines decide the expected outcome from what
    fired, so a seam that fires a fault twice, or counts a fired one as
    missed too, would otherwise pass unseen."""
    armed = list(_FAULTS[name])
    fired, missed, unused = list(plan.fired), list(plan.missed), plan.unused
    accounted = len(fired) + len(missed) + len(unused)
    taken = sorted(map(repr, fired + missed))
    if accounted != len(armed) or taken != sorted(map(repr, armed[: len(taken)])):
        raise FaultSeamViolation(
            f"fault plan {name!r}: armed {armed!r}, but the seam reports fired {fired!r},"
            f" missed {missed!r}, unused {unused!r}"
        )
    return fired


def expected_fault_cause(fired: Sequence[Fault]) -> dict[str, Any]:
    """What the cause of a write that the faults ``fired`` failed must say
    (``MISSING``: the key must be absent), on both shipped backends.

    The error behind it is the injected one (``InjectedFault``), whether a
    statement, the strategy or the commit raised it; its database code is
    ``busy`` for a transient fault and ``io`` for a lasting one; the
    strategy reported it (``consensus_code``) when the fault fired after a
    strategy call, and never when it fired at the commit (a statement fault
    may have been in the strategy's own SQL, so it is not judged); the
    attempts are counted when transient faults used up the budget; and no
    constraint or table is named, since the fault touched none."""
    last = fired[-1]
    expected: dict[str, Any] = {
        "category": "persistence_failed",
        "error": "InjectedFault",
        "database_code": "busy" if last.transient else "io",
        "attempts": FAULT_BUDGET if sum(f.transient for f in fired) >= FAULT_BUDGET else MISSING,
        "constraint": MISSING,
        "constraint_name": MISSING,
        "table_name": MISSING,
    }
    if last.point == "strategy":
        expected["consensus_code"] = "persistence_failed"
    elif last.point == "commit":
        expected["consensus_code"] = MISSING
    return expected


def expected_attempt_fault_cause(fired: Sequence[Fault]) -> dict[str, Any]:
    """``expected_fault_cause`` for an attempt store, whose cause keeps only
    codes: the run store's error code and its database code."""
    return {
        "category": "persistence_failed",
        "run_store_code": "persistence_failed",
        "database_code": "busy" if fired[-1].transient else "io",
    }


def fault_retry_policy() -> RetryPolicy:
    """Replay transient failures at once, ``FAULT_BUDGET`` attempts in all."""
    return RetryPolicy(
        max_attempts=FAULT_BUDGET, budget_ms=60_000, base_delay_ms=0.0, max_delay_ms=0.0
    )


def _owner_of(world: World, run_id: str) -> OwnerId:
    return world.actor("owner", run_id)


def _claim(world: World, now: int) -> Call:
    run = world.run("claimable")
    return call(
        "claim",
        ("run_id", run),
        ("expected", world.expected("row", run)),
        ("claimant", world.process(0)),
        ("now_ms", now),
    )


def _claim_and_own(world: World, now: int) -> Call:
    run = world.run("claimable")
    return call(
        "claim_and_own",
        ("run_id", run),
        ("expected", world.expected("row", run)),
        ("owner", world.process(1)),
        ("now_ms", now),
    )


def _activate(world: World, now: int) -> Call:
    run = world.run("claimed")
    return call(
        "activate",
        ("run_id", run),
        ("claimant", world.actor("claimant", run)),
        ("claimed_at_ms", world.token("claim", run)),
        ("expected", world.expected("row", run)),
    )


def _abandon(world: World, now: int) -> Call:
    run = world.run("claimed")
    return call(
        "abandon_claim",
        ("run_id", run),
        ("claimant", world.actor("claimant", run)),
        ("claimed_at_ms", world.token("claim", run)),
    )


def _steal(world: World, now: int) -> Call:
    run = world.run("running")
    snapshot = world.expected("row", run)
    owner = snapshot.owner if isinstance(snapshot, RunSnapshot) else None
    thief = world.process(2)
    subject = owner if owner is not None else world.process(0)
    return call(
        "steal",
        ("run_id", run),
        ("expected", snapshot),
        ("claimant", thief),
        ("now_ms", now),
        ("evidence", LivenessEvidence(subject, now, "lease-expired")),
    )


def _recover(world: World, now: int) -> Call:
    run = world.run("claimed")
    stale = world.actor("claimant", run)
    return call(
        "recover_claim",
        ("run_id", run),
        ("stale_claimant", stale),
        ("claimed_at_ms", world.token("claim", run)),
        ("observer", world.process(3)),
        ("now_ms", now),
        ("evidence", LivenessEvidence(stale, now, "lease-expired")),
    )


def _renew(method: str) -> Callable[[World, int], Call]:
    def build(world: World, now: int) -> Call:
        run = world.run("running")
        return call(method, ("run_id", run), ("owner", _owner_of(world, run)), ("now_ms", now))

    return build


def _transition(status: str) -> Callable[[World, int], Call]:
    def build(world: World, now: int) -> Call:
        run = world.run("running")
        return call(
            "transition_owned",
            ("run_id", run),
            ("owner", _owner_of(world, run)),
            ("to_status", status),
            state_json='{"faulted":true}',
        )

    return build


_OPERATIONS: dict[str, Callable[[World, int], Call]] = {
    "claim": _claim,
    "claim_and_own": _claim_and_own,
    "activate": _activate,
    "abandon_claim": _abandon,
    "steal": _steal,
    "recover_claim": _recover,
    "heartbeat": _renew("heartbeat"),
    "reconfirm": _renew("reconfirm"),
    "transition-running": _transition("running"),
    "transition-suspended": _transition("suspended"),
    "transition-completed": _transition("completed"),
    "create": lambda w, now: call(
        "create", ("run_id", "fork"), ("state_json", "{}"), parent_run_id="a"
    ),
    "request_cancel_lineage": lambda w, now: call(
        "request_cancel_lineage", ("run_id", "lin"), ("now_ms", now)
    ),
    "acknowledge_cancel": lambda w, now: call(
        "acknowledge_cancel",
        ("run_id", w.run("running")),
        ("owner", _owner_of(w, w.run("running"))),
        ("now_ms", now),
    ),
}
FAULT_OPERATIONS: Final = tuple(_OPERATIONS)


def faulted_call(name: str, world: World, now: int) -> Call:
    """The write ``name`` as the current state makes it succeed, if it can."""
    return _OPERATIONS[name](world, now)
