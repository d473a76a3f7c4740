"""Time to first failure of every planted bug under ``run_conformance``'s default budget.

    python benchmarks/zoo_detection.py            # every entry, 3 runs each
    python benchmarks/zoo_detection.py --runs 5 steal_cutoff_inclusive
    python benchmarks/zoo_detection.py planted:opening/reader_never_follows
    python benchmarks/zoo_detection.py --runs 3 planted   # every planted entry
    python benchmarks/zoo_detection.py planted:pg-session # one table's entries

Two kinds of entry. A zoo entry (``tests/zoo``: broken strategies and
stores, and broken attempt stores) is run through the machines
``run_conformance`` would run. A planted entry, ``planted:<table>/<name>``,
is a bug that is not a zoo module: a monkeypatch on the library, kept in a
test module's ``PLANTED`` table with the check it must fire and the machine
it runs on:

    opening      tests/stateful/checks/test_opening_check.py      the opening check
    causes       tests/stateful/campaigns/test_failure_causes.py     FailureCauseMismatch
    pg-session   tests/stateful/checks/test_pg_session_check.py   the session and schema checks
    oversized    tests/stateful/checks/test_oversized_checkpoint.py  the attempt machine on a file

The plant is made with ``pytest.MonkeyPatch.context()`` for one run and undone
when the run ends. Entries on PostgreSQL get a server the way the tests do
(``RUNSTORE_TEST_POSTGRES``, else a throwaway cluster); without one they are
skipped, and the line says why. (The tests run
``postgres_cause_naming_a_table_for_a_fault`` with 40 examples; here it gets
the default budget like every other entry.)

Every machine runs under its default budget without shrinking, until the
first failure. Run 1 is the default itself (derandomized: what a third
party's CI sees); runs 2.. are the same budget randomized with seeds 1,
2, ... Printed per entry: the check that fired, seconds and examples to the
first failure (median and worst over the runs), and how many runs missed it
(reached the end of the budget without a failure). A planted entry whose
check is not the one its table names gets a line saying so.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import Phase, seed, settings
from hypothesis.stateful import get_state_machine_test

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from runstore.consensus import SqlConsensus  # noqa: E402
from runstore.stateful import (  # noqa: E402
    Capabilities,
    attempt_comparison_for,
    conformance_machines,
    opening_check_for,
)
from runstore.stateful._base._observe import Observer, observing  # noqa: E402
from runstore.stateful._campaigns._budget import default_settings  # noqa: E402
from runstore.stateful._targets import _postgres  # noqa: E402
from runstore.stateful._targets._builtin import BUILTIN_TARGETS  # noqa: E402
from tests.stateful.campaigns.test_attempt_zoo import ATTEMPT_ZOO  # noqa: E402
from tests.zoo import ZOO  # noqa: E402

PLANTED = "planted"
#: The test modules whose ``PLANTED`` tables the planted entries come from.
PLANTED_TABLES = {
    "opening": "tests.stateful.checks.test_opening_check",
    "causes": "tests.stateful.campaigns.test_failure_causes",
    "pg-session": "tests.stateful.checks.test_pg_session_check",
    "oversized": "tests.stateful.checks.test_oversized_checkpoint",
}
#: What a test or plant raises when it cannot run here (no PostgreSQL server,
#: no psycopg): pytest's skip, and its failure under ``CI=true``.
NOT_HERE = (pytest.skip.Exception, pytest.fail.Exception)


class Skipped(Exception):
    """An entry that cannot run here; the message says why."""


def machines_of(name: str) -> list[Any]:
    module = importlib.import_module(f"tests.zoo.{name}")
    if module.KIND == "consensus":
        return conformance_machines(consensus_factory=module.factory)
    if module.KIND == "attempts":
        target = BUILTIN_TARGETS["sqlite-sql"]
        assert target.store_factory is not None
        return [
            attempt_comparison_for(
                target.store_factory,
                module.capabilities,
                name=name,
                attempt_store=module.attempt_store,
            )
        ]
    return conformance_machines(
        store_factory=module.factory,
        capabilities=getattr(module, "capabilities", Capabilities()),
    )


def planted_table(table: str) -> dict[str, Any]:
    """A test module's ``PLANTED`` table (``Skipped`` if the module cannot
    be imported here, as the PostgreSQL one without psycopg)."""
    try:
        module = importlib.import_module(PLANTED_TABLES[table])
    except NOT_HERE as why:
        raise Skipped(str(why)) from None
    found: dict[str, Any] = module.PLANTED
    return found


def planted(name: str) -> tuple[Callable[[Any], None], str | tuple[str, ...], Callable[[], Any]]:
    """(plant, expected check or checks, what builds the machine) of
    ``planted:<table>/<name>``. The opening table names no machine: its
    tests run the opening check over SqlConsensus."""
    table, key = name.removeprefix(f"{PLANTED}:").split("/", 1)
    entry = planted_table(table)[key]
    if table == "opening":
        return entry[0], entry[1], lambda: opening_check_for(SqlConsensus, name="planted")
    return entry[0], entry[1], entry[2]


def planted_names(selector: str) -> list[str]:
    """The planted entries ``selector`` names: ``planted`` (all of them),
    ``planted:<table>``, or one ``planted:<table>/<name>``."""
    if "/" in selector:
        table, key = selector.removeprefix(f"{PLANTED}:").split("/", 1)
        try:
            known = planted_table(table)
        except Skipped:
            return [selector]  # reported as skipped when its turn comes
        if key not in known:
            raise KeyError(f"no planted entry {key!r} in {table!r}")
        return [selector]
    table = selector.removeprefix(PLANTED).removeprefix(":")
    tables = [table] if table else list(PLANTED_TABLES)
    names = []
    for one in tables:
        try:
            keys = sorted(planted_table(one))
        except Skipped:
            keys = ["*"]  # reported as skipped when its turn comes
        names += [f"{PLANTED}:{one}/{key}" for key in keys]
    return names


def check_ready(name: str) -> None:
    """Build the entry's machine once, unplanted and off the clock, so an
    entry on PostgreSQL gets its server (a throwaway cluster starts here) or
    ``Skipped`` saying why there is none."""
    if not name.startswith(f"{PLANTED}:"):
        return
    try:
        planted(name)[2]()
    except NOT_HERE as why:
        raise Skipped(str(why)) from None
    if isinstance(_postgres._server, _postgres.Server):
        warm_postgres()


@functools.cache
def warm_postgres() -> None:
    """The first database made migrates the template: make one off the clock."""
    with _postgres.fresh_database():
        pass


def first_failure(build: Callable[[], list[Any]], run: int) -> tuple[str, float, int | None]:
    """(check or "missed", seconds, examples to the first failure) of the
    machines ``build`` makes, run one after another. Examples are counted
    here, as machines made: the opening, session and schema checks do not
    report theirs to the observer."""
    started = time.monotonic()
    observer = Observer()
    made = 0
    with observing(observer), pytest.MonkeyPatch.context() as counting:
        for machine in build():
            init = machine.__init__

            def counted(self: Any, init: Callable[[Any], None] = init) -> None:
                nonlocal made
                made += 1
                init(self)

            counting.setattr(machine, "__init__", counted)
            chosen = settings(
                default_settings(machine),
                phases=[Phase.explicit, Phase.generate, Phase.target],
                derandomize=run == 1,
                print_blob=False,
            )
            test = get_state_machine_test(machine, settings=chosen)
            if run > 1:
                test = seed(run - 1)(test)
            try:
                test()
            except AssertionError as error:
                return type(error).__name__, time.monotonic() - started, made
    return "missed", time.monotonic() - started, None


def one_run(name: str, run: int) -> tuple[str, float, int | None]:
    """(check or "missed", seconds, examples to the first failure)."""
    if not name.startswith(f"{PLANTED}:"):
        return first_failure(lambda: machines_of(name), run)
    plant, _, machine_for = planted(name)
    with pytest.MonkeyPatch.context() as monkeypatch:
        plant(monkeypatch)
        return first_failure(lambda: [machine_for()], run)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "names",
        nargs="*",
        help="zoo entries, planted:<table>/<name>, planted:<table> or planted (default: all)",
    )
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    names: list[str] = []
    for selector in args.names or [*ZOO, *ATTEMPT_ZOO, PLANTED]:
        if selector == PLANTED or selector.startswith(f"{PLANTED}:"):
            table = selector.removeprefix(PLANTED).removeprefix(":").split("/")[0]
            if table and table not in PLANTED_TABLES:
                parser.error(f"no planted table {table!r} (tables: {', '.join(PLANTED_TABLES)})")
            try:
                names += planted_names(selector)
            except KeyError as why:
                parser.error(why.args[0])
        elif selector in ZOO or selector in ATTEMPT_ZOO:
            names.append(selector)
        else:
            parser.error(f"no zoo entry {selector!r}")
    width = max(len("entry"), *(len(name) for name in names))
    print(
        f"{'entry':{width}} {'check':26} {'median s':>8} {'worst s':>8} "
        f"{'median ex':>9} {'worst ex':>8} missed"
    )
    for name in names:
        try:
            check_ready(name)
        except Skipped as why:
            print(f"{name:{width}} skipped: {why}", flush=True)
            continue
        results = [one_run(name, run) for run in range(1, args.runs + 1)]
        found = [r for r in results if r[0] != "missed"]
        checks = sorted({r[0] for r in found}) or ["-"]
        seconds = [r[1] for r in found] or [float("nan")]
        examples = [r[2] for r in found if r[2] is not None] or [0]
        missed = len(results) - len(found)
        worst_s = max(r[1] for r in results)
        print(
            f"{name:{width}} {','.join(checks)[:26]:26} {statistics.median(seconds):8.1f} "
            f"{worst_s:8.1f} {statistics.median(examples):9.0f} {max(examples):8d} "
            f"{missed}/{len(results)}",
            flush=True,
        )
        if name.startswith(f"{PLANTED}:"):
            expected = planted(name)[1]
            allowed = (expected,) if isinstance(expected, str) else expected
            wrong = sorted({r[0] for r in found} - set(allowed))
            if wrong:
                print(f"{'':{width}} expected {' or '.join(allowed)}, fired {', '.join(wrong)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
