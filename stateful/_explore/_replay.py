"""Applying a walked graph to a store, and every program up to depth k.

``replay`` takes the graph ``walk`` built over the reference model and applies
every transition of it to the store under test, from a state equal to the
transition's source: a fresh store from the factory with the scope's setup and
the shortest path to the source replayed (the factory may be anyone's; a
fresh store is the one restore every store allows). Nodes are taken level by
level, so the first failure found is on a shortest program. After each
transition the store's answer and state are compared with the model's, and
the invariants are checked on the store's step, in the order the machines
check them (``RunStoreComparison``): the outcome kind and admission, the
store's state invariants, its transition invariants, the answer, the whole
state. A transition that left both sides unchanged leaves the store where it
was (the next transition starts from it); any other is followed by a rebuild.

Where we own the store (a ``SqliteRunStore`` or ``PostgresRunStore`` of this
library over ``SqlConsensus`` or ``LocalConsensus``, or a subclass of them that
keeps no member of its own: a planted bug of the zoo), a rebuild is a restore
instead: the store's data is copied once per source state (when the transition
that first reaches the state is applied, or at the state's first replay) and
put back before each transition that needs it. On SQLite the copy is SQLite's
backup API, into and out of the store's own connection; on PostgreSQL it is
every table of the store's schema copied on the server into stash tables
beside it (each row tagged with its state's number) and every sequence's
position, put back in one transaction of the store's own connection that
empties and refills the tables from the stash with triggers and foreign keys
off, as restoring a dump does (a copy and a restore are one round trip
each). The store clock is set to the state's reading, and ``LocalConsensus``'s
in-memory leases are put back as they were at the copy. The store's other
members hold no data (its transaction manager keeps the connection and the
strategy), so the restored store answers as the replayed one would; a test
compares the two walks. Any other store or strategy (anyone's factory) is
rebuilt by replay. Moves the reference says change nothing (reads, refused
writes) are judged as leaving the store in the state read before them, and
whether they did is seen once per run of them, before the node's next write
and at its end: on our stores by a change token (``Sut.probe``: SQLite's count
of changed rows; on PostgreSQL a counter that triggers on every table move),
else by reading the state; when it moved, the source is put back and the moves
applied again one at a time, read after each, to name the first. Nor is the
state a node's copy put back again shows read again (it was read when the copy
was first put back or made).

A step whose store state before, answer and state after are exactly the
reference's (``exactly``: equal, and of the same types at every level) is not
checked again for the state and transition invariants: the walk over the
reference checked those very values (``judge``).

On a store just restored or rebuilt the node's reads are applied before its
writes, and every move that changes the state is read back at once
(``read_back``: ``revision()``, ``changes()``, ``list_runs()``, ``get``),
whether or not the state it reached is new to the walk: a read that lags one
path into a state is seen though the walk follows one path per state. Such a
finding is one move longer than its level; it becomes the divergence once the
level is done with no shorter one (``Replayer.later``).

``programs`` runs every program of up to ``k`` moves against the store
without deduplication, a fresh store for each, since a store may carry state
the model does not (a cache, a connection's state, a strategy's own memory).
"""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from runstore._clock import ManualClock
from runstore._values import StoreState
from runstore.model import ModelRunStore
from runstore.model._state import ModelState

from .._base._capabilities import Capabilities
from .._base._compare import (
    OutcomeMismatch,
    StateMismatch,
    describe_difference,
    public_state,
    without_leases,
)
from .._base._observe import ClockSet, LogEntry, Performed
from .._base._steps import Call, Step, call, perform
from .._checks._invariants import check_state, check_transition
from .._checks._malformed import SKEW_ALLOWANCE_MS
from .._machines._run_store import _check_outcome_kind, _reading_ahead, _same_outcome
from .._targets._blocking import BlockingRunStore, blocking_factory
from ._scope import MISSING_RUN, Move, Scope, Tick, at_depth, moves, setup_calls, start_ms
from ._walk import Dial, Node, Walk, apply

StoreFactory = Callable[[ManualClock, Path], Any]


@attrs.frozen
class Divergence:
    """A check that failed on the store: the program (setup excluded) as moves with the
    reference's answers, the failing check's class name and message, and the state the
    reference holds after it (as the store's capabilities let it be read)."""

    program: tuple[tuple[Move, Any], ...]
    check: str
    message: str
    expected_state: StoreState | None


@attrs.define
class Progress:
    """How far a replay got: transitions applied, fresh stores built, the deepest level
    whose every transition was applied, whether it was done, and the divergence, if any."""

    transitions: int = 0
    rebuilds: int = 0
    restores: int = 0
    depth: int = 0
    done: bool = False
    programs: int = 0
    divergence: Divergence | None = None
    #: A divergence one move longer than the level being walked (a read after a write):
    #: reported once the level is done with no shorter one found.
    later: Divergence | None = None


class Sut:
    """The store under test, rebuilt on demand in its own folder (or restored from a copy of
    a source state where we own the store and ``restore`` allows it)."""

    def __init__(
        self,
        factory: StoreFactory,
        capabilities: Capabilities,
        scope: Scope,
        *,
        restore: bool = True,
    ) -> None:
        # An async store factory's stores are driven through the synchronous stand-in.
        self.factory = blocking_factory(factory)
        self.restore_allowed = restore
        #: Each source state's copy, by node: compressed database, clock, strategy leases.
        self.snapshots: dict[int, tuple[Any, int, Any]] = {}
        #: The store ``owned`` last judged, its members' counts and the verdict.
        self.owned_as: tuple[Any, tuple[int, int], str | None] | None = None
        #: The PostgreSQL store whose stash tables exist, and where they are.
        self.stash: tuple[Any, _PostgresStash] | None = None
        #: The SQLite copy last restored, opened in memory (its node and connection): a
        #: node's moves restore its copy again and again, decompressed and opened once.
        self.opened: tuple[int, sqlite3.Connection] | None = None
        self.capabilities = capabilities
        self.scope = scope
        self.folder = Path(tempfile.mkdtemp(prefix="runstore-explore-"))
        self.count = 0
        self.store: Any = None
        self.clock = ManualClock(start_ms())
        self.reads = (*scope.run_ids, MISSING_RUN)

    def close(self) -> None:
        """Close the current store and remove the folder."""
        self._close_opened()
        self._drop()
        shutil.rmtree(self.folder, ignore_errors=True)

    def _drop(self) -> None:
        if self.store is not None:
            store, self.store = self.store, None
            try:
                store.close()
            finally:
                path = self.folder / f"s{self.count}.db"
                for suffix in ("", "-wal", "-shm", "-journal"):
                    Path(f"{path}{suffix}").unlink(missing_ok=True)

    def build(self, path: list[tuple[Move, Any]]) -> None:
        """A fresh store with the setup and ``path`` replayed (answers are not judged again:
        each was judged when its transition was applied)."""
        self._drop()
        self.count += 1
        self.clock = ManualClock(start_ms())
        self.store = self.factory(self.clock, self.folder / f"s{self.count}.db")
        for op in setup_calls(self.scope):
            perform(self.store, op)
        for move, _ in path:
            self.move(move)

    def owned(self) -> str | None:
        """Which of our stores the current one is, when it can be copied and restored:
        ``"sqlite"``, ``"postgresql"``, or None (rebuilt by replay)."""
        if not self.restore_allowed or self.store is None:
            return None
        store = self.store
        consensus = getattr(store, "_consensus", None)
        members = (len(getattr(store, "__dict__", ())), len(getattr(consensus, "__dict__", ())))
        cached = self.owned_as
        if cached is not None and cached[0] is store and cached[1] == members:
            return cached[2]
        kind = self._owned()
        self.owned_as = (store, members, kind)
        return kind

    def _host(self) -> Any:
        """The SQL store copies are made from and put back into: the store itself, or the
        first connection's SQL store behind ``runstore.aopen``'s async store (behind its
        stand-in; the copy goes through that connection, off the loop's thread, and every
        connection reads the same database)."""
        store = self.store
        if isinstance(store, BlockingRunStore) and store.sql_backed:
            return store.sync_stores[0]
        return store

    def _set_clock(self, clock: ManualClock) -> None:
        """Give the store (every connection's SQL store, behind an async one) ``clock``."""
        store = self.store
        hosts = store.sync_stores if isinstance(store, BlockingRunStore) else (store,)
        for host in hosts:
            host._clock = clock

    def _owned(self) -> str | None:
        from runstore.consensus import LocalConsensus, SqlConsensus
        from runstore.postgres import PostgresRunStore
        from runstore.sqlite import SqliteRunStore

        if isinstance(self.store, BlockingRunStore):
            # ``runstore.aopen``'s store holds its connections and nothing else; a
            # subclass with a member of its own (a cache, say) is replayed.
            held = vars(self.store.async_store) if self.store.sql_backed else None
            if held is None or not set(held) <= _ASYNC_FIELDS:
                return None
        store = self._host()
        kind = None
        if isinstance(store, SqliteRunStore):
            kind, fields = "sqlite", _SQLITE_FIELDS
        elif isinstance(store, PostgresRunStore):
            kind, fields = "postgresql", _POSTGRES_FIELDS
        # A subclass (a planted bug, say) is restored only while it holds no data of its own:
        # no member beyond the ones the restore puts back or that hold none.
        if kind is None or store.read_only or not set(vars(store)) <= fields:
            return None
        consensus = store.consensus
        if isinstance(consensus, LocalConsensus):
            return kind if set(vars(consensus)) <= {"_leases", "_lock"} else None
        if isinstance(consensus, SqlConsensus):
            return kind if not vars(consensus) else None
        return None

    def snapshot(self, index: int) -> None:
        """Copy the current store (as node ``index``'s state) for later restores."""
        kind = self.owned()
        if kind is None:
            return
        if self.opened is not None and self.opened[0] == index:
            self._close_opened()
        data: Any
        host = self._host()
        if kind == "sqlite":
            data = _sqlite_copy(host)
        else:
            if self.stash is None or self.stash[0] is not host:
                self.stash = (host, _postgres_stash(host))
            data = _postgres_copy(host, self.stash[1], index)
        leases = getattr(host.consensus, "_leases", None)
        kept = None if leases is None else dict(leases)
        self.snapshots[index] = (data, self.clock.now_ms(), kept)

    def restore(self, index: int) -> bool:
        """Put node ``index``'s copy back into the current store; False when there is none."""
        taken = self.snapshots.get(index)
        kind = self.owned()
        if taken is None or kind is None:
            return False
        data, ms, leases = taken
        host = self._host()
        if kind == "sqlite":
            if self.opened is None or self.opened[0] != index:
                self._close_opened()
                self.opened = (index, _sqlite_open(data))
            self.opened[1].backup(host._tm.connection)
        else:
            assert self.stash is not None
            assert self.stash[0] is host
            _postgres_restore(host, self.stash[1], index, data)
        self.clock = ManualClock(ms)
        self._set_clock(self.clock)
        if leases is not None:
            consensus = host.consensus
            with consensus._lock:
                consensus._leases = dict(leases)
        return True

    def rewind(self, ms: int) -> None:
        """Set the clock of our store back to ``ms`` after a clock move that called nothing on
        it (a new clock, as ``restore`` sets one: a ``ManualClock`` never moves back)."""
        self.clock = ManualClock(ms)
        self._set_clock(self.clock)

    def _close_opened(self) -> None:
        if self.opened is not None:
            opened, self.opened = self.opened[1], None
            opened.close()

    def forget(self, index: int) -> None:
        """Drop node ``index``'s copy (its transitions were all applied)."""
        if self.opened is not None and self.opened[0] == index:
            self._close_opened()
        if self.snapshots.pop(index, None) is not None and self.stash is not None:
            self.stash[1].dropped.append(index)

    def probe(self) -> Any:
        """A token that stays equal while the store's data does (None: no such token, the
        store's state is read instead). Only for our own stores, whose ``state()`` is a
        function of their database and their strategy's leases: on SQLite the connection's
        count of changed rows (every INSERT, UPDATE and DELETE counts, triggers' too; one
        rolled back counts as well, which only costs a read), on PostgreSQL a counter that
        triggers the walk puts on every table of the store move (``_postgres_changes``), and
        with ``LocalConsensus`` its in-memory leases
        as well."""
        kind = self.owned()
        if kind is None:
            return None
        store = self._host()
        if kind == "sqlite":
            token: Any = store._tm.connection.total_changes
        else:
            if self.stash is None or self.stash[0] is not store:
                self.stash = (store, _postgres_stash(store))
            token = _postgres_changes(store, self.stash[1])
        leases = getattr(store.consensus, "_leases", None)
        return token if leases is None else (token, dict(leases))

    def move(self, move: Move) -> Any:
        """Apply one move to the store: its answer (None for a clock move)."""
        if isinstance(move, Tick):
            self.clock.set(move.ms)
            return None
        return perform(self.store, move)

    def view(self, target: Any) -> StoreState:
        """``target``'s state as the capabilities let it be read."""
        caps = self.capabilities
        state = target.state() if caps.whole_state else public_state(target, self.reads)
        return state if caps.lease_introspection else without_leases(state)

    def expected(self, state: ModelState) -> StoreState:
        """The reference's state ``state`` as the capabilities let it be read."""
        model = ModelRunStore(clock=Dial(0))
        model._state = state
        return self.view(model)


#: The members of our stores: the clock and the strategy (put back or kept), the transaction
#: manager (the connection, the retry policy, fault seams: no data), flags and names.
_SQLITE_FIELDS = frozenset({"_clock", "_closed", "_consensus", "_fused", "_path", "_tm"})
#: ``_pg_tm`` is the PostgreSQL transaction manager again, typed for its notifications
#: (whose spacing state holds no run data).
_POSTGRES_FIELDS = _SQLITE_FIELDS - {"_path"} | {"_url", "_schema", "_pg_tm"}
#: The members of ``runstore.aopen``'s ``AsyncRunStore``: its lanes (each a connection's SQL
#: store and its thread) and its first SQL store; none holds data of its own.
_ASYNC_FIELDS = frozenset({"_lanes", "_first"})


def _sqlite_copy(store: Any) -> bytes:
    """A SQLite store's database as a compressed image (SQLite's backup API)."""
    copy = sqlite3.connect(":memory:")
    try:
        store._tm.connection.backup(copy)
        image = bytearray(copy.serialize())
    finally:
        copy.close()
    # A file store's header says WAL (format bytes 18 and 19 are 2), which an image
    # deserialized in memory cannot open; the copy is kept as a rollback-journal image
    # (1), and backing it up into the store keeps the store's own journal mode.
    image[18:20] = b"\x01\x01"
    return zlib.compress(bytes(image), 1)


def _sqlite_open(data: bytes) -> sqlite3.Connection:
    """A copy made by ``_sqlite_copy`` opened in memory, to back up into the store's own
    connection (``Sut.restore``): the backup writes every page of the copy over the store's,
    and the copy itself is never written."""
    copy = sqlite3.connect(":memory:", check_same_thread=False)
    try:
        copy.deserialize(zlib.decompress(data))
    except BaseException:
        copy.close()
        raise
    return copy


def _sqlite_restore(store: Any, data: bytes) -> None:
    """Back a copy made by ``_sqlite_copy`` up into the store's own connection."""
    copy = _sqlite_open(data)
    try:
        copy.backup(store._tm.connection)
    finally:
        copy.close()


#: The schema that keeps the copies of a PostgreSQL store's tables, one stash table per
#: table with the copy's number first (``snap``), beside the store's own schema.
_STASH = "runstore_explore_stash"
#: The name of the stash's change counter (a sequence), of the trigger function that
#: moves it and of the triggers that call it.
_COUNTER = "runstore_explore_changes"


@attrs.define
class _PostgresStash:
    """Where a PostgreSQL store's copies live: on the server, in stash tables of the store's
    database, so a copy and a restore are one round trip each (one script of statements).
    ``tables`` lists each table's quoted name, its stash's, the columns an insert sets
    (generated ones left out) and whether the insert overrides an identity column;
    ``sequences`` each sequence's quoted name; ``counter`` the quoted name of the change
    counter (``_postgres_changes``); ``dropped`` copies to delete with the next copy (their
    states' transitions were all applied)."""

    tables: list[tuple[str, str, str, bool]]
    sequences: list[str]
    counter: str
    dropped: list[int] = attrs.field(factory=list)


def _postgres_stash(store: Any) -> _PostgresStash:
    """Create the stash tables for a PostgreSQL store's schema (once per store)."""

    def body(tx: Any) -> _PostgresStash:
        cursor = tx.connection.cursor()
        schema = store.schema
        stash = _quote(f"{_STASH}_{schema}")
        names = [
            row[0]
            for row in cursor.execute(
                "SELECT tablename FROM pg_catalog.pg_tables WHERE schemaname = $1"
                " ORDER BY tablename",
                (schema,),
            ).fetchall()
        ]
        cursor.execute(f"CREATE SCHEMA IF NOT EXISTS {stash}", prepare=False)
        tables = []
        for table in names:
            columns = cursor.execute(
                "SELECT a.attname, a.attidentity = 'a', a.attgenerated <> ''"
                " FROM pg_catalog.pg_attribute a"
                " JOIN pg_catalog.pg_class c ON c.oid = a.attrelid"
                " JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace"
                " WHERE n.nspname = $1 AND c.relname = $2 AND a.attnum > 0"
                " AND NOT a.attisdropped ORDER BY a.attnum",
                (schema, table),
            ).fetchall()
            settable = ", ".join(_quote(name) for name, _, generated in columns if not generated)
            always = any(identity for _, identity, _ in columns)
            name, kept = f"{_quote(schema)}.{_quote(table)}", f"{stash}.{_quote(table)}"
            cursor.execute(
                f"CREATE TABLE {kept} AS SELECT 0::bigint AS snap, {settable} FROM {name}"
                f" WITH NO DATA; CREATE INDEX ON {kept} (snap)",
                prepare=False,
            )
            tables.append((name, kept, settable, always))
        sequences = [
            f"{_quote(schema)}.{_quote(row[0])}"
            for row in cursor.execute(
                "SELECT sequencename FROM pg_catalog.pg_sequences WHERE schemaname = $1"
                " ORDER BY sequencename",
                (schema,),
            ).fetchall()
        ]
        # The change counter: every row written to a table of the store (or a table
        # emptied) moves a sequence of the stash's own, in a trigger, even when the
        # transaction then rolls back (which only costs a read).
        counter = f"{stash}.{_quote(_COUNTER)}"
        literal = counter.replace("'", "''")
        script = [
            f"CREATE SEQUENCE {counter}",
            f"CREATE FUNCTION {stash}.{_quote(_COUNTER)}() RETURNS trigger LANGUAGE plpgsql"
            f" AS $body$ BEGIN PERFORM pg_catalog.nextval('{literal}'); RETURN NULL; END $body$",
        ]
        for name, _, _, _ in tables:
            script.append(
                f"CREATE TRIGGER {_quote(_COUNTER)} AFTER INSERT OR UPDATE OR DELETE ON {name}"
                f" FOR EACH ROW EXECUTE FUNCTION {stash}.{_quote(_COUNTER)}()"
            )
            script.append(
                f"CREATE TRIGGER {_quote(_COUNTER + '_truncate')} AFTER TRUNCATE ON {name}"
                f" FOR EACH STATEMENT EXECUTE FUNCTION {stash}.{_quote(_COUNTER)}()"
            )
        cursor.execute("; ".join(script), prepare=False)
        return _PostgresStash(tables, sequences, counter)

    made: _PostgresStash = store._write("copy", body)
    return made


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _postgres_copy(store: Any, stash: _PostgresStash, number: int) -> tuple[Any, ...]:
    """Copy every table of a PostgreSQL store's schema into its stash as copy ``number``
    (deleting the copies dropped since), in one transaction of the store's own connection
    and one round trip; the sequences' positions are read in the same transaction."""
    script = [
        f"DELETE FROM {kept} WHERE snap = ANY('{{{','.join(map(str, stash.dropped))}}}')"
        for _, kept, _, _ in stash.tables
        if stash.dropped
    ]
    stash.dropped.clear()
    script += [
        f"INSERT INTO {kept} SELECT {number}, {settable} FROM {name}"
        for name, kept, settable, _ in stash.tables
    ]

    def body(tx: Any) -> tuple[Any, ...]:
        cursor = tx.connection.cursor()
        cursor.execute("; ".join(script), prepare=False)
        if not stash.sequences:
            return ()
        reads = " UNION ALL ".join(
            f"SELECT {i}, last_value, is_called FROM {seq}" for i, seq in enumerate(stash.sequences)
        )
        return tuple(cursor.execute(reads + " ORDER BY 1", prepare=False).fetchall())

    positions: tuple[Any, ...] = store._write("copy", body)
    return positions


def _postgres_restore(store: Any, stash: _PostgresStash, number: int, positions: Any) -> None:
    """Put copy ``number`` back in one transaction and one round trip: every table emptied
    and refilled from its stash with triggers and foreign keys off (as a restore of a dump
    does), every sequence set back."""
    script = ["SET LOCAL session_replication_role = replica"]
    for name, kept, settable, always in stash.tables:
        override = " OVERRIDING SYSTEM VALUE" if always else ""
        script.append(f"DELETE FROM {name}")
        script.append(
            f"INSERT INTO {name} ({settable}){override}"
            f" SELECT {settable} FROM {kept} WHERE snap = {number}"
        )
    for i, value, called in positions:
        name = stash.sequences[i].replace("'", "''")
        script.append(
            f"SELECT pg_catalog.setval('{name}', {int(value)}, {'true' if called else 'false'})"
        )
    # The triggers are off, so the restore moves the change counter itself.
    script.append(f"SELECT pg_catalog.nextval('{stash.counter.replace(chr(39), chr(39) * 2)}')")

    def body(tx: Any) -> None:
        tx.connection.cursor().execute("; ".join(script), prepare=False)

    store._write("restore", body)


def _postgres_changes(store: Any, stash: _PostgresStash) -> Any:
    """The change counter of a PostgreSQL store's stash: it moves whenever a row of a table
    of the store is written (inserted, updated or deleted, by the store or a trigger of its
    own, committed or not), a table is emptied, or a copy is put back; equal readings, the
    same data."""
    query = f"SELECT last_value, is_called FROM {stash.counter}"
    return store._tm.read("probe", lambda c: c.execute(query, prepare=True).fetchone())


def judge(
    sut: Sut,
    move: Call,
    model_out: Any,
    store_out: Any,
    before: StoreState,
    after: StoreState,
    expected: StoreState,
    clock_ms: int,
    checked: StoreState | None = None,
    reference_before: StoreState | None = None,
) -> tuple[str, str] | None:
    """The machines' checks of one step, in their order: None when all hold, else the failing
    check's class name and message. ``checked`` is a state whose invariants held: when
    ``after`` is that very object, they are not checked again.

    ``reference_before`` is given only where the walk over the reference has already checked
    this very step (the same move from the same state, ``Walker.expand``: ``check_state`` on
    the state it reached, ``check_transition`` on the step) and the caller has shown the
    store's ``before`` ``exactly`` equal to it, with the whole state and the leases read.
    Then, when the store's answer is ``exactly`` the reference's and its ``after`` exactly
    ``expected`` (the reference's state after the step), the state and transition invariants
    are not checked again: they are functions of the states and the step, which are those
    the reference passed, so checking them again proves nothing new; and the answer and the
    state agree. The outcome kind and admission (which the walk does not check on the
    reference) are still checked, first, as always. Any other step is checked in full."""
    caps = sut.capabilities
    leases = caps.lease_introspection and caps.whole_state
    model_step, store_step = Step(move, model_out), Step(move, store_out)
    ahead = _reading_ahead(move, clock_ms)
    admission = False if ahead is not None and ahead > SKEW_ALLOWANCE_MS else None
    known = (
        reference_before is not None
        and leases
        and exactly(store_out, model_out)
        and ((after is before and expected is reference_before) or exactly(after, expected))
    )
    try:
        _check_outcome_kind(model_step, store_step, admission, at_bound=ahead == SKEW_ALLOWANCE_MS)
        if known:
            return None
        if after is not checked:
            check_state(after, leases=leases)
        check_transition(before, after, store_step, leases=leases)
        if not _same_outcome(model_out, store_out):
            raise OutcomeMismatch(
                f"{move.describe()}: reference answered {model_out!r}, store answered {store_out!r}"
            )
        if expected != after:
            raise StateMismatch(
                f"after {move.describe()}:\n" + describe_difference(expected, after)
            )
    except AssertionError as error:
        return type(error).__name__, str(error)
    return None


#: The value types ``exactly`` compares with ``==`` once their types are the same.
_PLAIN: frozenset[type] = frozenset({str, int, bool, float, bytes, type(None)})
#: The field names of each attrs class ``exactly`` met.
_FIELDS: dict[type, tuple[str, ...]] = {}


def exactly(a: Any, b: Any) -> bool:
    """Whether ``a`` and ``b`` are equal with the same type at every level: tuples, lists,
    dicts (their keys in the same order), frozensets and attrs instances compared member by
    member, and only ``str``, ``int``, ``bool``, ``float``, ``bytes`` and None as leaves
    (any other type is not exactly equal to anything but itself). Stricter than ``==``:
    ``True == 1`` and ``1 == 1.0`` hold, but the invariants tell such values apart."""
    if a is b:
        return True
    kind = type(a)
    if kind is not type(b):
        return False
    if kind in _PLAIN:
        return bool(a == b)
    if kind is tuple or kind is list:
        return len(a) == len(b) and all(map(exactly, a, b))
    if kind is dict:
        return (
            len(a) == len(b)
            and all(map(exactly, a, b))
            and all(exactly(a[key], b[key]) for key in a)
        )
    names = _FIELDS.get(kind)
    if names is None:
        if not attrs.has(kind):
            return False
        names = _FIELDS.setdefault(kind, tuple(field.name for field in attrs.fields(kind)))
    return all(exactly(getattr(a, name), getattr(b, name)) for name in names)


class Replayer:
    """Applies the transitions of a walk's nodes to the store under test, a node at a time
    (``node(index)``), and counts what it did (``progress``)."""

    def __init__(self, graph: Walk, sut: Sut) -> None:
        self.graph = graph
        self.sut = sut
        self.model = ModelRunStore(clock=Dial(start_ms()))
        self.progress = Progress()
        #: The level whose walk found ``progress.later`` (None: none found).
        self.later_level: int | None = None

    def node(
        self,
        index: int,
        known: list[tuple[Move, Any, ModelState, StoreState | None]] | None = None,
        born: list[int] | None = None,
    ) -> Divergence | None:
        """Apply every transition from node ``index``; the first divergence, or None. ``known``
        is the walker's own expansion of the node (``Walker.last``), reused when given, and
        ``born`` the node each of its moves first reached (``Walker.born``; -1: none)."""
        dial = self.model._clock
        assert isinstance(dial, Dial)
        node = self.graph.nodes[index]
        try:
            found = _from_node(
                self.graph, index, node, self.sut, self.model, dial, self.progress, known, born
            )
        finally:
            self.sut.forget(index)
        self.progress.depth = max(self.progress.depth, node.depth + 1)
        if self.progress.later is not None and self.later_level is None:
            self.later_level = node.depth
        if found is not None:
            self.progress.divergence = found
        return found

    def later(self, depth: int) -> bool:
        """Whether a divergence found by a read after a write (one move longer than the level
        it was found in) is now a shortest one, the walk having reached a node of ``depth``:
        then it becomes the divergence and the walk stops."""
        if self.later_level is None or depth <= self.later_level:
            return False
        self.progress.divergence = self.progress.later
        return True


def _from_node(
    graph: Walk,
    index: int,
    node: Node,
    sut: Sut,
    model: ModelRunStore,
    dial: Dial,
    progress: Progress,
    known: list[tuple[Move, Any, ModelState, StoreState | None]] | None = None,
    born: list[int] | None = None,
) -> Divergence | None:
    path = graph.path(index)
    deepest = graph.scope.depth
    caps = sut.capabilities
    # The walker's views are whole states with leases: reusable when the store's are too.
    reuse_views = caps.whole_state and caps.lease_introspection
    dirty = True
    before: StoreState | None = None
    #: The last state whose invariants held (not checked again while the store shows it).
    checked: StoreState | None = None
    #: Our own store's change token (``Sut.probe``) when it showed ``before`` (None: not
    #: taken since the store was last put back or written).
    token: Any = None
    #: Whether the store can be copied (ours): None until a store is built or restored.
    copyable: bool | None = None
    #: The moves the reference says change nothing, applied since the store's state was
    #: last read: judged as leaving it at ``before``, and seen to have done so once, before
    #: the node's next write and at its end (``_settle``).
    unread: list[tuple[Call, Any]] = []
    unchanged = sut.expected(node.state)
    checked_itself = False
    #: ``unchanged`` while the store's ``before`` is exactly it (None: not shown so).
    reference: StoreState | None = None
    #: On our store, its state as read after the node's copy was first put back (or made).
    restored: StoreState | None = None
    listed = (
        [
            (move, None, None, None)
            for move in moves(at_depth(graph.scope, node.depth), node.state, node.clock_ms)
        ]
        if known is None
        else known
    )
    # The reads first, on the store just restored or rebuilt (a read lagging the source's
    # last write shows before any other write of the node can put it right), then the rest.
    order = [i for i, entry in enumerate(listed) if _is_read(entry[0])]
    order += [i for i, entry in enumerate(listed) if not _is_read(entry[0])]
    for position in order:
        move, known_out, known_state, known_view = listed[position]
        child = -1 if born is None else born[position]
        # The state this move first reached is expanded later: copy it now, not by replay.
        keep = child >= 0 and graph.nodes[child].depth < deepest
        if isinstance(move, Tick) and not (keep and copyable is not False):
            # A clock move calls nothing on the store, so it checks nothing here: it is
            # applied on the way to its target (the target's path), where its target's
            # transitions are. Where the store is ours, its target is copied (below).
            progress.transitions += 1
            continue
        if dirty:
            token = None
            put_back = sut.restore(index)
            if put_back:
                progress.restores += 1
            else:
                sut.build(path)
                progress.rebuilds += 1
                sut.snapshot(index)
            copyable = sut.owned() is not None
            if put_back and copyable and restored is not None:
                # The node's copy put back again: our store's state is a function of its data
                # and its strategy's leases, which the restore put back as they were when the
                # copy was read (``restored``), so it is not read again.
                before = restored
            else:
                before = sut.view(sut.store)
                restored = before if copyable else None
                # The walker checked every move of this node on the reference (``known``): a
                # step from a state exactly the reference's need not be checked again
                # (``judge``).
                reference = (
                    unchanged
                    if known is not None and reuse_views and exactly(before, unchanged)
                    else None
                )
            dirty = False
            if not checked_itself:
                checked_itself = True
                broken = _self_check(sut.store)
                if broken is not None:
                    return Divergence(tuple(path), broken[0], broken[1], unchanged)
        assert before is not None
        if known_state is None:
            model_out, after_state, _ = apply(model, dial, node, move)
        else:
            model_out, after_state = known_out, known_state
        progress.transitions += 1
        if isinstance(move, Tick):
            # Ours: copy the target, then set the clock back (the store was not called
            # in between, so it is in the source state again).
            sut.move(move)
            sut.snapshot(child)
            sut.rewind(node.clock_ms)
            continue
        same = after_state is node.state
        if not same and unread:
            found = _settle(
                sut, path, unread, before, unchanged, node.clock_ms, progress, token, index
            )
            if found is not None:
                return found
        # A move the reference says changes nothing is judged as leaving the store at
        # ``before``; whether it did is seen once, before the node's next write and at its
        # end: by the change token on our own store (``Sut.probe``), else by a read.
        deferred = same
        if deferred and copyable and token is None:
            token = sut.probe()
        store_out = sut.move(move)
        if deferred:
            after = before
            unread.append((move, model_out))
        else:
            # A write the reference says changes the state is read at once.
            after = sut.view(sut.store)
            token = None
        if same:
            expected = unchanged
        elif reuse_views and known_view is not None:
            expected = known_view
        else:
            expected = sut.expected(after_state)
        verdict = judge(
            sut,
            move,
            model_out,
            store_out,
            before,
            after,
            expected,
            node.clock_ms,
            checked,
            reference,
        )
        if verdict is not None:
            if deferred:
                # The state was not read after this move: it (or one before it) may have
                # moved it, and the first move that did is the shorter failure.
                found = _settle(
                    sut, path, unread, before, unchanged, node.clock_ms, progress, token, index
                )
                if found is not None:
                    return found
            return Divergence((*path, (move, model_out)), verdict[0], verdict[1], expected)
        checked = after
        if keep:
            sut.snapshot(child)
        dirty = not same or after != before
        if not same and progress.later is None:
            # Every write is read back at once, whether or not its state is new to the walk:
            # a store may lag behind on one path into a state and not on the first one.
            late = _read_back(
                sut,
                model,
                dial,
                node.state.revision,
                after_state,
                after,
                node.clock_ms,
                again=(path, move),
                progress=progress,
                index=index,
            )
            if late is not None:
                read, read_out, check, message = late
                progress.later = Divergence(
                    (*path, (move, model_out), (read, read_out)), check, message, expected
                )
    if unread:
        return _settle(sut, path, unread, before, unchanged, node.clock_ms, progress, token, index)
    return None


def _settle(
    sut: Sut,
    path: list[tuple[Move, Any]],
    unread: list[tuple[Call, Any]],
    before: StoreState | None,
    unchanged: StoreState,
    clock_ms: int,
    progress: Progress,
    token: Any = None,
    index: int | None = None,
) -> Divergence | None:
    """See whether the store is still at ``before`` after the moves of ``unread`` (each
    judged as leaving it there, as the reference says they do): on our own store by its
    change token (``token``, taken before the first of them: equal again, the same data),
    else, or when the token moved, by reading its state. None when it is ``before``.
    Else one of them moved it: the source is put back (node ``index``'s copy on our own
    store, else rebuilt) and the moves applied again one at a time, the state read after
    each, as on a store read after every move, and the first that fails a check is the
    divergence. A store that does not fail so again is reported with every move since the
    state was read."""
    assert before is not None
    if token is not None and sut.probe() == token:
        unread.clear()
        return None
    shown = sut.view(sut.store)
    if shown == before:
        unread.clear()
        return None
    _source(sut, path, index, progress)
    state = sut.view(sut.store)
    for move, model_out in unread:
        store_out = sut.move(move)
        after = sut.view(sut.store)
        verdict = judge(sut, move, model_out, store_out, state, after, unchanged, clock_ms)
        if verdict is not None:
            return Divergence((*path, (move, model_out)), verdict[0], verdict[1], unchanged)
        state = after
    last = unread[-1][0]
    return Divergence(
        (*path, *unread),
        "StateMismatch",
        f"after {last.describe()}:\n" + describe_difference(unchanged, shown),
        unchanged,
    )


#: The read operations of the protocol: applied first to a restored or rebuilt store.
READS = frozenset(
    {"get", "lineage", "latest_round", "ownership_facts", "revision", "changes", "list_runs"}
)


def _is_read(move: Move) -> bool:
    return isinstance(move, Call) and move.method in READS


def read_back(revision_before: int, state: ModelState) -> list[Call]:
    """The reads that follow every write of the walk: ``revision()``, ``changes()`` after the
    revision before the write, ``list_runs()`` and ``get`` of each run."""
    out = [
        call("revision"),
        call("changes", ("after_revision", revision_before)),
        call("list_runs"),
    ]
    out += [call("get", ("run_id", run_id)) for run_id in state.rows]
    return out


def _read_back(
    sut: Sut,
    model: ModelRunStore,
    dial: Dial,
    revision_before: int,
    state: ModelState,
    shown: StoreState,
    clock_ms: int,
    *,
    again: tuple[list[tuple[Move, Any]], Call] | None = None,
    progress: Progress | None = None,
    index: int | None = None,
) -> tuple[Call, Any, str, str] | None:
    """Apply ``read_back``'s reads to the store right after a write that reached ``state``
    (``shown`` as the store showed it, equal to the reference's): the first read that fails
    a check, with the reference's answer and the check, or None.

    Each read is judged as leaving the store at ``shown``; whether they did is seen once,
    after the last of them, by the change token on our own store (``Sut.probe``) or else
    by reading the state. Given ``again`` (the path to the write's source and the write),
    when the state moved, the source is put back (node ``index``'s copy on our own store,
    else rebuilt), the write applied again and the reads one at a time, the state read
    after each, to name the first read that fails."""
    reads = read_back(revision_before, state)
    token = sut.probe()
    answers: list[Any] = []
    for read in reads:
        model._state = state
        dial.ms = clock_ms
        model_out = perform(model, read)
        answers.append(model_out)
        store_out = sut.move(read)
        verdict = judge(sut, read, model_out, store_out, shown, shown, shown, clock_ms, shown)
        if verdict is not None:
            if _still(sut, token, shown):
                return read, model_out, verdict[0], verdict[1]
            break
    else:
        if _still(sut, token, shown):
            return None
    if again is None:
        last = reads[len(answers) - 1]
        return last, answers[-1], "StateMismatch", f"after {last.describe()}: the state moved"
    # A read moved the state: apply them again, reading after each.
    path, write = again
    _source(sut, path, index, progress)
    sut.move(write)
    before = sut.view(sut.store)
    for read, model_out in zip(reads, answers, strict=False):
        store_out = sut.move(read)
        after = sut.view(sut.store)
        verdict = judge(sut, read, model_out, store_out, before, after, shown, clock_ms)
        if verdict is not None:
            return read, model_out, verdict[0], verdict[1]
        before = after
    last = reads[len(answers) - 1]
    return last, answers[-1], "StateMismatch", f"after {last.describe()}: the state moved"


def _source(
    sut: Sut, path: list[tuple[Move, Any]], index: int | None, progress: Progress | None
) -> None:
    """Put the store in the state ``path`` reaches: node ``index``'s copy put back on our
    own store (a rebuild there would leave the walk's other copies behind), else a fresh
    store with ``path`` replayed."""
    if index is not None and sut.restore(index):
        if progress is not None:
            progress.restores += 1
        return
    sut.build(path)
    if progress is not None:
        progress.rebuilds += 1


def _still(sut: Sut, token: Any, shown: StoreState) -> bool:
    """Whether the store is still at ``shown``: its change token equal to ``token`` (our
    own stores), or else its state read again."""
    if token is not None and sut.probe() == token:
        return True
    return sut.view(sut.store) == shown


def _self_check(store: Any) -> tuple[str, str] | None:
    """The store's own ``check_invariants()`` (when it has one), as the machines run it at the
    end of a program that passed every check: None when it passes."""
    check = getattr(store, "check_invariants", None)
    if not callable(check):
        return None
    try:
        check()
    except AssertionError as error:
        text = str(error)
        text = text if len(text) <= 400 else f"{text[:400]}...({len(text)} characters)"
        return "StoreInvariantsFailed", f"the store's own check_invariants() failed: {text}"
    except Exception as error:
        return "StoreCrashed", f"check_invariants() raised {type(error).__name__}"
    return None


def programs(
    graph: Walk,
    sut: Sut,
    k: int,
    *,
    deadline: float | None = None,
    clock: Callable[[], float] = time.monotonic,
    progress: Progress | None = None,
) -> Progress:
    """Run every program of up to ``k`` moves against the store, each on a fresh store (no
    deduplication); stop at the first divergence or at ``deadline``."""
    progress = Progress() if progress is None else progress
    model = ModelRunStore(clock=Dial(start_ms()))
    dial = model._clock
    assert isinstance(dial, Dial)
    root = graph.nodes[0]
    stack: list[tuple[Node, list[tuple[Move, Any]]]] = [(root, [])]
    while stack:
        node, path = stack.pop()
        for move in moves(at_depth(graph.scope, node.depth), node.state, node.clock_ms):
            if deadline is not None and clock() > deadline:
                return progress
            sut.build(path)
            progress.rebuilds += 1
            progress.programs += 1
            before = sut.view(sut.store)
            model_out, after_state, after_clock = apply(model, dial, node, move)
            progress.transitions += 1
            store_out = sut.move(move)
            if isinstance(move, Call):
                after = sut.view(sut.store)
                expected = sut.expected(after_state)
                verdict = judge(
                    sut, move, model_out, store_out, before, after, expected, node.clock_ms
                )
                if verdict is not None:
                    progress.divergence = Divergence(
                        (*path, (move, model_out)), verdict[0], verdict[1], expected
                    )
                    return progress
            if len(path) + 1 < k:
                child = Node(after_state, after_clock, -1, move, model_out, node.depth + 1)
                stack.append((child, [*path, (move, model_out)]))
    progress.done = True
    return progress


def log_of(scope: Scope, program: tuple[tuple[Move, Any], ...]) -> tuple[LogEntry, ...]:
    """A program as the machines' log (for the summary and the regression file): the setup's
    creates, then each clock move and call with the reference's answer."""
    model = ModelRunStore(clock=Dial(start_ms()))
    entries: list[LogEntry] = []
    for op in setup_calls(scope):
        entries.append(Performed(op, perform(model, op)))
    for move, outcome in program:
        if isinstance(move, Tick):
            entries.append(ClockSet(move.ms))
        else:
            entries.append(Performed(move, outcome))
    return tuple(entries)
