"""Raw edits of one column of a run's row, judged on a copy of the database.

The raw-corruption rule plants state text that admission refuses; the rows'
other columns are guarded by the schema's CHECK constraints, so only an edit
made with those checks off (a tool, a restore from an older release, a
hand-made repair) can break them. A store still re-validates what it reads:
such a row must be refused with ``decode_failed``, never handed out, and the
store's own ``check_invariants()`` must flag it, as it must flag a row whose
owner columns disagree with the strategy's lease.

The reference cannot follow a row its own types cannot hold, so the edit is
made on a copy of the store's database file (``VACUUM INTO``), opened with
the same factory: the store under test and the reference carry on unchanged.
Only the SQLite adapter on a file (or ``runstore.aopen``'s async store over
one) can be copied this way; for other stores the edits are skipped.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final

from runstore._clock import ManualClock
from runstore._values import RunRow

from .._base._steps import Raised, call, perform
from ._invariants import CorruptRowAccepted, check_cause

#: Each edit: the column, the SQL value it is set to, which rows it applies
#: to, and whether reads of the run must then fail with ``decode_failed``
#: (else the row still decodes, and only ``check_invariants()`` can see it).
COLUMN_EDITS: Final[dict[str, tuple[str, str, str, bool]]] = {
    "created-negative": ("created_at_ms", "-1", "1 = 1", True),
    "status-unknown": ("status", "'paused'", "1 = 1", True),
    "claim-half": ("claim_pid", "NULL", "claim_host_id IS NOT NULL", True),
    "heartbeat-moved": (
        "heartbeat_at_ms",
        "heartbeat_at_ms + 1",
        "owner_host_id IS NOT NULL",
        False,
    ),
}


#: The stage a refusal of each undecodable edit names in its cause: the
#: row's shape (types and ranges) or the invariants tying its columns together.
DECODE_STAGES: Final = {
    "created-negative": "row-schema",
    "status-unknown": "row-schema",
    "claim-half": "invariants",
}


def column_edit_for(row: RunRow, turn: int) -> str:
    """The edit to make on ``row`` at the machine's ``turn``-th edit: one
    that changes the row (a heartbeat for an owned run, the claimant for a
    claimed one), else the creation time and the status in turn."""
    if row.owner is not None:
        return "heartbeat-moved"
    if row.claim is not None:
        return "claim-half"
    return ("created-negative", "status-unknown")[turn % 2]


def copyable(store: Any, path: Path) -> bool:
    """Whether ``store`` is the SQLite adapter on the file ``path``, or
    ``runstore.aopen``'s async store over it behind the stand-in (the copy is
    then opened by the same factory, and judged through the async store)."""
    from runstore.sqlite import SqliteRunStore

    from .._targets._blocking import BlockingRunStore

    if isinstance(store, BlockingRunStore) and store.sql_backed:
        store = store.sync_stores[0]
    return isinstance(store, SqliteRunStore) and path.is_file()


@contextlib.contextmanager
def database_copy(path: Path, name: str) -> Iterator[Path]:
    """A private copy of the database at ``path`` (``VACUUM INTO``, mode
    0600) beside it, named with ``name``; removed, with any side files, when
    the block ends."""
    copy = path.with_name(f"{path.stem}-{name}{path.suffix}")
    _remove(copy)
    try:
        with contextlib.closing(sqlite3.connect(path)) as source:
            source.execute("VACUUM INTO ?", (str(copy),))
        os.chmod(copy, 0o600)
        yield copy
    finally:
        _remove(copy)


def judge_column_edit(
    factory: Callable[[ManualClock, Path], Any],
    path: Path,
    now_ms: int,
    row: RunRow,
    edit: str,
) -> None:
    """Copy the database at ``path``, apply ``edit`` to ``row`` (as the
    reference holds it) in the copy, and judge the store ``factory`` opens
    on it; the copy is removed afterwards. Skipped when the row does not fit
    the edit; the store's own check is judged only when the copy passed it
    before the edit."""
    column, value, where, undecodable = COLUMN_EDITS[edit]
    with database_copy(path, "edited") as copy:
        with contextlib.closing(sqlite3.connect(copy, isolation_level=None)) as raw:
            # State the program corrupted on purpose would fail the store's own
            # check before the edit: the copy gets valid state everywhere.
            raw.execute("UPDATE flows_run_state SET state_json = '{}'")
        edited = factory(ManualClock(now_ms), copy)
        try:
            check = getattr(edited, "check_invariants", None)
            if callable(check):
                try:
                    check()
                except AssertionError:
                    check = None  # not clean before the edit: the check cannot tell
            with contextlib.closing(sqlite3.connect(copy, isolation_level=None)) as raw:
                raw.execute("PRAGMA ignore_check_constraints = ON")
                changed = raw.execute(
                    f"UPDATE flows_runs SET {column} = {value} WHERE run_id = ? AND ({where})",
                    (row.run_id,),
                ).rowcount
            if changed:
                _judge(edited, now_ms, row, edit, undecodable, check)
        finally:
            edited.close()


def _judge(
    edited: Any,
    now_ms: int,
    row: RunRow,
    edit: str,
    undecodable: bool,
    check: object,
) -> None:
    run_id = row.run_id
    shown = f"run {run_id!r} edited behind the store's back ({edit})"
    if undecodable:
        for op in (
            call("get", ("run_id", run_id)),
            call("list_runs", limit=1000),
        ):
            out = perform(edited, op)
            if out != Raised("decode_failed", op.method):
                raise CorruptRowAccepted(
                    f"{shown}: {op.describe()} answered {out!r}, where the row must be"
                    " refused with decode_failed"
                )
            check_cause(out, decode_cause(edit, op.method, run_id), f"{shown}: {op.describe()}")
    if edit == "status-unknown" and row.cancel_requested_at_ms is not None:
        # The request finds nothing to change and names the run's state from
        # its row: a status it does not know must be refused, not classified.
        op = call("request_cancel", ("run_id", run_id), ("now_ms", now_ms))
        out = perform(edited, op)
        if not isinstance(out, Raised):
            raise CorruptRowAccepted(
                f"{shown}: {op.describe()} answered {out!r} from a row of an unknown status"
            )
    if callable(check):
        try:
            check()
        except AssertionError:
            return
        raise CorruptRowAccepted(f"{shown}: the store's own check_invariants() passed it")


def decode_cause(edit: str, method: str, run_id: str) -> dict[str, Any]:
    """What the cause of a read refusing a row broken by ``edit`` must say:
    the run, the stage, and for a broken invariant whether the state is
    valid JSON (the copy holds ``{}`` everywhere, so it is, for a read with
    the state; ``list_runs`` reads without it, so the flag is None)."""
    stage = DECODE_STAGES[edit]
    expected: dict[str, Any] = {"run_id": run_id, "stage": stage}
    if stage == "invariants":
        expected["state_json_valid"] = True if method == "get" else None
    return expected


def _remove(path: Path) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
