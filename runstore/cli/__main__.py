"""``python -m runstore.cli``: the ``runstore`` command, as ``python -m runstore``."""

from __future__ import annotations

from runstore.cli import main

if __name__ == "__main__":  # pragma: no cover - run as a program
    raise SystemExit(main())
