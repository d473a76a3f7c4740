"""Outcomes: every way an operation can end without a defect.

Competition is a value, never an exception. Each tag is its own frozen class,
and each operation's answers form a union alias, so callers ``match`` on them
and differential tests compare whole payloads with ``==``.
"""

from __future__ import annotations

from typing import TypeAlias

import attrs

from ._values import TerminalStatus


@attrs.frozen
class Claimed:
    """The claim columns were written; ``claimed_at_ms`` is the fence token."""

    claimed_at_ms: int
    """The claim's token, the ``now_ms`` it was made at: pass it to ``activate``,
    ``abandon_claim`` or ``recover_claim``."""


@attrs.frozen
class NotFound:
    """No run has this id."""


@attrs.frozen
class AlreadyClaimed:
    """Another claim is pending on the run."""


@attrs.frozen
class HeartbeatFresh:
    """The run is running and its heartbeat is not yet stale."""


@attrs.frozen
class SnapshotChanged:
    """The run no longer matches the caller's expected snapshot."""


@attrs.frozen
class EvidenceRequired:
    """The snapshot still holds and its other owner is stale, but no matching
    evidence was given. Retrying without evidence cannot succeed."""


@attrs.frozen
class Activated:
    """The caller now owns the run."""


@attrs.frozen
class ClaimLost:
    """The caller's exact claim is no longer on the run."""


@attrs.frozen
class Abandoned:
    """The caller's claim was cleared."""


@attrs.frozen
class Recovered:
    """A dead claimant's stale claim was cleared."""


@attrs.frozen
class ClaimFresh:
    """The claim to recover is not yet stale."""


@attrs.frozen
class ClaimChanged:
    """The claim to recover is not the one on the run."""


@attrs.frozen
class LivenessUnconfirmed:
    """The evidence did not match; nothing was compared or written."""


@attrs.frozen
class Updated:
    """The owner's lease was renewed (the stamp never moves backwards)."""


@attrs.frozen
class FenceLost:
    """The caller does not own the run."""


@attrs.frozen
class Transitioned:
    """The owned run moved to the requested status."""


@attrs.frozen
class GuardFailed:
    """The caller owns the run but the transition guard did not hold."""


@attrs.frozen
class CancelRequested:
    """Cancellation intent was recorded at ``requested_at_ms``."""

    requested_at_ms: int
    """The ``now_ms`` of this request, now the run's ``cancel_requested_at_ms``."""


@attrs.frozen
class AlreadyRequested:
    """Cancellation was already requested; ``requested_at_ms`` is the original time."""

    requested_at_ms: int
    """When the first request was recorded; a repeat never moves it."""


@attrs.frozen
class Terminal:
    """The run had already settled with ``status``; nothing was recorded."""

    status: TerminalStatus
    """The status the run settled with: ``completed``, ``failed`` or ``cancelled``."""


ClaimOutcome: TypeAlias = Claimed | NotFound | AlreadyClaimed | HeartbeatFresh | SnapshotChanged
"""What ``claim`` answers: ``Claimed``, ``NotFound``, ``AlreadyClaimed``, ``HeartbeatFresh`` or
``SnapshotChanged``."""
StealOutcome: TypeAlias = ClaimOutcome | LivenessUnconfirmed
"""What ``steal`` answers: a ``ClaimOutcome``, or ``LivenessUnconfirmed`` when the evidence does not
match."""
ClaimAndOwnOutcome: TypeAlias = (
    Activated | NotFound | AlreadyClaimed | HeartbeatFresh | SnapshotChanged | EvidenceRequired
)
"""What ``claim_and_own`` answers: ``Activated``, ``NotFound``, ``AlreadyClaimed``,
``HeartbeatFresh``, ``SnapshotChanged`` or ``EvidenceRequired``."""
ActivateOutcome: TypeAlias = Activated | ClaimLost | SnapshotChanged
"""What ``activate`` answers: ``Activated``, ``ClaimLost`` or ``SnapshotChanged``."""
AbandonClaimOutcome: TypeAlias = Abandoned | ClaimLost
"""What ``abandon_claim`` answers: ``Abandoned`` or ``ClaimLost``."""
RecoverClaimOutcome: TypeAlias = (
    Recovered | NotFound | ClaimFresh | ClaimChanged | LivenessUnconfirmed
)
"""What ``recover_claim`` answers: ``Recovered``, ``NotFound``, ``ClaimFresh``, ``ClaimChanged`` or
``LivenessUnconfirmed``."""
HeartbeatOutcome: TypeAlias = Updated | FenceLost | NotFound
"""What ``heartbeat``, ``reconfirm`` and each entry of ``heartbeat_many`` answer: ``Updated``,
``FenceLost`` or ``NotFound``."""
TransitionOutcome: TypeAlias = Transitioned | FenceLost | NotFound | GuardFailed
"""What ``transition_owned`` answers: ``Transitioned``, ``FenceLost``, ``NotFound`` or
``GuardFailed``."""
RequestCancelOutcome: TypeAlias = CancelRequested | AlreadyRequested | NotFound | Terminal
"""What ``request_cancel`` and ``request_cancel_lineage`` answer: ``CancelRequested``,
``AlreadyRequested``, ``NotFound`` or ``Terminal``."""
