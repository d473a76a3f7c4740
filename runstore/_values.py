"""Plain values shared by every store: identities, rows, snapshots, facts.

Each class is a frozen attrs class that compares by value and works in
``match`` statements. Building one validates nothing: any caller may build a
malformed ``OwnerId``, and every store operation admits its own arguments (see
``runstore._boundary``). ``RunRow``'s repr leaves out ``state_json`` because run
state is executable data that may hold credentials.
"""

from __future__ import annotations

from typing import Literal, TypeAlias

import attrs

RunStatus: TypeAlias = Literal[
    "pending", "running", "suspended", "completed", "failed", "cancelled"
]
TerminalStatus: TypeAlias = Literal["completed", "failed", "cancelled"]

RUN_STATUSES: frozenset[str] = frozenset(
    {"pending", "running", "suspended", "completed", "failed", "cancelled"}
)
TERMINAL_STATUSES: frozenset[str] = frozenset({"completed", "failed", "cancelled"})

EvidenceKind: TypeAlias = Literal[
    "same-host-pid-dead", "cross-host-unreachable-stale", "lease-expired"
]
EVIDENCE_KINDS: frozenset[str] = frozenset(
    {"same-host-pid-dead", "cross-host-unreachable-stale", "lease-expired"}
)

OwnershipTransition: TypeAlias = Literal["claimed", "activated", "released", "stolen", "expired"]
OWNERSHIP_TRANSITIONS: frozenset[str] = frozenset(
    {"claimed", "activated", "released", "stolen", "expired"}
)

CancelRequirement: TypeAlias = Literal["absent", "present"]


@attrs.frozen
class OwnerId:
    """One incarnation of one process on one host.

    Two owners are the same only when all three fields are equal, so a
    restarted process (same host, maybe the same pid, a new nonce) is a
    different owner from its predecessor.
    """

    host_id: str
    pid: int
    nonce: str


@attrs.frozen
class RunSnapshot:
    """The three fields an ownership compare-and-swap guards."""

    status: RunStatus
    owner: OwnerId | None
    heartbeat_at_ms: int | None


@attrs.frozen
class RunRow:
    """A decoded run row. ``state_json`` is the caller's text, byte for byte.

    ``state_json`` is ``None`` only in the rows of a ``list_runs`` page asked
    for without state (``with_state=False``, the default); every other read
    returns it.
    """

    run_id: str
    status: RunStatus
    created_at_ms: int
    started_at_ms: int | None
    finished_at_ms: int | None
    owner: OwnerId | None
    heartbeat_at_ms: int | None
    claim: OwnerId | None
    claimed_at_ms: int | None
    parent_run_id: str | None
    cancel_requested_at_ms: int | None
    lineage_id: str | None
    round_ordinal: int | None
    state_json: str | None = attrs.field(repr=False)

    @property
    def snapshot(self) -> RunSnapshot:
        """The row's status, owner and heartbeat, ready to pass as ``expected``."""
        return RunSnapshot(self.status, self.owner, self.heartbeat_at_ms)


@attrs.frozen
class LivenessEvidence:
    """A claim about a recorded owner, bound to the instant it was observed.

    ``checked_at_ms`` must equal the ``now_ms`` of the operation that consumes
    the evidence, exactly.
    """

    expected_owner: OwnerId
    checked_at_ms: int
    kind: EvidenceKind


@attrs.frozen
class TransitionGuard:
    """An extra predicate a ``transition_owned`` checks inside its transaction.

    ``cancel_requested="absent"`` refuses to settle a run someone asked to
    cancel; ``"present"`` requires such a request; ``None`` checks nothing.
    """

    cancel_requested: CancelRequirement | None = None


@attrs.frozen
class OwnershipFact:
    """One ownership transition recorded in a run's companion fact stream.

    ``position`` counts 1, 2, 3, ... per run with no gaps.
    """

    run_id: str
    transition: OwnershipTransition
    owner: OwnerId
    granted_at_ms: int | None
    position: int


@attrs.frozen
class RunPage:
    """One page of ``list_runs``: the matching rows in listing order, and the
    cursor to pass as ``after`` for the next page (``None`` when this page is
    the last). The cursor is opaque text; it only means something to a store.
    """

    runs: tuple[RunRow, ...]
    next: str | None


@attrs.frozen
class RunChange:
    """The latest execution revision of one run id; ``deleted`` marks a tombstone."""

    run_id: str
    revision: int
    deleted: bool


@attrs.frozen
class Lease:
    """A consensus strategy's view of one run: its owner and its pending claim."""

    run_id: str
    owner: OwnerId | None
    granted_at_ms: int | None
    heartbeat_at_ms: int | None
    claim: OwnerId | None
    claimed_at_ms: int | None


@attrs.frozen
class CancelAcknowledgement:
    """The first owner observation of cancellation intent on a run."""

    run_id: str
    observed_at_ms: int
    owner: OwnerId


@attrs.frozen
class StoreState:
    """Everything a store holds, in a form two stores can be compared by ``==``.

    Rows, leases and acknowledgements are sorted by run id; facts by run id and
    position; changes by revision. ``attempts`` is reserved for attempt rows and
    is empty for stores without them.
    """

    rows: tuple[RunRow, ...]
    leases: tuple[Lease, ...]
    facts: tuple[OwnershipFact, ...]
    revision: int
    changes: tuple[RunChange, ...]
    acknowledgements: tuple[CancelAcknowledgement, ...] = ()
    attempts: tuple[object, ...] = ()
