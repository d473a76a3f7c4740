"""The SQLite adapter: ``runstore.open(path)`` and the store it returns.

``open`` creates (mode 0600) or migrates the file, refuses files it must not
use, and returns a ``SqliteRunStore`` arbitrated by ``SqlConsensus`` unless
another strategy is given. ``Fault``, ``FaultPlan`` and ``RetryPolicy`` are
the test seam of the transaction manager (see ``runstore.sqlite._faults``).

May import: ``runstore._sql``, ``runstore.consensus`` and the core modules of
``runstore``; never ``runstore.postgres``.
"""

from ._faults import Fault as Fault
from ._faults import FaultPlan as FaultPlan
from ._faults import RetryPolicy as RetryPolicy
from ._open import MINIMUM_SQLITE as MINIMUM_SQLITE
from ._open import open as open
from ._store import SqliteRunStore as SqliteRunStore

__all__ = ["MINIMUM_SQLITE", "Fault", "FaultPlan", "RetryPolicy", "SqliteRunStore", "open"]
