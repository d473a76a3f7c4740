"""The reach tour: rare cells reached on purpose, at the end of a program.

Some cells of the reach tables (``_reach``) are so rare that the default
budget's programs never land in them: a steal refused for a claim with
evidence that does not fit, a claim-and-own against a snapshot that moved, an
activation on a claim gone stale, a fault during a steal. A rule aimed at them
would change every program Hypothesis generates (and with it which planted
bug each check catches), so they are reached another way.

At the end of a program that passed every check, the machine makes one
*tour*: for each cell of ``TOUR``, it creates a run of its own, drives it
into the cell's prior situation with ordinary calls, and makes the one call
that lands in the cell (chosen by trying candidates on a copy of the
reference). Every step goes through the machine's own differential step, so
it is compared, its invariants are checked and its reach is recorded. Nothing
is drawn. A machine class makes the tour once it has passed; until then
every program that ends cleanly makes it again, so a failure repeats when
Hypothesis replays or shrinks it.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, ClassVar, Final

from runstore._clock import ManualClock
from runstore._constants import HEARTBEAT_STALE_AFTER_MS
from runstore._values import RunSnapshot
from runstore.model import ModelRunStore

from .._base._domain import PROCESS_COUNT, STATE_TEXTS, World
from .._base._steps import Call, call, perform
from .._checks._malformed import (
    EDGE_CASES,
    FINDING_WORK_MALFORMED_CASES,
    MALFORMED_CASES,
    malformed_call,
)
from ._reach import DIMENSIONS, Cell, describe_cell, reachable_cells, situation_of, tag_of

if TYPE_CHECKING:
    from .._base._capabilities import Capabilities

#: The cells the tour reaches, as ``describe_cell`` names them.
TOUR: Final = (
    "claim -> SnapshotChanged when status=pending, claim=none, owner=none",
    "claim_and_own -> Activated when status=running, claim=none, owner=stale, evidence=unfit",
    "claim_and_own -> AlreadyClaimed when status=pending, claim=held, owner=none, evidence=none",
    "claim_and_own -> AlreadyClaimed when status=pending, claim=held, owner=none, evidence=unfit",
    "claim_and_own -> AlreadyClaimed when status=suspended, claim=held, owner=none, evidence=none",
    "claim_and_own -> AlreadyClaimed when status=running, claim=held, owner=fresh, evidence=none",
    "claim_and_own -> AlreadyClaimed when status=running, claim=stale, owner=fresh, evidence=none",
    "claim_and_own -> SnapshotChanged when status=pending, claim=none, owner=none, evidence=none",
    "claim_and_own -> SnapshotChanged when status=pending, claim=none, owner=none, evidence=unfit",
    "claim_and_own -> SnapshotChanged when status=suspended, claim=none, owner=none, evidence=none",
    "claim_and_own -> SnapshotChanged when status=settled, claim=none, owner=none, evidence=none",
    "steal -> NotFound when status=missing, claim=none, owner=none, evidence=unfit",
    "steal -> AlreadyClaimed when status=pending, claim=held, owner=none, evidence=unfit",
    "steal -> AlreadyClaimed when status=pending, claim=stale, owner=none, evidence=unfit",
    "steal -> AlreadyClaimed when status=running, claim=held, owner=fresh, evidence=unfit",
    "steal -> AlreadyClaimed when status=running, claim=held, owner=stale, evidence=unfit",
    "steal -> AlreadyClaimed when status=running, claim=stale, owner=fresh, evidence=unfit",
    "steal -> AlreadyClaimed when status=running, claim=stale, owner=stale, evidence=unfit",
    "steal -> HeartbeatFresh when status=running, claim=none, owner=fresh, evidence=unfit",
    "steal -> SnapshotChanged when status=pending, claim=none, owner=none, evidence=unfit",
    "steal -> SnapshotChanged when status=suspended, claim=none, owner=none, evidence=unfit",
    "steal -> SnapshotChanged when status=running, claim=none, owner=stale, evidence=fits",
    "steal -> SnapshotChanged when status=running, claim=none, owner=stale, evidence=unfit",
    "steal -> LivenessUnconfirmed when status=running, claim=none, owner=fresh, evidence=fits",
    "steal -> LivenessUnconfirmed when status=running, claim=stale, owner=fresh, evidence=fits",
    "steal -> LivenessUnconfirmed when status=running, claim=stale, owner=stale, evidence=fits",
    "activate -> Activated when status=running, claim=stale, owner=fresh",
    "activate -> SnapshotChanged when status=pending, claim=held, owner=none",
    "activate -> SnapshotChanged when status=pending, claim=stale, owner=none",
    "activate -> SnapshotChanged when status=running, claim=stale, owner=fresh",
    "recover_claim -> ClaimFresh when status=running, claim=held, evidence=fits",
    "recover_claim -> ClaimChanged when status=pending, claim=held, evidence=fits",
    "recover_claim -> ClaimChanged when status=pending, claim=held, evidence=unfit",
    "recover_claim -> LivenessUnconfirmed when status=pending, claim=held, evidence=unfit",
    "recover_claim -> LivenessUnconfirmed when status=pending, claim=stale, evidence=unfit",
    "heartbeat -> FenceLost when status=pending, claim=held, owner=none",
    "transition_owned -> GuardFailed when status=running, owner=stale, cancel=no",
    "abandon_claim -> ClaimLost when status=pending, claim=held",
    "abandon_claim -> ClaimLost when status=pending, claim=stale",
    "acknowledge_cancel -> False when status=suspended, owner=none, cancel=no",
    "activate -> SnapshotChanged when status=running, claim=held, owner=stale",
    "claim -> SnapshotChanged when status=suspended, claim=none, owner=none",
    "claim_and_own -> AlreadyClaimed when status=pending, claim=stale, owner=none, evidence=none",
    "claim_and_own -> AlreadyClaimed when status=running, claim=held, owner=stale, evidence=fits",
    "claim_and_own -> EvidenceRequired when status=running, claim=none, owner=stale, evidence=none",
    "claim_and_own -> HeartbeatFresh when status=running, claim=none, owner=fresh, evidence=none",
    "claim_and_own -> SnapshotChanged when status=running, claim=none, owner=stale, evidence=none",
    "claim_and_own -> SnapshotChanged when status=suspended, claim=none, owner=none, "
    "evidence=unfit",
    "reconfirm -> FenceLost when status=pending, claim=held, owner=none",
    "reconfirm -> FenceLost when status=pending, claim=stale, owner=none",
    "recover_claim -> ClaimChanged when status=pending, claim=stale, evidence=fits",
    "recover_claim -> ClaimChanged when status=pending, claim=stale, evidence=unfit",
    "recover_claim -> ClaimChanged when status=running, claim=held, evidence=fits",
    "steal -> LivenessUnconfirmed when status=running, claim=held, owner=stale, evidence=fits",
)
#: The state ``_tour_last`` leaves in a row: admission refuses it.
CORRUPT_TEXT: Final = '{"n":1e400}'
#: How many runs the tour drives, at most, in search of one cell.
TRIES_PER_CELL: Final = 3


def tour_cells() -> list[Cell]:
    """``TOUR`` as cells (each one reachable: a ruled-out cell is a mistake)."""
    named = {describe_cell(cell): cell for cell in reachable_cells()}
    return [named[name] for name in TOUR]


class Tour:
    """The reach tour of a ``RunStoreComparison`` (see the module)."""

    # Provided by RunStoreComparison.
    world: World
    clock: ManualClock
    model: ModelRunStore
    #: Whether a program of this machine class has made the tour and passed.
    toured: ClassVar[bool] = False

    if TYPE_CHECKING:

        def _do(self, op: Call, *, admission: bool | None = None) -> Any: ...

        def _drive(
            self, run: str, target: tuple[str, str, str], process: int, asked: bool
        ) -> None: ...

        def _candidates(self, run: str, then: str) -> list[Call]: ...

        def _set_clock(self, ms: int) -> None: ...

        def _faulted(self, built: Call, fault: str) -> None: ...

        def _raw_write(self, run: str, text: str) -> None: ...

        def _claim_next(self, op: Call) -> Any: ...

        capabilities: ClassVar[Capabilities]
        raw_writer: ClassVar[Any]

    def _tour(self) -> None:
        """Make the tour, unless this machine class has made it and passed,
        or the program is ending in an exception (a check that failed
        outside the differential step, an error of the suite): the tour
        starts only from a program that passed. A store compared through
        public reads of the program's own runs (no ``whole_state``) cannot
        show the tour's runs, so it is not toured."""
        if type(self).toured or sys.exc_info()[1] is not None:
            return
        self._touring = True
        self._tour_runs = 0
        self._tour_admission()
        if not self.capabilities.whole_state:
            return
        for cell in tour_cells():
            self._tour_cell(cell)
        self._tour_lineage()
        self._tour_raised()

    def _tour_admission(self) -> None:
        """Every call of the admission table once, in the table's order: each
        inadmissible argument (both sides refuse it with ``invalid_run`` and
        change nothing), each argument at one of the contract's limits and
        each state admission must walk (both sides admit it, on a run that
        does not exist), and where the store finds work, each inadmissible
        argument of the operations across runs. The ``malformed`` rules draw
        from the same table, but a derandomized budget's draws leave some of
        it unasked (13 of 70 cases in a default run); the tour asks all of
        it, so a planted admission bug that one case shows is seen whatever
        the programs drew. Stores compared through public reads take it too."""
        for case in MALFORMED_CASES:
            self._do(malformed_call(case, self.world), admission=False)
        for case in EDGE_CASES:
            self._do(malformed_call(case, self.world), admission=True)
        if self.capabilities.finding_work:
            for case in FINDING_WORK_MALFORMED_CASES:
                self._do(malformed_call(case, self.world), admission=False)

    def _tour_last(self) -> None:
        """The tour's last step, after the stores' own checks (it plants a
        row that no longer decodes): ``claim_next`` reaching that run. Then
        the tour has passed."""
        if type(self).toured or not getattr(self, "_touring", False):
            return
        caps = self.capabilities
        if self.raw_writer is not None and caps.whole_state and caps.finding_work:
            candidates = self.model.claim_next_candidates()
            run = candidates[0] if candidates else self._tour_run()
            self._raw_write(run, CORRUPT_TEXT)
            now = self.clock.now_ms()
            self._claim_next(call("claim_next", ("owner", self.world.process(0)), ("now_ms", now)))
        type(self).toured = True

    def _tour_lineage(self) -> None:
        """``request_cancel_lineage`` on a round already asked: a pending one
        whose next round is not (marked: ``CancelRequested``), and a settled
        one whose next round is asked too (``AlreadyRequested``); and on a
        settled round never asked whose next round is (``AlreadyRequested``:
        a settled round is not marked)."""
        for settle, asked in ((False, True), (True, True), (True, False)):
            root = self._tour_run()
            options = {"lineage_id": root, "round_ordinal": 2}
            self._do(
                call("create", ("run_id", f"{root}-2"), ("state_json", STATE_TEXTS[0]), **options)
            )
            now = self.clock.now_ms()
            if settle:
                self._drive(root, ("settled", "none", "none"), 0, asked)
                self._do(call("request_cancel", ("run_id", f"{root}-2"), ("now_ms", now)))
            else:
                self._do(call("request_cancel", ("run_id", root), ("now_ms", now)))
            self._do(
                call("request_cancel_lineage", ("run_id", root), ("now_ms", self.clock.now_ms()))
            )

    def _tour_run(self) -> str:
        self._tour_runs += 1
        run = f"tour-{self._tour_runs}"
        self._do(call("create", ("run_id", run), ("state_json", STATE_TEXTS[0])))
        return run

    def _tour_cell(self, cell: Cell) -> None:
        method, _tag, situation = cell
        named = dict(zip(DIMENSIONS[method], situation, strict=True))
        status = named["status"]
        claim = named.get("claim", "none")
        owners = [named["owner"]] if "owner" in named else ["fresh", "stale"]
        if status != "running":
            owners = ["none"]
        asked = named.get("cancel") == "asked"
        for attempt in range(TRIES_PER_CELL):
            owner = owners[attempt % len(owners)]
            if status == "missing":
                run = f"tour-missing-{attempt}"
            else:
                run = self._tour_run()
                self._tour_drive(run, (status, claim, owner), attempt % PROCESS_COUNT, asked)
            op = self._aimed(run, cell)
            if op is not None:
                self._do(op)
                return

    def _tour_drive(
        self, run: str, target: tuple[str, str, str], process: int, asked: bool
    ) -> None:
        """``_drive`` (steering's), but a pending target is reached from a new
        run, never released: a run once owned is never pending again."""
        status, claim, _owner = target
        if status != "pending":
            self._drive(run, target, process, asked)
            return
        now = self.clock.now_ms()
        if asked:
            self._do(call("request_cancel", ("run_id", run), ("now_ms", now)))
        if claim != "none":
            row = self.world.row(run)
            assert row is not None
            claimant = self.world.process((process + 1) % PROCESS_COUNT)
            self._do(
                call(
                    "claim",
                    ("run_id", run),
                    ("expected", row.snapshot),
                    ("claimant", claimant),
                    ("now_ms", now),
                )
            )
            if claim == "stale":
                self._set_clock(now + HEARTBEAT_STALE_AFTER_MS + 1)

    def _tour_candidates(self, run: str, method: str) -> list[Call]:
        """Steering's candidates for ``method`` on ``run``, then the same calls
        against snapshots the run never had (any status, any process as
        owner), with evidence that fits the snapshot's owner."""
        plain = self._candidates(run, method)
        now = self.clock.now_ms()
        processes = [self.world.process(i) for i in range(PROCESS_COUNT)]
        snapshots = [RunSnapshot("pending", None, None), RunSnapshot("suspended", None, None)]
        snapshots += [RunSnapshot("running", who, now) for who in processes]
        extra: list[Call] = []
        for op in plain:
            if op.get("expected") is None:
                continue
            for snapshot in snapshots:
                changed = _with(op, "expected", snapshot)
                extra.append(changed)
                if method == "steal" and snapshot.owner is not None:
                    observer = op.get("claimant")
                    proof = self.world.evidence("fit", snapshot.owner, observer, op.get("now_ms"))
                    extra.append(_with(changed, "evidence", proof))
        return plain + extra

    def _aimed(self, run: str, cell: Cell) -> Call | None:
        """The first candidate call on ``run`` that lands in ``cell``, tried on
        a copy of the reference, or ``None``."""
        method, tag, situation = cell
        before = self.model.state()
        now = self.clock.now_ms()
        for op in self._tour_candidates(run, method):
            if situation_of(op, before, now) != situation:
                continue
            trial = ModelRunStore(clock=ManualClock(now))
            trial._state = self.model.model_state
            if tag_of(method, perform(trial, op)) == tag:
                return op
        return None

    def _tour_raised(self) -> None:
        """The error cells: a fault during a steal and during an abandonment
        (where the store can inject faults), an inadmissible abandonment."""
        self._do(malformed_call("abandon-float-token", self.world), admission=False)
        self._do(malformed_call("acknowledge-negative-now", self.world), admission=False)
        if not self.capabilities.fault_injection:
            return
        steal = ("steal", "Claimed", ("running", "none", "stale", "fits"))
        abandon = ("abandon_claim", "Abandoned", ("pending", "held"))
        for cell, target in (
            (steal, ("running", "none", "stale")),
            (abandon, ("pending", "held", "none")),
        ):
            run = self._tour_run()
            self._tour_drive(run, target, 0, False)
            op = self._aimed(run, cell)
            if op is not None:
                self._faulted(op, "statement-0")


def _with(op: Call, name: str, value: Any) -> Call:
    """``op`` with its argument ``name`` set to ``value``."""
    arguments = tuple((k, value if k == name else v) for k, v in op.arguments)
    return Call(op.method, arguments, op.keywords)
