"""A copy of the SQLite store's queries module with one statement changed,
for the zoo's broken stores (the store core runs whatever its class's
``_queries`` names)."""

import types

from runstore.sqlite import _queries as shipped


def queries_with(**changed):
    """``runstore.sqlite._queries`` with the statements in ``changed`` replaced."""
    copy = types.ModuleType(f"{shipped.__name__}_zoo")
    copy.__dict__.update(vars(shipped))
    for name, text in changed.items():
        if not hasattr(shipped, name):
            raise AttributeError(f"the SQLite queries have no {name}")
        setattr(copy, name, text)
    return copy
