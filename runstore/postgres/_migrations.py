"""The PostgreSQL schema: the same numbered, recorded migrations as SQLite's.

Ids and names are the history both backends record
(``runstore._sql._migrations``; a test pins SQLite's to the same), so a
database records the same history on either backend; the text is
PostgreSQL's. What differs, and why:

- Integers are ``BIGINT`` with the same range CHECKs (``0 .. 2**53 - 1``); a
  ``BIGINT`` cannot hold a fraction, which SQLite's ``typeof`` checks guard.
- Identifiers are ``TEXT COLLATE "C"``: compared and ordered byte-wise (which
  for UTF-8 is code point order, the model's) on a server of any locale.
- PostgreSQL 15 has no ``IS JSON``: JSON columns are checked by
  ``flows_json_valid(text)``, a plpgsql function that answers false where the
  ``json`` input function refuses the text, so a bad document breaks a CHECK
  (SQLSTATE 23514, ``constraint``) instead of raising a data error. ``json``
  (not ``jsonb``) validates syntax only, as SQLite's ``json_valid`` does, and
  the text is stored byte for byte.
- The revision triggers are constraint triggers, ``DEFERRABLE INITIALLY
  DEFERRED``: every row event still takes exactly one revision, in event
  order, but at commit, so writers on different runs share only the short
  step at commit instead of serializing on the counter row for their whole
  transaction (and, since migration 2010, not even that: see below).
- ``flows_request_cancel_lineage`` marks a lineage's rounds one by one in run
  id order (the order the revisions must follow) and returns each round it
  marked; an UPDATE's row order is the plan's, not the table's.
- ``flows_renew_runs`` and ``flows_purge_runs`` (``heartbeat_many``,
  ``purge_settled``) write many runs in one statement and number them
  themselves, in run id order, with one counter update (migration 2005:
  their row events skip the revision triggers, whose WHEN clause reads the
  transaction-local setting ``runstore.revisions``).
- Migration 2004 creates one function per write operation, which the store
  calls in one round trip when its strategy is ``SqlConsensus``
  (``runstore.postgres._fused_sql``); it records nothing on SQLite.
- Migration 2004 also folds each hot table's CHECKs into one, calling a
  plpgsql function of the same expressions; migration 2006 writes those
  functions again, shorter and admitting the same rows, since a function's
  expression is set up anew in every transaction. It records nothing on
  SQLite either, nor does 2007, which adds ``claim_next``'s one-round-trip
  function (``flows_op_claim_next_once``), nor 2008, which gives each row
  check the row whole (one argument instead of one per column) and names
  every built-in it uses in ``pg_catalog`` instead of pinning a search path.
- Migration 2009 adds the same index as on SQLite, of the live rounds of
  lineages, which ``purge_settled``'s lineage lookup reads.
- Migration 2010 moves the change feed off the one counter row: writers
  append unnumbered entries to ``flows_change_log`` and ``revision()``,
  ``changes()`` (or, now and then, a writer) number them
  (``runstore.postgres._change_feed``). Entries already numbered stay as
  they are, so a revision a reader holds stays valid. It records nothing on
  SQLite.
- Migration 2011 adds ``claim_next_many``'s one-round-trip functions
  (``flows_op_claim_next_many`` and ``flows_op_claim_next_many_once``, as
  2004's and 2007's for ``claim_next``). It records nothing on SQLite.
- Migration 2012 does nothing on PostgreSQL (on SQLite it writes a few
  CHECKs and one partial index so that writes need no temporary tables).
- Migration 2013 makes ``flows_request_cancel_lineage`` lock the lineage's
  root (``FOR UPDATE``) before it looks for rounds. A round being created
  holds a key-share lock on its root until it commits, so the cancellation
  now waits for every round already on its way and its search, a statement
  of its own with a fresh snapshot, sees them; a round begun later waits for
  the cancellation to commit. Before, the search's snapshot could be older
  than a round that committed while the cancellation waited for another
  round's row lock, and that round stayed unmarked though it committed
  first (found by the torture). It records nothing on SQLite (one writer at
  a time).
- Migration 2014 writes the one-round-trip functions again, leaner
  (``runstore.postgres._fused_sql``, ``LEAN_OPERATIONS``): no pinned search
  path (the schema's name is written into their text instead), the hot
  helpers inlined, each write's change-log entry appended by the function
  itself (the revision trigger skips the run-row writes it marks), and state
  written by an UPDATE. It records nothing on SQLite.
- Migration 2015 makes the parent index partial (``WHERE parent_run_id IS
  NOT NULL``): a run without a parent, most runs, no longer keeps an entry
  in it, and a write that cannot update its row in place no longer inserts
  into one more B-tree of the store's size. It records nothing on SQLite.
- Migration 2016 does nothing on PostgreSQL (on SQLite it replaces the
  index led by the status with one listing index per status).
- Functions that read tables are created with ``SET search_path FROM
  CURRENT``: they always see the schema they were migrated into, whatever the
  search path of the session whose write fires them. The exception is the
  functions 2014 writes, which name the schema's tables instead (entering a
  function that pins a search path costs a save, a set and a restore of the
  setting on every call).

The pending migrations run in one transaction after an advisory lock keyed
by the schema, so two processes opening a fresh schema apply each step once,
and a failed upgrade leaves the schema as it was (PostgreSQL's DDL is
transactional). A schema recording a migration this version does not know is
refused, and so is a schema that has tables but no ``flows_migrations``.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable
from typing import Any, Final

from .._constants import MAX_SAFE_INTEGER
from .._sql._migrations import Migration, SchemaRefused, chain, refuse_unknown
from ._change_feed import CHANGE_LOG
from ._fused_sql import CLAIM_NEXT_MANY, CLAIM_NEXT_ONCE, FUSED_OPERATIONS, LEAN_OPERATIONS

_MAX = str(MAX_SAFE_INTEGER)
_ID = 'TEXT COLLATE "C"'


# A CHECK passes when its condition is NULL, so every test of a column says
# IS NOT NULL itself: inside an OR (the ownership and claim CHECKs) a bare
# ``length(owner_host_id) > 0`` would let a NULL owner through. SQLite's
# ``typeof`` tests are never NULL.


def _int(column: str) -> str:
    """CHECK text: a non-negative safe integer (never NULL)."""
    return f"({column} IS NOT NULL AND {column} BETWEEN 0 AND {_MAX})"


def _opt_int(column: str) -> str:
    return f"({column} IS NULL OR {_int(column)})"


def _text(column: str) -> str:
    """CHECK text: non-empty text (never NULL)."""
    return f"({column} IS NOT NULL AND length({column}) > 0)"


def _opt_text(column: str) -> str:
    return f"({column} IS NULL OR {_text(column)})"


def _json(column: str) -> str:
    return f"flows_json_valid({column})"


_JSON_VALID: Final = """
CREATE FUNCTION flows_json_valid(document text) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
BEGIN
  PERFORM document::json;
  RETURN true;
EXCEPTION WHEN data_exception OR program_limit_exceeded THEN
  RETURN false;
END
$$;
"""

_STATUSES: Final = (
    "status IN ('pending', 'running', 'suspended', 'completed', 'failed', 'cancelled')"
)
_TRANSITIONS: Final = "transition IN ('claimed', 'activated', 'released', 'stolen', 'expired')"
_OWNERSHIP_CHECK: Final = f"""(status = 'running'
      AND {_text("owner_host_id")} AND {_int("owner_pid")} AND {_text("owner_nonce")}
      AND heartbeat_at_ms IS NOT NULL)
    OR (status <> 'running'
      AND owner_host_id IS NULL AND owner_pid IS NULL AND owner_nonce IS NULL
      AND heartbeat_at_ms IS NULL)"""
_CLAIM_CHECK: Final = f"""(claim_host_id IS NULL AND claim_pid IS NULL AND claim_nonce IS NULL
      AND claimed_at_ms IS NULL)
    OR ({_text("claim_host_id")} AND {_int("claim_pid")} AND {_text("claim_nonce")}
      AND claimed_at_ms IS NOT NULL)"""
_WAITING_CHECK: Final = (
    "(waiting_reason IS NULL AND waiting_wake_at_ms IS NULL AND waiting_token IS NULL)\n"
    "    OR waiting_reason IS NOT NULL"
)

_INITIAL: Final = (
    _JSON_VALID
    + f"""
CREATE TABLE flows_runs (
  run_id {_ID} NOT NULL PRIMARY KEY CHECK ({_text("run_id")}),
  status TEXT NOT NULL CHECK ({_STATUSES}),
  created_at_ms BIGINT NOT NULL CHECK ({_int("created_at_ms")}),
  started_at_ms BIGINT CHECK ({_opt_int("started_at_ms")}),
  finished_at_ms BIGINT CHECK ({_opt_int("finished_at_ms")}),
  owner_host_id {_ID},
  owner_pid BIGINT,
  owner_nonce {_ID},
  heartbeat_at_ms BIGINT CHECK ({_opt_int("heartbeat_at_ms")}),
  claim_host_id {_ID},
  claim_pid BIGINT,
  claim_nonce {_ID},
  claimed_at_ms BIGINT CHECK ({_opt_int("claimed_at_ms")}),
  parent_run_id {_ID} REFERENCES flows_runs (run_id) CHECK ({_opt_text("parent_run_id")}),
  cancel_requested_at_ms BIGINT CHECK ({_opt_int("cancel_requested_at_ms")}),
  waiting_reason TEXT CHECK ({_opt_text("waiting_reason")}),
  waiting_wake_at_ms BIGINT CHECK ({_opt_int("waiting_wake_at_ms")}),
  waiting_token TEXT CHECK ({_opt_text("waiting_token")}),
  state_json TEXT NOT NULL CHECK ({_json("state_json")}),
  CONSTRAINT flows_runs_ownership CHECK (
    {_OWNERSHIP_CHECK}
  ),
  CONSTRAINT flows_runs_claim CHECK (
    {_CLAIM_CHECK}
  ),
  CONSTRAINT flows_runs_waiting CHECK (
    {_WAITING_CHECK}
  )
) WITH (fillfactor = 80);

CREATE INDEX flows_runs_parent_run_id_idx ON flows_runs (parent_run_id);
CREATE INDEX flows_runs_cancel_requested_idx ON flows_runs (cancel_requested_at_ms)
  WHERE cancel_requested_at_ms IS NOT NULL;
CREATE INDEX flows_runs_waiting_reason_wake_at_idx
  ON flows_runs (waiting_reason, waiting_wake_at_ms) WHERE waiting_reason IS NOT NULL;

CREATE TABLE flows_attempts (
  run_id {_ID} NOT NULL REFERENCES flows_runs (run_id) CHECK ({_text("run_id")}),
  step_key_digest {_ID} NOT NULL CHECK ({_text("step_key_digest")}),
  attempt BIGINT NOT NULL CHECK ({_int("attempt")}),
  state {_ID} NOT NULL CHECK ({_text("state")}),
  started_at_ms BIGINT NOT NULL CHECK ({_int("started_at_ms")}),
  finished_at_ms BIGINT CHECK ({_opt_int("finished_at_ms")}),
  heartbeat_at_ms BIGINT CHECK ({_opt_int("heartbeat_at_ms")}),
  checkpoint_json TEXT CHECK (checkpoint_json IS NULL OR {_json("checkpoint_json")}),
  error_json TEXT CHECK (error_json IS NULL OR {_json("error_json")}),
  outcome_json TEXT CHECK (outcome_json IS NULL OR {_json("outcome_json")}),
  meta_json TEXT NOT NULL CHECK ({_json("meta_json")}),
  PRIMARY KEY (run_id, step_key_digest, attempt)
);
"""
)

# Marks the lineage rounds of $1 that are live and unrequested, one at a time
# in run id order, locking each, and returns each round it marked. The
# member test is the SQLite query's (runstore.postgres._queries, _member).
_CANCEL_LINEAGE: Final = """
CREATE FUNCTION flows_request_cancel_lineage(member text, requested_at bigint)
RETURNS SETOF text LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  root text;
  round text;
BEGIN
  SELECT COALESCE(r.lineage_id, r.run_id) INTO root FROM flows_runs AS r WHERE r.run_id = member;
  FOR round IN
    SELECT r.run_id FROM flows_runs AS r
    WHERE (r.lineage_id = root
           OR (r.run_id = root AND (r.lineage_id IS NULL OR r.lineage_id = root)))
      AND r.cancel_requested_at_ms IS NULL
      AND r.status NOT IN ('completed', 'failed', 'cancelled')
    ORDER BY r.run_id
    FOR UPDATE
  LOOP
    UPDATE flows_runs SET cancel_requested_at_ms = requested_at WHERE run_id = round;
    RETURN NEXT round;
  END LOOP;
END
$$;
"""

# Migration 2013: the same function, the root locked first. FOR UPDATE is the
# one row lock that conflicts with the key-share lock a round being created
# takes on its root (runstore.postgres._queries, CREATE_RUN; _fused, CREATE).
# The search that follows is a statement of its own, so under READ COMMITTED
# it reads a snapshot taken after every such round has committed.
_CANCEL_LINEAGE_ROOT_FIRST: Final = _CANCEL_LINEAGE.replace(
    "CREATE FUNCTION", "CREATE OR REPLACE FUNCTION"
).replace(
    "WHERE r.run_id = member;\n",
    "WHERE r.run_id = member;\n"
    "  PERFORM 1 FROM flows_runs AS r WHERE r.run_id = root FOR UPDATE;\n",
)

_LINEAGE: Final = (
    f"""
ALTER TABLE flows_runs ADD COLUMN lineage_id {_ID} CHECK ({_opt_text("lineage_id")});
ALTER TABLE flows_runs ADD COLUMN round_ordinal BIGINT CHECK ({_opt_int("round_ordinal")});
CREATE UNIQUE INDEX flows_runs_lineage_idx ON flows_runs (lineage_id, round_ordinal);
"""
    + _CANCEL_LINEAGE
)

# One function for the three events: each row event takes the next revision
# and records it as the run's latest change. A missing source refuses the
# commit instead of silently not counting, and a counter at 2**53 - 1 breaks
# the CHECK, refusing the commit that would overflow it.
_REVISION_FUNCTION: Final = """
CREATE FUNCTION flows_runs_revision() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  next_revision bigint;
  changed text;
  gone smallint := 0;
BEGIN
  IF TG_OP = 'DELETE' THEN
    changed := OLD.run_id;
    gone := 1;
  ELSE
    changed := NEW.run_id;
  END IF;
  UPDATE flows_run_source SET revision = revision + 1 WHERE singleton = 1
    RETURNING revision INTO next_revision;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'execution source identity is missing'
      USING ERRCODE = 'check_violation', CONSTRAINT = 'flows_run_source_identity';
  END IF;
  INSERT INTO flows_run_changes (run_id, revision, deleted)
    VALUES (changed, next_revision, gone)
    ON CONFLICT (run_id) DO UPDATE SET revision = excluded.revision, deleted = excluded.deleted;
  RETURN NULL;
END
$$;
"""


def _revision_trigger(event: str) -> str:
    return f"""
CREATE CONSTRAINT TRIGGER flows_runs_revision_{event} AFTER {event.upper()} ON flows_runs
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION flows_runs_revision();
"""


_EXECUTION_REVISIONS: Final = (
    f"""
CREATE TABLE flows_run_source (
  singleton SMALLINT NOT NULL PRIMARY KEY CHECK (singleton = 1),
  source TEXT NOT NULL CHECK (length(source) = 32 AND source !~ '[^0-9a-f]'),
  revision BIGINT NOT NULL CHECK ({_int("revision")})
);
INSERT INTO flows_run_source (singleton, source, revision)
  VALUES (1, replace(gen_random_uuid()::text, '-', ''), 0);

CREATE TABLE flows_run_changes (
  run_id {_ID} NOT NULL PRIMARY KEY CHECK ({_text("run_id")}),
  revision BIGINT NOT NULL UNIQUE CHECK (revision > 0 AND revision <= {_MAX}),
  deleted SMALLINT NOT NULL CHECK (deleted IN (0, 1))
);

ALTER TABLE flows_runs ADD COLUMN cancel_acknowledgement_json TEXT CHECK (
  cancel_acknowledgement_json IS NULL OR {_json("cancel_acknowledgement_json")}
);

-- Existing runs get revisions 1..n in creation order, before any trigger exists.
INSERT INTO flows_run_changes (run_id, revision, deleted)
  SELECT run_id, ROW_NUMBER() OVER (ORDER BY created_at_ms, run_id), 0 FROM flows_runs;
UPDATE flows_run_source SET revision = (SELECT count(*) FROM flows_runs) WHERE singleton = 1;
"""
    + _REVISION_FUNCTION
    + _revision_trigger("insert")
    + _revision_trigger("update")
    + _revision_trigger("delete")
    + """
CREATE FUNCTION flows_runs_identity_immutable() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'run identity is immutable'
    USING ERRCODE = 'check_violation', CONSTRAINT = 'flows_runs_identity_immutable';
END
$$;
CREATE TRIGGER flows_runs_identity_immutable BEFORE UPDATE OF run_id ON flows_runs
  FOR EACH ROW WHEN (NEW.run_id IS DISTINCT FROM OLD.run_id)
  EXECUTE FUNCTION flows_runs_identity_immutable();
"""
)

_WAITING_REQUEST: Final = f"""
ALTER TABLE flows_runs ADD COLUMN waiting_request TEXT CHECK (
  waiting_request IS NULL OR {_json("waiting_request")}
);
"""

_CONSENSUS: Final = f"""
CREATE TABLE flows_consensus_leases (
  run_id {_ID} NOT NULL PRIMARY KEY CHECK ({_text("run_id")}),
  owner_host_id {_ID},
  owner_pid BIGINT CHECK ({_opt_int("owner_pid")}),
  owner_nonce {_ID},
  granted_at_ms BIGINT CHECK ({_opt_int("granted_at_ms")}),
  heartbeat_at_ms BIGINT CHECK ({_opt_int("heartbeat_at_ms")}),
  claim_host_id {_ID},
  claim_pid BIGINT CHECK ({_opt_int("claim_pid")}),
  claim_nonce {_ID},
  claimed_at_ms BIGINT CHECK ({_opt_int("claimed_at_ms")})
) WITH (fillfactor = 80);

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
  run_id {_ID} NOT NULL REFERENCES flows_runs (run_id) ON DELETE CASCADE
    CHECK ({_text("run_id")}),
  position BIGINT NOT NULL CHECK (position BETWEEN 1 AND {_MAX}),
  transition TEXT NOT NULL CHECK ({_TRANSITIONS}),
  owner_host_id {_ID} NOT NULL CHECK ({_text("owner_host_id")}),
  owner_pid BIGINT NOT NULL CHECK ({_int("owner_pid")}),
  owner_nonce {_ID} NOT NULL CHECK ({_text("owner_nonce")}),
  granted_at_ms BIGINT CHECK ({_opt_int("granted_at_ms")}),
  CHECK (granted_at_ms IS NOT NULL OR transition = 'released'),
  PRIMARY KEY (run_id, position)
);

-- The baseline for runs owned or claimed at upgrade time (see the SQLite step).
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

# As on SQLite: run state leaves the hot row (PostgreSQL would keep a large
# state out of line in TOAST, but every UPDATE of the row still writes a new
# row version; a small row keeps heartbeats cheap and HOT). DROP COLUMN fires
# no trigger, so the revision stays where it was.
_RUN_STATE: Final = f"""
CREATE TABLE flows_run_state (
  run_id {_ID} NOT NULL PRIMARY KEY REFERENCES flows_runs (run_id) ON DELETE CASCADE,
  state_json TEXT NOT NULL CHECK ({_json("state_json")})
);
INSERT INTO flows_run_state (run_id, state_json) SELECT run_id, state_json FROM flows_runs;
ALTER TABLE flows_runs DROP COLUMN state_json;
"""

# The SQLite step's indexes (runstore.sqlite._migrations, _FINDING_WORK), plus
# the two functions that write many runs in run id order: PostgreSQL applies
# an UPDATE's or DELETE's rows in the order of its plan, and the deferred
# revision trigger numbers row events in the order they happened.
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
ALTER TABLE flows_run_source ADD COLUMN compacted_through BIGINT NOT NULL DEFAULT 0
  CHECK ({_int("compacted_through")});

-- Renews the rows of the runs in renew_ids (to GREATEST(old, the matching
-- stamp)) that the given owner holds, one by one in run id order; answers how
-- many it wrote.
CREATE FUNCTION flows_renew_runs(
  renew_ids text[], renew_stamps bigint[], by_host text, by_pid bigint, by_nonce text
) RETURNS bigint LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  item record;
  wrote bigint := 0;
BEGIN
  FOR item IN
    SELECT u.id, u.stamp FROM unnest(renew_ids, renew_stamps) AS u(id, stamp)
    ORDER BY u.id COLLATE "C"
  LOOP
    UPDATE flows_runs SET heartbeat_at_ms = GREATEST(heartbeat_at_ms, item.stamp)
    WHERE run_id = item.id AND status = 'running'
      AND owner_host_id = by_host AND owner_pid = by_pid AND owner_nonce = by_nonce;
    IF FOUND THEN
      wrote := wrote + 1;
    END IF;
  END LOOP;
  RETURN wrote;
END
$$;

-- Deletes the runs in purge_ids one by one in run id order; answers how many.
CREATE FUNCTION flows_purge_runs(purge_ids text[])
RETURNS bigint LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  item text;
  deleted bigint := 0;
BEGIN
  FOR item IN SELECT u.id FROM unnest(purge_ids) AS u(id) ORDER BY u.id COLLATE "C" LOOP
    DELETE FROM flows_runs WHERE run_id = item;
    IF FOUND THEN
      deleted := deleted + 1;
    END IF;
  END LOOP;
  RETURN deleted;
END
$$;
"""

# heartbeat_many and purge_settled write thousands of runs in one
# transaction; one deferred trigger event per row then costs more than the
# writes (each bumps the one counter row again). So the revision triggers skip
# the row events of a transaction that set ``runstore.revisions`` to "bulk"
# (a constraint trigger's WHEN is judged when the row is written, so such
# events are never queued), and the two batch functions write set-based and
# number their runs themselves, in run id order, with one counter update.
_BULK_REVISIONS: Final = (
    "".join(
        f"""
DROP TRIGGER flows_runs_revision_{event} ON flows_runs;
CREATE CONSTRAINT TRIGGER flows_runs_revision_{event} AFTER {event.upper()} ON flows_runs
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
  WHEN (current_setting('runstore.revisions', true) IS DISTINCT FROM 'bulk')
  EXECUTE FUNCTION flows_runs_revision();
"""
        for event in ("insert", "update", "delete")
    )
    + """
-- The next revisions for the runs in ids (sorted here), one each in run id
-- order, recorded as their latest changes (deleted: their tombstones).
CREATE FUNCTION flows_number_runs(ids text[], gone smallint)
RETURNS void LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  counted bigint := coalesce(array_length(ids, 1), 0);
  base bigint;
BEGIN
  IF counted = 0 THEN
    RETURN;
  END IF;
  UPDATE flows_run_source SET revision = revision + counted WHERE singleton = 1
    RETURNING revision - counted INTO base;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'execution source identity is missing'
      USING ERRCODE = 'check_violation', CONSTRAINT = 'flows_run_source_identity';
  END IF;
  INSERT INTO flows_run_changes (run_id, revision, deleted)
    SELECT u.id, base + ROW_NUMBER() OVER (ORDER BY u.id COLLATE "C"), gone
    FROM unnest(ids) AS u(id)
    ON CONFLICT (run_id) DO UPDATE SET revision = excluded.revision, deleted = excluded.deleted;
END
$$;

CREATE OR REPLACE FUNCTION flows_renew_runs(
  renew_ids text[], renew_stamps bigint[], by_host text, by_pid bigint, by_nonce text
) RETURNS bigint LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  written text[];
BEGIN
  PERFORM set_config('runstore.revisions', 'bulk', true);
  WITH renewed AS (
    UPDATE flows_runs AS r SET heartbeat_at_ms = GREATEST(r.heartbeat_at_ms, u.stamp)
    FROM unnest(renew_ids, renew_stamps) AS u(id, stamp)
    WHERE r.run_id = u.id AND r.status = 'running'
      AND r.owner_host_id = by_host AND r.owner_pid = by_pid AND r.owner_nonce = by_nonce
    RETURNING r.run_id
  )
  SELECT array_agg(run_id) INTO written FROM renewed;
  PERFORM set_config('runstore.revisions', '', true);
  PERFORM flows_number_runs(written, 0::smallint);
  RETURN coalesce(array_length(written, 1), 0);
END
$$;

-- The one-round-trip heartbeat_many (migration 2004's, same answers), set
-- based: the leases in one UPDATE, the rows in another, numbered at once.
CREATE OR REPLACE FUNCTION flows_op_heartbeat_many(
  p_ids text[], p_host text, p_pid bigint, p_nonce text, p_now bigint
) RETURNS TABLE (run_id text, outcome text)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
  v_ids text[];
  v_stamps bigint[];
BEGIN
  PERFORM 1 FROM flows_runs AS r WHERE r.run_id = ANY(p_ids) ORDER BY r.run_id FOR UPDATE;
  WITH renewed AS (
    UPDATE flows_consensus_leases AS l
    SET heartbeat_at_ms = GREATEST(COALESCE(l.heartbeat_at_ms, p_now), p_now)
    WHERE l.run_id = ANY(p_ids) AND l.owner_host_id = p_host AND l.owner_pid = p_pid
      AND l.owner_nonce = p_nonce
    RETURNING l.run_id AS id, l.heartbeat_at_ms AS stamp
  )
  SELECT array_agg(renewed.id), array_agg(renewed.stamp) INTO v_ids, v_stamps FROM renewed;
  PERFORM flows_renew_runs(v_ids, v_stamps, p_host, p_pid, p_nonce);
  RETURN QUERY
    SELECT u.id::text,
           CASE WHEN r.run_id IS NULL THEN 'not_found'
                WHEN r.status = 'running' AND r.owner_host_id = p_host AND r.owner_pid = p_pid
                     AND r.owner_nonce = p_nonce AND w.id IS NOT NULL THEN 'updated'
                ELSE 'fence_lost' END
    FROM unnest(p_ids) AS u(id)
    LEFT JOIN flows_runs AS r ON r.run_id = u.id
    LEFT JOIN unnest(v_ids) AS w(id) ON w.id = u.id
    ORDER BY u.id COLLATE "C";
END
$$;

CREATE OR REPLACE FUNCTION flows_purge_runs(purge_ids text[])
RETURNS bigint LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  gone_ids text[];
BEGIN
  PERFORM set_config('runstore.revisions', 'bulk', true);
  WITH gone AS (
    DELETE FROM flows_runs AS r USING unnest(purge_ids) AS u(id)
    WHERE r.run_id = u.id RETURNING r.run_id
  )
  SELECT array_agg(run_id) INTO gone_ids FROM gone;
  PERFORM set_config('runstore.revisions', '', true);
  PERFORM flows_number_runs(gone_ids, 1::smallint);
  RETURN coalesce(array_length(gone_ids, 1), 0);
END
$$;
"""
)

# -- migration 2004, second part: one CHECK per hot table ------------------------
#
# PostgreSQL compiles a table's CHECK expressions afresh for every statement
# that writes it; for flows_runs' nineteen that cost several times the rest of a
# single-row UPDATE. Here each hot table's CHECKs become one CHECK calling a
# plpgsql function (compiled once per session) that evaluates the very same
# expressions, each NULL counted as a pass, as a CHECK counts it. Rows that
# were admitted stay admitted and rows that were refused stay refused; a
# refusal is still SQLSTATE 23514, under the table's one constraint name.


def _row_function(
    table: str, columns: list[tuple[str, str]], terms: list[str], *, verb: str = "CREATE"
) -> str:
    """A table's row-check function: the AND of ``terms`` over the columns."""
    arguments = ", ".join(f"{column} {kind}" for column, kind in columns)
    body = "\n    AND ".join(terms)
    return f"""
{verb} FUNCTION {table}_row_valid({arguments}) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE SET search_path FROM CURRENT AS $$
BEGIN
  RETURN {body};
END
$$;
"""


def _one_check(
    table: str, dropped: list[str], columns: list[tuple[str, str]], checks: list[str]
) -> str:
    drops = ",\n  ".join(f"DROP CONSTRAINT {constraint}" for constraint in dropped)
    call = ", ".join(column for column, _kind in columns)
    terms = [f"COALESCE(({check}), true)" for check in checks]
    return (
        _row_function(table, columns, terms)
        + f"""ALTER TABLE {table}
  {drops},
  ADD CONSTRAINT {table}_valid CHECK ({table}_row_valid({call}));
"""
    )


_RUN_CHECKED: Final = [
    ("run_id", "text", _text("run_id")),
    ("status", "text", _STATUSES),
    ("created_at_ms", "bigint", _int("created_at_ms")),
    ("started_at_ms", "bigint", _opt_int("started_at_ms")),
    ("finished_at_ms", "bigint", _opt_int("finished_at_ms")),
    ("heartbeat_at_ms", "bigint", _opt_int("heartbeat_at_ms")),
    ("claimed_at_ms", "bigint", _opt_int("claimed_at_ms")),
    ("parent_run_id", "text", _opt_text("parent_run_id")),
    ("cancel_requested_at_ms", "bigint", _opt_int("cancel_requested_at_ms")),
    ("waiting_reason", "text", _opt_text("waiting_reason")),
    ("waiting_wake_at_ms", "bigint", _opt_int("waiting_wake_at_ms")),
    ("waiting_token", "text", _opt_text("waiting_token")),
    ("lineage_id", "text", _opt_text("lineage_id")),
    ("round_ordinal", "bigint", _opt_int("round_ordinal")),
    (
        "cancel_acknowledgement_json",
        "text",
        f"cancel_acknowledgement_json IS NULL OR {_json('cancel_acknowledgement_json')}",
    ),
    ("waiting_request", "text", f"waiting_request IS NULL OR {_json('waiting_request')}"),
]
#: The owner and claim columns, tested only by the rules that tie them together.
_RUN_IDENTITY_COLUMNS: Final = [
    ("owner_host_id", "text"),
    ("owner_pid", "bigint"),
    ("owner_nonce", "text"),
    ("claim_host_id", "text"),
    ("claim_pid", "bigint"),
    ("claim_nonce", "text"),
]
_RUN_RULES: Final = [_OWNERSHIP_CHECK, _CLAIM_CHECK, _WAITING_CHECK]
_RUN_ROW_CHECKS: Final = _one_check(
    "flows_runs",
    [f"flows_runs_{column}_check" for column, _kind, _check in _RUN_CHECKED]
    + ["flows_runs_ownership", "flows_runs_claim", "flows_runs_waiting"],
    [(column, kind) for column, kind, _check in _RUN_CHECKED] + _RUN_IDENTITY_COLUMNS,
    [check for _column, _kind, check in _RUN_CHECKED] + _RUN_RULES,
)

_LEASE_CHECKED: Final = [
    ("run_id", "text", _text("run_id")),
    ("owner_pid", "bigint", _opt_int("owner_pid")),
    ("granted_at_ms", "bigint", _opt_int("granted_at_ms")),
    ("heartbeat_at_ms", "bigint", _opt_int("heartbeat_at_ms")),
    ("claim_pid", "bigint", _opt_int("claim_pid")),
    ("claimed_at_ms", "bigint", _opt_int("claimed_at_ms")),
]
_CHANGE_CHECKED: Final = [
    ("run_id", "text", _text("run_id")),
    ("revision", "bigint", f"revision > 0 AND revision <= {_MAX}"),
    ("deleted", "smallint", "deleted IN (0, 1)"),
]
_SOURCE_CHECKED: Final = [
    ("singleton", "smallint", "singleton = 1"),
    ("source", "text", "length(source) = 32 AND source !~ '[^0-9a-f]'"),
    ("revision", "bigint", _int("revision")),
    ("compacted_through", "bigint", _int("compacted_through")),
]
_FACT_CHECKED: Final = [
    ("run_id", "text", _text("run_id")),
    ("transition", "text", _TRANSITIONS),
    ("owner_host_id", "text", _text("owner_host_id")),
    ("owner_pid", "bigint", _int("owner_pid")),
    ("owner_nonce", "text", _text("owner_nonce")),
    ("granted_at_ms", "bigint", _opt_int("granted_at_ms")),
]


def _simple(table: str, checked: list[tuple[str, str, str]], extra: list[str]) -> str:
    return _one_check(
        table,
        [f"{table}_{column}_check" for column, _kind, _check in checked] + extra,
        [(column, kind) for column, kind, _check in checked],
        [check for _column, _kind, check in checked],
    )


_FACT_RULES: Final = [
    f"fact_position BETWEEN 1 AND {_MAX}",
    "granted_at_ms IS NOT NULL OR transition = 'released'",
]
_FACT_ROW_CHECKS: Final = _one_check(
    "flows_ownership_facts",
    [f"flows_ownership_facts_{column}_check" for column, _kind, _check in _FACT_CHECKED]
    + ["flows_ownership_facts_position_check", "flows_ownership_facts_check"],
    [(column, kind) for column, kind, _check in _FACT_CHECKED] + [("fact_position", "bigint")],
    [check for _column, _kind, check in _FACT_CHECKED] + _FACT_RULES,
).replace(
    "flows_ownership_facts_row_valid(run_id, transition, owner_host_id, owner_pid, "
    "owner_nonce, granted_at_ms, fact_position)",
    "flows_ownership_facts_row_valid(run_id, transition, owner_host_id, owner_pid, "
    "owner_nonce, granted_at_ms, position)",
)

ONE_CHECK_PER_TABLE: Final = (
    _RUN_ROW_CHECKS
    + _simple("flows_consensus_leases", _LEASE_CHECKED, [])
    + _simple("flows_run_changes", _CHANGE_CHECKED, [])
    + _simple("flows_run_source", _SOURCE_CHECKED, [])
    + _FACT_ROW_CHECKS
)


# Migration 2006: the same row checks, cheaper to run. PostgreSQL evaluates a
# plpgsql function's RETURN expression through a plan kept for the session,
# but builds its evaluation state again in every transaction, and each of the
# store's writes is a transaction of its own: the expression's size is paid
# on every write. A CHECK fails only when its condition is false, never when
# it is NULL, and an AND is false exactly when one of its terms is false, so
# the terms need no COALESCE(..., true) around them, and a nullable column's
# test needs no "IS NULL OR" (a NULL makes its term NULL, which fails
# nothing). The tests of columns that must not be NULL, and the ownership,
# claim and waiting rules, keep their IS NOT NULL. Every function keeps its
# pinned search path, although most call only built-ins: a writer's session
# must not be able to change what length() or BETWEEN means to a CHECK (its
# own functions, earlier in its path than pg_catalog, would otherwise win).


def _lean(column: str, check: str) -> str:
    """A column's test as a term of the AND chain (see above)."""
    if check == _opt_int(column):
        return f"{column} BETWEEN 0 AND {_MAX}"
    if check == _opt_text(column):
        return f"length({column}) > 0"
    return check


def _lean_check(table: str, columns: list[tuple[str, str]], checks: list[str]) -> str:
    terms = [f"({check})" for check in checks]
    return _row_function(table, columns, terms, verb="CREATE OR REPLACE")


def _lean_simple(table: str, checked: list[tuple[str, str, str]], extra: list[str]) -> str:
    return _lean_check(
        table,
        [(column, kind) for column, kind, _check in checked],
        [_lean(column, check) for column, _kind, check in checked] + extra,
    )


#: Each hot table's row check after 2006: its columns (as the function's
#: arguments) and the terms of its AND chain.
_LEAN_TABLES: Final = [
    (
        "flows_runs",
        [(column, kind) for column, kind, _check in _RUN_CHECKED] + _RUN_IDENTITY_COLUMNS,
        [_lean(column, check) for column, _kind, check in _RUN_CHECKED] + _RUN_RULES,
    ),
    *(
        (
            table,
            [(column, kind) for column, kind, _check in checked],
            [_lean(column, check) for column, _kind, check in checked],
        )
        for table, checked in (
            ("flows_consensus_leases", _LEASE_CHECKED),
            ("flows_run_changes", _CHANGE_CHECKED),
            ("flows_run_source", _SOURCE_CHECKED),
        )
    ),
    (
        "flows_ownership_facts",
        [(column, kind) for column, kind, _check in _FACT_CHECKED] + [("fact_position", "bigint")],
        [_lean(column, check) for column, _kind, check in _FACT_CHECKED] + _FACT_RULES,
    ),
]

_LEAN_CHECKS: Final = "".join(
    _lean_check(table, columns, terms) for table, columns, terms in _LEAN_TABLES
)


# Migration 2008: cheaper row checks still, no less safe.
#
# - Each reads the row whole. A CHECK's expression is stored as a node tree,
#   read back and set up by every statement that writes the table, so its
#   size is paid on every write: a call with an argument per column (22 for
#   flows_runs) costs more to read and to call than one whose only argument
#   is the row.
# - None pins a search path. Entering a function that sets one saves and
#   restores the setting and recomputes the path, on every call: about half
#   of what a row check's call costs. Each function and operator a check
#   uses is named in pg_catalog instead, and the row's type is bound when
#   the function is created, so a writer's session still cannot put its own
#   length() or operators in front of what a check means (a test tries).
# - The runs' two JSON columns are parsed by the function itself, with
#   pg_catalog's json, and only when they are not NULL (an exception block
#   costs a subtransaction each time it is entered). flows_json_valid, which
#   a CHECK names by its identity, now names pg_catalog's json too.
#
# Each function's terms are 2006's, rewritten as above, so the rows admitted
# are the same. Counted with callgrind on the server, a create, a
# claim_and_own, a heartbeat and a steal together execute 17% fewer
# instructions than with 2006's functions.

#: The column an argument of a 2006 row check stands for, where they differ.
_ARGUMENT_COLUMNS: Final = {"fact_position": '"position"'}
#: The runs' JSON columns, which 2006 tested with flows_json_valid.
_RUN_JSON_COLUMNS: Final = [
    column
    for column, _kind, check in _RUN_CHECKED
    if check == f"{column} IS NULL OR {_json(column)}"
]
_OPERATOR: Final = re.compile(r" (=|<>|<=|>=|<|>|!~) ")
_BETWEEN: Final = re.compile(r"(\S+) BETWEEN (\S+) AND (\S+)")
_IN_LIST: Final = re.compile(r" IN \(([^()]*)\)")


def _catalog(term: str, columns: list[str]) -> str:
    """``term`` with each of ``columns`` read from ``p_row`` and every
    operator and function named in pg_catalog (quoted literals left alone)."""
    term = _IN_LIST.sub(r" = ANY (ARRAY[\1])", term)
    name = re.compile(r"\b(" + "|".join(columns) + r")\b")
    pieces = term.split("'")
    for index in range(0, len(pieces), 2):  # the pieces outside literals
        piece = name.sub(
            lambda found: "p_row." + _ARGUMENT_COLUMNS.get(found[1], found[1]), pieces[index]
        )
        piece = _BETWEEN.sub(r"(\1 >= \2 AND \1 <= \3)", piece)
        piece = _OPERATOR.sub(r" OPERATOR(pg_catalog.\1) ", piece)
        pieces[index] = piece.replace("length(", "pg_catalog.length(")
    return "'".join(pieces)


def _json_parse(column: str) -> str:
    """A function's statement that returns false when ``column`` is not JSON."""
    return f"""
  IF p_row.{column} IS NOT NULL THEN
    BEGIN
      PERFORM p_row.{column}::pg_catalog.json;
    EXCEPTION WHEN data_exception OR program_limit_exceeded THEN
      RETURN false;
    END;
  END IF;"""


def _whole_row_check(table: str, columns: list[tuple[str, str]], terms: list[str]) -> str:
    names = [column for column, _kind in columns]
    kinds = ", ".join(kind for _column, kind in columns)
    parsed = [column for column in _RUN_JSON_COLUMNS if table == "flows_runs"]
    moved = [f"{column} IS NULL OR {_json(column)}" for column in parsed]
    body = "\n    AND ".join(f"({_catalog(term, names)})" for term in terms if term not in moved)
    prologue = "".join(_json_parse(column) for column in parsed)
    return f"""
ALTER TABLE {table} DROP CONSTRAINT {table}_valid;
DROP FUNCTION {table}_row_valid({kinds});
CREATE FUNCTION {table}_row_valid(p_row {table}) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN{prologue}
  RETURN {body};
END
$$;
ALTER TABLE {table} ADD CONSTRAINT {table}_valid CHECK ({table}_row_valid({table}));
"""


_WHOLE_ROW_CHECKS: Final = _JSON_VALID.replace(
    "CREATE FUNCTION", "CREATE OR REPLACE FUNCTION"
).replace("document::json", "document::pg_catalog.json") + "".join(
    _whole_row_check(table, columns, terms) for table, columns, terms in _LEAN_TABLES
)

# purge_settled's lineage lookup reads only live rounds (see SQLite's step,
# runstore.sqlite._migrations, _LIVE_ROUNDS): the same index, the same
# predicate, which the candidate query's text implies.
_LIVE_ROUNDS: Final = """
CREATE INDEX flows_runs_live_rounds_idx ON flows_runs (lineage_id)
  WHERE lineage_id IS NOT NULL AND status NOT IN ('completed', 'failed', 'cancelled');
"""

# Migration 2014, second part: the three hot row checks again, admitting the
# same rows with fewer terms. plpgsql sets a function's expression up anew in
# every transaction, and each store write is a transaction of its own, so a
# check's size is paid on every write (about 15% of a claim_and_own's
# instructions went to the three checks). The integer columns' range tests
# become one LEAST and one GREATEST over the columns (both skip NULLs, as the
# AND chain let a NULL term pass), the optional texts' lengths one LEAST, and
# the ownership, claim and waiting rules count NULLs. NOT NULL columns keep
# their IS NOT NULL tests. Every operator and function is still named in
# pg_catalog (2008); tests/postgres/test_postgres_row_checks.py compares what
# the checks admit with the CHECKs of before 2004.


def _ge(term: str, bound: str) -> str:
    return f"{term} OPERATOR(pg_catalog.>=) {bound}"


def _le(term: str, bound: str) -> str:
    return f"{term} OPERATOR(pg_catalog.<=) {bound}"


def _in_range(columns: list[str]) -> str:
    listed = ", ".join(f"p_row.{column}" for column in columns)
    return f"{_ge(f'LEAST({listed})', '0')}\n    AND {_le(f'GREATEST({listed})', _MAX)}"


def _lengths(columns: list[str]) -> str:
    listed = ", ".join(f"pg_catalog.length(p_row.{column})" for column in columns)
    least = listed if len(columns) == 1 else f"LEAST({listed})"
    return f"{least} OPERATOR(pg_catalog.>) 0"


def _nulls(columns: list[str], count: int) -> str:
    listed = ", ".join(f"p_row.{column}" for column in columns)
    return f"pg_catalog.num_nulls({listed}) OPERATOR(pg_catalog.=) {count}"


_OWNER_COLUMNS: Final = ["owner_host_id", "owner_pid", "owner_nonce", "heartbeat_at_ms"]
_CLAIM_COLUMNS: Final = ["claim_host_id", "claim_pid", "claim_nonce", "claimed_at_ms"]
_RUN_STATUSES: Final = "'pending', 'running', 'suspended', 'completed', 'failed', 'cancelled'"
_RUN_INTEGERS: Final = [
    "created_at_ms",
    "started_at_ms",
    "finished_at_ms",
    "heartbeat_at_ms",
    "claimed_at_ms",
    "cancel_requested_at_ms",
    "waiting_wake_at_ms",
    "round_ordinal",
    "owner_pid",
    "claim_pid",
]
_RUN_TEXTS: Final = [
    "run_id",
    "parent_run_id",
    "waiting_reason",
    "waiting_token",
    "lineage_id",
    "owner_host_id",
    "owner_nonce",
    "claim_host_id",
    "claim_nonce",
]
_LEASE_INTEGERS: Final = [
    "owner_pid",
    "granted_at_ms",
    "heartbeat_at_ms",
    "claim_pid",
    "claimed_at_ms",
]

_LEANER_ROW_CHECKS: Final = f"""
CREATE OR REPLACE FUNCTION flows_runs_row_valid(p_row flows_runs) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN{"".join(_json_parse(column) for column in _RUN_JSON_COLUMNS)}
  RETURN p_row.run_id IS NOT NULL AND p_row.created_at_ms IS NOT NULL
    AND p_row.status OPERATOR(pg_catalog.=) ANY (ARRAY[{_RUN_STATUSES}])
    AND {_in_range(_RUN_INTEGERS)}
    AND {_lengths(_RUN_TEXTS)}
    AND CASE WHEN p_row.status OPERATOR(pg_catalog.=) 'running'
             THEN {_nulls(_OWNER_COLUMNS, 0)} ELSE {_nulls(_OWNER_COLUMNS, 4)} END
    AND ({_nulls(_CLAIM_COLUMNS, 0)} OR {_nulls(_CLAIM_COLUMNS, 4)})
    AND (p_row.waiting_reason IS NOT NULL
         OR {_nulls(["waiting_wake_at_ms", "waiting_token"], 2)});
END
$$;

CREATE OR REPLACE FUNCTION flows_consensus_leases_row_valid(p_row flows_consensus_leases)
RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
  RETURN p_row.run_id IS NOT NULL AND {_lengths(["run_id"])}
    AND {_in_range(_LEASE_INTEGERS)};
END
$$;

CREATE OR REPLACE FUNCTION flows_ownership_facts_row_valid(p_row flows_ownership_facts)
RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
  RETURN p_row.run_id IS NOT NULL AND p_row.owner_host_id IS NOT NULL
    AND p_row.owner_pid IS NOT NULL AND p_row.owner_nonce IS NOT NULL
    AND {_lengths(["run_id", "owner_host_id", "owner_nonce"])}
    AND p_row.transition OPERATOR(pg_catalog.=) ANY
        (ARRAY['claimed', 'activated', 'released', 'stolen', 'expired'])
    AND {_in_range(["owner_pid", "granted_at_ms"])}
    AND {_ge('p_row."position"', "1")} AND {_le('p_row."position"', _MAX)}
    AND (p_row.granted_at_ms IS NOT NULL OR p_row.transition OPERATOR(pg_catalog.=) 'released');
END
$$;
"""

# Migration 2015: the parent index holds only the runs that have a parent.
# It was a full index, so every run (most have none) kept a NULL entry in it,
# and every write that could not update its run row in place (a status
# change, a claim) inserted one more: a B-tree of every run's size to
# descend, its leaves cold in a large store (benchmarks/pg_growth.py). Every
# query that reads it names the column with =, which implies IS NOT NULL, so
# the partial index serves it, and the foreign key's check when a parent is
# purged. The lineage index, as full of NULLs, stays whole: made partial,
# the planner read a lineage's rounds through it instead of the live-rounds
# index and then chose a scan of the table for a purge's root test (1 000
# settled rounds of one lineage: 1 016 rows read for 5 candidates, not 10).
_PARTIAL_PARENT_INDEX: Final = """
DROP INDEX flows_runs_parent_run_id_idx;
CREATE INDEX flows_runs_parent_run_id_idx ON flows_runs (parent_run_id)
  WHERE parent_run_id IS NOT NULL;
"""

_TEXTS: Final = {
    1001: _INITIAL,
    1002: _LINEAGE,
    1003: _EXECUTION_REVISIONS,
    1004: _WAITING_REQUEST,
    6: _CONSENSUS,
    2001: _OWNERSHIP_FACTS,
    2002: _RUN_STATE,
    2003: _FINDING_WORK,
    2004: FUSED_OPERATIONS + ONE_CHECK_PER_TABLE,
    2005: _BULK_REVISIONS,
    2006: _LEAN_CHECKS,
    2007: CLAIM_NEXT_ONCE,
    2008: _WHOLE_ROW_CHECKS,
    2009: _LIVE_ROUNDS,
    2010: CHANGE_LOG,
    2011: CLAIM_NEXT_MANY,
    # SQLite's CHECKs without temporary tables: nothing to do here.
    2012: "",
    2013: _CANCEL_LINEAGE_ROOT_FIRST,
    2014: LEAN_OPERATIONS + _LEANER_ROW_CHECKS,
    2015: _PARTIAL_PARENT_INDEX,
    # SQLite's listing index per status: PostgreSQL's one status index stays.
    2016: "",
}

#: The chain: the shared history's ids and names, in its order, with PostgreSQL text.
MIGRATIONS: Final[tuple[Migration, ...]] = chain(_TEXTS)

_BOOKKEEPING: Final = """
CREATE TABLE IF NOT EXISTS flows_migrations (
  id BIGINT NOT NULL PRIMARY KEY,
  name TEXT NOT NULL UNIQUE
)
"""

# Relations of the selected schema (tables, views, sequences, foreign tables).
_RELATIONS: Final = """
SELECT count(*) FROM pg_catalog.pg_class AS c
JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f')
"""
_HAS_BOOKKEEPING: Final = """
SELECT 1 FROM pg_catalog.pg_tables
WHERE schemaname = current_schema() AND tablename = 'flows_migrations'
"""
#: Serializes migrators (and creators) of the schema named ``$1`` (advisory
#: locks are per database).
MIGRATION_LOCK: Final = (
    "SELECT pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext('runstore:' || $1::text))"
)

Execute = Callable[..., Any]


def _applied(execute: Execute) -> dict[int, str] | None:
    """The recorded migrations, or None when there is no bookkeeping table."""
    if execute(_HAS_BOOKKEEPING).fetchone() is None:
        return None
    rows = execute("SELECT id, name FROM flows_migrations").fetchall()
    return {int(row[0]): str(row[1]) for row in rows}


def check_applied(applied: dict[int, str] | None, execute: Execute) -> None:
    """Refuse a schema this version must not open."""
    if applied is None:
        relations = execute(_RELATIONS).fetchone()[0]
        if relations:
            raise SchemaRefused(
                "the schema is not a runstore schema", {"stage": "schema", "tables": relations}
            )
        return
    refuse_unknown(applied, "the schema is not a runstore schema")


def pending(execute: Execute) -> list[Migration]:
    """The migrations the schema still needs (after refusing a foreign schema)."""
    applied = _applied(execute)
    check_applied(applied, execute)
    done = applied or {}
    return [m for m in MIGRATIONS if m.id not in done]


def apply(execute: Execute, schema: str, count: int | None = None) -> None:
    """Bring the schema up to date (or up to the first ``count`` migrations).

    ``execute`` runs one statement on an autocommit connection whose search
    path selects ``schema``. Everything runs in one transaction, after the
    schema's advisory lock, re-reading what is recorded, so an upgrade is all
    or nothing and a process that waited for the lock finds the work done.
    """
    chain = MIGRATIONS if count is None else MIGRATIONS[:count]
    execute("BEGIN")
    try:
        execute(MIGRATION_LOCK, (schema,))
        applied = _applied(execute)
        check_applied(applied, execute)
        if applied is None:
            execute(_BOOKKEEPING)
            applied = {}
        for migration in chain:
            if migration.id in applied:
                continue
            execute(migration.sql)
            execute(
                "INSERT INTO flows_migrations (id, name) VALUES ($1::bigint, $2::text)",
                (migration.id, migration.name),
            )
    except BaseException:
        with contextlib.suppress(Exception):
            execute("ROLLBACK")
        raise
    execute("COMMIT")
