"""The open modes both SQL backends share: what a read-only store answers to
a write, and what a store opened with ``migrate=False`` (or ``read_only=True``)
says of a database that needs migrating.

- ``read_only=True``: every write operation raises ``persistence_failed``
  with ``cause["stage"] == "read-only"`` after admitting its arguments (bad
  input is still ``invalid_run``), before any statement runs, whatever it
  would have answered; reads work.
- ``migrate=False``, and ``read_only=True`` (which never migrates): a
  database with pending migrations is refused with ``UnsupportedDatabaseError``
  (``cause["stage"] == "needs-migration"``, ``cause["pending_migrations"]``
  the ids of the pending steps in the order they would run); the message
  names each step.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from .._errors import PersistenceFailedError, UnsupportedDatabaseError

if TYPE_CHECKING:
    from ._migrations import Migration


def read_only_refusal(method: str) -> PersistenceFailedError:
    """The error of a write operation on a store opened read-only."""
    return PersistenceFailedError(
        method,
        "the store is open read-only (runstore.open(..., read_only=True)); "
        "open it without read_only to write",
        {"stage": "read-only"},
    )


def needs_migration(pending: Sequence[Migration], *, read_only: bool) -> UnsupportedDatabaseError:
    """The refusal of a database with ``pending`` migrations by an open that
    may not migrate (``migrate=False``, or ``read_only=True``)."""
    steps = ", ".join(f"{step.id} {step.name}" for step in pending)
    why = "read_only=True never migrates" if read_only else "migrate=False"
    return UnsupportedDatabaseError(
        f"the database needs migrating ({why}); pending: {steps}; "
        "run 'runstore migrate DB' or open it with migrate=True",
        {"stage": "needs-migration", "pending_migrations": [step.id for step in pending]},
    )
