"""Consensus strategies: who holds each run.

``SqlConsensus`` (the default) keeps leases in the store's own file and
transaction. ``LocalConsensus`` keeps them in memory, rolled back with the
store's transaction and rebuilt from the rows when a store opens; it is for
one process only. ``NoopConsensus`` grants nothing. The reference semantics
live in ``runstore.model.ModelConsensus``. ``run_ownership(tx)`` yields what the
run rows record about each run's holder, for a strategy's ``on_open`` to
rebuild its leases from (``docs/guides/write-a-strategy.md``).

May import: the core modules of ``runstore`` (values, outcomes, errors,
constants, admission) and nothing else of it: no backend, no store.
"""

from ._local import LocalConsensus as LocalConsensus
from ._noop import NoopConsensus as NoopConsensus
from ._rows import RunOwnership as RunOwnership
from ._rows import run_ownership as run_ownership
from ._sql import SqlConsensus as SqlConsensus
from ._types import Cleared as Cleared
from ._types import Consensus as Consensus
from ._types import ConsensusError as ConsensusError
from ._types import ConsensusErrorCode as ConsensusErrorCode
from ._types import FenceLostError as FenceLostError
from ._types import Granted as Granted
from ._types import GrantOutcome as GrantOutcome
from ._types import Lease as Lease
from ._types import Lost as Lost
from ._types import Promoted as Promoted
from ._types import PromoteOutcome as PromoteOutcome
from ._types import RecoverOutcome as RecoverOutcome
from ._types import Rejected as Rejected
from ._types import RejectionReason as RejectionReason
from ._types import Renewed as Renewed
from ._types import RenewOutcome as RenewOutcome
from ._types import Transaction as Transaction

__all__ = [
    "Cleared",
    "Consensus",
    "ConsensusError",
    "ConsensusErrorCode",
    "FenceLostError",
    "GrantOutcome",
    "Granted",
    "Lease",
    "LocalConsensus",
    "Lost",
    "NoopConsensus",
    "PromoteOutcome",
    "Promoted",
    "RecoverOutcome",
    "Rejected",
    "RejectionReason",
    "RenewOutcome",
    "Renewed",
    "RunOwnership",
    "SqlConsensus",
    "Transaction",
    "run_ownership",
]
