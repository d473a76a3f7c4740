"""``AsyncAttemptStore``: the attempt store's operations as coroutines.

Each lane of the ``AsyncRunStore`` gets its own ``AttemptStore`` over that
lane's synchronous store (the same options, admission and SQL); a call runs
on a lane's thread with the run store's cancellation rules.

May import: the core modules, the SQL store the backends share and
``runstore.attempts``.
"""

from __future__ import annotations

from typing import Any, Final, TypeVar

from .._sql._store import SqlRunStore
from .._values import OwnerId
from ..attempts._boundary import (
    DEFAULT_IN_PROGRESS_STATES,
    DEFAULT_MAX_CHECKPOINT_BYTES,
    DEFAULT_PUT_MODE,
)
from ..attempts._outcomes import (
    AttemptHeartbeatOutcome,
    FinishOutcome,
    PatchOutcome,
    PutOutcome,
)
from ..attempts._store import AttemptStore
from ..attempts._values import (
    ABSENT,
    Absent,
    Attempt,
    AttemptId,
    AttemptOptions,
    AttemptPatch,
    FinishAttempt,
    JsonValue,
    PutMode,
)
from ._lanes import Lane
from ._store import AsyncRunStore

T = TypeVar("T")

_WRITES: Final = frozenset({"put", "heartbeat", "finish", "patch"})


def _interrupt(lane: Lane[SqlRunStore]) -> None:
    lane.store.interrupt()


class AsyncAttemptStore:
    """Durable step attempts over an ``AsyncRunStore``'s database, as coroutines.

    ``store`` is the ``AsyncRunStore``; ``in_progress_states``,
    ``max_checkpoint_bytes`` and ``put_mode`` are ``AttemptStore``'s options,
    checked here (``TypeError`` for a store that is not async); ``put``,
    ``get``, ``heartbeat``, ``finish``, ``patch``, ``state`` and
    ``check_invariants`` are ``AttemptStore``'s, awaited, with the same
    outcomes and ``AttemptStoreError``s. A cancelled write follows the run
    store's rules (``AsyncRunStore``). Closing the run store ends it.
    """

    def __init__(
        self,
        store: AsyncRunStore,
        *,
        in_progress_states: tuple[str, ...] | list[str] = DEFAULT_IN_PROGRESS_STATES,
        max_checkpoint_bytes: int = DEFAULT_MAX_CHECKPOINT_BYTES,
        put_mode: PutMode = DEFAULT_PUT_MODE,
    ) -> None:
        if not isinstance(store, AsyncRunStore):
            raise TypeError("AsyncAttemptStore needs an AsyncRunStore (runstore.aopen)")
        self._store = store
        self._key = object()
        for lane in store._lanes.lanes:
            lane.companions[self._key] = AttemptStore(
                lane.store,
                in_progress_states=in_progress_states,
                max_checkpoint_bytes=max_checkpoint_bytes,
                put_mode=put_mode,
            )
        self._options: AttemptOptions = lane.companions[self._key].options

    @property
    def options(self) -> AttemptOptions:
        """The options as admitted (an ``AttemptOptions``)."""
        return self._options

    async def _op(self, method: str, *args: Any) -> Any:
        key = self._key

        def call(lane: Lane[SqlRunStore]) -> Any:
            return getattr(lane.companions[key], method)(*args)

        return await self._store._lanes.call(
            method, call, write=method in _WRITES, interrupt=_interrupt
        )

    async def put(self, attempt: Attempt, owner: OwnerId) -> PutOutcome:
        """``AttemptStore.put``, awaited: ``attempt``, ``owner`` as there."""
        outcome: PutOutcome = await self._op("put", attempt, owner)
        return outcome

    async def get(self, attempt_id: AttemptId | Attempt) -> Attempt | None:
        """``AttemptStore.get``, awaited: ``attempt_id`` as there."""
        found: Attempt | None = await self._op("get", attempt_id)
        return found

    async def heartbeat(
        self,
        run_id: str,
        step_key_digest: str,
        attempt: int,
        owner: OwnerId,
        now_ms: int,
        checkpoint: JsonValue | Absent = ABSENT,
    ) -> AttemptHeartbeatOutcome:
        """``AttemptStore.heartbeat``, awaited: ``run_id``, ``step_key_digest``, ``attempt``,
        ``owner``, ``now_ms``, ``checkpoint`` as there.
        """
        outcome: AttemptHeartbeatOutcome = await self._op(
            "heartbeat", run_id, step_key_digest, attempt, owner, now_ms, checkpoint
        )
        return outcome

    async def finish(self, finish: FinishAttempt, owner: OwnerId) -> FinishOutcome:
        """``AttemptStore.finish``, awaited: ``finish``, ``owner`` as there."""
        outcome: FinishOutcome = await self._op("finish", finish, owner)
        return outcome

    async def patch(
        self, attempt_id: AttemptId | Attempt, patch: AttemptPatch, owner: OwnerId
    ) -> PatchOutcome:
        """``AttemptStore.patch``, awaited: ``attempt_id``, ``patch``, ``owner`` as there."""
        outcome: PatchOutcome = await self._op("patch", attempt_id, patch, owner)
        return outcome

    async def state(self) -> tuple[Attempt, ...]:
        """``AttemptStore.state``, awaited."""
        attempts: tuple[Attempt, ...] = await self._op("state")
        return attempts

    async def check_invariants(self, *, max_checkpoint_bytes: int | None = None) -> None:
        """``AttemptStore.check_invariants``, awaited: ``max_checkpoint_bytes`` as there."""
        if max_checkpoint_bytes is None:
            await self._op("check_invariants")
        else:
            key = self._key

            def call(lane: Lane[SqlRunStore]) -> None:
                lane.companions[key].check_invariants(max_checkpoint_bytes=max_checkpoint_bytes)

            await self._store._lanes.call(
                "check_invariants", call, write=False, interrupt=_interrupt
            )
