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
    """A store that stores nothing: a test double for code that uses a store.

    ``NoopRunStore(**overrides)``: each of ``overrides`` replaces the
    operation of its name with the callable given (an unknown name or a value
    that is not callable raises ``TypeError``). Without an override, direct
    operations raise ``PersistenceFailedError`` and compare-and-swap
    operations answer their typed loss, as each method says. Arguments are not
    admitted.
    """

    def __init__(self, **overrides: Callable[..., Any]) -> None:
        unknown = set(overrides) - _OPERATIONS
        if unknown:
            raise TypeError(f"NoopRunStore has no operations named {sorted(unknown)}")
        for name, fn in overrides.items():
            if not callable(fn):
                raise TypeError(f"the override for {name} must be callable")
            setattr(self, name, fn)

    def create(self, run_id: str, state_json: str, **_options: Any) -> None:
        """Raise ``PersistenceFailedError`` (unless overridden): nothing is stored. ``run_id``,
        ``state_json`` and the keyword options are ignored."""
        raise _unavailable("create")

    def get(self, run_id: str) -> RunRow:
        """Raise ``PersistenceFailedError`` (unless overridden): there is no ``run_id`` to read."""
        raise _unavailable("get")

    def lineage(self, run_id: str) -> list[RunRow]:
        """Raise ``PersistenceFailedError`` (unless overridden): there is no lineage of ``run_id``
        to read."""
        raise _unavailable("lineage")

    def latest_round(self, run_id: str) -> RunRow:
        """Raise ``PersistenceFailedError`` (unless overridden): there is no round of ``run_id`` to
        read."""
        raise _unavailable("latest_round")

    def request_cancel(self, run_id: str, now_ms: int) -> RequestCancelOutcome:
        """Answer ``NotFound()`` (unless overridden): no run ``run_id`` exists to cancel at
        ``now_ms``."""
        return NotFound()

    def request_cancel_lineage(self, run_id: str, now_ms: int) -> RequestCancelOutcome:
        """Raise ``PersistenceFailedError`` (unless overridden): there is no lineage of ``run_id``
        to mark at ``now_ms``."""
        raise _unavailable("request_cancel_lineage")

    def acknowledge_cancel(self, *_args: Any) -> bool:
        """Answer False (unless overridden): there is no request to acknowledge. The arguments are
        ignored."""
        return False

    def claim(self, *_args: Any) -> ClaimOutcome:
        """Answer ``NotFound()`` (unless overridden): there is no run to claim. The arguments are
        ignored."""
        return NotFound()

    def claim_and_own(self, *_args: Any, **_kwargs: Any) -> ClaimAndOwnOutcome:
        """Answer ``NotFound()`` (unless overridden): there is no run to own. The arguments are
        ignored."""
        return NotFound()

    def activate(self, *_args: Any) -> ActivateOutcome:
        """Answer ``ClaimLost()`` (unless overridden): there is no claim to activate. The arguments
        are ignored."""
        return ClaimLost()

    def abandon_claim(self, *_args: Any) -> AbandonClaimOutcome:
        """Answer ``ClaimLost()`` (unless overridden): there is no claim to drop. The arguments are
        ignored."""
        return ClaimLost()

    def recover_claim(self, *_args: Any) -> RecoverClaimOutcome:
        """Answer ``NotFound()`` (unless overridden): there is no claim to recover. The arguments
        are ignored."""
        return NotFound()

    def heartbeat(self, *_args: Any) -> HeartbeatOutcome:
        """Answer ``NotFound()`` (unless overridden): there is no lease to renew. The arguments are
        ignored."""
        return NotFound()

    def reconfirm(self, *_args: Any) -> HeartbeatOutcome:
        """Answer ``NotFound()`` (unless overridden): there is no lease to reconfirm. The arguments
        are ignored."""
        return NotFound()

    def transition_owned(self, *_args: Any, **_kwargs: Any) -> TransitionOutcome:
        """Answer ``NotFound()`` (unless overridden): there is no run to move. The arguments are
        ignored."""
        return NotFound()

    def steal(self, *_args: Any) -> StealOutcome:
        """Answer ``NotFound()`` (unless overridden): there is no run to take. The arguments are
        ignored."""
        return NotFound()

    def list_runs(self, **_filters: Any) -> RunPage:
        """Raise ``PersistenceFailedError`` (unless overridden): there are no runs to list. The
        filters are ignored."""
        raise _unavailable("list_runs")

    def claim_next(self, *_args: Any, **_kwargs: Any) -> RunRow | None:
        """Answer None (unless overridden): there is nothing to take. The arguments are ignored."""
        return None

    def claim_next_many(self, *_args: Any, **_kwargs: Any) -> list[RunRow]:
        """Answer ``[]`` (unless overridden): there is nothing to take. The arguments are
        ignored."""
        return []

    def heartbeat_many(
        self, owner: Any, run_ids: Sequence[str], now_ms: Any
    ) -> dict[str, HeartbeatOutcome]:
        """Answer ``NotFound()`` for each of ``run_ids``, in order (unless overridden); ``owner``
        and ``now_ms`` are ignored."""
        return {run_id: NotFound() for run_id in run_ids}

    def purge_settled(self, *_args: Any, **_kwargs: Any) -> int:
        """Raise ``PersistenceFailedError`` (unless overridden): nothing is stored to purge."""
        raise _unavailable("purge_settled")

    def purge_candidates(self, *_args: Any, **_kwargs: Any) -> list[RunRow]:
        """Raise ``PersistenceFailedError`` (unless overridden): nothing is stored to list."""
        raise _unavailable("purge_candidates")

    def compact_changes(self, *_args: Any, **_kwargs: Any) -> int:
        """Raise ``PersistenceFailedError`` (unless overridden): there is no change feed."""
        raise _unavailable("compact_changes")

    def ownership_facts(self, run_id: str) -> list[OwnershipFact]:
        """Answer ``[]`` (unless overridden): ``run_id`` has no facts."""
        return []

    def revision(self) -> int:
        """Answer 0 (unless overridden): nothing was ever written."""
        return 0

    def changes(self, after_revision: int) -> list[RunChange]:
        """Answer ``[]`` (unless overridden): nothing changed after ``after_revision``."""
        return []

    def state(self) -> StoreState:
        """Answer an empty ``StoreState`` (unless overridden)."""
        return StoreState(rows=(), leases=(), facts=(), revision=0, changes=())

    def check_invariants(self) -> None:
        """Do nothing (unless overridden): an empty store breaks no invariant."""

    def close(self) -> None:
        """Do nothing (unless overridden); repeatable."""

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
