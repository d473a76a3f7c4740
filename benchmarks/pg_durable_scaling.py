"""Durable commits on PostgreSQL: do writers on distinct runs scale?

Heartbeats of writers on distinct runs, the store (one round trip per
heartbeat) against raw psycopg (``postgres_throughput``'s 5-round-trip
compare-and-swap on a table with no triggers), at 1, 2, 4 and 8 clients, on
a throwaway cluster of its own with ``fsync``, ``full_page_writes`` and
``synchronous_commit`` on. Sixteen client processes start once; every round
runs one window of each point and side, the sides in alternating order, so
a busy machine weighs on both alike. Printed per point: throughput, the
store/raw ratio of throughput, and, from ``pg_stat_wal`` and
``pg_stat_database``, WAL syncs per commit over the point's windows (below
1.0, commits share WAL flushes: group commit forms; load-independent, unlike
the times).

``--standby`` adds a second throwaway cluster on the same machine as a
streaming replica of the first, named in ``synchronous_standby_names``, so
every commit waits for the standby to flush it too (on loopback: a unix
socket).

``--no-counter`` is the scratch experiment of issue 28: the store with its
revision trigger made a no-op (no change feed at all), to see what the
change feed costs.

``--repeat K`` runs every point K times on the same cluster and ends with
each point's median and range of store/raw and of WAL syncs per commit.

Run: ``python benchmarks/pg_durable_scaling.py [--seconds S] [--windows W]
[--standby] [--no-counter] [--repeat K]``. Prints the load (``/proc/loadavg``) before
and after.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))

import postgres_throughput as pt

from runstore.stateful._targets import _postgres

COUNTS = (1, 2, 4, 8)

_WAL = """
SELECT (SELECT wal_sync FROM pg_stat_wal),
       (SELECT sum(xact_commit) FROM pg_stat_database),
       (SELECT wal_bytes FROM pg_stat_wal)
"""

_NO_COUNTER = """
CREATE OR REPLACE FUNCTION flows_runs_revision() RETURNS trigger
LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;
"""


def _load() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def _counters(url: str) -> tuple[int, int, int]:
    """WAL syncs, commits (read-only ones too, the cluster's) and WAL bytes so far."""
    with psycopg.connect(url, autocommit=True) as c:
        c.execute("SELECT pg_stat_force_next_flush()")
        row = c.execute(_WAL).fetchone()
        assert row is not None
        return int(row[0]), int(row[1]), int(row[2])


class Standby:
    """A streaming replica of ``cluster`` in a throwaway folder, started as
    the cluster's synchronous standby (``synchronous_standby_names``)."""

    def __init__(self, cluster: Any) -> None:
        self.primary = cluster
        self.folder = Path(tempfile.mkdtemp(prefix="runstore-standby-"))
        user = cluster._user
        if user:
            os.chown(self.folder, user["user"], user["group"])
        data = self.folder / "data"
        socket = str(cluster.folder)
        subprocess.run(
            [
                _postgres._binary("pg_basebackup") or "pg_basebackup",
                "-h",
                socket,
                "-U",
                cluster.role,
                "-D",
                str(data),
                "-X",
                "stream",
                "-R",
                "--no-sync",
            ],
            check=True,
            **user,
        )
        with (data / "postgresql.auto.conf").open("a") as conf:
            conf.write(
                f"primary_conninfo = 'host={socket} user={cluster.role} "
                "application_name=standby1'\n"
            )
        self.process = subprocess.Popen(
            [
                _postgres._binary("postgres") or "postgres",
                "-D",
                str(data),
                "-c",
                "listen_addresses=",
                "-c",
                f"unix_socket_directories={self.folder}",
                "-c",
                "fsync=on",
                "-c",
                "hot_standby=on",
                "-c",
                "shared_buffers=32MB",
                "-c",
                "max_connections=200",
            ],
            stdout=(self.folder / "server.log").open("wb"),
            stderr=subprocess.STDOUT,
            **user,
        )

    def attach(self, admin_url: str) -> None:
        with psycopg.connect(admin_url, autocommit=True) as c:
            c.execute("ALTER SYSTEM SET synchronous_standby_names = 'standby1'")
            c.execute("SELECT pg_reload_conf()")
            for _ in range(300):
                row = c.execute(
                    "SELECT sync_state FROM pg_stat_replication WHERE application_name = 'standby1'"
                ).fetchone()
                if row is not None and row[0] == "sync":
                    return
                time.sleep(0.1)
        raise RuntimeError("the standby did not become synchronous")

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(30)


def _setup(url: str, kind: str, index: int) -> tuple[Any, Any]:
    """One client's call (``postgres_throughput``'s: a heartbeat of its own run,
    or the baseline on its own row) and its connection."""
    if kind == "raw":
        baseline = pt.Baseline(url, f"raw-client-{index}")
        return baseline.one, baseline.connection
    clock = pt.ManualClock(1_000)
    store = pt.open_store(url, clock, "fast")
    name = f"fast-client-{index}"
    try:
        store.create(name, "{}")
        store.claim_and_own(name, pt.PENDING, pt.OWNER, 1_000)
    except pt.RunStoreError:
        pass  # made by an earlier run

    def step() -> None:
        # The store clock moves with the beats: a beat more than the skew allowance
        # ahead of it would be refused.
        store.heartbeat(name, pt.OWNER, clock.advance(1))

    return step, store._connection


def _window_client(url: str, kind: str, index: int, pipe: Any) -> None:
    """``postgres_throughput``'s window client, which also makes its backend
    report its statistics at the end of each window: a backend reports them
    at most once a second, so without it a window's commits and WAL syncs
    were partly counted in the windows after it, the other side's included."""
    step, connection = _setup(url, kind, index)
    pt.serve_windows(
        step, pipe, after=lambda: connection.execute("SELECT pg_stat_force_next_flush()")
    )


def scaling(url: str, seconds: float, windows: int) -> dict[int, tuple[float, float, float]]:
    """Per client count: store tx/s, raw tx/s, the store's WAL syncs per commit."""
    window = seconds / windows
    clients = pt.Clients(_window_client, (url,), max(COUNTS))
    done = {(kind, n): 0 for kind in ("store", "raw") for n in COUNTS}
    syncs = {(kind, n): [0, 0, 0] for kind in ("store", "raw") for n in COUNTS}
    try:
        for round_ in range(-1, windows):
            for position, n in enumerate(COUNTS):
                kinds = ("store", "raw") if (round_ + position) % 2 == 0 else ("raw", "store")
                for kind in kinds:
                    before = _counters(url)
                    calls, raised = clients.window(kind, n, window if round_ >= 0 else 0.1)
                    after = _counters(url)
                    if raised:
                        raise RuntimeError(f"{raised} {kind} calls raised")
                    if round_ >= 0:
                        done[(kind, n)] += calls
                        syncs[(kind, n)][0] += after[0] - before[0]
                        syncs[(kind, n)][1] += after[1] - before[1]
                        syncs[(kind, n)][2] += after[2] - before[2]
    finally:
        clients.close()
    print(
        f"{'clients':>8}{'store tx/s':>12}{'raw tx/s':>12}{'store/raw':>11}"
        f"{'store syncs/commit':>20}{'raw syncs/commit':>18}"
        f"{'store WAL B/call':>18}{'raw WAL B/call':>16}"
    )
    result = {}
    for n in COUNTS:
        store, raw = done[("store", n)] / seconds, done[("raw", n)] / seconds
        s_sync = syncs[("store", n)][0] / max(1, syncs[("store", n)][1])
        r_sync = syncs[("raw", n)][0] / max(1, syncs[("raw", n)][1])
        s_bytes = syncs[("store", n)][2] / max(1, done[("store", n)])
        r_bytes = syncs[("raw", n)][2] / max(1, done[("raw", n)])
        print(
            f"{n:>8}{store:>12.0f}{raw:>12.0f}{store / raw:>11.2f}{s_sync:>20.2f}{r_sync:>18.2f}"
            f"{s_bytes:>18.0f}{r_bytes:>16.0f}"
        )
        result[n] = (store, raw, s_sync)
    return result


def summary(runs: list[dict[int, tuple[float, float, float]]]) -> None:
    """Each point's store/raw and store WAL syncs per commit over the repeats:
    median and range."""
    print(f"over {len(runs)} runs: median [min, max]")
    print(f"{'clients':>8}{'store/raw':>24}{'store syncs/commit':>26}")
    for n in COUNTS:
        ratios = sorted(run[n][0] / run[n][1] for run in runs)
        syncs = sorted(run[n][2] for run in runs)
        print(
            f"{n:>8}{statistics.median(ratios):>10.2f} [{ratios[0]:.2f}, {ratios[-1]:.2f}]"
            f"{statistics.median(syncs):>12.2f} [{syncs[0]:.2f}, {syncs[-1]:.2f}]"
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=6.0, help="per point and side")
    parser.add_argument("--windows", type=int, default=6)
    parser.add_argument("--standby", action="store_true")
    parser.add_argument("--no-counter", action="store_true")
    parser.add_argument(
        "--repeat", type=int, default=1, help="runs of every point; then median and range"
    )
    args = parser.parse_args(argv)
    print(f"load before: {_load()}")
    cluster = _postgres.Cluster(fsync=True)
    standby = None
    server = _postgres.Server(cluster.url, cluster)
    try:
        if args.standby:
            standby = Standby(cluster)
            standby.attach(cluster.url)
        url = server.fresh_database()
        with psycopg.connect(url, autocommit=True) as setup:
            setup.execute(pt._RAW_SCHEMA)
            version = setup.execute("SHOW server_version").fetchone()[0]  # type: ignore[index]
            settings = setup.execute(
                "SELECT current_setting('fsync'), current_setting('synchronous_commit'), "
                "current_setting('synchronous_standby_names')"
            ).fetchone()
        # The schema: opening a store migrates it.
        pt.open_store(url, pt.ManualClock(0), "fast").close()
        if args.no_counter:
            with psycopg.connect(url, autocommit=True) as setup:
                setup.execute(_NO_COUNTER)
        print(
            f"PostgreSQL {version}, unix socket, fsync={settings[0]}, "  # type: ignore[index]
            f"synchronous_commit={settings[1]}, "  # type: ignore[index]
            f"synchronous_standby_names={settings[2]!r}"  # type: ignore[index]
            + (", revision trigger disabled (--no-counter)" if args.no_counter else "")
        )
        print(
            f"heartbeats of writers on distinct runs, {args.seconds:g} s per point and side "
            f"in {args.windows} interleaved windows"
        )
        runs = []
        for repeat in range(args.repeat):
            if repeat:
                print(f"repeat {repeat + 1} of {args.repeat}, load {_load()}")
            runs.append(scaling(url, args.seconds, args.windows))
        server.drop(url)
        if args.repeat > 1:
            summary(runs)
    finally:
        server.close()
        cluster.stop()
        if standby is not None:
            standby.stop()
    print(f"load after: {_load()}")


if __name__ == "__main__":
    main()
