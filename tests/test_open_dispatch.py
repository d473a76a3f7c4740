"""``runstore.open`` dispatches on its target: a path (or ``:memory:``) opens
SQLite, a ``postgresql://`` or ``postgres://`` URL is PostgreSQL's. Until the
PostgreSQL store passes the conformance suite, a URL is refused with
``invalid_run``, and the refusal never shows the URL's password."""

from __future__ import annotations

import traceback

import pytest

import runstore
from runstore import ManualClock, RunStoreError, SqliteRunStore

PASSWORD = "pw-7f3a9c1e"


@pytest.mark.parametrize(
    "url",
    [
        f"postgresql://app:{PASSWORD}@db.example:5432/runs",
        f"postgres://app:{PASSWORD}@db.example/runs?sslmode=require",
        f"POSTGRESQL://app@db.example/runs?password={PASSWORD}",
    ],
)
def test_a_postgres_url_is_refused_without_its_password(url: str) -> None:
    """Refused with invalid_run naming the target; no password in any text."""
    with pytest.raises(RunStoreError) as caught:
        runstore.open(url, clock=ManualClock(0))
    assert caught.value.code == "invalid_run"
    assert caught.value.cause["field"] == "target"
    shown = "".join(traceback.format_exception(caught.value)) + repr(caught.value)
    assert PASSWORD not in shown


def test_a_path_still_opens_sqlite() -> None:
    """Everything else is SQLite's, as before."""
    with runstore.open(":memory:", clock=ManualClock(0)) as store:
        assert isinstance(store, SqliteRunStore)
        assert store.dialect == "sqlite"
