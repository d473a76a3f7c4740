"""Helpers for the zoo's broken attempt stores: each is the SQLite
``AttemptStore`` with one statement or one admission rule changed, put under
the attempt machine (``KIND = "attempts"``, the class as ``attempt_store``)
over the in-memory adapter."""

from runstore.sqlite import _attempt_queries as SQL

from ._stores import IN_MEMORY

__all__ = ["IN_PROGRESS", "SQL", "capabilities", "marks", "replaced", "without"]

#: In-memory stores: no reopen; the adapter's fault seam is there.
capabilities = IN_MEMORY

#: The in-progress predicate of the guarded writes, before the store fills it in.
IN_PROGRESS = "AND state IN ({in_progress})"


def without(statement, fragment):
    """``statement`` with ``fragment`` removed (which must be there)."""
    return replaced(statement, fragment, "")


def replaced(statement, old, new):
    """``statement`` with ``old`` replaced by ``new`` (which must be there)."""
    assert old in statement, "the attempt store's SQL changed"
    return statement.replace(old, new)


def marks(store):
    """The ``IN (...)`` placeholders of ``store``'s in-progress states."""
    return ", ".join(f":{name}" for name in store._states)
