"""The ``runstore`` command line."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    print("runstore: no commands yet", args, file=sys.stderr)
    return 2
