"""Jobs per second of one worker on durable PostgreSQL: runstore against procrastinate and
pgqueuer, side by side.

Every subject drains ``--jobs`` jobs (default 1 000) enqueued before its clock starts (no
producer runs during the drain), with a trivial handler that returns at once, in one
worker process (this one) at the concurrency asked (``--concurrency``, default 1; ``1,4``
measures both). The subjects:

- ``runstore Worker``: ``runstore.worker.Worker`` with its defaults (skipped, with a
  message, until that package exists); it stops itself once every run has settled.
- ``runstore loop``: the hand-made loop, ``claim_next`` then ``transition_owned`` to
  ``completed`` with the handler's state and the guard that no cancel was requested (the
  Worker's own completing write); at concurrency N, N threads, each with a store of its own.
- ``runstore loop, batches``: the same with ``claim_next_many`` of ``--batch`` runs (10).
- ``procrastinate``: ``App.run_worker_async(concurrency=N, wait=False)``, an async task,
  its defaults otherwise (LISTEN/NOTIFY on, finished jobs kept).
- ``pgqueuer``: ``PgQueuer.run(mode=drain)`` over one psycopg async connection, an async
  entrypoint; once with ``batch_size=1`` and the entrypoint's ``concurrency_limit=N`` (the
  closest it comes to matched concurrency), once with its defaults (``batch_size=10``, no
  limit: the ten jobs of a batch run at once).

Each round runs every subject once, in an order that rotates from round to round, each on a
database of its own created for it (never timed), on one throwaway cluster with ``fsync``,
``synchronous_commit`` and ``full_page_writes`` on (``--postgres URL`` uses that server
instead: a role with ``CREATEDB``). A ``CHECKPOINT`` precedes every drain. Printed per subject
and configuration: the durability of a completion, jobs per second of wall time (the median of
the rounds, with their minimum and maximum), CPU milliseconds per job of this process (every
thread; the client's cost, which wall time on a loaded machine hides), and, from
``pg_stat_database`` and ``pg_stat_wal``, transactions (read-only ones too) and WAL flushes
per job (load-independent: a durable per-job completion costs at least one flush a job
unless commits share them). The
load (``/proc/loadavg``) before and after is printed too.

Run: ``python benchmarks/worker_throughput.py [--jobs N] [--rounds R] [--concurrency 1,4]
[--batch B] [--only NAME,...] [--postgres URL]``. procrastinate and pgqueuer come with the
``bench`` extra (``python -m pip install -e '.[bench]'``); a subject whose package is missing is
skipped with a message.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import logging
import os
import statistics
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

import runstore
from runstore import OwnerId, Transitioned, TransitionGuard

STATE = '{"job": 0}'
RESULT = '{"done": true}'
NOT_CANCELLED = TransitionGuard(cancel_requested="absent")


class Skip(Exception):
    """This subject cannot run here (a package is missing); the message says why."""


@dataclass(frozen=True)
class Subject:
    """One system in one configuration."""

    name: str
    configuration: str
    durability: str
    #: (database URL, jobs, concurrency, batch) -> a drain function, enqueued and ready.
    prepare: Callable[[str, int, int, int], Callable[[], None]]
    #: Whether it claims ``--batch`` runs at a time (else one).
    batched: bool = False


@dataclass
class Figures:
    rates: list[float]
    cpu_ms: list[float]
    commits: list[float]
    flushes: list[float]


# -- runstore ----------------------------------------------------------------------------


def _open(url: str) -> Any:
    return runstore.open(url, clock=runstore.SystemClock())


def _enqueue_runs(url: str, jobs: int) -> None:
    with _open(url) as store:
        for number in range(jobs):
            store.create(f"job-{number:06d}", STATE)


def _loop(store: Any, owner: OwnerId, batch: int) -> int:
    clock = runstore.SystemClock()
    done = 0
    while True:
        if batch > 1:
            rows = store.claim_next_many(owner, clock.now_ms(), batch)
        else:
            row = store.claim_next(owner, clock.now_ms())
            rows = [] if row is None else [row]
        if not rows:
            return done
        for row in rows:
            outcome = store.transition_owned(
                row.run_id, owner, "completed", RESULT, guard=NOT_CANCELLED
            )
            assert outcome == Transitioned(), outcome
            done += 1


def _prepare_loop(url: str, jobs: int, concurrency: int, batch: int) -> Callable[[], None]:
    _enqueue_runs(url, jobs)
    stores = [_open(url) for _ in range(concurrency)]
    owners = [OwnerId("bench-host", os.getpid(), f"loop-{i}") for i in range(concurrency)]

    def drain() -> None:
        counts = [0] * concurrency

        def one(i: int) -> None:
            counts[i] = _loop(stores[i], owners[i], batch)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(concurrency)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for store in stores:
            store.close()
        assert sum(counts) == jobs, (counts, jobs)

    return drain


def _prepare_worker(url: str, jobs: int, concurrency: int, _batch: int) -> Callable[[], None]:
    return _worker_drain(url, jobs, concurrency, slot_stores=False)


def _prepare_worker_slots(url: str, jobs: int, concurrency: int, _batch: int) -> Callable[[], None]:
    return _worker_drain(url, jobs, concurrency, slot_stores=True)


def _worker_drain(
    url: str, jobs: int, concurrency: int, *, slot_stores: bool
) -> Callable[[], None]:
    try:
        from runstore.worker import Worker
    except ImportError as why:
        raise Skip(f"runstore.worker is not there yet ({why})") from None
    _enqueue_runs(url, jobs)
    store = _open(url)

    def handler(_job: Any) -> str:
        return RESULT

    def drain() -> None:
        settled: list[str] = []
        lock = threading.Lock()
        worker: Any = None

        def on_event(event: Any) -> None:
            if event.kind != "settled":
                return
            with lock:
                settled.append(event.status)
                if len(settled) == jobs:
                    worker.stop(grace_s=30.0)

        slot_store = (lambda: _open(url)) if slot_stores else None
        worker = Worker(
            store, handler, concurrency=concurrency, on_event=on_event, slot_store=slot_store
        )
        try:
            worker.run()
        finally:
            store.close()
        assert settled.count("completed") == jobs, (len(settled), jobs)

    return drain


# -- procrastinate -----------------------------------------------------------------------


def _prepare_procrastinate(
    url: str, jobs: int, concurrency: int, _batch: int
) -> Callable[[], None]:
    try:
        import procrastinate
    except ImportError:
        raise Skip("procrastinate is not installed (python -m pip install -e '.[bench]')") from None
    # Its warning that the app is made in __main__ matters to its CLI worker only.
    logging.getLogger("procrastinate.blueprints").setLevel(logging.ERROR)

    async def enqueue() -> None:
        app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url))
        async with app.open_async():
            await app.schema_manager.apply_schema_async()

            @app.task(name="noop", queue="bench")
            async def noop() -> None:
                return None

            for start in range(0, jobs, 500):
                await noop.batch_defer_async(*({} for _ in range(min(500, jobs - start))))

    asyncio.run(enqueue())

    def drain() -> None:
        async def work() -> None:
            app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url))

            @app.task(name="noop", queue="bench")
            async def noop() -> None:
                return None

            async with app.open_async():
                await app.run_worker_async(
                    queues=["bench"],
                    concurrency=concurrency,
                    wait=False,
                    install_signal_handlers=False,
                )

        asyncio.run(work())
        done = _count(url, "SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'")
        assert done == jobs, (done, jobs)

    return drain


# -- pgqueuer ----------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def _pgqueuer_driver(url: str) -> Any:
    """pgqueuer's driver over asyncpg (its first driver), else over psycopg's async
    connection, whose notification watcher holds the connection up to a second at a time
    when no notification comes (queries wait for it: far slower)."""
    import pgqueuer

    try:
        import asyncpg  # type: ignore[import-untyped, import-not-found, unused-ignore]
    except ImportError:
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as connection:
            yield pgqueuer.PsycopgDriver(connection)
        return
    connection = await asyncpg.connect(url)
    try:
        yield pgqueuer.AsyncpgDriver(connection)
    finally:
        await connection.close()


Prepare = Callable[[str, int, int, int], Callable[[], None]]


def _pgqueuer(batch_size: int, limit: int | None) -> Prepare:
    def prepare(url: str, jobs: int, concurrency: int, _batch: int) -> Callable[[], None]:
        try:
            import pgqueuer
            from pgqueuer.types import QueueExecutionMode
        except ImportError:
            raise Skip("pgqueuer is not installed (python -m pip install -e '.[bench]')") from None

        async def enqueue() -> None:
            async with _pgqueuer_driver(url) as driver:
                queries = pgqueuer.Queries(driver)
                await queries.install()
                for start in range(0, jobs, 500):
                    count = min(500, jobs - start)
                    await queries.enqueue(["noop"] * count, [None] * count, [0] * count)

        asyncio.run(enqueue())

        def drain() -> None:
            async def work() -> None:
                async with _pgqueuer_driver(url) as driver:
                    pgq = pgqueuer.PgQueuer(driver)

                    @pgq.entrypoint("noop", concurrency_limit=limit or 0)
                    async def noop(_job: Any) -> None:
                        return None

                    await pgq.run(batch_size=batch_size, mode=QueueExecutionMode.drain)

            asyncio.run(work())
            done = _count(url, "SELECT count(*) FROM pgqueuer_log WHERE status = 'successful'")
            left = _count(url, "SELECT count(*) FROM pgqueuer")
            assert (done, left) == (jobs, 0), (done, left, jobs)

        return drain

    return prepare


def _pgqueuer_matched(url: str, jobs: int, concurrency: int, batch: int) -> Callable[[], None]:
    return _pgqueuer(1, concurrency)(url, jobs, concurrency, batch)


def _pgqueuer_defaults(url: str, jobs: int, concurrency: int, batch: int) -> Callable[[], None]:
    return _pgqueuer(10, None)(url, jobs, concurrency, batch)


# -- the subjects ------------------------------------------------------------------------

PER_JOB = "durable per job: its own commit before the next job starts"

SUBJECTS = (
    Subject(
        "runstore Worker",
        "defaults, concurrency=N",
        PER_JOB + " (transition_owned)",
        _prepare_worker,
    ),
    Subject(
        "runstore Worker",
        "slot_store: a store per slot",
        PER_JOB + " (transition_owned)",
        _prepare_worker_slots,
    ),
    Subject(
        "runstore loop",
        "claim_next + transition_owned, N threads",
        PER_JOB,
        _prepare_loop,
    ),
    Subject(
        "runstore loop",
        "claim_next_many(B) + transition_owned",
        "durable per job; B claimed at once (a crash leaves them to takeover)",
        _prepare_loop,
        batched=True,
    ),
    Subject(
        "procrastinate",
        "run_worker_async(concurrency=N)",
        PER_JOB + " (finish_job awaited)",
        _prepare_procrastinate,
    ),
    Subject(
        "pgqueuer",
        "batch_size=1, concurrency_limit=N",
        "completion written by a flush task, not awaited; the limit keeps the next job "
        "from being picked until that flush commits",
        _pgqueuer_matched,
    ),
    Subject(
        "pgqueuer",
        "defaults (batch_size=10)",
        "not per job: completions flushed 10 at a time (or every 0.1 s)",
        _pgqueuer_defaults,
    ),
)


# -- the server --------------------------------------------------------------------------


def _count(url: str, query: str) -> int:
    with psycopg.connect(url, autocommit=True) as connection:
        row = connection.execute(query).fetchone()
        assert row is not None
        return int(row[0])


def _load() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def _with_database(url: str, database: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit(parts._replace(path="/" + urllib.parse.quote(database)))


class Databases:
    """Fresh databases on one server, created and dropped on demand (never during a drain)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.admin = psycopg.connect(url, autocommit=True)
        self._names = (f"worker_bench_{os.getpid()}_{i}" for i in itertools.count())

    def fresh(self) -> str:
        name = next(self._names)
        self.admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return _with_database(self.url, name)

    def drop(self, url: str) -> None:
        name = urllib.parse.unquote(urllib.parse.urlsplit(url).path.lstrip("/"))
        self.admin.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )

    def counters(self, url: str) -> tuple[int, int]:
        """Commits in ``url``'s database and WAL flushes of the cluster, so far."""
        name = urllib.parse.unquote(urllib.parse.urlsplit(url).path.lstrip("/"))
        self.admin.execute("SELECT pg_stat_force_next_flush()")
        with psycopg.connect(url, autocommit=True) as connection:
            connection.execute("SELECT pg_stat_force_next_flush()")
        row = self.admin.execute(
            "SELECT (SELECT xact_commit FROM pg_stat_database WHERE datname = %s), "
            "(SELECT wal_sync FROM pg_stat_wal)",
            (name,),
        ).fetchone()
        assert row is not None
        return int(row[0] or 0), int(row[1])

    def setting(self, name: str) -> str:
        row = self.admin.execute(sql.SQL("SHOW {}").format(sql.Identifier(name))).fetchone()
        assert row is not None
        return str(row[0])


@contextlib.contextmanager
def server(explicit: str | None) -> Iterator[str]:
    """The admin URL of a durable server: ``explicit``, or a throwaway cluster of our own."""
    if explicit is not None:
        yield explicit
        return
    from runstore.stateful._targets import _postgres

    cluster = _postgres.Cluster(fsync=True)
    try:
        yield cluster.url
    finally:
        cluster.stop()


def measure(
    databases: Databases, subject: Subject, jobs: int, concurrency: int, batch: int
) -> tuple[float, float, float, float]:
    """(jobs/s, client CPU ms/job, transactions/job, WAL flushes/job) of one drain."""
    url = databases.fresh()
    try:
        drain = subject.prepare(url, jobs, concurrency, batch)
        databases.admin.execute("CHECKPOINT")
        commits, flushes = databases.counters(url)
        began, cpu = time.perf_counter(), time.process_time()
        drain()
        wall, spent = time.perf_counter() - began, time.process_time() - cpu
        commits_after, flushes_after = databases.counters(url)
    finally:
        databases.drop(url)
    # counters() itself commits once in the database (its statistics flush).
    return (
        jobs / wall,
        spent * 1e3 / jobs,
        (commits_after - commits - 1) / jobs,
        (flushes_after - flushes) / jobs,
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--concurrency", default="1", help="comma-separated, e.g. 1,4")
    parser.add_argument("--batch", type=int, default=10, help="claim_next_many's batch")
    parser.add_argument("--only", help="comma-separated subject names (e.g. pgqueuer)")
    parser.add_argument("--postgres", metavar="URL")
    args = parser.parse_args(argv)
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    wanted = None if args.only is None else {n.strip() for n in args.only.split(",")}
    subjects = [s for s in SUBJECTS if wanted is None or s.name in wanted]
    print(f"load before: {_load()}")
    with server(args.postgres) as url:
        databases = Databases(url)
        version = databases.setting("server_version")
        durable = ", ".join(
            f"{name}={databases.setting(name)}"
            for name in ("fsync", "synchronous_commit", "full_page_writes")
        )
        print(f"PostgreSQL {version}, unix socket, {durable}")
        print(
            f"{args.jobs} jobs enqueued, then drained; trivial handler; "
            f"medians of {args.rounds} interleaved rounds"
        )
        figures: dict[tuple[int, int], Figures] = {}
        skipped: dict[int, str] = {}
        for round_number in range(args.rounds):
            for concurrency in concurrencies:
                turn = round_number % len(subjects)
                for index in [*range(turn, len(subjects)), *range(turn)]:
                    if index in skipped:
                        continue
                    subject = subjects[index]
                    batch = args.batch if subject.batched else 1
                    try:
                        rate, cpu, commits, flushes = measure(
                            databases, subject, args.jobs, concurrency, batch
                        )
                    except Skip as why:
                        skipped[index] = str(why)
                        continue
                    entry = figures.setdefault((index, concurrency), Figures([], [], [], []))
                    entry.rates.append(rate)
                    entry.cpu_ms.append(cpu)
                    entry.commits.append(commits)
                    entry.flushes.append(flushes)
        print()
        print(
            f"{'system':<16}{'configuration':<40}{'N':>3}{'jobs/s':>8}{'min-max':>12}"
            f"{'CPU ms/job':>11}{'xacts/job':>10}{'flushes/job':>12}"
        )
        for concurrency in concurrencies:
            for index, subject in enumerate(subjects):
                found = figures.get((index, concurrency))
                if found is None:
                    continue
                entry = found
                configuration = subject.configuration.replace("(B)", f"({args.batch})")
                spread = f"{min(entry.rates):.0f}-{max(entry.rates):.0f}"
                print(
                    f"{subject.name:<16}{configuration:<40}{concurrency:>3}"
                    f"{statistics.median(entry.rates):>8.0f}{spread:>12}"
                    f"{statistics.median(entry.cpu_ms):>11.2f}"
                    f"{statistics.median(entry.commits):>10.2f}"
                    f"{statistics.median(entry.flushes):>12.2f}"
                )
        print()
        print("durability of a completion:")
        for index, subject in enumerate(subjects):
            if index not in skipped:
                print(f"  {subject.name}, {subject.configuration}: {subject.durability}")
        for index, reason in skipped.items():
            print(f"skipped {subjects[index].name}: {reason}")
        databases.admin.close()
    print(f"load after: {_load()}")


if __name__ == "__main__":
    main()
