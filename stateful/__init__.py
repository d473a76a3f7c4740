"""The conformance suite (``runstore.stateful``).

Hypothesis state machines that drive the reference model and a store (or a
consensus strategy) side by side through interleaved multi-owner claims,
steals, skewed clocks, crashes and faults, check after every step that both
answered alike and hold the same state, check the fence invariants on both,
and shrink any disagreement to a minimal program.

For a third party, one call::

    from runstore.stateful import Capabilities, run_conformance

    run_conformance(store_factory=my_factory, capabilities=Capabilities(reopen=False))

A store factory may be async (a coroutine function, or one answering an
awaitable of the store: ``runstore.aopen(...)``); each async store is driven
through a synchronous stand-in that runs its calls on a private event loop
and hands back what they answered or raised, unchanged. The built-in targets
``sqlite-async`` and ``postgres-async`` are ``runstore.aopen``'s stores.

``run_conformance`` runs the machines; ``RunStoreComparison`` and
``ConsensusComparison`` (via ``comparison_for`` / ``consensus_comparison_for``)
are the machines themselves, and ``StrategyAuthority`` (``authority_for``) puts
a store over a ``Disagreeing`` double to check it treats its strategy as
authoritative; ``check_state`` and ``check_transition`` are the
fence invariants as pure functions, each failure its own ``AssertionError``
subclass. Without ``settings`` it runs its own budget (derandomized; three
to eight minutes for a store or a strategy on a busy two-core machine);
profiles ``ci``, ``dev`` and ``deep`` are chosen by
``HYPOTHESIS_PROFILE`` (``load_profile``) and replace it when set.
``ServerClockCheck`` (``server_clock_check_for``) judges a PostgreSQL store's
check of its clock against the server's (``Capabilities(server_clock=True)``);
``SessionLossCheck`` and ``SchemaOptionCheck`` its handling of a session the
server ended and its schema option (``Capabilities(postgres_server=True)``).
``Reach``, ``recording_reach`` and ``reach_tables`` record and print which
situations each operation was driven into (``runstore fuzz --coverage``).
``runstore fuzz`` and ``runstore replay`` (also ``python -m
runstore.stateful``) run randomized campaigns and replay their regression
files.

Needs the ``conformance`` extra (Hypothesis and pytest).

This package's face (``__init__`` and ``_requires``) re-exports the rooms below
it. May import: every room of ``runstore.stateful`` (each room's ``__init__``
says what belongs there and what it may import) and the library: ``runstore``,
its backends, ``runstore.attempts``, ``runstore.ownership`` and
``runstore.model``; never ``runstore.cli`` (``python -m runstore.stateful``
belongs to the command line).
"""

# isort: off
from . import _requires as _requires  # first: a clear message without the extra
# isort: on

from ._base._capabilities import Capabilities as Capabilities
from ._base._compare import DifferentialMismatch as DifferentialMismatch
from ._base._compare import LeaseMismatch as LeaseMismatch
from ._base._compare import OutcomeMismatch as OutcomeMismatch
from ._base._compare import RollbackLeak as RollbackLeak
from ._base._compare import StateMismatch as StateMismatch
from ._base._profiles import load_profile as load_profile
from ._base._steps import Call as Call
from ._base._steps import Raised as Raised
from ._base._steps import Step as Step
from ._campaigns._conformance import ConformanceError as ConformanceError
from ._campaigns._conformance import conformance_machines as conformance_machines
from ._campaigns._conformance import run_conformance as run_conformance
from ._campaigns._explore import Counterexample as Counterexample
from ._campaigns._explore import Exploration as Exploration
from ._campaigns._explore import explore as explore
from ._campaigns._judge import Judge as Judge
from ._campaigns._judge import judge_leases as judge_leases
from ._checks._invariants import INVARIANTS as INVARIANTS
from ._checks._invariants import AdmissionViolation as AdmissionViolation
from ._checks._invariants import ClaimFieldsViolation as ClaimFieldsViolation
from ._checks._invariants import CommittedStateLost as CommittedStateLost
from ._checks._invariants import CorruptRowAccepted as CorruptRowAccepted
from ._checks._invariants import FactReplayMismatch as FactReplayMismatch
from ._checks._invariants import FailedOperationVisible as FailedOperationVisible
from ._checks._invariants import FailureCauseMismatch as FailureCauseMismatch
from ._checks._invariants import FaultSeamViolation as FaultSeamViolation
from ._checks._invariants import FinishedTerminalViolation as FinishedTerminalViolation
from ._checks._invariants import HeartbeatRegressed as HeartbeatRegressed
from ._checks._invariants import InvariantViolation as InvariantViolation
from ._checks._invariants import LeaseRowDisagreement as LeaseRowDisagreement
from ._checks._invariants import OwnerWithoutGrant as OwnerWithoutGrant
from ._checks._invariants import PageWalkBroken as PageWalkBroken
from ._checks._invariants import ReferenceInvariantViolation as ReferenceInvariantViolation
from ._checks._invariants import RevisionMismatch as RevisionMismatch
from ._checks._invariants import RunningOwnershipViolation as RunningOwnershipViolation
from ._checks._invariants import SettledPurgeViolation as SettledPurgeViolation
from ._checks._invariants import StateNotPreserved as StateNotPreserved
from ._checks._invariants import StealWithoutStaleness as StealWithoutStaleness
from ._checks._invariants import StoreCrashed as StoreCrashed
from ._checks._invariants import StoreInvariantsFailed as StoreInvariantsFailed
from ._checks._invariants import StrategyShapeViolation as StrategyShapeViolation
from ._checks._invariants import TerminalChangedViolation as TerminalChangedViolation
from ._checks._invariants import TombstoneLost as TombstoneLost
from ._checks._invariants import UnclaimableTaken as UnclaimableTaken
from ._checks._invariants import UnfencedWriteAccepted as UnfencedWriteAccepted
from ._checks._invariants import check_leases as check_leases
from ._checks._invariants import check_page_walk as check_page_walk
from ._checks._invariants import check_state as check_state
from ._checks._invariants import check_transition as check_transition
from ._machines._authority import Disagreeing as Disagreeing
from ._machines._authority import StrategyAuthority as StrategyAuthority
from ._machines._authority import authority_for as authority_for
from ._machines._consensus import ConsensusComparison as ConsensusComparison
from ._machines._consensus import consensus_comparison_for as consensus_comparison_for
from ._machines._reach import Reach as Reach
from ._machines._reach import reach_tables as reach_tables
from ._machines._reach import recording as recording_reach
from ._machines._run_store import RunStoreComparison as RunStoreComparison
from ._machines._run_store import comparison_for as comparison_for

__all__ = [
    "INVARIANTS",
    "AdmissionViolation",
    "Call",
    "Capabilities",
    "ClaimFieldsViolation",
    "CommittedStateLost",
    "CorruptRowAccepted",
    "Counterexample",
    "ConformanceError",
    "ConsensusComparison",
    "DifferentialMismatch",
    "Disagreeing",
    "Exploration",
    "FactReplayMismatch",
    "FailedOperationVisible",
    "FailureCauseMismatch",
    "FaultSeamViolation",
    "FinishedTerminalViolation",
    "HeartbeatRegressed",
    "InvariantViolation",
    "Judge",
    "LeaseMismatch",
    "LeaseRowDisagreement",
    "OutcomeMismatch",
    "OwnerWithoutGrant",
    "PageWalkBroken",
    "Raised",
    "ReferenceInvariantViolation",
    "RevisionMismatch",
    "Reach",
    "RollbackLeak",
    "RunStoreComparison",
    "RunningOwnershipViolation",
    "SettledPurgeViolation",
    "StateMismatch",
    "StateNotPreserved",
    "Step",
    "StealWithoutStaleness",
    "StoreCrashed",
    "StoreInvariantsFailed",
    "StrategyShapeViolation",
    "StrategyAuthority",
    "TerminalChangedViolation",
    "TombstoneLost",
    "UnclaimableTaken",
    "UnfencedWriteAccepted",
    "authority_for",
    "check_leases",
    "check_page_walk",
    "check_state",
    "check_transition",
    "comparison_for",
    "conformance_machines",
    "consensus_comparison_for",
    "explore",
    "judge_leases",
    "load_profile",
    "reach_tables",
    "recording_reach",
    "run_conformance",
]

# Attempts in the machines (issue 6).
from ._checks._attempt_invariants import ATTEMPT_INVARIANTS as ATTEMPT_INVARIANTS
from ._checks._attempt_invariants import AttemptChangedWithoutWrite as AttemptChangedWithoutWrite
from ._checks._attempt_invariants import AttemptHeartbeatRegressed as AttemptHeartbeatRegressed
from ._checks._attempt_invariants import AttemptInvariantViolation as AttemptInvariantViolation
from ._checks._attempt_invariants import AttemptRunMissing as AttemptRunMissing
from ._checks._attempt_invariants import AttemptWriteMovedRevision as AttemptWriteMovedRevision
from ._checks._attempt_invariants import CheckpointOverCap as CheckpointOverCap
from ._checks._attempt_invariants import CommittedAttemptLost as CommittedAttemptLost
from ._checks._attempt_invariants import SettledAttemptChanged as SettledAttemptChanged
from ._checks._attempt_invariants import UnfencedAttemptWrite as UnfencedAttemptWrite
from ._checks._attempt_invariants import check_attempt_state as check_attempt_state
from ._checks._attempt_invariants import check_attempt_step as check_attempt_step

# What runstore.open does to the files it opens (issue 14).
from ._checks._opening import OPENING_CHECKS as OPENING_CHECKS
from ._checks._opening import FileModeViolation as FileModeViolation
from ._checks._opening import LockedReadFailed as LockedReadFailed
from ._checks._opening import OpenFailed as OpenFailed
from ._checks._opening import OpeningCheck as OpeningCheck
from ._checks._opening import OpeningViolation as OpeningViolation
from ._checks._opening import OpenLeftTrace as OpenLeftTrace
from ._checks._opening import OpenRefusalMismatch as OpenRefusalMismatch
from ._checks._opening import PermissionRefusalMismatch as PermissionRefusalMismatch
from ._checks._opening import ReadOnlyViewMismatch as ReadOnlyViewMismatch
from ._checks._opening import ReadOnlyWriteAccepted as ReadOnlyWriteAccepted
from ._checks._opening import opening_check_for as opening_check_for

# A PostgreSQL store's session lost to the server, and its schema option (issue 14).
from ._checks._pg_session import PG_SESSION_CHECKS as PG_SESSION_CHECKS
from ._checks._pg_session import DeadlockNotReplayed as DeadlockNotReplayed
from ._checks._pg_session import InterruptMisreported as InterruptMisreported
from ._checks._pg_session import PgSessionViolation as PgSessionViolation
from ._checks._pg_session import ReadLossMishandled as ReadLossMishandled
from ._checks._pg_session import SchemaMisselected as SchemaMisselected
from ._checks._pg_session import SchemaOptionCheck as SchemaOptionCheck
from ._checks._pg_session import SchemaRefusalMismatch as SchemaRefusalMismatch
from ._checks._pg_session import SchemaStoreBroken as SchemaStoreBroken
from ._checks._pg_session import SessionLossCheck as SessionLossCheck
from ._checks._pg_session import SessionLossMishandled as SessionLossMishandled
from ._checks._pg_session import SessionOutcomeMismatch as SessionOutcomeMismatch
from ._checks._pg_session import SessionStateMismatch as SessionStateMismatch
from ._checks._pg_session import StatementTimeoutMisreported as StatementTimeoutMisreported
from ._checks._pg_session import schema_option_check_for as schema_option_check_for
from ._checks._pg_session import session_loss_check_for as session_loss_check_for

# A PostgreSQL store's clock measured against the server's (issue 14).
from ._checks._server_clock import SERVER_CLOCK_CHECKS as SERVER_CLOCK_CHECKS
from ._checks._server_clock import ClockOffsetMisreported as ClockOffsetMisreported
from ._checks._server_clock import NonLeaseOperationRefused as NonLeaseOperationRefused
from ._checks._server_clock import ServerClockCheck as ServerClockCheck
from ._checks._server_clock import ServerClockViolation as ServerClockViolation
from ._checks._server_clock import SkewRefusalMisjudged as SkewRefusalMisjudged
from ._checks._server_clock import server_clock_check_for as server_clock_check_for

# Concurrent histories checked for linearizability (issue 15).
from ._histories._history import HistoryRecorder as HistoryRecorder
from ._histories._history import Operation as Operation
from ._histories._history import RecordingClock as RecordingClock
from ._histories._history import RecordingStore as RecordingStore
from ._histories._history import load_history as load_history
from ._histories._history import operation as operation
from ._histories._linearize import Explanation as Explanation
from ._histories._linearize import HistoryVerdict as HistoryVerdict
from ._histories._linearize import PartitionVerdict as PartitionVerdict
from ._histories._linearize import check_history as check_history
from ._histories._report import write_history as write_history
from ._histories._report import write_violation as write_violation
from ._machines._attempts import AttemptStateMismatch as AttemptStateMismatch
from ._machines._attempts import RunAttemptComparison as RunAttemptComparison
from ._machines._attempts import attempt_comparison_for as attempt_comparison_for

__all__ += [
    "ATTEMPT_INVARIANTS",
    "AttemptChangedWithoutWrite",
    "AttemptHeartbeatRegressed",
    "AttemptInvariantViolation",
    "AttemptRunMissing",
    "AttemptStateMismatch",
    "AttemptWriteMovedRevision",
    "CheckpointOverCap",
    "CommittedAttemptLost",
    "RunAttemptComparison",
    "SettledAttemptChanged",
    "UnfencedAttemptWrite",
    "attempt_comparison_for",
    "check_attempt_state",
    "check_attempt_step",
]

# Concurrent histories (issue 15).
__all__ += [
    "Explanation",
    "HistoryRecorder",
    "HistoryVerdict",
    "Operation",
    "PartitionVerdict",
    "RecordingClock",
    "RecordingStore",
    "check_history",
    "load_history",
    "operation",
    "write_history",
    "write_violation",
]

# What runstore.open does to the files it opens (issue 14).
__all__ += [
    "OPENING_CHECKS",
    "FileModeViolation",
    "LockedReadFailed",
    "OpenFailed",
    "OpenLeftTrace",
    "OpenRefusalMismatch",
    "OpeningCheck",
    "OpeningViolation",
    "PermissionRefusalMismatch",
    "ReadOnlyViewMismatch",
    "ReadOnlyWriteAccepted",
    "opening_check_for",
]

# A PostgreSQL store's clock against the server's (issue 14).
__all__ += [
    "SERVER_CLOCK_CHECKS",
    "ClockOffsetMisreported",
    "NonLeaseOperationRefused",
    "ServerClockCheck",
    "ServerClockViolation",
    "SkewRefusalMisjudged",
    "server_clock_check_for",
]

# A PostgreSQL store's session and schema option (issue 14).
__all__ += [
    "PG_SESSION_CHECKS",
    "DeadlockNotReplayed",
    "InterruptMisreported",
    "PgSessionViolation",
    "ReadLossMishandled",
    "SchemaMisselected",
    "SchemaOptionCheck",
    "SchemaRefusalMismatch",
    "SchemaStoreBroken",
    "SessionLossCheck",
    "SessionLossMishandled",
    "SessionOutcomeMismatch",
    "SessionStateMismatch",
    "StatementTimeoutMisreported",
    "schema_option_check_for",
    "session_loss_check_for",
]
