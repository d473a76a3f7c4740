"""Reach: which situations the run-store machine drives each operation into.

A *cell* is one operation, one outcome tag (the reference's answer: its class,
or ``raised <code>``) and the prior situation of the row that matters to the
operation, read from the reference model's state just before the step:

- ``status``: ``missing``, ``pending``, ``suspended``, ``running`` or
  ``settled`` (completed, failed or cancelled);
- ``claim``: ``none``, ``held`` (younger than the staleness cutoff at the
  call's ``now_ms``) or ``stale``;
- ``owner``: ``none``, ``fresh`` or ``stale`` (its heartbeat against the same
  cutoff);
- ``evidence``: ``none``, ``fits`` (about the owner the operation displaces,
  taken at ``now_ms``, of a kind the host relation allows) or ``unfit``;
- ``cancel``: ``asked`` or ``no``.

Each operation is tabled over the dimensions that decide it (``DIMENSIONS``);
an error answer is one cell per code whatever the situation (admission and
faults come before the row is read). Operations over many runs (listing,
``claim_next``, batch renewal, purging, compaction) are tabled by outcome
alone.

Not every cell can happen: a running run always has an owner, a claim on a
settled run is impossible, a steal granted over a fresh heartbeat is the bug
the suite hunts. ``UNREACHABLE`` gives the reason for every such cell, as
rules over cells; every other cell is *reachable*, and the default budget
must reach it (``tests/stateful/campaigns/test_conformance_reach.py``; the rarest cells are
reached by the reach tour, ``_tour``). ``runstore fuzz
--coverage`` prints the tables a campaign reached, and ``reach_tables()``
(``runstore.stateful``) renders a ``Reach``.

Recording costs one dictionary update per step and happens only inside
``recording(reach)``.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Final

import attrs

from runstore._constants import HEARTBEAT_STALE_AFTER_MS
from runstore._values import LivenessEvidence, OwnerId, RunPage, RunRow, StoreState

from .._base._steps import Call, Crashed, Raised

STATUSES: Final = ("missing", "pending", "suspended", "running", "settled")
VALUES: Final[Mapping[str, tuple[str, ...]]] = {
    "status": STATUSES,
    "claim": ("none", "held", "stale"),
    "owner": ("none", "fresh", "stale"),
    "evidence": ("none", "fits", "unfit"),
    "cancel": ("no", "asked"),
}

#: The dimensions of each operation's table, in column order.
DIMENSIONS: Final[Mapping[str, tuple[str, ...]]] = {
    "create": ("status",),
    "get": ("status",),
    "lineage": ("status",),
    "latest_round": ("status",),
    "ownership_facts": ("status",),
    "claim": ("status", "claim", "owner"),
    "claim_and_own": ("status", "claim", "owner", "evidence"),
    "steal": ("status", "claim", "owner", "evidence"),
    "activate": ("status", "claim", "owner"),
    "abandon_claim": ("status", "claim"),
    "recover_claim": ("status", "claim", "evidence"),
    "heartbeat": ("status", "claim", "owner"),
    "reconfirm": ("status", "claim", "owner"),
    "transition_owned": ("status", "owner", "cancel"),
    "request_cancel": ("status", "cancel"),
    "request_cancel_lineage": ("status", "cancel"),
    "acknowledge_cancel": ("status", "owner", "cancel"),
    "changes": (),
    "list_runs": (),
    "claim_next": (),
    "heartbeat_many": (),
    "purge_settled": (),
    "compact_changes": (),
}

ERROR_CODES: Final = ("invalid_run", "not_found_row", "constraint", "decode_failed")
FAULT_CODE: Final = "persistence_failed"

#: The answers each operation can give (besides raising).
OUTCOMES: Final[Mapping[str, tuple[str, ...]]] = {
    "create": ("None",),
    "get": ("RunRow",),
    "lineage": ("list",),
    "latest_round": ("RunRow",),
    "ownership_facts": ("list",),
    "claim": ("Claimed", "NotFound", "AlreadyClaimed", "HeartbeatFresh", "SnapshotChanged"),
    "claim_and_own": (
        "Activated",
        "NotFound",
        "AlreadyClaimed",
        "HeartbeatFresh",
        "SnapshotChanged",
        "EvidenceRequired",
    ),
    "steal": (
        "Claimed",
        "NotFound",
        "AlreadyClaimed",
        "HeartbeatFresh",
        "SnapshotChanged",
        "LivenessUnconfirmed",
    ),
    "activate": ("Activated", "ClaimLost", "SnapshotChanged"),
    "abandon_claim": ("Abandoned", "ClaimLost"),
    "recover_claim": ("Recovered", "NotFound", "ClaimFresh", "ClaimChanged", "LivenessUnconfirmed"),
    "heartbeat": ("Updated", "FenceLost", "NotFound"),
    "reconfirm": ("Updated", "FenceLost", "NotFound"),
    "transition_owned": ("Transitioned", "FenceLost", "NotFound", "GuardFailed"),
    "request_cancel": ("CancelRequested", "AlreadyRequested", "NotFound", "Terminal"),
    "request_cancel_lineage": ("CancelRequested", "AlreadyRequested", "NotFound", "Terminal"),
    "acknowledge_cancel": ("True", "False"),
    "changes": ("empty", "some"),
    "list_runs": ("empty page", "page", "last page"),
    "claim_next": ("None", "RunRow"),
    "heartbeat_many": ("empty", "all renewed", "some renewed", "none renewed"),
    "purge_settled": ("0", "1", "more"),
    "compact_changes": ("0", "1", "more"),
}

#: The operations a fault can be armed for (``_faults``), by method.
FAULTED: Final = frozenset(
    {
        "claim",
        "claim_and_own",
        "activate",
        "abandon_claim",
        "steal",
        "recover_claim",
        "heartbeat",
        "reconfirm",
        "transition_owned",
        "create",
        "request_cancel_lineage",
        "acknowledge_cancel",
    }
)

Situation = tuple[str, ...]
Cell = tuple[str, str, Situation]


def _stale(stamp: int | None, now_ms: int) -> bool:
    return stamp is not None and stamp < now_ms - HEARTBEAT_STALE_AFTER_MS


def _fits(evidence: LivenessEvidence, about: OwnerId | None, observer: Any, now_ms: int) -> bool:
    if about is None or evidence.expected_owner != about or evidence.checked_at_ms != now_ms:
        return False
    if not isinstance(observer, OwnerId):
        return False
    same_host = about.host_id == observer.host_id
    if evidence.kind == "same-host-pid-dead":
        return same_host
    if evidence.kind == "cross-host-unreachable-stale":
        return not same_host
    return evidence.kind == "lease-expired"


def tag_of(method: str, outcome: Any) -> str:
    """The outcome tag of ``outcome`` for ``method``."""
    if isinstance(outcome, Raised):
        return f"raised {outcome.code}"
    if isinstance(outcome, Crashed):
        return f"crashed {outcome.exception}"
    if method in ("changes",):
        return "some" if outcome else "empty"
    if method == "list_runs" and isinstance(outcome, RunPage):
        if not outcome.runs:
            return "empty page"
        return "page" if outcome.next is not None else "last page"
    if method == "heartbeat_many" and isinstance(outcome, dict):
        renewed = sum(1 for value in outcome.values() if type(value).__name__ == "Updated")
        if not outcome:
            return "empty"
        if renewed == len(outcome):
            return "all renewed"
        return "some renewed" if renewed else "none renewed"
    if method in ("purge_settled", "compact_changes") and isinstance(outcome, int):
        return str(outcome) if outcome < 2 else "more"
    if isinstance(outcome, bool) or outcome is None:
        return repr(outcome)
    return type(outcome).__name__


def situation_of(op: Call, before: StoreState, clock_ms: int) -> Situation:
    """The prior situation of the row ``op`` is about, over its dimensions."""
    dimensions = DIMENSIONS.get(op.method, ())
    if not dimensions:
        return ()
    run_id = op.get("run_id")
    row: RunRow | None = None
    for candidate in before.rows:
        if candidate.run_id == run_id:
            row = candidate
            break
    now = op.get("now_ms")
    if not isinstance(now, int) or isinstance(now, bool):
        now = clock_ms
    values: dict[str, str] = {}
    if row is None:
        values.update(status="missing", claim="none", owner="none", cancel="no")
    else:
        status = row.status
        values["status"] = "settled" if status in ("completed", "failed", "cancelled") else status
        if row.claim is None:
            values["claim"] = "none"
        else:
            values["claim"] = "stale" if _stale(row.claimed_at_ms, now) else "held"
        if row.owner is None:
            values["owner"] = "none"
        else:
            values["owner"] = "stale" if _stale(row.heartbeat_at_ms, now) else "fresh"
        values["cancel"] = "asked" if row.cancel_requested_at_ms is not None else "no"
    if "evidence" in dimensions:
        evidence = op.get("evidence")
        if not isinstance(evidence, LivenessEvidence):
            values["evidence"] = "none"
        else:
            if op.method == "recover_claim":
                about, observer = op.get("stale_claimant"), op.get("observer")
                if row is None or row.claim != about:
                    about = None
            else:
                about = None if row is None else row.owner
                observer = op.get("claimant", op.get("owner"))
            values["evidence"] = "fits" if _fits(evidence, about, observer, now) else "unfit"
    return tuple(values[name] for name in dimensions)


@attrs.define
class Reach:
    """Counts of the cells reached, per operation: a cell is an operation, the
    outcome it gave and the situation of the run before it. Build one
    empty (``Reach()``) and pass it to ``recording_reach``, or fill it with
    ``record``; ``reach_tables`` prints it."""

    counts: Counter[Cell] = attrs.field(factory=Counter)
    """How many times each ``(operation, outcome tag, situation)`` cell was reached."""

    def record(self, op: Call, outcome: Any, before: StoreState, clock_ms: int) -> None:
        """Count the cell of one step: the call ``op``, the ``outcome`` it gave, the state
        ``before`` it and the store clock's ``clock_ms`` then. Calls of operations the tables do
        not cover are ignored."""
        if op.method not in DIMENSIONS:
            return
        tag = tag_of(op.method, outcome)
        if tag.startswith(("raised ", "crashed ")):
            situation: Situation = ()
        else:
            situation = situation_of(op, before, clock_ms)
        self.counts[(op.method, tag, situation)] += 1

    def update(self, other: Reach) -> None:
        """Add the counts of ``other`` (another ``Reach``) to these."""
        self.counts.update(other.counts)

    def reached(self) -> set[Cell]:
        """The cells reached at least once."""
        return {cell for cell, count in self.counts.items() if count}


# -- which cells can happen --------------------------------------------------------------


@attrs.frozen
class Rule:
    """Cells matching ``test`` cannot happen, because ``reason``."""

    reason: str
    test: Callable[[str, str, Mapping[str, str]], bool]


def _situation_rules() -> list[Rule]:
    def status_is(*statuses: str) -> Callable[[Mapping[str, str]], bool]:
        return lambda s: s.get("status") in statuses

    def never(
        reason: str, when: Callable[[Mapping[str, str]], bool], ops: tuple[str, ...] = ()
    ) -> Rule:
        return Rule(reason, lambda op, tag, s: (not ops or op in ops) and when(s))

    running = status_is("running")
    return [
        never(
            "a missing run has no claim",
            lambda s: s.get("status") == "missing" and s.get("claim", "none") != "none",
        ),
        never(
            "a missing run has no owner",
            lambda s: s.get("status") == "missing" and s.get("owner", "none") != "none",
        ),
        never(
            "a missing run has no cancellation",
            lambda s: s.get("status") == "missing" and s.get("cancel", "no") != "no",
        ),
        never("a running run has an owner", lambda s: running(s) and s.get("owner") == "none"),
        never(
            "only a running run has an owner",
            lambda s: not running(s) and s.get("owner", "none") != "none",
        ),
        never(
            "settling releases any claim",
            lambda s: s.get("status") == "settled" and s.get("claim", "none") != "none",
        ),
    ]


def _tag_rules() -> list[Rule]:
    return [
        Rule(
            "only create raises constraint (an existing id)",
            lambda op, tag, s: tag == "raised constraint" and op != "create",
        ),
        Rule(
            "faults are armed only for the fault rule's operations",
            lambda op, tag, s: tag == f"raised {FAULT_CODE}" and op not in FAULTED,
        ),
        Rule(
            "only operations that return a run's state decode it",
            lambda op, tag, s: (
                tag == "raised decode_failed"
                and op not in ("get", "lineage", "latest_round", "list_runs", "claim_next")
            ),
        ),
        Rule(
            "a missing run is an answer (NotFound), not an error, outside the reads",
            lambda op, tag, s: tag == "raised not_found_row" and op not in ("get", "latest_round"),
        ),
    ]


def _answer(op: str, tag: str, s: Mapping[str, str]) -> str | None:
    """Why the reference cannot answer ``tag`` to ``op`` in situation ``s``
    (read from the model's decision order), or ``None``."""
    status = s.get("status")
    claim = s.get("claim", "none")
    owner = s.get("owner", "none")
    evidence = s.get("evidence")
    cancel = s.get("cancel")
    missing = status == "missing"
    claimed = claim != "none"
    live = status in ("pending", "suspended", "running")
    if op == "create" and tag == "None" and not missing:
        return "an existing id raises constraint"
    if op in ("get", "latest_round") and tag == "RunRow" and missing:
        return "a missing run raises not_found_row"
    if evidence == "fits" and (owner == "none" if op != "recover_claim" else not claimed):
        return "evidence fits only someone the row names (no owner, or no claimant, here)"
    if evidence == "none" and op in ("steal", "recover_claim"):
        return "evidence is required: none is refused by admission"
    if tag == "NotFound" and op not in ("request_cancel_lineage",) and not missing:
        return "NotFound answers only a missing run"
    unconfirmed = op in ("steal", "recover_claim") and tag == "LivenessUnconfirmed"
    if (
        missing
        and not unconfirmed
        and tag not in ("NotFound", "ClaimLost", "False", "list", "None")
    ):
        return "a missing run gives NotFound (or the operation's plain loss)"
    if op == "request_cancel_lineage" and tag == "NotFound" and not missing:
        return "NotFound answers only a missing run"
    if op in ("claim", "claim_and_own", "steal"):
        if tag == "LivenessUnconfirmed":
            return None  # steal checks evidence against the snapshot first
        if op == "claim_and_own" and tag == "EvidenceRequired":
            if not (status == "running" and owner == "stale" and not claimed):
                return "EvidenceRequired needs an unchanged stale owner to displace"
            if evidence == "fits":
                return "evidence that fits the owner displaces it"
            return None
        if tag == "AlreadyClaimed" and not claimed:
            return "AlreadyClaimed needs a claim"
        if tag != "AlreadyClaimed" and claimed and not missing:
            return "a claim on the row answers AlreadyClaimed first"
        if tag == "HeartbeatFresh" and not (status == "running" and owner == "fresh"):
            return "HeartbeatFresh needs a fresh owner"
        if tag != "HeartbeatFresh" and status == "running" and owner == "fresh" and not claimed:
            return "a fresh owner answers HeartbeatFresh"
        if tag in ("Claimed", "Activated"):
            if op == "claim" and status not in ("pending", "suspended"):
                return "only a pending or suspended run can be claimed"
            if op == "steal" and not (status == "running" and evidence == "fits"):
                return "a steal is granted only over a stale owner, with evidence about it"
            if op == "claim_and_own" and status == "settled":
                return "a settled run cannot be owned"
        if tag == "SnapshotChanged" and status == "pending" and op == "steal":
            return None
        return None
    if op == "activate":
        if tag in ("Activated", "SnapshotChanged") and not claimed:
            return f"{tag} needs a claim to trade"
        return None
    if op == "abandon_claim":
        if tag == "Abandoned" and not claimed:
            return "Abandoned needs a claim"
        return None
    if op == "recover_claim":
        if tag in ("Recovered", "ClaimFresh") and evidence != "fits":
            return f"{tag} needs evidence about the row's claimant"
        if tag == "Recovered" and claim != "stale":
            return "Recovered needs a stale claim"
        if tag == "ClaimFresh" and claim != "held":
            return "ClaimFresh needs a claim younger than the cutoff"
        if tag == "LivenessUnconfirmed" and evidence == "fits":
            return "evidence that fits is confirmed"
        return None
    if op in ("heartbeat", "reconfirm"):
        if tag == "Updated" and status != "running":
            return "only a running run's owner renews"
        if tag == "Updated" and op == "reconfirm" and claimed:
            return "reconfirm answers FenceLost while a claim is pending"
        if tag == "FenceLost" and missing:
            return "a missing run answers NotFound"
        return None
    if op == "transition_owned":
        if tag in ("Transitioned", "GuardFailed") and status != "running":
            return "only a running run's owner moves it"
        if tag == "FenceLost" and missing:
            return "a missing run answers NotFound"
        return None
    if op == "request_cancel":
        if tag == "CancelRequested" and not (live and cancel == "no"):
            return "a request is recorded only on a live run without one"
        if tag == "AlreadyRequested" and not (live and cancel == "asked"):
            return "AlreadyRequested needs a live run already asked"
        if tag == "Terminal" and status != "settled":
            return "Terminal answers only a settled run"
        return None
    if op == "request_cancel_lineage":
        if tag == "Terminal" and status != "settled":
            return "Terminal needs every round settled, this one included"
        if tag == "AlreadyRequested" and live and cancel == "no":
            return "a live round without a request is marked (CancelRequested)"
        return None
    if op == "acknowledge_cancel":
        if tag == "True" and not (status == "running" and cancel == "asked"):
            return "only the owner of a running run with a request acknowledges"
        return None
    return None


def _outcome_rules() -> list[Rule]:
    def test(op: str, tag: str, s: Mapping[str, str]) -> bool:
        return bool(s) and _answer(op, tag, s) is not None

    return [Rule("the reference's decision order (see _answer)", test)]


UNREACHABLE: list[Rule] = [*_situation_rules(), *_tag_rules(), *_outcome_rules()]
_DECISIONS = UNREACHABLE[-1].test


def all_cells(method: str) -> list[Cell]:
    """Every cell of ``method``'s table, reachable or not."""
    dimensions = DIMENSIONS[method]
    situations = list(itertools.product(*(VALUES[name] for name in dimensions)))
    cells: list[Cell] = [
        (method, tag, situation) for tag in OUTCOMES[method] for situation in situations
    ]
    codes = (*ERROR_CODES, FAULT_CODE)
    cells += [(method, f"raised {code}", ()) for code in codes]
    return cells


def why_unreachable(cell: Cell) -> str | None:
    """The reason ``cell`` cannot happen, or ``None`` when it can."""
    method, tag, situation = cell
    named = dict(zip(DIMENSIONS[method], situation, strict=False)) if situation else {}
    for rule in UNREACHABLE:
        if rule.test(method, tag, named):
            return _answer(method, tag, named) if rule.test is _DECISIONS else rule.reason
    return None


def reachable_cells() -> list[Cell]:
    """Every cell no rule rules out."""
    return [
        cell for method in DIMENSIONS for cell in all_cells(method) if why_unreachable(cell) is None
    ]


def unreachable_cells() -> list[tuple[Cell, str]]:
    """Every cell a rule rules out, with the rule's reason."""
    out = []
    for method in DIMENSIONS:
        for cell in all_cells(method):
            reason = why_unreachable(cell)
            if reason is not None:
                out.append((cell, reason))
    return out


# -- rendering --------------------------------------------------------------------------


def reach_tables(reach: Reach, methods: tuple[str, ...] | None = None) -> str:
    """One table per operation of ``reach`` (those named in ``methods``, or every operation): a row
    per situation, a column per outcome tag; a count where reached, ``0`` where reachable but not
    reached (a gap), ``-`` where no situation of that kind can give that answer. Returns the
    text."""
    out: list[str] = []
    for method in methods or tuple(DIMENSIONS):
        dimensions = DIMENSIONS[method]
        tags = list(OUTCOMES[method])
        extra = sorted({tag for (m, tag, _) in reach.counts if m == method and tag not in tags})
        situations = list(itertools.product(*(VALUES[name] for name in dimensions)))
        header = " / ".join(dimensions) or "(any)"
        width = max([len(header)] + [len("/".join(s)) for s in situations])
        out.append(f"{method}")
        out.append("  " + header.ljust(width) + "  " + "  ".join(tags))
        for situation in situations:
            marks = []
            for tag in tags:
                cell = (method, tag, situation)
                count = reach.counts.get(cell, 0)
                if count:
                    mark = str(count)
                elif why_unreachable(cell) is not None:
                    mark = "-"
                else:
                    mark = "0"
                marks.append(mark.rjust(len(tag)))
            if all(mark.strip() == "-" for mark in marks):
                continue
            label = "/".join(situation) or "(any)"
            out.append("  " + label.ljust(width) + "  " + "  ".join(marks))
        raised = [
            f"{tag[7:]} {reach.counts.get((method, tag, ()), 0)}"
            for tag in (f"raised {c}" for c in (*ERROR_CODES, FAULT_CODE))
            if why_unreachable((method, tag, ())) is None or reach.counts.get((method, tag, ()), 0)
        ]
        if raised:
            out.append("  raised: " + ", ".join(raised))
        if extra:
            totals: Counter[str] = Counter()
            for (m, t, _), count in reach.counts.items():
                if m == method:
                    totals[t] += count
            out.append("  also: " + ", ".join(f"{tag} {totals[tag]}" for tag in extra))
        out.append("")
    return "\n".join(out)


def gaps(reach: Reach) -> list[Cell]:
    """The reachable cells ``reach`` did not reach."""
    reached = reach.reached()
    return [cell for cell in reachable_cells() if cell not in reached]


def impossible(reach: Reach) -> list[tuple[Cell, str]]:
    """Cells ``reach`` reached that a rule says cannot happen (a wrong rule,
    or a defect of the reference)."""
    reached = reach.reached()
    return [(cell, reason) for cell, reason in unreachable_cells() if cell in reached]


# -- recording --------------------------------------------------------------------------

_current: Reach | None = None


def current() -> Reach | None:
    return _current


@contextmanager
def recording(reach: Reach) -> Iterator[Reach]:
    """Record the cells the run-store machines reach into ``reach`` for the
    duration of the block."""
    global _current
    previous, _current = _current, reach
    try:
        yield reach
    finally:
        _current = previous


def record(op: Call, outcome: Any, before: StoreState, clock_ms: int) -> None:
    """Record one step, when recording."""
    if _current is not None:
        _current.record(op, outcome, before, clock_ms)


def describe_cell(cell: Cell) -> str:
    """``steal -> Claimed when status=running, claim=none, ...``."""
    method, tag, situation = cell
    named = ", ".join(f"{k}={v}" for k, v in zip(DIMENSIONS[method], situation, strict=False))
    return f"{method} -> {tag}" + (f" when {named}" if named else "")
