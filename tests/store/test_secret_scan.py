"""A credential handed to a run reaches exactly two columns, and nothing else.

Upstream's fault case 22: a secret placed in run state and in an attempt
outcome must appear, scanning every column of every table of the SQLite file
(or of the PostgreSQL schema, and the server's view of every session's last
statement), only in the run-state column (``flows_runs.state_json``, or the
side table that holds run state once it moved out of the hot row) and in
``flows_attempts.outcome_json``; and in no error message, exception chain,
repr or log record, also when operations fail on input that contains it
(PostgreSQL's own errors quote failing rows: none of that may pass through).
"""

from __future__ import annotations

import json
import logging
import sqlite3
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import runstore
from runstore import ManualClock, OwnerId, RunSnapshot, RunStoreError
from runstore.attempts import (
    Attempt,
    AttemptId,
    AttemptPatch,
    AttemptStore,
    AttemptStoreError,
    FinishAttempt,
)

from .. import _postgres
from ..attempts.test_attempts_pairs import PAIRINGS, make_env

SECRET = "sk-live-5f0c2a9e7b1d4c3a8e6f0b2d4a6c8e1f"
OWNER = OwnerId("host-secret", 7, "nonce-secret")
RUN = "run-with-credentials"


class Sneaky(str):
    """A str subclass: refused by admission, and it carries the secret."""


def _texts_of(error: BaseException) -> Iterator[str]:
    """Everything an error shows: message, repr, args, cause, notes, the whole
    formatted chain, for it and every error it chains to."""
    yield "".join(traceback.format_exception(error))
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield str(current)
        yield repr(current)
        yield repr(current.args)
        yield repr(getattr(current, "cause", None))
        yield repr(getattr(current, "__notes__", None))
        current = current.__cause__ or current.__context__


def _fails_cleanly(call: Callable[[], object], code: str) -> BaseException:
    """``call`` fails with ``code`` and no part of the failure shows the secret."""
    with pytest.raises((RunStoreError, AttemptStoreError)) as caught:
        call()
    error = caught.value
    assert error.code == code, error
    for text in _texts_of(error):
        assert SECRET not in text
    return error


def _own(runs: Any, run_id: str) -> None:
    runs.create(run_id, json.dumps({"apiKey": SECRET, "page": 1}))
    assert runs.claim_and_own(run_id, RunSnapshot("pending", None, None), OWNER, 0) == (
        runstore.Activated()
    )


def _use_and_misuse(runs: Any, attempts: Any) -> None:
    """Store the secret where it belongs, then fail on input that carries it."""
    _own(runs, RUN)
    attempts.put(Attempt(RUN, "step", 1, "running", 0, meta={"step": "fetch"}), OWNER)
    outcome = {"response": {"token": SECRET}, "note": f"Authorization: Bearer {SECRET}"}
    attempts.finish(FinishAttempt(RUN, "step", 1, "succeeded", 5, outcome=outcome), OWNER)
    attempts.put(Attempt(RUN, "step", 2, "running", 0, meta={}), OWNER)

    # Invalid run state containing it (create and transition).
    _fails_cleanly(lambda: runs.create("bad-state", '{"apiKey": "' + SECRET + '",}'), "invalid_run")
    _fails_cleanly(
        lambda: runs.transition_owned(RUN, OWNER, "running", SECRET + "{"), "invalid_run"
    )
    # A duplicate create containing it.
    _fails_cleanly(lambda: runs.create(RUN, json.dumps({"apiKey": SECRET})), "constraint")
    # Too-large checkpoints containing it.
    huge = {"blob": "x" * (1 << 20), "apiKey": SECRET}
    _fails_cleanly(
        lambda: attempts.put(
            Attempt(RUN, "step", 3, "running", 0, checkpoint=huge, meta={}), OWNER
        ),
        "invalid_attempt",
    )
    _fails_cleanly(lambda: attempts.heartbeat(RUN, "step", 2, OWNER, 9, huge), "invalid_attempt")
    _fails_cleanly(
        lambda: attempts.patch(AttemptId(RUN, "step", 2), AttemptPatch(checkpoint=huge), OWNER),
        "invalid_attempt",
    )
    # Non-JSON values containing it.
    for value in (
        {"apiKey": SECRET, "when": object()},
        {"apiKey": Sneaky(SECRET)},
        {Sneaky(SECRET): 1},
        (SECRET,),
        SECRET.encode(),
        {"apiKey": SECRET, "ratio": float("nan")},
        "\ud800" + SECRET,
    ):
        _fails_cleanly(
            lambda value=value: attempts.put(
                Attempt(RUN, "step", 4, "running", 0, outcome=value, meta={}), OWNER
            ),
            "invalid_attempt",
        )
        _fails_cleanly(
            lambda value=value: attempts.finish(
                FinishAttempt(RUN, "step", 2, "failed", 9, error=value), OWNER
            ),
            "invalid_attempt",
        )
    # An identifier that carries it (a NUL makes it invalid).
    _fails_cleanly(
        lambda: attempts.put(Attempt(RUN, SECRET + "\x00", 1, "running", 0, meta={}), OWNER),
        "invalid_attempt",
    )
    # A bad option never echoes its value either.
    _fails_cleanly(
        lambda: type(attempts)(runs, in_progress_states=(SECRET, SECRET)), "invalid_attempt"
    )


def _check_reprs(runs: Any, attempts: Any) -> None:
    """Reprs of everything a caller can hold leave values out."""
    for thing in (
        runs,
        attempts,
        runs.get(RUN),
        runs.state(),
        attempts.get(AttemptId(RUN, "step", 1)),
        attempts.state(),
    ):
        assert SECRET not in repr(thing)


def _scan(path: Path) -> dict[tuple[str, str], int]:
    """(table, column) -> number of values holding the secret, over every table."""
    hits: dict[tuple[str, str], int] = {}
    connection = sqlite3.connect(path)
    try:
        tables = [
            name
            for (name,) in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        ]
        assert "flows_runs" in tables
        assert "flows_attempts" in tables
        needle = SECRET.encode("utf-8")
        for table in tables:
            cursor = connection.execute(f'SELECT * FROM "{table}"')
            columns = [column[0] for column in cursor.description]
            for row in cursor:
                for column, value in zip(columns, row, strict=True):
                    found = (isinstance(value, str) and SECRET in value) or (
                        isinstance(value, bytes) and needle in value
                    )
                    if found:
                        hits[(table, column)] = hits.get((table, column), 0) + 1
    finally:
        connection.close()
    return hits


def _run_state_column(path: Path) -> tuple[str, str]:
    """Where run state lives: its side table once it moved out of the hot row."""
    connection = sqlite3.connect(path)
    try:
        columns = {row[1] for row in connection.execute("PRAGMA table_info(flows_runs)")}
        if "state_json" in columns:
            return ("flows_runs", "state_json")
        (side,) = [
            name
            for (name,) in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            if "state_json"
            in {row[1] for row in connection.execute(f'PRAGMA table_info("{name}")')}
        ]
        return (side, "state_json")
    finally:
        connection.close()


def test_the_secret_is_stored_only_in_run_state_and_attempt_outcome(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Every column of every table is scanned: the secret is in the run-state
    column and flows_attempts.outcome_json, once each, and nowhere else; no
    error, repr or log record shows it."""
    caplog.set_level(logging.DEBUG)
    path = tmp_path / "secret.db"
    with runstore.open(path, clock=ManualClock(0)) as runs:
        attempts = AttemptStore(runs)
        _use_and_misuse(runs, attempts)
        # A constraint failure on an attempt write whose values carry the secret.
        runs._connection.execute(
            "CREATE TRIGGER refuse_attempts BEFORE INSERT ON flows_attempts"
            " BEGIN SELECT RAISE(ABORT, 'refused by test trigger'); END"
        )
        _fails_cleanly(
            lambda: attempts.put(
                Attempt(RUN, "step", 5, "running", 0, outcome={"apiKey": SECRET}, meta={}), OWNER
            ),
            "constraint",
        )
        runs._connection.execute("DROP TRIGGER refuse_attempts")
        # A persistence failure while the secret is in flight.
        runs._connection.execute("ALTER TABLE flows_attempts RENAME TO flows_attempts_away")
        _fails_cleanly(
            lambda: attempts.patch(
                AttemptId(RUN, "step", 2), AttemptPatch(outcome={"apiKey": SECRET}), OWNER
            ),
            "persistence_failed",
        )
        runs._connection.execute("ALTER TABLE flows_attempts_away RENAME TO flows_attempts")
        _check_reprs(runs, attempts)
        attempts.check_invariants()
        runs.check_invariants()
    hits = _scan(path)
    assert hits == {_run_state_column(path): 1, ("flows_attempts", "outcome_json"): 1}
    for record in caplog.records:
        assert SECRET not in record.getMessage()
        assert SECRET not in repr(record.args)
    assert SECRET not in caplog.text


@pytest.mark.parametrize("kind", sorted(PAIRINGS))
def test_failures_on_secret_input_never_show_it(
    kind: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """On the model and on SQLite, every refusal of input that carries the
    secret keeps it out of messages, chains, reprs and logs."""
    caplog.set_level(logging.DEBUG)
    env = make_env(kind, ManualClock(0), tmp_path)
    try:
        _use_and_misuse(env.runs, env.attempts)
        _check_reprs(env.runs, env.attempts)
    finally:
        env.runs.close()
    assert SECRET not in caplog.text


def _postgres_scan(url: str) -> dict[tuple[str, str], int]:
    """(table, column) -> number of values holding the secret, over every
    column of every table of the schema, read as text."""
    import psycopg
    from psycopg import sql

    hits: dict[tuple[str, str], int] = {}
    with psycopg.connect(url) as connection:
        columns = connection.execute(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema = 'public' ORDER BY 1, 2"
        ).fetchall()
        assert ("flows_attempts", "outcome_json") in columns
        for table, column in columns:
            query = sql.SQL("SELECT count(*) FROM {} WHERE {}::text LIKE %s").format(
                sql.Identifier(table), sql.Identifier(column)
            )
            (count,) = connection.execute(query, (f"%{SECRET}%",)).fetchone()
            if count:
                hits[(table, column)] = count
        statements = connection.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE query LIKE %s", (f"%{SECRET}%",)
        ).fetchone()
        assert statements == (0,), "a session's statement text holds the secret"
    return hits


@pytest.mark.parametrize("fast_path", [True, False], ids=["one-round-trip", "general"])
def test_on_postgres_the_secret_is_stored_only_in_run_state_and_attempt_outcome(
    caplog: pytest.LogCaptureFixture, fast_path: bool
) -> None:
    """The same scan over a PostgreSQL schema, with failures PostgreSQL itself
    describes by quoting the failing row (a CHECK violation) and a missing
    table, on both of the store's paths."""
    import runstore.postgres

    caplog.set_level(logging.DEBUG)
    url = _postgres.database_url()
    with runstore.postgres.open(url, clock=ManualClock(0), fast_path=fast_path) as runs:
        assert runs.fast_path is fast_path
        attempts = AttemptStore(runs)
        _use_and_misuse(runs, attempts)
        raw = runs._connection
        # PostgreSQL's message for this one reads "Failing row contains (...
        # the outcome ...)": only the SQLSTATE and the constraint's name may pass.
        raw.execute("ALTER TABLE flows_attempts ADD CONSTRAINT refuse_fifth CHECK (attempt <> 5)")
        error = _fails_cleanly(
            lambda: attempts.put(
                Attempt(RUN, "step", 5, "running", 0, outcome={"apiKey": SECRET}, meta={}), OWNER
            ),
            "constraint",
        )
        assert error.cause["database_code"] == "constraint"
        raw.execute("ALTER TABLE flows_attempts DROP CONSTRAINT refuse_fifth")
        raw.execute("ALTER TABLE flows_attempts RENAME TO flows_attempts_away")
        _fails_cleanly(
            lambda: attempts.patch(
                AttemptId(RUN, "step", 2), AttemptPatch(outcome={"apiKey": SECRET}), OWNER
            ),
            "persistence_failed",
        )
        raw.execute("ALTER TABLE flows_attempts_away RENAME TO flows_attempts")
        _check_reprs(runs, attempts)
        attempts.check_invariants()
        runs.check_invariants()
    hits = _postgres_scan(url)
    assert hits == {("flows_run_state", "state_json"): 1, ("flows_attempts", "outcome_json"): 1}
    for record in caplog.records:
        assert SECRET not in record.getMessage()
        assert SECRET not in repr(record.args)
    assert SECRET not in caplog.text
