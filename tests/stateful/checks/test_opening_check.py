"""The opening check (``runstore.stateful._checks._opening``) passes on the shipped
``runstore.open`` and rejects each deliberately broken open with the check
named for it.

A broken open is not a strategy or a ``(clock, path)`` store factory, so it
cannot live in ``tests/zoo``: each test plants one bug with ``monkeypatch``
(undone when the test ends) and runs the machine under its default budget
without shrinking, as ``tests/stateful/campaigns/test_zoo.py`` does.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis.stateful import run_state_machine_as_test

import runstore
from runstore import ManualClock, UnsupportedDatabaseError
from runstore._sql._faults import RetryPolicy
from runstore.consensus import LocalConsensus, SqlConsensus
from runstore.model import ModelRunStore
from runstore.sqlite import _migrations, _readonly
from runstore.sqlite import _open as sqlite_open
from runstore.sqlite import _tx as sqlite_tx
from runstore.stateful import OPENING_CHECKS, OpeningCheck, conformance_machines, opening_check_for
from runstore.stateful._campaigns._budget import default_settings, machine_kind
from runstore.stateful._checks import _opening


def test_migrate_false_refuses_an_older_rollback_mode_file_as_it_is(tmp_path: Path) -> None:
    """The refusal comes from the read-only look: the file is not switched
    to WAL (a write to its header) before it is refused. The opening check
    found this (``OpenLeftTrace``)."""
    path = tmp_path / "old.db"
    connection = sqlite3.connect(path, isolation_level=None)
    _migrations.apply(connection, 3)
    connection.close()
    before = path.read_bytes()
    with pytest.raises(UnsupportedDatabaseError) as caught:
        runstore.open(path, migrate=False)
    assert caught.value.cause["stage"] == "needs-migration"
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["old.db"]


# -- the check itself: clean on the shipped open, and each planted bug caught ------


def _run_default_budget(consensus: Any = SqlConsensus) -> None:
    machine = opening_check_for(consensus, name="planted")
    run_state_machine_as_test(machine, settings=default_settings(machine, shrink=False))


@pytest.mark.parametrize("consensus", [SqlConsensus, LocalConsensus])
def test_the_shipped_open_passes(consensus: Any) -> None:
    """Under its default budget the check passes on the shipped open."""
    _run_default_budget(consensus)


def test_a_sqlite_store_gets_the_opening_check_last() -> None:
    """A strategy alone, and a SQLite store factory, get the check after the
    other machines; a store that is not the SQLite adapter does not."""
    machines = conformance_machines(consensus_factory=SqlConsensus)
    assert machine_kind(machines[-1]) == "opening"
    assert issubclass(machines[-1], OpeningCheck)

    def in_memory(clock: ManualClock, path: Path) -> Any:
        return runstore.open(":memory:", clock=clock, consensus=LocalConsensus())

    machines = conformance_machines(store_factory=in_memory)
    assert issubclass(machines[-1], OpeningCheck)
    assert machines[-1].consensus_factory is LocalConsensus
    model = conformance_machines(store_factory=lambda clock, path: ModelRunStore(clock=clock))
    assert not any(issubclass(machine, OpeningCheck) for machine in model)


def test_the_opening_checks_are_named_assertion_errors() -> None:
    assert len(set(OPENING_CHECKS)) == len(OPENING_CHECKS) == 8
    assert all(issubclass(check, AssertionError) for check in OPENING_CHECKS)


def _read_only_opens_read_write(monkeypatch: pytest.MonkeyPatch) -> None:
    """read_only=True opens an ordinary read-write store (which migrates)."""

    def read_write(text: str, clock: Any, consensus: Any) -> Any:
        return sqlite_open.open(text, clock=clock, consensus=consensus)

    monkeypatch.setattr(sqlite_open, "_open_read_only", read_write)


def _read_only_forgets_its_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    """A read-only store's writes are not refused up front: they reach the
    read-only connection, which fails them with another stage."""
    original = sqlite_open._open_read_only

    def forgetful(text: str, clock: Any, consensus: Any) -> Any:
        store = original(text, clock, consensus)
        store._tm.read_only = False
        return store

    monkeypatch.setattr(sqlite_open, "_open_read_only", forgetful)


def _created_with_the_umask(monkeypatch: pytest.MonkeyPatch) -> None:
    """A new file is created with the process umask and never tightened."""
    monkeypatch.setattr(sqlite_open, "_tighten", lambda real, suffix: None)

    def create(real: str) -> tuple[os.stat_result, bool]:
        if not os.path.exists(real):
            os.close(os.open(real, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666))
        return os.stat(real), False

    monkeypatch.setattr(sqlite_open, "_stat_or_create", create)


def _migrate_false_migrates(monkeypatch: pytest.MonkeyPatch) -> None:
    """migrate=False is ignored: files are created and migrated as usual."""
    prepare, migrate = sqlite_open._prepare, sqlite_open._migrate
    monkeypatch.setattr(sqlite_open, "_prepare", lambda real, create=True: prepare(real))
    monkeypatch.setattr(
        sqlite_open, "_migrate", lambda connection, allowed=True: migrate(connection)
    )


def _refusals_swap_their_words(monkeypatch: pytest.MonkeyPatch) -> None:
    """The refusal of a database needing migration names the other option."""
    original = sqlite_open.needs_migration
    monkeypatch.setattr(
        sqlite_open,
        "needs_migration",
        lambda pending, *, read_only: original(pending, read_only=not read_only),
    )


def _reader_never_follows(monkeypatch: pytest.MonkeyPatch) -> None:
    """A read-only store opened on a quiet file keeps reading it as it was
    (its immutable connection is never replaced when a writer arrives)."""
    monkeypatch.setattr(_readonly.ImmutableReader, "_moved", lambda self: False)


def _no_retry_while_locked(monkeypatch: pytest.MonkeyPatch) -> None:
    """Open gives up at the first SQLITE_BUSY instead of waiting."""
    step = sqlite_open._step
    once = RetryPolicy(max_attempts=1)
    monkeypatch.setattr(sqlite_open, "_step", lambda stage, fn, policy=once: step(stage, fn, once))


def _foreign_header_called_schema(monkeypatch: pytest.MonkeyPatch) -> None:
    """A file that is not SQLite is called 'not a runstore database'."""
    failure = sqlite_open._failure
    monkeypatch.setattr(
        sqlite_open,
        "_failure",
        lambda stage, error: failure("open" if stage == "inspect" else stage, error),
    )


def _reader_gives_up_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A read-only store's read gives up at the first transient failure
    (another connection holding the file exclusively) instead of waiting."""
    original = sqlite_open._open_read_only

    def impatient(text: str, clock: Any, consensus: Any) -> Any:
        store = original(text, clock, consensus)
        store._tm.retry = RetryPolicy(max_attempts=1)
        return store

    monkeypatch.setattr(sqlite_open, "_open_read_only", impatient)


def _changed_file_not_transient(monkeypatch: pytest.MonkeyPatch) -> None:
    """A read-only store's read that finds the file changing under it fails
    at once instead of being repeated (``FileChanged`` no longer transient)."""
    transient = sqlite_tx.is_transient
    monkeypatch.setattr(
        sqlite_tx,
        "is_transient",
        lambda error: False if isinstance(error, sqlite_tx.FileChanged) else transient(error),
    )


def _in_the_unprivileged_opener(monkeypatch: pytest.MonkeyPatch, name: str, value: int) -> None:
    """Set ``_open.NAME`` here and in the child the check opens as ``nobody``
    with (when the tests run as root), which imports runstore afresh."""
    monkeypatch.setattr(sqlite_open, name, value)
    patch = f"import runstore.sqlite._open as planted\nplanted.{name} = {value}\n"
    child = _opening._AS_USER.replace("import runstore\n", f"import runstore\n{patch}", 1)
    assert child != _opening._AS_USER
    monkeypatch.setattr(_opening, "_AS_USER", child)


def _read_only_called_recovery(monkeypatch: pytest.MonkeyPatch) -> None:
    """A plain SQLITE_READONLY (a -wal this user may not write) is read as
    SQLITE_READONLY_RECOVERY, so it is blamed on a killed writer's -wal."""
    _in_the_unprivileged_opener(monkeypatch, "_READONLY_RECOVERY", sqlite_open._READONLY)


def _folder_called_permissions(monkeypatch: pytest.MonkeyPatch) -> None:
    """SQLITE_READONLY_DIRECTORY (a journal the folder cannot take) is not
    recognized, so it is reported as a file this user may not write."""
    _in_the_unprivileged_opener(monkeypatch, "_READONLY_DIRECTORY", -1)


PLANTED = {
    "read_only_opens_read_write": (_read_only_opens_read_write, "OpenLeftTrace"),
    "read_only_forgets_its_mode": (_read_only_forgets_its_mode, "ReadOnlyWriteAccepted"),
    "created_with_the_umask": (_created_with_the_umask, "FileModeViolation"),
    "migrate_false_migrates": (_migrate_false_migrates, "OpenRefusalMismatch"),
    "refusals_swap_their_words": (_refusals_swap_their_words, "OpenRefusalMismatch"),
    "reader_never_follows": (_reader_never_follows, "ReadOnlyViewMismatch"),
    "no_retry_while_locked": (_no_retry_while_locked, "OpenFailed"),
    "foreign_header_called_schema": (_foreign_header_called_schema, "OpenRefusalMismatch"),
    "reader_gives_up_at_once": (_reader_gives_up_at_once, "LockedReadFailed"),
    # The immutable read of a file held exclusively sees the file change.
    "changed_file_not_transient": (_changed_file_not_transient, "LockedReadFailed"),
    "read_only_called_recovery": (_read_only_called_recovery, "PermissionRefusalMismatch"),
    "folder_called_permissions": (_folder_called_permissions, "PermissionRefusalMismatch"),
}


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_a_planted_bug_is_caught_by_its_check(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each broken open fails the check, under its default budget, with the
    check named for it."""
    plant, expected = PLANTED[name]
    plant(monkeypatch)
    with pytest.raises(AssertionError) as caught:
        _run_default_budget()
    assert type(caught.value).__name__ == expected, caught.value


_UNPRIVILEGED_CHECK = (
    """
import json, os, shutil, sys, tempfile
import runstore
from runstore.consensus import SqlConsensus
from runstore.stateful._checks import _opening
uid, gid = int(sys.argv[1]), int(sys.argv[2])
"""
    + _opening.DROP_TO_USER
    + """machine = _opening.opening_check_for(SqlConsensus, name="unprivileged")()
try:
    found = machine._users_findings()
finally:
    machine.teardown()
print(json.dumps(found))
"""
)


@pytest.mark.processes
@pytest.mark.timeout(120)
def test_an_unprivileged_check_opens_in_process_with_the_same_findings() -> None:
    """Run by a user who is not root, the check makes the same files with
    modes alone (its own files, 0444: SQLite would make an empty -wal its
    owner's again) and opens them in-process; each open gives what the
    child of a root check reports. Run as ``nobody`` here when the tests
    run as root."""
    import json
    import pwd
    import subprocess
    import sys

    if os.geteuid() != 0:
        pytest.skip("the check itself runs unprivileged here: the planted tests cover it")
    entry = pwd.getpwnam("nobody")
    done = subprocess.run(
        [sys.executable, "-c", _UNPRIVILEGED_CHECK, str(entry.pw_uid), str(entry.pw_gid)],
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found is not None
    assert [wanted for _, wanted, _ in found] == list(_opening._USERS_EXPECTED)
    for what, wanted, got in found:
        assert _opening._matches(wanted, got), (what, wanted, got)


@pytest.mark.processes
def test_a_root_check_judges_the_runstore_its_child_imports(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The child that opens as ``nobody`` imports runstore afresh: from a
    checkout that moved on while a long test run was in flight, it knows
    migrations this process never loaded. It makes the files it opens
    itself, so a database this process made is never judged by a newer
    runstore (which refused it as needing migration 2009, a false alarm).
    Here this process knows one migration fewer than the code on disk."""
    if os.geteuid() != 0:
        pytest.skip("only a check run as root opens in a child interpreter")
    monkeypatch.setattr(_migrations, "MIGRATIONS", _migrations.MIGRATIONS[:-1])
    machine = opening_check_for(SqlConsensus, name="older-process")()
    try:
        machine._open_as_a_user_who_may_not_write()
    finally:
        machine.teardown()
