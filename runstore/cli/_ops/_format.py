"""How the operator commands show values: owners, ages, instants, aligned
tables, and the JSON objects of rows, leases, facts and attempts."""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from typing import Any, Final

from ..._constants import HEARTBEAT_STALE_AFTER_MS
from ..._values import Lease, OwnerId, OwnershipFact, RunRow


def owner_text(owner: OwnerId | None) -> str:
    return "-" if owner is None else f"{owner.host_id}/{owner.pid}/{owner.nonce}"


def owner_json(owner: OwnerId | None) -> dict[str, Any] | None:
    if owner is None:
        return None
    return {"host_id": owner.host_id, "pid": owner.pid, "nonce": owner.nonce}


def span(ms: int) -> str:
    """A duration in the largest unit that keeps it readable: ``41 s``,
    ``12 min``, ``3 h``, ``5 d``."""
    seconds = ms // 1000
    if seconds < 100:
        return f"{seconds} s"
    if seconds < 100 * 60:
        return f"{seconds // 60} min"
    if seconds < 48 * 3600:
        return f"{seconds // 3600} h"
    return f"{seconds // 86400} d"


def ago(stamp: int | None, now: int) -> str:
    if stamp is None:
        return "-"
    if stamp > now:
        return f"in {span(stamp - now)}"
    return f"{span(now - stamp)} ago"


def instant(stamp: int | None) -> str:
    """A timestamp in UTC, to the millisecond."""
    if stamp is None:
        return "-"
    moment = datetime.datetime.fromtimestamp(stamp / 1000, tz=datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def is_stale(stamp: int | None, now: int) -> bool:
    """Whether a heartbeat or claim stamped at ``stamp`` is stale at ``now``
    (older than ``HEARTBEAT_STALE_AFTER_MS``: what ``list_runs``'s
    ``stale_at`` and ``claim_stale_at`` select)."""
    return stamp is not None and stamp < now - HEARTBEAT_STALE_AFTER_MS


def heartbeat_text(row: RunRow, now: int) -> str:
    """``heartbeat 3 s ago`` or ``stale for 41 s`` for a running row."""
    beat = row.heartbeat_at_ms
    if row.status != "running" or beat is None:
        return "-"
    if is_stale(beat, now):
        return f"stale for {span(now - HEARTBEAT_STALE_AFTER_MS - beat)}"
    return f"heartbeat {ago(beat, now)}"


def row_json(row: RunRow, now: int, *, state: bool = False) -> dict[str, Any]:
    """A run row as JSON: ``RunRow``'s fields (owners as objects; ``state_json``
    only when asked), plus ``stale`` and ``claim_stale`` judged at ``now``."""
    document: dict[str, Any] = {
        "run_id": row.run_id,
        "status": row.status,
        "created_at_ms": row.created_at_ms,
        "started_at_ms": row.started_at_ms,
        "finished_at_ms": row.finished_at_ms,
        "owner": owner_json(row.owner),
        "heartbeat_at_ms": row.heartbeat_at_ms,
        "claim": owner_json(row.claim),
        "claimed_at_ms": row.claimed_at_ms,
        "parent_run_id": row.parent_run_id,
        "cancel_requested_at_ms": row.cancel_requested_at_ms,
        "lineage_id": row.lineage_id,
        "round_ordinal": row.round_ordinal,
        "stale": row.status == "running" and is_stale(row.heartbeat_at_ms, now),
        "claim_stale": row.claim is not None and is_stale(row.claimed_at_ms, now),
    }
    if state:
        document["state_json"] = row.state_json
    return document


def lease_json(lease: Lease | None) -> dict[str, Any] | None:
    if lease is None:
        return None
    return {
        "owner": owner_json(lease.owner),
        "granted_at_ms": lease.granted_at_ms,
        "heartbeat_at_ms": lease.heartbeat_at_ms,
        "claim": owner_json(lease.claim),
        "claimed_at_ms": lease.claimed_at_ms,
    }


def fact_json(fact: OwnershipFact) -> dict[str, Any]:
    return {
        "position": fact.position,
        "transition": fact.transition,
        "owner": owner_json(fact.owner),
        "granted_at_ms": fact.granted_at_ms,
    }


def printable(text: str) -> str:
    """``text`` with every character a terminal could act on (control, format
    and separator characters other than the space: escape sequences, bidi
    overrides) written as a Python escape, so a run id cannot repaint the
    operator's terminal."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


def printable_lines(text: str) -> str:
    """``printable`` for each line of ``text`` (the line breaks are kept)."""
    return "\n".join(printable(line) for line in text.split("\n"))


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], indent: str = "") -> str:
    """Left-aligned columns, two spaces apart; the last column is not padded.
    Cells are made ``printable`` first, so the columns stay aligned."""
    cleaned = [[printable(str(cell)) for cell in cells] for cells in (headers, *rows)]
    widths = [max(len(cell) for cell in column) for column in zip(*cleaned, strict=True)]
    lines = []
    for cells in cleaned:
        padded = [cell.ljust(width) for cell, width in zip(cells, widths, strict=True)]
        lines.append((indent + "  ".join(padded)).rstrip())
    return "\n".join(lines) + "\n"


ATTEMPT_VALUES: Final = ("checkpoint", "error", "outcome", "meta")


def attempt_json(attempt: Any, *, values: bool) -> dict[str, Any]:
    from ...attempts import ABSENT

    document: dict[str, Any] = {
        "step_key_digest": attempt.step_key_digest,
        "attempt": attempt.attempt,
        "state": attempt.state,
        "started_at_ms": attempt.started_at_ms,
        "finished_at_ms": attempt.finished_at_ms,
        "heartbeat_at_ms": attempt.heartbeat_at_ms,
    }
    if values:
        for name in ATTEMPT_VALUES:
            value = getattr(attempt, name)
            if value is not ABSENT:
                document[name] = value
    return document


def round_text(row: RunRow) -> str:
    if row.lineage_id is None and row.round_ordinal is None:
        return "-"
    return f"{row.lineage_id or row.run_id} #{row.round_ordinal}"
