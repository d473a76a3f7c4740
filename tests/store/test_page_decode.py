"""A page decoded column by column equals the same rows decoded one by one.

``decode_runs`` and ``decode_changes`` judge a page's rows together (issue
28, "Reads"); ``decode_run`` and ``decode_change`` judge one row. On any page
of rows of the types a driver yields (None, int, float, str, bytes, bool),
valid or corrupt, both paths give equal values, or raise the same error
(class, code, method, message and cause). Values stay frozen.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from runstore import RunRow, RunStoreError
from runstore._sql._decode import (
    _fits,
    _runs_fit,
    decode_change,
    decode_changes,
    decode_run,
    decode_runs,
)

LIMIT = 2**53 - 1

#: Values a driver may yield where a column was corrupted behind the store's
#: back: the edges of each rule (zero and one, the range's ends, floats that
#: compare equal to ints, empty, NUL, non-ASCII, surrogate and over-long text).
JUNK = st.sampled_from(
    [
        None,
        0,
        1,
        -1,
        LIMIT,
        LIMIT + 1,
        2**63,
        0.0,
        1.0,
        10.5,
        float("nan"),
        float("inf"),
        True,
        False,
        "",
        "x",
        "a\x00b",
        "é",
        "\ud800",
        "\U0001f600",
        "x" * 1024,
        "x" * 1025,
        "\U0001f600" * 512,
        "\U0001f600" * 513,
        b"",
        b"x",
        "running",
        "pending",
        "paused",
        "{}",
        "[1,",
        '{"a":1}',
    ]
)

#: Mostly ASCII, which the page checks judge; the rest makes the page fall
#: back to the row-by-row decoder, which must still answer the same.
IDENTIFIERS = st.sampled_from(["run-1", "run-2", "h", "n", "x" * 600] * 4 + ["é-run", "\U0001f600"])
TIMES = st.sampled_from([0, 1, 2, 1_000_000, LIMIT])
STATUSES = st.sampled_from(["pending", "running", "suspended", "completed", "failed", "cancelled"])
STATES = st.sampled_from(['{"k":1}', "[]", "0", '"text"'])


@st.composite
def run_rows(draw: st.DrawFn, stateless: bool, junk: bool = True) -> tuple[Any, ...]:
    """A valid run row (18 columns), then, unless ``junk`` is off, maybe one
    flaw: an owner that does not match the status, one column of the owner's
    or the claim's four present or missing alone, a column that may not be
    NULL missing, or one column replaced by junk or by a value that suits
    some other column."""
    flaws = ["none", "none", "none", "owner", "group", "missing", "column"]
    flaw = draw(st.sampled_from(flaws)) if junk else "none"
    status = draw(STATUSES)
    owned = (status != "running") if flaw == "owner" else status == "running"
    claimed = draw(st.booleans())

    def maybe(values: st.SearchStrategy[Any]) -> Any:
        return draw(st.none() | values)

    row = [
        draw(IDENTIFIERS),
        status,
        draw(TIMES),
        maybe(TIMES),
        maybe(TIMES),
        draw(IDENTIFIERS) if owned else None,
        draw(TIMES) if owned else None,
        draw(IDENTIFIERS) if owned else None,
        draw(TIMES) if owned else None,
        draw(IDENTIFIERS) if claimed else None,
        draw(TIMES) if claimed else None,
        draw(IDENTIFIERS) if claimed else None,
        draw(TIMES) if claimed else None,
        maybe(IDENTIFIERS),
        maybe(TIMES),
        maybe(IDENTIFIERS),
        maybe(TIMES),
        None if stateless else draw(STATES),
    ]
    if flaw == "group":
        index = draw(st.sampled_from([5, 6, 7, 8, 9, 10, 11, 12]))
        texts = index in (5, 7, 9, 11)
        row[index] = draw(IDENTIFIERS if texts else TIMES) if row[index] is None else None
    elif flaw == "missing":
        row[draw(st.sampled_from([0, 1, 2, 17]))] = None
    elif flaw == "column":
        index = draw(st.integers(0, 17))
        row[index] = draw(JUNK | st.none() | STATUSES | IDENTIFIERS | TIMES)
    return tuple(row)


def good_rows(stateless: bool) -> st.SearchStrategy[tuple[Any, ...]]:
    """Valid rows whose identifiers are ASCII and fit the quick checks."""
    return run_rows(stateless, junk=False).filter(
        lambda row: all(
            value is None or (value.isascii() and len(value) <= 1024)
            for value in (row[0], row[5], row[7], row[9], row[11], row[13], row[15])
        )
    )


@st.composite
def pages(draw: st.DrawFn) -> tuple[bool, list[tuple[Any, ...]]]:
    stateless = draw(st.booleans())
    return stateless, draw(st.lists(run_rows(stateless), max_size=4))


def one_by_one(call: Any) -> tuple[str, Any]:
    try:
        return "values", call()
    except RunStoreError as error:
        return "error", (type(error), error.code, error.method, str(error), error.cause)


GOOD = ("run-a", "pending", 5) + (None,) * 15
OWNED = ("run-b", "running", 5, 6, None, "h", 1, "n", 7) + (None,) * 9
CLAIMED = ("run-c", "pending", 5, None, None, None, None, None, None, "h", 2, "n", 8) + (None,) * 5


def flawed(row: tuple[Any, ...], **columns: Any) -> tuple[bool, list[tuple[Any, ...]]]:
    """A stateless page: ``GOOD``, then ``row`` with ``columns`` (``c<index>``) replaced."""
    changed = list(row)
    for name, value in columns.items():
        changed[int(name[1:])] = value
    return True, [GOOD, tuple(changed)]


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pages())
# Each edge by name, whatever the draws reach: a flaw the page checks must see.
@example(flawed(GOOD, c1="running"))
@example(flawed(OWNED, c1="suspended"))
@example(flawed(OWNED, c8=None))
@example(flawed(OWNED, c6=None))
@example(flawed(OWNED, c7=None))
@example(flawed(GOOD, c8=5))
@example(flawed(CLAIMED, c12=None))
@example(flawed(CLAIMED, c10=None))
@example(flawed(CLAIMED, c11=None))
@example(flawed(GOOD, c12=5))
@example(flawed(GOOD, c0=None))
@example(flawed(GOOD, c2=None))
@example(flawed(GOOD, c2=True))
@example(flawed(OWNED, c6=True))
@example(flawed(GOOD, c2=1.0))
@example(flawed(GOOD, c2=0.0))
@example(flawed(GOOD, c2=-1))
@example(flawed(GOOD, c2=LIMIT + 1))
@example(flawed(GOOD, c0=""))
@example(flawed(GOOD, c0="a\x00b"))
@example(flawed(GOOD, c0="x" * 1025))
@example(flawed(GOOD, c13="\ud800"))
@example(flawed(GOOD, c1=b"pending"))
@example(flawed(GOOD, c1="paused"))
@example(flawed(GOOD, c17="{}"))
@example((False, [(*GOOD[:17], "{}"), (*GOOD[:17], "[1,")]))
@example((False, [(*GOOD[:17], "{}"), (*GOOD[:17], None)]))
def test_a_page_decodes_as_its_rows_do(page: tuple[bool, list[tuple[Any, ...]]]) -> None:
    """decode_runs gives decode_run's values row for row, or its first error."""
    stateless, rows = page
    expected = one_by_one(
        lambda: [decode_run("list_runs", row, stateless=stateless) for row in rows]
    )
    got = one_by_one(lambda: decode_runs("list_runs", rows, stateless=stateless))
    assert got == expected
    if got[0] == "values":
        for value in got[1]:
            assert type(value) is RunRow
            # Same fields, same types (an int where an int was, never a bool).
            assert [type(v) for v in attrs.astuple(value, recurse=False)] == [
                type(v) for v in attrs.astuple(expected[1][got[1].index(value)], recurse=False)
            ]


CHANGE_VALUES = st.sampled_from(
    [
        "run-1",
        "é",
        "",
        "a\x00b",
        "x" * 1025,
        0,
        1,
        2,
        -1,
        LIMIT,
        LIMIT + 1,
        1.0,
        True,
        False,
        None,
        b"x",
    ]
)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["run-1", "run-2"]) | CHANGE_VALUES,
            st.sampled_from([1, 7, LIMIT]) | CHANGE_VALUES,
            st.sampled_from([0, 1]) | CHANGE_VALUES,
        ),
        max_size=5,
    )
)
@example([("run-1", 1, 0), ("run-2", 2, 2)])
@example([("run-1", 1, 0), ("run-2", True, 1)])
@example([("run-1", 1, 0), ("run-2", 2.0, 1)])
@example([("run-1", 1, 0), ("", 2, 1)])
@example([("run-1", 1, 0), ("run-2", None, 1)])
@example([("run-1", 0, 0), ("run-2", -1, 1)])
def test_a_change_page_decodes_as_its_rows_do(rows: list[tuple[Any, Any, Any]]) -> None:
    """decode_changes gives decode_change's values row for row, or its first error."""
    expected = one_by_one(lambda: [decode_change("changes", row) for row in rows])
    got = one_by_one(lambda: decode_changes("changes", rows))
    assert got == expected
    if got[0] == "values":
        assert [type(c.revision) for c in got[1]] == [type(c.revision) for c in expected[1]]
        assert all(type(c.deleted) is bool for c in got[1])


@settings(max_examples=100, deadline=None)
@given(st.booleans(), st.data())
def test_a_page_of_good_rows_takes_the_column_checks(stateless: bool, data: st.DataObject) -> None:
    """Good rows with ASCII identifiers pass the column checks (the page path
    is taken, not only its fallback)."""
    rows = data.draw(st.lists(good_rows(stateless), min_size=1, max_size=5))
    columns = [*zip(*rows, strict=True)]
    assert _fits(_runs_fit, columns, stateless)


def test_values_from_a_page_are_frozen() -> None:
    """A row built by the page decoder refuses assignment, as every value does."""
    (value,) = decode_runs("list_runs", [GOOD], stateless=True)
    assert value == decode_run("list_runs", GOOD, stateless=True)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        value.status = "running"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("column", "value", "stage"),
    [
        (2, -1, "row-schema"),
        (1, "paused", "row-schema"),
        (0, "", "row-schema"),
        (13, "a\x00b", "row-schema"),
        (2, True, "row-schema"),
        (2, 10.0, "row-schema"),
        (8, 5, "invariants"),
    ],
)
def test_a_corrupt_row_in_a_page_is_refused_as_alone(column: int, value: Any, stage: str) -> None:
    """One corrupt row among good ones: the page is refused with the error the
    row alone gets (decode_failed, the same stage and cause)."""
    bad = list(GOOD)
    bad[0] = "run-b"
    bad[column] = value
    rows = [GOOD, tuple(bad), GOOD]
    with pytest.raises(RunStoreError) as alone:
        decode_run("list_runs", tuple(bad), stateless=True)
    with pytest.raises(RunStoreError) as paged:
        decode_runs("list_runs", rows, stateless=True)
    assert paged.value.code == alone.value.code == "decode_failed"
    assert paged.value.cause == alone.value.cause
    assert paged.value.cause["stage"] == stage
    assert str(paged.value) == str(alone.value)
