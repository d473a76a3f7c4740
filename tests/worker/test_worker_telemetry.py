"""A worker's takeover lands in the takeover series (``runstore_takeovers``)
with its evidence kind. Metrics providers are global, so the worker runs in a
child process of its own."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("opentelemetry.sdk.metrics", reason="the otel SDK (the dev extra) records")

CHILD = r"""
import json, sys, threading
import runstore
from runstore import ManualClock, OwnerId
from runstore.worker import Worker

from opentelemetry import metrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

reader = InMemoryMetricReader()
metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
clock = ManualClock(0)
store = runstore.open(sys.argv[1], clock=clock)
store.create("orphan", "{}")
gone = OwnerId("host-gone", 77, "n")
store.claim_and_own("orphan", store.get("orphan"), gone, 0)
clock.advance(30_001)
settled = threading.Event()
worker = Worker(store, lambda job: "{}", host_id="host-w", clock=clock, poll_interval_s=0.05,
                on_event=lambda e: e.kind == "settled" and settled.set())
thread = threading.Thread(target=worker.run, daemon=True)
thread.start()
assert settled.wait(20)
worker.stop(0)
thread.join(20)
found = {}
for resource in reader.get_metrics_data().resource_metrics:
    for scope in resource.scope_metrics:
        for metric in scope.metrics:
            if metric.name == "runstore_takeovers":
                for point in metric.data.data_points:
                    key = ",".join(f"{k}={v}" for k, v in sorted(point.attributes.items()))
                    found[key] = point.value
print(json.dumps(found))
"""


def test_a_worker_takeover_is_counted_with_its_evidence(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path / "runs.db")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    counted = json.loads(done.stdout.strip().splitlines()[-1])
    assert counted == {"evidence=cross-host-unreachable-stale,op=claim_and_own": 1}
