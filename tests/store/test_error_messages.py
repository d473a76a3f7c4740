"""What error messages say: the argument and the rule, never the value.

An uncaught error shows only its message in a traceback or a log line, so the
message of an ``invalid_run`` error names the refused argument and the rule it
broke, and a ``constraint`` error of ``create`` says which constraint in words
(the run exists, the parent is missing, the round is taken). Neither ever
quotes a value: run state and identifiers may hold credentials.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from runstore import OwnerId, RunSnapshot, RunStore, RunStoreError

MARKER = "sk-live-MARKER-4711"
ME = OwnerId("h", 1, "n")
PENDING = RunSnapshot("pending", None, None)

CASES: list[tuple[str, str, Callable[[RunStore], Any]]] = [
    ("claim", "expected", lambda s: s.claim("x", ("pending", MARKER, None), ME, 0)),
    ("create", "run_id", lambda s: s.create(MARKER.encode(), "{}")),
    ("create", "state_json", lambda s: s.create("y", '{"k": "' + MARKER + '", "n": NaN}')),
    ("heartbeat", "owner", lambda s: s.heartbeat("x", ("h", 1, MARKER), 0)),
    ("heartbeat", "now_ms", lambda s: s.heartbeat("x", ME, -4711)),
    ("transition_owned", "to_status", lambda s: s.transition_owned("x", ME, MARKER)),
    ("steal", "evidence", lambda s: s.steal("x", PENDING, ME, 0, MARKER)),
    ("heartbeat", "owner.nonce", lambda s: s.heartbeat("x", OwnerId("h", 1, MARKER * 100), 0)),
]


@pytest.mark.parametrize(("method", "argument", "call"), CASES, ids=[c[1] for c in CASES])
def test_invalid_run_names_the_argument_and_the_rule(
    store: RunStore, method: str, argument: str, call: Callable[[RunStore], Any]
) -> None:
    """``invalid_run: <method>: <argument> <rule>``; the value is in neither str nor repr."""
    store.create("x", "{}")
    with pytest.raises(RunStoreError) as caught:
        call(store)
    error = caught.value
    assert error.code == "invalid_run"
    assert error.method == method
    field = error.cause["field"]
    assert argument.startswith(field) or field.startswith(argument)
    assert str(error) == f"invalid_run: {method}: {field} {error.cause['detail']}"
    for text in (str(error), repr(error)):
        assert MARKER not in text
        assert "4711" not in text


@pytest.mark.parametrize(
    ("options", "constraint", "words"),
    [
        ({}, "run_id", "a run with this id already exists"),
        ({"parent_run_id": "nobody"}, "parent_run_id", "the parent run does not exist"),
        (
            {"lineage_id": "lin", "round_ordinal": 1},
            "lineage_round",
            "the lineage already has a run at this round",
        ),
    ],
    ids=["duplicate-id", "missing-parent", "taken-round"],
)
def test_a_refused_create_says_which_constraint(
    store: RunStore, options: dict[str, Any], constraint: str, words: str
) -> None:
    """A duplicate id says the run exists; a missing parent and a taken round say so too."""
    store.create("r", "{}", lineage_id="lin", round_ordinal=1)
    run_id = "r" if constraint == "run_id" else "s"
    with pytest.raises(RunStoreError) as caught:
        store.create(run_id, '{"secret": "' + MARKER + '"}', **options)
    error = caught.value
    assert (error.code, error.method) == ("constraint", "create")
    assert error.cause["constraint"] == constraint
    assert str(error) == f"constraint: create: {words}"
    assert MARKER not in repr(error)
