"""``runs``, ``show`` and ``stats``: looking inside a database (read-only)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from typing import Any

from ..._constants import HEARTBEAT_STALE_AFTER_MS, MAX_SAFE_INTEGER, MAXIMUM_PAGE_SIZE
from ..._errors import RunStoreError
from ..._values import RUN_STATUSES, Lease, OwnerId, OwnershipFact, RunRow
from ._common import FOUND, OK, Failure, Result, now_of, open_store, store_error
from ._format import (
    ago,
    attempt_json,
    fact_json,
    heartbeat_text,
    instant,
    is_stale,
    lease_json,
    owner_json,
    owner_text,
    printable,
    round_text,
    row_json,
    span,
    table,
)


def _statuses(values: list[str] | None) -> list[str] | None:
    if not values:
        return None
    found = [part.strip() for value in values for part in value.split(",") if part.strip()]
    unknown = sorted(set(found) - set(RUN_STATUSES))
    if unknown:
        raise Failure(
            f"unknown status {', '.join(unknown)} (known: {', '.join(sorted(RUN_STATUSES))})"
        )
    return found


def _run_filters(args: argparse.Namespace, now: int) -> dict[str, Any]:
    filters: dict[str, Any] = {}
    statuses = _statuses(args.status)
    if statuses is not None:
        filters["status"] = statuses
    if args.stale:
        filters["stale_at"] = now
    if args.claim_stale:
        filters["claim_stale_at"] = now
    elif args.claim_pending:
        # Every claim was granted before the end of time minus the stale span.
        filters["claim_stale_at"] = MAX_SAFE_INTEGER
    if args.cancel_requested:
        filters["cancel_requested"] = True
    if args.lineage is not None:
        filters["lineage_id"] = args.lineage
    if args.parent is not None:
        filters["parent_run_id"] = args.parent
    return filters


def runs(args: argparse.Namespace) -> Result:
    if not 1 <= args.limit <= MAXIMUM_PAGE_SIZE:
        raise Failure(f"--limit must be between 1 and {MAXIMUM_PAGE_SIZE}")
    now = now_of(args)
    filters = _run_filters(args, now)
    with open_store(args.db, read_only=True) as store:
        list_runs = store.list_runs
        rows: list[RunRow] = []
        after = args.after
        try:
            while True:
                page = list_runs(limit=args.limit, after=after, **filters)
                rows.extend(page.runs)
                after = page.next
                if after is None or not args.all:
                    break
        except RunStoreError as error:
            raise store_error(error) from None
    document = {"now_ms": now, "runs": [row_json(row, now) for row in rows], "next": after}
    lines = [
        (
            row.run_id,
            row.status,
            owner_text(row.owner),
            heartbeat_text(row, now),
            "-" if row.claim is None else f"{owner_text(row.claim)} {ago(row.claimed_at_ms, now)}",
            "-" if row.cancel_requested_at_ms is None else ago(row.cancel_requested_at_ms, now),
            ago(row.created_at_ms, now),
            round_text(row),
        )
        for row in rows
    ]
    headers = ("RUN ID", "STATUS", "OWNER", "LEASE", "CLAIM", "CANCEL", "CREATED", "LINEAGE")
    text = table(headers, lines) if lines else "no runs match\n"
    if after is not None:
        text += f"more: --after {after}\n"
    return document, text, OK


def _attempts_of(store: Any, run_id: str) -> list[Any]:
    """The run's attempts, decoded as ``AttemptStore`` decodes them."""
    from ...attempts import _store as attempts

    sql = store._attempt_queries
    ordered = " ORDER BY run_id, step_key_digest, attempt"
    assert sql.SELECT_ALL.endswith(ordered)
    statement = sql.SELECT_ALL[: -len(ordered)] + " WHERE run_id = :run_id" + ordered
    query = sql.bind(statement, {"run_id": run_id})
    rows = store._read("show", lambda connection: connection.execute(*query).fetchall())
    return [attempts._decoded("show", row) for row in rows]


def show(args: argparse.Namespace) -> Result:
    now = now_of(args)
    with open_store(args.db, read_only=True) as store:
        try:
            row = store.get(args.run_id)
        except RunStoreError as error:
            if error.code == "not_found_row":
                raise Failure(f"no run {args.run_id!r}", FOUND, {"code": error.code}) from None
            raise store_error(error) from None
        try:
            lease = store._tm.snapshot("show", lambda tx: tx.consensus.lease(tx, row.run_id))
            facts = store.ownership_facts(row.run_id)
            attempts = _attempts_of(store, row.run_id)
            lineage = store.lineage(row.run_id)
        except RunStoreError as error:
            raise store_error(error) from None
    document = {
        "now_ms": now,
        "run": row_json(row, now, state=args.state),
        "lease": lease_json(lease),
        "facts": [fact_json(fact) for fact in facts],
        "attempts": [attempt_json(attempt, values=args.state) for attempt in attempts],
        "lineage": [row_json(member, now) for member in lineage],
    }
    return document, _show_text(row, lease, facts, attempts, lineage, now, args.state), OK


def _heartbeat_line(row: RunRow, now: int) -> str:
    beat = row.heartbeat_at_ms
    if beat is None:
        return "-"
    line = f"{instant(beat)} ({ago(beat, now)}"
    if row.status == "running" and is_stale(beat, now):
        line += f"; stale for {span(now - HEARTBEAT_STALE_AFTER_MS - beat)}"
    return line + ")"


def _show_text(
    row: RunRow,
    lease: Lease | None,
    facts: list[OwnershipFact],
    attempts: list[Any],
    lineage: list[RunRow],
    now: int,
    state: bool,
) -> str:
    def when(stamp: int | None) -> str:
        return "-" if stamp is None else f"{instant(stamp)} ({ago(stamp, now)})"

    fields = [
        ("run", row.run_id),
        ("status", row.status),
        ("owner", owner_text(row.owner)),
        ("heartbeat", _heartbeat_line(row, now)),
        ("claim", owner_text(row.claim)),
        ("claimed", when(row.claimed_at_ms)),
        ("created", when(row.created_at_ms)),
        ("started", when(row.started_at_ms)),
        ("finished", when(row.finished_at_ms)),
        ("cancel requested", when(row.cancel_requested_at_ms)),
        ("parent", row.parent_run_id or "-"),
        ("lineage", round_text(row)),
        (
            "state",
            (row.state_json or "") if state else "(hidden: may hold credentials; --state shows it)",
        ),
    ]
    width = max(len(name) for name, _ in fields)
    text = "".join(f"{name.ljust(width)}  {printable(value)}\n" for name, value in fields)
    if lease is None:
        text += "\nlease (the strategy's record): none\n"
    else:
        text += "\nlease (the strategy's record):\n" + table(
            ("OWNER", "GRANTED", "HEARTBEAT", "CLAIM", "CLAIMED"),
            [
                (
                    owner_text(lease.owner),
                    ago(lease.granted_at_ms, now),
                    ago(lease.heartbeat_at_ms, now),
                    owner_text(lease.claim),
                    ago(lease.claimed_at_ms, now),
                )
            ],
            indent="  ",
        )
    text += "\nownership facts:\n" if facts else "\nownership facts: none\n"
    if facts:
        text += table(
            ("#", "TRANSITION", "OWNER", "GRANTED"),
            [
                (str(f.position), f.transition, owner_text(f.owner), ago(f.granted_at_ms, now))
                for f in facts
            ],
            indent="  ",
        )
    text += "\nattempts:\n" if attempts else "\nattempts: none\n"
    if attempts:
        text += table(
            ("STEP", "ATTEMPT", "STATE", "STARTED", "FINISHED", "HEARTBEAT"),
            [
                (
                    a.step_key_digest,
                    str(a.attempt),
                    a.state,
                    ago(a.started_at_ms, now),
                    ago(a.finished_at_ms, now),
                    ago(a.heartbeat_at_ms, now),
                )
                for a in attempts
            ],
            indent="  ",
        )
        if state:
            for a in attempts:
                values = attempt_json(a, values=True)
                shown = {
                    k: values[k] for k in ("checkpoint", "error", "outcome", "meta") if k in values
                }
                text += f"  {a.step_key_digest} #{a.attempt}: {json.dumps(shown, sort_keys=True)}\n"
    if len(lineage) > 1 or (lineage and lineage[0].run_id != row.run_id):
        text += "\nlineage:\n" + table(
            ("ROUND", "RUN ID", "STATUS"),
            [(str(m.round_ordinal), m.run_id, m.status) for m in lineage],
            indent="  ",
        )
    return text


def walk(store: Any, **filters: Any) -> Iterator[RunRow]:
    list_runs = store.list_runs
    after = None
    while True:
        try:
            page = list_runs(limit=MAXIMUM_PAGE_SIZE, after=after, **filters)
        except RunStoreError as error:
            raise store_error(error) from None
        yield from page.runs
        after = page.next
        if after is None:
            return


def stats(args: argparse.Namespace) -> Result:
    now = now_of(args)
    counts = dict.fromkeys(sorted(RUN_STATUSES), 0)
    stale_owners: dict[OwnerId, list[RunRow]] = {}
    claims = stale_claims = stale_running = 0
    oldest: RunRow | None = None
    with open_store(args.db, read_only=True) as store:
        for row in walk(store):
            counts[row.status] += 1
            if row.claim is not None:
                claims += 1
                stale_claims += is_stale(row.claimed_at_ms, now)
            if row.status == "running" and row.heartbeat_at_ms is not None:
                if oldest is None or (row.heartbeat_at_ms, row.run_id) < (
                    oldest.heartbeat_at_ms or 0,
                    oldest.run_id,
                ):
                    oldest = row
                if is_stale(row.heartbeat_at_ms, now) and row.owner is not None:
                    stale_running += 1
                    stale_owners.setdefault(row.owner, []).append(row)
        cancels = sum(1 for _ in walk(store, cancel_requested=True))
    owners = sorted(
        stale_owners.items(), key=lambda item: min(r.heartbeat_at_ms or 0 for r in item[1])
    )
    document = {
        "now_ms": now,
        "runs": sum(counts.values()),
        "by_status": counts,
        "stale_running": stale_running,
        "stale_owners": [
            {
                "owner": owner_json(owner),
                "runs": len(rows),
                "oldest_heartbeat_at_ms": min(r.heartbeat_at_ms or 0 for r in rows),
            }
            for owner, rows in owners
        ],
        "claims": claims,
        "stale_claims": stale_claims,
        "cancel_requested": cancels,
        "oldest_running_heartbeat": None
        if oldest is None
        else {
            "run_id": oldest.run_id,
            "owner": owner_json(oldest.owner),
            "heartbeat_at_ms": oldest.heartbeat_at_ms,
            "stale": is_stale(oldest.heartbeat_at_ms, now),
        },
    }
    lines = [("runs", str(document["runs"]), "")]
    for status, count in counts.items():
        note = f"{stale_running} stale" if status == "running" and stale_running else ""
        lines.append((f"  {status}", str(count), note))
    lines.append(("stale owners", str(len(owners)), ""))
    for owner, rows in owners:
        first = min(r.heartbeat_at_ms or 0 for r in rows)
        lines.append(
            (
                f"  {owner_text(owner)}",
                str(len(rows)),
                f"stale for {span(now - HEARTBEAT_STALE_AFTER_MS - first)}",
            )
        )
    lines.append(("pending claims", str(claims), f"{stale_claims} stale" if stale_claims else ""))
    lines.append(("cancel requested", str(cancels), "not yet acknowledged" if cancels else ""))
    width = [max(len(printable(line[i])) for line in lines) for i in range(2)]
    text = "".join(
        f"{printable(name).ljust(width[0])}  {printable(value).rjust(width[1])}  {note}".rstrip()
        + "\n"
        for name, value, note in lines
    )
    if oldest is not None:
        text += (
            f"oldest running heartbeat: {printable(oldest.run_id)}, "
            f"{ago(oldest.heartbeat_at_ms, now)}"
        )
        if is_stale(oldest.heartbeat_at_ms, now):
            text += f" ({heartbeat_text(oldest, now)})"
        text += "\n"
    return document, text, OK
