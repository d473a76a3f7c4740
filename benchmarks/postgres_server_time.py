"""Server time per single-run write on PostgreSQL: migration 2014's functions
against the ones before it, side by side.

One database holds two schemas: ``before``, migrated up to migration 2013
(the one-round-trip functions and the change-log trigger as they were), and
``after``, migrated fully. A bare psycopg connection per schema (autocommit,
statements prepared, as the store sends them) calls each operation's
server-side function with the arguments the store would pass, on runs
prepared so that every call succeeds. Each round runs one batch of every
operation on each side, the sides in alternating order, so both see the same
load.

Two figures per operation and side:

- **CPU**: the server process's CPU time per call (``/proc/<pid>/schedstat``,
  which counts only time on a core, so a busy machine inflates it far less
  than wall time), in batches run with ``track_functions = 'none'``. It
  covers everything the server does for the call: parsing the bound
  message, the function, the deferred triggers and the commit.
- **Functions**: in batches run with ``track_functions = 'pl'``, each
  function's total and self time per call (``pg_stat_user_functions``;
  wall time, inflated by load): the operation's function, the change-feed
  trigger (``flows_runs_revision``, which fires at commit, outside the
  function) and the row checks (``*_row_valid``, ``flows_json_valid``).

Medians over the rounds of each batch's per-call figure; ``after/before``
below 1 means 2014 is cheaper. Durable by default (``fsync`` and
``synchronous_commit`` on, a cluster of its own); ``--fast`` uses the test
cluster (both off). Nothing here is a timed assertion.

Run: ``python benchmarks/postgres_server_time.py [--rounds R] [--batch N]
[--fast] [--only op,op] [--instructions] [--before MIGRATION]``.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
from collections.abc import Callable
from typing import Any

import psycopg
from postgres_throughput import OWNER, STATE, THIEF

from runstore.postgres import _fused, _migrations
from runstore.stateful._targets import _postgres

#: The store's heartbeat staleness (runstore._sql._store, HEARTBEAT_STALE_AFTER_MS).
STALE = 30_000
WHO = (OWNER.host_id, OWNER.pid, OWNER.nonce)
THIEF_WHO = (THIEF.host_id, THIEF.pid, THIEF.nonce)
NONE4 = (None, None, None, None)
SIDES = ("before", "after")


#: The last migration of the ``before`` schema (``--before``): 2013 by default,
#: 2009 for the store as issue 28 measured it (the revision row bumped by a
#: trigger at commit, before the change feed of 2010).
BEFORE = [2013]


def _before_count() -> int:
    ids = [m.id for m in _migrations.MIGRATIONS]
    return ids.index(BEFORE[0]) + 1


def _owning(run_id: str, now: int) -> tuple[Any, ...]:
    """``claim_and_own``'s arguments: OWNER takes the pending ``run_id`` at ``now``."""
    return (run_id, "pending", *NONE4, now - STALE, *WHO, now, "claim")


class Maker:
    """Sends statements (``run``) and makes the runs an operation's calls need."""

    def __init__(self) -> None:
        self.serial = 0
        self.now = 1_000_000

    def run(self, statement: str, params: tuple[Any, ...]) -> Any:
        raise NotImplementedError

    def fresh(self, count: int, prefix: str) -> list[str]:
        ids = []
        for _ in range(count):
            self.serial += 1
            run_id = f"{prefix}-{self.serial:07d}"
            self.run(_fused.CREATE, (run_id, self.serial, None, None, None, STATE))
            ids.append(run_id)
        return ids

    def owned(self, count: int, prefix: str) -> list[str]:
        ids = self.fresh(count, prefix)
        for run_id in ids:
            self.own(run_id)
        return ids

    def own(self, run_id: str) -> None:
        self.run(_fused.CLAIM_AND_OWN, _owning(run_id, self.now))


class Side(Maker):
    """One schema and the connection that calls its functions."""

    def __init__(self, url: str, schema: str, count: int | None) -> None:
        super().__init__()
        self.schema = schema
        self.conn = psycopg.connect(url, autocommit=True, cursor_factory=psycopg.RawCursor)
        self.conn.execute(f"CREATE SCHEMA {schema}")
        self.conn.execute(f"SET search_path TO {schema}")
        _migrations.apply(self.conn.execute, schema, count)
        self.pid = int(self.conn.execute("SELECT pg_backend_pid()").fetchone()[0])  # type: ignore[index]

    def run(self, statement: str, params: tuple[Any, ...]) -> Any:
        cursor = self.conn.execute(statement, params, prepare=True)
        return cursor.fetchall() if cursor.description else []

    def own(self, run_id: str) -> None:
        (answer,) = self.run(_fused.CLAIM_AND_OWN, _owning(run_id, self.now))
        assert answer[0] == "activated", answer

    def cpu_ns(self) -> int:
        with open(f"/proc/{self.pid}/schedstat") as stat:
            return int(stat.read().split()[0])


Prepared = list[tuple[str, tuple[Any, ...], Callable[[Any], bool]]]


def _is(tag: str) -> Callable[[Any], bool]:
    return lambda rows: rows[0][0] == tag


def prepare(side: Maker, operation: str, n: int) -> Prepared:
    """n calls of ``operation`` on ``side``: (statement, params, answer check)."""
    now = side.now
    if operation == "create":
        first = side.serial + 1
        side.serial += n
        return [
            (_fused.CREATE, (f"new-{i:07d}", i, None, None, None, STATE), lambda rows: True)
            for i in range(first, first + n)
        ]
    if operation == "claim_and_own":
        return [
            (_fused.CLAIM_AND_OWN, _owning(r, now), _is("activated")) for r in side.fresh(n, "cao")
        ]
    if operation == "activate":
        calls: Prepared = []
        for r in side.fresh(n, "act"):
            (answer,) = side.run(_fused.CLAIM, (r, "pending", *NONE4, now - STALE, *WHO, now))
            assert answer[0] == "claimed", answer
            calls.append(
                (_fused.ACTIVATE, (r, "pending", *NONE4, *WHO, now, now), _is("activated"))
            )
        return calls
    if operation == "heartbeat":
        (r,) = side.owned(1, "beat")
        return [(_fused.RENEW, (r, *WHO, now + 1 + i, False), _is("updated")) for i in range(n)]
    if operation == "transition_owned/running":
        (r,) = side.owned(1, "run")
        params = (r, *WHO, None, "running", None, STATE)
        return [(_fused.TRANSITION_OWNED, params, _is("transitioned"))] * n
    if operation == "transition_owned/completing":
        return [
            (
                _fused.TRANSITION_OWNED,
                (r, *WHO, None, "completed", now, STATE),
                _is("transitioned"),
            )
            for r in side.owned(n, "done")
        ]
    if operation == "steal":
        later = now + STALE + 10_000
        return [
            (
                _fused.STEAL,
                (r, "running", *WHO, now, later - STALE, *THIEF_WHO, later),
                _is("claimed"),
            )
            for r in side.owned(n, "steal")
        ]
    if operation == "request_cancel":
        return [
            (_fused.REQUEST_CANCEL, (r, now), lambda rows: rows[0][0] == 1)
            for r in side.fresh(n, "cancel")
        ]
    if operation == "claim_next":
        side.fresh(n, "next")
        params = ("pending", "suspended", *WHO, now, now - STALE)
        return [(_fused.CLAIM_NEXT_ONCE, params, lambda rows: len(rows) == 1)] * n
    raise AssertionError(operation)


OPERATIONS = (
    "claim_and_own",
    "activate",
    "heartbeat",
    "transition_owned/running",
    "transition_owned/completing",
    "steal",
    "request_cancel",
    "claim_next",
    "create",
)

_FUNCTION_STATS = """
SELECT funcname, calls, total_time, self_time FROM pg_stat_user_functions
WHERE schemaname = %s
"""


def _functions(stats: Any, schema: str) -> dict[str, tuple[int, float, float]]:
    stats.execute("SELECT pg_stat_clear_snapshot()")
    rows = stats.execute(_FUNCTION_STATS, (schema,)).fetchall()
    return {name: (calls, total, self_) for name, calls, total, self_ in rows}


def _flush(side: Side) -> None:
    side.conn.execute("SELECT pg_stat_force_next_flush()")
    side.conn.execute("SELECT 1")  # idle between the two: the stats are flushed


def batch(side: Side, calls: Prepared) -> None:
    for statement, params, ok in calls:
        rows = side.run(statement, params)
        if not ok(rows):
            raise AssertionError(f"{side.schema}: unexpected answer {rows!r}")


def measure(url: str, rounds: int, n: int, operations: list[str]) -> None:
    sides = {
        "before": Side(url, "before", _before_count()),
        "after": Side(url, "after", None),
    }
    stats = psycopg.connect(url, autocommit=True)
    stats.execute("SET stats_fetch_consistency = 'none'")
    cpu: dict[tuple[str, str], list[float]] = {}
    fn: dict[tuple[str, str], list[dict[str, tuple[float, float]]]] = {}
    for side in sides.values():  # warm: plans made, plpgsql compiled
        for operation in operations:
            batch(side, prepare(side, operation, 3))
        side.conn.execute("ANALYZE")
    for round_ in range(rounds):
        for position, operation in enumerate(operations):
            order = SIDES if (round_ + position) % 2 == 0 else SIDES[::-1]
            for name in order:
                side = sides[name]
                side.conn.execute("SET track_functions = 'none'")
                calls = prepare(side, operation, n)
                began = side.cpu_ns()
                batch(side, calls)
                cpu.setdefault((operation, name), []).append((side.cpu_ns() - began) / n / 1e3)
                side.conn.execute("SET track_functions = 'pl'")
                calls = prepare(side, operation, n)
                _flush(side)
                start = _functions(stats, name)
                batch(side, calls)
                _flush(side)
                end = _functions(stats, name)
                per_call = {
                    f: (
                        (end[f][1] - start.get(f, (0, 0.0, 0.0))[1]) / n * 1e3,
                        (end[f][2] - start.get(f, (0, 0.0, 0.0))[2]) / n * 1e3,
                    )
                    for f in end
                    if end[f][0] != start.get(f, (0, 0.0, 0.0))[0]
                }
                fn.setdefault((operation, name), []).append(per_call)
    report(operations, cpu, fn)
    for side in sides.values():
        side.conn.close()
    stats.close()


def _median_fn(
    samples: list[dict[str, tuple[float, float]]],
) -> dict[str, tuple[float, float]]:
    names = {name for sample in samples for name in sample}
    return {
        name: (
            statistics.median(s.get(name, (0.0, 0.0))[0] for s in samples),
            statistics.median(s.get(name, (0.0, 0.0))[1] for s in samples),
        )
        for name in names
    }


def report(
    operations: list[str],
    cpu: dict[tuple[str, str], list[float]],
    fn: dict[tuple[str, str], list[dict[str, tuple[float, float]]]],
) -> None:
    print("\nserver CPU per call (us, median of the rounds' batches)")
    print(f"{'operation':<30}{'before':>9}{'after':>9}{'after/before':>14}")
    for operation in operations:
        b = statistics.median(cpu[(operation, "before")])
        a = statistics.median(cpu[(operation, "after")])
        print(f"{operation:<30}{b:>9.0f}{a:>9.0f}{a / b:>14.2f}")
    print(
        "\nfunction time per call (us, track_functions; total/self), the operation's"
        " function, the trigger and the checks"
    )
    for operation in operations:
        for name in SIDES:
            medians = _median_fn(fn[(operation, name)])
            op = [f for f in medians if f.startswith("flows_op_")]
            top = max(op, key=lambda f: medians[f][0]) if op else None
            trigger = medians.get("flows_runs_revision", (0.0, 0.0))
            checks = sum(v[1] for f, v in medians.items() if f.endswith("_row_valid"))
            json = medians.get("flows_json_valid", (0.0, 0.0))[1]
            detail = ", ".join(
                f"{f} {v[0]:.0f}/{v[1]:.0f}" for f, v in sorted(medians.items()) if v[0] >= 1
            )
            print(
                f"{operation:<30}{name:<8} function {medians[top][0] if top else 0:>5.0f}"
                f"  trigger {trigger[0]:>4.0f}  checks {checks:>4.0f}  json {json:>3.0f}"
                f"   [{detail}]"
            )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--fast", action="store_true", help="fsync and synchronous_commit off")
    parser.add_argument("--only", default=",".join(OPERATIONS))
    parser.add_argument(
        "--instructions", action="store_true", help="count instructions with callgrind instead"
    )
    parser.add_argument(
        "--before",
        type=int,
        default=2013,
        help="the last migration of the before schema (2009: the store before the change feed)",
    )
    args = parser.parse_args(argv)
    BEFORE[0] = args.before
    if args.instructions:
        print(f"callgrind, {args.batch} calls per operation; load {os.getloadavg()[0]:.1f}")
        instructions(args.only.split(","), args.batch)
        return
    cluster = None
    if args.fast:
        server = _postgres.server()
    else:
        cluster = _postgres.Cluster(fsync=True)
        server = _postgres.Server(cluster.url, cluster)
    url = server.fresh_database()
    with psycopg.connect(url, autocommit=True) as setup:
        version = setup.execute("SHOW server_version").fetchone()[0]  # type: ignore[index]
        durable = setup.execute("SHOW synchronous_commit").fetchone()[0]  # type: ignore[index]
        # The schemas are made here, not cloned from the test template.
        for schema in SIDES:
            setup.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    load = os.getloadavg()
    print(
        f"PostgreSQL {version}, synchronous_commit={durable}; {args.rounds} rounds of "
        f"{args.batch} calls per operation and side; load {load[0]:.1f} at the start"
    )
    try:
        measure(url, args.rounds, args.batch, args.only.split(","))
    finally:
        print(f"load {os.getloadavg()[0]:.1f} at the end")
        server.drop(url)
        server.close()
        if cluster is not None:
            cluster.stop()


# -- instruction counts (callgrind) ------------------------------------------------------

_PARAM = re.compile(r"\$(\d+)")


def _literal(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    return "'" + str(value).replace("'", "''") + "'"


#: Each statement's name as a prepared statement of the single-user session.
_PREPARED: dict[str, str] = {}


def _sql(statement: str, params: tuple[Any, ...]) -> str:
    """The statement as an EXECUTE of it prepared (single-user mode has no
    bind messages; the store's statements are prepared, so their plans are
    reused, as EXECUTE reuses them)."""
    name = _PREPARED.setdefault(statement, f"s{len(_PREPARED)}")
    return f"EXECUTE {name}({', '.join(_literal(value) for value in params)})"


def _prepares() -> list[str]:
    return [f"PREPARE {name} AS {statement.strip()}" for statement, name in _PREPARED.items()]


class Script(Maker):
    """An operation's calls as SQL text, with the runs they need made first,
    as ``prepare`` makes them on a connection."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def run(self, statement: str, params: tuple[Any, ...]) -> None:
        self.lines.append(_sql(statement, params))

    def calls(self, operation: str, n: int) -> list[str]:
        """Adds the setup for n calls of ``operation``; returns the calls."""
        if operation == "activate":
            ids = self.fresh(n, "act")
            now = self.now
            for r in ids:
                self.run(_fused.CLAIM, (r, "pending", *NONE4, now - STALE, *WHO, now))
            return [_sql(_fused.ACTIVATE, (r, "pending", *NONE4, *WHO, now, now)) for r in ids]
        prepared = prepare(self, operation, n)
        return [_sql(statement, params) for statement, params, _ok in prepared]


_ZERO = "SELECT pg_catalog.pg_sleep(0)"
_DUMP = "SELECT pg_catalog.pg_backend_pid()"
_ZERO_FUNCTION = "pg_sleep"
_DUMP_FUNCTION = "pg_backend_pid"


def instructions(operations: list[str], n: int) -> None:
    """Instructions the server executes per call, counted by callgrind in a
    single-user backend (``postgres --single``: no client, no network; the
    statements' text carries their parameters). Counters are zeroed before
    each operation's calls and dumped after them, so the runs they need are
    not counted; each call is its own transaction, commit included (fsync
    off: the flush is the kernel's, which callgrind does not count)."""
    cluster = _postgres.Cluster(fsync=False)
    try:
        server_url = cluster.url
        with psycopg.connect(server_url, autocommit=True) as admin:
            admin.execute("CREATE DATABASE counted")
        url = _postgres.with_database(server_url, "counted")
        for name, count in (("before", _before_count()), ("after", None)):
            Side(url, name, count).conn.close()
        process = cluster._process
        assert process is not None
        process.send_signal(signal.SIGINT)  # a clean stop; the folder stays
        process.wait(60)
        totals: dict[tuple[str, str], float] = {}
        for name in SIDES:
            script = Script()
            body: list[str] = []
            for operation in operations:
                warm = script.calls(operation, 8)  # past the plan cache's five custom plans
                calls = script.calls(operation, n)
                body += [*script.lines, *warm, _ZERO, *calls, _DUMP]
                script.lines = []
            lines = [f"SET search_path TO {name}", *_prepares(), *body]
            parts = _callgrind(cluster, name, lines)
            for operation, part in zip(operations, parts, strict=True):
                totals[(operation, name)] = part / n
        print("\ninstructions per call on the server (callgrind, single-user backend)")
        print(f"{'operation':<30}{'before':>12}{'after':>12}{'after/before':>14}")
        for operation in operations:
            b, a = totals[(operation, "before")], totals[(operation, "after")]
            print(f"{operation:<30}{b:>12,.0f}{a:>12,.0f}{a / b:>14.2f}")
    finally:
        cluster.stop()


def _callgrind(cluster: Any, name: str, lines: list[str]) -> list[int]:
    """Runs ``lines`` in a single-user backend under callgrind; the
    instruction count of each part dumped (one per operation)."""
    out = cluster.folder / f"callgrind.{name}"
    command = [
        "valgrind",
        "--tool=callgrind",
        f"--callgrind-out-file={out}",
        f"--zero-before={_ZERO_FUNCTION}",
        f"--dump-before={_DUMP_FUNCTION}",
        _postgres._binary("postgres"),
        "--single",
        "-D",
        str(cluster.folder / "data"),
        "-F",
        "-j",
        "-c",
        "track_functions=none",
        "counted",
    ]
    script = "".join(f"{line};\n\n" for line in lines)
    done = subprocess.run(
        command,
        input=script.encode(),
        capture_output=True,
        cwd=cluster.folder,
        check=False,
        **cluster._user,
    )
    if done.returncode != 0 or b"ERROR" in done.stdout + done.stderr:
        output = (done.stdout + done.stderr).decode().splitlines()
        errors = [line for line in output if "ERROR" in line]
        raise RuntimeError(f"single-user run failed: {errors[:3]}")
    parts = sorted(
        (path for path in cluster.folder.glob(f"callgrind.{name}.*") if path.suffix[1:].isdigit()),
        key=lambda path: int(path.suffix[1:]),
    )
    counts = []
    for path in parts:
        for line in path.read_text().splitlines():
            if line.startswith(("summary:", "totals:")):
                counts.append(int(line.split()[1]))
                break
    return counts


if __name__ == "__main__":
    main()
