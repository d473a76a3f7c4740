"""Where the suite caused a failure itself, it checks that the error's cause
says what failed (``FailureCauseMismatch``): a write failed by injected
faults (the fault rules, ``stateful/_checks/_faults.py``) and a row broken behind the
store's back (the column edits, ``stateful/_checks/_edits.py``). Each test plants
one bug in what a cause says, for the duration of the test, and the default
budget must report it (the bugs are gathered in ``PLANTED``, which
``benchmarks/zoo_detection.py`` also times); the honest stores pass these
checks in every conformance run (``tests/stateful/campaigns/test_conformance.py``,
the PostgreSQL runs in ``tests/postgres/test_postgres_conformance.py``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from runstore._boundary import is_identifier
from runstore._errors import DecodeFailedError, RunStoreError
from runstore._sql import _decode, _faults, _store
from runstore.attempts import _store as attempt_store
from runstore.consensus import ConsensusError, SqlConsensus
from runstore.sqlite import Fault, _tx
from runstore.stateful import (
    Capabilities,
    FailureCauseMismatch,
    attempt_comparison_for,
    conformance_machines,
)
from runstore.stateful._base._steps import Raised
from runstore.stateful._campaigns._budget import default_settings
from runstore.stateful._checks._faults import expected_attempt_fault_cause, expected_fault_cause
from runstore.stateful._checks._invariants import MISSING, check_cause
from runstore.stateful._targets._builtin import BUILTIN_TARGETS

from ... import _postgres
from ..._sqlite import in_memory_store_machine


def _adapter_machine() -> Any:
    """The run-store machine over SqlConsensus in the SQLite adapter on a
    file, the one whose raw-corruption rule makes the column edits."""
    return conformance_machines(consensus_factory=SqlConsensus)[1]


def _in_memory_machine() -> Any:
    """The run-store machine over the in-memory SQLite adapter, fault seam on."""
    return in_memory_store_machine()


def _attempt_machine() -> Any:
    """The attempt machine over the in-memory SQLite adapter, fault seam on."""
    target = BUILTIN_TARGETS["sqlite-sql"]
    assert target.store_factory is not None
    return attempt_comparison_for(
        target.store_factory, Capabilities(reopen=False, fault_injection=True), name="planted"
    )


def _postgres_machine() -> Any:
    """The run-store machine over PostgreSQL, on the general path (skipped
    without a server)."""
    from runstore.stateful._targets._postgres import postgres_store_factory

    _postgres.require_server()
    return conformance_machines(
        store_factory=postgres_store_factory(fast_path=False),
        capabilities=Capabilities(reopen=True, fault_injection=True),
    )[0]


# -- the expectations themselves ----------------------------------------------------


def test_a_lasting_fault_expects_the_injected_error_and_the_io_code() -> None:
    expected = expected_fault_cause([Fault("statement", 1)])
    assert expected["error"] == "InjectedFault"
    assert expected["database_code"] == "io"
    assert expected["attempts"] is MISSING
    assert "consensus_code" not in expected  # a statement may be the strategy's


def test_a_strategy_fault_expects_the_strategy_to_have_reported_it() -> None:
    assert expected_fault_cause([Fault("strategy", 0)])["consensus_code"] == "persistence_failed"
    assert expected_fault_cause([Fault("commit")])["consensus_code"] is MISSING


def test_transient_faults_past_the_budget_expect_the_attempts_counted() -> None:
    expected = expected_fault_cause([Fault("commit", transient=True)] * 3)
    assert expected["database_code"] == "busy"
    assert expected["attempts"] == 3
    assert expected_attempt_fault_cause([Fault("commit", transient=True)])["database_code"] == (
        "busy"
    )


def test_a_mismatch_shows_both_sides() -> None:
    cause = {"category": "persistence_failed", "error": "ConsensusError", "table_name": None}
    outcome = Raised("persistence_failed", "heartbeat", cause=cause)
    with pytest.raises(FailureCauseMismatch) as caught:
        check_cause(outcome, expected_fault_cause([Fault("strategy", 0)]), "heartbeat(...)")
    message = str(caught.value)
    assert "wrong: error, database_code, table_name, consensus_code" in message
    assert "expected: {" in message
    assert "store:    {" in message
    assert "'ConsensusError'" in message
    assert "'InjectedFault'" in message


def test_the_cause_is_kept_but_not_compared() -> None:
    assert Raised("constraint", "create", cause={"constraint": "run_id"}) == Raised(
        "constraint", "create"
    )
    assert "cause" not in repr(Raised("constraint", "create", cause={"x": 1}))


# -- planted bugs the machines must report ---------------------------------------------
#
# Each plant changes what one cause says, with ``monkeypatch`` (undone when the
# test ends); every one must fail with ``FailureCauseMismatch`` naming the
# field it got wrong.


def _cause_naming_the_strategy_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """The SQLite classifier names the error it was handed, not the database
    error behind it: a fault after a strategy call is reported as the
    strategy's ``ConsensusError``, not as the injected driver error."""
    classify = _tx.classify

    def names_the_wrapper(method: str, error: BaseException) -> RunStoreError:
        classified = classify(method, error)
        classified.cause["error"] = type(error).__name__  # the bug
        return classified

    monkeypatch.setattr(_tx, "classify", names_the_wrapper)


def _lost_database_code(monkeypatch: pytest.MonkeyPatch) -> None:
    """The SQLite classifier looks result codes up in a table that misses
    the I/O and busy codes: every such failure says ``unknown``."""
    monkeypatch.setattr(_tx, "_CODE_NAMES", {19: "constraint"})


def _seam_reporting_a_commit_fault_as_the_strategys(monkeypatch: pytest.MonkeyPatch) -> None:
    """The seam raises a commit fault the way a strategy reports a storage
    failure (``ConsensusError`` caused by the injected error): the write
    still fails whole, but its cause says the strategy failed."""

    def commit_as_strategy(self: Any) -> None:
        if not self.done and self.fault.point == "commit":
            injected = self._fire()
            raise ConsensusError("persistence_failed", "injected fault") from injected  # the bug

    monkeypatch.setattr(_faults.ArmedFault, "before_commit", commit_as_strategy)


def _decode_cause_misjudging_the_state(monkeypatch: pytest.MonkeyPatch) -> None:
    """A row refused for a broken claim says its (valid) state is not JSON."""
    monkeypatch.setattr(_decode, "_state_valid", lambda state: False)


def _decode_cause_losing_the_run_id(monkeypatch: pytest.MonkeyPatch) -> None:
    """A row refused for its shape names its run only when the last column
    (the state, which a listing does not read) is text."""
    decode_run = _decode.decode_run

    def from_the_last_column(method: str, row: Sequence[Any], *, stateless: bool = False) -> Any:
        try:
            return decode_run(method, row, stateless=stateless)
        except DecodeFailedError as error:
            if error.cause.get("stage") == "row-schema":
                error.cause["run_id"] = row[0] if is_identifier(row[-1]) else None  # the bug
            raise

    monkeypatch.setattr(_store, "decode_run", from_the_last_column)
    # A page's rows are checked together and, when one fails, decoded one by
    # one by the decoding module's own decode_run: planted there too.
    monkeypatch.setattr(_decode, "decode_run", from_the_last_column)


def _attempt_cause_without_the_database_code(monkeypatch: pytest.MonkeyPatch) -> None:
    """The attempt store translates a run-store failure but drops the
    database code from its cause."""
    translate = attempt_store._from_run_store

    def forgetful(method: str, error: RunStoreError) -> Any:
        translated = translate(method, error)
        translated.cause.pop("database_code", None)  # the bug
        return translated

    monkeypatch.setattr(attempt_store, "_from_run_store", forgetful)


def _postgres_cause_naming_a_table_for_a_fault(monkeypatch: pytest.MonkeyPatch) -> None:
    """The PostgreSQL classifier copies the table name whenever it is not
    text, so a failure outside any table names ``table_name: None``."""
    from runstore.postgres import _tx as pg_tx

    classify = pg_tx.classify

    def names_no_table(method: str, error: BaseException, **options: Any) -> RunStoreError:
        classified = classify(method, error, **options)
        if "table_name" not in classified.cause:
            classified.cause["table_name"] = None  # the bug
        return classified

    monkeypatch.setattr(pg_tx, "classify", names_no_table)


#: name -> (plant, the check that must fire, what builds the machine it runs
#: on, what the check's message must match, a smaller budget or None).
PLANTED: dict[
    str, tuple[Callable[[pytest.MonkeyPatch], None], str, Callable[[], Any], str, int | None]
] = {
    "cause_naming_the_strategy_error": (
        _cause_naming_the_strategy_error,
        "FailureCauseMismatch",
        _in_memory_machine,
        r"wrong: error\b",
        None,
    ),
    "lost_database_code": (
        _lost_database_code,
        "FailureCauseMismatch",
        _in_memory_machine,
        "wrong: database_code",
        None,
    ),
    "seam_reporting_a_commit_fault_as_the_strategys": (
        _seam_reporting_a_commit_fault_as_the_strategys,
        "FailureCauseMismatch",
        _in_memory_machine,
        "wrong: consensus_code",
        None,
    ),
    "decode_cause_misjudging_the_state": (
        _decode_cause_misjudging_the_state,
        "FailureCauseMismatch",
        _adapter_machine,
        "state_json_valid",
        None,
    ),
    "decode_cause_losing_the_run_id": (
        _decode_cause_losing_the_run_id,
        "FailureCauseMismatch",
        _adapter_machine,
        "run_id",
        None,
    ),
    "attempt_cause_without_the_database_code": (
        _attempt_cause_without_the_database_code,
        "FailureCauseMismatch",
        _attempt_machine,
        "database_code",
        None,
    ),
    # The test runs this one with 40 examples, not the default budget.
    "postgres_cause_naming_a_table_for_a_fault": (
        _postgres_cause_naming_a_table_for_a_fault,
        "FailureCauseMismatch",
        _postgres_machine,
        "table_name",
        40,
    ),
}


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_a_planted_bug_is_caught_by_its_check(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each planted bug fails its machine, under the default budget without
    shrinking, with ``FailureCauseMismatch`` naming the wrong field."""
    plant, expected, machine_for, match, max_examples = PLANTED[name]
    plant(monkeypatch)
    machine = machine_for()
    budget = default_settings(machine, shrink=False)
    if max_examples is not None:
        budget = settings(budget, max_examples=max_examples)
    with pytest.raises(AssertionError) as caught:
        run_state_machine_as_test(machine, settings=budget)
    assert type(caught.value).__name__ == expected, caught.value
    caught.match(match)
