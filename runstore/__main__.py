"""``python -m runstore``: the same command line as the ``runstore`` script."""

from runstore.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
