"""What recording to OpenTelemetry costs a store operation, against the same store bare.

The subject is a SQLite ``:memory:`` store as ``runstore.open`` builds it:
with the OpenTelemetry API installed, its operations are wrapped by
``runstore._telemetry``. The baseline is the same kind of store whose class
has the bare operations back (``_telemetry.uninstrumented``, a switch for
this benchmark only), so both run the same decisions on the same SQL.

Phase 1, the goal (issue 16: at most 5% slower): the API installed and no
SDK configured, which is what a library user who never set up telemetry
gets. Phase 2, for information: the SDK configured with a tracer provider
(no exporter, so only span creation is measured) and a meter provider with
an in-memory reader; a provider can only be set once per process, so this
phase runs after the first, again interleaved with its own baseline.

Each operation is timed in batches, the two subjects alternating batch by
batch (and which goes first alternating too); the medians of the rounds are
compared. Operations: ``get``, ``heartbeat``, a losing ``claim``
(``AlreadyClaimed``), ``transition_owned`` to running, ``heartbeat_many`` of
10 runs, ``list_runs`` of 10, and a whole lifecycle (create, claim_and_own,
heartbeat, transition_owned to completed).

Run: ``python benchmarks/telemetry_overhead.py [--rounds N] [--batch-ms MS]
[--no-sdk-phase]``. Never asserts: timings are not tests.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time
from collections.abc import Callable
from typing import Any

import runstore
from runstore import ManualClock, OwnerId, RunSnapshot
from runstore import _telemetry as telemetry
from runstore._version import install_hint
from runstore.sqlite import SqliteRunStore

OWNER = OwnerId("bench-host", 1, "bench-nonce")
OTHER = OwnerId("other-host", 2, "other-nonce")
PENDING = RunSnapshot("pending", None, None)
STATE = '{"step": 1, "note": "benchmark"}'

Bare = telemetry.uninstrumented(SqliteRunStore)


def build(bare: bool) -> tuple[Any, dict[str, Callable[[], object]]]:
    """A store (bare or instrumented) and the operations timed on it."""
    clock = ManualClock(0)
    store = runstore.open(":memory:", clock=clock)
    if bare:
        store.__class__ = Bare
    store.create("owned", STATE)
    store.claim_and_own("owned", PENDING, OWNER, 0)
    store.create("claimed", STATE)
    store.claim("claimed", PENDING, OWNER, 0)
    fleet = []
    for number in range(10):
        rid = f"fleet-{number}"
        store.create(rid, STATE)
        store.claim_and_own(rid, PENDING, OWNER, 0)
        fleet.append(rid)
    fresh = (f"life-{number}" for number in itertools.count())

    def lifecycle() -> None:
        rid = next(fresh)
        store.create(rid, STATE)
        store.claim_and_own(rid, PENDING, OWNER, 0)
        store.heartbeat(rid, OWNER, 0)
        store.transition_owned(rid, OWNER, "completed", STATE)

    operations: dict[str, Callable[[], object]] = {
        "get": lambda: store.get("owned"),
        "heartbeat": lambda: store.heartbeat("owned", OWNER, 0),
        "claim (lost)": lambda: store.claim("claimed", PENDING, OTHER, 0),
        "transition_owned": lambda: store.transition_owned("owned", OWNER, "running"),
        "heartbeat_many(10)": lambda: store.heartbeat_many(OWNER, fleet, 0),
        "list_runs(10)": lambda: store.list_runs(limit=10),
        "lifecycle (4 ops)": lifecycle,
    }
    return store, operations


def batch(call: Callable[[], object], count: int) -> float:
    """CPU seconds per call over ``count`` calls. The measuring thread's CPU
    time, not the wall clock: ``:memory:`` operations are all CPU, and on a
    shared machine the wall clock also counts the time other processes ran."""
    started = time.thread_time()
    for _ in range(count):
        call()
    return (time.thread_time() - started) / count


def compare(rounds: int, batch_ms: float) -> dict[str, tuple[float, float]]:
    """Per operation: the median seconds per call of the instrumented store
    and of the bare one, batches interleaved."""
    subject_store, subject = build(bare=False)
    baseline_store, baseline = build(bare=True)
    figures: dict[str, tuple[float, float]] = {}
    for name in subject:
        per_call = batch(subject[name], 200)  # warm up and size the batches
        batch(baseline[name], 200)
        count = max(50, int(batch_ms / 1000 / per_call))
        timed: dict[bool, list[float]] = {True: [], False: []}
        for number in range(rounds):
            order = (True, False) if number % 2 == 0 else (False, True)
            for instrumented in order:
                call = subject[name] if instrumented else baseline[name]
                timed[instrumented].append(batch(call, count))
        figures[name] = (statistics.median(timed[True]), statistics.median(timed[False]))
    subject_store.close()
    baseline_store.close()
    return figures


def report(title: str, figures: dict[str, tuple[float, float]]) -> None:
    print(title)
    print(f"  {'operation':<20} {'instrumented':>13} {'bare':>10} {'ratio':>7}")
    ratios = []
    for name, (instrumented, bare) in figures.items():
        ratio = instrumented / bare
        ratios.append(ratio)
        print(f"  {name:<20} {instrumented * 1e6:>10.2f} us {bare * 1e6:>7.2f} us {ratio:>7.3f}")
    print(f"  {'geometric mean':<20} {'':>13} {'':>10} {statistics.geometric_mean(ratios):>7.3f}")


def configure_sdk() -> None:
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider

    trace.set_tracer_provider(TracerProvider())
    metrics.set_meter_provider(MeterProvider(metric_readers=[InMemoryMetricReader()]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--batch-ms", type=float, default=40.0)
    parser.add_argument("--no-sdk-phase", action="store_true")
    options = parser.parse_args()
    if not telemetry.AVAILABLE:
        raise SystemExit(f"needs the otel extra to measure its cost: {install_hint('otel')}")
    report(
        "API installed, no SDK configured (goal: ratio <= 1.05)",
        compare(options.rounds, options.batch_ms),
    )
    if not options.no_sdk_phase:
        configure_sdk()
        report(
            "SDK configured: spans created (no exporter), counters aggregated (information)",
            compare(options.rounds, options.batch_ms),
        )


if __name__ == "__main__":
    main()
