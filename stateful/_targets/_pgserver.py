"""A throwaway PostgreSQL server to torture: ``python -m runstore.stateful._targets._pgserver``.

``TortureServer`` starts the test cluster (``runstore.stateful._targets._postgres.Cluster``:
a temporary folder, a unix socket only, run as ``nobody`` when this process is
root) and creates databases on it, each migrated to runstore's schema, with
``synchronous_commit`` on. The cluster itself runs with ``fsync`` off: the
faults a torture injects are server crashes, not power loss, and a crashed
server's written WAL is still in the kernel's page cache. What must not be
off is ``synchronous_commit``: with it off, the server acknowledges a commit
before writing its WAL, and a crash loses commits the clients were told had
happened (the torture finds exactly that, as it should). ``restart()`` crashes
the server (an immediate stop: no shutdown checkpoint, every session cut) and
starts it again on the same data, returning once it accepts connections.

On the command line it starts a server, creates one database, prints that
database's URL as its only line on stdout, and then waits for signals:

- ``SIGUSR1``: restart the server (as ``restart()``), so a torture can be
  given ``--restart-command "kill -USR1 <pid>"``;
- ``SIGTERM``, ``SIGINT`` or ``SIGHUP``: stop the server, remove its folder,
  exit 0.

``.ci/run`` uses it to torture PostgreSQL without a server of its own.
"""

from __future__ import annotations

import contextlib
import itertools
import signal
import sys
from collections.abc import Sequence
from typing import Any

from ._postgres import Cluster, with_database


class TortureServer:
    """A throwaway cluster whose databases a torture may crash and restart."""

    def __init__(self) -> None:
        self.cluster = Cluster()
        self._names = itertools.count(1)
        self.restarts = 0

    def create_database(self) -> str:
        """A new database with runstore's schema and ``synchronous_commit`` on; its URL."""
        import psycopg
        from psycopg import sql

        import runstore.postgres

        name = f"torture_{next(self._names)}"
        with psycopg.connect(self.cluster.url, autocommit=True) as admin:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            admin.execute(
                sql.SQL("ALTER DATABASE {} SET synchronous_commit = on").format(
                    sql.Identifier(name)
                )
            )
        url = with_database(self.cluster.url, name)
        runstore.postgres.open(url).close()
        return url

    def drop_database(self, url: str) -> None:
        """Drop the database behind ``url`` (its sessions are ended first)."""
        import urllib.parse

        import psycopg
        from psycopg import sql

        name = urllib.parse.unquote(urllib.parse.urlsplit(url).path.lstrip("/"))
        with psycopg.connect(self.cluster.url, autocommit=True) as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )

    def restart(self) -> None:
        """Crash the server (immediate stop) and start it again; returns when it is up."""
        self.cluster.restart()
        self.restarts += 1

    def stop(self) -> None:
        """Stop the server and remove its folder. Repeatable."""
        self.cluster.stop()

    def __enter__(self) -> TortureServer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def main(argv: Sequence[str] | None = None) -> int:
    """Start a server and one database, print its URL, serve until told to stop."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments:
        sys.stderr.write(
            "usage: python -m runstore.stateful._targets._pgserver\n"
            "  prints a throwaway database's URL; SIGUSR1 restarts the server, "
            "SIGTERM stops it\n"
        )
        return 2
    wanted = {signal.SIGUSR1, signal.SIGTERM, signal.SIGINT, signal.SIGHUP}
    # Taken synchronously below, never by a handler in the middle of a restart.
    signal.pthread_sigmask(signal.SIG_BLOCK, wanted)
    with TortureServer() as server:
        url = server.create_database()
        sys.stdout.write(url + "\n")
        sys.stdout.flush()
        while True:
            received = signal.sigwait(wanted)
            if received != signal.SIGUSR1:
                break
            with contextlib.suppress(Exception):
                server.restart()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
