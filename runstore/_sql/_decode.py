"""Decoding rows read back from the database.

The CHECK constraints make impossible rows impossible for every writer that
leaves them on, but a file can be edited behind the store's back, so every run
row is re-validated on read: first its shape (types and ranges, the
``row-schema`` stage), then the invariants that tie its columns together and
its state's admissibility. A failure is ``decode_failed`` with a payload-free
cause: the run id, timestamps and flags, never the state text.

``raw_row`` builds a ``RunRow`` without judging it, for ``state()``, which must
describe a corrupt database rather than refuse to.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from .._boundary import is_identifier, is_timestamp, json_text_complaint
from .._errors import DecodeFailedError
from .._values import (
    OWNERSHIP_TRANSITIONS,
    RUN_STATUSES,
    CancelAcknowledgement,
    OwnerId,
    OwnershipFact,
    RunChange,
    RunRow,
)


def _optional(value: object, check: Any) -> bool:
    return value is None or bool(check(value))


def _schema_ok(row: Sequence[Any], stateless: bool = False) -> bool:
    (
        run_id,
        status,
        created,
        started,
        finished,
        owner_host,
        owner_pid,
        owner_nonce,
        heartbeat,
        claim_host,
        claim_pid,
        claim_nonce,
        claimed_at,
        parent,
        cancel,
        lineage,
        round_ordinal,
        state,
    ) = row
    return (
        is_identifier(run_id)
        and type(status) is str
        and status in RUN_STATUSES
        and is_timestamp(created)
        and _optional(started, is_timestamp)
        and _optional(finished, is_timestamp)
        and _optional(owner_host, is_identifier)
        and _optional(owner_pid, is_timestamp)
        and _optional(owner_nonce, is_identifier)
        and _optional(heartbeat, is_timestamp)
        and _optional(claim_host, is_identifier)
        and _optional(claim_pid, is_timestamp)
        and _optional(claim_nonce, is_identifier)
        and _optional(claimed_at, is_timestamp)
        and _optional(parent, is_identifier)
        and _optional(cancel, is_timestamp)
        and _optional(lineage, is_identifier)
        and _optional(round_ordinal, is_timestamp)
        and (state is None if stateless else type(state) is str)
    )


def _identity(host: object, pid: object, nonce: object) -> OwnerId | bool | None:
    """The owner the three columns name; None when all are empty; False when partial."""
    if host is None and pid is None and nonce is None:
        return None
    if host is None or pid is None or nonce is None:
        return False
    return OwnerId(host, pid, nonce)  # type: ignore[arg-type]


def _state_valid(state: object) -> bool:
    if type(state) is not str:
        return False
    try:
        json.loads(state)
    except (ValueError, RecursionError):
        return False
    return True


def decode_run(method: str, row: Sequence[Any], *, stateless: bool = False) -> RunRow:
    """A validated ``RunRow``, or ``decode_failed``. ``stateless``: a listed
    row read without its state (the state column is NULL and not judged)."""
    if not _schema_ok(row, stateless):
        raise DecodeFailedError(
            method,
            "could not decode flows_runs row",
            {"run_id": row[0] if is_identifier(row[0]) else None, "stage": "row-schema"},
        )
    owner = _identity(row[5], row[6], row[7])
    claim = _identity(row[9], row[10], row[11])
    status, heartbeat, claimed_at, state = row[1], row[8], row[12], row[17]
    broken_owner = (
        owner is False
        or (owner is None) != (heartbeat is None)
        or (status == "running") != (owner is not None)
    )
    broken_claim = claim is False or (claim is None) != (claimed_at is None)
    broken_state = not stateless and json_text_complaint(state) is not None
    if broken_owner or broken_claim or broken_state:
        # The cause reaches logs and telemetry; run state may hold credentials,
        # so only the invariants read here are reported.
        raise DecodeFailedError(
            method,
            "flows_runs row violates durable invariants",
            {
                "run_id": row[0],
                "stage": "invariants",
                "status": status,
                "heartbeat_at_ms": heartbeat,
                "claimed_at_ms": claimed_at,
                "has_owner_columns": any(v is not None for v in row[5:8]),
                "has_claim_columns": any(v is not None for v in row[9:12]),
                "state_json_valid": None if stateless else _state_valid(state),
            },
        )
    return RunRow(
        run_id=row[0],
        status=status,
        created_at_ms=row[2],
        started_at_ms=row[3],
        finished_at_ms=row[4],
        owner=owner,  # type: ignore[arg-type]
        heartbeat_at_ms=heartbeat,
        claim=claim,  # type: ignore[arg-type]
        claimed_at_ms=claimed_at,
        parent_run_id=row[13],
        cancel_requested_at_ms=row[14],
        lineage_id=row[15],
        round_ordinal=row[16],
        state_json=state,
    )


def raw_run(row: Sequence[Any]) -> RunRow:
    """The row as stored, without validation (a partial identity is kept as is)."""

    def identity(host: Any, pid: Any, nonce: Any) -> OwnerId | None:
        if host is None and pid is None and nonce is None:
            return None
        return OwnerId(host, pid, nonce)

    return RunRow(
        run_id=row[0],
        status=row[1],
        created_at_ms=row[2],
        started_at_ms=row[3],
        finished_at_ms=row[4],
        owner=identity(row[5], row[6], row[7]),
        heartbeat_at_ms=row[8],
        claim=identity(row[9], row[10], row[11]),
        claimed_at_ms=row[12],
        parent_run_id=row[13],
        cancel_requested_at_ms=row[14],
        lineage_id=row[15],
        round_ordinal=row[16],
        state_json=row[17],
    )


def decode_fact(method: str, row: Sequence[Any]) -> OwnershipFact:
    run_id, position, transition, host, pid, nonce, granted = row
    if not (
        is_identifier(run_id)
        and type(position) is int
        and position >= 1
        and type(transition) is str
        and transition in OWNERSHIP_TRANSITIONS
        and is_identifier(host)
        and is_timestamp(pid)
        and is_identifier(nonce)
        and _optional(granted, is_timestamp)
    ):
        raise DecodeFailedError(
            method,
            "could not decode flows_ownership_facts row",
            {"run_id": run_id if is_identifier(run_id) else None, "stage": "fact-schema"},
        )
    return OwnershipFact(run_id, transition, OwnerId(host, pid, nonce), granted, position)  # type: ignore[arg-type]


def raw_fact(row: Sequence[Any]) -> OwnershipFact:
    run_id, position, transition, host, pid, nonce, granted = row
    return OwnershipFact(run_id, transition, OwnerId(host, pid, nonce), granted, position)


def decode_change(method: str, row: Sequence[Any]) -> RunChange:
    run_id, revision, deleted = row
    if not (is_identifier(run_id) and is_timestamp(revision) and deleted in (0, 1)):
        raise DecodeFailedError(
            method, "could not decode flows_run_changes row", {"stage": "change-schema"}
        )
    return RunChange(run_id, revision, bool(deleted))


def acknowledgement_json(observed_at_ms: int, owner: OwnerId) -> str:
    """The stored form of a first cancellation acknowledgement."""
    return json.dumps(
        {
            "observedAtMs": observed_at_ms,
            "owner": {"hostId": owner.host_id, "pid": owner.pid, "nonce": owner.nonce},
        },
        separators=(",", ":"),
        ensure_ascii=False,
    )


def decode_acknowledgement(run_id: str, text: object) -> CancelAcknowledgement | None:
    """The acknowledgement stored on a run, or None when the text is not one."""
    try:
        value = json.loads(text)  # type: ignore[arg-type]
        owner = value["owner"]
        acknowledgement = CancelAcknowledgement(
            run_id,
            value["observedAtMs"],
            OwnerId(owner["hostId"], owner["pid"], owner["nonce"]),
        )
    except (TypeError, ValueError, KeyError, RecursionError):
        return None
    return acknowledgement
