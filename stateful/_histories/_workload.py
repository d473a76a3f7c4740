"""The random workload of one owner: what a torture worker (or a generated
history's client) does to the store, step by step.

A ``Worker`` is one owner walking a small, moving window of run ids
(``<prefix>0``, ``<prefix>1``, ...): each step reads one run of the window
and acts on what it saw, as a real owner would, including the stale and
displaced moves that races are made of (claiming what someone just claimed,
activating with an old snapshot, a heartbeat after losing the run, a late
settle). Runs come in lineages of ``ROUNDS_PER_LINEAGE`` rounds (the first
round a fork of the root, so creates can fail on a missing parent). When the
window's first run is settled the window moves on, so every worker keeps
converging on the same few live runs.

Now and then a step is a multi-run operation instead, where the store offers
it: a walk over the pages of ``list_runs`` (a random filter, small pages),
``claim_next``, ``heartbeat_many`` over the runs this owner holds (and a
run it may not), or ``purge_settled`` of runs settled well before (20 s of
store time: more than two clock skews, so a run settling during the call is
never eligible).

The worker only uses the ``RunStore`` protocol and a clock, so the same walk
runs against a real store in a torture process and against the reference
model in ``runstore.stateful._histories._generate``.
"""

from __future__ import annotations

import json
import random
import time
from typing import Any, Protocol

from runstore import (
    HEARTBEAT_SKEW_ALLOWANCE_MS,
    HEARTBEAT_STALE_AFTER_MS,
    TERMINAL_STATUSES,
    Claimed,
    LivenessEvidence,
    OwnerId,
    RunPage,
    RunRow,
    RunStoreError,
    TransitionGuard,
)

ROUNDS_PER_LINEAGE = 3
_SETTLED = ("suspended", "completed", "failed", "cancelled")


class _Clock(Protocol):
    def now_ms(self) -> int: ...


class Worker:
    """One owner's random walk over the live window of runs.

    ``nap_probability``: the chance per step of a pause long enough for this
    owner's leases to go stale (``stale_real_s`` up to 1.5 times); zero in
    simulations. ``settle``: whether owners ever settle runs (without it one
    run lives for the whole walk). ``lineages``: whether runs form lineages.
    ``slot_ms``: when set, most steps start on a grid of the system-wide
    monotonic clock, so workers in different processes act at the same
    instants and their operations collide (races become likely, not lucky).
    ``multi``: whether steps may be multi-run operations (those the store has).
    """

    def __init__(
        self,
        store: Any,
        clock: _Clock,
        me: OwnerId,
        rng: random.Random,
        prefix: str,
        window: int,
        *,
        stale_real_s: float = 0.0,
        nap_probability: float = 0.0,
        settle: bool = True,
        lineages: bool = True,
        slot_ms: float = 0.0,
        multi: bool = True,
    ) -> None:
        self.store = store
        self.clock = clock
        self.me = me
        self.rng = rng
        self.prefix = prefix
        self.window = window
        self.stale_real_s = stale_real_s
        self.nap_probability = nap_probability
        self.settle = settle
        self.lineages = lineages
        self.slot_ns = int(slot_ms * 1_000_000)
        self.multi = multi
        self.frontier = 0
        self.settled: set[int] = set()
        self.mine: set[int] = set()
        self.claims: dict[str, RunRow] = {}
        self.counter = 0

    # -- helpers --

    def run_id(self, n: int) -> str:
        return f"{self.prefix}{n}"

    def now(self) -> int:
        """The caller's reading: mostly the clock, sometimes ahead (inside the
        allowance, rarely past it) or behind."""
        now = self.clock.now_ms()
        roll = self.rng.random()
        if roll < 0.08:
            return now + self.rng.randrange(0, HEARTBEAT_SKEW_ALLOWANCE_MS)
        if roll < 0.09:
            return now + HEARTBEAT_SKEW_ALLOWANCE_MS + self.rng.randrange(1, 5_000)
        if roll < 0.14:
            return max(0, now - self.rng.randrange(0, HEARTBEAT_STALE_AFTER_MS))
        return now

    def state_json(self) -> str:
        self.counter += 1
        return json.dumps({"host": self.me.host_id, "step": self.counter})

    def evidence(self, owner: OwnerId, now: int) -> LivenessEvidence:
        if self.rng.random() < 0.3:
            return LivenessEvidence(owner, now, "lease-expired")
        if owner.host_id == self.me.host_id:
            return LivenessEvidence(owner, now, "same-host-pid-dead")
        return LivenessEvidence(owner, now, "cross-host-unreachable-stale")

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Call the store; an exception is returned, not raised (the recorder
        has written it down; a store that crashes is reported, not obeyed)."""
        try:
            return getattr(self.store, method)(*args, **kwargs)
        except Exception as error:
            return error

    # -- one step --

    def step(self) -> None:
        rng = self.rng
        if self.nap_probability and rng.random() < self.nap_probability:
            # A pause (a slow step, a collector): long enough for leases to go stale.
            time.sleep(rng.uniform(0, 1.5 * self.stale_real_s))
        if self.slot_ns and rng.random() < 0.9:
            # Start on the shared slot grid (the monotonic clock is system-wide),
            # as pollers on an aligned schedule do: every worker acts at once.
            now = time.monotonic_ns()
            time.sleep((self.slot_ns - now % self.slot_ns) / 1e9)
        if self.multi and rng.random() < 0.03 and self.multi_run():
            return
        window = self.live_window()
        mine = [n for n in window if n in self.mine]
        n = rng.choice(mine) if mine and rng.random() < 0.5 else rng.choice(window)
        run_id = self.run_id(n)
        row = self.call("get", run_id)
        if isinstance(row, RunStoreError) and row.code == "not_found_row":
            self.create(n)
            return
        if not isinstance(row, RunRow):
            return
        if row.owner == self.me or row.claim == self.me:
            self.mine.add(n)
        else:
            self.mine.discard(n)
        if row.status in TERMINAL_STATUSES:
            self.settled.add(n)
            while self.frontier in self.settled:
                self.settled.discard(self.frontier)
                self.frontier += 1
            self.claims.pop(run_id, None)
            if rng.random() < 0.1:
                self.call("request_cancel", run_id, self.now())
            return
        roll = rng.random()
        if roll < 0.03:
            self.call(rng.choice(("lineage", "latest_round", "ownership_facts")), run_id)
        elif roll < 0.06:
            method = rng.choice(("request_cancel", "request_cancel", "request_cancel_lineage"))
            self.call(method, run_id, self.now())
        elif roll < 0.08:
            # Perhaps a displaced owner's late write: the fence must refuse it.
            self.call(rng.choice(("heartbeat", "reconfirm")), run_id, self.me, self.now())
        elif row.claim == self.me:
            self.claimed(run_id, row)
        elif row.claim is not None:
            self.claimed_by_other(run_id, row)
        elif row.status == "running" and row.owner == self.me:
            self.owned(run_id, row)
        elif row.status == "running":
            self.owned_by_other(run_id, row)
        else:
            self.claimable(run_id, row)

    def offers(self, method: str) -> bool:
        return callable(getattr(self.store, method, None))

    def number(self, run_id: str) -> int | None:
        """The window number of one of this walk's run ids (None for others)."""
        tail = run_id[len(self.prefix) :] if run_id.startswith(self.prefix) else ""
        return int(tail) if tail.isdigit() else None

    def multi_run(self) -> bool:
        """One multi-run operation the store offers; False when it offers none."""
        rng = self.rng
        choices = [
            name
            for name in ("list_runs", "claim_next", "heartbeat_many", "purge_settled")
            if self.offers(name)
        ]
        if not choices:
            return False
        method = rng.choice(choices)
        if method == "list_runs":
            self.list_pages()
        elif method == "claim_next":
            row = self.call("claim_next", self.me, self.now())
            if isinstance(row, RunRow) and (n := self.number(row.run_id)) is not None:
                self.mine.add(n)
                self.claims.pop(row.run_id, None)
        elif method == "heartbeat_many":
            self.heartbeat_many()
        elif rng.random() < 0.3:
            self.call("purge_settled", self.clock.now_ms() - 20_000)
        return True

    def list_pages(self) -> None:
        """Up to three pages of one random query, each page's cursor the next's."""
        rng = self.rng
        now = self.now()
        query: dict[str, Any] = rng.choice(
            (
                {},
                {"status": rng.choice(("pending", "running", "suspended", "completed"))},
                {"status": ("pending", "suspended")},
                {"claimable_at": now},
                {"stale_at": now},
                {"claim_stale_at": now},
                {"cancel_requested": rng.choice((True, False))},
                {"lineage_id": self.run_id(self.frontier - self.frontier % ROUNDS_PER_LINEAGE)},
                {"parent_run_id": self.run_id(self.frontier - self.frontier % ROUNDS_PER_LINEAGE)},
            )
        )
        limit = rng.choice((1, 2, 3, 100))
        with_state = rng.random() < 0.3
        after = None
        for _ in range(3):
            page = self.call("list_runs", **query, limit=limit, after=after, with_state=with_state)
            if not isinstance(page, RunPage) or page.next is None:
                return
            after = page.next

    def heartbeat_many(self) -> None:
        ids = [self.run_id(n) for n in sorted(self.mine)]
        if not ids or self.rng.random() < 0.2:
            ids.append(self.run_id(self.rng.choice(self.live_window())))
        self.call("heartbeat_many", self.me, sorted(set(ids)), self.now())

    def live_window(self) -> list[int]:
        """The first ``window`` run numbers from the frontier not known settled."""
        numbers: list[int] = []
        n = self.frontier
        while len(numbers) < self.window:
            if n not in self.settled:
                numbers.append(n)
            n += 1
        return numbers

    def create(self, n: int) -> None:
        run_id = self.run_id(n)
        ordinal = n % ROUNDS_PER_LINEAGE if self.lineages else 0
        root = self.run_id(n - ordinal)
        if ordinal == 0:
            self.call("create", run_id, self.state_json())
        elif ordinal == 1:
            self.call(
                "create",
                run_id,
                self.state_json(),
                parent_run_id=root,
                lineage_id=root,
                round_ordinal=ordinal,
            )
        else:
            self.call("create", run_id, self.state_json(), lineage_id=root, round_ordinal=ordinal)

    def claimable(self, run_id: str, row: RunRow) -> None:
        now = self.now()
        if self.rng.random() < 0.5:
            outcome = self.call("claim", run_id, row.snapshot, self.me, now)
            if isinstance(outcome, Claimed):
                self.claims[run_id] = row
                if self.rng.random() < 0.7:
                    self.call("activate", run_id, self.me, outcome.claimed_at_ms, row.snapshot)
        else:
            self.call("claim_and_own", run_id, row.snapshot, self.me, now)

    def claimed(self, run_id: str, row: RunRow) -> None:
        token = row.claimed_at_ms
        if token is None:
            return
        remembered = self.claims.get(run_id)
        expected = remembered.snapshot if remembered is not None else row.snapshot
        if self.rng.random() < 0.75:
            self.call("activate", run_id, self.me, token, expected)
        else:
            self.call("abandon_claim", run_id, self.me, token)

    def claimed_by_other(self, run_id: str, row: RunRow) -> None:
        claimant, token = row.claim, row.claimed_at_ms
        if claimant is None or token is None:
            return
        now = self.now()
        if token < now - HEARTBEAT_STALE_AFTER_MS and self.rng.random() < 0.7:
            evidence = self.evidence(claimant, now)
            self.call("recover_claim", run_id, claimant, token, self.me, now, evidence)
        elif self.rng.random() < 0.5:
            self.call("claim", run_id, row.snapshot, self.me, now)

    def owned(self, run_id: str, row: RunRow) -> None:
        rng = self.rng
        roll = rng.random()
        if roll < 0.3:
            self.call("heartbeat", run_id, self.me, self.now())
        elif roll < 0.4:
            self.call("reconfirm", run_id, self.me, self.now())
        elif roll < 0.47 and row.cancel_requested_at_ms is not None:
            self.call("acknowledge_cancel", run_id, self.me, self.now())
        elif roll < 0.57 or not self.settle:
            state = self.state_json() if rng.random() < 0.7 else None
            self.call("transition_owned", run_id, self.me, "running", state)
        else:
            # Suspending makes the run claimable again: more claim races.
            to = "suspended" if rng.random() < 0.5 else rng.choice(_SETTLED)
            guard = rng.choice((None, None, TransitionGuard("absent"), TransitionGuard("present")))
            state = self.state_json() if rng.random() < 0.5 else None
            self.call("transition_owned", run_id, self.me, to, state, guard)

    def owned_by_other(self, run_id: str, row: RunRow) -> None:
        owner, heartbeat = row.owner, row.heartbeat_at_ms
        if owner is None:
            return
        now = self.now()
        stale = heartbeat is None or heartbeat < now - HEARTBEAT_STALE_AFTER_MS
        roll = self.rng.random()
        if stale and roll < 0.45:
            evidence = self.evidence(owner, now)
            outcome = self.call("steal", run_id, row.snapshot, self.me, now, evidence)
            if isinstance(outcome, Claimed):
                self.claims[run_id] = row
                self.call("activate", run_id, self.me, outcome.claimed_at_ms, row.snapshot)
        elif stale and roll < 0.9:
            evidence = self.evidence(owner, now)
            self.call("claim_and_own", run_id, row.snapshot, self.me, now, evidence)
        elif roll < 0.1:
            # A fresh owner: evidence cannot beat its heartbeat.
            self.call("claim_and_own", run_id, row.snapshot, self.me, now)
        elif roll < 0.15:
            self.call("request_cancel", run_id, now)
