"""Renewals sent together: an ``AsyncRunStore`` lane on PostgreSQL's
one-round-trip path takes the ``heartbeat`` and ``reconfirm`` calls waiting
for it together and sends them in one pipeline (``SqlRunStore._renew_each``,
``TransactionManager.once_many``), each still its own transaction.

What must hold: every caller gets exactly the answer (outcome or error) the
synchronous store gives the same call made by itself; a call withdrawn
while queued is never sent; an entry the server refuses fails alone; a
connection lost in the middle leaves the entries not yet answered
outcome-unknown; a cancel sent during the batch leaves those answered as
committed outcome-unknown; while telemetry records, every renewal runs by
itself (one span each). A planted lane that hands the answers to the wrong
callers is caught by the first test's comparison.

Real PostgreSQL; a lane is held busy by a call that waits on an event, so
the calls behind it queue, never by sleeping.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import runstore
from runstore import AsyncRunStore, ManualClock, OwnerId, RunSnapshot, RunStoreError
from runstore._sql._store import SqlRunStore

from .. import _postgres

OWNER = OwnerId("host-a", 1, "n1")
OTHER = OwnerId("host-b", 2, "n2")
PENDING = RunSnapshot("pending", None, None)

#: (method, run_id, owner, now_ms), in the order they are queued. Runs
#: ``own*`` are OWNER's, ``other*`` OTHER's, ``idle*`` nobody's; ``gone*``
#: do not exist; the empty run id and the negative time are refused by
#: admission; ``own0`` is renewed twice (the later beat, then an earlier one).
RENEWALS: list[tuple[str, str, OwnerId, int]] = [
    *[("heartbeat", f"own{i}", OWNER, 50 + i) for i in range(8)],
    ("reconfirm", "own8", OWNER, 60),
    ("heartbeat", "other0", OWNER, 61),
    ("reconfirm", "other1", OWNER, 62),
    ("heartbeat", "idle0", OWNER, 63),
    ("heartbeat", "gone0", OWNER, 64),
    ("heartbeat", "", OWNER, 65),
    ("heartbeat", "own9", OWNER, -1),
    ("heartbeat", "own0", OWNER, 70),
    ("heartbeat", "own0", OWNER, 66),
    ("reconfirm", "gone1", OWNER, 67),
    *[("heartbeat", f"own{i}", OWNER, 80 + i) for i in range(10, 30)],
    ("heartbeat", "other1", OTHER, 90),
    ("reconfirm", "other0", OTHER, 91),
]


def _prepare(store: runstore.RunStore) -> None:
    for i in range(30):
        store.create(f"own{i}", "{}")
        assert store.claim_and_own(f"own{i}", PENDING, OWNER, 10) == runstore.Activated()
    for i in range(2):
        store.create(f"other{i}", "{}")
        assert store.claim_and_own(f"other{i}", PENDING, OTHER, 10) == runstore.Activated()
    store.create("idle0", "{}")


def _answer(call: Callable[[], Any]) -> Any:
    try:
        return call()
    except RunStoreError as error:
        return error


def _same(got: Any, expected: Any) -> bool:
    if isinstance(expected, RunStoreError):
        return (
            type(got) is type(expected)
            and got.code == expected.code
            and got.method == expected.method
            and got.cause == expected.cause
        )
    return bool(got == expected)


def _expected(renewals: list[Any]) -> tuple[list[Any], list[Any]]:
    """Each renewal made by itself on the synchronous store, one after
    another: its answers, and every run's row after."""
    clock = ManualClock(100)
    with runstore.open(_postgres.database_url(), clock=clock) as store:
        _prepare(store)
        answers = [
            _answer(lambda m=m, r=r, o=o, n=n: getattr(store, m)(r, o, n))
            for m, r, o, n in renewals
        ]
        return answers, _rows(store)


def _rows(store: Any) -> list[Any]:
    return list(store.list_runs(limit=100, status=None).runs)


async def _hold(store: AsyncRunStore) -> tuple[asyncio.Future[Any], threading.Event]:
    """Keep every lane of ``store`` busy until the event is set."""
    release = threading.Event()
    busy = threading.Barrier(store.pool_size + 1)

    def wait(lane: Any) -> None:
        busy.wait(30)
        release.wait(30)

    holds = asyncio.gather(
        *(
            store._lanes.call("get", wait, write=False, interrupt=lambda lane: None)
            for _ in range(store.pool_size)
        )
    )
    await asyncio.to_thread(busy.wait, 30)
    return holds, release


def _together(store: AsyncRunStore) -> int:
    """How many statements the store's connections sent in pipelines."""
    return sum(sync._tm.sent_together for sync in store.sync_stores)


async def _queued_renewals(store: AsyncRunStore, renewals: list[Any]) -> list[Any]:
    """Every renewal of ``renewals`` (and a read in their midst) queued behind
    the held lanes, then let through: their answers."""
    holds, release = await _hold(store)
    middle = len(renewals) // 3
    calls = [
        asyncio.ensure_future(getattr(store, method)(run_id, owner, now))
        for method, run_id, owner, now in renewals[:middle]
    ]
    read = asyncio.ensure_future(store.get("own0"))
    calls += [
        asyncio.ensure_future(getattr(store, method)(run_id, owner, now))
        for method, run_id, owner, now in renewals[middle:]
    ]
    await asyncio.sleep(0)
    release.set()
    await holds
    answers = await asyncio.gather(*calls, return_exceptions=True)
    assert (await read).run_id == "own0"
    return list(answers)


def _mismatches(
    renewals: list[Any], store_class: type[SqlRunStore] | None = None, pool_size: int = 1
) -> tuple[list[Any], int]:
    """What differs between ``renewals`` queued together on an async store
    and made one by one on the synchronous store; and how many statements
    the async store sent in pipelines."""
    expected, expected_rows = _expected(renewals)
    url = _postgres.database_url()
    clock = ManualClock(100)
    with runstore.open(url, clock=clock) as setup:
        _prepare(setup)

    async def main() -> tuple[list[Any], int, list[Any]]:
        async with runstore.aopen(url, clock=clock, pool_size=pool_size) as store:
            if store_class is not None:
                for sync in store.sync_stores:
                    sync.__class__ = store_class
            answers = await _queued_renewals(store, renewals)
            together = _together(store)
            rows = await store.list_runs(limit=100, status=None)
            return answers, together, list(rows.runs)

    answers, together, rows = asyncio.run(main())
    wrong = [
        (renewal, got, want)
        for renewal, got, want in zip(renewals, answers, expected, strict=True)
        if not _same(got, want)
    ]
    if rows != expected_rows:
        wrong.append(("rows", rows, expected_rows))
    return wrong, together


def test_each_renewal_sent_together_gets_the_answer_it_gets_by_itself() -> None:
    wrong, together = _mismatches(RENEWALS)
    assert wrong == []
    # Batches hold one kind (heartbeat or reconfirm); the read splits one; the
    # admission refuses two before anything is sent.
    assert together >= 26, together


_RUNS = [*(f"own{i}" for i in range(6)), "other0", "idle0", "gone0", ""]
_renewals = st.lists(
    st.tuples(
        st.sampled_from(["heartbeat", "heartbeat", "reconfirm"]),
        st.sampled_from(_RUNS),
        st.sampled_from([OWNER, OWNER, OTHER, "not an owner"]),
        st.one_of(st.integers(-2, 200), st.sampled_from([2**63, 10**12])),
    ),
    min_size=2,
    max_size=40,
)


@settings(max_examples=25, deadline=None)
@given(_renewals)
def test_any_mix_of_renewals_sent_together_answers_as_one_by_one(renewals: list[Any]) -> None:
    """One lane: the queue's order is the order they run in, repeats of a
    run included."""
    wrong, _ = _mismatches(renewals)
    assert wrong == []


@settings(max_examples=10, deadline=None)
@given(_renewals)
def test_renewals_of_distinct_runs_on_several_lanes_answer_as_one_by_one(
    renewals: list[Any],
) -> None:
    """Three lanes, each taking its share: each run renewed once, so the
    lanes' order does not matter."""
    seen: set[str] = set()
    distinct = []
    for renewal in renewals:
        if renewal[1] not in seen:
            seen.add(renewal[1])
            distinct.append(renewal)
    wrong, _ = _mismatches(distinct, pool_size=3)
    assert wrong == []


class _Misdelivered(SqlRunStore):
    """Planted: the answers of a batch handed out one place late."""

    def _renew_each(self, method: str, renewals: list[Any]) -> list[Any]:
        answers = super()._renew_each(method, renewals)
        return answers[-1:] + answers[:-1]


def test_a_lane_that_hands_answers_to_the_wrong_callers_is_caught() -> None:
    planted = type("Misdelivered", (_Misdelivered, runstore.postgres.PostgresRunStore), {})
    wrong, _ = _mismatches(RENEWALS, planted)
    assert wrong


def test_a_renewal_withdrawn_while_queued_is_never_sent() -> None:
    url = _postgres.database_url()
    clock = ManualClock(100)
    with runstore.open(url, clock=clock) as setup:
        _prepare(setup)

    async def main() -> None:
        async with runstore.aopen(url, clock=clock, pool_size=1) as store:
            holds, release = await _hold(store)
            calls = [
                asyncio.ensure_future(store.heartbeat(f"own{i}", OWNER, 50)) for i in range(20)
            ]
            await asyncio.sleep(0)
            for i in range(0, 20, 3):
                calls[i].cancel()
            # A cancellation reaches its task at the task's next step: let
            # those steps run (each withdraws its call) before the lane is free.
            await asyncio.sleep(0)
            release.set()
            await holds
            answers = await asyncio.gather(*calls, return_exceptions=True)
            for i, answer in enumerate(answers):
                row = await store.get(f"own{i}")
                if i % 3 == 0:
                    assert isinstance(answer, asyncio.CancelledError)
                    assert row.heartbeat_at_ms == 10, i
                else:
                    assert answer == runstore.Updated(), (i, answer)
                    assert row.heartbeat_at_ms == 50, i
            assert _together(store) >= 10

    asyncio.run(main())


# -- the pipeline itself (the transaction manager of a synchronous store) ---------------------

_PLANTED_FAILURE = """
CREATE FUNCTION planted_failure(code text) RETURNS int LANGUAGE plpgsql AS $$
BEGIN
    IF code <> '' THEN
        RAISE EXCEPTION 'planted' USING ERRCODE = code;
    END IF;
    INSERT INTO planted_writes VALUES (1);
    RETURN 1;
END $$
"""


def _planted_store() -> Any:
    url = _postgres.database_url()
    with psycopg.connect(url, autocommit=True) as setup:
        setup.execute("CREATE TABLE planted_writes (n int)")
        setup.execute(_PLANTED_FAILURE)
    return runstore.open(url, clock=ManualClock(0)), url


def _writes(url: str) -> int:
    with psycopg.connect(url) as reader:
        row = reader.execute("SELECT count(*) FROM planted_writes").fetchone()
        assert row is not None
        return int(row[0])


def test_an_entry_the_server_refuses_fails_alone_and_a_transient_one_is_left_to_replay() -> None:
    store, url = _planted_store()
    with store:
        answers = store._tm.once_many(
            "heartbeat",
            "SELECT planted_failure($1::text)",
            [("",), ("40001",), ("22012",), ("",)],
            ["a", "b", "c", "d"],
        )
        assert answers is not None
        assert answers[0] == ([(1,)], 1)
        assert answers[1] is None  # a serialization failure: rolled back, replayable
        assert isinstance(answers[2], RunStoreError)
        assert not answers[2].outcome_unknown
        assert answers[3] == ([(1,)], 1)
        assert _writes(url) == 2
        # The connection is in its ordinary mode again.
        assert store._tm.once("heartbeat", "SELECT 7", ()) == ([(7,)], 1)


def test_a_connection_lost_in_the_pipeline_leaves_the_unanswered_outcome_unknown() -> None:
    store, url = _planted_store()
    with store:
        answers = store._tm.once_many(
            "heartbeat",
            "SELECT CASE WHEN $1::int = 1 THEN pg_terminate_backend(pg_backend_pid())::int "
            "ELSE planted_failure('') END",
            [(0,), (1,), (0,)],
            ["a", "b", "c"],
        )
        assert answers is not None
        assert answers[0] == ([(1,)], 1)
        for lost in answers[1:]:
            assert isinstance(lost, RunStoreError)
            assert lost.outcome_unknown
        assert _writes(url) == 1
        # The next operation reconnects.
        assert store._tm.once("heartbeat", "SELECT 7", ()) == ([(7,)], 1)


def test_an_answer_past_its_bound_leaves_the_answered_entries_outcome_unknown() -> None:
    store, url = _planted_store()
    with store:
        connection = store._tm.live()
        connection.statement_timeout_ms = 1  # the bound: MINIMUM_BOUND_MS
        answers = store._tm.once_many(
            "heartbeat",
            "SELECT planted_failure('') FROM pg_sleep($1::float8)",
            [(0,), (30,), (0,)],
            ["a", "b", "c"],
        )
        assert answers is not None
        assert isinstance(answers[1], RunStoreError)  # cancelled: rolled back
        assert not answers[1].outcome_unknown
        for answered in (answers[0], answers[2]):
            assert isinstance(answered, RunStoreError)
            assert answered.outcome_unknown
        assert _writes(url) == 2


_RECORDED = """
import asyncio, json, sys
import runstore
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

url = sys.stdin.read()
exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
owner = runstore.OwnerId("host-a", 1, "n1")
pending = runstore.RunSnapshot("pending", None, None)

async def main():
    async with runstore.aopen(url, clock=runstore.ManualClock(10), pool_size=1) as store:
        for i in range(20):
            await store.create(f"r{i}", "{}")
            await store.claim_and_own(f"r{i}", pending, owner, 10)
        exporter.clear()
        answers = await asyncio.gather(*(store.heartbeat(f"r{i}", owner, 20) for i in range(20)))
        assert answers == [runstore.Updated()] * 20, answers
        return sum(sync._tm.sent_together for sync in store.sync_stores)

together = asyncio.run(main())
spans = [span.name for span in exporter.get_finished_spans()]
print(json.dumps({"together": together, "heartbeats": spans.count("RunStore.heartbeat")}))
"""


def test_while_telemetry_records_each_renewal_runs_by_itself() -> None:
    pytest.importorskip("opentelemetry.sdk.trace", reason="the otel SDK (the dev extra) records")
    url = _postgres.database_url()
    done = subprocess.run(
        [sys.executable, "-c", _RECORDED],
        input=url,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout) == {"together": 0, "heartbeats": 20}


@pytest.mark.parametrize("pool_size", [1, 3])
def test_a_lone_renewal_is_not_held_back(pool_size: int) -> None:
    url = _postgres.database_url()
    clock = ManualClock(100)
    with runstore.open(url, clock=clock) as setup:
        _prepare(setup)

    async def main() -> None:
        async with runstore.aopen(url, clock=clock, pool_size=pool_size) as store:
            for beat in range(5):
                assert await store.heartbeat("own0", OWNER, 50 + beat) == runstore.Updated()
            assert _together(store) == 0

    asyncio.run(main())
