"""What every operator command shares: exit codes, the failure that ends a
command, opening the target, and the pieces of output that name things."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any, Final

from ... import _open
from ..._clock import SystemClock
from ..._errors import RunStoreError

COMMANDS: Final = ("runs", "show", "check", "stats", "purge", "backup", "migrate")

#: Exit codes.
OK: Final = 0
FOUND: Final = 1
USAGE: Final = 2


class Failure(Exception):
    """Internal: the command cannot go on; ``code`` is its exit status."""

    def __init__(self, text: str, code: int = USAGE, detail: dict[str, Any] | None = None):
        super().__init__(text)
        self.text = text
        self.code = code
        self.detail = detail or {}


Result = tuple[dict[str, Any], str, int]


def shown(target: str) -> str:
    """The target as it may be printed: a URL without its password."""
    if not _open.is_postgres_url(target):
        return target
    try:
        from ...postgres._open import redacted
    except ImportError:
        return target.partition("://")[0] + "://(details hidden)"
    return redacted(target)


def open_store(target: str, **options: Any) -> Any:
    try:
        return _open.open(target, **options)
    except RunStoreError as error:
        raise cannot_open(target, error) from None


def cannot_open(target: str, error: RunStoreError) -> Failure:
    return Failure(
        f"cannot open {shown(target)}: {error.message}",
        USAGE,
        {"code": error.code, "cause": plain(error.cause)},
    )


def plain(value: Any) -> Any:
    """A cause as JSON can hold it."""
    return json.loads(json.dumps(value, default=str))


def now_of(args: argparse.Namespace) -> int:
    return int(args.now) if getattr(args, "now", None) is not None else SystemClock().now_ms()


def store_error(error: RunStoreError) -> Failure:
    return Failure(error.message, USAGE, {"code": error.code, "cause": plain(error.cause)})


def migration_names() -> dict[int, str]:
    from ...sqlite._migrations import MIGRATIONS

    return {step.id: step.name for step in MIGRATIONS}


def step_json(ids: Sequence[int]) -> list[dict[str, Any]]:
    names = migration_names()
    return [{"id": step, "name": names.get(step, "?")} for step in ids]
