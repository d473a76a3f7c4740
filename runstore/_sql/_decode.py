"""Decoding rows read back from the database.

The CHECK constraints make impossible rows impossible for every writer that
leaves them on, but a file can be edited behind the store's back, so every run
row is re-validated on read: first its shape (types and ranges, the
``row-schema`` stage), then the invariants that tie its columns together and
its state's admissibility. A failure is ``decode_failed`` with a payload-free
cause: the run id, timestamps and flags, never the state text.

``raw_row`` builds a ``RunRow`` without judging it, for ``state()``, which must
describe a corrupt database rather than refuse to.

A page of rows (``list_runs``, ``lineage``, ``changes``) is judged column by
column instead (``decode_runs``, ``decode_changes``): the same rules, each
checked once for the whole page in loops that run in C (the types of a
column as a set, its range by ``min`` and ``max``, an identifier column's
text joined once), and the values built from the columns. A page that does
not pass every such check, or holds text the column checks cannot judge
quickly (an identifier that is not ASCII), is decoded row by row by
``decode_run`` or ``decode_change``, which raise the error a bad row
deserves; so a page is refused with exactly the error the first bad row
gives, and a page that passes gives exactly the values ``decode_run`` builds.
That holds for rows of the types sqlite3 and psycopg yield (None, int,
float, str, bytes, bool; never a subclass of str or int other than bool),
which ``tests/store/test_page_decode.py`` draws, corrupt rows included.
The rows of a page are validated once, on the way out; no value is built
before its row has passed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from itertools import chain, compress, repeat
from typing import Any, Final

from .._boundary import is_identifier, is_timestamp, json_text_complaint
from .._constants import MAX_SAFE_INTEGER, MAXIMUM_IDENTIFIER_LENGTH
from .._errors import DecodeFailedError
from .._values import (
    OWNERSHIP_TRANSITIONS,
    RUN_STATUSES,
    CancelAcknowledgement,
    OwnerId,
    OwnershipFact,
    RunChange,
    RunRow,
)


def _optional(value: object, check: Any) -> bool:
    return value is None or bool(check(value))


def _schema_ok(row: Sequence[Any], stateless: bool = False) -> bool:
    (
        run_id,
        status,
        created,
        started,
        finished,
        owner_host,
        owner_pid,
        owner_nonce,
        heartbeat,
        claim_host,
        claim_pid,
        claim_nonce,
        claimed_at,
        parent,
        cancel,
        lineage,
        round_ordinal,
        state,
    ) = row
    return (
        is_identifier(run_id)
        and type(status) is str
        and status in RUN_STATUSES
        and is_timestamp(created)
        and _optional(started, is_timestamp)
        and _optional(finished, is_timestamp)
        and _optional(owner_host, is_identifier)
        and _optional(owner_pid, is_timestamp)
        and _optional(owner_nonce, is_identifier)
        and _optional(heartbeat, is_timestamp)
        and _optional(claim_host, is_identifier)
        and _optional(claim_pid, is_timestamp)
        and _optional(claim_nonce, is_identifier)
        and _optional(claimed_at, is_timestamp)
        and _optional(parent, is_identifier)
        and _optional(cancel, is_timestamp)
        and _optional(lineage, is_identifier)
        and _optional(round_ordinal, is_timestamp)
        and (state is None if stateless else type(state) is str)
    )


def _identity(host: object, pid: object, nonce: object) -> OwnerId | bool | None:
    """The owner the three columns name; None when all are empty; False when partial."""
    if host is None and pid is None and nonce is None:
        return None
    if host is None or pid is None or nonce is None:
        return False
    return OwnerId(host, pid, nonce)  # type: ignore[arg-type]


def _state_valid(state: object) -> bool:
    if type(state) is not str:
        return False
    try:
        json.loads(state)
    except (ValueError, RecursionError):
        return False
    return True


def decode_run(method: str, row: Sequence[Any], *, stateless: bool = False) -> RunRow:
    """A validated ``RunRow``, or ``decode_failed``. ``stateless``: a listed
    row read without its state (the state column is NULL and not judged)."""
    if not _schema_ok(row, stateless):
        raise DecodeFailedError(
            method,
            "could not decode flows_runs row",
            {"run_id": row[0] if is_identifier(row[0]) else None, "stage": "row-schema"},
        )
    owner = _identity(row[5], row[6], row[7])
    claim = _identity(row[9], row[10], row[11])
    status, heartbeat, claimed_at, state = row[1], row[8], row[12], row[17]
    broken_owner = (
        owner is False
        or (owner is None) != (heartbeat is None)
        or (status == "running") != (owner is not None)
    )
    broken_claim = claim is False or (claim is None) != (claimed_at is None)
    broken_state = not stateless and json_text_complaint(state) is not None
    if broken_owner or broken_claim or broken_state:
        # The cause reaches logs and telemetry; run state may hold credentials,
        # so only the invariants read here are reported.
        raise DecodeFailedError(
            method,
            "flows_runs row violates durable invariants",
            {
                "run_id": row[0],
                "stage": "invariants",
                "status": status,
                "heartbeat_at_ms": heartbeat,
                "claimed_at_ms": claimed_at,
                "has_owner_columns": any(v is not None for v in row[5:8]),
                "has_claim_columns": any(v is not None for v in row[9:12]),
                "state_json_valid": None if stateless else _state_valid(state),
            },
        )
    return RunRow(
        run_id=row[0],
        status=status,
        created_at_ms=row[2],
        started_at_ms=row[3],
        finished_at_ms=row[4],
        owner=owner,  # type: ignore[arg-type]
        heartbeat_at_ms=heartbeat,
        claim=claim,  # type: ignore[arg-type]
        claimed_at_ms=claimed_at,
        parent_run_id=row[13],
        cancel_requested_at_ms=row[14],
        lineage_id=row[15],
        round_ordinal=row[16],
        state_json=state,
    )


_NONE_TYPE: Final = type(None)
_INTS: Final = frozenset({int, _NONE_TYPE})
_INT: Final = frozenset({int})
_FLAGS: Final = frozenset({0, 1})
_RUNNING: Final = frozenset({"running"})


def _present(columns: tuple[tuple[Any, ...], ...]) -> tuple[list[Any], list[int]] | None:
    """The true values of ``columns``, column after column, and how many each
    column holds; None when a column holds a false value other than None (a
    zero, empty text or bytes, 0.0 or False)."""
    values: list[Any] = []
    counts = []
    rows = len(columns[0])
    for column in columns:
        before = len(values)
        values += filter(None, column)
        held = len(values) - before
        # (A column with no false value holds no None: nothing to count.)
        if held != rows and column.count(None) != rows - held:
            return None
        counts.append(held)
    return values, counts


def _identifiers_fit(columns: tuple[tuple[Any, ...], ...]) -> list[int] | None:
    """How many identifiers each column holds, when every value of
    ``columns`` is None or an identifier judged quickly: ASCII text (so no
    surrogate, and one UTF-16 unit a character), non-empty, no NUL, no longer
    than the limit. None otherwise, also for text this cannot judge quickly
    (not ASCII): the caller then judges row by row."""
    present = _present(columns)
    if present is None:
        return None  # empty text (no identifier), or a false value that is no text
    values, counts = present
    try:
        joined = "".join(values)
    except TypeError:
        return None  # a value that is no text
    if not joined.isascii() or "\x00" in joined:
        return None
    if len(joined) > MAXIMUM_IDENTIFIER_LENGTH:
        # Texts that fit the limit together fit it one by one; only a column
        # whose texts do not is measured text by text.
        start = 0
        for count in counts:
            chosen = values[start : start + count]
            start += count
            if (
                len("".join(chosen)) > MAXIMUM_IDENTIFIER_LENGTH
                and max(map(len, chosen)) > MAXIMUM_IDENTIFIER_LENGTH
            ):
                return None
    return counts


def _timestamps_fit(columns: tuple[tuple[Any, ...], ...]) -> list[int] | None:
    """How many non-zero values each column holds, when every value of
    ``columns`` is None or an exact ``int`` in ``[0, 2**53 - 1]``; else None."""
    present = _present(columns)
    if present is None:
        # A false value besides None: the int 0 is a timestamp, 0.0 and False
        # are not; every value's type is judged.
        if not set(map(type, chain.from_iterable(columns))) <= _INTS:
            return None
        values = [*filter(None, chain.from_iterable(columns))]
        counts = None
    else:
        values, counts = present
        try:
            total = sum(values)
        except TypeError:
            return None  # text, bytes
        if type(total) is not int:
            return None  # a float among them
    ordered = sorted(values)
    if ordered and ordered[0] <= 1 and not set(map(type, values)) <= _INT:
        # ``sum`` counts True as 1: a 1 (or less) is judged by its type.
        return None
    if ordered and (ordered[0] < 0 or ordered[-1] > MAX_SAFE_INTEGER):
        return None
    return counts if counts is not None else [len(c) - c.count(None) for c in columns]


def _together(first: tuple[Any, ...], count: int, column: tuple[Any, ...], held: int) -> bool:
    """Whether ``column`` (holding ``held`` values) is None exactly where
    ``first`` (None or non-empty text, holding ``count``) is: as many values,
    and none missing where ``first`` has one."""
    return held == count and None not in compress(column, first)


def _runs_fit(columns: list[tuple[Any, ...]], stateless: bool) -> bool:
    """Whether every row of a page, given as its 18 columns, passes every
    check ``decode_run`` makes (its run state's JSON aside)."""
    (
        run_ids,
        statuses,
        created,
        started,
        finished,
        owner_hosts,
        owner_pids,
        owner_nonces,
        heartbeats,
        claim_hosts,
        claim_pids,
        claim_nonces,
        claimed_at,
        parents,
        cancels,
        lineages,
        rounds,
        states,
    ) = columns
    texts = _identifiers_fit(
        (run_ids, owner_hosts, owner_nonces, claim_hosts, claim_nonces, parents, lineages)
    )
    if texts is None:
        return False
    numbers = _timestamps_fit(
        (
            created,
            owner_pids,
            heartbeats,
            claim_pids,
            claimed_at,
            started,
            finished,
            cancels,
            rounds,
        )
    )
    if numbers is None:
        return False
    rows = len(run_ids)
    ids, owner_host_count, owner_nonce_count, claim_host_count, claim_nonce_count = texts[:5]
    _, owner_pid_count, heartbeat_count, claim_pid_count, claimed_count = numbers[:5]
    return (
        ids == rows
        and None not in created  # (the only column where 0 counts as present)
        and set(statuses) <= RUN_STATUSES
        # (Read with state, each state is judged when the values are built.)
        and (not stateless or states.count(None) == rows)
        # Owned exactly where running: every owned row runs, and as many run;
        # the owner's other columns are present exactly where its host is.
        and set(compress(statuses, owner_hosts)) <= _RUNNING
        and owner_host_count == statuses.count("running")
        and _together(owner_hosts, owner_host_count, owner_nonces, owner_nonce_count)
        and _together(owner_hosts, owner_host_count, owner_pids, owner_pid_count)
        and _together(owner_hosts, owner_host_count, heartbeats, heartbeat_count)
        and _together(claim_hosts, claim_host_count, claim_nonces, claim_nonce_count)
        and _together(claim_hosts, claim_host_count, claim_pids, claim_pid_count)
        and _together(claim_hosts, claim_host_count, claimed_at, claimed_count)
    )


def _fits(check: Any, *arguments: Any) -> bool:
    """``check(*arguments)``, False where it meets a value it cannot hash or
    compare (no driver yields one for these columns; the row-by-row decoder
    then says what is wrong)."""
    try:
        return bool(check(*arguments))
    except TypeError:
        return False


def _owners(hosts: tuple[Any, ...], pids: tuple[Any, ...], nonces: tuple[Any, ...]) -> Any:
    """Each row's ``OwnerId``, or None where the host is None."""
    if hosts.count(None) == len(hosts):
        return repeat(None)
    return [
        None if host is None else OwnerId(host, pid, nonce)
        for host, pid, nonce in zip(hosts, pids, nonces, strict=True)
    ]


def decode_runs(
    method: str, rows: Sequence[Sequence[Any]], *, stateless: bool = False
) -> list[RunRow]:
    """``decode_run`` of every row of a page, in order, judged column by column
    (see the module's docstring): the same values, or the same error."""
    if not rows:
        return []
    columns = [*zip(*rows, strict=True)]
    if len(columns) == 18 and _fits(_runs_fit, columns, stateless):
        states = columns[17]
        if stateless or all(json_text_complaint(state) is None for state in states):
            return [
                *map(
                    RunRow,
                    columns[0],
                    columns[1],
                    columns[2],
                    columns[3],
                    columns[4],
                    _owners(columns[5], columns[6], columns[7]),
                    columns[8],
                    _owners(columns[9], columns[10], columns[11]),
                    columns[12],
                    columns[13],
                    columns[14],
                    columns[15],
                    columns[16],
                    states,
                )
            ]
    return [decode_run(method, row, stateless=stateless) for row in rows]


def raw_run(row: Sequence[Any]) -> RunRow:
    """The row as stored, without validation (a partial identity is kept as is)."""

    def identity(host: Any, pid: Any, nonce: Any) -> OwnerId | None:
        if host is None and pid is None and nonce is None:
            return None
        return OwnerId(host, pid, nonce)

    return RunRow(
        run_id=row[0],
        status=row[1],
        created_at_ms=row[2],
        started_at_ms=row[3],
        finished_at_ms=row[4],
        owner=identity(row[5], row[6], row[7]),
        heartbeat_at_ms=row[8],
        claim=identity(row[9], row[10], row[11]),
        claimed_at_ms=row[12],
        parent_run_id=row[13],
        cancel_requested_at_ms=row[14],
        lineage_id=row[15],
        round_ordinal=row[16],
        state_json=row[17],
    )


def decode_fact(method: str, row: Sequence[Any]) -> OwnershipFact:
    run_id, position, transition, host, pid, nonce, granted = row
    if not (
        is_identifier(run_id)
        and type(position) is int
        and position >= 1
        and type(transition) is str
        and transition in OWNERSHIP_TRANSITIONS
        and is_identifier(host)
        and is_timestamp(pid)
        and is_identifier(nonce)
        and _optional(granted, is_timestamp)
    ):
        raise DecodeFailedError(
            method,
            "could not decode flows_ownership_facts row",
            {"run_id": run_id if is_identifier(run_id) else None, "stage": "fact-schema"},
        )
    return OwnershipFact(run_id, transition, OwnerId(host, pid, nonce), granted, position)  # type: ignore[arg-type]


def raw_fact(row: Sequence[Any]) -> OwnershipFact:
    run_id, position, transition, host, pid, nonce, granted = row
    return OwnershipFact(run_id, transition, OwnerId(host, pid, nonce), granted, position)


def decode_change(method: str, row: Sequence[Any]) -> RunChange:
    run_id, revision, deleted = row
    if not (is_identifier(run_id) and is_timestamp(revision) and deleted in (0, 1)):
        raise DecodeFailedError(
            method, "could not decode flows_run_changes row", {"stage": "change-schema"}
        )
    return RunChange(run_id, revision, bool(deleted))


def decode_changes(method: str, rows: Sequence[Sequence[Any]]) -> list[RunChange]:
    """``decode_change`` of every row of a page, in order, judged column by
    column (see the module's docstring): the same values, or the same error."""
    if not rows:
        return []
    columns = [*zip(*rows, strict=True)]
    if len(columns) == 3:
        run_ids, revisions, deleted = columns
        every = [len(rows)]  # no None in either column
        if (
            _identifiers_fit((run_ids,)) == every
            and _timestamps_fit((revisions,)) == every
            and _fits(_FLAGS.issuperset, deleted)
        ):
            return [*map(RunChange, run_ids, revisions, map(bool, deleted))]
    return [decode_change(method, row) for row in rows]


def acknowledgement_json(observed_at_ms: int, owner: OwnerId) -> str:
    """The stored form of a first cancellation acknowledgement."""
    return json.dumps(
        {
            "observedAtMs": observed_at_ms,
            "owner": {"hostId": owner.host_id, "pid": owner.pid, "nonce": owner.nonce},
        },
        separators=(",", ":"),
        ensure_ascii=False,
    )


def decode_acknowledgement(run_id: str, text: object) -> CancelAcknowledgement | None:
    """The acknowledgement stored on a run, or None when the text is not one."""
    try:
        value = json.loads(text)  # type: ignore[arg-type]
        owner = value["owner"]
        acknowledgement = CancelAcknowledgement(
            run_id,
            value["observedAtMs"],
            OwnerId(owner["hostId"], owner["pid"], owner["nonce"]),
        )
    except (TypeError, ValueError, KeyError, RecursionError):
        return None
    return acknowledgement
