"""OpenTelemetry: every outcome of every operation lands in its counter and its span.

With the API importable, the SQL stores record to the global providers with
no opt-in call. OpenTelemetry lets a process set its providers once, so the
recording happens in a child process per backend (``_telemetry_child.py``:
SQLite, PostgreSQL's one-round-trip path, its general path), which imports
runstore and opens its store *before* it configures the SDK's in-memory span
exporter and metric reader, as an application would. Each scenario there
drives one outcome deliberately and names the span, the outcome and exactly
the counter increments it must cause (a takeover, by ``claim_and_own``
with evidence or by ``steal``, moves ``runstore_takeovers`` with its
evidence kind; a first claim, a re-own, a self-steal or a refusal does
not); here every scenario is held to that,
the span attributes are held to the documented set, and the whole export is
scanned for markers placed in run state, attempt values and the database
password. The checks are shown to catch two planted defects. Without the
API, a store imports nothing of OpenTelemetry and its methods are untouched.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from runstore import InvalidRunError, PersistenceFailedError, RunStore
from runstore import _telemetry as telemetry
from runstore._sql._store import SqlRunStore
from runstore.attempts import AttemptStore
from runstore.ownership import LeaseLost

from .. import _postgres
from ._telemetry_child import SCENARIOS, SECRETS, URL_SECRET, Scenario

ROOT = Path(__file__).resolve().parents[2]

#: Every span attribute the stores may set (docs/guides/observe.md).
ALLOWED_ATTRIBUTES = {
    "db.system",
    "runstore.outcome",
    "runstore.run_id",
    "runstore.claimant_host_id",
    "runstore.owner_host_id",
    "runstore.observer_host_id",
    "runstore.to",
    "runstore.run_count",
    "runstore.returned",
    "runstore.purged",
    "runstore.error_code",
    "runstore.error_type",
    "runstore.evidence",
    "runstore.takeover",
}

#: Backend configurations: the pytest id, the backend name, the fast_path option.
CONFIGURATIONS = {
    "sqlite": ("sqlite", None),
    "postgresql": ("postgresql", None),
    "postgresql-general": ("postgresql", False),
}

SCENARIO_NAMES = {case.name for case in SCENARIOS}

_recorded: dict[str, dict[str, Any]] = {}


def _run_child(config: dict[str, Any]) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "tests.store._telemetry_child"],
        input=json.dumps(config),
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def _with_password(url: str, password: str) -> str:
    """The URL with ``password`` for its user (the test server trusts local
    connections, so the password is carried but never needed)."""
    parts = urlsplit(url)
    user, _, host = parts.netloc.rpartition("@")
    return urlunsplit(parts._replace(netloc=f"{user}:{password}@{host}"))


def recording(configuration: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """What the child recorded for ``configuration`` (run once per session)."""
    if configuration not in _recorded:
        backend, fast_path = CONFIGURATIONS[configuration]
        if backend == "sqlite":
            target = str(tmp_path_factory.mktemp("telemetry") / "runs.db")
        else:
            target = _with_password(_postgres.database_url(), URL_SECRET)
        _recorded[configuration] = _run_child({"target": target, "fast_path": fast_path})
    return _recorded[configuration]


def _cases() -> list[Any]:
    return [
        pytest.param(configuration, case, id=f"{configuration}-{case.name}")
        for configuration, (backend, _) in CONFIGURATIONS.items()
        for case in SCENARIOS
        if backend in case.backends
    ]


def problems(case: Scenario, result: dict[str, Any], backend: str) -> list[str]:
    """What is wrong with one scenario's recording (empty: nothing)."""
    found: list[str] = []
    if result["counters"] != case.counters:
        found.append(f"counters moved {result['counters']}, expected {case.counters}")
    spans = [span for span in result["spans"] if span["name"] == case.span]
    if not spans:
        return [*found, f"no {case.span} span"]
    span = spans[-1]
    if case.span == "work":
        expected = Counter(
            f"runstore.lease.{key.split('event=')[1].split(',')[0]}"
            for key, amount in case.counters.items()
            if key.startswith("runstore_supervisor_events")
            for _ in range(amount)
        )
        seen = Counter(event["name"] for event in span["events"])
        if seen != expected:
            found.append(f"span events {dict(seen)}, expected {dict(expected)}")
        return found
    attributes = span["attributes"]
    if attributes.get("runstore.outcome") != case.outcome:
        found.append(f"outcome {attributes.get('runstore.outcome')!r}, expected {case.outcome!r}")
    if attributes.get("db.system") != backend:
        found.append(f"db.system {attributes.get('db.system')!r}")
    if (span["status"] == "ERROR") != (case.outcome == "failure"):
        found.append(f"status {span['status']} for outcome {case.outcome}")
    if span["description"]:
        found.append("the span status has a description")
    return found


@pytest.mark.parametrize(("configuration", "case"), _cases())
def test_each_outcome_lands_in_its_counter_and_span(
    configuration: str, case: Scenario, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The scenario's call closes its span with the outcome it answered (the
    outcome class in snake case, success, failure or interrupt), on the
    right backend, and moves exactly the counters it names; a supervisor's
    events land as counters and as span events on the caller's span."""
    recorded = recording(configuration, tmp_path_factory)
    result = recorded["results"][case.name]
    assert problems(case, result, recorded["backend"]) == []


#: Exact attributes of representative spans: one per host attribute, a
#: failure with its code, a transition's target, the multi-run operations.
EXACT = {
    "claim-claimed": {
        "runstore.run_id": "claim-claimed-",
        "runstore.claimant_host_id": "host-a",
    },
    "claim-and-own-activated": {
        "runstore.run_id": "claim-and-own-activated-",
        "runstore.owner_host_id": "host-a",
    },
    "claim-and-own-takeover": {
        "runstore.run_id": "claim-and-own-takeover-",
        "runstore.owner_host_id": "host-a",
        "runstore.evidence": "same-host-pid-dead",
        "runstore.takeover": True,
    },
    "claim-and-own-re-own": {
        "runstore.run_id": "claim-and-own-re-own-",
        "runstore.owner_host_id": "host-a",
    },
    "claim-and-own-refused-with-evidence": {
        "runstore.run_id": "claim-and-own-refused-with-evidence-",
        "runstore.owner_host_id": "host-a",
        "runstore.evidence": "same-host-pid-dead",
    },
    "recover-claim-recovered": {
        "runstore.run_id": "recover-claim-recovered-",
        "runstore.observer_host_id": "host-a",
        "runstore.evidence": "same-host-pid-dead",
    },
    "steal-claimed": {
        "runstore.run_id": "steal-claimed-",
        "runstore.claimant_host_id": "host-c",
        "runstore.evidence": "cross-host-unreachable-stale",
        "runstore.takeover": True,
    },
    "steal-self": {
        "runstore.run_id": "steal-self-",
        "runstore.claimant_host_id": "host-a",
        "runstore.evidence": "lease-expired",
    },
    "heartbeat-fence-lost": {
        "runstore.run_id": "heartbeat-fence-lost-",
        "runstore.owner_host_id": "host-a",
    },
    "transition-failure-not-a-status": {
        "runstore.run_id": "transition-failure-not-a-status-",
        "runstore.owner_host_id": "host-a",
        "runstore.to": "invalid",
        "runstore.error_code": "invalid_run",
    },
    "claim-failure": {"runstore.claimant_host_id": "host-a", "runstore.error_code": "invalid_run"},
    "create-interrupt": {
        "runstore.run_id": "create-interrupt-",
        "runstore.error_type": "KeyboardInterrupt",
    },
    "heartbeat-interrupted-statement": {
        "runstore.run_id": "heartbeat-interrupted-statement-",
        "runstore.owner_host_id": "host-a",
        "runstore.error_code": "persistence_failed",
    },
    "heartbeat-many-each-run": {"runstore.owner_host_id": "host-a", "runstore.run_count": 4},
    "attempt-put-inserted": {
        "runstore.run_id": "attempt-put-inserted-",
        "runstore.owner_host_id": "host-a",
    },
    "attempt-get-success": {"runstore.run_id": "attempt-get-success-"},
    "attempt-patch-failure": {
        "runstore.run_id": "attempt-patch-failure-",
        "runstore.owner_host_id": "host-a",
        "runstore.error_code": "invalid_attempt",
    },
    "purge-settled-success": {"runstore.purged": 1},
    "purge-candidates-success": {"runstore.returned": 1},
}


def measured(result: dict[str, Any]) -> dict[str, Any]:
    """The span of a scenario's measured call (the last store span)."""
    return [span for span in result["spans"] if span["name"] != "work"][-1]


@pytest.mark.parametrize("configuration", sorted(CONFIGURATIONS))
def test_spans_carry_the_run_the_host_and_nothing_else(
    configuration: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Every attribute on every span is one of the documented ones, every run
    id is one a scenario used, every host id is an owner's; representative
    spans carry exactly their run id, acting host and error code."""
    recorded = recording(configuration, tmp_path_factory)
    backend = recorded["backend"]
    for name, result in recorded["results"].items():
        for span in result["spans"]:
            if span["name"] == "work":
                continue
            attributes = span["attributes"]
            assert set(attributes) <= ALLOWED_ATTRIBUTES, (name, attributes)
            run_id = attributes.get("runstore.run_id")
            # claim_next names the run it took: the oldest claimable one.
            owners = SCENARIO_NAMES if span["name"] == "RunStore.claim_next" else {name}
            assert run_id is None or run_id.split("--")[0].rstrip("-") in owners, (name, run_id)
            for key in ("runstore.claimant_host_id", "runstore.owner_host_id"):
                assert attributes.get(key, "host-a") in ("host-a", "host-c"), (name, attributes)
    for name, expected in EXACT.items():
        span = measured(recorded["results"][name])
        outcome = span["attributes"]["runstore.outcome"]
        assert span["attributes"] == {
            "runstore.outcome": outcome,
            "db.system": backend,
            **expected,
        }, name
    claimed = measured(recorded["results"]["claim-next-activated"])["attributes"]
    assert claimed["runstore.run_id"].rstrip("-") in SCENARIO_NAMES


def secrets_in(recorded: dict[str, Any]) -> set[str]:
    """The markers found anywhere in a recording (results and full export)."""
    text = json.dumps(recorded)
    return {secret for secret in SECRETS if secret in text}


@pytest.mark.parametrize("configuration", sorted(CONFIGURATIONS))
def test_no_run_state_attempt_value_or_password_is_recorded(
    configuration: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """No span, event, status or metric point of the whole run holds a marker
    placed in run state (also passed as a transition target), in attempt
    values, or in the database password."""
    recorded = recording(configuration, tmp_path_factory)
    assert recorded["export"]["spans"], "nothing was exported"
    assert secrets_in(recorded) == set()


@pytest.mark.parametrize(
    ("defect", "caught"),
    [
        ("state-as-run-id", "secret"),
        ("reconfirm-counted-as-steal", "counters"),
    ],
)
def test_the_checks_catch_planted_defects(defect: str, caught: str, tmp_path: Path) -> None:
    """Re-instrumented with a defect (create's run id read from its state;
    reconfirm counted as a steal), the recording fails these checks."""
    recorded = _run_child({"target": str(tmp_path / "runs.db"), "fast_path": None, "plant": defect})
    if caught == "secret":
        assert secrets_in(recorded) == {SECRETS[0]}
    else:
        failing = {
            case.name
            for case in SCENARIOS
            if "sqlite" in case.backends
            and problems(case, recorded["results"][case.name], "sqlite")
        }
        assert failing == {
            "reconfirm-updated",
            "reconfirm-fence-lost",
            "reconfirm-not-found",
            "reconfirm-failure",
            "reconfirm-interrupt",
            "supervise-reconfirmed",
            "supervise-lapsed",
            "fleet-reconfirmed",
            "fleet-lapsed",
        }


def test_every_operation_is_recorded() -> None:
    """Each public operation of the RunStore protocol, the SQL stores' reads
    beyond it, and AttemptStore has a recording wrapper (a new operation
    cannot go unobserved)."""
    protocol = {
        name
        for name, member in vars(RunStore).items()
        if inspect.isfunction(member) and not name.startswith("_") and name != "close"
    }
    beyond_protocol = {"purge_candidates"}  # runstore's own stores, for runstore purge
    assert set(telemetry.RUN_STORE_OPERATIONS) == protocol | beyond_protocol
    for name in protocol | beyond_protocol:
        assert hasattr(vars(SqlRunStore)[name], "__wrapped__"), name
    public = {
        name
        for name, member in vars(AttemptStore).items()
        if inspect.isfunction(member) and not name.startswith("_")
    }
    assert set(telemetry.ATTEMPT_STORE_OPERATIONS) == public
    for name in public:
        assert hasattr(vars(AttemptStore)[name], "__wrapped__"), name


def test_what_counts_as_an_interrupt() -> None:
    """``interrupt``: a BaseException that is not an Exception, the
    supervisor's injected LeaseLost, a statement store.interrupt() aborted
    (SQLite's SQLITE_INTERRUPT, PostgreSQL's cancellation); anything else
    that escapes an operation is a ``failure`` (a statement timeout too)."""
    interrupts: list[BaseException] = [
        KeyboardInterrupt(),
        SystemExit(1),
        asyncio.CancelledError(),
        LeaseLost(run_id="r", reason="lapsed"),
        PersistenceFailedError("heartbeat", cause={"sqlite_error": "SQLITE_INTERRUPT"}),
        PersistenceFailedError("heartbeat", cause={"reason": "interrupted"}),
    ]
    failures: list[BaseException] = [
        InvalidRunError("claim", {"field": "run_id"}),
        PersistenceFailedError("heartbeat", cause={"reason": "statement-timeout"}),
        PersistenceFailedError("heartbeat", cause={"sqlite_error": "SQLITE_BUSY"}),
        RuntimeError("a bug"),
    ]
    assert [telemetry.error_outcome(error) for error in interrupts] == ["interrupt"] * 6
    assert [telemetry.error_outcome(error) for error in failures] == ["failure"] * 4


HIDE_OPENTELEMETRY = textwrap.dedent(
    """
    import sys

    class Hide:
        '''A meta-path finder that makes opentelemetry unimportable.'''

        def find_spec(self, name, path=None, target=None):
            if name == "opentelemetry" or name.startswith("opentelemetry."):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, Hide())

    import runstore
    from runstore import ManualClock, OwnerId
    from runstore import _telemetry
    from runstore._sql._store import SqlRunStore
    from runstore.attempts import Attempt, AttemptStore
    from runstore.ownership import supervise_many

    clock = ManualClock(0)
    owner = OwnerId("host-a", 1, "n")
    with runstore.open(":memory:", clock=clock) as store:
        store.create("r", "{}")
        store.claim_and_own("r", store.get("r"), owner, 0)
        store.heartbeat("r", owner, 0)
        store.heartbeat_many(owner, ["r"], 0)
        store.claim_next(owner, 0)
        AttemptStore(store).put(Attempt("r", "s", 0, "running", 0, meta={}), owner)
        with supervise_many(store, owner, ["r"], clock=clock) as fleet:
            clock.advance(1_000)
            assert fleet.wait_idle()
        try:
            store.claim("", store.get("r"), owner, 0)
        except runstore.RunStoreError:
            pass
    loaded = sorted(name for name in sys.modules if name.startswith("opentelemetry"))
    print(loaded, _telemetry.AVAILABLE, hasattr(SqlRunStore.heartbeat, "__wrapped__"))
    """
)


def test_without_the_api_nothing_is_imported_and_nothing_is_wrapped() -> None:
    """With opentelemetry unimportable, using a store (operations, errors, the
    attempt store, a fleet) leaves no opentelemetry module loaded, and the
    store's methods are the bare ones."""
    done = subprocess.run(
        [sys.executable, "-c", HIDE_OPENTELEMETRY],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout.strip() == "[] False False"
