"""runstore: durable runs under fenced ownership.

Several processes compete to own a run. They claim it, activate it, keep its
lease alive with heartbeats, take it over from a stalled owner only with
liveness evidence, cancel it and settle it. Exactly one owner may write at a
time, and a displaced owner's late write fails instead of corrupting anything.

``runstore.open(path)`` gives the SQLite store (``runstore.open(url)`` with a
``postgresql://`` URL, the PostgreSQL one); ``runstore.model.ModelRunStore``
is the reference model it is tested against; ``runstore.stateful`` is the
conformance suite. Lost races are outcome values; ``RunStoreError`` is only for
misuse and infrastructure failure.

This module and the ``open`` it re-exports are the face of the library.
May import: every other room of ``runstore``: its core modules (values,
outcomes, errors, clocks, admission, the protocol, telemetry),
``runstore.consensus``, the SQL store the backends share, the backends,
``runstore.attempts``, ``runstore.ownership`` and ``runstore.model``; never
``runstore.cli`` nor ``runstore.stateful`` ("How the code is laid out" in the
docs names each room).
"""

from ._clock import Clock as Clock
from ._clock import ManualClock as ManualClock
from ._clock import SystemClock as SystemClock
from ._constants import HEARTBEAT_INTERVAL_MS as HEARTBEAT_INTERVAL_MS
from ._constants import HEARTBEAT_SKEW_ALLOWANCE_MS as HEARTBEAT_SKEW_ALLOWANCE_MS
from ._constants import HEARTBEAT_STALE_AFTER_MS as HEARTBEAT_STALE_AFTER_MS
from ._constants import HEARTBEAT_WRITE_TOLERANCE_MS as HEARTBEAT_WRITE_TOLERANCE_MS
from ._constants import MAXIMUM_IDENTIFIER_LENGTH as MAXIMUM_IDENTIFIER_LENGTH
from ._constants import MAXIMUM_RUN_JSON_DEPTH as MAXIMUM_RUN_JSON_DEPTH
from ._constants import MAXIMUM_RUN_JSON_NODES as MAXIMUM_RUN_JSON_NODES
from ._errors import ConstraintError as ConstraintError
from ._errors import DecodeFailedError as DecodeFailedError
from ._errors import ErrorCode as ErrorCode
from ._errors import InvalidRunError as InvalidRunError
from ._errors import PersistenceFailedError as PersistenceFailedError
from ._errors import RunNotFoundError as RunNotFoundError
from ._errors import RunStoreError as RunStoreError
from ._errors import UnsupportedDatabaseError as UnsupportedDatabaseError
from ._noop import NoopRunStore as NoopRunStore
from ._open import aopen as aopen
from ._open import open as open
from ._outcomes import AbandonClaimOutcome as AbandonClaimOutcome
from ._outcomes import Abandoned as Abandoned
from ._outcomes import Activated as Activated
from ._outcomes import ActivateOutcome as ActivateOutcome
from ._outcomes import AlreadyClaimed as AlreadyClaimed
from ._outcomes import AlreadyRequested as AlreadyRequested
from ._outcomes import CancelRequested as CancelRequested
from ._outcomes import ClaimAndOwnOutcome as ClaimAndOwnOutcome
from ._outcomes import ClaimChanged as ClaimChanged
from ._outcomes import Claimed as Claimed
from ._outcomes import ClaimFresh as ClaimFresh
from ._outcomes import ClaimLost as ClaimLost
from ._outcomes import ClaimOutcome as ClaimOutcome
from ._outcomes import EvidenceRequired as EvidenceRequired
from ._outcomes import FenceLost as FenceLost
from ._outcomes import GuardFailed as GuardFailed
from ._outcomes import HeartbeatFresh as HeartbeatFresh
from ._outcomes import HeartbeatOutcome as HeartbeatOutcome
from ._outcomes import LivenessUnconfirmed as LivenessUnconfirmed
from ._outcomes import NotFound as NotFound
from ._outcomes import RecoverClaimOutcome as RecoverClaimOutcome
from ._outcomes import Recovered as Recovered
from ._outcomes import RequestCancelOutcome as RequestCancelOutcome
from ._outcomes import SnapshotChanged as SnapshotChanged
from ._outcomes import StealOutcome as StealOutcome
from ._outcomes import Terminal as Terminal
from ._outcomes import Transitioned as Transitioned
from ._outcomes import TransitionOutcome as TransitionOutcome
from ._outcomes import Updated as Updated
from ._protocol import RunStore as RunStore
from ._values import TERMINAL_STATUSES as TERMINAL_STATUSES
from ._values import CancelAcknowledgement as CancelAcknowledgement
from ._values import EvidenceKind as EvidenceKind
from ._values import Lease as Lease
from ._values import LivenessEvidence as LivenessEvidence
from ._values import OwnerId as OwnerId
from ._values import OwnershipFact as OwnershipFact
from ._values import OwnershipTransition as OwnershipTransition
from ._values import RunChange as RunChange
from ._values import RunPage as RunPage
from ._values import RunRow as RunRow
from ._values import RunSnapshot as RunSnapshot
from ._values import RunStatus as RunStatus
from ._values import StoreState as StoreState
from ._values import TerminalStatus as TerminalStatus
from ._values import TransitionGuard as TransitionGuard
from ._version import __version__ as __version__
from .aio import AsyncAttemptStore as AsyncAttemptStore
from .aio import AsyncRunStore as AsyncRunStore
from .sqlite import SqliteRunStore as SqliteRunStore

__all__ = [
    "HEARTBEAT_INTERVAL_MS",
    "HEARTBEAT_SKEW_ALLOWANCE_MS",
    "HEARTBEAT_STALE_AFTER_MS",
    "HEARTBEAT_WRITE_TOLERANCE_MS",
    "MAXIMUM_IDENTIFIER_LENGTH",
    "MAXIMUM_RUN_JSON_DEPTH",
    "MAXIMUM_RUN_JSON_NODES",
    "TERMINAL_STATUSES",
    "AbandonClaimOutcome",
    "Abandoned",
    "ActivateOutcome",
    "Activated",
    "AlreadyClaimed",
    "AlreadyRequested",
    "AsyncAttemptStore",
    "AsyncRunStore",
    "CancelAcknowledgement",
    "CancelRequested",
    "ClaimAndOwnOutcome",
    "ClaimChanged",
    "ClaimFresh",
    "ClaimLost",
    "ClaimOutcome",
    "Claimed",
    "Clock",
    "ConstraintError",
    "DecodeFailedError",
    "ErrorCode",
    "EvidenceKind",
    "EvidenceRequired",
    "FenceLost",
    "GuardFailed",
    "HeartbeatFresh",
    "HeartbeatOutcome",
    "InvalidRunError",
    "Lease",
    "LivenessEvidence",
    "LivenessUnconfirmed",
    "ManualClock",
    "NoopRunStore",
    "NotFound",
    "OwnerId",
    "OwnershipFact",
    "OwnershipTransition",
    "PersistenceFailedError",
    "RecoverClaimOutcome",
    "Recovered",
    "RequestCancelOutcome",
    "RunChange",
    "RunNotFoundError",
    "RunPage",
    "RunRow",
    "RunSnapshot",
    "RunStatus",
    "RunStore",
    "RunStoreError",
    "SnapshotChanged",
    "SqliteRunStore",
    "StealOutcome",
    "StoreState",
    "SystemClock",
    "Terminal",
    "TerminalStatus",
    "TransitionGuard",
    "TransitionOutcome",
    "Transitioned",
    "UnsupportedDatabaseError",
    "Updated",
    "aopen",
    "open",
]
