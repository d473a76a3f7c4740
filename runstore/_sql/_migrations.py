"""What both backends' migrations share: the step, the history, the refusal.

A database records every schema step it took in ``flows_migrations`` (id and
name). Both backends record one history, ``HISTORY``: the same ids, names and
order, so a database tells the same story on either. Each backend gives every
step its own text (``runstore.sqlite._migrations``,
``runstore.postgres._migrations``), applies the pending ones its own way, and
checks that a database records only steps this version knows, under their
names (``refuse_unknown``); a step it cannot take is ``SchemaRefused``, which
each backend's open turns into ``UnsupportedDatabaseError``.

Ids 1001-1004 and 6 keep upstream's numbering (``run-store`` set at offset
1000, the journal's consensus step at 6); our own steps use 2001 and up.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import attrs


@attrs.frozen
class Migration:
    """One recorded schema step."""

    id: int
    name: str
    sql: str


#: Every recorded step, ``(id, name)``, in the order the steps run.
HISTORY: Final[tuple[tuple[int, str], ...]] = (
    (1001, "run-store_initial"),
    (1002, "run-store_lineage"),
    (1003, "run-store_execution_revisions"),
    (1004, "run-store_waiting_request"),
    (6, "journal_consensus"),
    (2001, "runstore_ownership_facts"),
    (2002, "runstore_run_state"),
    (2003, "runstore_finding_work"),
    (2004, "runstore_one_round_trip"),
    (2005, "runstore_bulk_revisions"),
    (2006, "runstore_lean_checks"),
    (2007, "runstore_claim_next_once"),
    (2008, "runstore_whole_row_checks"),
    (2009, "runstore_live_rounds"),
    (2010, "runstore_change_log"),
    (2011, "runstore_claim_next_many"),
    (2012, "runstore_lean_writes"),
    (2013, "runstore_lineage_cancel_root"),
    (2014, "runstore_lean_operations"),
    (2015, "runstore_growth"),
    (2016, "runstore_status_indexes"),
)

_KNOWN: Final = dict(HISTORY)


def chain(texts: Mapping[int, str]) -> tuple[Migration, ...]:
    """A backend's migrations: ``HISTORY`` in order, each step with the text
    ``texts`` gives its id (every step must have one, even if empty)."""
    if set(texts) != set(_KNOWN):
        raise ValueError("a backend's migration texts must match the history's ids")
    return tuple(Migration(step, name, texts[step]) for step, name in HISTORY)


class SchemaRefused(Exception):
    """Internal: the file's schema is not one this version may open."""

    def __init__(self, reason: str, detail: dict[str, object]) -> None:
        super().__init__(reason)
        self.reason = reason
        self.detail = detail


def refuse_unknown(applied: Mapping[int, str], not_ours: str) -> None:
    """Refuse a database that records a step this version does not know (its
    schema is newer), or a known id under another name (``not_ours``, the
    backend's words for a database that is not a runstore one)."""
    unknown = sorted(set(applied) - set(_KNOWN))
    if unknown:
        raise SchemaRefused(
            "the database schema is newer than this version of runstore",
            {"stage": "schema", "unknown_migrations": unknown},
        )
    renamed = sorted(i for i, name in applied.items() if _KNOWN[i] != name)
    if renamed:
        raise SchemaRefused(not_ours, {"stage": "schema", "foreign_migrations": renamed})
