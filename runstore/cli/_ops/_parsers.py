"""The operator subcommands' arguments."""

from __future__ import annotations

import argparse
from typing import Any

from ..._constants import MAX_SAFE_INTEGER, MAXIMUM_PAGE_SIZE, MAXIMUM_PURGE_BATCH
from ..._values import RUN_STATUSES


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
