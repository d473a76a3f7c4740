"""Waking workers on PostgreSQL: how soon is a new run taken, and what do
the notifications cost durable writers?

Part 1, wake-up latency. Two taker processes wait for work, each on a schema
of its own in one database: one wakes on the store's notifications
(``store.open_listener()``), the other polls as the worker does without them
(an idle wait up to 1 s, doubled from 0.05 s after each empty look, with a
random part: ``runstore.worker``'s backoff). A producer creates runs in the
two schemas in turn, one at a time, with a random gap of 0.25 to 1.25 s
between creates (so each schema gets one every 0.5 to 2.5 s), and each
latency is from the moment ``create`` returned (committed, its notification
sent) to the moment the taker held the run (``claim_next`` returned it, or
the worker's handler began), on the machine's monotonic clock, which the
processes share. Printed: p50, p90, p99 and the largest, per taker, and the
ratio of the polling p99 to the listening one. ``--taker worker`` takes
through a real ``runstore.worker.Worker`` (concurrency 1, a handler that
returns at once; ``wakeup=PollingWakeup()`` for polling); ``--taker loop``
(the default) with a hand loop: ``claim_next``, else ``listener.wait(1.0)``
or the backoff's sleep.

Part 2, durable writers. ``pg_durable_scaling``'s setting (a cluster of its
own with ``fsync``, ``full_page_writes`` and ``synchronous_commit`` on, 8
client processes, interleaved windows): stores with notifications on against
stores with them off (``notify=False``), the sides in alternating order
every round, with a listener process draining the channel throughout. Two
workloads: ``create`` of fresh runs (each one notifies when on) and
``pg_durable_scaling``'s heartbeat of a run of one's own (never notifies).
Printed per workload: calls per second on each side, on/off, and the
clients' CPU per call (thread CPU time, which a busy machine does not
inflate the way it does wall time).

Run: ``python benchmarks/worker_wakeup.py [--samples N] [--taker loop|worker]
[--seconds S] [--windows W] [--skip-latency] [--skip-durable]
[--workloads create,heartbeat] [--spacing-ms MS]`` (``--spacing-ms`` sets
the stores' least time between notifications, an experiment; default the
shipped ``NOTIFY_SPACING_MS``). Prints the
load (``/proc/loadavg``) before and after each part.
"""

from __future__ import annotations

import argparse
import multiprocessing
import random
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import runstore
from runstore import ManualClock, OwnerId, RunSnapshot, RunStoreError
from runstore.stateful._targets import _postgres

CLIENTS = 8
PENDING = RunSnapshot("pending", None, None)
OWNER = OwnerId("bench-host", 1, "bench")
FLOOR_S, CEILING_S = 0.05, 1.0


def _load() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def _quantile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


# -- part 1: wake-up latency ------------------------------------------------------------


def _backoff(previous_s: float, rng: random.Random) -> float:
    """``runstore.worker``'s idle wait (``backoff_s``), written out here so the
    hand loop needs no worker."""
    base = min(CEILING_S, max(FLOOR_S, previous_s * 2))
    return base * (0.5 + rng.random() / 2)


def _loop_taker(url: str, schema: str, listen: bool, pipe: Any, stop: Any) -> None:
    """Take runs as they come: ``claim_next``, else wait (listener or backoff)."""
    store = runstore.open(url, schema=schema)
    listener = store.open_listener() if listen else None
    owner = OwnerId("bench-host", 2 if listen else 3, schema)
    rng = random.Random(7)
    idle = 0.0
    pipe.send("ready")
    while not stop.is_set():
        row = store.claim_next(owner, store.clock.now_ms())
        if row is not None:
            pipe.send((row.run_id, time.monotonic()))
            store.transition_owned(row.run_id, owner, "completed", "{}")
            idle = 0.0
            continue
        if listener is not None:
            listener.wait(CEILING_S)
        else:
            idle = _backoff(idle, rng)
            time.sleep(idle)
    if listener is not None:
        listener.close()
    store.close()


def _worker_taker(url: str, schema: str, listen: bool, pipe: Any, stop: Any) -> None:
    """Take runs through a real ``Worker`` whose handler reports when it began."""
    from runstore.worker import PollingWakeup, Worker

    store = runstore.open(url, schema=schema)
    lock = threading.Lock()

    def handler(job: Any) -> str:
        with lock:
            pipe.send((job.run_id, time.monotonic()))
        return "{}"

    worker = Worker(store, handler, wakeup=None if listen else PollingWakeup())
    threading.Thread(target=lambda: (stop.wait(), worker.stop(5.0)), daemon=True).start()
    pipe.send("ready")
    worker.run()
    store.close()


def latency(url: str, samples: int, taker: str) -> dict[str, list[float]]:
    """Per taker (``listen``, ``poll``): the latencies of ``samples`` runs, in ms."""
    context = multiprocessing.get_context("spawn")
    stop = context.Event()
    target = _worker_taker if taker == "worker" else _loop_taker
    schemas = {"listen": "wake_listen", "poll": "wake_poll"}
    producers = {name: runstore.open(url, schema=schema) for name, schema in schemas.items()}
    pipes, processes = {}, []
    for name, schema in schemas.items():
        ours, theirs = context.Pipe()
        process = context.Process(target=target, args=(url, schema, name == "listen", theirs, stop))
        process.start()
        processes.append(process)
        pipes[name] = ours
    for pipe in pipes.values():
        if not pipe.poll(120) or pipe.recv() != "ready":
            raise RuntimeError("a taker did not start")
    time.sleep(3.0)  # both takers idle: the poller at its longest wait
    rng = random.Random(2027)
    found: dict[str, list[float]] = {name: [] for name in schemas}
    create_ms: list[float] = []
    try:
        for index in range(2 * samples):
            name = "listen" if index % 2 == 0 else "poll"
            run_id = f"{name}-{index}"
            began = time.monotonic()
            producers[name].create(run_id, "{}")
            committed = time.monotonic()
            create_ms.append((committed - began) * 1000)
            pipe = pipes[name]
            if not pipe.poll(30):
                raise RuntimeError(f"{run_id} was never taken")
            taken_id, taken_at = pipe.recv()
            if taken_id != run_id:
                raise RuntimeError(f"took {taken_id}, expected {run_id}")
            found[name].append((taken_at - committed) * 1000)
            time.sleep(rng.uniform(0.25, 1.25))
    finally:
        stop.set()
        for process in processes:
            process.join(30)
        for store in producers.values():
            store.close()
    print(f"create (commit and notification): median {statistics.median(create_ms):.2f} ms")
    return found


def print_latency(found: dict[str, list[float]], taker: str) -> None:
    how = "a Worker (concurrency 1)" if taker == "worker" else "a hand loop"
    print(f"from create returned to run taken, through {how}, in ms:")
    print(f"{'taker':>8}{'runs':>6}{'p50':>9}{'p90':>9}{'p99':>9}{'max':>9}")
    for name, values in found.items():
        print(
            f"{name:>8}{len(values):>6}{_quantile(values, 0.5):>9.2f}"
            f"{_quantile(values, 0.9):>9.2f}{_quantile(values, 0.99):>9.2f}{max(values):>9.2f}"
        )
    ratio = _quantile(found["poll"], 0.99) / _quantile(found["listen"], 0.99)
    median_ratio = _quantile(found["poll"], 0.5) / _quantile(found["listen"], 0.5)
    print(f"polling / listening: p50 {median_ratio:.0f}x, p99 {ratio:.0f}x")


# -- part 2: durable writers ----------------------------------------------------------


def _writer(
    url: str, notify: bool, index: int, workload: str, spacing_ms: float | None, pipe: Any
) -> None:
    """A client process: on each deadline, call ``step`` until then; answer the
    calls finished, the calls that raised and the thread CPU seconds used."""
    store = runstore.open(url, clock=ManualClock(1_000), notify=notify)
    if spacing_ms is not None:  # the experiment of --spacing-ms
        store._tm.notify_spacing_s = spacing_ms / 1000
    side = "on" if notify else "off"
    name = f"beat-{side}-{index}"
    try:
        store.create(name, "{}")
        store.claim_and_own(name, PENDING, OWNER, 1_000)
    except RunStoreError:
        pass  # made by an earlier run
    counter = [0]
    beat = [1_000]

    def create() -> None:
        counter[0] += 1
        store.create(f"new-{side}-{index}-{counter[0]}", "{}")

    def heartbeat() -> None:
        beat[0] += 1
        store.heartbeat(name, OWNER, beat[0])

    step = create if workload == "create" else heartbeat
    pipe.send("ready")
    while (deadline := pipe.recv()) is not None:
        done = failures = 0
        cpu = time.thread_time()
        while time.monotonic() < deadline:
            try:
                step()
            except RunStoreError:
                failures += 1
            if time.monotonic() <= deadline:
                done += 1
        pipe.send((done, failures, time.thread_time() - cpu))
    store.close()


def _drain(url: str, stop: Any, pipe: Any) -> None:
    """A worker's listener, idle: it reads every notification the stores send."""
    store = runstore.open(url)
    heard = 0
    with store.open_listener() as listener:
        pipe.send("ready")
        while not stop.is_set():
            heard += listener.wait(0.2)
    pipe.send(heard)
    store.close()


def durable(
    url: str, workload: str, seconds: float, windows: int, spacing_ms: float | None
) -> tuple[float, ...]:
    """8 clients, notifications on against off, interleaved windows: calls/s on,
    calls/s off, CPU µs per call on, off."""
    context = multiprocessing.get_context("spawn")
    pipes: dict[bool, list[Any]] = {True: [], False: []}
    processes = []
    for notify in (True, False):
        for index in range(CLIENTS):
            ours, theirs = context.Pipe()
            process = context.Process(
                target=_writer, args=(url, notify, index, workload, spacing_ms, theirs)
            )
            process.start()
            processes.append(process)
            pipes[notify].append(ours)
    stop = context.Event()
    ours, theirs = context.Pipe()
    drainer = context.Process(target=_drain, args=(url, stop, theirs))
    drainer.start()
    for pipe in [*pipes[True], *pipes[False], ours]:
        if not pipe.poll(120) or pipe.recv() != "ready":
            raise RuntimeError("a client did not start")
    done = {True: 0, False: 0}
    cpu = {True: 0.0, False: 0.0}
    window = seconds / windows
    try:
        for round_ in range(-1, windows):
            sides = (True, False) if round_ % 2 == 0 else (False, True)
            for notify in sides:
                deadline = time.monotonic() + (window if round_ >= 0 else 0.2)
                for pipe in pipes[notify]:
                    pipe.send(deadline)
                answers = []
                for pipe in pipes[notify]:
                    if not pipe.poll(window + 60):
                        raise RuntimeError("a client did not answer")
                    answers.append(pipe.recv())
                if any(answer[1] for answer in answers):
                    raise RuntimeError("calls raised")
                if round_ >= 0:
                    done[notify] += sum(answer[0] for answer in answers)
                    cpu[notify] += sum(answer[2] for answer in answers)
    finally:
        for side in pipes.values():
            for pipe in side:
                pipe.send(None)
        stop.set()
        for process in processes:
            process.join(30)
        heard = ours.recv() if ours.poll(30) else None
        drainer.join(30)
    print(f"  the listener woke {heard} times")
    return (
        done[True] / seconds,
        done[False] / seconds,
        cpu[True] / max(1, done[True]) * 1e6,
        cpu[False] / max(1, done[False]) * 1e6,
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=120, help="runs per taker")
    parser.add_argument("--taker", choices=("loop", "worker"), default="loop")
    parser.add_argument("--seconds", type=float, default=12.0, help="per workload and side")
    parser.add_argument("--windows", type=int, default=6)
    parser.add_argument(
        "--spacing-ms", type=float, default=None, help="the stores' notification spacing"
    )
    parser.add_argument("--workloads", default="create,heartbeat", help="part 2's, comma-separated")
    parser.add_argument("--skip-latency", action="store_true")
    parser.add_argument("--skip-durable", action="store_true")
    args = parser.parse_args(argv)
    cluster = _postgres.Cluster(fsync=True)
    server = _postgres.Server(cluster.url, cluster)
    try:
        if not args.skip_latency:
            url = server.fresh_database()
            print(f"part 1: wake-up latency; load before: {_load()}")
            print_latency(latency(url, args.samples, args.taker), args.taker)
            print(f"load after: {_load()}")
            server.drop(url)
        if not args.skip_durable:
            url = server.fresh_database()
            runstore.open(url).close()  # migrate once
            print(
                f"part 2: {CLIENTS} durable clients (fsync, synchronous_commit on), "
                f"notifications on vs off, {args.seconds:g} s per side in {args.windows} "
                f"interleaved windows; load before: {_load()}"
            )
            print(
                f"{'workload':>10}{'on/s':>9}{'off/s':>9}{'on/off':>8}{'CPU µs on':>11}{'off':>7}"
            )
            for workload in args.workloads.split(","):
                on, off, cpu_on, cpu_off = durable(
                    url, workload, args.seconds, args.windows, args.spacing_ms
                )
                print(
                    f"{workload:>10}{on:>9.0f}{off:>9.0f}{on / off:>8.3f}"
                    f"{cpu_on:>11.0f}{cpu_off:>7.0f}"
                )
            print(f"load after: {_load()}")
            server.drop(url)
    finally:
        server.close()
        cluster.stop()


if __name__ == "__main__":
    main()
