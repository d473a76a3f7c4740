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
"""A run's status: ``pending`` (created, never owned), ``running`` (owned), ``suspended`` (released,
resumable), or one of the settled ``TERMINAL_STATUSES``."""
TerminalStatus: TypeAlias = Literal["completed", "failed", "cancelled"]
"""The settled statuses: ``completed``, ``failed`` and ``cancelled``. A settled run never changes
again."""

RUN_STATUSES: frozenset[str] = frozenset(
    {"pending", "running", "suspended", "completed", "failed", "cancelled"}
)
TERMINAL_STATUSES: frozenset[str] = frozenset({"completed", "failed", "cancelled"})
"""The set of ``TerminalStatus`` values, for membership tests."""

EvidenceKind: TypeAlias = Literal[
    "same-host-pid-dead", "cross-host-unreachable-stale", "lease-expired"
]
"""What a takeover's ``LivenessEvidence`` says: ``same-host-pid-dead`` (the owner's pid is gone on
this host), ``cross-host-unreachable-stale`` (another host, and its heartbeat is stale) or
``lease-expired`` (the lease is past the cutoff, whoever asks)."""
EVIDENCE_KINDS: frozenset[str] = frozenset(
    {"same-host-pid-dead", "cross-host-unreachable-stale", "lease-expired"}
)

OwnershipTransition: TypeAlias = Literal["claimed", "activated", "released", "stolen", "expired"]
"""What an ``OwnershipFact`` records: ``claimed``, ``activated``, ``released``, ``stolen`` or
``expired`` (a stale claim cleared by ``recover_claim``)."""
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
    """The host the process runs on, as the owner names it (1 to 1024 UTF-16 code units, no NUL, no
    surrogate)."""
    pid: int
    """The process id on that host: an int in ``[0, 2**53 - 1]``."""
    nonce: str
    """A value the process chose when it started, so that a restarted process with the same pid is a
    new owner (same rules as ``host_id``)."""


@attrs.frozen
class RunSnapshot:
    """The three fields an ownership compare-and-swap guards."""

    status: RunStatus
    """The run's ``RunStatus``."""
    owner: OwnerId | None
    """The owner of record, or ``None`` when nobody owns the run."""
    heartbeat_at_ms: int | None
    """The owner's last heartbeat stamp in ms, or ``None`` with no owner."""


@attrs.frozen
class RunRow:
    """A decoded run row. ``state_json`` is the caller's text, byte for byte.

    ``state_json`` is ``None`` only in the rows of a ``list_runs`` page asked
    for without state (``with_state=False``, the default); every other read
    returns it.
    """

    run_id: str
    """The run's id, unique in the store."""
    status: RunStatus
    """The run's ``RunStatus``."""
    created_at_ms: int
    """When ``create`` inserted the run, by the store clock."""
    started_at_ms: int | None
    """When the run was first activated, by the store clock; ``None`` until then."""
    finished_at_ms: int | None
    """When the run settled (``completed``, ``failed`` or ``cancelled``), by the store clock;
    ``None`` until then."""
    owner: OwnerId | None
    """The owner of record while the run is ``running``; ``None`` otherwise."""
    heartbeat_at_ms: int | None
    """The owner's last heartbeat stamp (it never moves backwards within one grant); ``None`` with
    no owner."""
    claim: OwnerId | None
    """The claimant whose claim is pending (after ``claim`` or ``steal``, before ``activate``), or
    ``None``."""
    claimed_at_ms: int | None
    """The pending claim's token: the ``now_ms`` it was made at; ``None`` with no claim."""
    parent_run_id: str | None
    """The run this one was created under (``create(..., parent_run_id=...)``), or ``None``."""
    cancel_requested_at_ms: int | None
    """When cancellation was first requested (``request_cancel``), or ``None``."""
    lineage_id: str | None
    """The lineage this run is a round of, or ``None`` for a run outside any lineage."""
    round_ordinal: int | None
    """The run's round number in its lineage, or ``None`` outside one."""
    state_json: str | None = attrs.field(repr=False)
    """The run state, the caller's JSON text byte for byte; ``None`` only in a ``list_runs`` page
    read without state. Left out of the repr."""

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
    """The owner the evidence says is gone: it must be the run's owner (or stale claimant) of
    record."""
    checked_at_ms: int
    """When the liveness was judged; equal to the consuming operation's ``now_ms``."""
    kind: EvidenceKind
    """What was observed, an ``EvidenceKind``."""


@attrs.frozen
class TransitionGuard:
    """An extra predicate a ``transition_owned`` checks inside its transaction.

    ``cancel_requested="absent"`` refuses to settle a run someone asked to
    cancel; ``"present"`` requires such a request; ``None`` checks nothing.
    """

    cancel_requested: CancelRequirement | None = None
    """``"absent"``, ``"present"`` or ``None``: what the run's cancellation request must be for the
    transition to go ahead."""


@attrs.frozen
class OwnershipFact:
    """One ownership transition recorded in a run's companion fact stream.

    ``position`` counts 1, 2, 3, ... per run with no gaps.
    """

    run_id: str
    """The run the transition happened to."""
    transition: OwnershipTransition
    """What happened, an ``OwnershipTransition``."""
    owner: OwnerId
    """The owner or claimant the transition concerns."""
    granted_at_ms: int | None
    """The grant or claim time the transition carries (the claim token), or ``None`` for a
    ``released`` fact that dropped ownership."""
    position: int
    """The fact's place in the run's stream: 1, 2, 3, ... with no gaps."""


@attrs.frozen
class RunPage:
    """One page of ``list_runs``: the matching rows in listing order, and the
    cursor to pass as ``after`` for the next page (``None`` when this page is
    the last). The cursor is opaque text; it only means something to a store.
    """

    runs: tuple[RunRow, ...]
    """The page's rows, oldest first (by ``created_at_ms``, then run id)."""
    next: str | None
    """The cursor to pass as ``after`` for the next page; ``None`` on the last page."""


@attrs.frozen
class RunChange:
    """The latest execution revision of one run id; ``deleted`` marks a tombstone."""

    run_id: str
    """The run the change is about."""
    revision: int
    """The execution revision of its latest write."""
    deleted: bool
    """True when that write deleted the run (a tombstone left by ``purge_settled``)."""


@attrs.frozen
class Lease:
    """A consensus strategy's view of one run: its owner and its pending claim."""

    run_id: str
    """The run the lease is for."""
    owner: OwnerId | None
    """The lease holder, or ``None`` while only a claim is pending."""
    granted_at_ms: int | None
    """When the holder was granted ownership, or ``None`` with no holder."""
    heartbeat_at_ms: int | None
    """The holder's last renewal, or ``None`` with no holder."""
    claim: OwnerId | None
    """The claimant of a pending claim, or ``None``."""
    claimed_at_ms: int | None
    """The pending claim's token (the ``now_ms`` it was made at), or ``None``."""


@attrs.frozen
class CancelAcknowledgement:
    """The first owner observation of cancellation intent on a run."""

    run_id: str
    """The run whose cancellation was acknowledged."""
    observed_at_ms: int
    """The ``now_ms`` of the owner's first ``acknowledge_cancel``."""
    owner: OwnerId
    """The owner that acknowledged it."""


@attrs.frozen
class StoreState:
    """Everything a store holds, in a form two stores can be compared by ``==``.

    Rows, leases and acknowledgements are sorted by run id; facts by run id and
    position; changes by revision. ``attempts`` is reserved for attempt rows and
    is empty for stores without them.
    """

    rows: tuple[RunRow, ...]
    """Every run row, with its state, sorted by run id."""
    leases: tuple[Lease, ...]
    """The strategy's leases, sorted by run id."""
    facts: tuple[OwnershipFact, ...]
    """Every ownership fact, by run id and position."""
    revision: int
    """The store's execution revision (``revision()``)."""
    changes: tuple[RunChange, ...]
    """The change feed, latest change per run id, by revision (``changes(0)``)."""
    acknowledgements: tuple[CancelAcknowledgement, ...] = ()
    """The first acknowledgement of cancellation per run, sorted by run id."""
    attempts: tuple[object, ...] = ()
    """Attempt rows, for stores that hold them; empty otherwise."""
