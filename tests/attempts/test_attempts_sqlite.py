"""The SQLite AttemptStore's own concerns: rows decoded again on read, storage
failures mapped to attempt error codes, the fault seam, files shared and reopened.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

import runstore
from runstore import ManualClock
from runstore.attempts import (
    ABSENT,
    AttemptPatch,
    AttemptStore,
    AttemptStoreError,
    FenceLost,
    FinishAttempt,
    Finished,
    Inserted,
    Patched,
    Updated,
)
from runstore.sqlite import Fault, FaultPlan, RetryPolicy

from .test_attempts_pairs import OWNER, RIVAL, RUN, STEP, Env, ident, make_env, running

SECRETISH = "corrupt-value-9d1f"


@pytest.fixture(params=["sqlite-memory", "sqlite-file"])
def sql(request: pytest.FixtureRequest, clock: ManualClock, tmp_path: Path) -> Iterator[Env]:
    """A SQLite pairing with one running attempt on an owned run."""
    env = make_env(request.param, clock, tmp_path)
    try:
        env.own()
        assert env.attempts.put(running(1, checkpoint="c", meta={"m": 1}), OWNER) == Inserted()
        yield env
    finally:
        env.runs.close()


def _raw(env: Env, sql_text: str, *params: object, unchecked: bool = False) -> None:
    """Write behind the store's back, as another program would."""
    connection: sqlite3.Connection = env.runs._connection  # type: ignore[attr-defined]
    if unchecked:
        connection.execute("PRAGMA ignore_check_constraints = ON")
    try:
        connection.execute(sql_text, params)
    finally:
        if unchecked:
            connection.execute("PRAGMA ignore_check_constraints = OFF")


def _decode_failure(env: Env, column: str) -> None:
    for call in (lambda: env.attempts.get(ident(1)), env.attempts.state):
        with pytest.raises(AttemptStoreError) as caught:
            call()
        error = caught.value
        assert error.code == "decode_failed"
        assert error.cause["column"] == column
        assert column in error.message
        assert SECRETISH not in f"{error} {error!r} {error.cause}"
    with pytest.raises(AssertionError, match="does not decode"):
        env.attempts.check_invariants()


@pytest.mark.parametrize("column", ["checkpoint_json", "error_json", "outcome_json", "meta_json"])
@pytest.mark.parametrize(
    "text",
    [
        f"not json {SECRETISH}",
        f'{{"k": "{SECRETISH}"',
        f'{{"k": NaN, "v": "{SECRETISH}"}}',
        f'["{SECRETISH}", 1e400]',
        f'["\\ud800{SECRETISH}"]',
        "[" * 130 + "]" * 130,
    ],
    ids=["text", "truncated", "nan", "overflow", "lone-surrogate", "depth-129"],
)
def test_corrupt_json_is_decode_failed_naming_the_column(sql: Env, column: str, text: str) -> None:
    """A JSON column edited into something the store would not admit fails to
    decode; the error names the column and never quotes it."""
    _raw(sql, f"UPDATE flows_attempts SET {column} = ?", text, unchecked=True)
    _decode_failure(sql, column)


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("state", ""),
        ("state", "a\x00b"),
        ("state", b"state-blob"),
        ("step_key_digest", b"blob"),
        ("attempt", -1),
        ("attempt", 1.5),
        ("started_at_ms", 2**53),
        ("started_at_ms", "ten"),
        ("finished_at_ms", -5),
        ("heartbeat_at_ms", 0.5),
    ],
)
def test_corrupt_columns_are_decode_failed(sql: Env, column: str, value: object) -> None:
    """Identifiers and integers are checked on read as strictly as on input."""
    if column in ("step_key_digest", "attempt"):
        # The primary key moves too; read every row through state().
        _raw(sql, f"UPDATE flows_attempts SET {column} = ?", value, unchecked=True)
        with pytest.raises(AttemptStoreError) as caught:
            sql.attempts.state()
        assert caught.value.code == "decode_failed"
        assert caught.value.cause["column"] == column
        return
    _raw(sql, f"UPDATE flows_attempts SET {column} = ?", value, unchecked=True)
    _decode_failure(sql, column)


def test_a_stored_checkpoint_over_16_mib_is_decode_failed(sql: Env) -> None:
    """Reads check checkpoints against the 16 MiB ceiling."""
    _raw(sql, "UPDATE flows_attempts SET checkpoint_json = ?", '"' + "a" * (16 << 20) + '"')
    _decode_failure(sql, "checkpoint_json")


def test_put_over_a_corrupt_row_is_decode_failed(sql: Env) -> None:
    """put compares with the stored attempt, so it decodes it and fails cleanly."""
    _raw(sql, "UPDATE flows_attempts SET outcome_json = ?", f'"\\udc00{SECRETISH}"')
    with pytest.raises(AttemptStoreError) as caught:
        sql.attempts.put(running(1), OWNER)
    assert caught.value.code == "decode_failed"
    assert caught.value.method == "put"


def test_writes_that_do_not_read_values_work_on_a_corrupt_row(sql: Env) -> None:
    """heartbeat, patch and finish never decode stored values; a patch heals a column."""
    _raw(sql, "UPDATE flows_attempts SET outcome_json = ?", f'"\\udc00{SECRETISH}"')
    assert sql.attempts.heartbeat(RUN, STEP, 1, OWNER, 5) == Updated()
    assert sql.attempts.patch(ident(1), AttemptPatch(outcome="healed"), OWNER) == Patched()
    assert sql.attempts.get(ident(1)).outcome == "healed"
    assert sql.attempts.finish(FinishAttempt(RUN, STEP, 1, "done", 6), OWNER) == Finished()


def test_a_missing_table_is_persistence_failed(sql: Env) -> None:
    """A storage failure maps to persistence_failed with a payload-free cause."""
    _raw(sql, "DROP TABLE flows_attempts")
    for call in (
        lambda: sql.attempts.put(running(2), OWNER),
        lambda: sql.attempts.get(ident(1)),
        lambda: sql.attempts.heartbeat(RUN, STEP, 1, OWNER, 1),
        lambda: sql.attempts.finish(FinishAttempt(RUN, STEP, 1, "done", 1), OWNER),
        lambda: sql.attempts.patch(ident(1), AttemptPatch(), OWNER),
    ):
        with pytest.raises(AttemptStoreError) as caught:
            call()
        error = caught.value
        assert error.code == "persistence_failed"
        assert error.cause["run_store_code"] == "persistence_failed"
        assert error.__cause__ is None
        assert error.__suppress_context__
        assert "flows_attempts" not in error.message


def test_a_refused_write_is_constraint(sql: Env) -> None:
    """A constraint failure inside the write maps to constraint, and rolls back."""
    _raw(
        sql,
        "CREATE TRIGGER refuse BEFORE UPDATE ON flows_attempts"
        " BEGIN SELECT RAISE(ABORT, 'refused'); END",
    )
    with pytest.raises(AttemptStoreError) as caught:
        sql.attempts.heartbeat(RUN, STEP, 1, OWNER, 77, "new")
    assert caught.value.code == "constraint"
    assert caught.value.method == "heartbeat"
    _raw(sql, "DROP TRIGGER refuse")
    stored = sql.attempts.get(ident(1))
    assert (stored.heartbeat_at_ms, stored.checkpoint) == (None, "c")


def test_absent_columns_are_sql_null_and_null_is_json_text(sql: Env) -> None:
    """ABSENT is stored as SQL NULL; JSON null as the text 'null'; values canonically."""
    sql.attempts.put(running(2, error=None, outcome={"b": 1, "a": "\u00e9"}), OWNER)
    connection: sqlite3.Connection = sql.runs._connection  # type: ignore[attr-defined]
    row = connection.execute(
        "SELECT checkpoint_json, error_json, outcome_json, meta_json FROM flows_attempts"
        " WHERE attempt = 2"
    ).fetchone()
    assert row == (None, "null", '{"b":1,"a":"\u00e9"}', "{}")
    assert sql.attempts.get(ident(2)).checkpoint is ABSENT


@pytest.mark.parametrize("point", [Fault("statement", 0), Fault("commit")])
def test_an_injected_fault_rolls_the_attempt_write_back(sql: Env, point: Fault) -> None:
    """The fault seam covers attempt writes: a failed write leaves nothing."""
    before = sql.attempts.state()
    for call in (
        lambda: sql.attempts.put(running(2), OWNER),
        lambda: sql.attempts.heartbeat(RUN, STEP, 1, OWNER, 9, "x"),
        lambda: sql.attempts.finish(FinishAttempt(RUN, STEP, 1, "done", 9), OWNER),
        lambda: sql.attempts.patch(ident(1), AttemptPatch(meta=2), OWNER),
    ):
        plan = FaultPlan(point)
        sql.runs._install_faults(plan)  # type: ignore[attr-defined]
        try:
            with pytest.raises(AttemptStoreError) as caught:
                call()
        finally:
            sql.runs._install_faults(None)  # type: ignore[attr-defined]
        assert caught.value.code == "persistence_failed"
        assert plan.fired == [point]
        assert sql.attempts.state() == before


def test_a_fault_while_classifying_a_loss_is_persistence_failed(sql: Env) -> None:
    """A loss is classified by a second statement inside the same transaction;
    a fault there fails the operation rather than guessing an outcome."""
    for call in (
        lambda: sql.attempts.put(running(1), RIVAL),
        lambda: sql.attempts.heartbeat(RUN, STEP, 1, RIVAL, 9),
        lambda: sql.attempts.finish(FinishAttempt(RUN, STEP, 1, "done", 9), RIVAL),
        lambda: sql.attempts.patch(ident(1), AttemptPatch(), RIVAL),
    ):
        plan = FaultPlan(Fault("statement", 1))
        sql.runs._install_faults(plan)  # type: ignore[attr-defined]
        try:
            with pytest.raises(AttemptStoreError) as caught:
                call()
        finally:
            sql.runs._install_faults(None)  # type: ignore[attr-defined]
        assert caught.value.code == "persistence_failed"
        assert plan.fired == [Fault("statement", 1)]
        assert call() == FenceLost()


def test_transient_faults_are_retried_to_the_ordinary_outcome(sql: Env) -> None:
    """Busy faults below the retry budget replay the whole write, which then succeeds."""
    sql.runs._retry_policy = RetryPolicy(max_attempts=3, base_delay_ms=0, max_delay_ms=0)  # type: ignore[attr-defined]
    plan = FaultPlan(Fault("statement", 0, transient=True), Fault("commit", transient=True))
    sql.runs._install_faults(plan)  # type: ignore[attr-defined]
    try:
        assert sql.attempts.put(running(2), OWNER) == Inserted()
    finally:
        sql.runs._install_faults(None)  # type: ignore[attr-defined]
    assert len(plan.fired) == 2
    assert sql.attempts.get(ident(2)) == running(2)
    plan = FaultPlan(*[Fault("statement", 0, transient=True)] * 3)
    sql.runs._install_faults(plan)  # type: ignore[attr-defined]
    try:
        with pytest.raises(AttemptStoreError) as caught:
            sql.attempts.put(running(3), OWNER)
    finally:
        sql.runs._install_faults(None)  # type: ignore[attr-defined]
    assert caught.value.code == "persistence_failed"
    assert sql.attempts.get(ident(3)) is None


def test_two_stores_over_one_file_share_attempts_and_the_fence(tmp_path: Path) -> None:
    """Two opens of one file (as two processes would) see one attempt table, and
    a takeover seen through one store fences writes through the other."""
    clock = ManualClock(0)
    path = tmp_path / "shared.db"
    with runstore.open(path, clock=clock) as first, runstore.open(path, clock=clock) as second:
        env = Env("sqlite-file", clock, first, AttemptStore(first), AttemptStore)
        env.own()
        other = AttemptStore(second)
        assert env.attempts.put(running(1), OWNER) == Inserted()
        assert other.get(ident(1)) == running(1)
        assert other.heartbeat(RUN, STEP, 1, OWNER, 5) == Updated()
        env.take_over()
        assert other.heartbeat(RUN, STEP, 1, OWNER, 6) == FenceLost()
        assert other.heartbeat(RUN, STEP, 1, RIVAL, 6) == Updated()
        assert env.attempts.state() == other.state()


def test_attempts_survive_reopening_the_file(tmp_path: Path) -> None:
    """Attempts are durable: a reopened file reads them back unchanged."""
    clock = ManualClock(0)
    path = tmp_path / "durable.db"
    record = running(1, checkpoint={"page": 3}, outcome=None, meta={"k": [1.5, True]})
    with runstore.open(path, clock=clock) as runs:
        env = Env("sqlite-file", clock, runs, AttemptStore(runs), AttemptStore)
        env.own()
        env.attempts.put(record, OWNER)
    with runstore.open(path, clock=clock) as runs:
        assert AttemptStore(runs).state() == (record,)
