"""The PostgreSQL change feed (migration 2010) under concurrency and crashes.

Writers append unnumbered entries to ``flows_change_log``; ``revision()``
and ``changes()`` number them under the counter's lock
(``runstore.postgres._change_feed``). The feed's three properties
(docs/guides/postgresql.md, "The change feed") are checked here with real
connections on threads, a killed session mid-write and mid-numbering, and a
server stopped as a crash stops it:

1. ``revision()`` equals the number of committed run-row writes, as the
   model counts them (a create, a heartbeat, each run a ``heartbeat_many``
   renews and each run ``purge_settled`` deletes count one).
2. A change never becomes visible with a revision at or below one a reader
   has already seen (``_Follower``: every change a reader is ever shown
   above its cursor is new, and none appears later below it).
3. An acknowledged write shows in the very next ``revision()`` and
   ``changes()`` of any reader (each writer's own reader, another store,
   reads right after each acknowledgement).

Each check is shown to catch a planted numbering: a feed whose reads do not
number (property 3), a numbering that does not take the counter's lock
(properties 1 and 3), and a feed numbered at write time, which a reader's
cursor passes (property 2, ``test_postgres_concurrency``'s zoo case).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from runstore import Activated, ManualClock, OwnerId, RunSnapshot, RunStoreError, Updated
from runstore.stateful._targets import _postgres as servers

from .. import _postgres
from .test_postgres_concurrency import _race as race

postgres = pytest.importorskip("runstore.postgres")
psycopg = pytest.importorskip("psycopg")

PENDING = RunSnapshot("pending", None, None)
WRITERS = 4
BEATS = 30


@pytest.fixture
def url() -> str:
    return _postgres.database_url()


def _race(count: int, fn: Callable[[int], Any]) -> list[Any]:
    """``fn(i)`` on ``count`` threads released together; results (or errors)."""
    return race(count, fn, timeout=120)


class _Follower:
    """A reader following the feed: remembers every (run, revision) it was
    shown and the highest revision it saw; ``late()`` lists the changes the
    final feed holds at or below a revision it had seen without showing them
    (property 2)."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.cursor = 0
        self.seen: set[tuple[str, int]] = set()

    def poll(self) -> None:
        revision = self.store.revision()
        assert revision >= self.cursor
        for change in self.store.changes(self.cursor):
            assert change.revision > self.cursor
            self.seen.add((change.run_id, change.revision))
            self.cursor = max(self.cursor, change.revision)

    def late(self, final: list[Any]) -> list[tuple[str, int]]:
        return [
            (c.run_id, c.revision)
            for c in final
            if c.revision <= self.cursor and (c.run_id, c.revision) not in self.seen
        ]


def _feed_workload(url: str, *, fast_path: bool) -> list[str]:
    """Writers on distinct runs (heartbeats, a ``heartbeat_many`` of their
    runs, creates, purges, compaction), each followed by a read from its own
    reader store; two followers poll throughout. Answers what broke, in
    words (empty: the three properties held)."""
    problems: list[str] = []
    clock = ManualClock(0)
    owners = [OwnerId(f"host-{i}", i + 1, "w") for i in range(WRITERS)]
    writers = [postgres.open(url, clock=clock, fast_path=fast_path) for _ in range(WRITERS)]
    readers = [postgres.open(url, clock=clock) for _ in range(WRITERS + 2)]
    try:
        counted = 0
        for i, store in enumerate(writers):
            for run in (f"w-{i}", f"w-{i}-b"):
                store.create(run, "{}")
                assert store.claim_and_own(run, PENDING, owners[i], 0) == Activated()
                counted += 2
        followers = [_Follower(readers[-1]), _Follower(readers[-2])]
        done = threading.Event()

        def follow(follower: _Follower) -> None:
            try:
                while not done.is_set():
                    follower.poll()
            except BaseException as error:
                problems.append(f"follower: {error!r}")

        polling = [threading.Thread(target=follow, args=(f,)) for f in followers]
        for thread in polling:
            thread.start()

        def write(i: int) -> int:
            store, reader, owner = writers[i], readers[i], owners[i]
            wrote = 0
            cursor = reader.revision()
            newest: dict[str, int] = {}

            def acknowledged(run: str, writes: int) -> None:
                nonlocal wrote, cursor
                wrote += writes
                revision = reader.revision()
                shown = {c.run_id: c.revision for c in reader.changes(cursor)}
                if run not in shown or shown[run] <= newest.get(run, 0):
                    problems.append(f"writer {i}: {run}'s acknowledged write not shown")
                    return
                if revision < shown[run]:
                    problems.append(f"writer {i}: revision() {revision} below {shown[run]}")
                newest.update(shown)
                cursor = max(shown.values())

            for beat in range(1, BEATS + 1):
                if store.heartbeat(f"w-{i}", owner, beat) != Updated():
                    problems.append(f"writer {i}: a heartbeat was refused")
                acknowledged(f"w-{i}", 1)
                if beat % 10 == 0:
                    answers = store.heartbeat_many(owner, [f"w-{i}", f"w-{i}-b"], beat)
                    if answers != {f"w-{i}": Updated(), f"w-{i}-b": Updated()}:
                        problems.append(f"writer {i}: heartbeat_many answered {answers}")
                    acknowledged(f"w-{i}-b", 2)
                if beat % 15 == 0:
                    gone = f"gone-{i}-{beat}"
                    store.create(gone, "{}")
                    acknowledged(gone, 1)
                    store.claim_and_own(gone, PENDING, owner, 0)
                    store.transition_owned(gone, owner, "completed", "{}")
                    wrote += 2
                    # Purges and compaction race the other writers and readers;
                    # each purged run is one write (its tombstone).
                    wrote += store.purge_settled(1, limit=2)
                    store.compact_changes(reader.revision(), limit=2)
            return wrote

        results = _race(WRITERS, write)
        done.set()
        for thread in polling:
            thread.join(60)
        for result in results:
            if isinstance(result, BaseException):
                problems.append(f"a writer raised {result!r}")
            else:
                counted += result
        counted += readers[0].purge_settled(1, limit=100)
        readers[1].compact_changes(readers[1].revision())
        if (final := readers[0].revision()) != counted:
            problems.append(f"revision() is {final}, the model counts {counted} writes")
        everything = readers[0].changes(0)
        for follower in followers:
            follower.poll()
            if late := follower.late(everything):
                problems.append(f"a follower's cursor passed {late}")
        readers[0].check_invariants()
    finally:
        for store in writers + readers:
            store.close()
    return problems


@pytest.mark.timeout(240)
@pytest.mark.parametrize("fast_path", [True, False], ids=["one-round-trip", "general"])
def test_the_feed_keeps_its_three_properties_under_concurrent_writers(
    url: str, fast_path: bool
) -> None:
    assert _feed_workload(url, fast_path=fast_path) == []


# Planted: reads answer the counter and never number (nor do writers).
_READS_DO_NOT_NUMBER = """
CREATE OR REPLACE FUNCTION flows_number_changes(p_wait boolean DEFAULT true) RETURNS bigint
LANGUAGE sql AS $$ SELECT revision FROM flows_run_source WHERE singleton = 1 $$;
"""

# Planted: a numbering that reads the counter without its lock (and is slow
# about it, so two numberers overlap).
_UNLOCKED_NUMBERING = """
CREATE OR REPLACE FUNCTION flows_number_changes(p_wait boolean DEFAULT true) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
  v_base bigint;
  v_count bigint;
BEGIN
  SELECT revision INTO v_base FROM flows_run_source WHERE singleton = 1;
  IF NOT EXISTS (SELECT 1 FROM flows_change_log) THEN
    RETURN v_base;
  END IF;
  PERFORM pg_sleep(0.5);
  WITH taken AS (DELETE FROM flows_change_log RETURNING seq, run_ids, deleted),
  numbered AS (
    SELECT u.id, t.deleted, v_base + row_number() OVER (ORDER BY t.seq, u.position) AS revision
    FROM taken AS t, unnest(t.run_ids) WITH ORDINALITY AS u(id, position)
  ), newest AS (
    SELECT DISTINCT ON (n.id) n.id, n.revision, n.deleted FROM numbered AS n
    ORDER BY n.id, n.revision DESC
  ), recorded AS (
    INSERT INTO flows_run_changes AS c (run_id, revision, deleted)
    SELECT n.id, n.revision, n.deleted FROM newest AS n
    ON CONFLICT (run_id) DO UPDATE SET revision = excluded.revision, deleted = excluded.deleted
  )
  SELECT count(*) INTO v_count FROM numbered;
  UPDATE flows_run_source SET revision = v_base + v_count WHERE singleton = 1;
  RETURN v_base + v_count;
END
$$;
"""


def _plant(url: str, sql: str) -> None:
    with psycopg.connect(url, autocommit=True) as raw:
        raw.execute(sql)


@pytest.mark.timeout(240)
def test_a_feed_whose_reads_do_not_number_is_caught(url: str) -> None:
    postgres.open(url, clock=ManualClock(0)).close()
    _plant(url, _READS_DO_NOT_NUMBER)
    problems = _feed_workload(url, fast_path=True)
    assert any("acknowledged write not shown" in p for p in problems), problems
    assert any("the model counts" in p for p in problems), problems


def _two_readers_after_a_write(url: str) -> list[Any]:
    """A write, then two readers' ``revision()`` at once."""
    stores = [postgres.open(url, clock=ManualClock(0)) for _ in range(3)]
    try:
        stores[0].create("r", "{}")
        return _race(2, lambda i: stores[i + 1].revision())
    finally:
        for store in stores:
            store.close()


def test_readers_numbering_at_once_both_show_the_write(url: str) -> None:
    assert _two_readers_after_a_write(url) == [1, 1]


def test_a_numbering_without_the_counters_lock_is_caught(url: str) -> None:
    """Both readers take the counter before either numbers: the later one
    finds the entry gone and answers a revision without the acknowledged
    write (or breaks the unique revision)."""
    postgres.open(url, clock=ManualClock(0)).close()
    _plant(url, _UNLOCKED_NUMBERING)
    answers = _two_readers_after_a_write(url)
    assert answers != [1, 1], answers


# -- crashes -------------------------------------------------------------------------

OWNER = OwnerId("host-a", 1, "nonce-a")


def _wait_for_lock(url: str, pid: int) -> None:
    """Until the backend ``pid`` waits for a lock (bounded)."""
    deadline = time.monotonic() + 30
    with psycopg.connect(url, autocommit=True) as watcher:
        while time.monotonic() < deadline:
            row = watcher.execute(
                "SELECT count(*) FROM pg_locks WHERE pid = %s AND NOT granted", (pid,)
            ).fetchone()
            if row is not None and row[0] > 0:
                return
            time.sleep(0.01)
    raise AssertionError("the session never waited for the lock")


def _terminate(url: str, pid: int) -> None:
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))


@pytest.mark.parametrize("fast_path", [True, False], ids=["one-round-trip", "general"])
def test_a_writer_killed_at_commit_is_never_numbered(url: str, fast_path: bool) -> None:
    """The writer's session is killed while its commit waits to append its
    entry: the write rolls back, the revision does not count it, and the
    next write takes the next revision."""
    with (
        postgres.open(url, clock=ManualClock(0), fast_path=fast_path) as writer,
        postgres.open(url, clock=ManualClock(0)) as reader,
    ):
        writer.create("r", "{}")
        assert writer.claim_and_own("r", PENDING, OWNER, 0) == Activated()
        assert reader.revision() == 2
        before = reader.get("r")
        pid = writer._tm.live().info.backend_pid
        answers: list[Any] = []
        with psycopg.connect(url) as holder:
            holder.execute("LOCK TABLE flows_change_log IN SHARE MODE")
            thread = threading.Thread(
                target=lambda: answers.append(_attempt(lambda: writer.heartbeat("r", OWNER, 5)))
            )
            thread.start()
            _wait_for_lock(url, pid)
            _terminate(url, pid)
            thread.join(60)
            holder.rollback()
        (answer,) = answers
        assert isinstance(answer, RunStoreError), answer
        assert reader.get("r") == before
        assert reader.revision() == 2
        assert [c.revision for c in reader.changes(0)] == [2]
        assert writer.heartbeat("r", OWNER, 6) == Updated()
        assert reader.changes(2)[0].revision == 3
        reader.check_invariants()


def _attempt(call: Callable[[], Any]) -> Any:
    try:
        return call()
    except RunStoreError as error:
        return error


def test_a_numberer_killed_mid_numbering_numbers_nothing(url: str) -> None:
    """A session numbers the log and is killed before it commits: a reader
    waiting on the counter then numbers the same entries, from the same
    revision, and no revision the killed session computed was ever seen."""
    with (
        postgres.open(url, clock=ManualClock(0)) as writer,
        postgres.open(url, clock=ManualClock(0)) as reader,
    ):
        writer.create("a", "{}")
        writer.create("b", "{}")
        numberer = psycopg.connect(url)
        try:
            assert numberer.execute("SELECT flows_number_changes()").fetchone() == (2,)
            pid = reader._tm.live().info.backend_pid
            answers: list[Any] = []
            thread = threading.Thread(target=lambda: answers.append(reader.revision()))
            thread.start()
            _wait_for_lock(url, pid)
            _terminate(url, numberer.info.backend_pid)
            thread.join(60)
        finally:
            with contextlib.suppress(psycopg.Error):
                numberer.close()
        assert answers == [2]
        assert [(c.run_id, c.revision) for c in reader.changes(0)] == [("a", 1), ("b", 2)]
        reader.check_invariants()


@pytest.mark.slow
def test_unnumbered_writes_survive_a_crash_and_are_numbered_after_it() -> None:
    """Entries a reader has not numbered are committed rows like any other:
    after an immediate shutdown (no checkpoint) and a restart, the next read
    numbers them above every revision seen before the crash."""
    if os.environ.get(servers.URL_VARIABLE):
        pytest.skip("runs its own cluster; RUNSTORE_TEST_POSTGRES points at a server")
    try:
        cluster = servers.Cluster(fsync=True)
    except servers.Unavailable as why:
        if os.environ.get("CI") == "true":
            pytest.fail(f"PostgreSQL unavailable under CI=true: {why}")
        pytest.skip(f"PostgreSQL unavailable: {why}")
    try:
        with postgres.open(cluster.url, clock=ManualClock(0)) as store:
            store.create("a", "{}")
            seen = store.revision()
            assert seen == 1
            store.create("b", "{}")
            assert store.claim_and_own("b", PENDING, OWNER, 0) == Activated()
            store.heartbeat_many(OWNER, ["b"], 3)
        cluster.crash()
        cluster.restart()
        with postgres.open(cluster.url, clock=ManualClock(0)) as store:
            assert store.revision() == 4
            assert [(c.run_id, c.revision) for c in store.changes(seen)] == [("b", 4)]
            store.check_invariants()
    finally:
        cluster.stop()


# -- migration 2010 and a fleet of older processes --------------------------------------

import urllib.parse  # noqa: E402

from runstore._sql import _migrations as shared_migrations  # noqa: E402
from runstore.postgres import _migrations, _queries  # noqa: E402


@pytest.fixture
def fresh_url() -> str:
    """A database URL whose store schema (``feed``) does not exist yet."""
    parts = urllib.parse.urlsplit(_postgres.database_url())
    query = [*urllib.parse.parse_qsl(parts.query), ("schema", "feed")]
    return urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(query)))


class _OlderQueries:
    """The feed's statements of a release before migration 2010: the counter
    and the numbered feed read as they stand, compaction without the lock."""

    REVISION = "SELECT revision FROM flows_run_source WHERE singleton = 1"
    CHANGES = (
        "SELECT run_id, revision, deleted FROM flows_run_changes WHERE revision > $1::bigint "
        "ORDER BY revision"
    )
    COMPACT_CANDIDATES = """
SELECT run_id, revision FROM flows_run_changes
WHERE deleted = 1 AND revision <= $1::bigint ORDER BY revision LIMIT $2::bigint
"""
    NUMBER_CHANGES = None

    def __getattr__(self, name: str) -> Any:
        return getattr(_queries, name)


#: How many migrations the release before 2010 knew (later ones came after it too).
_BEFORE_2010 = _postgres.migrations_before(2010)


def _older_store(url: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A store as the release before 2010 opens it: it migrates to 2009 only
    and reads the feed with 2009's statements."""
    store = _postgres.open_older(url, _BEFORE_2010, monkeypatch, ManualClock(0))
    store._queries = _OlderQueries()
    return store


def _recorded(url: str) -> list[int]:
    """The migrations the ``feed`` schema records (``url`` names it)."""
    parts = urllib.parse.urlsplit(url)
    query = [(k, v) for k, v in urllib.parse.parse_qsl(parts.query) if k != "schema"]
    base = urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(query)))
    with psycopg.connect(base, autocommit=True) as raw:
        return [row[0] for row in raw.execute("SELECT id FROM feed.flows_migrations")]


def test_a_cursor_taken_before_the_migration_stays_valid(
    fresh_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = fresh_url
    """Entries numbered before 2010 keep their revisions: a reader's cursor
    from then reads exactly the changes after it."""
    older = _older_store(url, monkeypatch)
    try:
        assert 2010 not in _recorded(url)
        older.create("a", "{}")
        older.create("b", "{}")
        assert older.claim_and_own("a", PENDING, OWNER, 0) == Activated()
        cursor = older.revision()
        before = older.changes(0)
        assert cursor == 3
    finally:
        older.close()
    with postgres.open(url, clock=ManualClock(0)) as store:
        assert 2010 in _recorded(url)
        assert store.revision() == cursor
        assert store.changes(0) == before
        assert store.changes(cursor) == []
        assert store.heartbeat("a", OWNER, 5) == Updated()
        assert [(c.run_id, c.revision) for c in store.changes(cursor)] == [("a", cursor + 1)]
        store.check_invariants()


def test_an_older_process_keeps_writing_and_its_feed_lags(
    fresh_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The compatibility policy (docs/guides/fleet.md): a store an older
    release opened before the migration keeps working; its writes are
    logged and numbered by the new release's reads, and its own reads of the
    feed see the numbered feed, which lags until something numbers it. An
    older release opening the migrated schema is refused."""
    url = fresh_url
    older = _older_store(url, monkeypatch)
    try:
        older.create("a", "{}")
        assert older.claim_and_own("a", PENDING, OWNER, 0) == Activated()
        with postgres.open(url, clock=ManualClock(0)) as store:  # migrates to 2010
            assert older.heartbeat("a", OWNER, 5) == Updated()
            assert older.heartbeat_many(OWNER, ["a"], 6) == {"a": Updated()}
            older.create("gone", "{}")
            assert older.request_cancel("gone", 1).__class__.__name__ == "CancelRequested"
            assert older.revision() == 2  # the numbered feed: not yet numbered
            assert older.changes(2) == []
            assert store.revision() == 6  # the new release numbers every write
            assert older.revision() == 6
            assert [c.run_id for c in older.changes(2)] == ["a", "gone"]
            store.check_invariants()
            # An older compaction still runs beside the new numbering.
            assert older.compact_changes(older.revision()) == 0
        with monkeypatch.context() as patch:
            patch.setattr(_migrations, "MIGRATIONS", _migrations.MIGRATIONS[:_BEFORE_2010])
            patch.setattr(
                shared_migrations, "_KNOWN", dict(shared_migrations.HISTORY[:_BEFORE_2010])
            )
            with pytest.raises(RunStoreError) as caught:
                postgres.open(url, clock=ManualClock(0))
        assert caught.value.cause["unknown_migrations"] == [
            m.id for m in _migrations.MIGRATIONS[_BEFORE_2010:]
        ]
    finally:
        older.close()
