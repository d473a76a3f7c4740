"""The opening check: what ``runstore.open`` promises about the files it opens.

The other machines start every file-backed example from a copy of a migrated
template, so they never see open create, secure, refuse or migrate a file.
``OpeningCheck`` (built by ``opening_check_for``) does, on files of its own
in a scratch folder, with the strategy under test passed to every open:

- a new file, and an empty one, becomes a migrated database whose file,
  ``-wal`` and ``-shm`` are 0600 whatever the umask (a permissive one is set
  around the open and put back); an existing database keeps its mode;
- a ``read_only=True`` store of the live database reads what the read-write
  store reads (state, ``get``, ``list_runs``, revision, changes, ownership
  facts), also once a writer arrives after it opened; each of its write
  operations raises ``persistence_failed`` with ``cause["stage"] ==
  "read-only"``; opened on a file nobody holds, it creates, removes and
  changes nothing beside the file (bytes and modes);
- ``migrate=False`` and ``read_only=True`` refuse a missing file, an empty
  one and a database of an older schema with the documented stage and
  pending steps, each in its own words (``read_only=True`` is not
  ``migrate=False``), and ``read_only=True`` refuses ``:memory:``;
- a file that is not SQLite, a corrupt one, a SQLite file that is not ours
  and a newer schema are refused with ``UnsupportedDatabaseError`` and the
  stage that says why, the file left exactly as it was;
- two threads opening one new file at once both succeed, and an opener
  waits out another connection that holds the file's lock for a short while
  (a new file held exclusively, an empty database mid-write, an older
  database being migrated); the schema is migrated once.

Every failure is an ``AssertionError`` subclass in ``OPENING_CHECKS``. The
lock is held for ``HOLD_S`` of real time (a holder that is descheduled; no
lease is timed by it) and every wait is bounded by ``WAIT_S`` (the child
that opens as another user by ``CHILD_WAIT_S``): bounds on a hang, far
above what a loaded machine takes.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar, Final

import attrs
from hypothesis import note
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from runstore._clock import ManualClock
from runstore._errors import RunStoreError
from runstore._values import LivenessEvidence, OwnerId, RunSnapshot

from .._base._domain import START_MS
from .._base._programs import programs_independent_of_callers_code
from .._targets._builtin import ConsensusFactory
from .._targets._probe import probe_store
from ._invariants import InvariantViolation


class OpeningViolation(InvariantViolation):
    """Base of every opening check's failure; the subclass names the check."""


class FileModeViolation(OpeningViolation):
    """A database an open created (from nothing or from an empty file), or
    its ``-wal``/``-shm``, is not 0600; or an open changed the mode of an
    existing database."""


class OpenLeftTrace(OpeningViolation):
    """An open that must write nothing (``read_only=True``, or one that is
    refused) created, removed or changed a file beside it, or the file."""


class OpenRefusalMismatch(OpeningViolation):
    """A file open must refuse was opened, or refused with another error,
    code, ``cause["stage"]``, pending steps or wording than documented."""


class OpenFailed(OpeningViolation):
    """An open that must succeed raised or did not finish within the bound,
    or left a schema other than every migration applied once."""


class ReadOnlyViewMismatch(OpeningViolation):
    """A read-only store read something else than the read-write store of the
    same file (or than the file held when its last writer closed)."""


class ReadOnlyWriteAccepted(OpeningViolation):
    """A write operation of a read-only store did not raise
    ``persistence_failed`` with ``cause["stage"] == "read-only"``, or
    changed what the file holds."""


class LockedReadFailed(OpeningViolation):
    """A read-only store's read while another connection held the file
    exclusively raised instead of waiting until it let go, or then read
    something else than the file holds."""


class PermissionRefusalMismatch(OpeningViolation):
    """An open by a user who may not write the database's folder (or one of
    its files) was refused with another error, code or cause than the one
    that says which file it could not use, or a read-only open of a file it
    may read was refused."""


OPENING_CHECKS: tuple[type[OpeningViolation], ...] = (
    FileModeViolation,
    OpenLeftTrace,
    OpenRefusalMismatch,
    OpenFailed,
    ReadOnlyViewMismatch,
    ReadOnlyWriteAccepted,
    LockedReadFailed,
    PermissionRefusalMismatch,
)
"""The opening check's failure classes, each an ``OpeningViolation``, in the order of the docs'
table."""

#: How long a lock holder keeps the file (six of open's 50 ms busy waits).
HOLD_S: Final = 0.3
#: The longest any open of this check may take before it counts as hung.
WAIT_S: Final = 20.0
#: The longest the child that opens as another user (``_AS_USER``) may take
#: before it counts as hung. It starts an interpreter and imports runstore
#: and this suite (compiling them afresh where no bytecode is kept), then
#: makes and opens a few files: about 2 s on a 2-core machine at load 9,
#: several times that under heavier load. A bound on a hang, not on speed.
CHILD_WAIT_S: Final = 300.0
#: How long an exclusive holder keeps the file from a read-only store (whose
#: reads retry for up to 5 s).
HOLD_READ_S: Final = 0.05

_RUNS: Final = ("a", "b", "c")
_OWNERS: Final = (OwnerId("h1", 1, "n0"), OwnerId("h2", 2, "n1"))
_SIDES: Final = ("-wal", "-shm")
_PRIVATE: Final = 0o600


def _open(path: Path | str, **options: Any) -> Any:
    import runstore

    return runstore.open(path, **options)


def _mode(name: str | Path) -> int:
    return stat.S_IMODE(os.stat(name).st_mode)


def _look(folder: Path) -> list[tuple[str, bytes, int]]:
    """Every file under ``folder``: its relative name, bytes and mode."""
    found = []
    for where in sorted(folder.rglob("*")):
        if where.is_file():
            found.append((str(where.relative_to(folder)), where.read_bytes(), _mode(where)))
    return found


def _changed(before: list[tuple[str, bytes, int]], after: list[tuple[str, bytes, int]]) -> str:
    old = {name: (data, mode) for name, data, mode in before}
    new = {name: (data, mode) for name, data, mode in after}
    lines = []
    for name in sorted(set(old) | set(new)):
        if name not in new:
            lines.append(f"{name} removed")
        elif name not in old:
            lines.append(f"{name} created ({oct(new[name][1])})")
        elif old[name][1] != new[name][1]:
            lines.append(f"{name} mode {oct(old[name][1])} -> {oct(new[name][1])}")
        elif old[name][0] != new[name][0]:
            lines.append(f"{name} bytes changed")
    return ", ".join(lines)


@contextlib.contextmanager
def _umask(mask: int) -> Iterator[None]:
    previous = os.umask(mask)
    try:
        yield
    finally:
        os.umask(previous)


def _migration_ids() -> list[int]:
    from runstore.sqlite import _migrations

    return [step.id for step in _migrations.MIGRATIONS]


def _recorded(path: Path) -> list[int]:
    """The migration ids the file records, read without runstore."""
    connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return sorted(row[0] for row in connection.execute("SELECT id FROM flows_migrations"))
    finally:
        connection.close()


def _older(path: Path, count: int) -> None:
    """A database with only the first ``count`` migrations applied, in WAL
    mode as runstore leaves every file it writes (a rollback-mode one, which
    ``migrate=False`` once switched to WAL before refusing it, is pinned by
    ``tests/stateful/checks/test_opening_check.py``)."""
    from runstore.sqlite import _migrations

    connection = sqlite3.connect(path, isolation_level=None)
    try:
        connection.execute("PRAGMA journal_mode = WAL")
        _migrations.apply(connection, count)
    finally:
        connection.close()


def _left_by_a_killed_writer(path: Path, count: int) -> None:
    """``_older(path, count)`` as a writer killed with its last write still
    in the ``-wal`` leaves it: the file, a ``-wal`` with frames and a ``-shm``
    (copied while that writer is open, from a folder of its own)."""
    source = Path(tempfile.mkdtemp(prefix="runstore-opening-killed-")) / "runs.db"
    try:
        _older(source, count)
        connection = sqlite3.connect(source, isolation_level=None)
        try:
            connection.execute("PRAGMA wal_autocheckpoint = 0")
            connection.execute("CREATE TABLE opening_note (x)")
            connection.execute("DROP TABLE opening_note")
            for suffix in ("", *_SIDES):
                shutil.copyfile(f"{source}{suffix}", f"{path}{suffix}")
        finally:
            connection.close()
    finally:
        shutil.rmtree(source.parent, ignore_errors=True)


def view(store: Any) -> dict[str, object]:
    """What a store's reads show, as the machines compare them. Leases are
    left out: a strategy may keep them in the memory of the store that
    wrote them (``LocalConsensus``), and the rows carry owner and claim."""
    state = attrs.evolve(store.state(), leases=())
    ids = [row.run_id for row in state.rows]
    return {
        "state": state,
        "get": [store.get(run_id) for run_id in ids],
        "list_runs": store.list_runs(with_state=True, limit=1000).runs,
        "revision": store.revision(),
        "changes": store.changes(0),
        "ownership_facts": [store.ownership_facts(run_id) for run_id in ids],
    }


def _reader_view(reader: Any) -> dict[str, object]:
    """``view(reader)`` of a read-only store; a read that raises fails the
    check (a read-only store's reads must work)."""
    try:
        return view(reader)
    except Exception as error:
        raise ReadOnlyViewMismatch(
            f"a read on a read-only store raised {type(error).__name__}: {error}"
        ) from error


def _differences(expected: dict[str, object], actual: dict[str, object]) -> str:
    return ", ".join(key for key in expected if expected[key] != actual.get(key))


def _write_calls(now: int) -> dict[str, Callable[[Any], object]]:
    """One admissible call of every write operation."""
    owner, other = _OWNERS
    snapshot = RunSnapshot("pending", None, None)
    evidence = LivenessEvidence(owner, now, "lease-expired")
    return {
        "create": lambda s: s.create("ro-new", "{}"),
        "request_cancel": lambda s: s.request_cancel("a", now),
        "request_cancel_lineage": lambda s: s.request_cancel_lineage("a", now),
        "acknowledge_cancel": lambda s: s.acknowledge_cancel("a", owner, now),
        "claim": lambda s: s.claim("a", snapshot, owner, now),
        "claim_and_own": lambda s: s.claim_and_own("a", snapshot, owner, now),
        "activate": lambda s: s.activate("a", owner, now, snapshot),
        "abandon_claim": lambda s: s.abandon_claim("a", owner, now),
        "recover_claim": lambda s: s.recover_claim("a", owner, now, other, now, evidence),
        "heartbeat": lambda s: s.heartbeat("a", owner, now),
        "reconfirm": lambda s: s.reconfirm("a", owner, now),
        "transition_owned": lambda s: s.transition_owned("a", owner, "completed"),
        "steal": lambda s: s.steal("a", snapshot, other, now, evidence),
        "heartbeat_many": lambda s: s.heartbeat_many(owner, ["a", "b"], now),
        "claim_next": lambda s: s.claim_next(owner, now),
        "claim_next_many": lambda s: s.claim_next_many(owner, now, 2),
        "purge_settled": lambda s: s.purge_settled(now),
    }


_WRITES: Final = tuple(_write_calls(0))


def _in_thread(fn: Callable[[], object], *, start: threading.Barrier | None = None) -> Any:
    """Run ``fn`` in a thread; the handle's ``result()`` waits at most
    ``WAIT_S`` and returns what it returned or raised."""
    outcome: list[object] = []

    def body() -> None:
        if start is not None:
            start.wait(WAIT_S)
        try:
            outcome.append(fn())
        except BaseException as error:  # reported by the caller
            outcome.append(error)

    thread = threading.Thread(target=body, daemon=True)
    thread.start()

    class Handle:
        @staticmethod
        def result() -> object:
            thread.join(WAIT_S)
            if thread.is_alive():
                raise OpenFailed(f"an open did not finish within {WAIT_S} s")
            return outcome[0]

    return Handle()


# --- opening as a user who may not write ------------------------------------------

#: The part of a child script that becomes an unprivileged user (``uid`` and
#: ``gid``, set before it, with ``os``, ``shutil``, ``tempfile`` and
#: ``runstore`` imported): it opens one database both ways first, so every
#: module an open imports is loaded while the interpreter's files are still
#: readable, then drops to that user.
DROP_TO_USER: Final = """
warm = tempfile.mkdtemp()
runstore.open(os.path.join(warm, "runs.db")).close()
runstore.open(os.path.join(warm, "runs.db"), read_only=True).close()
shutil.rmtree(warm)
os.setgroups([])
os.setgid(gid)
os.setuid(uid)
"""

#: A child that opens as an unprivileged user (when the check runs as root,
#: which file modes do not stop). As root it makes the cases' files in the
#: folder given (``_users_cases``, the files that user is given made its
#: own), then drops to the uid and gid given (``DROP_TO_USER``), opens each
#: case (``_attempt_open``) and prints each case's description, what it must
#: give (``_USERS_EXPECTED``) and what it gave, as JSON. Files, opens and
#: expectations all come from the runstore this child imports: the code on
#: disk when it starts, which is not always the code of the process that
#: runs the check (a checkout that changed since that process imported
#: runstore has other migrations, say).
_AS_USER: Final = (
    """
import json, os, shutil, sys, tempfile
sys.path[:0] = json.loads(sys.argv[1])
import runstore
uid, gid = int(sys.argv[2]), int(sys.argv[3])
from pathlib import Path
from runstore.stateful._checks import _opening as check


def give(name):
    os.chmod(name, 0o600)
    os.chown(name, uid, gid)


cases = check._users_cases(Path(sys.argv[4]), give)
"""
    + DROP_TO_USER
    + """found = [
    [what, expected, check._attempt_open(path, read_only, {})]
    for (what, path, read_only), expected in zip(cases, check._USERS_EXPECTED, strict=True)
]
print(json.dumps(found, default=str))
"""
)


def _attempt_open(path: str, read_only: bool, options: dict[str, Any]) -> dict[str, object]:
    """What one open did, as ``_AS_USER`` reports it."""
    try:
        store = _open(path, read_only=read_only, **options)
    except RunStoreError as error:
        return {"error": type(error).__name__, "code": error.code, "cause": dict(error.cause)}
    except Exception as error:
        return {"raised": f"{type(error).__name__}: {error}"}
    try:
        return {"runs": [row.run_id for row in store.state().rows]}
    finally:
        store.close()


def _unprivileged() -> tuple[int, int] | None:
    """The uid and gid to open as: ``nobody`` when this process is root,
    ``(-1, -1)`` (this process itself) otherwise, ``None`` when there is no
    user to drop to (or no POSIX users at all)."""
    if not hasattr(os, "geteuid"):
        return None
    if os.geteuid() != 0:
        return -1, -1
    import pwd

    try:
        entry = pwd.getpwnam("nobody")
    except KeyError:
        return None
    return entry.pw_uid, entry.pw_gid


def _reachable(folder: Path) -> bool:
    """Whether every folder above ``folder`` lets other users through."""
    return all(os.stat(above).st_mode & stat.S_IXOTH for above in folder.parents)


def _matches(expected: dict[str, object], found: dict[str, object]) -> bool:
    """``found`` is ``expected``, its cause holding at least the expected items."""
    if set(found) != set(expected):
        return False
    for key, value in expected.items():
        if key == "cause":
            cause = found[key]
            assert isinstance(value, dict)
            if not isinstance(cause, dict) or any(cause.get(k) != v for k, v in value.items()):
                return False
        elif found[key] != value:
            return False
    return True


_REFUSED: Final = {"error": "PersistenceFailedError", "code": "persistence_failed"}

#: What each of ``_users_cases`` must give, in its order.
_USERS_EXPECTED: Final[tuple[dict[str, object], ...]] = (
    {**_REFUSED, "cause": {"stage": "permissions", "errno": 13}},
    {"runs": []},
    {**_REFUSED, "cause": {"stage": "permissions", "sqlite_error": "SQLITE_READONLY"}},
    {**_REFUSED, "cause": {"stage": "side-files", "sqlite_error": "SQLITE_READONLY_DIRECTORY"}},
    {**_REFUSED, "cause": {"stage": "side-files", "sqlite_error": "SQLITE_CANTOPEN"}},
)

#: One case of ``_users_cases``: its description, what it must give and
#: what opening it as the user gave.
UserFinding = tuple[str, dict[str, object], dict[str, object]]

#: The findings of ``open_as_a_user_who_may_not_write``, per machine class.
_USERS_FINDINGS: dict[type, list[list[UserFinding] | None]] = {}


def _rollback_database(path: Path) -> None:
    """A migrated database in rollback mode with nothing beside it, made by
    ``runstore.open`` with its default strategy."""
    with _umask(0o077):
        _open(path).close()
    connection = sqlite3.connect(path, isolation_level=None)
    connection.execute("PRAGMA journal_mode = DELETE")
    connection.close()


def _users_cases(area: Path, give: Callable[[str], None]) -> list[tuple[str, str, bool]]:
    """Files in folders under ``area`` (each folder 0555) that the
    unprivileged user may not write (``give`` makes a file that user's,
    0600); each case's description, path and ``read_only``, in the order of
    ``_USERS_EXPECTED``. Every file is made here, with the runstore that
    will open it: the check's own process, or the child that opens as the
    user (``_AS_USER``)."""
    cases: list[tuple[str, str, bool]] = []

    def folder(name: str) -> Path:
        made = area / name
        made.mkdir()
        return made / "runs.db"

    readable = folder("readable")
    _rollback_database(readable)
    os.chmod(readable, 0o444)
    cases.append(("a database it may only read", str(readable), False))
    cases.append(("the same, read_only=True", str(readable), True))

    older = folder("older")
    _left_by_a_killed_writer(older, 3)
    give(str(older))
    give(f"{older}-shm")
    # Not empty: SQLite makes an empty -wal its owner's to write (0600).
    os.chmod(f"{older}-wal", 0o444)
    cases.append(("an older database whose -wal it may not write", str(older), False))

    empty = folder("empty")
    for suffix in ("", *_SIDES):
        Path(f"{empty}{suffix}").touch()
        give(f"{empty}{suffix}")
    cases.append(
        ("an empty file with the empty -wal and -shm a killed opener left", str(empty), False)
    )

    hidden = folder("hidden")
    _older(hidden, len(_migration_ids()))
    for suffix in _SIDES:
        Path(f"{hidden}{suffix}").touch()
    os.chmod(hidden, 0o444)
    os.chmod(f"{hidden}-wal", 0o444)
    os.chmod(f"{hidden}-shm", 0o000)
    cases.append(("a database whose -shm it may not read, read_only=True", str(hidden), True))
    for made in area.iterdir():
        os.chmod(made, 0o555)
    return cases


class OpeningCheck(RuleBasedStateMachine):
    """Opens files of its own with ``runstore.open`` and checks what each
    open did to them (see the module docstring)."""

    budget_kind: ClassVar[str] = "opening"
    """Which default budget ``run_conformance`` gives this machine: ``"opening"``."""

    consensus_factory: ClassVar[ConsensusFactory]
    """Builds the strategy every store the check opens is given."""

    def __init__(self) -> None:
        programs_independent_of_callers_code()
        super().__init__()
        self.folder = Path(tempfile.mkdtemp(prefix="runstore-opening-"))
        """The machine's folder, removed at teardown."""
        self.live = self.folder / "live" / "runs.db"
        """The database the writer and the readers share."""
        self.live.parent.mkdir()
        self.clock = ManualClock(START_MS)
        """The clock every store is opened with."""
        self.writer: Any = None
        """The open read-write store on ``live``, or None."""
        self.readers: list[Any] = []
        """The open read-only stores on ``live``."""
        self.closed_view: dict[str, object] | None = None
        """What the file held when the writer last closed, or None."""
        self.names = 0
        """How many runs ``reader_follows_a_later_writer`` created (each is named by the next)."""

    # --- helpers ------------------------------------------------------------------

    def _options(self, **options: Any) -> dict[str, Any]:
        return {"clock": self.clock, "consensus": type(self).consensus_factory(), **options}

    def _fresh(self) -> Path:
        """A path in a folder of its own that nothing has touched."""
        self.names += 1
        folder = self.folder / f"f{self.names}"
        folder.mkdir()
        return folder / "runs.db"

    def _open_or_fail(self, path: Path | str, what: str, **options: Any) -> Any:
        try:
            return _open(path, **self._options(**options))
        except Exception as error:
            raise OpenFailed(f"{what}: {type(error).__name__}: {error}") from error

    def _private(self, path: Path, what: str) -> None:
        for suffix in ("", *_SIDES):
            name = f"{path}{suffix}"
            if os.path.exists(name) and _mode(name) != _PRIVATE:
                raise FileModeViolation(f"{what}: {name} has mode {oct(_mode(name))}, not 0o600")

    def _migrated(self, path: Path, what: str) -> None:
        recorded = _recorded(path)
        if recorded != sorted(_migration_ids()):
            raise OpenFailed(f"{what}: the file records migrations {recorded}")

    def _close_all(self) -> None:
        for reader in self.readers:
            reader.close()
        self.readers = []
        if self.writer is not None:
            self.closed_view = view(self.writer)
            self.writer.close()
            self.writer = None
        if any(os.path.exists(f"{self.live}{suffix}") for suffix in _SIDES):
            # A reader closed last, and may not remove the -wal: the next
            # writer to close does.
            _open(self.live, **self._options()).close()

    def _expected(self) -> dict[str, object]:
        if self.writer is not None:
            return view(self.writer)
        assert self.closed_view is not None
        return self.closed_view

    def _refused(
        self,
        what: str,
        call: Callable[[], Any],
        *,
        error: str,
        code: str,
        cause: dict[str, object],
        words: tuple[str, ...] = (),
        not_words: tuple[str, ...] = (),
    ) -> None:
        """``call`` must raise the named ``RunStoreError`` with ``cause``
        among its cause's items and ``words`` (not ``not_words``) in its
        message, and leave the scratch folder as it was."""
        before = _look(self.folder)
        try:
            opened = call()
        except RunStoreError as raised:
            found = dict(raised.cause)
            wrong = (
                type(raised).__name__ != error
                or raised.code != code
                or any(found.get(key) != value for key, value in cause.items())
                or any(word not in str(raised) for word in words)
                or any(word in str(raised) for word in not_words)
            )
            if wrong:
                raise OpenRefusalMismatch(
                    f"{what}: expected {error} ({code}) with {cause} saying {words!r}"
                    f"{f' and not {not_words!r}' if not_words else ''}; "
                    f"got {type(raised).__name__} ({raised.code}) with {found}: {raised}"
                ) from None
        except Exception as raised:
            raise OpenRefusalMismatch(
                f"{what}: expected {error} with {cause}; raised {type(raised).__name__}: {raised}"
            ) from raised
        else:
            with contextlib.suppress(Exception):
                opened.close()
            raise OpenRefusalMismatch(f"{what}: opened; expected {error} with {cause}")
        changed = _changed(before, _look(self.folder))
        if changed:
            raise OpenLeftTrace(f"{what}: the refused open changed files: {changed}")

    # --- the live database ----------------------------------------------------------

    @initialize()
    def open_live(self) -> None:
        """The live database: a new file opened under a permissive umask.

        Every example also begins with the two scenarios no rule draws
        (they draw nothing, so they leave the programs as they are): a
        read-only store waiting out an exclusive holder, and opens by a user
        who may not write (``_wait_out_an_exclusive_holder``,
        ``_open_as_a_user_who_may_not_write``)."""
        self._wait_out_an_exclusive_holder()
        self._open_as_a_user_who_may_not_write()
        with _umask(0o000):
            self.writer = self._open_or_fail(self.live, "a new file")
            self.writer.create("a", '{"n": 0}')
            self._private(self.live, "a new database under umask 0o000")

    @precondition(lambda self: self.writer is not None)
    @rule(
        operation=st.sampled_from(("create", "claim_and_own", "heartbeat", "transition_owned")),
        run_id=st.sampled_from(_RUNS),
        owner=st.sampled_from(_OWNERS),
    )
    def write(self, operation: str, run_id: str, owner: OwnerId) -> None:
        """A write to the live database through the open writer: ``operation`` (``create``,
        ``claim_and_own``, ``heartbeat`` or ``transition_owned``) on ``run_id`` by ``owner``,
        a second later each time; losses and refusals are fine."""
        self.clock.advance(1000)
        now = self.clock.now_ms()
        store = self.writer
        with contextlib.suppress(RunStoreError):  # not found, already there: fine
            if operation == "create":
                store.create(run_id, f'{{"at": {now}}}')
            elif operation == "claim_and_own":
                store.claim_and_own(run_id, store.get(run_id), owner, now)
            elif operation == "heartbeat":
                store.heartbeat(run_id, owner, now)
            else:
                store.transition_owned(run_id, owner, "completed", f'{{"done": {now}}}')

    @precondition(lambda self: self.writer is not None)
    @rule()
    def close_writer(self) -> None:
        """Close the writer, remembering what the file holds for the read-only checks."""
        self.closed_view = view(self.writer)
        self.writer.close()
        self.writer = None

    @precondition(lambda self: self.writer is None)
    @rule(mode=st.sampled_from((None, 0o644, 0o640, 0o666)))
    def open_writer(self, mode: int | None) -> None:
        """Reopen the live database as the writer, after setting its file ``mode`` (None: leave
        it).

        Reopening an existing database keeps its mode (widened or not).
        """
        if mode is not None:
            os.chmod(self.live, mode)
        before = _mode(self.live)
        with _umask(0o000):
            self.writer = self._open_or_fail(self.live, "an existing database")
        if _mode(self.live) != before:
            raise FileModeViolation(
                f"opening an existing database changed its mode "
                f"{oct(before)} -> {oct(_mode(self.live))}"
            )

    @precondition(lambda self: len(self.readers) < 2)
    @rule()
    def open_reader(self) -> None:
        """Open another read-only store on the live database (at most two)."""
        self.readers.append(self._open_or_fail(self.live, "read_only=True", read_only=True))

    @precondition(lambda self: bool(self.readers))
    @rule()
    def close_reader(self) -> None:
        """Close the oldest read-only store."""
        self.readers.pop(0).close()

    @precondition(lambda self: bool(self.readers))
    @rule(operation=st.sampled_from(_WRITES))
    def reader_refuses(self, operation: str) -> None:
        """Every open read-only store is asked the write ``operation``.

        A read-only store's write raises the read-only refusal and the file holds what it
        held.
        """
        before = self._expected()
        call = _write_calls(self.clock.now_ms())[operation]
        for reader in self.readers:
            try:
                answer = call(reader)
            except RunStoreError as error:
                if error.code != "persistence_failed" or error.cause.get("stage") != "read-only":
                    raise ReadOnlyWriteAccepted(
                        f"{operation} on a read-only store raised {error.code} "
                        f"{error.cause}, not persistence_failed at stage read-only"
                    ) from None
            except Exception as error:
                raise ReadOnlyWriteAccepted(
                    f"{operation} on a read-only store raised {type(error).__name__}: {error}"
                ) from error
            else:
                raise ReadOnlyWriteAccepted(f"{operation} on a read-only store answered {answer!r}")
        after = self._expected() if self.writer is not None else _reader_view(self.readers[0])
        if after != before:
            raise ReadOnlyWriteAccepted(
                f"{operation} on a read-only store changed {_differences(before, after)}"
            )

    @rule(operation=st.sampled_from(_WRITES))
    def read_only_leaves_the_file_alone(self, operation: str) -> None:
        """The write ``operation`` is asked of a read-only store opened with every connection
        closed.

        With every connection closed, a read-only store's open, reads and refused writes
        change nothing in the folder.
        """
        self._close_all()
        before = _look(self.live.parent)
        reader = self._open_or_fail(self.live, "read_only=True", read_only=True)
        try:
            seen = _reader_view(reader)
            with contextlib.suppress(RunStoreError):
                _write_calls(self.clock.now_ms())[operation](reader)
            seen_again = _reader_view(reader)
        finally:
            reader.close()
        changed = _changed(before, _look(self.live.parent))
        if changed:
            raise OpenLeftTrace(f"a read-only store changed files: {changed}")
        for found in (seen, seen_again):
            if found != self.closed_view:
                assert self.closed_view is not None
                note(f"file holds: {self.closed_view!r}\nread-only read: {found!r}")
                raise ReadOnlyViewMismatch(
                    "a read-only store of a closed file read other "
                    f"{_differences(self.closed_view, found)}"
                )

    @rule()
    def reader_follows_a_later_writer(self) -> None:
        """A read-only store opened while nobody holds the file sees the
        writes of a writer that opens afterwards."""
        self._close_all()
        self.readers.append(self._open_or_fail(self.live, "read_only=True", read_only=True))
        self.check_readers()
        self.writer = self._open_or_fail(self.live, "a writer after a reader")
        self.clock.advance(1000)
        self.names += 1
        self.writer.create(f"late-{self.names}", "{}")
        self.check_readers()

    @invariant()
    def check_readers(self) -> None:
        """Every read-only store reads what the file holds."""
        if not self.readers:
            return
        expected = self._expected()
        for reader in self.readers:
            found = _reader_view(reader)
            if found != expected:
                note(f"read-write store: {expected!r}\nread-only store: {found!r}")
                raise ReadOnlyViewMismatch(
                    f"a read-only store read other {_differences(expected, found)}"
                )

    # --- new and empty files -----------------------------------------------------------

    def _open_private(self, path: Path, what: str, private: str) -> None:
        """Open ``path`` (``what``), write to it, check every file of it is
        0600 (``private`` names the case) and that it was migrated."""
        store = self._open_or_fail(path, what)
        try:
            store.create("r", "{}")
            self._private(path, private)
        finally:
            store.close()
        self._migrated(path, what)

    @rule(mask=st.sampled_from((0o000, 0o002, 0o022)))
    def open_new(self, mask: int) -> None:
        """Open a new path under the umask ``mask``.

        A path that does not exist becomes a migrated 0600 database, its -wal and -shm 0600
        too.
        """
        path = self._fresh()
        with _umask(mask):
            self._open_private(path, "a new file", f"a new database under umask {oct(mask)}")

    @rule(mode=st.sampled_from((0o644, 0o661, 0o666, 0o640)), stale_sides=st.booleans())
    def open_empty(self, mode: int, stale_sides: bool) -> None:
        """Open an empty file of mode ``mode``, with empty side files when ``stale_sides``.

        An empty file (with empty -wal/-shm a killed opener left, or not) is new: it becomes a
        migrated database, all of it 0600.
        """
        path = self._fresh()
        for suffix in ("", *(_SIDES if stale_sides else ())):
            Path(f"{path}{suffix}").touch()
            os.chmod(f"{path}{suffix}", mode)
        with _umask(0o000):
            self._open_private(path, "an empty file", f"an empty file of mode {oct(mode)}")

    # --- refusals ---------------------------------------------------------------------

    @rule(
        kind=st.sampled_from(("missing", "empty", "older", "memory")),
        read_only=st.booleans(),
        applied=st.integers(1, 9),
        mode=st.sampled_from((0o644, 0o600)),
    )
    def refuse_to_migrate(self, kind: str, read_only: bool, applied: int, mode: int) -> None:
        """Open a file of the ``kind`` asked (``missing``, ``empty``, ``older`` with ``applied``
        migrations, or ``memory``), of file mode ``mode``, with ``read_only`` (else
        ``migrate=False``).

        An open that may not migrate refuses what needs migrating, in words that say which
        option forbade it.
        """
        ids = _migration_ids()
        applied = min(applied, len(ids) - 1)
        option = {"read_only": True} if read_only else {"migrate": False}
        mine, other = (
            ("read_only=True", "migrate=False") if read_only else ("migrate=False", "read_only")
        )
        path: Path | str = self._fresh()
        if kind == "memory":
            path = ":memory:"
        elif kind == "empty":
            Path(path).touch()
        elif kind == "older":
            _older(Path(path), applied)
        if kind != "missing" and kind != "memory":
            os.chmod(path, mode)
        what = f"{kind} file opened with {mine}"

        def call() -> Any:
            return _open(path, **self._options(**option))

        if kind == "missing":
            self._refused(
                what,
                call,
                error="PersistenceFailedError",
                code="persistence_failed",
                cause={"stage": "missing"},
                words=("does not exist", mine),
                not_words=(other,),
            )
            return
        if kind == "memory" and read_only:
            self._refused(
                what,
                call,
                error="InvalidRunError",
                code="invalid_run",
                cause={"field": "read_only"},
            )
            return
        pending = ids if kind != "older" else ids[applied:]
        self._refused(
            what,
            call,
            error="UnsupportedDatabaseError",
            code="persistence_failed",
            cause={"stage": "needs-migration", "pending_migrations": pending},
            words=("needs migrating", f"({mine}", "runstore migrate"),
            not_words=(f"({other}",),
        )

    @rule(
        kind=st.sampled_from(("text", "corrupt", "foreign", "newer", "renamed")),
        read_only=st.booleans(),
    )
    def refuse_foreign(self, kind: str, read_only: bool) -> None:
        """Open a file of the ``kind`` asked (``text``, ``corrupt``, ``foreign``, ``newer`` or
        ``renamed``), read-only when ``read_only``.

        A file that is not a runstore database this version may open is refused as it is,
        saying why.
        """
        path = self._fresh()
        expected: dict[str, object]
        if kind == "text":
            path.write_text("hello\n" * 200)
            expected, words = {"stage": "header"}, "not a SQLite database"
        elif kind == "foreign":
            connection = sqlite3.connect(path)
            connection.execute("CREATE TABLE notes (x)")
            connection.commit()
            connection.close()
            expected, words = {"stage": "schema", "tables": 1}, "not a runstore database"
        else:
            shutil.copyfile(self._template(), path)
            if kind == "corrupt":
                data = bytearray(path.read_bytes())
                data[100:4096] = b"\xff" * 3996  # page 1's b-tree header and cells
                path.write_bytes(bytes(data))
                expected, words = {"stage": "corrupt"}, "corrupt"
            else:
                statement = (
                    "INSERT INTO flows_migrations (id, name) VALUES (9999, 'from_the_future')"
                    if kind == "newer"
                    else "UPDATE flows_migrations SET name = 'elsewhere' WHERE id = 1001"
                )
                connection = sqlite3.connect(path, isolation_level=None)
                connection.execute(statement)
                connection.close()
                if kind == "newer":
                    expected = {"stage": "schema", "unknown_migrations": [9999]}
                    words = "newer than this version"
                else:
                    expected = {"stage": "schema", "foreign_migrations": [1001]}
                    words = "not a runstore database"
        self._refused(
            f"a {kind} file opened{' read_only=True' if read_only else ''}",
            lambda: _open(path, **self._options(read_only=read_only)),
            error="UnsupportedDatabaseError",
            code="persistence_failed",
            cause=expected,
            words=(words,),
        )

    def _template(self) -> Path:
        """A migrated database in rollback mode with nothing beside it."""
        template = self.folder / "template.db"
        if not template.exists():
            with _umask(0o077):
                _open(template, **self._options()).close()
            connection = sqlite3.connect(template, isolation_level=None)
            connection.execute("PRAGMA journal_mode = DELETE")
            connection.close()
        return template

    # --- openers at the same time --------------------------------------------------------

    @rule()
    def race_on_a_new_file(self) -> None:
        """Two threads opening one new file at once both succeed."""
        path = self._fresh()
        start = threading.Barrier(2)
        handles = [
            _in_thread(lambda: _open(path, **self._options()), start=start) for _ in range(2)
        ]
        results = [handle.result() for handle in handles]
        for result in results:
            if not isinstance(result, BaseException):
                result.close()
        failures = [result for result in results if isinstance(result, BaseException)]
        if failures:
            raise OpenFailed(f"two openers of a new file: {failures[0]!r}")
        self._migrated(path, "a new file two openers raced on")
        self._private(path, "a new file two openers raced on")

    @rule(kind=st.sampled_from(("new", "mid-write", "older")))
    def wait_out_a_held_lock(self, kind: str) -> None:
        """Another connection holds a file of the ``kind`` asked (``new``, ``mid-write`` or
        ``older``).

        An opener waits while another connection holds the file's lock for ``HOLD_S`` (a new
        file held exclusively, an empty database in a rollback journal's write, an older
        database being migrated), then opens it, migrated once.
        """
        path = self._fresh()
        statements: tuple[str, ...] = ("BEGIN EXCLUSIVE",)
        if kind == "mid-write":
            connection = sqlite3.connect(path)
            connection.execute("PRAGMA user_version = 1")  # a header, no tables
            connection.close()
            statements = ("BEGIN EXCLUSIVE", "PRAGMA user_version = 2")
        elif kind == "older":
            _older(path, 3)
            statements = ("BEGIN IMMEDIATE",)
        with _umask(0o022):  # the holder's sqlite3 creates a new file 0644
            holder = sqlite3.connect(path, isolation_level=None)
        try:
            for statement in statements:
                holder.execute(statement)
            handle = _in_thread(lambda: _open(path, **self._options()))
            time.sleep(HOLD_S)  # the holder is descheduled; no lease is timed by this
            holder.execute("COMMIT")
        finally:
            holder.close()
        result = handle.result()
        if isinstance(result, BaseException):
            raise OpenFailed(
                f"an opener of a {kind} file whose lock was held {HOLD_S} s: {result!r}"
            )
        result.close()
        self._migrated(path, f"a {kind} file opened after a held lock")
        if kind == "new":
            self._private(path, "an empty file another connection created 0644")

    def _wait_out_an_exclusive_holder(self) -> None:
        """A read-only store of a file nobody holds waits while another
        connection holds the file exclusively (``locking_mode=EXCLUSIVE``
        and one write: a ``-wal`` and no ``-shm`` beside the file while it
        lasts) for ``HOLD_READ_S``, then reads what the file holds (the
        store's read retry, which nothing else here reaches)."""
        path = self._fresh()
        writer = self._open_or_fail(path, "a new file")
        try:
            writer.create("a", "{}")
            expected = view(writer)
        finally:
            writer.close()
        reader = self._open_or_fail(path, "read_only=True", read_only=True)
        try:
            holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=0)
            try:
                holder.execute("PRAGMA locking_mode = EXCLUSIVE")
                holder.execute("BEGIN IMMEDIATE")
                holder.execute("CREATE TABLE opening_holder (x)")
                holder.execute("DROP TABLE opening_holder")
                holder.execute("COMMIT")
            except sqlite3.OperationalError as error:
                # The reader holds a lock of its own (it is not the
                # lock-free reader of a quiet file): another check's concern.
                holder.close()
                note(f"the exclusive holder could not take the file ({error}): skipped")
                return
            except BaseException:
                holder.close()
                raise
            # Let go from another thread while the reader waits (a holder
            # that is descheduled; no lease is timed by this).
            release = threading.Timer(HOLD_READ_S, holder.close)
            release.start()
            try:
                found = view(reader)
            except Exception as error:
                raise LockedReadFailed(
                    f"a read-only store's read while another connection held the file "
                    f"exclusively for {HOLD_READ_S} s raised {type(error).__name__}: {error}"
                ) from error
            finally:
                release.join(WAIT_S)
        finally:
            reader.close()
        if found != expected:
            note(f"file holds: {expected!r}\nread-only read: {found!r}")
            raise LockedReadFailed(
                "a read-only store that waited out an exclusive holder read other "
                f"{_differences(expected, found)}"
            )

    # --- a user who may not write -----------------------------------------------------

    def _users_findings(self) -> list[UserFinding] | None:
        """Each case of ``_users_cases``, what it must give and what opening
        it as the unprivileged user gave; ``None`` when there is no such
        user, or the scratch folder cannot be reached by one."""
        user = _unprivileged()
        if user is None:
            return None
        uid, gid = user
        area = Path(tempfile.mkdtemp(prefix="runstore-opening-user-"))
        try:
            os.chmod(area, 0o755)
            if uid >= 0:
                return self._as_user(uid, gid, area) if _reachable(area) else None
            # Not root: file modes stop this process itself.
            cases = _users_cases(area, lambda name: os.chmod(name, _PRIVATE))
            options = self._options()
            return [
                (what, expected, _attempt_open(path, read_only, options))
                for (what, path, read_only), expected in zip(cases, _USERS_EXPECTED, strict=True)
            ]
        finally:
            for made in (area, *area.iterdir()):
                os.chmod(made, 0o755)
            shutil.rmtree(area, ignore_errors=True)

    def _open_as_a_user_who_may_not_write(self) -> None:
        """As a user who may not write the database's folder, open refuses a
        file it may only read ("permissions", before SQLite), an older
        database whose ``-wal`` it may not write (SQLite's plain
        SQLITE_READONLY: "permissions"), an empty file whose journal it
        cannot create (SQLITE_READONLY_DIRECTORY: "side-files"), and a
        read-only open of a database whose ``-shm`` it may not read
        (SQLITE_CANTOPEN: "side-files"); ``read_only=True`` opens the file
        it may read.

        As root these opens run in a child process that makes the files
        and then drops to ``nobody`` (with runstore's default strategy: the
        one under test cannot be handed to it, and every refusal comes
        before a strategy runs), so that the files, the opens and what they
        must give are one runstore's, whatever this process imported
        earlier; the child costs a new interpreter. Their files are the
        check's own, whatever the example, so they run once per machine
        class and every example judges the same findings (a replayed
        example sees what the first one saw)."""
        cache = _USERS_FINDINGS.setdefault(type(self), [])
        if not cache:
            cache.append(self._users_findings())
        findings = cache[0]
        if findings is None:
            note("no unprivileged user to open as, or none can reach the scratch folder")
            return
        for what, wanted, got in findings:
            if not _matches(wanted, got):
                raise PermissionRefusalMismatch(
                    f"as a user who may not write its folder, {what}: expected {wanted}, got {got}"
                )

    @staticmethod
    def _as_user(uid: int, gid: int, area: Path) -> list[UserFinding]:
        """The findings of the child (``_AS_USER``) that makes the cases in
        ``area`` and opens them as ``uid``/``gid``."""
        try:
            done = subprocess.run(
                [
                    sys.executable,
                    "-c",
                    _AS_USER,
                    json.dumps(sys.path),
                    str(uid),
                    str(gid),
                    str(area),
                ],
                capture_output=True,
                text=True,
                timeout=CHILD_WAIT_S,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise PermissionRefusalMismatch(
                f"the opener run as uid {uid} did not finish within {CHILD_WAIT_S} s"
            ) from None
        if done.returncode != 0:
            raise PermissionRefusalMismatch(
                f"the opener run as uid {uid} failed: {done.stderr[-2000:]}"
            )
        return [(what, expected, got) for what, expected, got in json.loads(done.stdout)]

    def teardown(self) -> None:
        """Close every store and remove the machine's folder."""
        with contextlib.suppress(Exception):
            self._close_all()
        shutil.rmtree(self.folder, ignore_errors=True)


def opening_check_for(
    consensus_factory: ConsensusFactory, *, name: str = "strategy"
) -> type[OpeningCheck]:
    """The opening check named for ``name``, with ``consensus_factory``'s strategy in every store
    it opens."""
    return type(
        f"OpeningCheck_{name}",
        (OpeningCheck,),
        {"consensus_factory": staticmethod(consensus_factory)},
    )


def sqlite_store_consensus(store_factory: Any) -> ConsensusFactory | None:
    """The strategy factory to give the opening check when ``store_factory``
    builds the SQLite adapter (``runstore.open``'s store): the class of the
    strategy its store was built with, or ``SqlConsensus`` when that class
    needs arguments. ``None`` for any other store, or a factory that fails
    (the run-store machine reports that)."""
    from runstore.consensus import SqlConsensus
    from runstore.sqlite import SqliteRunStore

    kind = probe_store(
        store_factory,
        lambda store: type(store.consensus) if isinstance(store, SqliteRunStore) else None,
        None,
    )
    if kind is None:
        return None
    try:
        kind()
    except Exception:
        return SqlConsensus
    return kind
