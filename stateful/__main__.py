"""``python -m runstore.stateful``: the same ``fuzz`` and ``replay`` commands as
the ``runstore`` script; without a command it runs ``fuzz``."""

from __future__ import annotations

import sys

from runstore.cli import main


def _main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("fuzz", "replay", "-h", "--help"):
        argv = ["fuzz", *argv]
    return main(argv)


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))
