"""The SQLite adapter: ``runstore.open(path)`` and the store it returns.

``open`` creates (mode 0600) or migrates the file, refuses files it must not
use, and returns a ``SqliteRunStore`` arbitrated by ``SqlConsensus`` unless
another strategy is given. ``Fault``, ``FaultPlan`` and ``RetryPolicy`` are
the test seam of the transaction manager, shared with the PostgreSQL store:
a ``FaultPlan`` of ``Fault``s fails chosen statements, strategy calls or
commits, and a ``RetryPolicy`` bounds how transient failures are replayed.

May import: the SQL store both backends share, ``runstore.consensus`` and the
core modules of ``runstore``; never ``runstore.postgres`` ("How the code is
laid out" in the docs names each room).
"""

from ._faults import Fault as Fault
from ._faults import FaultPlan as FaultPlan
from ._faults import RetryPolicy as RetryPolicy
from ._open import MINIMUM_SQLITE as MINIMUM_SQLITE
from ._open import open as open
from ._store import SqliteRunStore as SqliteRunStore

__all__ = ["MINIMUM_SQLITE", "Fault", "FaultPlan", "RetryPolicy", "SqliteRunStore", "open"]
