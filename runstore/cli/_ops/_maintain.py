"""``purge``, ``backup`` and ``migrate``: the commands that change a
database (``purge`` and ``migrate`` only when told to; ``backup`` writes only
its copy)."""

from __future__ import annotations

import argparse
import datetime
import os
import re
import secrets
import sqlite3
from typing import Any, Final

from ... import _open
from ..._constants import MAX_SAFE_INTEGER, MAXIMUM_PURGE_BATCH
from ..._errors import RunStoreError
from ._common import (
    FOUND,
    OK,
    USAGE,
    Failure,
    Result,
    cannot_open,
    migration_names,
    now_of,
    open_store,
    shown,
    step_json,
    store_error,
)
from ._format import ago, instant, table

_UNITS: Final = {"ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}
_DURATION: Final = re.compile(r"^(\d+)\s*(ms|s|min|m|h|d)$")

_POSTGRES_BACKUP: Final = """\
{target} is a PostgreSQL database; back it up with the server's tools:
  - a logical copy of the store's schema:
      pg_dump --format=custom --schema=SCHEMA --file=runs.dump 'URL'
    (restore it with pg_restore; the copy is one consistent snapshot). pg_dump
    and psql refuse runstore's schema= URL parameter: give them the URL
    without it, the schema as --schema (psql: options=-csearch_path%3DSCHEMA)
  - a physical copy of the whole cluster, for point-in-time recovery:
      pg_basebackup --pgdata=DIR --wal-method=stream, with WAL archiving
See docs/guides/operate.md, "Backups".
"""


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
        raise Failure(
            f"--before {text!r}: expected ms since the epoch, an ISO 8601 time or an age "
            "such as 30d, 12h, 90m, 45s"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return _in_range(int(moment.timestamp() * 1000))


def _in_range(value: int) -> int:
    if not 0 <= value <= MAX_SAFE_INTEGER:
        raise Failure("--before is outside 1970 .. 2**53 - 1 ms")
    return value


def purge(args: argparse.Namespace) -> Result:
    if not 1 <= args.limit <= MAXIMUM_PURGE_BATCH:
        raise Failure(f"--limit must be between 1 and {MAXIMUM_PURGE_BATCH}")
    now = now_of(args)
    before = when(args.before, now)
    options: dict[str, Any] = {"read_only": True} if not args.yes else {"migrate": False}
    with open_store(args.db, **options) as store:
        # The store's own read of what purge_settled takes (one query over
        # its index, about as many rows as it lists): one run more than the
        # limit, to say whether more qualify, except at the largest limit,
        # where a full batch is taken to mean more.
        probe = min(args.limit + 1, MAXIMUM_PURGE_BATCH)
        try:
            candidates = store.purge_candidates(before, limit=probe)
        except RunStoreError as error:
            raise store_error(error) from None
        more = len(candidates) > args.limit or len(candidates) == MAXIMUM_PURGE_BATCH
        candidates = candidates[: args.limit]
        purged: int | None = None
        if args.yes:
            try:
                purged = int(store.purge_settled(before, limit=args.limit))
            except RunStoreError as error:
                raise store_error(error) from None
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


def backup(args: argparse.Namespace) -> Result:
    if _open.is_postgres_url(args.db):
        raise Failure(_POSTGRES_BACKUP.format(target=shown(args.db)).rstrip("\n"), USAGE)
    dest = os.path.realpath(args.dest)
    if os.path.realpath(args.db) == dest:
        raise Failure("DEST is the database itself")
    if os.path.isdir(dest):
        raise Failure(f"{args.dest} is a directory")
    if os.path.lexists(dest) and not args.force:
        raise Failure(f"{args.dest} exists; pass --force to replace it")
    beside = [suffix for suffix in ("-wal", "-shm", "-journal") if os.path.lexists(dest + suffix)]
    if beside:
        raise Failure(
            f"{args.dest} has {', '.join(beside)} beside it (is it open?); a copy put there "
            "would be read with them: remove them first"
        )
    with open_store(args.db, read_only=True) as store:
        temporary = os.path.join(
            os.path.dirname(dest), f".{os.path.basename(dest)}.{secrets.token_hex(6)}.partial"
        )
        try:
            descriptor = os.open(temporary, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        except OSError as error:
            raise Failure(f"cannot create {args.dest}: {os.strerror(error.errno or 0)}") from None
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
            raise store_error(error) from None
        check = target.execute("PRAGMA quick_check").fetchone()
        if check is None or check[0] != "ok":
            raise Failure("the copy failed its check; DEST was not written", FOUND)
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
            return list(migration_names()), False
        raise cannot_open(target, error) from None
    return [], True


def migrate(args: argparse.Namespace) -> Result:
    pending, exists = _pending(args.db)
    applied: list[int] = []
    if pending and not args.check:
        open_store(args.db).close()
        applied = pending
    document = {
        "checked_only": bool(args.check),
        "existed": exists,
        "pending": step_json([] if applied else pending),
        "applied": step_json(applied),
    }
    steps = ", ".join(f"{s['id']} {s['name']}" for s in step_json(pending))
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
