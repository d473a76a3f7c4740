"""``runstore.open`` dispatches on its target: a path (or ``:memory:``) opens
SQLite, a ``postgresql://`` or ``postgres://`` URL opens PostgreSQL, with the
same keyword arguments (``clock``, ``consensus``) and each backend's own."""

from __future__ import annotations

import urllib.parse

import pytest

import runstore
from runstore import ManualClock, RunStoreError, SqliteRunStore
from runstore.consensus import LocalConsensus

from .. import _postgres


def test_a_path_opens_sqlite() -> None:
    with runstore.open(":memory:", clock=ManualClock(0)) as store:
        assert isinstance(store, SqliteRunStore)
        assert store.dialect == "sqlite"


@pytest.mark.parametrize("scheme", ["postgresql", "postgres", "PostgreSQL"])
def test_a_url_opens_postgres(scheme: str) -> None:
    """Either scheme, any case; schema= reaches the PostgreSQL backend."""
    postgres = pytest.importorskip("runstore.postgres")
    url = _postgres.database_url()
    target = scheme + url[url.index("://") :]
    with runstore.open(target, clock=ManualClock(3), schema="dispatched") as store:
        assert isinstance(store, postgres.PostgresRunStore)
        assert store.dialect == "postgresql"
        assert store.schema == "dispatched"
        store.create("r", "{}")
        assert store.get("r").created_at_ms == 3


def test_local_consensus_is_refused_for_a_url() -> None:
    url = _postgres.database_url()
    with pytest.raises(RunStoreError) as caught:
        runstore.open(url, consensus=LocalConsensus())
    assert caught.value.code == "invalid_run"


def test_a_file_name_that_merely_mentions_postgres_is_sqlite(tmp_path: object) -> None:
    """Only a scheme followed by :// is a URL."""
    name = urllib.parse.quote("postgresql-runs.db")
    with runstore.open(f"{tmp_path}/{name}", clock=ManualClock(0)) as store:
        assert store.dialect == "sqlite"
