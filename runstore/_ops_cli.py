"""The operator commands of ``runstore``: look inside a database, check it,
purge it, back it up and migrate it, on a SQLite path or a PostgreSQL URL alike.

- ``runstore runs DB``: one page of runs (filters: ``--status``, ``--stale``,
  ``--claim-pending``, ``--claim-stale``, ``--cancel-requested``,
  ``--lineage``, ``--parent``; ``--limit``, ``--after CURSOR``, ``--all``).
- ``runstore show DB RUN_ID``: the row, its lease, its ownership facts, its
  attempts and its lineage. Run state and attempt values are shown only with
  ``--state``: they may hold credentials.
- ``runstore check DB``: the schema version, ``check_invariants()`` (the
  run store's and the attempts'), SQLite's ``integrity_check`` and
  ``foreign_key_check``, and whether every row agrees with its lease.
- ``runstore stats DB``: counts by status, stale owners, pending claims,
  unacknowledged cancellation requests, the oldest running heartbeat.
- ``runstore purge DB --before WHEN``: what ``purge_settled`` would delete
  (a dry run); ``--yes`` deletes it.
- ``runstore backup DB DEST``: SQLite's online backup of a live database
  into ``DEST`` (created 0600; an existing ``DEST`` only with ``--force``).
  PostgreSQL is backed up with its own tools; the command says which.
- ``runstore migrate DB``: apply the pending migrations; ``--check`` only
  reports them.

Every command that reads opens the store with ``read_only=True``; ``purge
--yes`` opens it writable with ``migrate=False``; only ``migrate`` migrates.
"Now" (for staleness and ages) is the wall clock (``SystemClock``), or
``--now MS``. ``--json`` prints one JSON document on stdout (its fields are
listed in ``docs/guides/operate.md``); an error is then ``{"error": {...}}``.
A URL's password is never printed.

Exit codes: 0 done (no problem found), 1 a check failed or something was
found wanting (``check``, ``migrate --check`` with pending steps, ``show`` of
a missing run), 2 a usage error, a database that cannot be opened, or an
operation the store lacks.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import secrets
import sqlite3
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Final, TextIO

from . import _open
from ._clock import SystemClock
from ._constants import HEARTBEAT_STALE_AFTER_MS, MAX_SAFE_INTEGER, MAXIMUM_PAGE_SIZE
from ._constants import MAXIMUM_PURGE_BATCH as MAXIMUM_PURGE_BATCH
from ._errors import RunStoreError
from ._values import RUN_STATUSES, TERMINAL_STATUSES, Lease, OwnerId, OwnershipFact, RunRow

COMMANDS: Final = ("runs", "show", "check", "stats", "purge", "backup", "migrate")

#: Exit codes.
OK: Final = 0
FOUND: Final = 1
USAGE: Final = 2

_UNITS: Final = {"ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}
_DURATION: Final = re.compile(r"^(\d+)\s*(ms|s|min|m|h|d)$")

_POSTGRES_BACKUP: Final = """\
{target} is a PostgreSQL database; back it up with the server's tools:
  - a logical copy of the store's schema:
      pg_dump --format=custom --schema=SCHEMA --file=runs.dump 'URL'
    (restore it with pg_restore; the copy is one consistent snapshot)
  - a physical copy of the whole cluster, for point-in-time recovery:
      pg_basebackup --pgdata=DIR --wal-method=stream, with WAL archiving
See docs/guides/operate.md, "Backups".
"""


class _Failure(Exception):
    """Internal: the command cannot go on; ``code`` is its exit status."""

    def __init__(self, text: str, code: int = USAGE, detail: dict[str, Any] | None = None):
        super().__init__(text)
        self.text = text
        self.code = code
        self.detail = detail or {}


# -- the parsers ---------------------------------------------------------------------------


def add_parsers(commands: Any) -> None:
    """Add the operator subcommands to ``runstore``'s subparsers."""

    def command(name: str, help_text: str, description: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = commands.add_parser(
            name, help=help_text, description=description
        )
        parser.add_argument("db", metavar="DB", help="a SQLite file or a postgresql:// URL")
        return parser

    def json_flag(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--json", action="store_true", help="print one JSON document on stdout")

    def now_flag(parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--now",
            type=_timestamp,
            metavar="MS",
            help="judge staleness and ages at this time (ms since the epoch; default: the clock)",
        )

    runs = command(
        "runs",
        "list runs (read-only)",
        "List runs, oldest first, one page at a time. Filters combine (all must hold).",
    )
    runs.add_argument(
        "--status",
        action="append",
        metavar="STATUS",
        help=f"only this status ({', '.join(sorted(RUN_STATUSES))}); repeat or separate by commas",
    )
    runs.add_argument(
        "--stale", action="store_true", help="running with a stale heartbeat (takeover candidates)"
    )
    runs.add_argument("--claim-pending", action="store_true", help="holding a claim")
    runs.add_argument(
        "--claim-stale",
        action="store_true",
        help="holding a stale claim (recover_claim candidates)",
    )
    runs.add_argument(
        "--cancel-requested",
        action="store_true",
        help="cancellation requested and not yet acknowledged",
    )
    runs.add_argument("--lineage", metavar="LINEAGE_ID", help="the rounds of this lineage")
    runs.add_argument("--parent", metavar="RUN_ID", help="the runs forked from this run")
    runs.add_argument(
        "--limit",
        type=int,
        default=50,
        metavar="N",
        help=f"rows per page, 1 to {MAXIMUM_PAGE_SIZE} (default %(default)s)",
    )
    runs.add_argument("--after", metavar="CURSOR", help="the page after this cursor")
    runs.add_argument("--all", action="store_true", help="every page")
    now_flag(runs)
    json_flag(runs)

    show = command(
        "show",
        "show one run (read-only)",
        "Show a run's row, lease, ownership facts, attempts and lineage. Run state and "
        "attempt values may hold credentials: they are shown only with --state.",
    )
    show.add_argument("run_id", metavar="RUN_ID")
    show.add_argument(
        "--state", action="store_true", help="also show the run state and the attempt values"
    )
    now_flag(show)
    json_flag(show)

    check = command(
        "check",
        "check a database (read-only)",
        "Check the schema version, the store's invariants, SQLite's integrity and that "
        "every row agrees with its lease. Exit 0 when all pass, 1 when one fails.",
    )
    json_flag(check)

    stats = command(
        "stats",
        "counts by status, stale owners, claims (read-only)",
        "Count runs by status, stale owners, pending claims and cancellation requests, "
        "and name the oldest running heartbeat.",
    )
    now_flag(stats)
    json_flag(stats)

    purge = command(
        "purge",
        "delete settled runs that finished before a time",
        "List (dry run, the default) or delete (--yes) the settled runs purge_settled "
        "takes: finished before WHEN, no live round in their lineage, no child run.",
    )
    purge.add_argument(
        "--before",
        required=True,
        metavar="WHEN",
        help="ms since the epoch, an ISO 8601 time (UTC unless it says), or an age "
        "such as 30d, 12h, 90m, 45s (finished longer ago than that)",
    )
    purge.add_argument(
        "--limit",
        type=int,
        default=1000,
        metavar="N",
        help=f"at most this many runs, 1 to {MAXIMUM_PURGE_BATCH} (default %(default)s)",
    )
    purge.add_argument("--yes", action="store_true", help="delete them (default: a dry run)")
    now_flag(purge)
    json_flag(purge)

    backup = command(
        "backup",
        "copy a live SQLite database",
        "Copy a SQLite database with SQLite's online backup (a consistent snapshot, "
        "writers may go on) into DEST, created 0600. PostgreSQL: see the message.",
    )
    backup.add_argument("dest", metavar="DEST", help="the copy's file name")
    backup.add_argument("--force", action="store_true", help="replace an existing DEST")
    json_flag(backup)

    migrate = command(
        "migrate",
        "apply pending schema migrations",
        "Apply the pending migrations (a missing SQLite file or schema is created). With "
        "--check, only report them: exit 1 when some are pending.",
    )
    migrate.add_argument(
        "--check", action="store_true", help="report the pending steps without migrating"
    )
    json_flag(migrate)


def _timestamp(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("must be an integer (ms since the epoch)") from None
    if not 0 <= value <= MAX_SAFE_INTEGER:
        raise argparse.ArgumentTypeError("must be between 0 and 2**53 - 1")
    return value


# -- running a command -------------------------------------------------------------------


def run(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run the operator command ``args.command``; its exit status."""
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    handler = _HANDLERS[args.command]
    want_json = bool(getattr(args, "json", False))
    try:
        document, text, code = handler(args)
    except _Failure as failure:
        if want_json:
            error = {"message": failure.text, **failure.detail}
            out.write(json.dumps({"error": error}, indent=2, ensure_ascii=False) + "\n")
        else:
            err.write(f"runstore {args.command}: {failure.text}\n")
        return failure.code
    if want_json:
        out.write(json.dumps(document, indent=2, ensure_ascii=False) + "\n")
    else:
        out.write(text)
    return code


Result = tuple[dict[str, Any], str, int]


def _shown(target: str) -> str:
    """The target as it may be printed: a URL without its password."""
    if not _open.is_postgres_url(target):
        return target
    try:
        from .postgres._open import redacted
    except ImportError:
        return target.partition("://")[0] + "://(details hidden)"
    return redacted(target)


def _open_store(target: str, **options: Any) -> Any:
    try:
        return _open.open(target, **options)
    except RunStoreError as error:
        raise _cannot_open(target, error) from None


def _cannot_open(target: str, error: RunStoreError) -> _Failure:
    return _Failure(
        f"cannot open {_shown(target)}: {error.message}",
        USAGE,
        {"code": error.code, "cause": _plain(error.cause)},
    )


def _plain(value: Any) -> Any:
    """A cause as JSON can hold it."""
    return json.loads(json.dumps(value, default=str))


def _require(store: Any, operation: str) -> Callable[..., Any]:
    found = getattr(store, operation, None)
    if not callable(found):
        raise _Failure(
            f"this {store.dialect} store has no {operation} operation "
            "(this version of runstore does not offer it yet)",
            USAGE,
            {"code": "unsupported_operation", "operation": operation},
        )
    return found  # type: ignore[no-any-return]


def _now(args: argparse.Namespace) -> int:
    return int(args.now) if getattr(args, "now", None) is not None else SystemClock().now_ms()


def _store_error(error: RunStoreError) -> _Failure:
    return _Failure(error.message, USAGE, {"code": error.code, "cause": _plain(error.cause)})


# -- values as text and as JSON ------------------------------------------------------------


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


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], indent: str = "") -> str:
    """Left-aligned columns, two spaces apart; the last column is not padded."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows, strict=True)]
    lines = []
    for cells in (headers, *rows):
        padded = [str(cell).ljust(width) for cell, width in zip(cells, widths, strict=True)]
        lines.append((indent + "  ".join(padded)).rstrip())
    return "\n".join(lines) + "\n"


# -- runs ------------------------------------------------------------------------------------


def _statuses(values: list[str] | None) -> list[str] | None:
    if not values:
        return None
    found = [part.strip() for value in values for part in value.split(",") if part.strip()]
    unknown = sorted(set(found) - set(RUN_STATUSES))
    if unknown:
        raise _Failure(
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


def _runs(args: argparse.Namespace) -> Result:
    if not 1 <= args.limit <= MAXIMUM_PAGE_SIZE:
        raise _Failure(f"--limit must be between 1 and {MAXIMUM_PAGE_SIZE}")
    now = _now(args)
    filters = _run_filters(args, now)
    with _open_store(args.db, read_only=True) as store:
        list_runs = _require(store, "list_runs")
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
            raise _store_error(error) from None
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
            _round_text(row),
        )
        for row in rows
    ]
    headers = ("RUN ID", "STATUS", "OWNER", "LEASE", "CLAIM", "CANCEL", "CREATED", "LINEAGE")
    text = table(headers, lines) if lines else "no runs match\n"
    if after is not None:
        text += f"more: --after {after}\n"
    return document, text, OK


def _round_text(row: RunRow) -> str:
    if row.lineage_id is None and row.round_ordinal is None:
        return "-"
    return f"{row.lineage_id or row.run_id} #{row.round_ordinal}"


# -- show ------------------------------------------------------------------------------------


def _attempts_of(store: Any, run_id: str) -> list[Any]:
    """The run's attempts, decoded as ``AttemptStore`` decodes them."""
    from .attempts import _store as attempts

    sql = attempts._statements(store.dialect)
    ordered = " ORDER BY run_id, step_key_digest, attempt"
    assert sql.SELECT_ALL.endswith(ordered)
    statement = sql.SELECT_ALL[: -len(ordered)] + " WHERE run_id = :run_id" + ordered
    query = sql.bind(statement, {"run_id": run_id})
    rows = store._read("show", lambda connection: connection.execute(*query).fetchall())
    return [attempts._decoded("show", row) for row in rows]


_ATTEMPT_VALUES: Final = ("checkpoint", "error", "outcome", "meta")


def attempt_json(attempt: Any, *, values: bool) -> dict[str, Any]:
    from .attempts import ABSENT

    document: dict[str, Any] = {
        "step_key_digest": attempt.step_key_digest,
        "attempt": attempt.attempt,
        "state": attempt.state,
        "started_at_ms": attempt.started_at_ms,
        "finished_at_ms": attempt.finished_at_ms,
        "heartbeat_at_ms": attempt.heartbeat_at_ms,
    }
    if values:
        for name in _ATTEMPT_VALUES:
            value = getattr(attempt, name)
            if value is not ABSENT:
                document[name] = value
    return document


def _show(args: argparse.Namespace) -> Result:
    now = _now(args)
    with _open_store(args.db, read_only=True) as store:
        try:
            row = store.get(args.run_id)
        except RunStoreError as error:
            if error.code == "not_found_row":
                raise _Failure(f"no run {args.run_id!r}", FOUND, {"code": error.code}) from None
            raise _store_error(error) from None
        try:
            lease = store._tm.snapshot("show", lambda tx: tx.consensus.lease(tx, row.run_id))
            facts = store.ownership_facts(row.run_id)
            attempts = _attempts_of(store, row.run_id)
            lineage = store.lineage(row.run_id)
        except RunStoreError as error:
            raise _store_error(error) from None
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
        ("lineage", _round_text(row)),
        (
            "state",
            (row.state_json or "") if state else "(hidden: may hold credentials; --state shows it)",
        ),
    ]
    width = max(len(name) for name, _ in fields)
    text = "".join(f"{name.ljust(width)}  {value}\n" for name, value in fields)
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


# -- check -------------------------------------------------------------------------------------


def _migration_names() -> dict[int, str]:
    from .sqlite._migrations import MIGRATIONS

    return {step.id: step.name for step in MIGRATIONS}


def _step_json(ids: Sequence[int]) -> list[dict[str, Any]]:
    names = _migration_names()
    return [{"id": step, "name": names.get(step, "?")} for step in ids]


def _check(args: argparse.Namespace) -> Result:
    checks: list[dict[str, Any]] = []

    def record(name: str, ok: bool, detail: str, **extra: Any) -> None:
        checks.append({"name": name, "ok": ok, "detail": detail, **extra})

    try:
        store = _open.open(args.db, read_only=True)
    except RunStoreError as error:
        if error.cause.get("stage") != "needs-migration":
            raise _cannot_open(args.db, error) from None
        pending = list(error.cause["pending_migrations"])
        record(
            "schema",
            False,
            f"{len(pending)} migration(s) pending; the other checks need a migrated "
            "schema ('runstore migrate DB')",
            pending=_step_json(pending),
        )
        return _check_result(args, checks)
    with store:
        _check_schema(store, record)
        _check_invariants(store, record)
        if store.dialect == "sqlite":
            _check_sqlite(store, record)
        _check_leases(store, record)
    return _check_result(args, checks)


def _check_result(args: argparse.Namespace, checks: list[dict[str, Any]]) -> Result:
    ok = all(check["ok"] for check in checks)
    document = {"ok": ok, "checks": checks}
    width = max(len(check["name"]) for check in checks)
    text = "".join(
        f"{'ok' if check['ok'] else 'FAILED':6}  {check['name'].ljust(width)}  {check['detail']}\n"
        for check in checks
    )
    text += "all checks passed\n" if ok else "some checks FAILED\n"
    return document, text, OK if ok else FOUND


def _check_schema(store: Any, record: Callable[..., None]) -> None:
    names = _migration_names()
    rows = store._read(
        "check", lambda c: c.execute("SELECT id, name FROM flows_migrations").fetchall()
    )
    applied = sorted(int(step) for step, _name in rows)
    known = list(names)
    missing = [step for step in known if step not in applied]
    latest = known[-1]
    record(
        "schema",
        not missing,
        f"{len(applied)} of {len(known)} migrations applied, latest {latest} {names[latest]}"
        if not missing
        else f"pending: {', '.join(str(step) for step in missing)}",
        applied=_step_json([step for step in known if step in applied]),
    )


def _check_invariants(store: Any, record: Callable[..., None]) -> None:
    from .attempts import AttemptStore, AttemptStoreError

    for name, check in (
        ("invariants", store.check_invariants),
        ("attempt invariants", AttemptStore(store).check_invariants),
    ):
        try:
            check()
        except AssertionError as broken:
            record(name, False, str(broken))
        except (RunStoreError, AttemptStoreError) as error:
            record(name, False, f"could not be checked: {error.message}")
        else:
            record(name, True, "hold")


def _check_sqlite(store: Any, record: Callable[..., None]) -> None:
    def pragma(text: str) -> list[tuple[Any, ...]]:
        return list(store._read("check", lambda c: c.execute(text).fetchall()))

    try:
        integrity = [str(row[0]) for row in pragma("PRAGMA integrity_check(20)")]
        foreign = pragma("PRAGMA foreign_key_check")
    except RunStoreError as error:
        record("sqlite integrity", False, f"could not be checked: {error.message}")
        return
    fine = integrity == ["ok"]
    record(
        "sqlite integrity",
        fine,
        "ok" if fine else "; ".join(integrity),
        problems=[] if fine else integrity,
    )
    record(
        "sqlite foreign keys",
        not foreign,
        "ok" if not foreign else f"{len(foreign)} row(s) name a missing parent",
        problems=[f"{row[0]} rowid {row[1]} -> {row[2]}" for row in foreign[:20]],
    )


def _check_leases(store: Any, record: Callable[..., None]) -> None:
    """Every row and its lease agree (all of them, not only the first that
    does not, as ``check_invariants`` stops at)."""
    try:
        whole = store.state()
    except RunStoreError as error:
        record("rows and leases agree", False, f"could not be checked: {error.message}")
        return
    leases = {lease.run_id: lease for lease in whole.leases}
    runs = {row.run_id for row in whole.rows}
    disagree: list[str] = []
    for row in whole.rows:
        lease = leases.get(row.run_id)
        if lease is None:
            agree = row.owner is None and row.claim is None
        else:
            agree = (
                lease.owner == row.owner
                and lease.heartbeat_at_ms == row.heartbeat_at_ms
                and lease.claim == row.claim
                and lease.claimed_at_ms == row.claimed_at_ms
            )
        if not agree:
            disagree.append(row.run_id)
    orphans = sorted(set(leases) - runs)
    problems = [f"{rid}: row and lease differ" for rid in disagree] + [
        f"{rid}: lease without a run" for rid in orphans
    ]
    record(
        "rows and leases agree",
        not problems,
        f"{len(whole.rows)} runs, {len(leases)} leases"
        if not problems
        else f"{len(problems)} problem(s): {', '.join(problems[:5])}",
        problems=problems[:100],
    )


# -- stats -------------------------------------------------------------------------------------


def _walk(store: Any, **filters: Any) -> Iterator[RunRow]:
    list_runs = _require(store, "list_runs")
    after = None
    while True:
        try:
            page = list_runs(limit=MAXIMUM_PAGE_SIZE, after=after, **filters)
        except RunStoreError as error:
            raise _store_error(error) from None
        yield from page.runs
        after = page.next
        if after is None:
            return


def _stats(args: argparse.Namespace) -> Result:
    now = _now(args)
    counts = dict.fromkeys(sorted(RUN_STATUSES), 0)
    stale_owners: dict[OwnerId, list[RunRow]] = {}
    claims = stale_claims = stale_running = 0
    oldest: RunRow | None = None
    with _open_store(args.db, read_only=True) as store:
        for row in _walk(store):
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
        cancels = sum(1 for _ in _walk(store, cancel_requested=True))
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
    if oldest is not None:
        lines.append(
            (
                "oldest running heartbeat",
                oldest.run_id,
                f"{heartbeat_text(oldest, now)} ({ago(oldest.heartbeat_at_ms, now)})",
            )
        )
    width = [max(len(line[i]) for line in lines) for i in range(2)]
    text = "".join(
        f"{name.ljust(width[0])}  {value.rjust(width[1])}  {note}".rstrip() + "\n"
        for name, value, note in lines
    )
    return document, text, OK


# -- purge -------------------------------------------------------------------------------------


def when(text: str, now: int) -> int:
    """``--before``: ms since the epoch, an ISO 8601 time, or an age before ``now``."""
    text = text.strip()
    if text.isdigit():
        return _in_range(int(text))
    age = _DURATION.match(text.lower())
    if age is not None:
        return _in_range(now - int(age.group(1)) * _UNITS[age.group(2)])
    try:
        moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise _Failure(
            f"--before {text!r}: expected ms since the epoch, an ISO 8601 time or an age "
            "such as 30d, 12h, 90m, 45s"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return _in_range(int(moment.timestamp() * 1000))


def _in_range(value: int) -> int:
    if not 0 <= value <= MAX_SAFE_INTEGER:
        raise _Failure("--before is outside 1970 .. 2**53 - 1 ms")
    return value


def purge_candidates(rows: Sequence[RunRow], before: int, limit: int) -> list[RunRow]:
    """What ``purge_settled(before, limit=limit)`` takes from ``rows`` (the
    whole store): settled runs finished before ``before`` with no live round
    in their lineage and no child, oldest finished first."""
    from .model._rows import lineage_members

    by_id = {row.run_id: row for row in rows}
    parents = {row.parent_run_id for row in rows if row.parent_run_id is not None}
    eligible = [
        row
        for row in rows
        if row.status in TERMINAL_STATUSES
        and row.finished_at_ms is not None
        and row.finished_at_ms < before
        and row.run_id not in parents
        and all(member.status in TERMINAL_STATUSES for member in lineage_members(by_id, row.run_id))
    ]
    eligible.sort(key=lambda row: (row.finished_at_ms, row.run_id))
    return eligible[:limit]


def _purge(args: argparse.Namespace) -> Result:
    if not 1 <= args.limit <= MAXIMUM_PURGE_BATCH:
        raise _Failure(f"--limit must be between 1 and {MAXIMUM_PURGE_BATCH}")
    now = _now(args)
    before = when(args.before, now)
    options: dict[str, Any] = {"read_only": True} if not args.yes else {"migrate": False}
    with _open_store(args.db, **options) as store:
        purge_settled = _require(store, "purge_settled")
        rows = list(_walk(store))
        candidates = purge_candidates(rows, before, args.limit + 1)
        more = len(candidates) > args.limit
        candidates = candidates[: args.limit]
        purged: int | None = None
        if args.yes:
            try:
                purged = int(purge_settled(before, limit=args.limit))
            except RunStoreError as error:
                raise _store_error(error) from None
    document = {
        "dry_run": not args.yes,
        "now_ms": now,
        "before_ms": before,
        "limit": args.limit,
        "runs": [
            {"run_id": row.run_id, "status": row.status, "finished_at_ms": row.finished_at_ms}
            for row in candidates
        ],
        "more": more,
        "purged": purged,
    }
    listing = table(
        ("RUN ID", "STATUS", "FINISHED"),
        [(row.run_id, row.status, ago(row.finished_at_ms, now)) for row in candidates],
        indent="  ",
    )
    cutoff = f"{instant(before)} ({ago(before, now)})"
    if not candidates:
        text = f"nothing to purge: no settled run finished before {cutoff}\n"
    elif purged is None:
        text = (
            f"dry run: {len(candidates)} run(s) finished before {cutoff} would be purged:\n"
            + listing
            + "run again with --yes to purge them\n"
        )
    else:
        text = f"purged {purged} run(s) finished before {cutoff}\n"
    if more:
        text += f"more than {args.limit} runs qualify; run again for the next batch\n"
    return document, text, OK


# -- backup ------------------------------------------------------------------------------------


def _backup(args: argparse.Namespace) -> Result:
    if _open.is_postgres_url(args.db):
        raise _Failure(_POSTGRES_BACKUP.format(target=_shown(args.db)).rstrip("\n"), USAGE)
    dest = os.path.realpath(args.dest)
    if os.path.realpath(args.db) == dest:
        raise _Failure("DEST is the database itself")
    if os.path.isdir(dest):
        raise _Failure(f"{args.dest} is a directory")
    if os.path.lexists(dest) and not args.force:
        raise _Failure(f"{args.dest} exists; pass --force to replace it")
    beside = [suffix for suffix in ("-wal", "-shm", "-journal") if os.path.lexists(dest + suffix)]
    if beside:
        raise _Failure(
            f"{args.dest} has {', '.join(beside)} beside it (is it open?); a copy put there "
            "would be read with them: remove them first"
        )
    with _open_store(args.db, read_only=True) as store:
        temporary = os.path.join(
            os.path.dirname(dest), f".{os.path.basename(dest)}.{secrets.token_hex(6)}.partial"
        )
        try:
            descriptor = os.open(temporary, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        except OSError as error:
            raise _Failure(f"cannot create {args.dest}: {os.strerror(error.errno or 0)}") from None
        os.close(descriptor)
        try:
            pages = _copy(store, temporary)
            os.replace(temporary, dest)
        except BaseException:
            for suffix in ("", "-journal", "-wal", "-shm"):
                if os.path.lexists(temporary + suffix):
                    os.unlink(temporary + suffix)
            raise
    _sync_folder(os.path.dirname(dest))
    size = os.path.getsize(dest)
    document = {"source": args.db, "destination": args.dest, "bytes": size, "pages": pages}
    text = f"backed up {args.db} to {args.dest} ({size} bytes, {pages} pages, checked)\n"
    return document, text, OK


def _copy(store: Any, temporary: str) -> int:
    """Copy the database into ``temporary`` in one step (one consistent
    snapshot; repeated if a file read without locks changed meanwhile), check
    the copy and flush it to disk. The number of pages copied."""
    target = sqlite3.connect(temporary, isolation_level=None)
    try:
        try:
            store._read("backup", lambda source: source.backup(target))
        except RunStoreError as error:
            raise _store_error(error) from None
        check = target.execute("PRAGMA quick_check").fetchone()
        if check is None or check[0] != "ok":
            raise _Failure("the copy failed its check; DEST was not written", FOUND)
        pages = int(target.execute("PRAGMA page_count").fetchone()[0])
    finally:
        target.close()
    with open(temporary, "rb+") as copy:
        os.fsync(copy.fileno())
    return pages


def _sync_folder(folder: str) -> None:
    descriptor = os.open(folder or ".", os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


# -- migrate -----------------------------------------------------------------------------------


def _pending(target: str) -> tuple[list[int], bool]:
    """The pending migration ids and whether the database exists, learnt by a
    read-only open (which refuses, naming them, when there are any)."""
    try:
        _open.open(target, read_only=True).close()
    except RunStoreError as error:
        stage = error.cause.get("stage")
        if stage == "needs-migration":
            return list(error.cause["pending_migrations"]), True
        if stage == "missing":
            return list(_migration_names()), False
        raise _cannot_open(target, error) from None
    return [], True


def _migrate(args: argparse.Namespace) -> Result:
    pending, exists = _pending(args.db)
    applied: list[int] = []
    if pending and not args.check:
        _open_store(args.db).close()
        applied = pending
    document = {
        "checked_only": bool(args.check),
        "existed": exists,
        "pending": _step_json([] if applied else pending),
        "applied": _step_json(applied),
    }
    steps = ", ".join(f"{s['id']} {s['name']}" for s in _step_json(pending))
    if not pending:
        text = "the schema is up to date\n"
        code = OK
    elif args.check:
        where = "" if exists else " (the database does not exist yet: migrate creates it)"
        text = f"{len(pending)} migration(s) pending{where}: {steps}\n"
        code = FOUND
    else:
        text = f"applied {len(applied)} migration(s): {steps}\n"
        code = OK
    return document, text, code


_HANDLERS: Final[dict[str, Callable[[argparse.Namespace], Result]]] = {
    "runs": _runs,
    "show": _show,
    "check": _check,
    "stats": _stats,
    "purge": _purge,
    "backup": _backup,
    "migrate": _migrate,
}
