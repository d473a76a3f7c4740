"""Malformed input: each case is one operation with one inadmissible argument.

Every store must refuse these with ``invalid_run`` (``constraint`` for the
companion-prefix and ``changes`` cases is not expected: admission refuses them
too) and change nothing. The arguments around the bad one are admissible, so
a store that checks its arguments in a different order, or not at all, answers
differently from the reference.

The reference model and the stores share input admission (contract.md,
Independence), so comparing them cannot see an admission bug: both sides
would admit the same bad value. The verdict is therefore the suite's own, from
contract.md's table of limits written out here as literals: every
``MALFORMED`` case must be refused, and every ``EDGE`` case (an argument
exactly at a limit, or one that makes admission walk a value it may skip)
must be admitted. Edge cases touch no run that exists (``zz``), so they
change nothing either way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from runstore._values import LivenessEvidence, OwnerId, RunSnapshot, TransitionGuard

from .._base._domain import World
from .._base._steps import Call, Raised, call

_PENDING = RunSnapshot("pending", None, None)


def _owner(world: World) -> OwnerId:
    return world.process(0)


def _now(world: World) -> int:
    return world.clock.now_ms()


_CASES: dict[str, Callable[[World], Call]] = {
    "get-empty-id": lambda w: call("get", ("run_id", "")),
    "get-nul-id": lambda w: call("get", ("run_id", "a\x00")),
    "get-surrogate-id": lambda w: call("get", ("run_id", "\ud800")),
    "get-int-id": lambda w: call("get", ("run_id", 5)),
    "lineage-too-long-id": lambda w: call("lineage", ("run_id", "x" * 1025)),
    "latest-round-astral-too-long": lambda w: call("latest_round", ("run_id", "\U0001d11e" * 513)),
    "facts-str-subclass-id": lambda w: call("ownership_facts", ("run_id", _Text("a"))),
    "create-bad-json": lambda w: call("create", ("run_id", "zz"), ("state_json", "not-json")),
    "create-nan": lambda w: call("create", ("run_id", "zz"), ("state_json", "NaN")),
    "create-overflow": lambda w: call("create", ("run_id", "zz"), ("state_json", "[1e400]")),
    "create-empty-state": lambda w: call("create", ("run_id", "zz"), ("state_json", "")),
    "create-surrogate-state": lambda w: call(
        "create", ("run_id", "zz"), ("state_json", '{"v":"\\ud800"}')
    ),
    "create-too-deep": lambda w: call(
        "create", ("run_id", "zz"), ("state_json", "[" * 130 + "]" * 130)
    ),
    "create-companion-id": lambda w: call(
        "create", ("run_id", "flows.companion/zz"), ("state_json", "{}")
    ),
    "create-round-without-lineage": lambda w: call(
        "create", ("run_id", "zz"), ("state_json", "{}"), round_ordinal=1
    ),
    "create-negative-round": lambda w: call(
        "create", ("run_id", "zz"), ("state_json", "{}"), lineage_id="lin", round_ordinal=-1
    ),
    "claim-bool-now": lambda w: call(
        "claim", ("run_id", "a"), ("expected", _PENDING), ("claimant", _owner(w)), ("now_ms", True)
    ),
    "claim-float-now": lambda w: call(
        "claim", ("run_id", "a"), ("expected", _PENDING), ("claimant", _owner(w)), ("now_ms", 1.5)
    ),
    "claim-negative-now": lambda w: call(
        "claim", ("run_id", "a"), ("expected", _PENDING), ("claimant", _owner(w)), ("now_ms", -1)
    ),
    "claim-unsafe-now": lambda w: call(
        "claim",
        ("run_id", "a"),
        ("expected", _PENDING),
        ("claimant", _owner(w)),
        ("now_ms", 2**53),
    ),
    "claim-pending-with-owner": lambda w: call(
        "claim",
        ("run_id", "a"),
        ("expected", RunSnapshot("pending", _owner(w), 5)),
        ("claimant", _owner(w)),
        ("now_ms", _now(w)),
    ),
    "claim-unknown-status": lambda w: call(
        "claim",
        ("run_id", "a"),
        ("expected", RunSnapshot("paused", None, None)),  # type: ignore[arg-type]
        ("claimant", _owner(w)),
        ("now_ms", _now(w)),
    ),
    "claim-dict-snapshot": lambda w: call(
        "claim",
        ("run_id", "a"),
        ("expected", {"status": "pending", "owner": None, "heartbeat_at_ms": None}),
        ("claimant", _owner(w)),
        ("now_ms", _now(w)),
    ),
    "heartbeat-empty-host": lambda w: call(
        "heartbeat", ("run_id", "a"), ("owner", OwnerId("", 1, "n0")), ("now_ms", _now(w))
    ),
    "heartbeat-bool-pid": lambda w: call(
        "heartbeat", ("run_id", "a"), ("owner", OwnerId("h1", True, "n0")), ("now_ms", _now(w))
    ),
    "reconfirm-tuple-owner": lambda w: call(
        "reconfirm", ("run_id", "a"), ("owner", ("h1", 1, "n0")), ("now_ms", _now(w))
    ),
    "steal-unknown-kind": lambda w: call(
        "steal",
        ("run_id", "a"),
        ("expected", _PENDING),
        ("claimant", _owner(w)),
        ("now_ms", _now(w)),
        ("evidence", LivenessEvidence(_owner(w), _now(w), "pid-gone")),  # type: ignore[arg-type]
    ),
    "steal-no-evidence": lambda w: call(
        "steal",
        ("run_id", "a"),
        ("expected", _PENDING),
        ("claimant", _owner(w)),
        ("now_ms", _now(w)),
        ("evidence", None),
    ),
    "claim-and-own-bad-evidence": lambda w: call(
        "claim_and_own",
        ("run_id", "a"),
        ("expected", _PENDING),
        ("owner", _owner(w)),
        ("now_ms", _now(w)),
        evidence=LivenessEvidence(_owner(w), -1, "lease-expired"),
    ),
    "recover-negative-token": lambda w: call(
        "recover_claim",
        ("run_id", "a"),
        ("stale_claimant", _owner(w)),
        ("claimed_at_ms", -5),
        ("observer", w.process(1)),
        ("now_ms", _now(w)),
        ("evidence", LivenessEvidence(_owner(w), _now(w), "lease-expired")),
    ),
    "activate-string-snapshot": lambda w: call(
        "activate",
        ("run_id", "a"),
        ("claimant", _owner(w)),
        ("claimed_at_ms", _now(w)),
        ("expected", "running"),
    ),
    "abandon-float-token": lambda w: call(
        "abandon_claim", ("run_id", "a"), ("claimant", _owner(w)), ("claimed_at_ms", 1.0)
    ),
    "transition-to-pending": lambda w: call(
        "transition_owned", ("run_id", "a"), ("owner", _owner(w)), ("to_status", "pending")
    ),
    "transition-bad-state": lambda w: call(
        "transition_owned",
        ("run_id", "a"),
        ("owner", _owner(w)),
        ("to_status", "running"),
        state_json="{",
    ),
    "transition-bad-guard": lambda w: call(
        "transition_owned",
        ("run_id", "a"),
        ("owner", _owner(w)),
        ("to_status", "completed"),
        guard=TransitionGuard("maybe"),  # type: ignore[arg-type]
    ),
    "request-cancel-negative": lambda w: call("request_cancel", ("run_id", "a"), ("now_ms", -1)),
    "request-cancel-float": lambda w: call("request_cancel", ("run_id", "a"), ("now_ms", 1.0)),
    "acknowledge-bad-owner": lambda w: call(
        "acknowledge_cancel", ("run_id", "a"), ("owner", None), ("now_ms", _now(w))
    ),
    "acknowledge-negative-now": lambda w: call(
        "acknowledge_cancel", ("run_id", "a"), ("owner", _owner(w)), ("now_ms", -1)
    ),
    "changes-negative": lambda w: call("changes", ("after_revision", -1)),
    "claim-running-without-heartbeat": lambda w: call(
        "claim",
        ("run_id", "a"),
        ("expected", RunSnapshot("running", _owner(w), None)),
        ("claimant", _owner(w)),
        ("now_ms", _now(w)),
    ),
    "claim-pending-with-heartbeat": lambda w: call(
        "claim",
        ("run_id", "a"),
        ("expected", RunSnapshot("pending", None, 5)),
        ("claimant", _owner(w)),
        ("now_ms", _now(w)),
    ),
    "heartbeat-past-skew-bound": lambda w: call(
        "heartbeat",
        ("run_id", "zz"),
        ("owner", _owner(w)),
        ("now_ms", _now(w) + SKEW_ALLOWANCE_MS + 1),
    ),
    "transition-too-deep": lambda w: _transition(w, _nested(_DEPTH + 2)),
    "transition-surrogate-key": lambda w: _transition(w, '{"\\ud800": 1}'),
    "transition-too-deep-objects": lambda w: _transition(w, _nested_objects(_DEPTH + 1)),
    "transition-too-many-values": lambda w: _transition(w, _zeros(_VALUES)),
    "transition-too-deep-walked": lambda w: _transition(
        w, '{"k": "\\u00e9", "v": ' + _nested(_DEPTH + 1) + "}"
    ),
}

#: contract.md's limits, as the suite's own literals (never read from runstore).
_DEPTH: Final = 128
_IDENTIFIER: Final = 1024
SKEW_ALLOWANCE_MS: Final = 10_000
_VALUES: Final = 100_000


def _zeros(count: int) -> str:
    """An array of ``count`` zeros: ``count + 1`` JSON values in all."""
    return "[" + ",".join(["0"] * count) + "]"


def _nested(arrays: int) -> str:
    """``arrays`` arrays, each the only element of the one around it: the
    innermost sits at depth ``arrays - 1``."""
    return "[" * arrays + "]" * arrays


def _nested_objects(objects: int) -> str:
    """``objects`` objects, each the only member of the one around it, the
    innermost holding a number at depth ``objects``."""
    return '{"a": ' * objects + "1" + "}" * objects


def _transition(world: World, state_json: str) -> Call:
    """A transition of a run that does not exist, carrying ``state_json``:
    admission judges the state before the run is looked up."""
    return call(
        "transition_owned",
        ("run_id", "zz"),
        ("owner", _owner(world)),
        ("to_status", "running"),
        state_json=state_json,
    )


#: State that admission must walk (an escape in it) and admit: every kind of
#: JSON value, nested, with a null and integers inside containers.
_WALKED_STATE: Final = (
    '{"k": "\\u00e9", "n": null, "b": true, "f": false, "i": 12, "x": 1.5, '
    '"l": [null, 3, {"m": [false, -7, "s"]}], "o": {}}'
)

_EDGE_CASES: dict[str, Callable[[World], Call]] = {
    "get-longest-id": lambda w: call("get", ("run_id", "x" * _IDENTIFIER)),
    "latest-round-longest-astral-id": lambda w: call(
        "latest_round", ("run_id", "\U0001d11e" * (_IDENTIFIER // 2))
    ),
    "heartbeat-at-skew-bound": lambda w: call(
        "heartbeat", ("run_id", "zz"), ("owner", _owner(w)), ("now_ms", _now(w) + SKEW_ALLOWANCE_MS)
    ),
    "claim-at-skew-bound": lambda w: call(
        "claim",
        ("run_id", "zz"),
        ("expected", _PENDING),
        ("claimant", _owner(w)),
        ("now_ms", _now(w) + SKEW_ALLOWANCE_MS),
    ),
    "transition-deepest": lambda w: _transition(w, _nested(_DEPTH + 1)),
    "transition-deepest-walked": lambda w: _transition(
        w, '{"k": "\\u00e9", "v": ' + _nested(_DEPTH) + "}"
    ),
    "transition-deepest-objects": lambda w: _transition(w, _nested_objects(_DEPTH)),
    "transition-walked-values": lambda w: _transition(w, _WALKED_STATE),
    "transition-nul-escape": lambda w: _transition(w, '{"v": "\\u0000"}'),
    "transition-most-values": lambda w: _transition(w, _zeros(_VALUES - 1)),
}

#: Malformed calls of the operations that work across runs (their rule runs
#: only on stores with ``Capabilities.finding_work``).
_FINDING_WORK_CASES: dict[str, Callable[[World], Call]] = {
    "list-limit-zero": lambda w: call("list_runs", limit=0),
    "list-bad-status": lambda w: call("list_runs", status=("running", "done")),
    "list-forged-cursor": lambda w: call("list_runs", after="rs1.W1siYSJdXQ=="),
    "list-negative-stale": lambda w: call("list_runs", stale_at=-1),
    "claim-next-running": lambda w: call(
        "claim_next", ("owner", _owner(w)), ("now_ms", _now(w)), status="running"
    ),
    "claim-next-ahead": lambda w: call(
        "claim_next", ("owner", _owner(w)), ("now_ms", _now(w) + 10_001)
    ),
    "heartbeat-many-repeat": lambda w: call(
        "heartbeat_many", ("owner", _owner(w)), ("run_ids", ["a", "b", "a"]), ("now_ms", _now(w))
    ),
    "heartbeat-many-bad-id": lambda w: call(
        "heartbeat_many", ("owner", _owner(w)), ("run_ids", ["a", ""]), ("now_ms", _now(w))
    ),
    "heartbeat-many-set": lambda w: call(
        "heartbeat_many", ("owner", _owner(w)), ("run_ids", frozenset({"a"})), ("now_ms", _now(w))
    ),
    "purge-negative": lambda w: call("purge_settled", ("before_ms", -1)),
    "purge-limit-zero": lambda w: call("purge_settled", ("before_ms", _now(w)), limit=0),
    "compact-bool": lambda w: call("compact_changes", ("through_revision", True)),
}

MALFORMED_CASES: Final = tuple(_CASES)
FINDING_WORK_MALFORMED_CASES: Final = tuple(_FINDING_WORK_CASES)
EDGE_CASES: Final = tuple(_EDGE_CASES)


class _Text(str):
    """A ``str`` subclass: admission wants exactly ``str``."""

    __slots__ = ()


def malformed_call(case: str, world: World) -> Call:
    """The call for ``case``, built against the current world."""
    build = _CASES.get(case) or _FINDING_WORK_CASES.get(case) or _EDGE_CASES[case]
    return build(world)


def refused(outcome: object) -> bool:
    """Whether ``outcome`` is admission's refusal (``invalid_run``, or
    ``invalid_attempt`` for an attempt operation)."""
    return isinstance(outcome, Raised) and outcome.code in ("invalid_run", "invalid_attempt")
