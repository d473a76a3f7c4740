"""The PostgreSQL dialect says what the SQLite one says, statement for statement.

Each backend keeps its SQL in its own folder under the same names: the run
store's queries, ``SqlConsensus``'s lease statements and ``AttemptStore``'s
statements. The shared code runs a name on whichever backend it is on, so a
name one backend lacks is a crash waiting for the first call. PostgreSQL must
also be told every parameter's type (a statement mentions each parameter it
is given), which ``_unused`` and the attempt statements' ``bind`` arrange.
"""

from __future__ import annotations

import re
from types import ModuleType

import pytest

from runstore.sqlite import _attempt_queries as sqlite_attempts
from runstore.sqlite import _lease_queries as sqlite_leases
from runstore.sqlite import _queries as sqlite_queries

postgres_queries = pytest.importorskip("runstore.postgres._queries")
postgres_leases = pytest.importorskip("runstore.postgres._lease_queries")
postgres_attempts = pytest.importorskip("runstore.postgres._attempt_queries")

PAIRS = [
    pytest.param(sqlite_queries, postgres_queries, id="run-store"),
    pytest.param(sqlite_leases, postgres_leases, id="leases"),
    pytest.param(sqlite_attempts, postgres_attempts, id="attempts"),
]


def public_names(module: ModuleType) -> set[str]:
    return {name for name in vars(module) if name.isupper() and not name.startswith("_")}


@pytest.mark.parametrize(("sqlite", "postgres"), PAIRS)
def test_both_backends_define_the_same_statement_names(
    sqlite: ModuleType, postgres: ModuleType
) -> None:
    """Every named statement exists on both backends, and nothing more."""
    assert public_names(sqlite) == public_names(postgres)
    assert public_names(sqlite), "no statements found"


def _parameters(text: str) -> set[int]:
    return {int(n) for n in re.findall(r"\$(\d+)", text)}


@pytest.mark.parametrize(("sqlite", "postgres"), PAIRS[:2])
def test_postgres_statements_mention_every_parameter_sqlite_numbers(
    sqlite: ModuleType, postgres: ModuleType
) -> None:
    """A PostgreSQL statement mentions $1..$n without a gap, where n is the
    highest ?n its SQLite twin uses: the shared code binds one tuple to both."""
    for name in public_names(sqlite):
        sqlite_text, postgres_text = getattr(sqlite, name), getattr(postgres, name)
        if not isinstance(sqlite_text, str) or not sqlite_text:
            continue
        if name.startswith("LIST_"):
            # Pieces of list_runs's assembled SELECT; LIST_PARAMETERS mentions
            # all eight (test_list_runs_plans runs every assembly).
            continue
        highest = max((int(n) for n in re.findall(r"\?(\d+)", sqlite_text)), default=0)
        assert _parameters(postgres_text) == set(range(1, highest + 1)), name


def test_attempt_statements_number_their_names_in_order() -> None:
    """``bind`` turns ``:name`` (casts left alone) into $1.. in order of first use."""
    text, values = postgres_attempts.bind(
        "SELECT :b::text, :a::bigint, :b::text", {"a": 1, "b": "x", "unused": 2}
    )
    assert text == "SELECT $1::text, $2::bigint, $1::text"
    assert values == ("x", 1)
