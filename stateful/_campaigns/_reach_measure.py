"""The suite's own reach measurement: the cells one default run of
``run_conformance`` reaches, and the reachable cells it misses
(``_machines._reach_gaps.KNOWN_GAPS``).
"""

from __future__ import annotations

import os

from runstore.consensus import SqlConsensus

from .._machines._reach import Reach, describe_cell, gaps, reach_tables, recording
from ._conformance import run_conformance


def default_reach() -> Reach:
    """The cells one default run of ``run_conformance(consensus_factory=SqlConsensus)``
    reaches (the suite's own reach measurement; ``HYPOTHESIS_PROFILE`` is
    ignored for it)."""
    reach = Reach()
    saved = os.environ.pop("HYPOTHESIS_PROFILE", None)
    try:
        with recording(reach):
            run_conformance(consensus_factory=SqlConsensus)
    finally:
        if saved is not None:
            os.environ["HYPOTHESIS_PROFILE"] = saved
    return reach


def _main() -> None:  # pragma: no cover - a maintenance command
    """Run the default measurement and print the tables, then the reachable
    cells it missed as the source of ``_reach_gaps.KNOWN_GAPS``:
    ``python -m runstore.stateful._campaigns._reach_measure``."""
    reach = default_reach()
    print(reach_tables(reach))
    print("KNOWN_GAPS = (")
    for cell in gaps(reach):
        print(f"    {describe_cell(cell)!r},")
    print(")")


if __name__ == "__main__":  # pragma: no cover
    _main()
