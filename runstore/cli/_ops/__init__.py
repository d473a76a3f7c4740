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
a missing run), 2 a usage error or a database that cannot be opened.

May import: the library (``runstore`` and its backends, ``runstore.attempts``,
``runstore.ownership``, ``runstore.model``); never ``runstore.stateful``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Final, TextIO

# One module per group of commands: _look (runs, show, stats), _check,
# _maintain (purge, backup, migrate); _parsers, _format and _common serve them.
from ._check import check
from ._common import COMMANDS as COMMANDS
from ._common import Failure, Result
from ._format import printable_lines
from ._look import runs, show, stats
from ._maintain import backup, migrate, purge
from ._parsers import add_parsers as add_parsers

_HANDLERS: Final[dict[str, Callable[[argparse.Namespace], Result]]] = {
    "runs": runs,
    "show": show,
    "check": check,
    "stats": stats,
    "purge": purge,
    "backup": backup,
    "migrate": migrate,
}


def run(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run the operator command ``args.command``; its exit status."""
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    handler = _HANDLERS[args.command]
    want_json = bool(getattr(args, "json", False))
    try:
        document, text, code = handler(args)
    except Failure as failure:
        if want_json:
            error = {"message": failure.text, **failure.detail}
            out.write(json.dumps({"error": error}, indent=2) + "\n")
        else:
            err.write(printable_lines(f"runstore {args.command}: {failure.text}") + "\n")
        return failure.code
    if want_json:
        # ASCII only: no byte of the document can act on a terminal.
        out.write(json.dumps(document, indent=2) + "\n")
    else:
        out.write(printable_lines(text))
    return code
