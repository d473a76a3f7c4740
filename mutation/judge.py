"""Judge one mutant with the conformance suite alone: ``python mutation/judge.py MODULE``.

Run by ``mutation/run.py`` inside the mutated copy of the tree, with
``runstore`` imported from that copy. ``MODULE`` is the mutated file; it
picks what the suite runs, each machine under ``run_conformance``'s default
budget (``runstore.stateful._campaigns._budget``) without shrinking (the verdict, not
the shortest program, is wanted):

- ``runstore/postgres/_fused*``: the PostgreSQL store over ``SqlConsensus``
  on its one-round-trip functions, on a throwaway cluster, through the
  run-store and attempt machines, each machine at most ``POSTGRES_EXAMPLES``
  examples of the default's steps (as ``tests/postgres/test_postgres_conformance.py``);
- other ``runstore/postgres/`` modules: the same on the general path, then on
  the one-round-trip functions;
- ``runstore/consensus/_local.py``: ``LocalConsensus`` (strategy machine,
  then inside the SQLite adapter on a file, then with attempts);
- anything else: ``SqlConsensus`` the same way; for the adapter's shared
  code (``runstore/_sql/``) and the row reader LocalConsensus opens with
  (``runstore/consensus/_rows.py``) then the adapter's machines over
  ``LocalConsensus`` too (a strategy without batch methods); for the code
  both SQL stores run (``SHARED_SQL``: ``runstore/_sql/``, ``SqlConsensus``
  and its row helpers), then the PostgreSQL machines on both paths.

Exit status: 0 when every machine passes (the mutant survived), 1 when a
check failed (killed: the check is printed as ``killed by CHECK``), 2 when
something else ended the run (killed too: an import error, a crash).
"""

from __future__ import annotations

import sys
import time

from hypothesis import Phase, settings
from hypothesis.stateful import run_state_machine_as_test

#: Examples per machine for a PostgreSQL mutant (the steps stay the default's).
POSTGRES_EXAMPLES = 40

#: The machines built over PostgreSQL (a budget of their own).
ON_POSTGRES: set[type] = set()

#: Modules both SQL stores run, judged on SQLite and then on PostgreSQL.
SHARED_SQL = ("runstore/_sql/", "runstore/consensus/_sql.py", "runstore/consensus/_rows.py")


def _postgres_machines(*, fast: bool) -> list[type]:
    from runstore.stateful import Capabilities, conformance_machines
    from runstore.stateful._targets._postgres import postgres_store_factory

    machines = conformance_machines(
        store_factory=postgres_store_factory(fast_path=fast),
        capabilities=Capabilities(
            reopen=True, fault_injection=True, server_clock=True, postgres_server=True
        ),
    )
    ON_POSTGRES.update(machines)
    return machines


def machines_for(module: str) -> list[type]:
    from runstore.consensus import LocalConsensus, SqlConsensus
    from runstore.stateful import conformance_machines

    if module.startswith("runstore/postgres/_fused"):
        return _postgres_machines(fast=True)
    if module.startswith("runstore/postgres/"):
        # The general path first, then the one-round-trip functions, which
        # share the transaction runner, the error mapping and the queries
        # they fall back on.
        return _postgres_machines(fast=False) + _postgres_machines(fast=True)
    strategy = LocalConsensus if module.endswith("consensus/_local.py") else SqlConsensus
    machines = conformance_machines(consensus_factory=strategy)
    if module.startswith(("runstore/_sql/", "runstore/consensus/_rows.py")):
        # The adapter takes other branches for a strategy without the batch
        # methods SqlConsensus has, and LocalConsensus rebuilds its leases
        # from the rows: the adapter's machines over LocalConsensus.
        machines += conformance_machines(consensus_factory=LocalConsensus)[1:]
    if module.startswith(SHARED_SQL):
        # Code both SQL stores run: PostgreSQL takes branches of its own in
        # it (its dialect's statements, the one-round-trip claim).
        machines += _postgres_machines(fast=False) + _postgres_machines(fast=True)
    return machines


def main(argv: list[str]) -> int:
    module = argv[1] if len(argv) > 1 else ""
    started = time.monotonic()
    try:
        from runstore.stateful._campaigns._budget import default_settings

        machines = machines_for(module)
    except Exception as error:  # the mutant broke an import
        print(f"killed by import: {type(error).__name__}: {error}")
        return 2
    for machine in machines:
        postgres = machine in ON_POSTGRES
        chosen = settings(
            default_settings(machine),
            phases=[Phase.explicit, Phase.generate, Phase.target],
            print_blob=False,
        )
        if postgres:
            # A database and a round trip per statement make a PostgreSQL
            # example ~10x a SQLite one: a fixed budget of its own.
            chosen = settings(chosen, max_examples=min(chosen.max_examples, POSTGRES_EXAMPLES))
        try:
            run_state_machine_as_test(machine, settings=chosen)
        except AssertionError as error:
            first = str(error).splitlines()[0] if str(error) else ""
            print(f"killed by {type(error).__name__} in {machine.__name__}: {first[:300]}")
            print(f"seconds {time.monotonic() - started:.1f}")
            return 1
        except Exception as error:
            print(f"killed by error {type(error).__name__} in {machine.__name__}: {error}"[:400])
            print(f"seconds {time.monotonic() - started:.1f}")
            return 2
        print(f"passed {machine.__name__} at {time.monotonic() - started:.1f}s", flush=True)
    print(f"survived; seconds {time.monotonic() - started:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
