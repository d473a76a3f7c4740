"""Pure predicates over model run rows, as the store's decisions use them.

These are the compare-and-swap conditions of upstream-semantics.md section 4.0,
written over ``RunRow`` values: whether a row still matches a caller's snapshot
or claim, who owns it, how a lost claim is classified, which rows form a
lineage, and whether a stored row may be handed out by a read.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

from runstore._boundary import json_text_complaint
from runstore._errors import DecodeFailedError
from runstore._outcomes import AlreadyClaimed, HeartbeatFresh, NotFound, SnapshotChanged
from runstore._values import LivenessEvidence, OwnerId, RunRow, RunSnapshot

from ._leases import is_stale, matches_evidence

ClaimLoss = NotFound | AlreadyClaimed | HeartbeatFresh | SnapshotChanged


def matches_snapshot(row: RunRow, expected: RunSnapshot) -> bool:
    """Status, owner and heartbeat all equal the caller's expectation."""
    return (
        row.status == expected.status
        and row.owner == expected.owner
        and row.heartbeat_at_ms == expected.heartbeat_at_ms
    )


def matches_claim(row: RunRow, claimant: OwnerId, claimed_at_ms: int) -> bool:
    """The row's pending claim is exactly ``(claimant, claimed_at_ms)``."""
    return row.claim == claimant and row.claimed_at_ms == claimed_at_ms


def owned_by(row: RunRow, owner: OwnerId) -> bool:
    """The row is running under ``owner``."""
    return row.status == "running" and row.owner == owner


def claim_free(row: RunRow) -> bool:
    return row.claim is None and row.claimed_at_ms is None


def classify_claim_loss(row: RunRow | None, now_ms: int) -> ClaimLoss:
    """Why a claim-like operation lost, judged from the row it read."""
    if row is None:
        return NotFound()
    if row.claim is not None:
        return AlreadyClaimed()
    if (
        row.status == "running"
        and row.heartbeat_at_ms is not None
        and not is_stale(row.heartbeat_at_ms, now_ms)
    ):
        return HeartbeatFresh()
    return SnapshotChanged()


def evidence_matches(
    expected: RunSnapshot, claimant: OwnerId, now_ms: int, evidence: LivenessEvidence
) -> bool:
    """The snapshot names a running owner and the evidence is about it, now."""
    return (
        expected.status == "running"
        and expected.owner is not None
        and matches_evidence(expected.owner, claimant, now_ms, evidence)
    )


def _round_order(row: RunRow) -> tuple[int, str]:
    return (row.round_ordinal if row.round_ordinal is not None else 0, row.run_id)


def lineage_members(rows: Mapping[str, RunRow], run_id: str) -> list[RunRow]:
    """The rounds of the lineage that contains ``run_id``, in round order.

    The lineage is ``L = lineage_id or run_id`` of the named row. Its members
    are the rows naming ``L`` as their lineage, plus the row whose id is ``L``
    when that row names no lineage or names ``L`` itself. Parents never join a
    lineage. Ordered by ``(round_ordinal or 0, run_id)``; Python's string order
    is SQLite's BINARY order for identifiers (code point order = UTF-8 order).
    """
    named = rows.get(run_id)
    if named is None:
        return []
    lineage = named.lineage_id if named.lineage_id is not None else named.run_id
    members: Iterable[RunRow] = (
        row
        for row in rows.values()
        if row.lineage_id == lineage
        or (row.run_id == lineage and (row.lineage_id is None or row.lineage_id == lineage))
    )
    return sorted(members, key=_round_order)


def latest_round_row(rows: Mapping[str, RunRow], run_id: str) -> RunRow | None:
    """The highest round naming the lineage of ``run_id``, else the named row."""
    named = rows.get(run_id)
    if named is None:
        return None
    lineage = named.lineage_id if named.lineage_id is not None else named.run_id
    rounds = [row for row in rows.values() if row.lineage_id == lineage]
    if not rounds:
        return named
    # (lineage_id, round_ordinal) is unique and a lineage member always has a
    # round, so the highest round is a single row.
    return max(rounds, key=lambda row: row.round_ordinal or 0)


def _parses(text: str) -> bool:
    try:
        json.loads(text)
    except (ValueError, RecursionError):
        return False
    return True


def decoded(method: str, row: RunRow) -> RunRow:
    """``row``, after checking it may leave the store.

    The model writes every column itself, so only the run state can be broken
    (by ``ModelRunStore.raw_write_state``); a row whose stored text no longer
    passes admission raises ``DecodeFailedError`` with a payload-free cause.
    """
    if json_text_complaint(row.state_json) is not None:
        raise DecodeFailedError(
            method,
            "flows_runs row violates durable invariants",
            {
                "run_id": row.run_id,
                "stage": "row-invariants",
                "status": row.status,
                "heartbeat_at_ms": row.heartbeat_at_ms,
                "claimed_at_ms": row.claimed_at_ms,
                "has_claim_columns": row.claim is not None,
                "has_owner_columns": row.owner is not None,
                "state_json_valid": row.state_json is not None and _parses(row.state_json),
            },
        )
    return row
