"""A lineage cancellation against a round created while it waits, on PostgreSQL.

``request_cancel_lineage`` marks every live round of a lineage. Under READ
COMMITTED its search for rounds reads one snapshot; when it then waits for
a round's row lock held by another write, a new round can be created and
committed meanwhile, unseen by that snapshot, and the cancellation commits
after it without marking it: the round committed first, so no order of the
two explains it (found by the torture's default mix). Since migration 2013
the cancellation locks the lineage's root first (``FOR UPDATE``, the one row
lock that conflicts with the key-share lock a round being created holds on
its root), and searches in a statement of its own: a round on its way is
waited for and seen; a round begun later waits for the cancellation.

The test holds round 1's row lock in a session of its own, starts the
cancellation (it comes to wait), then creates round 2 on a third session:
with the root locked first, that create waits until the cancellation
commits (and lands after it, unmarked, which is legal); without, it
commits at once and must then be marked. Both paths.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from runstore import ManualClock, OwnerId, RunSnapshot

from .. import _postgres
from .test_postgres_lineage_purge import _store_backend_pid, _waiting_on_lock

postgres = pytest.importorskip("runstore.postgres")
psycopg = pytest.importorskip("psycopg")

from runstore.postgres import _queries  # noqa: E402

OWNER = OwnerId("host-cancel", 1, "cancel")
PENDING = RunSnapshot("pending", None, None)


@pytest.fixture(params=[True, False], ids=["one-round-trip", "general"])
def stores(request: pytest.FixtureRequest) -> Iterator[tuple[Any, Any, str, ManualClock]]:
    url = _postgres.database_url()
    clock = ManualClock(1_000_000)
    canceller = postgres.open(url, clock=clock, fast_path=request.param)
    creator = postgres.open(url, clock=clock, fast_path=request.param)
    assert (canceller._fused is not None) is request.param  # the path under test
    yield canceller, creator, url, clock
    creator.close()
    canceller.close()


def _in_thread(action: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    answers: list[Any] = []

    def run() -> None:
        try:
            answers.append(action())
        except BaseException as error:  # reported by the caller
            answers.append(error)

    worker = threading.Thread(target=run)
    worker.start()
    return worker, answers


def _until(condition: Callable[[], bool], what: str) -> None:
    """Poll a condition of the sessions (not a lease timing) for up to 30 s."""
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def test_a_round_created_while_a_lineage_cancel_waits_is_ordered_with_it(
    stores: tuple[Any, Any, str, ManualClock],
) -> None:
    canceller, creator, url, clock = stores
    # The root settled (so no round search locks it), round 1 live.
    canceller.create("root", "{}")
    canceller.claim_and_own("root", PENDING, OWNER, clock.now_ms())
    canceller.transition_owned("root", OWNER, "completed")
    canceller.create("round-1", "{}", lineage_id="root", round_ordinal=1)

    holding = psycopg.connect(url, autocommit=False)
    try:
        holding.execute(_queries.LOCK_RUNS.replace("$1::text[]", "%s"), (["round-1"],))
        cancelling, cancelled = _in_thread(
            lambda: canceller.request_cancel_lineage("round-1", clock.now_ms())
        )
        _until(
            lambda: _waiting_on_lock(url, _store_backend_pid(canceller)),
            "the cancellation neither waited for round 1 nor finished",
        )
        creating, created = _in_thread(
            lambda: creator.create("round-2", "{}", lineage_id="root", round_ordinal=2)
        )
        _until(
            lambda: bool(created) or _waiting_on_lock(url, _store_backend_pid(creator)),
            "the round's create neither waited nor finished",
        )
        round_2_first = bool(created)
        holding.commit()
    finally:
        holding.close()
    cancelling.join(30)
    creating.join(30)
    assert len(cancelled) == 1, cancelled
    assert not isinstance(cancelled[0], BaseException), cancelled
    assert created == [None]
    round_2 = canceller.get("round-2")
    assert round_2 is not None
    # Round 2 committed while the cancellation was still waiting: the
    # cancellation came after it and must have marked it.
    assert not (round_2_first and round_2.cancel_requested_at_ms is None), (
        "round 2 committed before the lineage cancellation and stayed unmarked"
    )
    # With the root locked first, the create is the one that waits.
    assert not round_2_first
    canceller.check_invariants()
