"""Judge one mutant with the conformance suite alone: ``python mutation/judge.py MODULE``.

Run by ``mutation/run.py`` inside the mutated copy of the tree, with
``runstore`` imported from that copy. ``MODULE`` is the mutated file; it
picks what the suite runs, each machine under ``run_conformance``'s default
budget (``runstore.stateful._budget``) without shrinking (the verdict, not
the shortest program, is wanted):

- ``runstore/postgres/...``: the PostgreSQL store over ``SqlConsensus``, on a
  throwaway cluster, through the run-store and attempt machines, on the
  path the module serves (the one-round-trip functions for ``_fused*``, the
  general path otherwise), each machine at most ``POSTGRES_EXAMPLES``
  examples of the default's steps (as ``tests/test_postgres_conformance.py``);
- ``runstore/consensus/_local.py``: ``LocalConsensus`` (strategy machine,
  then inside the SQLite adapter on a file, then with attempts);
- anything else: ``SqlConsensus`` the same way.

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


def machines_for(module: str) -> list[type]:
    from runstore.consensus import LocalConsensus, SqlConsensus
    from runstore.stateful import Capabilities, conformance_machines

    if module.startswith("runstore/postgres/"):
        from runstore.stateful._postgres import postgres_store_factory

        fast = "/_fused" in module
        return conformance_machines(
            store_factory=postgres_store_factory(fast_path=fast),
            capabilities=Capabilities(reopen=True, fault_injection=True),
        )
    strategy = LocalConsensus if module.endswith("consensus/_local.py") else SqlConsensus
    return conformance_machines(consensus_factory=strategy)


def main(argv: list[str]) -> int:
    module = argv[1] if len(argv) > 1 else ""
    started = time.monotonic()
    try:
        from runstore.stateful._budget import default_settings

        machines = machines_for(module)
    except Exception as error:  # the mutant broke an import
        print(f"killed by import: {type(error).__name__}: {error}")
        return 2
    postgres = module.startswith("runstore/postgres/")
    for machine in machines:
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
