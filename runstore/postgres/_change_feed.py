"""Migration 2010: the change feed without a row every writer waits on.

Until 2009 every run-row write bumped the one revision row,
``flows_run_source``, from a deferred trigger at commit. PostgreSQL
releases a row lock only once the commit record is flushed, so each commit
held that row through its own WAL flush (and, with a synchronous standby,
through a round trip to it): commits queued one flush at a time and group
commit never formed (``benchmarks/pg_durable_scaling.py``: with the trigger
made a no-op, 8 durable writers on distinct runs did 3.2 times as many
heartbeats, at 0.37 WAL syncs per commit instead of 1.00).

Now the feed has two halves:

- **The log** (``flows_change_log``): a writer's row event appends an
  unnumbered entry, ``(seq, run_ids, deleted)``, whose ``seq`` is drawn
  from an identity column inside the writer's own transaction (a sequence:
  no row lock, never rolled back). A batch (``heartbeat_many``,
  ``purge_settled``) appends one entry holding its runs in run id order.
  No row is shared by all writers; before appending, a writer reads the
  source row without locking it, so a missing source or a counter at
  2**53 - 1 still refuses its commit.
- **The numbered feed** (``flows_run_changes`` and the counter in
  ``flows_run_source``, as before): ``flows_number_changes()`` numbers the
  log. It looks (one snapshot) whether any committed entry is waiting; if
  none is, it answers the counter and writes nothing. Otherwise it takes
  the counter's row lock and then, in later statements (each a fresh
  snapshot in ``READ COMMITTED``, so an entry another numberer took is gone
  and none is numbered twice), deletes every committed entry, numbers their
  runs ``counter + 1 ..`` in ``(seq, position in the entry)`` order, records
  each run's newest one in ``flows_run_changes`` and moves the counter, all
  in its one transaction. Only numberers wait for each other, and one
  numbering covers every commit before it.

``revision()`` and ``changes()`` number first (``changes()`` in the same
statement, ``flows_changes_after``), so a write acknowledged before either
began is numbered by it or by a numbering that committed before it looked:
the three properties of the feed hold (docs/guides/postgresql.md, "The
change feed"). A numbering's revisions all exceed the counter it locked,
which every revision any reader has seen is at or below. A writer also
numbers, without waiting, when its entry's ``seq`` is a multiple of 256 and
no one holds the counter (``SKIP LOCKED``), so the log stays short when no
one reads the feed; it then holds the counter through its own commit, as
every writer did before.

A read-only session (a store opened read-only, a hot standby) cannot
write, so it does not number: it answers the numbered prefix.

``compact_changes`` takes the counter's lock before it reads tombstones
(``flows_compact_candidates``), in the order a numberer takes its locks, so
the two never deadlock.
"""

from __future__ import annotations

from typing import Final

from .._constants import MAX_SAFE_INTEGER

_MAX = str(MAX_SAFE_INTEGER)

#: How many appended entries (by ``seq``) between a writer's attempts to number.
DRAIN_EVERY: Final = 256

# The refusal a writer's append makes when the source is missing or full: the
# constraint names the former triggers used, so errors are classified alike.
_SOURCE_GUARD: Final = f"""
  SELECT s.revision INTO v_revision FROM flows_run_source AS s WHERE s.singleton = 1;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'execution source identity is missing'
      USING ERRCODE = 'check_violation', CONSTRAINT = 'flows_run_source_identity';
  END IF;
  IF v_revision >= {_MAX} THEN
    RAISE EXCEPTION 'the revision would pass 2**53 - 1'
      USING ERRCODE = 'check_violation', CONSTRAINT = 'flows_run_source_valid';
  END IF;"""

CHANGE_LOG: Final = f"""
CREATE TABLE flows_change_log (
  seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  run_ids TEXT[] COLLATE "C" NOT NULL CHECK (cardinality(run_ids) > 0),
  deleted SMALLINT NOT NULL CHECK (deleted IN (0, 1))
);

-- Numbers every committed entry of the log (see runstore.postgres._change_feed)
-- and answers the revision; NULL when the source is missing. In a read-only
-- transaction it numbers nothing and answers the numbered prefix's revision.
CREATE FUNCTION flows_number_changes(p_wait boolean DEFAULT true) RETURNS bigint
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  v_base bigint;
  v_waiting boolean;
  v_count bigint;
BEGIN
  SELECT s.revision, EXISTS (SELECT 1 FROM flows_change_log)
    INTO v_base, v_waiting FROM flows_run_source AS s WHERE s.singleton = 1;
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;
  IF NOT v_waiting OR pg_catalog.current_setting('transaction_read_only') = 'on' THEN
    RETURN v_base;
  END IF;
  IF p_wait THEN
    SELECT s.revision INTO v_base FROM flows_run_source AS s WHERE s.singleton = 1 FOR UPDATE;
  ELSE
    SELECT s.revision INTO v_base FROM flows_run_source AS s WHERE s.singleton = 1
      FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
      RETURN NULL;
    END IF;
  END IF;
  WITH taken AS (
    DELETE FROM flows_change_log RETURNING seq, run_ids, deleted
  ), numbered AS (
    SELECT u.id, t.deleted,
           v_base + row_number() OVER (ORDER BY t.seq, u.position) AS revision
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
  IF v_count > 0 THEN
    UPDATE flows_run_source SET revision = v_base + v_count WHERE singleton = 1;
  END IF;
  RETURN v_base + v_count;
END
$$;

-- changes(after): number, then read the numbered feed in a fresh snapshot.
CREATE FUNCTION flows_changes_after(p_after bigint)
RETURNS TABLE (run_id text, revision bigint, deleted smallint)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
  PERFORM flows_number_changes();
  RETURN QUERY SELECT c.run_id::text, c.revision, c.deleted FROM flows_run_changes AS c
    WHERE c.revision > p_after ORDER BY c.revision;
END
$$;

-- compact_changes' candidates, read after taking the counter's lock (a
-- numberer's first lock), so compaction and numbering never deadlock.
CREATE FUNCTION flows_compact_candidates(p_through bigint, p_limit bigint)
RETURNS TABLE (run_id text, revision bigint)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
  PERFORM 1 FROM flows_run_source AS s WHERE s.singleton = 1 FOR UPDATE;
  RETURN QUERY SELECT c.run_id::text, c.revision FROM flows_run_changes AS c
    WHERE c.deleted = 1 AND c.revision <= p_through ORDER BY c.revision LIMIT p_limit;
END
$$;

-- A row event appends its entry; every {DRAIN_EVERY}th entry's writer numbers
-- the log if no one else is numbering.
CREATE OR REPLACE FUNCTION flows_runs_revision() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  v_revision bigint;
  v_seq bigint;
BEGIN{_SOURCE_GUARD}
  IF TG_OP = 'DELETE' THEN
    INSERT INTO flows_change_log (run_ids, deleted) VALUES (ARRAY[OLD.run_id], 1)
      RETURNING seq INTO v_seq;
  ELSE
    INSERT INTO flows_change_log (run_ids, deleted) VALUES (ARRAY[NEW.run_id], 0)
      RETURNING seq INTO v_seq;
  END IF;
  IF v_seq % {DRAIN_EVERY} = 0 THEN
    PERFORM flows_number_changes(false);
  END IF;
  RETURN NULL;
END
$$;

-- A batch's runs (sorted here) as one entry, in run id order.
CREATE OR REPLACE FUNCTION flows_number_runs(ids text[], gone smallint)
RETURNS void LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  v_revision bigint;
  v_seq bigint;
BEGIN
  IF coalesce(array_length(ids, 1), 0) = 0 THEN
    RETURN;
  END IF;{_SOURCE_GUARD}
  INSERT INTO flows_change_log (run_ids, deleted)
    SELECT array_agg(u.id ORDER BY u.id COLLATE "C"), gone FROM unnest(ids) AS u(id)
    RETURNING seq INTO v_seq;
  IF v_seq % {DRAIN_EVERY} = 0 THEN
    PERFORM flows_number_changes(false);
  END IF;
END
$$;
"""
