"""Every ``runstore`` command answers a target it cannot open with one line on
stderr, naming what failed and why, and exit status 2: never a traceback.

Each command runs as a program (``python -m runstore.cli``), on a SQLite
path in a folder that does not exist and on a PostgreSQL URL whose server
cannot be reached (its password never printed). ``fuzz`` opens its target
through a store factory (``--store``), ``torture`` through ``--db``, and
``replay`` reads a regression file that is not there.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import runstore
from runstore import ManualClock

ROOT = Path(__file__).resolve().parents[2]
SECRET = "hunter2-open-fails"
#: Nothing listens on port 1 of the loopback interface: refused at once.
UNREACHABLE = f"postgresql://runstore:{SECRET}@127.0.0.1:1/runs"
#: Where ``store_at_target`` opens its store.
TARGET_VARIABLE = "RUNSTORE_TEST_OPEN_TARGET"


def store_at_target(clock: ManualClock, path: Path) -> runstore.RunStore:
    """A store factory for ``runstore fuzz --store``: it opens the target the
    test names, whatever path the campaign gives it."""
    return runstore.open(os.environ[TARGET_VARIABLE], clock=clock)


def _argv(command: str, target: str, tmp_path: Path) -> list[str]:
    copy = str(tmp_path / "copy.db")
    return {
        "demo": ["demo", "--db", target, "--workers", "1", "--runs", "1"],
        "runs": ["runs", target],
        "show": ["show", target, "some-run"],
        "check": ["check", target],
        "stats": ["stats", target],
        "purge": ["purge", target, "--before", "1d", "--yes"],
        "backup": ["backup", target, copy],
        "migrate": ["migrate", target],
        "fuzz": [
            "fuzz",
            "--store",
            "tests.cli.test_cli_open_failures:store_at_target",
            "--examples",
            "1",
            "--db",
            str(tmp_path / "fuzz-db"),
            "--out",
            str(tmp_path / "fuzz-out"),
        ],
        "torture": ["torture", "--db", target, "--seconds", "1", "--out", str(tmp_path / "t")],
        "replay": ["replay", str(tmp_path / "no-such-folder" / "test_regression_x.py")],
    }[command]


#: What the line must say is wrong, by backend (``replay``: the file).
WHY = {
    "sqlite": ("its folder does not exist", "does not exist (an open with"),
    "postgres": ("the server could not be reached",),
}

CASES = [
    pytest.param(command, backend, id=f"{command}-{backend}")
    for command in (
        "demo",
        "runs",
        "show",
        "check",
        "stats",
        "purge",
        "backup",
        "migrate",
        "fuzz",
        "torture",
        "replay",
    )
    for backend in ("sqlite", "postgres")
    # PostgreSQL is backed up with its own tools (``backup`` says which
    # without opening anything), and a regression file is a file.
    if not (backend == "postgres" and command in ("backup", "replay"))
]


@pytest.mark.processes
@pytest.mark.parametrize(("command", "backend"), CASES)
def test_a_target_that_cannot_be_opened_is_one_line_and_exit_2(
    command: str, backend: str, tmp_path: Path
) -> None:
    """One line on stderr, ``runstore COMMAND: ...``, naming the target and
    why it cannot be opened; nothing on stdout; exit 2; no password."""
    if backend == "postgres":
        pytest.importorskip("psycopg")
        target = UNREACHABLE
    else:
        target = str(tmp_path / "no-such-folder" / "runs.db")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env[TARGET_VARIABLE] = target
    done = subprocess.run(
        [sys.executable, "-m", "runstore.cli", *_argv(command, target, tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    lines = done.stderr.splitlines()
    assert (done.returncode, done.stdout, len(lines)) == (2, "", 1), done.stderr
    (line,) = lines
    assert line.startswith(f"runstore {command}: cannot open "), line
    if command == "replay":
        assert line.endswith("test_regression_x.py: no such file"), line
    else:
        assert any(why in line for why in WHY[backend]), line
    assert SECRET not in done.stderr
    assert not (tmp_path / "no-such-folder").exists()
