"""The tests' PostgreSQL: one throwaway cluster per run, a cloned database per test.

Without PostgreSQL binaries (or a reachable ``RUNSTORE_TEST_POSTGRES``) the
PostgreSQL tests skip with a reason that says how to enable them, and under
``CI=true`` they fail instead. Run as root, the server runs as ``nobody``.
Each test's database is a fresh clone of a migrated template with its own
source identity.
"""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import pytest

from runstore import ManualClock
from runstore.stateful._targets import _postgres as servers

from .. import _postgres


def test_without_binaries_the_cluster_says_how_to_get_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(servers, "_binary", lambda name: None)
    with pytest.raises(servers.Unavailable) as caught:
        servers.Cluster()
    assert servers.URL_VARIABLE in str(caught.value)
    assert "initdb" in str(caught.value)


def _unavailable() -> servers.Server:
    raise servers.Unavailable("no server here; set RUNSTORE_TEST_POSTGRES")


def test_without_a_server_the_tests_skip_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(servers, "server", _unavailable)
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="RUNSTORE_TEST_POSTGRES"):
        _postgres.require_server()


def test_under_ci_a_missing_server_fails_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(servers, "server", _unavailable)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true"):
        _postgres.require_server()


def test_each_database_is_a_fresh_clone_with_its_own_identity() -> None:
    postgres = pytest.importorskip("runstore.postgres")
    first, second = _postgres.database_url(), _postgres.database_url()
    assert first != second
    sources = []
    for url in (first, second):
        with postgres.open(url, clock=ManualClock(0)) as store:
            assert store.revision() == 0
            assert store.state().rows == ()
            query = "SELECT source FROM flows_run_source"
            sources.append(store._connection.execute(query).fetchone())
    assert sources[0] != sources[1]
    assert _postgres.require_server().clone_seconds
    assert _postgres.require_server().wait_seconds


def test_as_root_the_server_runs_as_nobody() -> None:
    server = _postgres.require_server()
    if server.cluster is None:
        pytest.skip("RUNSTORE_TEST_POSTGRES points at a server this run did not start")
    owner = Path(server.cluster.folder).stat().st_uid
    if os.geteuid() == 0:
        assert owner == pwd.getpwnam("nobody").pw_uid
    else:
        assert owner == os.geteuid()


def test_the_tests_cluster_lives_in_memory_where_a_tmpfs_has_room(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tests' cluster (its clones' files) is on a tmpfs with room to
    spare, else in the system's temporary folder."""
    server = _postgres.require_server()
    if server.cluster is None:
        pytest.skip("RUNSTORE_TEST_POSTGRES points at a server this run did not start")
    memory = servers._memory_folder()
    folder = Path(server.cluster.folder)
    if memory is None:
        assert not folder.is_relative_to(servers.MEMORY_FOLDER)
    else:
        assert folder.parent == Path(memory)
    monkeypatch.setattr(servers, "MEMORY_FOLDER", tmp_path / "absent")
    assert servers._memory_folder() is None
    monkeypatch.setattr(servers, "MEMORY_FOLDER", tmp_path)
    monkeypatch.setattr(servers, "MEMORY_FOLDER_FREE", 1 << 62)
    assert servers._memory_folder() is None
    monkeypatch.setattr(servers, "MEMORY_FOLDER_FREE", 0)
    assert servers._memory_folder() == str(tmp_path)
