"""The PostgreSQL backend: ``runstore.postgres.open(url)`` and its store.

Needs the ``postgres`` extra, psycopg 3 and psycopg-pool: in the runstore
checkout, ``python -m pip install -e '.[postgres]'`` (or a wheel built there,
installed with ``[postgres]``; the docs' home page says how). ``runstore.open``
dispatches here for ``postgresql://`` and ``postgres://`` URLs. The store,
its decisions and its fault seam are the ones the SQLite store has, shared
by both backends; this package holds the connection, the transactions, the
migrations, the error mapping and the SQL text.

May import: the SQL store both backends share, ``runstore.consensus`` and the
core modules of ``runstore``; never ``runstore.sqlite`` ("How the code is laid
out" in the docs names each room).
"""

from ._notify import PostgresListener as PostgresListener
from ._open import MINIMUM_POSTGRES as MINIMUM_POSTGRES
from ._open import open as open
from ._store import PostgresRunStore as PostgresRunStore

__all__ = ["MINIMUM_POSTGRES", "PostgresListener", "PostgresRunStore", "open"]
