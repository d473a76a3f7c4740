"""The PostgreSQL backend: ``runstore.postgres.open(url)`` and its store.

Needs the ``postgres`` extra (``pip install 'runstore[postgres]'``: psycopg 3
and psycopg-pool). ``runstore.open`` dispatches here for ``postgresql://``
and ``postgres://`` URLs. The store, its decisions and its fault seam are the
SQLite store's (``runstore._sql``); this package holds the connection, the
transactions, the migrations, the error mapping and the SQL text.

May import: ``runstore._sql``, ``runstore.consensus`` and the core modules of
``runstore``; never ``runstore.sqlite``.
"""

from ._open import MINIMUM_POSTGRES as MINIMUM_POSTGRES
from ._open import open as open
from ._store import PostgresRunStore as PostgresRunStore

__all__ = ["MINIMUM_POSTGRES", "PostgresRunStore", "open"]
