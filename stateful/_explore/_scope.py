"""The scopes an exploration walks, and every move a scope allows from a state.

A scope fixes the world: the runs created before the walk, the owners, the
readings an owner may give (its own clock equal to the store clock, exactly at
the skew allowance, one past it), the clock moves (onto each side of every
staleness cutoff of each run), and the finite parameter domains of every
operation of the ``RunStore`` protocol: the current and one stale snapshot,
each evidence kind about the right and a wrong owner, the right and a wrong
claim token, each status and guard, reads with each filter, and the batch
operations with small batches. ``moves(scope, state, clock_ms)`` lists the
moves from a state, each a concrete ``Call`` (or a ``Tick`` of the clock),
resolved against the reference model's state, so the same move can be
replayed on any store.

A scope also bounds the walk's depth: the number of moves after the setup.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any, Final

import attrs

from runstore._boundary import encode_cursor
from runstore._constants import HEARTBEAT_SKEW_ALLOWANCE_MS, HEARTBEAT_STALE_AFTER_MS
from runstore._values import (
    LivenessEvidence,
    OwnerId,
    RunRow,
    RunSnapshot,
    TransitionGuard,
)
from runstore.model import ModelRunStore
from runstore.model._state import ModelState

from .._base._domain import START_MS, STATE_TEXTS, fresh
from .._base._steps import Call, call

#: The evidence kinds, each a selector of its own.
KINDS: Final = ("lease-expired", "same-host-pid-dead", "cross-host-unreachable-stale")
SKEW: Final = HEARTBEAT_SKEW_ALLOWANCE_MS
#: ``claim_next_many`` is a move once the reference has it (issue 28): batches of one and two,
#: and of two suspended runs.
_CLAIMS_MANY: Final = hasattr(ModelRunStore, "claim_next_many")
STALE: Final = HEARTBEAT_STALE_AFTER_MS
#: A run id no run ever has (``heartbeat_many``'s missing run).
MISSING_RUN: Final = "never"
#: The state text writes put into a run (none of the setup's).
NEW_STATE: Final = STATE_TEXTS[1]


@attrs.frozen
class Tick:
    """Move the store clock to ``ms`` (a move of its own, like a call)."""

    ms: int

    def describe(self) -> str:
        """The move as one line of a program."""
        return f"clock -> {self.ms}"


Move = Call | Tick


def owner(host: str, pid: int) -> OwnerId:
    """The owner ``host:pid`` in its first incarnation, as the machines name it (nonce
    ``n0``), its host id a fresh string (a store comparing with ``is`` is caught)."""
    return OwnerId(fresh(host), pid, "n0")


@attrs.frozen
class Scope:
    """One finite world to walk.

    ``runs`` are created, in order, before the walk (``(run_id, options)``);
    ``owners`` take part; ``readings`` are the offsets of an owner's ``now_ms``
    from the store clock; ``edges`` the offsets of a clock move from a
    staleness cutoff (each run's heartbeat and claim plus 30 000 ms);
    ``depth`` the most moves after the setup; ``owner_classes`` groups owners
    that are interchangeable (the same host): the canonical form identifies
    states that differ by a permutation within a group. ``depth_k`` is the
    depth of the pass without deduplication. ``evidence`` and ``guards`` are
    the domains of those parameters; ``transitions`` the (status, state) pairs
    ``transition_owned`` takes; ``reads`` whether the read operations are
    moves; ``ticks`` the plain clock steps (milliseconds forward); ``last`` narrows the
    domains of the deepest move of a program (``at_depth``); ``cursors`` whether
    ``list_runs`` also takes the ``after`` cursors of ``cursors_for`` (a listing key's own, and
    refused ones).
    """

    name: str
    runs: tuple[tuple[str, Mapping[str, Any]], ...]
    owners: tuple[OwnerId, ...]
    owner_classes: tuple[tuple[int, ...], ...]
    readings: tuple[int, ...]
    edges: tuple[int, ...]
    depth: int
    depth_k: int
    evidence: tuple[str, ...] = ("none", *KINDS, "wrong-owner")
    guards: tuple[str | None, ...] = (None, "absent", "present")
    transitions: tuple[tuple[str, str | None], ...] = (
        ("running", None),
        ("suspended", None),
        ("suspended", NEW_STATE),
        ("completed", NEW_STATE),
        ("failed", None),
        ("cancelled", None),
        ("pending", None),
    )
    reads: bool = True
    ticks: tuple[int, ...] = (1000,)
    run_permutations: tuple[tuple[int, ...], ...] = ()
    #: The domains the last level's moves take instead (the moves from a state one move
    #: short of ``depth``), as ``(field, value)`` pairs; empty: the scope's own.
    last: tuple[tuple[str, Any], ...] = ()
    cursors: bool = False

    @property
    def run_ids(self) -> tuple[str, ...]:
        """The ids of the scope's runs, in creation order."""
        return tuple(run_id for run_id, _ in self.runs)


_OWNERS = (owner("h1", 1), owner("h1", 2), owner("h2", 1))

SCOPES: Final[Mapping[str, Scope]] = {
    # Two runs, b a child of a; three owners, two of them on one host.
    "tiny": Scope(
        "tiny",
        runs=(("a", {}),),
        owners=(_OWNERS[0], _OWNERS[2]),
        owner_classes=((0,), (1,)),
        readings=(0, SKEW + 1),
        edges=(0, 1),
        depth=3,
        depth_k=1,
        evidence=("none", "cross-host-unreachable-stale"),
        guards=(None,),
        transitions=(("suspended", NEW_STATE), ("completed", None)),
    ),
    "small": Scope(
        "small",
        runs=(("a", {}), ("b", {"parent_run_id": "a"})),
        owners=_OWNERS,
        owner_classes=((0, 1), (2,)),
        readings=(0, SKEW, SKEW + 1),
        edges=(-1, 0, 1),
        depth=3,
        depth_k=1,
    ),
    # The small scope's world and domains, one move deeper: every program of the small
    # scope, and every one a move longer whose last move is at the store clock's reading
    # with no evidence or one of the three kinds about the right owner (the skew bound's
    # readings and the wrong incarnation's evidence are checked at every depth up to 3).
    "medium": Scope(
        "medium",
        runs=(("a", {}), ("b", {"parent_run_id": "a"})),
        owners=_OWNERS,
        owner_classes=((0, 1), (2,)),
        readings=(0, SKEW, SKEW + 1),
        edges=(-1, 0, 1),
        depth=4,
        depth_k=1,
        last=(("readings", (0,)), ("evidence", ("none", *KINDS))),
    ),
    # The small scope's owners, readings, edges and depth over a root and its second lineage
    # round (purges kept by a live round, lineage cancellation, claim_next over rounds), with
    # list_runs taking cursors: one of a listing key, and forged ones, which are refused.
    "lineage": Scope(
        "lineage",
        runs=(("a", {}), ("a-2", {"lineage_id": "a", "round_ordinal": 2})),
        owners=_OWNERS,
        owner_classes=((0, 1), (2,)),
        readings=(0, SKEW, SKEW + 1),
        edges=(-1, 0, 1),
        depth=3,
        depth_k=1,
        cursors=True,
    ),
    "large": Scope(
        "large",
        runs=(
            ("a", {}),
            ("b", {"parent_run_id": "a"}),
            ("a-2", {"lineage_id": "a", "round_ordinal": 2}),
        ),
        owners=_OWNERS,
        owner_classes=((0, 1), (2,)),
        readings=(0, SKEW, SKEW + 1),
        edges=(-1, 0, 1),
        depth=5,
        depth_k=2,
        evidence=("none", *KINDS, "wrong-owner", "late"),
    ),
}


_NARROWED: dict[int, Scope] = {}


def at_depth(scope: Scope, depth: int) -> Scope:
    """The scope whose domains the moves from a state at ``depth`` take: ``scope`` narrowed
    by its ``last`` at the last level (``depth`` one short of the scope's), else itself."""
    if not scope.last or depth != scope.depth - 1:
        return scope
    narrowed = _NARROWED.get(id(scope))
    if narrowed is None or narrowed.name != scope.name:
        narrowed = attrs.evolve(scope, last=(), **dict(scope.last))
        _NARROWED[id(scope)] = narrowed
    return narrowed


def scope_named(name: str) -> Scope:
    """The scope called ``name``; ``ValueError`` names the known ones otherwise."""
    try:
        return SCOPES[name]
    except KeyError:
        known = ", ".join(s for s in SCOPES if s != "tiny")
        raise ValueError(f"unknown scope {name!r}; known: {known}") from None


def setup_calls(scope: Scope) -> tuple[Call, ...]:
    """The calls that create the scope's runs, before the walk (at ``START_MS``)."""
    return tuple(
        call("create", ("run_id", run_id), ("state_json", STATE_TEXTS[0]), **dict(options))
        for run_id, options in scope.runs
    )


# -- resolving the domains against a state -------------------------------------


def stale_snapshot(row: RunRow) -> RunSnapshot:
    """One snapshot the row does not have: its heartbeat a millisecond older when it has
    one (a compare-and-swap that lost to a renewal), else another unowned status."""
    current = row.snapshot
    if current.heartbeat_at_ms is not None and current.owner is not None:
        return RunSnapshot(current.status, current.owner, current.heartbeat_at_ms - 1)
    if current.status == "pending":
        return RunSnapshot("suspended", None, None)
    return RunSnapshot("pending", None, None)


def evidence(
    selector: str, about: OwnerId | None, observer: OwnerId, now_ms: int, fallback: OwnerId
) -> LivenessEvidence | None:
    """Evidence about ``about`` (``fallback`` when the run has no owner) as ``observer`` gives
    it at ``now_ms``: one of the three kinds (``"lease-expired"``, ``"same-host-pid-dead"``,
    ``"cross-host-unreachable-stale"``) whichever fits the hosts; ``"wrong-owner"`` the kind
    that fits, about another incarnation; ``"late"`` the kind that fits, checked a
    millisecond before ``now_ms``; ``"none"`` no evidence."""
    if selector == "none":
        return None
    subject = about if about is not None else fallback
    if selector in KINDS:
        return LivenessEvidence(subject, now_ms, selector)  # type: ignore[arg-type]
    same_host = subject.host_id == observer.host_id
    fit = "same-host-pid-dead" if same_host else "cross-host-unreachable-stale"
    checked = now_ms
    if selector == "wrong-owner":
        subject = OwnerId(subject.host_id, subject.pid, subject.nonce + "-other")
    elif selector == "late":
        checked = now_ms - 1
    return LivenessEvidence(subject, checked, fit)  # type: ignore[arg-type]


def moves(scope: Scope, state: ModelState, clock_ms: int) -> list[Move]:
    """Every move the scope allows from ``state`` with the store clock at ``clock_ms``, in a
    fixed order (so a walk is deterministic)."""
    out: list[Move] = []
    rows = state.rows
    owners = scope.owners
    readings = [clock_ms + offset for offset in scope.readings]
    for run_id in scope.run_ids:
        row = rows.get(run_id)
        if row is None:
            out.append(call("get", ("run_id", run_id)))
            continue
        current = row.snapshot
        snapshots = (current, stale_snapshot(row))
        token = row.claimed_at_ms if row.claimed_at_ms is not None else clock_ms
        tokens = (token, token - 1)
        subject = current.owner
        for who in owners:
            for expected in snapshots:
                for now in readings:
                    out.append(
                        call(
                            "claim",
                            ("run_id", run_id),
                            ("expected", expected),
                            ("claimant", who),
                            ("now_ms", now),
                        )
                    )
                    for selector in scope.evidence:
                        proof = evidence(selector, subject, who, now, owners[0])
                        out.append(
                            call(
                                "claim_and_own",
                                ("run_id", run_id),
                                ("expected", expected),
                                ("owner", who),
                                ("now_ms", now),
                                evidence=proof,
                            )
                        )
                        out.append(
                            call(
                                "steal",
                                ("run_id", run_id),
                                ("expected", expected),
                                ("claimant", who),
                                ("now_ms", now),
                                ("evidence", proof),
                            )
                        )
                for claimed_at in tokens:
                    out.append(
                        call(
                            "activate",
                            ("run_id", run_id),
                            ("claimant", who),
                            ("claimed_at_ms", claimed_at),
                            ("expected", expected),
                        )
                    )
            for claimed_at in tokens:
                out.append(
                    call(
                        "abandon_claim",
                        ("run_id", run_id),
                        ("claimant", who),
                        ("claimed_at_ms", claimed_at),
                    )
                )
                stale_claimant = row.claim if row.claim is not None else owners[0]
                for now in readings[:2]:
                    for selector in scope.evidence:
                        proof = evidence(selector, stale_claimant, who, now, owners[0])
                        out.append(
                            call(
                                "recover_claim",
                                ("run_id", run_id),
                                ("stale_claimant", stale_claimant),
                                ("claimed_at_ms", claimed_at),
                                ("observer", who),
                                ("now_ms", now),
                                ("evidence", proof),
                            )
                        )
            for now in readings:
                for method in ("heartbeat", "reconfirm"):
                    out.append(call(method, ("run_id", run_id), ("owner", who), ("now_ms", now)))
            for to_status, text in scope.transitions:
                for guard in scope.guards:
                    out.append(
                        call(
                            "transition_owned",
                            ("run_id", run_id),
                            ("owner", who),
                            ("to_status", fresh(to_status)),
                            state_json=text,
                            guard=None if guard is None else TransitionGuard(guard),  # type: ignore[arg-type]
                        )
                    )
            out.append(
                call("acknowledge_cancel", ("run_id", run_id), ("owner", who), ("now_ms", clock_ms))
            )
        out.append(call("request_cancel", ("run_id", run_id), ("now_ms", clock_ms)))
        out.append(call("request_cancel_lineage", ("run_id", run_id), ("now_ms", clock_ms)))
    out.extend(_finding_work(scope, state, clock_ms))
    if scope.reads:
        out.extend(_reads(scope, state, clock_ms))
    out.extend(_ticks(scope, state, clock_ms))
    return out


def _finding_work(scope: Scope, state: ModelState, clock_ms: int) -> list[Move]:
    out: list[Move] = []
    run_ids = list(scope.run_ids)
    for who in scope.owners:
        for now in (clock_ms, clock_ms + SKEW):
            out.append(call("claim_next", ("owner", who), ("now_ms", now)))
        out.append(call("claim_next", ("owner", who), ("now_ms", clock_ms), status="suspended"))
        if _CLAIMS_MANY:
            for limit, status in ((1, None), (2, None), (2, "suspended")):
                out.append(
                    call(
                        "claim_next_many",
                        ("owner", who),
                        ("now_ms", clock_ms),
                        ("limit", limit),
                        status=status,
                    )
                )
        for batch in (run_ids, [*reversed(run_ids), MISSING_RUN]):
            out.append(
                call("heartbeat_many", ("owner", who), ("run_ids", batch), ("now_ms", clock_ms))
            )
    out.append(call("purge_settled", ("before_ms", clock_ms + 1)))
    out.append(call("purge_settled", ("before_ms", clock_ms + 1), limit=1))
    out.append(call("compact_changes", ("through_revision", state.revision)))
    return out


def _reads(scope: Scope, state: ModelState, clock_ms: int) -> list[Move]:
    out: list[Move] = []
    for run_id in scope.run_ids:
        if run_id not in state.rows:
            continue
        for method in ("get", "lineage", "latest_round", "ownership_facts"):
            out.append(call(method, ("run_id", run_id)))
    out.append(call("revision"))
    out.append(call("changes", ("after_revision", max(0, state.revision - 1))))
    out.append(call("changes", ("after_revision", 0)))
    first = scope.run_ids[0]
    for filters in (
        {},
        {"limit": 1},
        {"status": "running"},
        {"status": ("pending", "suspended")},
        {"claimable_at": clock_ms},
        {"stale_at": clock_ms},
        {"claim_stale_at": clock_ms},
        {"cancel_requested": True},
        {"cancel_requested": False},
        {"parent_run_id": first},
        {"lineage_id": first},
    ):
        out.append(call("list_runs", **filters))
    if scope.cursors:
        for after, more in cursors_for(first):
            out.append(call("list_runs", after=after, **more))
    return out


def _forged(text: str) -> str:
    return "rs1." + base64.urlsafe_b64encode(text.encode("ascii")).decode("ascii")


def cursors_for(first: str) -> tuple[tuple[str, Mapping[str, Any]], ...]:
    """The ``after`` cursors a scope with ``cursors`` passes to ``list_runs``, with the other
    filters of each: the cursor of the listing key of ``first`` as the setup creates it (a
    cursor names a place in the order, not a filter, so it holds under a status filter too);
    a run id for a cursor; the cursor prefix over a key of the wrong shape (one member); and
    over a key written other than a store writes it (a space after the comma). The last three
    are refused (``invalid_run``) and change nothing."""
    return (
        (encode_cursor(START_MS, first), {}),
        (encode_cursor(START_MS, first), {"status": ("pending", "suspended"), "limit": 1}),
        (first, {}),
        (_forged(f'["{first}"]'), {}),
        (_forged(f'[{START_MS}, "{first}"]'), {}),
    )


def _ticks(scope: Scope, state: ModelState, clock_ms: int) -> list[Move]:
    targets: set[int] = {clock_ms + step for step in scope.ticks}
    for row in state.rows.values():
        for stamp in (row.heartbeat_at_ms, row.claimed_at_ms):
            if stamp is None:
                continue
            for edge in scope.edges:
                at = stamp + STALE + edge
                if at > clock_ms:
                    targets.add(at)
    return [Tick(ms) for ms in sorted(targets)]


def start_ms() -> int:
    """The store clock at the setup (the machines' own start)."""
    return START_MS
