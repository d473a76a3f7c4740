"""The zoo's concurrency bugs: stores that are wrong only when processes race.

The differential machines run one operation at a time in one process, so
these bugs hide from them; ``runstore torture`` (real worker processes on one
database, the recorded history checked for linearizability) must find each
of them. Every module in ``RACES`` holds one bug in the real SQLite store and
a torture factory, ``factory(clock, path) -> store``, opening the file (so
``runstore torture --store tests.zoo.<module>:factory`` runs it);
``POSTGRES_RACES`` hold bugs in the PostgreSQL store, with factories
``factory(clock, url)``, tortured with server restarts among the faults.
``CONTROLS`` are stores that do things differently but correctly; the
torture must pass them, and the shipped stores too. ``COUNTS`` are bugs no
per-run read can see, only the final database-wide revision count (which
the torture checks too).

``deferred_write`` is the write path the transaction-mode bugs share: a
transaction begun by ``BEGIN`` (deferred) instead of ``BEGIN IMMEDIATE``, or
by the sqlite3 driver itself, with the store's retry of transient failures.
"""

from __future__ import annotations

import random
import sqlite3
import time
import types
from collections.abc import Callable
from typing import Any, Literal

import runstore
from runstore import AlreadyClaimed, HeartbeatFresh, SnapshotChanged
from runstore.sqlite._tx import RollbackAndReturn, Transaction, classify, is_transient

RACES = (
    "race_classify_before_begin",
    "race_driver_deferred_begin",
    "race_retry_replays_half",
)
CONTROLS = ("deferred_begin_full_replay",)
POSTGRES_RACES = (
    "race_pg_no_row_lock",
    "race_pg_autocommit",
)
COUNTS = ("count_heartbeat_writes_twice",)

#: The races of issue 26, at least one per window the torture aims at: each
#: module, the backends it applies to, and its window. The first part passed
#: the torture of 9e899fd (before issue 26's work; 60 s each, seeds 1, 2 and
#: 3, the CLI's default options, server restarts among the faults on
#: PostgreSQL), as each comment says; the second part it found already, kept
#: as regression entries. ``benchmarks/torture_detection.py --detect`` times
#: how soon the torture of today finds each (``DETECT``'s options, up to 60 s
#: a backend; figures from seed 20000 unless said, measured on the torture of
#: 7a191b6 to 084216f while it changed: from f203ead on, PostgreSQL runs lose
#: acknowledgements in the mixed, cancel and zombies phases by default).
WINDOW_RACES = (
    # -- Passed at 9e899fd: 3 of 3 seeds on each backend.
    # The purge race: found late on SQLite (44 s on one seed; on another only by the
    # final state's read at 60 s) until purges started on a grid of their own with
    # forks of old settled runs (b87d058): seeds 71000-71002 at 5.7 s, 10.0 s (the
    # 10 s run's final state) and 5.7 s (load 6 to 7), each by two purges overlapping.
    ("race_purge_chosen_before", ("sqlite", "postgresql"), "purge_settled candidates"),
    ("race_claim_next_picks_outside", ("sqlite", "postgresql"), "claim_next candidates"),
    ("race_heartbeat_many_one_by_one", ("sqlite", "postgresql"), "heartbeat_many vs readers"),
    # claim_next_many came after 9e899fd: no torture of then to pass. Found on SQLite at
    # 3.3 s (load 14-16); the bug is PostgreSQL's too, but three 60 s runs there (seeds
    # 20000-20002, load 16-23) missed it, so it is not listed for PostgreSQL yet (those
    # runs were before the candidates workload's claim grid and pool). With them, both
    # candidate races are found on SQLite on seeds 20000-20004 within 60 s (40 s the
    # longest, loads 14-26); race_cancel_checks_first on PostgreSQL on seeds 20000-20002
    # (46 s the longest, loads 15-23) since the cancel workload's owners wait for a request.
    ("race_claim_next_many_picks_outside", ("sqlite",), "claim_next_many candidates"),
    # The PostgreSQL batch race: the batch chosen without FOR UPDATE SKIP LOCKED, each
    # run locked and read again as it is taken, the ones lost left out. The torture
    # of 9e899fd has no claim_next_many to call, so it passes by construction (run
    # anyway: seeds 1-3, 60 s each with server restarts, status 0, no such call
    # recorded; loads 7 to 21). Today: seeds 71000-71002 found at 0.9 s, 1.1 s (in
    # the 60 s run) and 3.4 s (loads 4 to 16).
    ("race_pg_claim_batch_unlocked", ("postgresql",), "claim_next_many candidates"),
    # Zombie owner and two transactions on SQLite (the check outside the
    # driver's BEGIN). 9e899fd passed 3 of 3 seeds at loads 12.6 to 19.3
    # (so few calls: 11,320, 3,192 and 4,621). Today: found at 31.4 s (load
    # 6.8 to 13.0) and again at 31.6 s on the torture of 084216f (load 15 to
    # 18), and at 42.5 s on seed 7 (load 18); without --widen seed 20000
    # passed 60 s (load 16).
    ("race_zombie_settle_after_guard", ("sqlite",), "zombie owner, two transactions"),
    # A lost COMMIT answer taken for a rollback and replayed. 9e899fd passed
    # 3 of 3 seeds (24 to 26 server restarts each, loads 5.7 to 12.9). Today,
    # with --lost-acks 0.5: found at 0.1 s and 0.2 s (loads 12.4 to 17.6), and
    # at 0.1 s on seed 7 (load 22); at 0.0 s on the torture of 084216f.
    ("race_pg_commit_loss_replayed", ("postgresql",), "lost acknowledgement at commit"),
    # -- Found at 9e899fd: regression entries, not evidence of a new window.
    # 3 of 3 seeds on SQLite, 2 of 3 on PostgreSQL.
    ("race_cancel_checks_first", ("sqlite", "postgresql"), "cancellation, two transactions"),
    # 1 of 3 seeds on SQLite, 2 of 3 on PostgreSQL.
    ("race_cancel_lineage_by_rounds", ("sqlite", "postgresql"), "lineage rounds"),
    # 3 of 3 seeds. Every PostgreSQL zombie race tried so far was found at
    # 9e899fd: at loads of 11 to 23 an owner on PostgreSQL, a few round trips
    # an operation, is often stale while it writes (the settle race below was
    # found on 1 of 2 seeds even with no SIGSTOP among the faults).
    ("race_pg_zombie_activate_unlocked", ("postgresql",), "zombie owner"),
    # 2 of 3 seeds (seeds 1 and 2; loads 11.0 to 17.5). Today: missed in
    # 60 s on seed 20000 (load 19.1 to 23.2), found at 2.8 s on seed 7 (load
    # 23); on the torture of 084216f found at 17.0 s on seed 20000 (load 18).
    ("race_zombie_settle_after_guard", ("postgresql",), "zombie owner"),
    # 3 of 3 seeds (loads 13.1 to 21.5). Today: found at 5.3 s (load 13.8),
    # and at 16.8 s on seed 7 (load 19).
    # Its one-round-trip variant (fast_path=True): 1 of 2 seeds at 9e899fd,
    # missed in 60 s today.
    ("race_pg_zombie_settle_by_lease", ("postgresql",), "zombie owner"),
    # Server restarts among the faults: 2 of 3 seeds.
    ("race_pg_replays_lost_ack", ("postgresql",), "lost acknowledgement at commit"),
    # Two transactions on SQLite: 3 of 3 seeds each (loads 0.5 to 12.6, and
    # 13.0 to 17.5); they were misses of the 2 s budget only.
    ("race_retry_replays_half", ("sqlite",), "two transactions (retry)"),
    ("race_driver_deferred_begin", ("sqlite",), "two transactions (driver BEGIN)"),
    # In the zoo of 9e899fd, found by its 2 s test; not run for 60 s there.
    ("race_pg_no_row_lock", ("postgresql",), "no row lock"),
)

#: The torture options detection runs with, per backend: widened windows
#: everywhere. Lost acknowledgements in every phase go only to the races of
#: that window (``LOST_ACK_RACES``): every cut leaves a write of unknown
#: outcome, and over a minute a long-lived object gathers more than the
#: checker searches (``race_cancel_checks_first`` went unjudged so on
#: PostgreSQL); the others have the torture's default (since f203ead, on
#: PostgreSQL, cuts in the phases of ``LOST_ACK_WORKLOADS`` only).
DETECT = {
    "sqlite": {"widen": 0.1},
    "postgresql": {"widen": 0.1},
}
LOST_ACK_RACES = {
    "race_pg_replays_lost_ack": {"lost_acks_s": 0.5},
    "race_pg_commit_loss_replayed": {"lost_acks_s": 0.5},
}

#: One bounded torture run, as CI runs it: each race must be found in at least
#: 19 of 20 such runs (``benchmarks/torture_detection.py`` counts), on either
#: backend (on PostgreSQL a server restart is one of the faults). Widened
#: windows (``--widen``) make the two-transaction races show within it at
#: loads 8 to 16 (without: ``race_retry_replays_half`` 1 of 6 runs at load
#: 13, with 0.1: 6 of 6).
BUDGET = {"workers": 3, "threads": 2, "runs": 1, "seconds": 2.0, "widen": 0.1}

#: A classify query's loss tag, as the outcome it names.
LOSSES = {
    "already_claimed": AlreadyClaimed(),
    "heartbeat_fresh": HeartbeatFresh(),
    "snapshot_changed": SnapshotChanged(),
}


def open_file(clock, path, **options):
    """The real SQLite store on ``path`` (what every race factory starts from)."""
    return runstore.open(path, clock=clock, durability="normal", **options)


def open_target(clock, target, **options):
    """The shipped store on ``target``: a PostgreSQL URL or a SQLite file path
    (the races that apply to both backends start from it)."""
    if "://" in target:
        return runstore.open(target, clock=clock, **options)
    return open_file(clock, target, **options)


def activation_by_claim(queries):
    """``queries`` (a store's query module) with ``ACTIVATE_WRITE``'s guard on
    the snapshot turned off (``TRUE OR (...)``, so every parameter is still
    used): the UPDATE names the claim only, trusting the classify read."""
    sql = queries.ACTIVATE_WRITE
    start = sql.index(" AND status = ")
    end = sql.index(" AND claim_host_id", start)
    relaxed = f"{sql[:start]} AND (TRUE OR ({sql[start + 5 : end]})){sql[end:]}"
    names = {name: getattr(queries, name) for name in dir(queries) if not name.startswith("__")}
    return types.SimpleNamespace(**{**names, "ACTIVATE_WRITE": relaxed})


def with_mistake(store, mistake):
    """``store`` turned into a subclass of its own class with ``mistake``'s
    methods first: the one change a race makes to the shipped store."""
    store.__class__ = type(mistake.__name__, (mistake, type(store)), {})
    return store


def deferred_write(
    tm: Any,
    begin: Literal["explicit", "driver"],
    connection_for: Callable[[sqlite3.Connection, int], Any] | None = None,
) -> Callable[[str, Callable[[Transaction], Any]], Any]:
    """A ``write(method, body)`` for ``tm`` whose transactions are deferred.

    ``"explicit"`` issues ``BEGIN``: SQLite takes the snapshot at the first
    read and refuses to upgrade a stale one to a write (``SQLITE_BUSY``), so
    with the whole body replayed on that failure this is correct, only slower.
    ``"driver"`` leaves the transaction to the sqlite3 module (its default
    ``isolation_level``), which issues ``BEGIN`` just before the first INSERT,
    UPDATE or DELETE: every SELECT before it runs outside any transaction.
    ``connection_for(connection, attempt)`` may wrap the connection the body
    sees on each attempt.
    """

    def write(method: str, body: Callable[[Transaction], Any]) -> Any:
        with tm.lock:
            connection = tm.connection
            started = time.monotonic()
            attempt = 0
            while True:
                attempt += 1
                seen = connection if connection_for is None else connection_for(connection, attempt)
                tx = Transaction(seen, tm.consensus)
                try:
                    if begin == "explicit":
                        sqlite3.Connection.execute(connection, "BEGIN")
                    else:
                        connection.isolation_level = "DEFERRED"
                    result = body(tx)
                    _end(connection, "COMMIT")
                    return result
                except RollbackAndReturn as rolled_back:
                    _end(connection, "ROLLBACK")
                    return rolled_back.value
                except Exception as failure:
                    _end(connection, "ROLLBACK")
                    if is_transient(failure) and time.monotonic() - started < 5.0:
                        time.sleep(random.uniform(0, 0.002 * min(attempt, 10)))
                        continue
                    error = classify(method, failure)
                finally:
                    connection.isolation_level = None
                raise error

    return write


def _end(connection: sqlite3.Connection, statement: str) -> None:
    if connection.in_transaction:
        sqlite3.Connection.execute(connection, statement)
