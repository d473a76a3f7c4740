"""What both backends' transaction managers share: the early-answer signal
and running commit or rollback callbacks."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


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
