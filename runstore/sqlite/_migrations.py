"""The schema, as an ordered chain of numbered, recorded migrations.

The chain replays upstream's history first, so a database built by an earlier
version of this package (or by the tests, which stop the chain part-way and
insert rows) upgrades the way upstream's did:

=====  ==================================  =========================================
id     name                                what it does
=====  ==================================  =========================================
1001   ``run-store_initial``               ``flows_runs`` and ``flows_attempts``
1002   ``run-store_lineage``               lineage columns, unique (lineage, round)
1003   ``run-store_execution_revisions``   revision source, changes, triggers,
                                           the cancellation acknowledgement column
1004   ``run-store_waiting_request``       the engine's ``waiting_request`` column
6      ``journal_consensus``               ``flows_consensus_leases`` + backfill
2001   ``runstore_ownership_facts``        the companion fact table + baseline
2002   ``runstore_run_state``              run state moves to ``flows_run_state``
2003   ``runstore_finding_work``           listing, claimable, claimed, finished and
                                           tombstone indexes; ``compacted_through``
2004   ``runstore_one_round_trip``         nothing on SQLite; PostgreSQL's one-statement
                                           operations (``runstore.postgres``)
2005   ``runstore_bulk_revisions``         cheaper revision triggers (two statements);
                                           PostgreSQL numbers batch writes at once
2006   ``runstore_lean_checks``            nothing on SQLite; PostgreSQL's row checks
                                           written as cheaper expressions
2007   ``runstore_claim_next_once``        nothing on SQLite; PostgreSQL's
                                           ``claim_next`` in one round trip
2008   ``runstore_whole_row_checks``       nothing on SQLite; PostgreSQL's row checks
                                           take the row as one argument
2009   ``runstore_live_rounds``            an index of the live rounds of lineages
                                           (``purge_settled``'s lineage lookup)
2010   ``runstore_change_log``             nothing on SQLite (one writer at a time);
                                           PostgreSQL's writers append to a change
                                           log that readers number
2011   ``runstore_claim_next_many``        nothing on SQLite; PostgreSQL's
                                           ``claim_next_many`` in one round trip
2012   ``runstore_lean_writes``            the status and transition CHECKs and the
                                           live-rounds index without ``IN`` lists
                                           (no temporary table on a write)
2013   ``runstore_lineage_cancel_root``    nothing on SQLite; PostgreSQL's lineage
                                           cancellation locks the root first
2014   ``runstore_lean_operations``        nothing on SQLite; PostgreSQL's
                                           one-round-trip functions, leaner
2015   ``runstore_growth``                 nothing on SQLite; PostgreSQL's parent
                                           index made partial
2016   ``runstore_status_indexes``         one listing index per status instead of
                                           one led by the status
=====  ==================================  =========================================

The pending migrations run, in order, inside one ``BEGIN IMMEDIATE``
transaction that first re-reads ``flows_migrations``, so two processes
opening a fresh file at once apply every step exactly once (the loser of the
write lock finds the steps recorded and skips them), and an upgrade that fails
part-way leaves the file as it was. A database recording a migration this version does not
know is refused (its schema is newer), and so is a file that has tables but no
bookkeeping table (it is not a runstore database).

The small, hot tables (``flows_runs`` once its state has moved out, the
changes, the leases, the facts) are ``WITHOUT ROWID`` tables keyed by run id:
one b-tree lookup per access instead of an index and a table.

The ids, names and order are the history both backends record
(``runstore._sql._migrations``); this module gives each step its SQLite text.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Final

from .._constants import MAX_SAFE_INTEGER
from .._sql._migrations import Migration, SchemaRefused, chain, refuse_unknown

_MAX = str(MAX_SAFE_INTEGER)


def _int(column: str) -> str:
    """CHECK text: an exact non-negative safe integer."""
    return f"(typeof({column}) = 'integer' AND {column} BETWEEN 0 AND {_MAX})"


def _opt_int(column: str) -> str:
    return f"({column} IS NULL OR {_int(column)})"


def _opt_text(column: str) -> str:
    return f"({column} IS NULL OR (typeof({column}) = 'text' AND length({column}) > 0))"


def _text(column: str) -> str:
    return f"(typeof({column}) = 'text' AND length({column}) > 0)"


_INITIAL: Final = f"""
CREATE TABLE flows_runs (
  run_id TEXT NOT NULL PRIMARY KEY CHECK ({_text("run_id")}),
  status TEXT NOT NULL CHECK (
    status IN ('pending', 'running', 'suspended', 'completed', 'failed', 'cancelled')
  ),
  created_at_ms INTEGER NOT NULL CHECK ({_int("created_at_ms")}),
  started_at_ms INTEGER CHECK ({_opt_int("started_at_ms")}),
  finished_at_ms INTEGER CHECK ({_opt_int("finished_at_ms")}),
  owner_host_id TEXT,
  owner_pid INTEGER,
  owner_nonce TEXT,
  heartbeat_at_ms INTEGER CHECK ({_opt_int("heartbeat_at_ms")}),
  claim_host_id TEXT,
  claim_pid INTEGER,
  claim_nonce TEXT,
  claimed_at_ms INTEGER CHECK ({_opt_int("claimed_at_ms")}),
  parent_run_id TEXT REFERENCES flows_runs (run_id) CHECK ({_opt_text("parent_run_id")}),
  cancel_requested_at_ms INTEGER CHECK ({_opt_int("cancel_requested_at_ms")}),
  waiting_reason TEXT CHECK ({_opt_text("waiting_reason")}),
  waiting_wake_at_ms INTEGER CHECK ({_opt_int("waiting_wake_at_ms")}),
  waiting_token TEXT CHECK ({_opt_text("waiting_token")}),
  state_json TEXT NOT NULL CHECK (typeof(state_json) = 'text' AND json_valid(state_json)),
  CONSTRAINT flows_runs_ownership CHECK (
    (status = 'running'
      AND {_text("owner_host_id")} AND {_int("owner_pid")} AND {_text("owner_nonce")}
      AND heartbeat_at_ms IS NOT NULL)
    OR (status <> 'running'
      AND owner_host_id IS NULL AND owner_pid IS NULL AND owner_nonce IS NULL
      AND heartbeat_at_ms IS NULL)
  ),
  CONSTRAINT flows_runs_claim CHECK (
    (claim_host_id IS NULL AND claim_pid IS NULL AND claim_nonce IS NULL
      AND claimed_at_ms IS NULL)
    OR ({_text("claim_host_id")} AND {_int("claim_pid")} AND {_text("claim_nonce")}
      AND claimed_at_ms IS NOT NULL)
  ),
  CONSTRAINT flows_runs_waiting CHECK (
    (waiting_reason IS NULL AND waiting_wake_at_ms IS NULL AND waiting_token IS NULL)
    OR waiting_reason IS NOT NULL
  )
) WITHOUT ROWID;

CREATE INDEX flows_runs_parent_run_id_idx ON flows_runs (parent_run_id);
CREATE INDEX flows_runs_cancel_requested_idx ON flows_runs (cancel_requested_at_ms)
  WHERE cancel_requested_at_ms IS NOT NULL;
CREATE INDEX flows_runs_waiting_reason_wake_at_idx
  ON flows_runs (waiting_reason, waiting_wake_at_ms) WHERE waiting_reason IS NOT NULL;

CREATE TABLE flows_attempts (
  run_id TEXT NOT NULL REFERENCES flows_runs (run_id) CHECK ({_text("run_id")}),
  step_key_digest TEXT NOT NULL CHECK ({_text("step_key_digest")}),
  attempt INTEGER NOT NULL CHECK ({_int("attempt")}),
  state TEXT NOT NULL CHECK ({_text("state")}),
  started_at_ms INTEGER NOT NULL CHECK ({_int("started_at_ms")}),
  finished_at_ms INTEGER CHECK ({_opt_int("finished_at_ms")}),
  heartbeat_at_ms INTEGER CHECK ({_opt_int("heartbeat_at_ms")}),
  checkpoint_json TEXT CHECK (checkpoint_json IS NULL OR json_valid(checkpoint_json)),
  error_json TEXT CHECK (error_json IS NULL OR json_valid(error_json)),
  outcome_json TEXT CHECK (outcome_json IS NULL OR json_valid(outcome_json)),
  meta_json TEXT NOT NULL CHECK (json_valid(meta_json)),
  PRIMARY KEY (run_id, step_key_digest, attempt)
);
"""

_LINEAGE: Final = f"""
ALTER TABLE flows_runs ADD COLUMN lineage_id TEXT CHECK ({_opt_text("lineage_id")});
ALTER TABLE flows_runs ADD COLUMN round_ordinal INTEGER CHECK ({_opt_int("round_ordinal")});
CREATE UNIQUE INDEX flows_runs_lineage_idx ON flows_runs (lineage_id, round_ordinal);
"""


def _revision_trigger(event: str, row: str, deleted: int) -> str:
    # The source row is the database's identity and its counter. A missing
    # source refuses the mutation instead of silently not counting it, and a
    # counter at 2**53 - 1 makes the UPDATE break the CHECK, aborting the
    # mutation that caused it (nothing wraps).
    return f"""
CREATE TRIGGER flows_runs_revision_{event} AFTER {event.upper()} ON flows_runs
BEGIN
  SELECT RAISE(ABORT, 'execution source identity is missing')
    WHERE NOT EXISTS (SELECT 1 FROM flows_run_source WHERE singleton = 1);
  UPDATE flows_run_source SET revision = revision + 1 WHERE singleton = 1;
  INSERT INTO flows_run_changes (run_id, revision, deleted)
    SELECT {row}.run_id, revision, {deleted} FROM flows_run_source WHERE singleton = 1
    ON CONFLICT (run_id) DO UPDATE SET revision = excluded.revision, deleted = excluded.deleted;
END;
"""


_EXECUTION_REVISIONS: Final = (
    f"""
CREATE TABLE flows_run_source (
  singleton INTEGER NOT NULL PRIMARY KEY CHECK (singleton = 1),
  source TEXT NOT NULL CHECK (
    typeof(source) = 'text' AND length(source) = 32 AND source NOT GLOB '*[^0-9a-f]*'
  ),
  revision INTEGER NOT NULL CHECK ({_int("revision")})
);
INSERT INTO flows_run_source (singleton, source, revision)
  VALUES (1, lower(hex(randomblob(16))), 0);

CREATE TABLE flows_run_changes (
  run_id TEXT NOT NULL PRIMARY KEY CHECK ({_text("run_id")}),
  revision INTEGER NOT NULL UNIQUE CHECK (
    typeof(revision) = 'integer' AND revision > 0 AND revision <= {_MAX}
  ),
  deleted INTEGER NOT NULL CHECK (deleted IN (0, 1))
) WITHOUT ROWID;

ALTER TABLE flows_runs ADD COLUMN cancel_acknowledgement_json TEXT CHECK (
  cancel_acknowledgement_json IS NULL OR json_valid(cancel_acknowledgement_json)
);

-- Existing runs get revisions 1..n in creation order, before any trigger exists.
INSERT INTO flows_run_changes (run_id, revision, deleted)
  SELECT run_id, ROW_NUMBER() OVER (ORDER BY created_at_ms, run_id), 0 FROM flows_runs;
UPDATE flows_run_source SET revision = (SELECT count(*) FROM flows_runs) WHERE singleton = 1;
"""
    + _revision_trigger("insert", "NEW", 0)
    + _revision_trigger("update", "NEW", 0)
    + _revision_trigger("delete", "OLD", 1)
    + """
CREATE TRIGGER flows_runs_identity_immutable BEFORE UPDATE OF run_id ON flows_runs
  WHEN NEW.run_id IS NOT OLD.run_id
BEGIN
  SELECT RAISE(ABORT, 'run identity is immutable');
END;
"""
)

_WAITING_REQUEST: Final = """
ALTER TABLE flows_runs ADD COLUMN waiting_request TEXT CHECK (
  waiting_request IS NULL OR json_valid(waiting_request)
);
"""

_CONSENSUS: Final = f"""
CREATE TABLE flows_consensus_leases (
  run_id TEXT NOT NULL PRIMARY KEY CHECK ({_text("run_id")}),
  owner_host_id TEXT,
  owner_pid INTEGER CHECK ({_opt_int("owner_pid")}),
  owner_nonce TEXT,
  granted_at_ms INTEGER CHECK ({_opt_int("granted_at_ms")}),
  heartbeat_at_ms INTEGER CHECK ({_opt_int("heartbeat_at_ms")}),
  claim_host_id TEXT,
  claim_pid INTEGER CHECK ({_opt_int("claim_pid")}),
  claim_nonce TEXT,
  claimed_at_ms INTEGER CHECK ({_opt_int("claimed_at_ms")})
) WITHOUT ROWID;

-- Runs that are owned or claimed before the strategy existed get the lease the
-- row implies, so their owners keep their fence across the upgrade.
INSERT INTO flows_consensus_leases (
  run_id, owner_host_id, owner_pid, owner_nonce, granted_at_ms, heartbeat_at_ms,
  claim_host_id, claim_pid, claim_nonce, claimed_at_ms
)
SELECT
  run_id, owner_host_id, owner_pid, owner_nonce,
  CASE WHEN status = 'running' THEN heartbeat_at_ms END,
  CASE WHEN status = 'running' THEN heartbeat_at_ms END,
  claim_host_id, claim_pid, claim_nonce, claimed_at_ms
FROM flows_runs
WHERE status = 'running' OR claim_host_id IS NOT NULL
ON CONFLICT (run_id) DO NOTHING;
"""

_OWNERSHIP_FACTS: Final = f"""
CREATE TABLE flows_ownership_facts (
  run_id TEXT NOT NULL REFERENCES flows_runs (run_id) ON DELETE CASCADE
    CHECK ({_text("run_id")}),
  position INTEGER NOT NULL CHECK (
    typeof(position) = 'integer' AND position BETWEEN 1 AND {_MAX}
  ),
  transition TEXT NOT NULL CHECK (
    transition IN ('claimed', 'activated', 'released', 'stolen', 'expired')
  ),
  owner_host_id TEXT NOT NULL CHECK ({_text("owner_host_id")}),
  owner_pid INTEGER NOT NULL CHECK ({_int("owner_pid")}),
  owner_nonce TEXT NOT NULL CHECK ({_text("owner_nonce")}),
  granted_at_ms INTEGER CHECK ({_opt_int("granted_at_ms")}),
  CHECK (granted_at_ms IS NOT NULL OR transition = 'released'),
  PRIMARY KEY (run_id, position)
) WITHOUT ROWID;

-- A baseline for runs that are owned or claimed at upgrade time, so replaying
-- a run's facts rebuilds its owner and claim from the first day: the owner's
-- activation (granted at its heartbeat, as the lease backfill says), then the
-- pending claim (a steal when the run is running).
INSERT INTO flows_ownership_facts (
  run_id, position, transition, owner_host_id, owner_pid, owner_nonce, granted_at_ms
)
SELECT run_id, 1, 'activated', owner_host_id, owner_pid, owner_nonce, heartbeat_at_ms
FROM flows_runs WHERE status = 'running';
INSERT INTO flows_ownership_facts (
  run_id, position, transition, owner_host_id, owner_pid, owner_nonce, granted_at_ms
)
SELECT
  run_id, CASE WHEN status = 'running' THEN 2 ELSE 1 END,
  CASE WHEN status = 'running' THEN 'stolen' ELSE 'claimed' END,
  claim_host_id, claim_pid, claim_nonce, claimed_at_ms
FROM flows_runs WHERE claim_host_id IS NOT NULL;
"""

# SQLite rewrites a row's whole record on every UPDATE, so with run state in
# flows_runs a heartbeat on a run holding megabytes of state rewrites those
# megabytes. Keeping the state in its own table makes the hot row small and a
# heartbeat's cost independent of the state's size. The secret scan's allowed
# column is therefore flows_run_state.state_json. DROP COLUMN does not fire the
# revision triggers, so the upgrade leaves the revision where it was.
_RUN_STATE: Final = """
CREATE TABLE flows_run_state (
  run_id TEXT NOT NULL PRIMARY KEY REFERENCES flows_runs (run_id) ON DELETE CASCADE,
  state_json TEXT NOT NULL CHECK (typeof(state_json) = 'text' AND json_valid(state_json))
);
INSERT INTO flows_run_state (run_id, state_json) SELECT run_id, state_json FROM flows_runs;
ALTER TABLE flows_runs DROP COLUMN state_json;
"""


# Finding work and purging: every listing reads an index in its page order
# ``(created_at_ms, run_id)`` instead of sorting the table. The partial
# indexes hold only the rows a hot filter wants (claimable runs, claimed
# runs); the status index serves one status (several are merged per status);
# the finished index serves purge_settled oldest first; the tombstone index
# compact_changes. No index holds ``heartbeat_at_ms``, so a heartbeat
# rewrites no index entry. ``compacted_through`` records the newest tombstone
# revision ever compacted: the revision may equal it once the newest change
# is gone from the feed.
_FINDING_WORK: Final = f"""
CREATE INDEX flows_runs_listing_idx ON flows_runs (created_at_ms, run_id);
CREATE INDEX flows_runs_status_listing_idx ON flows_runs (status, created_at_ms, run_id);
CREATE INDEX flows_runs_claimable_idx ON flows_runs (created_at_ms, run_id)
  WHERE status IN ('pending', 'suspended') AND claim_host_id IS NULL;
CREATE INDEX flows_runs_claimed_idx ON flows_runs (created_at_ms, run_id)
  WHERE claim_host_id IS NOT NULL;
CREATE INDEX flows_runs_finished_idx ON flows_runs (finished_at_ms, run_id)
  WHERE finished_at_ms IS NOT NULL;
CREATE INDEX flows_run_changes_tombstone_idx ON flows_run_changes (revision)
  WHERE deleted = 1;
ALTER TABLE flows_run_source ADD COLUMN compacted_through INTEGER NOT NULL DEFAULT 0
  CHECK ({_int("compacted_through")});
"""


def _cheaper_revision_trigger(event: str, row: str, deleted: int) -> str:
    # As _revision_trigger, in two statements instead of three: the change
    # entry reads the counter the first statement moved, and a missing source
    # (no counter to read) raises from inside that read.
    return f"""
DROP TRIGGER flows_runs_revision_{event};
CREATE TRIGGER flows_runs_revision_{event} AFTER {event.upper()} ON flows_runs
BEGIN
  UPDATE flows_run_source SET revision = revision + 1 WHERE singleton = 1;
  INSERT INTO flows_run_changes (run_id, revision, deleted)
    SELECT {row}.run_id, COALESCE(
      (SELECT revision FROM flows_run_source WHERE singleton = 1),
      RAISE(ABORT, 'execution source identity is missing')), {deleted}
    ON CONFLICT (run_id) DO UPDATE SET revision = excluded.revision, deleted = excluded.deleted;
END;
"""


# Every row write pays its revision trigger (about a third of a heartbeat's
# cost), so the trigger runs two statements instead of three.
_BULK_REVISIONS: Final = (
    _cheaper_revision_trigger("insert", "NEW", 0)
    + _cheaper_revision_trigger("update", "NEW", 0)
    + _cheaper_revision_trigger("delete", "OLD", 1)
)


# purge_settled (and purge_candidates) asks, for each candidate, whether its
# lineage has a live round. The unique (lineage_id, round_ordinal) index
# answered by reading every round of the lineage, settled ones included, so a
# lineage of many settled rounds cost each of its candidates that many rows;
# this index holds only the live rounds (none, once a lineage has settled), so
# each candidate costs one lookup. Runs outside a lineage have no entry, so a
# plain run's writes pay nothing for it. An index only: older releases read
# and write the table as before.
_LIVE_ROUNDS: Final = """
CREATE INDEX flows_runs_live_rounds_idx ON flows_runs (lineage_id)
  WHERE lineage_id IS NOT NULL AND status NOT IN ('completed', 'failed', 'cancelled');
"""


# An ``IN`` list of more than two constants is evaluated by building a
# temporary b-tree of its values, every time the statement runs: the status
# CHECK (six statuses), the transition CHECK of the facts (five) and the
# live-rounds index's ``NOT IN`` (three; judged for the old and the new row of
# every write of a round) cost each status-changing write two to four
# temporary tables. The same tests written as ``=`` or ``<>`` chains need
# none. A CHECK's text can be changed in place (the rows already pass it: the
# new text admits exactly the same values), which SQLite documents for
# constraint changes; the connection that migrates reloads the schema after
# the commit (``PRAGMA writable_schema = RESET``), and the index's rebuild
# moves the schema cookie so every other connection reloads it too.
_STATUS_IN: Final = (
    "status IN ('pending', 'running', 'suspended', 'completed', 'failed', 'cancelled')"
)
_STATUS_EQ: Final = (
    "status = 'running' OR status = 'pending' OR status = 'completed' "
    "OR status = 'suspended' OR status = 'failed' OR status = 'cancelled'"
)
_TRANSITION_IN: Final = "transition IN ('claimed', 'activated', 'released', 'stolen', 'expired')"
_TRANSITION_EQ: Final = (
    "transition = 'claimed' OR transition = 'activated' OR transition = 'released' "
    "OR transition = 'stolen' OR transition = 'expired'"
)
#: The live statuses, as the live-rounds index and its readers spell them.
LIVE_STATUS: Final = "status <> 'completed' AND status <> 'failed' AND status <> 'cancelled'"


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


_LEAN_WRITES: Final = f"""
PRAGMA writable_schema = ON;
UPDATE sqlite_master SET sql = replace(sql, {_literal(_STATUS_IN)}, {_literal(_STATUS_EQ)})
  WHERE type = 'table' AND name = 'flows_runs';
UPDATE sqlite_master SET sql = replace(sql, {_literal(_TRANSITION_IN)}, {_literal(_TRANSITION_EQ)})
  WHERE type = 'table' AND name = 'flows_ownership_facts';
PRAGMA writable_schema = OFF;
DROP INDEX flows_runs_live_rounds_idx;
CREATE INDEX flows_runs_live_rounds_idx ON flows_runs (lineage_id)
  WHERE lineage_id IS NOT NULL AND {LIVE_STATUS};
"""


#: The statuses, each with a listing index of its own (migration 2016).
STATUSES: Final = ("pending", "running", "suspended", "completed", "failed", "cancelled")


def status_index(status: str) -> str:
    """The name of ``status``'s listing index."""
    return f"flows_runs_{status}_listing_idx"


# One listing index per status instead of one index led by the status. A
# write that changes a run's status moved its entry inside the one index,
# from its old status's stretch to its new one's: two leaf pages, and the
# new stretch (completed runs, say, between the cancelled and the pending
# ones) is in the middle of the tree, whose full pages split again and again
# as entries go in at the same place. In an index of its own each status's
# entries are ordered by creation, so a run entering a status lands at or
# near that index's right edge, where a split leaves room for what follows,
# and leaving its old status is a delete in that status's index: one page in
# each. A listing of one status names it as a literal (``LIST_STATUS``),
# which implies that status's index condition; several statuses are already
# read as one ordered arm each. An index change only: older releases read
# and write the table as before (their statements are prepared again).
_STATUS_INDEXES: Final = "DROP INDEX flows_runs_status_listing_idx;\n" + "".join(
    f"CREATE INDEX {status_index(status)} ON flows_runs (created_at_ms, run_id)\n"
    f"  WHERE status = '{status}';\n"
    for status in STATUSES
)


_TEXTS: Final = {
    1001: _INITIAL,
    1002: _LINEAGE,
    1003: _EXECUTION_REVISIONS,
    1004: _WAITING_REQUEST,
    6: _CONSENSUS,
    2001: _OWNERSHIP_FACTS,
    2002: _RUN_STATE,
    2003: _FINDING_WORK,
    # Recorded on SQLite too, so both backends keep one history.
    2004: "",
    2005: _BULK_REVISIONS,
    2006: "",
    2007: "",
    2008: "",
    2009: _LIVE_ROUNDS,
    2010: "",
    2011: "",
    2012: _LEAN_WRITES,
    # PostgreSQL's lineage cancellation locks its root first: one writer here.
    2013: "",
    # PostgreSQL's one-round-trip functions written leaner: nothing here.
    2014: "",
    2015: "",
    2016: _STATUS_INDEXES,
}

#: The chain: the shared history's ids and names, in its order, with SQLite text.
MIGRATIONS: Final[tuple[Migration, ...]] = chain(_TEXTS)

_BOOKKEEPING: Final = """
CREATE TABLE IF NOT EXISTS flows_migrations (
  id INTEGER NOT NULL PRIMARY KEY,
  name TEXT NOT NULL UNIQUE
)
"""


def _applied(connection: sqlite3.Connection) -> dict[int, str] | None:
    """The recorded migrations, or None when there is no bookkeeping table."""
    exists = sqlite3.Connection.execute(
        connection,
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'flows_migrations'",
    ).fetchone()
    if exists is None:
        return None
    rows = sqlite3.Connection.execute(connection, "SELECT id, name FROM flows_migrations")
    return {int(row[0]): str(row[1]) for row in rows}


def check_applied(applied: dict[int, str] | None, connection: sqlite3.Connection) -> None:
    """Refuse a file this version must not open."""
    if applied is None:
        foreign = sqlite3.Connection.execute(
            connection,
            "SELECT count(*) FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'",
        ).fetchone()[0]
        if foreign:
            raise SchemaRefused(
                "the file is not a runstore database", {"stage": "schema", "tables": foreign}
            )
        return
    refuse_unknown(applied, "the file is not a runstore database")


def pending(connection: sqlite3.Connection) -> list[Migration]:
    """The migrations the file still needs (after refusing a foreign file)."""
    applied = _applied(connection)
    check_applied(applied, connection)
    done = applied or {}
    return [m for m in MIGRATIONS if m.id not in done]


def apply(
    connection: sqlite3.Connection,
    count: int | None = None,
    *,
    run: Callable[[Callable[[], None]], None] | None = None,
) -> None:
    """Bring the schema up to date (or up to the first ``count`` migrations).

    ``connection`` must be in autocommit mode (``isolation_level=None``). The
    pending steps run in order inside one ``BEGIN IMMEDIATE`` transaction
    that first re-reads what is recorded, so an upgrade is all or nothing and
    a process that lost the race to the write lock finds the work done.
    ``run`` wraps the transaction (the store passes its busy retry).
    """
    chain = MIGRATIONS if count is None else MIGRATIONS[:count]
    step = _stepper(connection, chain)
    if run is None:
        step()
    else:
        run(step)


def _stepper(connection: sqlite3.Connection, chain: tuple[Migration, ...]) -> Callable[[], None]:
    def step() -> None:
        execute = sqlite3.Connection.execute
        execute(connection, "BEGIN IMMEDIATE")
        migrated = False
        try:
            applied = _applied(connection)
            check_applied(applied, connection)
            if applied is None:
                execute(connection, _BOOKKEEPING)
                applied = {}
            for migration in chain:
                if migration.id in applied:
                    continue
                migrated = True
                for statement in _statements(migration.sql):
                    execute(connection, statement)
                execute(
                    connection,
                    "INSERT INTO flows_migrations (id, name) VALUES (?, ?)",
                    (migration.id, migration.name),
                )
        except BaseException:
            if connection.in_transaction:
                execute(connection, "ROLLBACK")
            if migrated:
                # Schema writing must not stay on after a failed 2012.
                execute(connection, "PRAGMA writable_schema = RESET")
            raise
        execute(connection, "COMMIT")
        if migrated:
            # A CHECK rewritten in place (2012) is still compiled from the
            # text this connection read before: read the schema again. (A
            # SQLite without RESET takes it as OFF; the old CHECK, which
            # admits the same rows, then stays until the file is reopened.)
            execute(connection, "PRAGMA writable_schema = RESET")

    return step


def _statements(script: str) -> list[str]:
    """Split a migration script into complete statements (triggers included)."""
    statements: list[str] = []
    buffer = ""
    for line in script.splitlines(keepends=True):
        if not buffer and (not line.strip() or line.lstrip().startswith("--")):
            continue
        buffer += line
        if sqlite3.complete_statement(buffer):
            statements.append(buffer.strip())
            buffer = ""
    if buffer.strip():
        raise ValueError("a migration ends in an incomplete statement")
    return statements
