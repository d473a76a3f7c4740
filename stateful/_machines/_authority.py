"""The strategy is authoritative: a double that disagrees with the row on purpose.

``Disagreeing`` wraps any strategy. Armed, it answers one call the opposite
way from the lease without telling the strategy it wraps: a refusal (a claim,
steal or recovery ``Rejected``, an activation or renewal ``Lost``, a guard that
raises ``FenceLostError``) where the lease would have granted, or a forged
yes (a renewal ``Renewed``, a guard that passes) where it would have refused.

``StrategyAuthority`` is a ``RunStoreComparison`` over a store built on such a
double. Its extra rule arms the double for one operation built to succeed
and checks the store's answer against the loss the row implies (contract.md,
Decided here 3): a refused grant reports the row-classified loss and changes
nothing; a refused activation answers ``ClaimLost`` and clears the row's claim
(after which the two sides are rebuilt from scratch, since the double left
lease and row apart by design); a refused recovery answers ``ClaimChanged``; a
refused renewal or guard answers ``FenceLost``; a forged yes for someone who
does not own the run changes nothing and answers as the reference does.
"""

from __future__ import annotations

import copy
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from hypothesis import strategies as st
from hypothesis.stateful import rule

from runstore._clock import ManualClock
from runstore._constants import HEARTBEAT_STALE_AFTER_MS
from runstore._outcomes import (
    Abandoned,
    Activated,
    AlreadyClaimed,
    ClaimChanged,
    Claimed,
    ClaimLost,
    FenceLost,
    HeartbeatFresh,
    NotFound,
    Recovered,
    SnapshotChanged,
    Transitioned,
    Updated,
)
from runstore._values import RunRow
from runstore.consensus._types import FenceLostError, Lost, Rejected, Renewed
from runstore.model import ModelRunStore

from .._base._capabilities import Capabilities
from .._base._compare import OutcomeMismatch, StateMismatch
from .._base._domain import PROCESS_COUNT, World
from .._base._observe import say
from .._base._steps import Call, Step, perform
from .._checks._faults import faulted_call
from .._targets._builtin import sqlite_raw_write_state
from ._run_store import RunStoreComparison

_SUCCESSES = (Claimed, Activated, Recovered, Updated, Transitioned, Abandoned)

#: The operations the authority rule builds, and the strategy calls to refuse.
REFUSALS: dict[str, frozenset[str]] = {
    "claim": frozenset({"claim"}),
    "claim_and_own": frozenset({"claim", "steal"}),
    "claim_and_own-activate": frozenset({"activate"}),
    "steal": frozenset({"steal"}),
    "activate": frozenset({"activate"}),
    "recover_claim": frozenset({"recover"}),
    "heartbeat": frozenset({"heartbeat"}),
    "reconfirm": frozenset({"reconfirm"}),
    "transition-running": frozenset({"guard"}),
    "transition-suspended": frozenset({"guard"}),
    "transition-completed": frozenset({"guard"}),
}
FORGERIES = ("heartbeat", "reconfirm", "transition-running", "transition-completed")


class Disagreeing:
    """Wraps a strategy; when armed, answers the armed calls against the lease.

    ``Disagreeing(inner)`` wraps the strategy ``inner`` and passes every call to it until
    ``arm`` names calls to refuse (the strategy says no where the row would have said yes) or
    to forge (it says yes where it would have said no). ``StrategyAuthority`` uses it to check
    that a store treats its strategy as authoritative, as upstream does; the double breaks
    lease/row agreement on purpose.
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        """The wrapped strategy."""
        self.refuse: frozenset[str] = frozenset()
        """The strategy calls refused while armed."""
        self.forge: frozenset[str] = frozenset()
        """The strategy calls forged while armed."""
        self.fired: list[str] = []
        """The calls refused or forged since ``arm``."""

    def arm(
        self, *, refuse: frozenset[str] = frozenset(), forge: frozenset[str] = frozenset()
    ) -> None:
        """From now on refuse each strategy call named in ``refuse`` (a claim or steal is
        ``Rejected``, an activation or renewal ``Lost``, a recovery
        ``Rejected("claim_changed")``, a guard raises ``FenceLostError``) and forge each named
        in ``forge`` (a lost renewal answers ``Renewed``, a failed guard passes). Clears
        ``fired``."""
        self.refuse, self.forge, self.fired = refuse, forge, []

    def disarm(self) -> list[str]:
        """Stop refusing and forging; return the names of the calls that were refused or forged
        while armed."""
        fired, self.refuse, self.forge, self.fired = self.fired, frozenset(), frozenset(), []
        return fired

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def _refused(self, name: str) -> bool:
        if name in self.refuse:
            self.fired.append(name)
            return True
        return False

    def claim(self, tx: Any, run_id: str, claimant: Any, now_ms: int) -> Any:
        """``claim`` of ``run_id`` for ``claimant`` at ``now_ms`` in ``tx``:
        ``Rejected("owner_held")`` when armed to refuse it. Unarmed, it passes the call to the
        wrapped strategy."""
        if self._refused("claim"):
            return Rejected("owner_held")
        return self.inner.claim(tx, run_id, claimant, now_ms)

    def steal(self, tx: Any, run_id: str, claimant: Any, now_ms: int, evidence: Any) -> Any:
        """``steal`` of ``run_id`` for ``claimant`` at ``now_ms`` on ``evidence`` in ``tx``:
        ``Rejected("owner_live")`` when armed to refuse it. Unarmed, it passes the call to the
        wrapped strategy."""
        if self._refused("steal"):
            return Rejected("owner_live")
        return self.inner.steal(tx, run_id, claimant, now_ms, evidence)

    def activate(self, tx: Any, run_id: str, owner: Any, granted_at_ms: int, now_ms: int) -> Any:
        """``activate`` of ``owner``'s grant ``granted_at_ms`` on ``run_id`` at ``now_ms`` in
        ``tx``: ``Lost()`` when armed to refuse it. Unarmed, it passes the call to the wrapped
        strategy."""
        if self._refused("activate"):
            return Lost()
        return self.inner.activate(tx, run_id, owner, granted_at_ms, now_ms)

    def _renew(self, name: str, tx: Any, run_id: str, owner: Any, now_ms: int) -> Any:
        if self._refused(name):
            return Lost()
        answer = getattr(self.inner, name)(tx, run_id, owner, now_ms)
        if name in self.forge and isinstance(answer, Lost):
            self.fired.append(name)
            return Renewed(now_ms)
        return answer

    def heartbeat(self, tx: Any, run_id: str, owner: Any, now_ms: int) -> Any:
        """``heartbeat`` of ``owner`` on ``run_id`` at ``now_ms`` in ``tx``: ``Lost()`` when
        armed to refuse it, ``Renewed(now_ms)`` for a lost one when armed to forge it.
        Unarmed, it passes the call to the wrapped strategy."""
        return self._renew("heartbeat", tx, run_id, owner, now_ms)

    def reconfirm(self, tx: Any, run_id: str, owner: Any, now_ms: int) -> Any:
        """``reconfirm`` of ``owner`` on ``run_id`` at ``now_ms`` in ``tx``: ``Lost()`` when
        armed to refuse it, ``Renewed(now_ms)`` for a lost one when armed to forge it.
        Unarmed, it passes the call to the wrapped strategy."""
        return self._renew("reconfirm", tx, run_id, owner, now_ms)

    def recover(self, tx: Any, run_id: str, *args: Any) -> Any:
        """``recover`` of a claim on ``run_id`` in ``tx``, ``args`` being the rest of
        ``Consensus.recover``'s arguments: ``Rejected("claim_changed")`` when armed to refuse
        it. Unarmed, it passes the call to the wrapped strategy."""
        if self._refused("recover"):
            return Rejected("claim_changed")
        return self.inner.recover(tx, run_id, *args)

    def release_claim(self, tx: Any, run_id: str, claimant: Any, granted_at_ms: int) -> None:
        """Passes ``release_claim`` of ``claimant``'s grant ``granted_at_ms`` on ``run_id`` in
        ``tx`` to the wrapped strategy (never armed)."""
        self.inner.release_claim(tx, run_id, claimant, granted_at_ms)

    def release_ownership(self, tx: Any, run_id: str, owner: Any) -> None:
        """Passes ``release_ownership`` of ``owner`` on ``run_id`` in ``tx`` to the wrapped
        strategy (never armed)."""
        self.inner.release_ownership(tx, run_id, owner)

    def guard(self, tx: Any, run_id: str, owner: Any) -> None:
        """``guard`` of ``owner`` on ``run_id`` in ``tx``: raises ``FenceLostError`` when armed
        to refuse it, passes a failing guard when armed to forge it. Unarmed, it passes the
        call to the wrapped strategy."""
        if self._refused("guard"):
            raise FenceLostError(run_id)
        try:
            self.inner.guard(tx, run_id, owner)
        except FenceLostError:
            if "guard" not in self.forge:
                raise
            self.fired.append("guard")

    def lease(self, tx: Any, run_id: str) -> Any:
        """The wrapped strategy's lease of ``run_id`` in ``tx``."""
        return self.inner.lease(tx, run_id)


def row_classified_loss(row: RunRow | None, now_ms: int) -> object:
    """The loss a claim-like operation reports from the row alone (§4.0)."""
    if row is None:
        return NotFound()
    if row.claim is not None:
        return AlreadyClaimed()
    if (
        row.status == "running"
        and row.heartbeat_at_ms is not None
        and row.heartbeat_at_ms >= now_ms - HEARTBEAT_STALE_AFTER_MS
    ):
        return HeartbeatFresh()
    return SnapshotChanged()


def refusal_outcome(op: Call, row: RunRow | None) -> object:
    """What a store must answer when its strategy refused ``op``'s grant."""
    method = op.method
    if method in ("claim", "steal", "claim_and_own"):
        return row_classified_loss(row, op.get("now_ms"))
    if method == "activate":
        return ClaimLost()
    if method == "recover_claim":
        return ClaimChanged()
    return NotFound() if row is None else FenceLost()


AuthorityFactory = Callable[[ManualClock, Path, Any], Any]


class StrategyAuthority(RunStoreComparison):
    """``RunStoreComparison`` over a store whose strategy is a ``Disagreeing`` double.

    Besides every rule of ``RunStoreComparison``, ``disagree`` arms the double for one
    operation built to succeed: a refused grant must be reported as the loss the row
    classifies (as upstream), a refused activation must clear the row's claim, and a forged
    renewal or guard must not let a stranger write more than the reference allows. Build one
    with ``authority_for``.
    """

    authority_factory: ClassVar[AuthorityFactory | None] = None
    """Builds the store under test over the double: ``factory(clock, path, consensus)``."""
    capabilities: ClassVar[Capabilities] = Capabilities(reopen=False)
    """No reopening (the double lives in memory); everything else a full store has."""

    @staticmethod
    def store_factory(clock: ManualClock, path: Path) -> Any:  # type: ignore[override]
        """Not used: ``authority_factory`` builds the store over the double. Calling it (with a
        ``clock`` and a ``path``) raises ``NotImplementedError``."""
        raise NotImplementedError  # replaced by _open_store below

    def _open_store(self) -> Any:
        factory = type(self).authority_factory
        assert factory is not None
        from runstore.consensus import SqlConsensus

        self.double = Disagreeing(SqlConsensus())
        return factory(self.clock, self.path, self.double)

    def _rebuild(self) -> None:
        """Start both sides over (the double left lease and row apart by design)."""
        say("both sides start over")
        self.store.close()
        shutil.rmtree(self.tmp, ignore_errors=True)
        self.tmp = Path(tempfile.mkdtemp(prefix="runstore-stateful-"))
        self.path = self.tmp / "store.db"
        self.model = ModelRunStore(clock=self.clock)
        self.store = self._open_store()
        self.world = World(self.clock, offsets=self.world.offsets)
        self.aliases = {}
        self.model_state = self._model_view()
        self.store_state = self._store_view()
        self.world.observe(self.model_state)
        for run_id in ("a", "b", "lin"):
            self._do(Call("create", (("run_id", run_id), ("state_json", "{}"))))

    @rule(
        operation=st.sampled_from(tuple(REFUSALS)),
        forge=st.booleans(),
        stranger=st.sampled_from(tuple(range(PROCESS_COUNT))),
    )
    def disagree(self, operation: str, forge: bool, stranger: int) -> None:
        """Arm the double for ``operation`` (one of the operations the rule builds, made so that
        it would succeed) and check the store treats the strategy as authoritative; with
        ``forge`` (for the operations that can be forged), the call is made by the process
        ``stranger`` and the double forges the renewal or guard instead."""
        name = operation.removesuffix("-activate")
        op = faulted_call(name, self.world, self.clock.now_ms())
        if forge and operation in FORGERIES:
            op = _as(op, self.world.process(stranger))
            self.double.arm(forge=REFUSALS[operation])
        else:
            forge = False
            self.double.arm(refuse=REFUSALS[operation])
        run_id = op.get("run_id")
        before_row = self.world.row(run_id) if isinstance(run_id, str) else None
        scratch = copy.copy(self.model)
        would = perform(scratch, op)
        store_out = perform(self.store, op)
        fired = self.double.disarm()
        say(f"double armed for {operation} ({'forge' if forge else 'refuse'}), fired {fired}")
        if not fired or forge or not isinstance(would, _SUCCESSES):
            # The double changed nothing the reference would not have answered.
            self.model = scratch
            self._settle(Step(op, would), Step(op, store_out))
            return
        expected = refusal_outcome(op, before_row)
        if store_out != expected:
            raise OutcomeMismatch(
                f"{op.describe()} with the strategy refusing {fired}: expected {expected!r}, "
                f"store answered {store_out!r}"
            )
        if op.method == "activate":
            after = self._store_view()
            rows = {r.run_id: r for r in after.rows}
            cleared = rows.get(run_id)
            if (
                cleared is None
                or cleared.claim is not None
                or cleared.owner != (before_row.owner if before_row is not None else None)
            ):
                raise StateMismatch(f"a refused activation must clear the row's claim: {cleared!r}")
            self._rebuild()
            return
        self._settle(Step(op, expected), Step(op, store_out))


def _as(op: Call, who: Any) -> Call:
    """``op`` made by ``who`` instead of its owner."""
    return Call(
        op.method,
        tuple((k, who if k == "owner" else v) for k, v in op.arguments),
        op.keywords,
    )


def sqlite_authority_factory(clock: ManualClock, path: Path, consensus: Any) -> Any:
    """The SQLite adapter in memory over ``consensus`` (the double)."""
    import runstore

    return runstore.open(":memory:", clock=clock, consensus=consensus)


def authority_for(
    factory: AuthorityFactory = sqlite_authority_factory, *, name: str = "authority"
) -> type[StrategyAuthority]:
    """A ``StrategyAuthority`` subclass named ``name`` for stores that accept a strategy:
    ``factory(clock, path, consensus)`` builds one over the double (an in-memory SQLite store
    by default)."""
    namespace: dict[str, Any] = {
        "authority_factory": staticmethod(factory),
        "target": name,
        "raw_writer": staticmethod(sqlite_raw_write_state),
    }
    return type(f"StrategyAuthority_{name}", (StrategyAuthority,), namespace)
