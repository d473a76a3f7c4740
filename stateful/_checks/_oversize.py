"""A stored checkpoint past every store's cap, judged on a copy of the database.

An attempt store never writes a checkpoint larger than its own
``max_checkpoint_bytes``, and contract.md caps that option at
``MAXIMUM_CHECKPOINT_BYTES`` (16 MiB). A row written behind the store's back
(a tool, a restore, another release with another cap) can still hold a
larger one. Reading it must fail with ``decode_failed``: handing out a value
no store could have admitted would let a later write carry it further.

Like the column edits (``_edits``), the edit is made on a copy of the SQLite
adapter's file (``database_copy``), so the store under test and the reference
carry on unchanged. The text is valid JSON, a string of 16 MiB plus one byte
once encoded, so the schema's ``json_valid`` check lets it in.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from runstore._clock import ManualClock
from runstore.attempts import AttemptId, AttemptStoreError
from runstore.attempts._boundary import MAXIMUM_CHECKPOINT_BYTES

from ._edits import database_copy
from ._invariants import CorruptRowAccepted

#: One UTF-8 byte past the cap: a JSON string (two quotes) of one-byte characters.
OVERSIZED_CHECKPOINT: Final = '"' + "x" * (MAXIMUM_CHECKPOINT_BYTES - 1) + '"'


def judge_oversized_checkpoint(
    factory: Callable[[ManualClock, Path], Any],
    attempt_factory: Callable[[Any], Any],
    path: Path,
    now_ms: int,
    attempt: AttemptId,
) -> bool:
    """Copy the database at ``path``, give ``attempt`` an oversized stored
    checkpoint in the copy, and check that the attempt store
    ``attempt_factory`` builds over the store ``factory`` opens on the copy
    refuses to read it. The copy is removed afterwards. Returns whether it
    was judged (not when the attempt is not in the file)."""
    with database_copy(path, "oversized") as copy:
        with contextlib.closing(sqlite3.connect(copy, isolation_level=None)) as raw:
            changed = raw.execute(
                "UPDATE flows_attempts SET checkpoint_json = ?"
                " WHERE run_id = ? AND step_key_digest = ? AND attempt = ?",
                (OVERSIZED_CHECKPOINT, attempt.run_id, attempt.step_key_digest, attempt.attempt),
            ).rowcount
        if not changed:
            return False
        edited = factory(ManualClock(now_ms), copy)
        try:
            _judge(attempt_factory(edited), attempt)
        finally:
            edited.close()
        return True


def _judge(attempts: Any, attempt: AttemptId) -> None:
    shown = (
        f"attempt {attempt!r} given a stored checkpoint of {len(OVERSIZED_CHECKPOINT)} bytes"
        f" (the cap of every store is {MAXIMUM_CHECKPOINT_BYTES}) behind the store's back"
    )
    try:
        found = attempts.get(attempt)
    except AttemptStoreError as error:
        if error.code == "decode_failed":
            return
        raise CorruptRowAccepted(
            f"{shown}: get() raised {error.code}, where it must be refused with decode_failed"
        ) from None
    size = "nothing" if found is None else "the attempt"
    raise CorruptRowAccepted(
        f"{shown}: get() answered {size}, where it must be refused with decode_failed"
    )
