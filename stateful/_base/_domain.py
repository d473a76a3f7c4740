"""The small world the machines play in, and how abstract choices become arguments.

Domains are kept small so that collisions are common: three hosts with two
pids each (six processes; a restart gives a process a new nonce), five run ids
(two plain runs, a lineage root with a second round, and a child forked from
``a``), and times aimed at the edges of the lease rules.

Rules draw *selectors* (short strings such as ``"owner"``, ``"hb+1"`` or
``"stale"``) rather than raw values. A ``World`` resolves each selector against
the current state of the reference model, so the printed program reads as
intent ("claim a as process 2 with the current snapshot at the staleness
edge"), shrinks well, and compare-and-swap arguments drawn from the current
row actually succeed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

import attrs

from runstore._clock import ManualClock
from runstore._constants import HEARTBEAT_SKEW_ALLOWANCE_MS, HEARTBEAT_STALE_AFTER_MS
from runstore._values import (
    EvidenceKind,
    LivenessEvidence,
    OwnerId,
    RunRow,
    RunSnapshot,
    StoreState,
)

#: The store clock starts here, so owners running behind stay non-negative.
START_MS: Final = 100_000

HOSTS: Final = ("h1", "h2", "h3")
PIDS: Final = (1, 2)
PROCESS_COUNT: Final = len(HOSTS) * len(PIDS)

#: Run ids and the options ``create`` gives them in the plain variant.
RUN_IDS: Final = ("a", "b", "lin", "lin-2", "fork")
RUN_OPTIONS: Final[Mapping[str, Mapping[str, Any]]] = {
    "a": {},
    "b": {},
    "lin": {},
    "lin-2": {"lineage_id": "lin", "round_ordinal": 2},
    "fork": {"parent_run_id": "a"},
}

STATE_TEXTS: Final = (
    '{"n":0}',
    '{"step":2,"pageToken":"tok-123"}',
    "[]",
    '"x"',
    '{"a":{"b":[1,2.5,null,true]}}',
    '{"nul":"\\u0000","astral":"\U0001d11e"}',
)

#: Per-process offsets of an owner's clock from the store clock: within the
#: skew allowance, exactly on it, one beyond it (always refused), and behind.
OFFSETS: Final = (0, 1, -1, 5000, 9999, 10000, 10001, -15000, -31000)

# Selector tuples repeat the choices that make a compare-and-swap succeed, so
# that most steps move the state on and the rarer ones probe its edges.
ACTORS: Final = ("owner", "owner", "owner", "claimant", 0, 1, 2, 3, 4, 5, "ghost")
CLAIMANTS: Final = ("claimant", "claimant", "claimant", "owner", 0, 1, 2, 3, 4, 5, "ghost")
CLAIMERS: Final = (0, 1, 2, 3, 4, 5, "ghost", "owner", "claimant")
TIMES: Final = (
    "reading",
    "reading",
    "hb+1",
    "hb+1",
    "hb",
    "hb-1",
    "claim+1",
    "claim",
    "claim-1",
    "skew",
    "skew+1",
    "skew-1",
    "behind",
)
RECOVER_TIMES: Final = ("claim+1", "claim+1", "claim", "claim-1", "reading", "skew", "skew+1")
RENEW_TIMES: Final = ("reading", "reading", "reading", "behind", "skew", "skew+1", "skew-1")
EXPECTED: Final = ("row", "row", "row", "as-row", "stale", "pending", "malformed")
TOKENS: Final = ("claim", "claim", "claim", "claim-1", "claim+1", "old")
EVIDENCE: Final = (
    "fit",
    "fit",
    "fit",
    "lease-expired",
    "none",
    "same-host-pid-dead",
    "cross-host-unreachable-stale",
    "fit-1",
    "fit+1",
    "wrong-owner",
)
TO_STATUSES: Final = (
    "running",
    "suspended",
    "completed",
    "suspended",
    "failed",
    "cancelled",
    "pending",
)
GUARDS: Final = (None, None, None, "absent", "present", "bogus")
ADVANCES: Final = (1000, 1, 999, 5000, 9999, 10000, 10001, 29999, 30000, 30001)
#: Run selectors: a run in a given condition (the first in ``RUN_IDS`` order,
#: or ``"a"`` when there is none), or a run id.
CLAIMABLE_RUNS: Final = ("claimable", "claimable", *RUN_IDS, "running")
RUNNING_RUNS: Final = ("running", "running", *RUN_IDS)
CLAIMED_RUNS: Final = ("claimed", "claimed", *RUN_IDS)
EDGE_DELTAS: Final = (1, 0, -1)


def fresh(text: str) -> str:
    """A string equal to ``text`` that is a new object, not the interned
    literal: a store that compares host ids or statuses with ``is`` passes
    every program that only ever hands it literals."""
    return "".join(list(text))


def process_host(index: int) -> str:
    return fresh(HOSTS[index // len(PIDS)])


def process_pid(index: int) -> int:
    return PIDS[index % len(PIDS)]


@attrs.define
class World:
    """The processes, their clocks and what the machine has seen so far."""

    clock: ManualClock
    offsets: tuple[int, ...] = (0,) * PROCESS_COUNT
    incarnations: list[int] = attrs.field(factory=lambda: [0] * PROCESS_COUNT)
    restarts: int = 0
    ghosts: list[OwnerId] = attrs.field(factory=list)
    snapshots: dict[str, list[RunSnapshot]] = attrs.field(factory=dict)
    grants: dict[str, list[tuple[OwnerId, int]]] = attrs.field(factory=dict)
    rows: Mapping[str, RunRow] = attrs.field(factory=dict)
    run_ids: tuple[str, ...] = RUN_IDS

    # -- processes -------------------------------------------------------------

    def process(self, index: int) -> OwnerId:
        """The current incarnation of process ``index``."""
        return OwnerId(process_host(index), process_pid(index), f"n{self.incarnations[index]}")

    def restart(self, index: int) -> OwnerId:
        """Crash process ``index`` and start it again with a new nonce."""
        self.ghosts.append(self.process(index))
        self.restarts += 1
        self.incarnations[index] = self.restarts
        return self.process(index)

    def process_of(self, owner: OwnerId) -> int | None:
        for index in range(PROCESS_COUNT):
            if (process_host(index), process_pid(index)) == (owner.host_id, owner.pid):
                return index
        return None

    def is_alive(self, owner: OwnerId) -> bool:
        index = self.process_of(owner)
        return index is not None and self.process(index) == owner

    # -- observation -------------------------------------------------------------

    def observe(self, state: StoreState) -> None:
        """Remember the model's rows, and every snapshot and grant seen."""
        self.rows = {row.run_id: row for row in state.rows}
        for row in state.rows:
            seen = self.snapshots.setdefault(row.run_id, [])
            snapshot = row.snapshot
            if not seen or seen[-1] != snapshot:
                seen.append(snapshot)
                del seen[:-8]
            if row.claim is not None and row.claimed_at_ms is not None:
                grants = self.grants.setdefault(row.run_id, [])
                grant = (row.claim, row.claimed_at_ms)
                if grant not in grants:
                    grants.append(grant)
                    del grants[:-8]

    def row(self, run_id: str) -> RunRow | None:
        return self.rows.get(run_id)

    def run(self, selector: str) -> str:
        """A run id: ``"running"``, ``"claimed"`` or ``"claimable"`` name the
        first run in that condition (``"a"`` when none is); anything else is
        a run id."""
        tests: dict[str, Callable[[RunRow], bool]] = {
            "running": lambda row: row.status == "running",
            "claimed": lambda row: row.claim is not None,
            "claimable": lambda row: row.status in ("pending", "suspended") and row.claim is None,
        }
        test = tests.get(selector)
        if test is None:
            return selector
        for run_id in self.run_ids:
            row = self.rows.get(run_id)
            if row is not None and test(row):
                return run_id
        return self.run_ids[0]

    # -- selectors -----------------------------------------------------------------

    def actor(self, selector: object, run_id: str) -> OwnerId:
        """``"owner"``/``"claimant"`` of the run (a live process when absent),
        a process index, or ``"ghost"`` (a crashed incarnation)."""
        row = self.row(run_id)
        if selector == "owner":
            if row is not None and row.owner is not None:
                return row.owner
            return self.process(0)
        if selector == "claimant":
            if row is not None and row.claim is not None:
                return row.claim
            return self.process(1)
        if selector == "ghost":
            if self.ghosts:
                return self.ghosts[-1]
            return OwnerId(fresh(HOSTS[0]), PIDS[0], "n-ghost")
        assert isinstance(selector, int)
        return self.process(selector)

    def reading(self, owner: OwnerId) -> int:
        """``owner``'s clock: the store clock plus its process's offset."""
        return self.clock.now_ms() + self.offset(owner)

    def offset(self, owner: OwnerId) -> int:
        index = self.process_of(owner)
        return 0 if index is None else self.offsets[index]

    def time(self, selector: str, run_id: str, owner: OwnerId) -> int:
        """A ``now_ms`` aimed at an edge (may be negative or too far ahead:
        both are refused by admission, on every side alike).

        For the staleness edges (``hb``/``claim`` and a delta) the caller
        moves the store clock so that ``owner``'s own reading lands there."""
        row = self.row(run_id)
        now = self.clock.now_ms()
        if selector.startswith("hb") and row is not None and row.heartbeat_at_ms is not None:
            return row.heartbeat_at_ms + HEARTBEAT_STALE_AFTER_MS + _delta(selector, "hb")
        if selector.startswith("claim") and row is not None and row.claimed_at_ms is not None:
            return row.claimed_at_ms + HEARTBEAT_STALE_AFTER_MS + _delta(selector, "claim")
        if selector.startswith("skew"):
            return now + HEARTBEAT_SKEW_ALLOWANCE_MS + _delta(selector, "skew")
        if selector == "behind":
            return max(0, now - 20_000)
        return self.reading(owner)

    def expected(self, selector: str, run_id: str) -> RunSnapshot | RunRow:
        row = self.row(run_id)
        pending = RunSnapshot("pending", None, None)
        if selector == "malformed":
            # Running without an owner: refused by admission.
            return RunSnapshot("running", None, None)
        if selector == "pending" or row is None:
            return pending
        if selector == "as-row":
            return row
        if selector == "stale":
            older = [s for s in self.snapshots.get(run_id, []) if s != row.snapshot]
            return older[-1] if older else row.snapshot
        return row.snapshot

    def token(self, selector: str, run_id: str) -> int:
        row = self.row(run_id)
        current = None if row is None else row.claimed_at_ms
        if selector == "old":
            older = [t for (_, t) in self.grants.get(run_id, []) if t != current]
            if older:
                return older[-1]
            selector = "claim-1"
        base = self.clock.now_ms() if current is None else current
        if selector == "claim-1":
            return max(0, base - 1)
        if selector == "claim+1":
            return base + 1
        return base

    def evidence(
        self, selector: str, about: OwnerId | None, observer: OwnerId, now_ms: int
    ) -> LivenessEvidence | None:
        """Evidence about ``about`` as ``observer`` would produce it at ``now_ms``.

        ``"fit"`` picks the kind a real observer could give: a same-host
        observer of a crashed owner says ``same-host-pid-dead``, another host
        ``cross-host-unreachable-stale``, and a same-host observer of a live
        process can only say ``lease-expired``.
        """
        if selector == "none":
            return None
        subject = about if about is not None else self.process(0)
        checked = now_ms
        kind: EvidenceKind
        if selector in ("same-host-pid-dead", "cross-host-unreachable-stale", "lease-expired"):
            kind = selector  # type: ignore[assignment]
        else:
            same_host = subject.host_id == observer.host_id
            if not same_host:
                kind = "cross-host-unreachable-stale"
            elif not self.is_alive(subject):
                kind = "same-host-pid-dead"
            else:
                kind = "lease-expired"
            if selector == "fit-1":
                checked = now_ms - 1
            elif selector == "fit+1":
                checked = now_ms + 1
            elif selector == "wrong-owner":
                subject = OwnerId(subject.host_id, subject.pid, subject.nonce + "-other")
        return LivenessEvidence(subject, checked, kind)


def _delta(selector: str, prefix: str) -> int:
    rest = selector[len(prefix) :]
    return int(rest) if rest else 0
