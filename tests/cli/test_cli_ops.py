"""The operator commands on a SQLite file and on a PostgreSQL database.

``show``, ``check``, ``stats``, ``runs``, ``purge`` (dry run), ``backup``
and ``migrate --check`` change nothing in the database they read; ``show``
never prints run state or attempt values without ``--state`` (in text or
JSON); ``check`` exits 0 on a sound database and 1, naming what is wrong,
on one whose lease disagrees with its row, whose schema needs migrating, or
(SQLite) that holds a row naming a missing run; ``migrate --check`` exits 1
while steps are pending and ``migrate`` applies them; ``backup`` copies a
live SQLite database (uncheckpointed commits included) into a 0600 file,
refuses to overwrite without ``--force``, and for PostgreSQL names
``pg_dump`` and exits 2; a database that cannot be opened is exit 2 and a
URL's password is never printed. Most cases call ``runstore.cli.main``
in-process; ``test_the_real_command_line`` runs the installed entry point.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
import tempfile
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import runstore
from runstore import ManualClock
from runstore.cli import main
from runstore.sqlite import _migrations

from .. import _postgres
from ._cli import NOW, SECRET, T0, Db, cli, cli_json, make_db, populate, sqlite_look


@pytest.fixture(params=["sqlite-file", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Db:
    return make_db(request.param, tmp_path)


# -- show -------------------------------------------------------------------------------


def test_show_hides_state_unless_asked(db: Db, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "show", db.target, "working", "--now", NOW)
    assert code == 0
    assert SECRET not in out
    assert "hidden" in out
    assert "stale for 45 s" in out
    assert "host-a/4102/c0ffee" in out
    assert "step-1" in out
    code, document = cli_json(capsys, "show", db.target, "working", "--now", NOW)
    assert code == 0
    assert SECRET not in json.dumps(document)
    assert "state_json" not in document["run"]
    assert set(document["attempts"][0]) == {
        "step_key_digest",
        "attempt",
        "state",
        "started_at_ms",
        "finished_at_ms",
        "heartbeat_at_ms",
    }
    code, out, _ = cli(capsys, "show", db.target, "working", "--state")
    assert code == 0
    assert SECRET in out
    code, document = cli_json(capsys, "show", db.target, "working", "--state")
    assert json.loads(document["run"]["state_json"]) == {"password": SECRET}
    assert document["attempts"][0]["checkpoint"] == {"token": SECRET}


def test_show_reports_the_row_lease_facts_and_lineage(
    db: Db, capsys: pytest.CaptureFixture[str]
) -> None:
    code, document = cli_json(capsys, "show", db.target, "round-2", "--now", NOW)
    assert code == 0
    run = document["run"]
    assert run["status"] == "completed"
    assert run["lineage_id"] == "L"
    assert run["parent_run_id"] == "round-1"
    assert [m["run_id"] for m in document["lineage"]] == ["round-1", "round-2"]
    assert [f["transition"] for f in document["facts"]] == ["claimed", "activated", "released"]
    assert document["lease"] is None
    code, document = cli_json(capsys, "show", db.target, "working", "--now", NOW)
    assert document["run"]["stale"] is True
    assert document["run"]["cancel_requested_at_ms"] == T0
    assert document["lease"]["owner"] == {"host_id": "host-a", "pid": 4102, "nonce": "c0ffee"}
    assert document["lease"]["heartbeat_at_ms"] == T0
    assert document["now_ms"] == int(NOW)


def test_show_of_a_missing_run_exits_1(db: Db, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, "show", db.target, "nope")
    assert (code, out) == (1, "")
    assert "no run 'nope'" in err
    code, document = cli_json(capsys, "show", db.target, "nope")
    assert code == 1
    assert document["error"]["code"] == "not_found_row"


# -- check --------------------------------------------------------------------------------


def test_check_passes_on_a_sound_database(db: Db, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "check", db.target)
    assert code == 0
    assert "all checks passed" in out
    code, document = cli_json(capsys, "check", db.target)
    assert code == 0
    assert document["ok"] is True
    names = [check["name"] for check in document["checks"]]
    expected = ["schema", "invariants", "attempt invariants"]
    if db.backend == "sqlite-file":
        expected += ["sqlite integrity", "sqlite foreign keys"]
    assert names == [*expected, "rows and leases agree"]
    assert all(check["ok"] for check in document["checks"])


def _raw(db: Db) -> Any:
    if db.backend == "sqlite-file":
        return sqlite3.connect(db.target, isolation_level=None)
    psycopg = pytest.importorskip("psycopg")
    return psycopg.connect(db.target, autocommit=True)


def test_check_fails_when_a_lease_disagrees_with_its_row(
    db: Db, capsys: pytest.CaptureFixture[str]
) -> None:
    with _raw(db) as raw:
        raw.execute(
            "UPDATE flows_consensus_leases SET heartbeat_at_ms = heartbeat_at_ms + 1 "
            "WHERE run_id = 'working'"
        )
    code, out, _ = cli(capsys, "check", db.target)
    assert code == 1
    assert "FAILED" in out
    code, document = cli_json(capsys, "check", db.target)
    assert code == 1
    assert document["ok"] is False
    failed = {check["name"]: check for check in document["checks"] if not check["ok"]}
    assert set(failed) == {"invariants", "rows and leases agree"}
    assert failed["rows and leases agree"]["problems"] == ["working: row and lease differ"]


def test_check_fails_on_a_sqlite_row_naming_a_missing_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "runs.db"
    with runstore.open(path, clock=ManualClock(T0)) as store:
        store.create("r", "{}")
    raw = sqlite3.connect(path, isolation_level=None)
    raw.execute("PRAGMA foreign_keys = OFF")
    raw.execute("INSERT INTO flows_run_state (run_id, state_json) VALUES ('ghost', '{}')")
    raw.close()
    code, document = cli_json(capsys, "check", str(path))
    assert code == 1
    failed = {check["name"] for check in document["checks"] if not check["ok"]}
    assert "sqlite foreign keys" in failed
    assert "invariants" in failed


def test_check_of_a_schema_that_needs_migrating_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "old.db"
    connection = sqlite3.connect(path, isolation_level=None)
    connection.execute("PRAGMA journal_mode = WAL")
    _migrations.apply(connection, len(_migrations.MIGRATIONS) - 1)
    connection.close()
    code, document = cli_json(capsys, "check", str(path))
    assert code == 1
    (schema,) = document["checks"]
    assert schema["name"] == "schema"
    assert schema["pending"] == [
        {"id": _migrations.MIGRATIONS[-1].id, "name": _migrations.MIGRATIONS[-1].name}
    ]


# -- migrate --------------------------------------------------------------------------------


def test_migrate_check_reports_and_migrate_applies(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "old.db"
    connection = sqlite3.connect(path, isolation_level=None)
    connection.execute("PRAGMA journal_mode = WAL")
    _migrations.apply(connection, len(_migrations.MIGRATIONS) - 2)
    connection.close()
    look = sqlite_look(path)
    before = look()
    pending = [{"id": s.id, "name": s.name} for s in _migrations.MIGRATIONS[-2:]]
    code, out, _ = cli(capsys, "migrate", str(path), "--check")
    assert code == 1
    assert "2 migration(s) pending" in out
    code, document = cli_json(capsys, "migrate", str(path), "--check")
    assert (code, document["pending"], document["applied"]) == (1, pending, [])
    assert look() == before
    code, document = cli_json(capsys, "migrate", str(path))
    assert (code, document["pending"], document["applied"]) == (0, [], pending)
    code, out, _ = cli(capsys, "migrate", str(path), "--check")
    assert (code, out) == (0, "the schema is up to date\n")


def test_migrate_check_of_a_missing_file_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "new.db"
    code, document = cli_json(capsys, "migrate", str(path), "--check")
    assert code == 1
    assert document["existed"] is False
    assert len(document["pending"]) == len(_migrations.MIGRATIONS)
    assert os.listdir(tmp_path) == []
    code, document = cli_json(capsys, "migrate", str(path))
    assert code == 0
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_migrate_on_postgres(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("runstore.postgres")
    url = _postgres.database_url()
    scoped = f"{url}&schema=fresh" if "?" in url else f"{url}?schema=fresh"
    code, document = cli_json(capsys, "migrate", scoped, "--check")
    assert (code, document["existed"]) == (1, False)
    code, document = cli_json(capsys, "migrate", scoped)
    assert code == 0
    assert len(document["applied"]) == len(_migrations.MIGRATIONS)
    code, _out, _ = cli(capsys, "migrate", scoped, "--check")
    assert code == 0


# -- nothing changes --------------------------------------------------------------------------


def test_the_read_commands_change_nothing(db: Db, capsys: pytest.CaptureFixture[str]) -> None:
    before = db.fingerprint()
    commands = [
        ("show", db.target, "working", "--state"),
        ("check", db.target),
        ("migrate", db.target, "--check"),
        ("runs", db.target, "--all"),
        ("stats", db.target),
        ("purge", db.target, "--before", str(T0 + 1)),
    ]
    for argv in commands:
        code, _out, err = cli(capsys, *argv)
        assert code == 0, (argv, err)
        assert db.fingerprint() == before, argv


# -- backup -------------------------------------------------------------------------------------


def test_backup_copies_a_live_database_into_a_private_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "runs.db"
    copy = tmp_path / "copy.db"
    clock = ManualClock(T0)
    os.umask(0o022)
    with runstore.open(path, clock=clock) as writer:
        populate(writer, clock)
        writer.create("only-in-the-wal", "{}")
        assert os.path.getsize(f"{path}-wal") > 0
        code, document = cli_json(capsys, "backup", str(path), str(copy))
        assert code == 0
        assert document["destination"] == str(copy)
        expected = writer.state()
    assert stat.S_IMODE(copy.stat().st_mode) == 0o600
    assert sorted(os.listdir(tmp_path)) == ["copy.db", "runs.db"]
    with runstore.open(copy, read_only=True) as restored:
        assert restored.state() == expected
        restored.check_invariants()


def test_backup_refuses_an_existing_destination_unless_forced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = str(tmp_path / "runs.db")
    clock = ManualClock(T0)
    with runstore.open(source, clock=clock) as store:
        populate(store, clock)
    copy = tmp_path / "copy.db"
    copy.write_bytes(b"keep me")
    code, out, err = cli(capsys, "backup", source, str(copy))
    assert (code, out) == (2, "")
    assert "exists; pass --force" in err
    assert copy.read_bytes() == b"keep me"
    Path(f"{copy}-wal").write_bytes(b"")
    code, _out, err = cli(capsys, "backup", source, str(copy), "--force")
    assert code == 2
    assert "-wal" in err
    os.unlink(f"{copy}-wal")
    code, _out, _err = cli(capsys, "backup", source, str(copy), "--force")
    assert code == 0
    assert stat.S_IMODE(copy.stat().st_mode) == 0o600
    with runstore.open(copy, read_only=True) as restored:
        assert restored.get("working").status == "running"


def test_backup_of_postgres_names_its_tools(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(
        capsys, "backup", f"postgresql://admin:{SECRET}@db.example/runs", "copy.dump"
    )
    assert (code, out) == (2, "")
    assert "pg_dump" in err
    assert "pg_basebackup" in err
    assert SECRET not in err
    assert not Path("copy.dump").exists()


# -- opening ---------------------------------------------------------------------------------------


def test_a_database_that_cannot_be_opened_is_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "missing.db"
    for argv in (("show", str(missing), "r"), ("check", str(missing))):
        code, out, err = cli(capsys, *argv)
        assert (code, out) == (2, "")
        assert "cannot open" in err
        assert "does not exist" in err
        code, document = cli_json(capsys, *argv)
        assert code == 2
        assert document["error"]["cause"]["stage"] == "missing"
    assert os.listdir(tmp_path) == []


def test_a_url_password_is_never_printed(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("runstore.postgres")
    url = _postgres.database_url()
    parts = urllib.parse.urlsplit(url)
    user, _, host = parts.netloc.rpartition("@")
    wrong = urllib.parse.urlunsplit(
        parts._replace(netloc=f"{user}:{SECRET}@{host}", path="/no_such_database")
    )
    for argv in (("check", wrong), ("show", wrong, "r"), ("migrate", wrong, "--check")):
        code, out, err = cli(capsys, *argv)
        assert code == 2
        assert SECRET not in out + err
        assert "cannot open" in err
        code, out, err = cli(capsys, *argv, "--json")
        assert SECRET not in out + err


def test_usage_errors_are_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["show", str(tmp_path / "x.db")])
    assert caught.value.code == 2
    with pytest.raises(SystemExit) as caught:
        main(["runs", str(tmp_path / "x.db"), "--now", "soon"])
    assert caught.value.code == 2


# -- as a program, and as an unprivileged user ---------------------------------------------------


#: Drop to the uid and gid given, then run the command line on the rest (what
#: it imports later, it imports from the package, readable to all).
_AS_USER = """
import os, sys
# Imported first: the interpreter's own files may be unreadable to that user.
import runstore.cli, runstore.cli._ops, runstore.attempts._store, runstore.model._rows
os.setgroups([])
os.setgid(int(sys.argv[2]))
os.setuid(int(sys.argv[1]))
os.chdir("/")
from runstore.cli import main
raise SystemExit(main(sys.argv[3:]))
"""


def _run(argv: list[str], **options: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "runstore", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        **options,
    )


def _migrated_by_a_child(target: str) -> None:
    """Bring ``target`` to the schema of the runstore a new interpreter
    imports: the code on disk, which is not this process's when the
    checkout moved on during a long test run (a database this process made
    then needs a migration the child knows, and ``check`` exits 1). A no-op
    otherwise."""
    done = _run(["migrate", target])
    assert done.returncode == 0, done.stderr


@pytest.mark.processes
def test_the_real_command_line(db: Db) -> None:
    _migrated_by_a_child(db.target)
    done = _run(["show", db.target, "working", "--json"])
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["run"]["owner"]["nonce"] == "c0ffee"
    done = _run(["check", db.target])
    assert done.returncode == 0, done.stderr
    assert done.stdout.endswith("all checks passed\n")


@pytest.fixture
def shared() -> Iterator[Path]:
    """A folder others can enter and read, but not write."""
    folder = Path(tempfile.mkdtemp(prefix="runstore-cli-"))
    os.chmod(folder, 0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder)


@pytest.mark.processes
def test_check_as_a_user_who_may_only_read(shared: Path) -> None:
    """A root-owned database, readable by all, in a folder nobody may write."""
    import pwd

    if os.geteuid() != 0:
        pytest.skip("needs root to make a file another user may only read")
    nobody = pwd.getpwnam("nobody")
    path = shared / "runs.db"
    clock = ManualClock(T0)
    with runstore.open(path, clock=clock) as store:
        populate(store, clock)
    _migrated_by_a_child(str(path))
    os.chmod(path, 0o644)
    look = sqlite_look(path)
    before = look()

    def as_nobody(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", _AS_USER, str(nobody.pw_uid), str(nobody.pw_gid), *argv],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    done = as_nobody("check", str(path), "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["ok"] is True
    done = as_nobody("show", str(path), "working")
    assert done.returncode == 0, done.stderr
    assert "host-a/4102/c0ffee" in done.stdout
    assert look() == before


# -- formats ------------------------------------------------------------------------------------


def test_ages_read_in_one_unit() -> None:
    from runstore.cli._ops._format import ago, span

    assert [span(ms) for ms in (0, 999, 41_000, 99_999, 100_000, 7_200_000, 200_000_000)] == [
        "0 s",
        "0 s",
        "41 s",
        "99 s",
        "1 min",
        "2 h",
        "2 d",
    ]
    assert ago(T0, T0 + 3_000) == "3 s ago"
    assert ago(T0 + 3_000, T0) == "in 3 s"
    assert ago(None, T0) == "-"


def test_before_takes_ms_iso_times_and_ages() -> None:
    from runstore.cli._ops._common import Failure
    from runstore.cli._ops._maintain import when

    assert when("1700000000000", 0) == T0
    assert when("2023-11-14T22:13:20Z", 0) == T0
    assert when("2023-11-14T22:13:20", 0) == T0  # UTC unless it says
    assert when("2023-11-14T23:13:20+01:00", 0) == T0
    assert when("30d", T0) == T0 - 30 * 86_400_000
    assert when("12h", T0) == T0 - 12 * 3_600_000
    assert when("90m", T0) == when("90min", T0) == T0 - 90 * 60_000
    assert when("45s", T0) == T0 - 45_000
    for bad in ("yesterday", "-5d", "5 weeks"):
        with pytest.raises(Failure):
            when(bad, T0)


def test_a_run_id_cannot_act_on_the_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Control and bidi characters in stored text are printed escaped, in
    text and in JSON (which is ASCII)."""
    path = str(tmp_path / "runs.db")
    hostile = "evil\x1b[2J\u202e\x9b"
    with runstore.open(path, clock=ManualClock(T0)) as store:
        store.create(hostile, "{}")
    code, out, err = cli(capsys, "show", path, hostile)
    assert code == 0
    assert "evil\\x1b[2J\\u202e\\x9b" in out
    code, out, err = cli(capsys, "show", path, "nope\x1b")
    assert code == 1
    assert "\x1b" not in err
    code, out, err = cli(capsys, "show", path, hostile, "--json")
    assert out.isascii()
    assert json.loads(out)["run"]["run_id"] == hostile
    for text in (out, err):
        assert not any(ch in text for ch in "\x1b\u202e\x9b")
