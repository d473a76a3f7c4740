"""What both backends' transaction managers share: the early-answer signal
and running commit or rollback callbacks."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Generic, TypeVar

from .._errors import PersistenceFailedError

T = TypeVar("T")


def refuse_on_event_loop(method: str) -> None:
    """Raise ``persistence_failed`` (``cause["stage"] == "event-loop"``) when
    called on a thread that runs an asyncio event loop.

    The transaction managers call it first, before any driver call, when
    their ``loop_guard`` is set: ``runstore.aio`` sets it on the stores it
    owns, whose every call belongs on a thread of their own. Nothing is
    written: the refusal comes before the transaction."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise PersistenceFailedError(
        method,
        "a blocking store call on an event loop's thread: await the AsyncRunStore's "
        "coroutine instead",
        {"stage": "event-loop"},
    )


class RollbackAndReturn(Exception, Generic[T]):
    """Raised by a body to roll the whole transaction back and answer ``value``.

    Used where an operation changed the lease and then lost a later strategy
    call: the loss is the answer, and none of the operation's changes stay.
    """

    def __init__(self, value: T) -> None:
        super().__init__("rollback")
        self.value = value


def run_callbacks(callbacks: list[Callable[[], None]]) -> None:
    """Run every callback; if any raised, raise the first failure after all ran."""
    first: BaseException | None = None
    for fn in callbacks:
        try:
            fn()
        except BaseException as error:  # keep undoing; report the first failure
            if first is None:
                first = error
    if first is not None:
        raise first
