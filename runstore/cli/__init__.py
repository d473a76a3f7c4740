"""The ``runstore`` command line.

Subcommands:

- ``runstore fuzz [--target NAME | --consensus MODULE:FACTORY | --store MODULE:FACTORY]
  [--capabilities NAME=BOOL,... | --no-reopen] [--minutes N | --examples N] [--seed N]
  [--db DIR] [--out DIR]``: a randomized conformance campaign; it ends with one
  summary (what was found, the seed to replay it, whether shrinking finished,
  every file written); on a failure it writes a regression test file and exits 1.
- ``runstore explore [--target NAME | --consensus MODULE:FACTORY | --store
  MODULE:FACTORY] [--scope small|medium|lineage|large|attempts|attempts-medium] [--attempt-store
  MODULE:FACTORY] [--no-attempts] [--seconds N] [--out DIR]``:
  walk a whole scope over the reference model and apply every transition to
  the store or strategy under test (a run scope is followed by the attempt
  store's own scope where an attempt store can be built over the store,
  unless ``--no-attempts``; ``--scope attempts`` walks that one alone and
  ``--attempt-store`` puts an attempt store factory under test in place of
  ``AttemptStore``); exits 0 when the scope was exhausted
  clean, 1 on a divergence or broken invariant (the shortest program printed
  and written as a regression file), 2 on a usage or harness error, 3 when
  the time ran out first.
- ``runstore replay FILE``: run a regression file under pytest.
- ``runstore demo ...``: the ownership demonstration: worker processes
  compete for runs while one is killed and one frozen.
- ``runstore torture --db TARGET ...``: worker processes race on one database
  with kills and stops; the recorded history is checked for linearizability
  (exits 1 on a violation; see "Check concurrent histories" in the docs).
- ``runstore worker MODULE:HANDLER --db TARGET [--concurrency N] [--host-id ID]
  [--grace-seconds S] [--json] [--clock-file PATH]``: one worker process
  taking runs and settling them with the handler's answers until SIGTERM or
  SIGINT (then held runs get the grace period, and the rest are suspended);
  one log line per event; exits 0 after a clean stop (see "Run a fleet of
  workers" in the docs).
- ``runstore runs|show|check|stats|purge|backup|migrate DB ...``: the operator
  commands, on a SQLite path or a PostgreSQL URL (see "Operate a store from
  the command line" in the docs).

``fuzz``, ``explore``, ``replay`` and ``torture`` need the ``conformance`` extra (Hypothesis
and pytest); without it they say so and exit 2.

This package, ``python -m runstore`` and ``python -m runstore.stateful`` are
the top of the house. May import: anything of ``runstore``, ``runstore.model``
and ``runstore.stateful`` (the suite only inside the commands that need it);
no other room imports it.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

from runstore._version import __version__, install_hint
from runstore.cli import _ops, _worker
from runstore.cli._ops._format import printable_lines

__all__ = ["main"]


def _extra_missing(command: str) -> str:
    """The one line saying that ``command`` needs the conformance extra, and how
    to install it into this installation."""
    return (
        f"runstore {command}: this command needs the conformance extra "
        f"(Hypothesis and pytest); install it with: {install_hint('conformance')}\n"
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="runstore", description="Durable runs under fenced ownership."
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    fuzz = commands.add_parser(
        "fuzz",
        help="fuzz a store or consensus strategy against the reference model",
        description="Run the conformance machines in randomized batches until the time or "
        "example budget is spent. On a failure, write a pytest regression file and exit 1.",
    )
    which = fuzz.add_mutually_exclusive_group()
    which.add_argument(
        "--target",
        metavar="NAME",
        help="a built-in target (sqlite-sql, sqlite-local, sqlite-file-sql, sqlite-file-local,"
        " model, postgres-sql: needs RUNSTORE_TEST_POSTGRES or initdb on PATH; the async"
        " stores of runstore.aopen: sqlite-async, postgres-async) or MODULE:FACTORY;"
        " default: every built-in synchronous SQLite target in turn",
    )
    which.add_argument(
        "--consensus", metavar="MODULE:FACTORY", help="a Consensus strategy factory to test"
    )
    which.add_argument(
        "--store",
        metavar="MODULE:FACTORY",
        help="a store factory (clock, path) -> store, or an async one (-> AsyncRunStore)",
    )
    fuzz.add_argument(
        "--attempt-store",
        metavar="MODULE:FACTORY",
        help="an attempt store factory (store, **options) -> attempt store to test in place of"
        " AttemptStore, over the target's SQLite stores (attempt machine only)",
    )
    fuzz.add_argument(
        "--capabilities",
        metavar="NAME=BOOL,...",
        help="what the store under test can do, over what its factory declares"
        " (reopen, whole_state, lease_introspection, fault_injection), e.g."
        " reopen=false,fault_injection=true",
    )
    fuzz.add_argument(
        "--no-reopen",
        action="store_true",
        help="the store cannot be reopened on its path (an in-memory store):"
        " the same as --capabilities reopen=false",
    )
    budget = fuzz.add_mutually_exclusive_group()
    budget.add_argument("--minutes", type=float, help="time budget, shrinking included (default 1)")
    budget.add_argument("--examples", type=int, help="example budget per target")
    fuzz.add_argument(
        "--seed", type=int, help="replay a campaign (default: a random seed, printed)"
    )
    fuzz.add_argument(
        "--coverage",
        action="store_true",
        help="at the end, print which cells of each operation's reach table the run-store"
        " machine reached (outcome x prior situation) and which reachable ones it missed",
    )
    fuzz.add_argument(
        "--db",
        default=".runstore-fuzz/db",
        metavar="DIR",
        help="Hypothesis example database, one folder per target (default %(default)s)",
    )
    fuzz.add_argument(
        "--out",
        default=".runstore-fuzz/out",
        metavar="DIR",
        help="where regression files go (default %(default)s)",
    )

    explore = commands.add_parser(
        "explore",
        help="walk a small scope exhaustively, for the model and for a store or strategy",
        description="Walk every state of a scope over the reference model breadth-first,"
        " checking every invariant in every state, and apply every transition to the store"
        " or strategy under test (if one is given), comparing answers and states. Exit 0:"
        " exhausted and everything agreed; 1: a divergence or a broken invariant (the"
        " shortest program is printed and written as a regression file; 1 wins over 3);"
        " 2: a usage or harness error; 3: the time ran out first.",
    )
    explore_which = explore.add_mutually_exclusive_group()
    explore_which.add_argument(
        "--target",
        metavar="NAME",
        help="a built-in target (model, sqlite-sql, sqlite-local, sqlite-file-sql,"
        " sqlite-file-local, postgres-sql, sqlite-async, postgres-async) or MODULE:FACTORY;"
        " default: the model alone",
    )
    explore_which.add_argument(
        "--consensus", metavar="MODULE:FACTORY", help="a Consensus strategy factory to test"
    )
    explore_which.add_argument(
        "--store",
        metavar="MODULE:FACTORY",
        help="a store factory (clock, path) -> store, or an async one (-> AsyncRunStore)",
    )
    explore.add_argument(
        "--scope",
        choices=("tiny", "small", "medium", "lineage", "large", "attempts", "attempts-medium"),
        default="small",
        help="the scope to walk (default %(default)s; tiny is the tests' own, one run and"
        " two owners; attempts is the attempt store's own scope alone, which every other"
        " scope but tiny is followed by where an attempt store can be built over the store;"
        " attempts-medium is the same world a move deeper; lineage is small's over a root"
        " and its second round, list_runs taking forged cursors too)",
    )
    explore.add_argument(
        "--attempt-store",
        metavar="MODULE:FACTORY",
        help="an attempt store factory (store, **options) -> attempt store to walk in place"
        " of AttemptStore in the attempt scope",
    )
    explore.add_argument(
        "--no-attempts",
        action="store_true",
        help="walk the run scope only, not the attempt store's own scope after it",
    )
    explore.add_argument(
        "--seconds", type=float, help="time budget in seconds (default: none, walk it all)"
    )
    explore.add_argument(
        "--capabilities",
        metavar="NAME=BOOL,...",
        help="what the store under test can do, over what its factory declares",
    )
    explore.add_argument(
        "--out",
        default=".runstore-explore/out",
        metavar="DIR",
        help="where the regression file of a failure goes (default %(default)s)",
    )

    replay = commands.add_parser(
        "replay", help="run a regression file written by fuzz under pytest"
    )
    replay.add_argument("file", type=Path)

    commands.add_parser("demo", help="the ownership demonstration", add_help=False)
    commands.add_parser(
        "torture",
        help="race worker processes on one database and check the history's linearizability",
        add_help=False,
    )
    _worker.add_parser(commands)
    _ops.add_parsers(commands)
    return parser


def _missing_extra(error: ImportError) -> bool:
    return (error.name or "").split(".")[0] in ("hypothesis", "pytest", "_pytest")


def _unreadable(path: Path) -> str | None:
    """Why ``path`` cannot be read as a regression file, or ``None``."""
    if path.is_dir():
        return "it is a folder, not a regression file"
    try:
        with path.open("rb"):
            pass
    except FileNotFoundError:
        return "no such file"
    except OSError as error:
        return os.strerror(error.errno).lower() if error.errno else type(error).__name__
    return None


def _replay(path: Path) -> int:
    """Run one regression file under pytest, in a fresh interpreter, with the
    current directory importable (regressions may import a project's factory)."""
    if importlib.util.find_spec("pytest") is None:
        sys.stderr.write(_extra_missing("replay"))
        return 2
    problem = _unreadable(path)
    if problem is not None:
        sys.stderr.write(printable_lines(f"runstore replay: cannot open {path}: {problem}") + "\n")
        return 2
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.getcwd(), env.get("PYTHONPATH")]))
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(path)]
    return subprocess.call(command, env=env)


def _torture(argv: list[str]) -> int:
    """``runstore torture``: its own options (``runstore torture --help``)."""
    try:
        torture = importlib.import_module("runstore.stateful._campaigns._torture")
    except ImportError as error:
        if not _missing_extra(error):
            raise
        sys.stderr.write(_extra_missing("torture"))
        return 2
    return int(torture.main(argv))


def main(argv: list[str] | None = None) -> int:
    """Run the command line with ``argv`` (the arguments after the program
    name; ``sys.argv[1:]`` when None) and return the exit status: 0 when the
    command did its work, 2 for a usage error or a target it cannot open
    (said in one line); 1 is a finding (a failed check, a divergence) and
    each command's ``--help`` says what else it may return."""
    args_list = sys.argv[1:] if argv is None else list(argv)
    if args_list[:1] == ["demo"]:
        demo = importlib.import_module("runstore.cli._demo")  # the ownership demonstration
        return int(demo.main(args_list[1:]) or 0)
    if args_list[:1] == ["torture"]:
        return _torture(args_list[1:])
    parser = _parser()
    args = parser.parse_args(args_list)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    if args.command == "replay":
        return _replay(args.file)
    if args.command in _ops.COMMANDS:
        return _ops.run(args)
    if args.command == "worker":
        return _worker.run(args)
    try:
        from runstore.stateful._campaigns import _fuzz
    except ImportError as error:
        if not _missing_extra(error):
            raise
        sys.stderr.write(_extra_missing(args.command))
        return 2
    if args.command == "explore":
        from runstore.stateful._campaigns import _explore

        try:
            return int(_explore.main_explore(args))
        except ValueError as error:
            sys.stderr.write(f"runstore explore: {error}\n")
            return 2
    try:
        return _fuzz.main_fuzz(args)
    except ValueError as error:
        sys.stderr.write(f"runstore fuzz: {error}\n")
        return 2


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
