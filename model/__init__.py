"""The reference model of ``runstore`` (``runstore.model``).

``ModelRunStore`` implements the whole ``RunStore`` protocol on immutable
in-memory values, with no I/O and no wall clock: it is the oracle every store
is compared with. ``ModelConsensus`` is the reference consensus strategy, with
its leases in memory and undone with their transaction; ``ModelTransaction``
and ``model_transaction()`` drive it without a database.

May import: the core modules of ``runstore`` (values, outcomes, errors, clocks,
admission), ``runstore.consensus`` and ``runstore.attempts`` (their values and
outcomes); never a backend, and no I/O.
"""

from ._attempts import ModelAttemptStore as ModelAttemptStore
from ._consensus import ModelConsensus as ModelConsensus
from ._store import ModelRunStore as ModelRunStore
from ._tx import ModelTransaction as ModelTransaction
from ._tx import model_transaction as model_transaction

__all__ = [
    "ModelAttemptStore",
    "ModelConsensus",
    "ModelRunStore",
    "ModelTransaction",
    "model_transaction",
]
