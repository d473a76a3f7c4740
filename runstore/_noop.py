"""``NoopRunStore``: a stand-in store for testing code that uses a store.

Direct operations (``create``, ``get``, ``lineage``, ``latest_round``,
``request_cancel_lineage``, ``list_runs``, ``purge_settled``, ``purge_candidates``,
``compact_changes``) raise ``persistence_failed``; compare-and-swap
operations answer their typed loss (``NotFound``, or ``ClaimLost`` for
``activate`` and ``abandon_claim``; ``heartbeat_many`` answers ``NotFound``
for each run id, ``claim_next`` None: there is nothing to take);
``acknowledge_cancel`` answers False. Any
operation can be replaced by passing a callable under its name. Arguments are
not admitted: this is a test double, not a store.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any, Self

from ._errors import PersistenceFailedError
from ._outcomes import (
    AbandonClaimOutcome,
    ActivateOutcome,
    ClaimAndOwnOutcome,
    ClaimLost,
    ClaimOutcome,
    HeartbeatOutcome,
    NotFound,
    RecoverClaimOutcome,
    RequestCancelOutcome,
    StealOutcome,
    TransitionOutcome,
)
from ._values import OwnershipFact, RunChange, RunPage, RunRow, StoreState

_OPERATIONS = frozenset(
    {
        "create",
        "get",
        "lineage",
        "latest_round",
        "request_cancel",
        "request_cancel_lineage",
        "acknowledge_cancel",
        "claim",
        "claim_and_own",
        "activate",
        "abandon_claim",
        "recover_claim",
        "heartbeat",
        "reconfirm",
        "transition_owned",
        "steal",
        "list_runs",
        "claim_next",
        "heartbeat_many",
        "purge_settled",
        "purge_candidates",
        "compact_changes",
        "ownership_facts",
        "revision",
        "changes",
        "state",
        "check_invariants",
        "close",
    }
)


def _unavailable(method: str) -> PersistenceFailedError:
    return PersistenceFailedError(
        method, "no run store in this environment", {"category": "persistence_failed"}
    )


class NoopRunStore:
    """A store that stores nothing; see the module docstring."""

    def __init__(self, **overrides: Callable[..., Any]) -> None:
        unknown = set(overrides) - _OPERATIONS
        if unknown:
            raise TypeError(f"NoopRunStore has no operations named {sorted(unknown)}")
        for name, fn in overrides.items():
            if not callable(fn):
                raise TypeError(f"the override for {name} must be callable")
            setattr(self, name, fn)

    def create(self, run_id: str, state_json: str, **_options: Any) -> None:
        raise _unavailable("create")

    def get(self, run_id: str) -> RunRow:
        raise _unavailable("get")

    def lineage(self, run_id: str) -> list[RunRow]:
        raise _unavailable("lineage")

    def latest_round(self, run_id: str) -> RunRow:
        raise _unavailable("latest_round")

    def request_cancel(self, run_id: str, now_ms: int) -> RequestCancelOutcome:
        return NotFound()

    def request_cancel_lineage(self, run_id: str, now_ms: int) -> RequestCancelOutcome:
        raise _unavailable("request_cancel_lineage")

    def acknowledge_cancel(self, *_args: Any) -> bool:
        return False

    def claim(self, *_args: Any) -> ClaimOutcome:
        return NotFound()

    def claim_and_own(self, *_args: Any, **_kwargs: Any) -> ClaimAndOwnOutcome:
        return NotFound()

    def activate(self, *_args: Any) -> ActivateOutcome:
        return ClaimLost()

    def abandon_claim(self, *_args: Any) -> AbandonClaimOutcome:
        return ClaimLost()

    def recover_claim(self, *_args: Any) -> RecoverClaimOutcome:
        return NotFound()

    def heartbeat(self, *_args: Any) -> HeartbeatOutcome:
        return NotFound()

    def reconfirm(self, *_args: Any) -> HeartbeatOutcome:
        return NotFound()

    def transition_owned(self, *_args: Any, **_kwargs: Any) -> TransitionOutcome:
        return NotFound()

    def steal(self, *_args: Any) -> StealOutcome:
        return NotFound()

    def list_runs(self, **_filters: Any) -> RunPage:
        raise _unavailable("list_runs")

    def claim_next(self, *_args: Any, **_kwargs: Any) -> RunRow | None:
        return None

    def heartbeat_many(
        self, owner: Any, run_ids: Sequence[str], now_ms: Any
    ) -> dict[str, HeartbeatOutcome]:
        return {run_id: NotFound() for run_id in run_ids}

    def purge_settled(self, *_args: Any, **_kwargs: Any) -> int:
        raise _unavailable("purge_settled")

    def purge_candidates(self, *_args: Any, **_kwargs: Any) -> list[RunRow]:
        raise _unavailable("purge_candidates")

    def compact_changes(self, *_args: Any, **_kwargs: Any) -> int:
        raise _unavailable("compact_changes")

    def ownership_facts(self, run_id: str) -> list[OwnershipFact]:
        return []

    def revision(self) -> int:
        return 0

    def changes(self, after_revision: int) -> list[RunChange]:
        return []

    def state(self) -> StoreState:
        return StoreState(rows=(), leases=(), facts=(), revision=0, changes=())

    def check_invariants(self) -> None:
        return None

    def close(self) -> None:
        return None

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return "NoopRunStore()"
