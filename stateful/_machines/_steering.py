"""Steering the run-store machine into rare situations.

Left to chance, most steps of a program land in a few common situations (a
pending run claimed, a running run heartbeated); the reach tables (``_reach``)
showed whole rows the default budget never visited: suspended runs with a
claim, a running run whose thief has not activated yet while its old owner
keeps heartbeating, a claim left to go stale, settled runs read back. Each of
those is where a realistic bug hides (a takeover that forgets the claim, a
recovery that clears the wrong token).

``situation`` is a deterministic rule: it drives one run, with ordinary calls
checked like every other step, into a chosen prior situation (status, claim
held or stale, owner fresh or stale, cancellation asked), then makes one
operation on it with arguments drawn like that operation's own rule's. The
driving steps are differential steps too, so nothing is taken on trust.

Hypothesis's own rule selection is swarm testing (each program enables a
random subset of the rules, ``FeatureFlags``), so some programs run
``situation`` often and others never.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from runstore._clock import ManualClock
from runstore._constants import HEARTBEAT_STALE_AFTER_MS
from runstore._outcomes import Claimed
from runstore._values import RunRow, TransitionGuard
from runstore.model import ModelRunStore

from .._base._domain import (
    PROCESS_COUNT,
    RUN_IDS,
    World,
)
from .._base._steps import Call, call, perform
from ._reach import OUTCOMES, tag_of

#: The situations ``situation`` drives a run into: (status, claim, owner).
SITUATIONS = (
    ("pending", "none", "none"),
    ("running", "none", "fresh"),
    ("suspended", "none", "none"),
    ("suspended", "held", "none"),
    ("suspended", "stale", "none"),
    ("pending", "held", "none"),
    ("pending", "stale", "none"),
    ("running", "none", "stale"),
    ("running", "held", "stale"),
    ("running", "held", "fresh"),
    ("running", "stale", "stale"),
    ("running", "stale", "fresh"),
    ("settled", "none", "none"),
)
#: What is done to the run once it is there.
FOLLOW_UPS = (
    "claim",
    "claim_and_own",
    "steal",
    "activate",
    "abandon_claim",
    "recover_claim",
    "heartbeat",
    "reconfirm",
    "transition_owned",
    "request_cancel",
    "request_cancel_lineage",
    "acknowledge_cancel",
    "get",
    "lineage",
    "latest_round",
)
STEERED_RUNS = ("a", "b", "lin")
#: The evidence selectors an aimed call tries.
EVIDENCE_KINDS = (
    "fit",
    "lease-expired",
    "same-host-pid-dead",
    "cross-host-unreachable-stale",
    "fit-1",
    "wrong-owner",
    "none",
)
#: Candidate calls tried on a copy of the reference before one is made.
AIM_TRIES = 48


class Steering:
    """Rules that steer a ``RunStoreComparison`` into rare situations."""

    # Provided by RunStoreComparison.
    world: World
    clock: ManualClock

    if TYPE_CHECKING:

        def _do(self, op: Call) -> Any: ...

        def _owned(self, run: str, process: int) -> RunRow | None: ...

        def _set_clock(self, ms: int) -> None: ...

    def _row(self, run: str) -> RunRow | None:
        row: RunRow | None = self.world.row(run)
        return row

    def _release(self, run: str, to_status: str) -> None:
        row = self._row(run)
        if row is not None and row.owner is not None:
            self._do(
                call(
                    "transition_owned",
                    ("run_id", run),
                    ("owner", row.owner),
                    ("to_status", to_status),
                )
            )

    def _claim_now(self, run: str, process: int) -> int | None:
        row = self._row(run)
        if row is None:
            return None
        out = self._do(
            call(
                "claim",
                ("run_id", run),
                ("expected", row.snapshot),
                ("claimant", self.world.process(process)),
                ("now_ms", self.clock.now_ms()),
            )
        )
        return out.claimed_at_ms if isinstance(out, Claimed) else None

    def _steal_now(self, run: str, thief: int) -> int | None:
        row = self._row(run)
        if row is None or row.owner is None or row.heartbeat_at_ms is None:
            return None
        self._set_clock(row.heartbeat_at_ms + HEARTBEAT_STALE_AFTER_MS + 1)
        now = self.clock.now_ms()
        who = self.world.process(thief)
        out = self._do(
            call(
                "steal",
                ("run_id", run),
                ("expected", row.snapshot),
                ("claimant", who),
                ("now_ms", now),
                ("evidence", self.world.evidence("fit", row.owner, who, now)),
            )
        )
        return out.claimed_at_ms if isinstance(out, Claimed) else None

    def _pulse(self, run: str) -> None:
        row = self._row(run)
        if row is not None and row.owner is not None:
            self._do(
                call(
                    "heartbeat",
                    ("run_id", run),
                    ("owner", row.owner),
                    ("now_ms", self.clock.now_ms()),
                )
            )

    def _drive(self, run: str, target: tuple[str, str, str], process: int, asked: bool) -> None:
        status, claim, owner = target
        other = (process + 1) % PROCESS_COUNT
        row = self._owned(run, process)
        if row is None:
            return
        if asked:
            self._do(call("request_cancel", ("run_id", run), ("now_ms", self.clock.now_ms())))
        if status in ("pending", "suspended", "settled"):
            current = self._row(run)
            if current is not None and current.status == "running":
                self._release(run, "completed" if status == "settled" else status)
            if claim != "none":
                self._claim_now(run, other)
                if claim == "stale":
                    self._set_clock(self.clock.now_ms() + HEARTBEAT_STALE_AFTER_MS + 1)
            return
        # Running: the owner of record is ``process``'s incarnation (or whoever owned it).
        if claim == "none":
            if owner == "stale":
                current = self._row(run)
                if current is not None and current.heartbeat_at_ms is not None:
                    self._set_clock(current.heartbeat_at_ms + HEARTBEAT_STALE_AFTER_MS + 1)
            return
        if self._steal_now(run, other) is None:
            return
        if claim == "stale":
            self._set_clock(self.clock.now_ms() + HEARTBEAT_STALE_AFTER_MS + 1)
        if owner == "fresh":
            self._pulse(run)

    def _situation(
        self,
        run: str,
        into: tuple[str, str, str],
        process: int,
        asked: bool,
        then: str,
        data: st.DataObject,
    ) -> None:
        """Drive ``run`` into the situation ``into`` (and maybe ask to cancel
        it), then make one ``then`` operation on it with arguments drawn as its
        rule draws them."""
        self._drive(run, into, process, asked)
        self._follow_up(run, then, data)

    # -- operations over many runs -------------------------------------------------

    @precondition(lambda self: self.capabilities.finding_work)
    @rule(
        runs=st.lists(st.sampled_from(STEERED_RUNS), min_size=2, max_size=3, unique=True),
        status=st.sampled_from(("completed", "failed", "cancelled")),
        process=st.sampled_from(tuple(range(PROCESS_COUNT))),
        limit=st.sampled_from((None, None, 1)),
    )
    def settle_then_purge(
        self, runs: list[str], status: str, process: int, limit: int | None
    ) -> None:
        """Settle several runs, let time pass, purge the settled ones (more than
        one at once), then compact the feed of their tombstones."""
        for run in runs:
            row = self._owned(run, process)
            if row is not None and self._row(run) is not None:
                self._release(run, status)
        self._set_clock(self.clock.now_ms() + 1_000)
        self._do(call("purge_settled", ("before_ms", self.clock.now_ms()), limit=limit))
        machine: Any = self
        through = machine.model_state.revision
        self._do(call("compact_changes", ("through_revision", through), limit=limit))

    @precondition(lambda self: self.capabilities.finding_work)
    @rule(process=st.sampled_from(tuple(range(PROCESS_COUNT))), extra=st.booleans())
    def renew_everything_held(self, process: int, extra: bool) -> None:
        """An owner renews every run it owns in one ``heartbeat_many`` (all of
        them renewed), and with ``extra`` one it does not own as well."""
        run = STEERED_RUNS[process % len(STEERED_RUNS)]
        row = self._owned(run, process)
        if row is None or row.owner is None:
            return
        owner = row.owner
        mine = [r.run_id for r in self.world.rows.values() if r.owner == owner]
        if extra:
            mine += [r for r in RUN_IDS if r not in mine][:1]
        self._do(
            call(
                "heartbeat_many",
                ("owner", owner),
                ("run_ids", mine),
                ("now_ms", self.world.reading(owner)),
            )
        )

    @rule(back=st.sampled_from((0, 1, -1)))
    def changes_at_the_head(self, back: int) -> None:
        """The change feed read at its head (empty), one below it, or from an
        inadmissible revision."""
        machine: Any = self
        head = machine.model_state.revision
        after = -1 if back == -1 else max(0, head - back)
        self._do(call("changes", ("after_revision", after)))

    def _follow_up(self, run: str, then: str, data: st.DataObject) -> None:
        """Make one ``then`` call on ``run``, aimed at an answer drawn from the
        operation's answers: candidate arguments (built from the rules'
        selectors) are tried on a copy of the reference, and the first that
        gives the drawn answer is made for real (else the first candidate)."""
        want = data.draw(st.sampled_from(OUTCOMES[then]), label="aim")
        rng = data.draw(st.randoms(use_true_random=False), label="order")
        candidates = self._candidates(run, then)
        rng.shuffle(candidates)
        chosen = candidates[0]
        machine: Any = self
        for op in candidates[:AIM_TRIES]:
            trial = ModelRunStore(clock=ManualClock(self.clock.now_ms()))
            trial._state = machine.model.model_state
            if tag_of(then, perform(trial, op)) == want:
                chosen = op
                break
        self._do(chosen)

    def _candidates(self, run: str, then: str) -> list[Call]:
        """Arguments for ``then`` on ``run`` from every combination of the
        selectors its rule draws from (times resolved without moving the clock)."""
        world = self.world
        now = self.clock.now_ms()
        processes = [world.process(i) for i in range(PROCESS_COUNT)]
        row = self._row(run)
        people = _unique([world.actor(a, run) for a in ("owner", "claimant", "ghost")] + processes)
        snapshots = _unique([world.expected(e, run) for e in ("row", "stale", "pending", "as-row")])
        tokens = sorted({world.token(t, run) for t in ("claim", "claim-1", "claim+1", "old")})
        out: list[Call] = []
        if then in ("get", "lineage", "latest_round", "ownership_facts"):
            return [call(then, ("run_id", run))]
        if then in ("request_cancel", "request_cancel_lineage"):
            return [call(then, ("run_id", run), ("now_ms", now + d)) for d in (0, 1, 50_000)]
        for who in people:
            reading = world.reading(who)
            times = _unique([reading, now, max(0, now - 20_000), now + 10_001])
            if then == "claim":
                out += [
                    call(
                        "claim",
                        ("run_id", run),
                        ("expected", snap),
                        ("claimant", who),
                        ("now_ms", t),
                    )
                    for snap in snapshots
                    for t in times
                ]
            elif then in ("claim_and_own", "steal"):
                subject = row.owner if row is not None and row.owner is not None else who
                for snap in snapshots:
                    about = getattr(snap, "owner", None) or subject
                    for t in times[:2]:
                        proofs = _unique(
                            [world.evidence(e, about, who, t) for e in EVIDENCE_KINDS]
                            + [world.evidence(e, subject, who, t) for e in EVIDENCE_KINDS]
                        )
                        for proof in proofs:
                            if then == "steal":
                                if proof is None:
                                    continue
                                out.append(
                                    call(
                                        "steal",
                                        ("run_id", run),
                                        ("expected", snap),
                                        ("claimant", who),
                                        ("now_ms", t),
                                        ("evidence", proof),
                                    )
                                )
                            else:
                                out.append(
                                    call(
                                        "claim_and_own",
                                        ("run_id", run),
                                        ("expected", snap),
                                        ("owner", who),
                                        ("now_ms", t),
                                        evidence=proof,
                                    )
                                )
            elif then in ("activate", "abandon_claim"):
                for token in tokens:
                    if then == "abandon_claim":
                        out.append(
                            call(
                                "abandon_claim",
                                ("run_id", run),
                                ("claimant", who),
                                ("claimed_at_ms", token),
                            )
                        )
                        continue
                    out += [
                        call(
                            "activate",
                            ("run_id", run),
                            ("claimant", who),
                            ("claimed_at_ms", token),
                            ("expected", snap),
                        )
                        for snap in snapshots
                    ]
            elif then == "recover_claim":
                for observer in processes[::2] + processes[1:2]:
                    t = now
                    proofs = _unique([world.evidence(e, who, observer, t) for e in EVIDENCE_KINDS])
                    for token in tokens:
                        out += [
                            call(
                                "recover_claim",
                                ("run_id", run),
                                ("stale_claimant", who),
                                ("claimed_at_ms", token),
                                ("observer", observer),
                                ("now_ms", t),
                                ("evidence", proof),
                            )
                            for proof in proofs
                            if proof is not None
                        ]
            elif then in ("heartbeat", "reconfirm"):
                out += [call(then, ("run_id", run), ("owner", who), ("now_ms", t)) for t in times]
            elif then == "transition_owned":
                out += [
                    call(
                        "transition_owned",
                        ("run_id", run),
                        ("owner", who),
                        ("to_status", to),
                        guard=None if guard is None else TransitionGuard(guard),
                    )
                    for to in ("running", "suspended", "completed", "pending")
                    for guard in (None, "absent", "present")
                ]
            elif then == "acknowledge_cancel":
                out += [
                    call("acknowledge_cancel", ("run_id", run), ("owner", who), ("now_ms", t))
                    for t in times[:2]
                ]
        return out or [call("get", ("run_id", run))]


def _unique(values: list[Any]) -> list[Any]:
    seen: list[Any] = []
    for value in values:
        if value not in seen:
            seen.append(value)
    return seen


def _situation_rule(then: str) -> Any:
    def steer(
        self: Steering,
        run: str,
        into: tuple[str, str, str],
        process: int,
        asked: bool,
        data: st.DataObject,
    ) -> None:
        self._situation(run, into, process, asked, then, data)

    steer.__name__ = steer.__qualname__ = f"situation_{then}"
    steer.__doc__ = f"Drive a run into a chosen situation, then ``{then}`` on it."
    return rule(
        run=st.sampled_from(STEERED_RUNS),
        into=st.sampled_from(SITUATIONS),
        process=st.sampled_from(tuple(range(PROCESS_COUNT))),
        asked=st.booleans(),
        data=st.data(),
    )(steer)


# One rule per operation, so that steered steps are a fair share of a program
# (Hypothesis picks among the enabled rules uniformly).
for _then in FOLLOW_UPS:
    setattr(Steering, f"situation_{_then}", _situation_rule(_then))
del _then
