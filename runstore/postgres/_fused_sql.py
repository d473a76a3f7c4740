"""Migration 2004 on PostgreSQL: one server-side function per operation.

When a PostgreSQL store's strategy is exactly ``SqlConsensus``, each write
operation is one statement, ``SELECT * FROM flows_op_<operation>(...)``, run
as its own transaction: one round trip instead of one per statement of the
shared core plus ``BEGIN`` and ``COMMIT`` (``runstore.postgres._fused``).
Each function is a second implementation, in plpgsql, of the decision the
shared core (``runstore._sql._store``) and ``SqlConsensus`` make together
for that operation: the same compare-and-swap on the run row, the same
lease row changes (a lease with neither owner nor claim is deleted), the
same facts at the same positions, the same row writes (so the same
revisions). The conformance machines, the golden tests and the secret scan
run against both paths.

Conventions:

- Every function locks the run row first (``FOR UPDATE``), as the core's
  ``LOCK_RUN`` does, except where the core's first statement is the guarded
  UPDATE itself (``abandon_claim``).
- A strategy call that the core makes and can lose (the lease grant) is
  the first write, one guarded statement: where the core would roll the
  operation back (contract.md, Decided here 1), nothing has been written.
- Outcomes are returned as text tags (``claimed``, ``already_claimed``,
  ``heartbeat_fresh``, ``snapshot_changed``, ``not_found``, ...); the
  Python side maps each to its outcome value.
- A guarded UPDATE that misses a row the function admitted moments before
  raises SQLSTATE ``RS001`` (the core's ``write-invariant``).
- Parameters and variables are prefixed ``p_`` and ``v_``, so no name is
  ever a column's.
"""

from __future__ import annotations

import re
from typing import Final

from .._constants import MAX_SAFE_INTEGER
from ._change_feed import DRAIN_EVERY

#: The SQLSTATE of a guarded write that missed its row.
WRITE_INVARIANT: Final = "RS001"
#: The SQLSTATE of a one-round-trip ``claim_next`` whose row the server cannot
#: prove will decode: the claim rolled back, and the client decodes first.
DECODE_FIRST: Final = "RS002"
_MAX: Final = str(MAX_SAFE_INTEGER)

_HELPERS: Final = """
-- The loss a compare-and-swap reports when the row no longer admits it.
CREATE FUNCTION flows_op_loss(p_row flows_runs, p_cutoff bigint) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE
    WHEN p_row.claim_host_id IS NOT NULL THEN 'already_claimed'
    WHEN p_row.status = 'running' AND p_row.heartbeat_at_ms IS NOT NULL
         AND p_row.heartbeat_at_ms >= p_cutoff THEN 'heartbeat_fresh'
    ELSE 'snapshot_changed' END
$$;

-- Whether the row still is the caller's snapshot.
CREATE FUNCTION flows_op_is_snapshot(
  p_row flows_runs, p_status text, p_host text, p_pid bigint, p_nonce text, p_heartbeat bigint
) RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
  SELECT p_row.status = p_status
    AND p_row.owner_host_id IS NOT DISTINCT FROM p_host
    AND p_row.owner_pid IS NOT DISTINCT FROM p_pid
    AND p_row.owner_nonce IS NOT DISTINCT FROM p_nonce
    AND p_row.heartbeat_at_ms IS NOT DISTINCT FROM p_heartbeat
$$;

-- (plpgsql, not SQL: a SQL function that cannot be inlined is planned
-- again at every call, a plpgsql function's statements once per session.)
-- Appends one fact, one past the run's last.
CREATE FUNCTION flows_op_fact(
  p_run text, p_transition text, p_host text, p_pid bigint, p_nonce text, p_granted bigint
) RETURNS void LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
  INSERT INTO flows_ownership_facts
    (run_id, position, transition, owner_host_id, owner_pid, owner_nonce, granted_at_ms)
  SELECT p_run, COALESCE(MAX(f.position), 0) + 1, p_transition, p_host, p_pid, p_nonce,
         p_granted
  FROM flows_ownership_facts AS f WHERE f.run_id = p_run;
END
$$;

CREATE FUNCTION flows_op_write_invariant(p_run text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'guarded update missed a row it had admitted' USING ERRCODE = 'RS001';
END
$$;

-- SqlConsensus.activate: the claim (p_host, p_pid, p_nonce, p_granted)
-- becomes the owner, renewed at p_now.
CREATE FUNCTION flows_op_promote(
  p_run text, p_host text, p_pid bigint, p_nonce text, p_granted bigint, p_now bigint
) RETURNS boolean LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
  UPDATE flows_consensus_leases
  SET owner_host_id = p_host, owner_pid = p_pid, owner_nonce = p_nonce,
      granted_at_ms = p_granted, heartbeat_at_ms = p_now,
      claim_host_id = NULL, claim_pid = NULL, claim_nonce = NULL, claimed_at_ms = NULL
  WHERE run_id = p_run AND claim_host_id = p_host AND claim_pid = p_pid
    AND claim_nonce = p_nonce AND claimed_at_ms = p_granted;
  RETURN FOUND;
END
$$;

-- SqlConsensus.release_claim: drop exactly that claim; prune an empty lease.
CREATE FUNCTION flows_op_release_claim(
  p_run text, p_host text, p_pid bigint, p_nonce text, p_granted bigint
) RETURNS void LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  v_owner text;
BEGIN
  UPDATE flows_consensus_leases
  SET claim_host_id = NULL, claim_pid = NULL, claim_nonce = NULL, claimed_at_ms = NULL
  WHERE run_id = p_run AND claim_host_id = p_host AND claim_pid = p_pid
    AND claim_nonce = p_nonce AND claimed_at_ms = p_granted
  RETURNING owner_host_id INTO v_owner;
  IF FOUND AND v_owner IS NULL THEN
    DELETE FROM flows_consensus_leases
    WHERE run_id = p_run AND owner_host_id IS NULL AND claim_host_id IS NULL;
  END IF;
END
$$;

-- The row's claim columns cleared where they hold exactly that claim.
CREATE FUNCTION flows_op_clear_claim(
  p_run text, p_host text, p_pid bigint, p_nonce text, p_granted bigint
) RETURNS boolean LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
  UPDATE flows_runs
  SET claim_host_id = NULL, claim_pid = NULL, claim_nonce = NULL, claimed_at_ms = NULL
  WHERE run_id = p_run AND claim_host_id IS NOT DISTINCT FROM p_host
    AND claim_pid IS NOT DISTINCT FROM p_pid AND claim_nonce IS NOT DISTINCT FROM p_nonce
    AND claimed_at_ms IS NOT DISTINCT FROM p_granted;
  RETURN FOUND;
END
$$;
"""

_CLAIM: Final = """
CREATE FUNCTION flows_op_claim(
  p_run text, p_status text, p_owner_host text, p_owner_pid bigint, p_owner_nonce text,
  p_heartbeat bigint, p_cutoff bigint, p_host text, p_pid bigint, p_nonce text, p_now bigint
) RETURNS text LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  v_row flows_runs;
BEGIN
  SELECT * INTO v_row FROM flows_runs WHERE run_id = p_run FOR UPDATE;
  IF NOT FOUND THEN
    RETURN 'not_found';
  END IF;
  IF NOT (v_row.status IN ('pending', 'suspended')
          AND flows_op_is_snapshot(v_row, p_status, p_owner_host, p_owner_pid,
                                   p_owner_nonce, p_heartbeat)
          AND v_row.claim_host_id IS NULL AND v_row.claim_pid IS NULL
          AND v_row.claim_nonce IS NULL AND v_row.claimed_at_ms IS NULL) THEN
    RETURN flows_op_loss(v_row, p_cutoff);
  END IF;
  -- SqlConsensus.claim: granted when there is no lease, or an empty one.
  INSERT INTO flows_consensus_leases AS l
    (run_id, claim_host_id, claim_pid, claim_nonce, claimed_at_ms)
  VALUES (p_run, p_host, p_pid, p_nonce, p_now)
  ON CONFLICT (run_id) DO UPDATE SET
    claim_host_id = excluded.claim_host_id, claim_pid = excluded.claim_pid,
    claim_nonce = excluded.claim_nonce, claimed_at_ms = excluded.claimed_at_ms
  WHERE l.claim_host_id IS NULL AND l.owner_host_id IS NULL;
  IF NOT FOUND THEN
    RETURN flows_op_loss(v_row, p_cutoff);  -- the strategy is authoritative
  END IF;
  UPDATE flows_runs
  SET claim_host_id = p_host, claim_pid = p_pid, claim_nonce = p_nonce, claimed_at_ms = p_now
  WHERE run_id = p_run;
  PERFORM flows_op_fact(p_run, 'claimed', p_host, p_pid, p_nonce, p_now);
  RETURN 'claimed';
END
$$;
"""

_STEAL: Final = """
CREATE FUNCTION flows_op_steal(
  p_run text, p_status text, p_owner_host text, p_owner_pid bigint, p_owner_nonce text,
  p_heartbeat bigint, p_cutoff bigint, p_host text, p_pid bigint, p_nonce text, p_now bigint
) RETURNS text LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  v_row flows_runs;
BEGIN
  SELECT * INTO v_row FROM flows_runs WHERE run_id = p_run FOR UPDATE;
  IF NOT FOUND THEN
    RETURN 'not_found';
  END IF;
  IF NOT (flows_op_is_snapshot(v_row, p_status, p_owner_host, p_owner_pid,
                               p_owner_nonce, p_heartbeat)
          AND v_row.claim_host_id IS NULL AND v_row.claim_pid IS NULL
          AND v_row.claim_nonce IS NULL AND v_row.claimed_at_ms IS NULL
          AND v_row.heartbeat_at_ms IS NOT NULL AND v_row.heartbeat_at_ms < p_cutoff) THEN
    RETURN flows_op_loss(v_row, p_cutoff);
  END IF;
  -- SqlConsensus.steal (the evidence checked by the caller): the owner
  -- named, no claim, heartbeat stale.
  UPDATE flows_consensus_leases
  SET claim_host_id = p_host, claim_pid = p_pid, claim_nonce = p_nonce, claimed_at_ms = p_now
  WHERE run_id = p_run AND owner_host_id = p_owner_host AND owner_pid = p_owner_pid
    AND owner_nonce = p_owner_nonce AND claim_host_id IS NULL
    AND heartbeat_at_ms IS NOT NULL AND heartbeat_at_ms < p_cutoff;
  IF NOT FOUND THEN
    RETURN flows_op_loss(v_row, p_cutoff);
  END IF;
  UPDATE flows_runs
  SET claim_host_id = p_host, claim_pid = p_pid, claim_nonce = p_nonce, claimed_at_ms = p_now
  WHERE run_id = p_run;
  PERFORM flows_op_fact(p_run, 'stolen', p_host, p_pid, p_nonce, p_now);
  RETURN 'claimed';
END
$$;
"""

# p_mode: 'claim' (no previous owner), 'reown' (the previous owner is the
# claimant itself) or 'steal' (another owner, matching evidence checked).
_CLAIM_AND_OWN: Final = """
CREATE FUNCTION flows_op_claim_and_own(
  p_run text, p_status text, p_owner_host text, p_owner_pid bigint, p_owner_nonce text,
  p_heartbeat bigint, p_cutoff bigint, p_host text, p_pid bigint, p_nonce text, p_now bigint,
  p_mode text
) RETURNS text LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  v_row flows_runs;
BEGIN
  SELECT * INTO v_row FROM flows_runs WHERE run_id = p_run FOR UPDATE;
  IF NOT FOUND THEN
    RETURN 'not_found';
  END IF;
  IF NOT (v_row.status IN ('pending', 'suspended', 'running')
          AND flows_op_is_snapshot(v_row, p_status, p_owner_host, p_owner_pid,
                                   p_owner_nonce, p_heartbeat)
          AND v_row.claim_host_id IS NULL AND v_row.claim_pid IS NULL
          AND v_row.claim_nonce IS NULL AND v_row.claimed_at_ms IS NULL
          AND (v_row.status <> 'running' OR v_row.heartbeat_at_ms IS NULL
               OR v_row.heartbeat_at_ms < p_cutoff)) THEN
    RETURN flows_op_loss(v_row, p_cutoff);
  END IF;
  -- The strategy's grant and activation, as one lease write that leaves
  -- what they leave (owned by the claimant since p_now, renewed at p_now, no
  -- claim), or none when the grant is refused: then nothing was written and
  -- the loss is the answer (a refused grant rolls the operation back).
  IF p_mode = 'steal' THEN
    -- SqlConsensus.steal: the owner named, no claim, heartbeat stale.
    UPDATE flows_consensus_leases
    SET owner_host_id = p_host, owner_pid = p_pid, owner_nonce = p_nonce,
        granted_at_ms = p_now, heartbeat_at_ms = p_now,
        claim_host_id = NULL, claim_pid = NULL, claim_nonce = NULL, claimed_at_ms = NULL
    WHERE run_id = p_run AND owner_host_id = p_owner_host AND owner_pid = p_owner_pid
      AND owner_nonce = p_owner_nonce AND claim_host_id IS NULL
      AND heartbeat_at_ms IS NOT NULL AND heartbeat_at_ms < p_cutoff;
  ELSE
    -- SqlConsensus.claim: no lease, or an empty one; re-owning one's own
    -- stale run releases the lease first.
    INSERT INTO flows_consensus_leases AS l
      (run_id, owner_host_id, owner_pid, owner_nonce, granted_at_ms, heartbeat_at_ms)
    VALUES (p_run, p_host, p_pid, p_nonce, p_now, p_now)
    ON CONFLICT (run_id) DO UPDATE SET
      owner_host_id = excluded.owner_host_id, owner_pid = excluded.owner_pid,
      owner_nonce = excluded.owner_nonce, granted_at_ms = excluded.granted_at_ms,
      heartbeat_at_ms = excluded.heartbeat_at_ms,
      claim_host_id = NULL, claim_pid = NULL, claim_nonce = NULL, claimed_at_ms = NULL
    WHERE (l.claim_host_id IS NULL AND l.owner_host_id IS NULL)
       OR (p_mode = 'reown' AND l.owner_host_id = p_host AND l.owner_pid = p_pid
           AND l.owner_nonce = p_nonce);
  END IF;
  IF NOT FOUND THEN
    RETURN flows_op_loss(v_row, p_cutoff);
  END IF;
  IF p_mode = 'reown' THEN
    INSERT INTO flows_ownership_facts
      (run_id, position, transition, owner_host_id, owner_pid, owner_nonce, granted_at_ms)
    SELECT p_run, m.last + v.step, v.transition, p_host, p_pid, p_nonce, v.granted
    FROM (SELECT COALESCE(MAX(f.position), 0) AS last
          FROM flows_ownership_facts AS f WHERE f.run_id = p_run) AS m,
         (VALUES (1, 'released', NULL::bigint), (2, 'claimed', p_now),
                 (3, 'activated', p_now)) AS v (step, transition, granted);
  ELSE
    INSERT INTO flows_ownership_facts
      (run_id, position, transition, owner_host_id, owner_pid, owner_nonce, granted_at_ms)
    SELECT p_run, m.last + v.step, v.transition, p_host, p_pid, p_nonce, p_now
    FROM (SELECT COALESCE(MAX(f.position), 0) AS last
          FROM flows_ownership_facts AS f WHERE f.run_id = p_run) AS m,
         (VALUES (1, CASE WHEN p_mode = 'steal' THEN 'stolen' ELSE 'claimed' END),
                 (2, 'activated')) AS v (step, transition);
  END IF;
  UPDATE flows_runs
  SET status = 'running', started_at_ms = COALESCE(started_at_ms, p_now),
      finished_at_ms = NULL,
      owner_host_id = p_host, owner_pid = p_pid, owner_nonce = p_nonce,
      heartbeat_at_ms = p_now
  WHERE run_id = p_run;
  RETURN 'activated';
END
$$;
"""

_ACTIVATE: Final = """
CREATE FUNCTION flows_op_activate(
  p_run text, p_status text, p_owner_host text, p_owner_pid bigint, p_owner_nonce text,
  p_heartbeat bigint, p_host text, p_pid bigint, p_nonce text, p_token bigint,
  p_activated_at bigint
) RETURNS text LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  v_row flows_runs;
BEGIN
  SELECT * INTO v_row FROM flows_runs WHERE run_id = p_run FOR UPDATE;
  IF NOT FOUND OR NOT (v_row.claim_host_id IS NOT DISTINCT FROM p_host
                       AND v_row.claim_pid IS NOT DISTINCT FROM p_pid
                       AND v_row.claim_nonce IS NOT DISTINCT FROM p_nonce
                       AND v_row.claimed_at_ms IS NOT DISTINCT FROM p_token) THEN
    RETURN 'claim_lost';  -- a foreign claim is never cleared
  END IF;
  IF NOT flows_op_is_snapshot(v_row, p_status, p_owner_host, p_owner_pid,
                              p_owner_nonce, p_heartbeat) THEN
    -- The claim stands but the snapshot moved: give the claim back.
    PERFORM flows_op_release_claim(p_run, p_host, p_pid, p_nonce, p_token);
    PERFORM flows_op_fact(p_run, 'released', p_host, p_pid, p_nonce, p_token);
    PERFORM flows_op_clear_claim(p_run, p_host, p_pid, p_nonce, p_token);
      RETURN 'snapshot_changed';
  END IF;
  IF NOT flows_op_promote(p_run, p_host, p_pid, p_nonce, p_token, p_activated_at) THEN
    -- The strategy no longer holds this claim: the row follows it.
    PERFORM flows_op_clear_claim(p_run, p_host, p_pid, p_nonce, p_token);
      RETURN 'claim_lost';
  END IF;
  UPDATE flows_runs
  SET status = 'running', started_at_ms = COALESCE(started_at_ms, p_activated_at),
      finished_at_ms = NULL,
      owner_host_id = p_host, owner_pid = p_pid, owner_nonce = p_nonce,
      heartbeat_at_ms = p_activated_at,
      claim_host_id = NULL, claim_pid = NULL, claim_nonce = NULL, claimed_at_ms = NULL
  WHERE run_id = p_run;
  PERFORM flows_op_fact(p_run, 'activated', p_host, p_pid, p_nonce, p_token);
  RETURN 'activated';
END
$$;
"""

_ABANDON_CLAIM: Final = """
CREATE FUNCTION flows_op_abandon_claim(
  p_run text, p_host text, p_pid bigint, p_nonce text, p_token bigint
) RETURNS text LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
  IF NOT flows_op_clear_claim(p_run, p_host, p_pid, p_nonce, p_token) THEN
    RETURN 'claim_lost';
  END IF;
  PERFORM flows_op_release_claim(p_run, p_host, p_pid, p_nonce, p_token);
  PERFORM flows_op_fact(p_run, 'released', p_host, p_pid, p_nonce, p_token);
  RETURN 'abandoned';
END
$$;
"""

_RECOVER_CLAIM: Final = """
CREATE FUNCTION flows_op_recover_claim(
  p_run text, p_host text, p_pid bigint, p_nonce text, p_token bigint, p_cutoff bigint
) RETURNS text LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  v_row flows_runs;
BEGIN
  SELECT * INTO v_row FROM flows_runs WHERE run_id = p_run FOR UPDATE;
  IF NOT FOUND THEN
    RETURN 'not_found';
  END IF;
  IF NOT (v_row.claim_host_id IS NOT DISTINCT FROM p_host
          AND v_row.claim_pid IS NOT DISTINCT FROM p_pid
          AND v_row.claim_nonce IS NOT DISTINCT FROM p_nonce
          AND v_row.claimed_at_ms IS NOT DISTINCT FROM p_token) THEN
    RETURN 'claim_changed';
  END IF;
  IF v_row.claimed_at_ms >= p_cutoff THEN
    RETURN 'claim_fresh';
  END IF;
  UPDATE flows_consensus_leases
  SET claim_host_id = NULL, claim_pid = NULL, claim_nonce = NULL, claimed_at_ms = NULL
  WHERE run_id = p_run AND claim_host_id = p_host AND claim_pid = p_pid
    AND claim_nonce = p_nonce AND claimed_at_ms = p_token AND claimed_at_ms < p_cutoff;
  IF NOT FOUND THEN
    RETURN 'claim_changed';  -- as the strategy knows it, the claim moved on
  END IF;
  DELETE FROM flows_consensus_leases
  WHERE run_id = p_run AND owner_host_id IS NULL AND claim_host_id IS NULL;
  IF NOT flows_op_clear_claim(p_run, p_host, p_pid, p_nonce, p_token) THEN
    PERFORM flows_op_write_invariant(p_run);
  END IF;
  PERFORM flows_op_fact(p_run, 'expired', p_host, p_pid, p_nonce, p_token);
  RETURN 'recovered';
END
$$;
"""

# p_reconfirm: the lease is renewed only while no claim is pending.
_RENEW: Final = """
CREATE FUNCTION flows_op_renew(
  p_run text, p_host text, p_pid bigint, p_nonce text, p_now bigint, p_reconfirm boolean
) RETURNS text LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  v_stamp bigint;
BEGIN
  PERFORM 1 FROM flows_runs WHERE run_id = p_run FOR UPDATE;
  UPDATE flows_consensus_leases
  SET heartbeat_at_ms = GREATEST(COALESCE(heartbeat_at_ms, p_now), p_now)
  WHERE run_id = p_run AND owner_host_id = p_host AND owner_pid = p_pid
    AND owner_nonce = p_nonce AND (NOT p_reconfirm OR claim_host_id IS NULL)
  RETURNING heartbeat_at_ms INTO v_stamp;
  IF FOUND THEN
    -- The row mirrors the lease's stamp; a renewed lease over a row this
    -- owner does not hold is reported, never hidden.
      UPDATE flows_runs SET heartbeat_at_ms = GREATEST(heartbeat_at_ms, v_stamp)
    WHERE run_id = p_run AND status = 'running' AND owner_host_id = p_host
      AND owner_pid = p_pid AND owner_nonce = p_nonce;
    IF FOUND THEN
          RETURN 'updated';
    END IF;
  END IF;
  PERFORM 1 FROM flows_runs WHERE run_id = p_run;
  RETURN CASE WHEN FOUND THEN 'fence_lost' ELSE 'not_found' END;
END
$$;
"""

# p_finished: the store clock's stamp for a terminal status, else NULL;
# p_state: the new run state, or NULL to keep it.
_TRANSITION_OWNED: Final = """
CREATE FUNCTION flows_op_transition_owned(
  p_run text, p_host text, p_pid bigint, p_nonce text, p_requirement text,
  p_status text, p_finished bigint, p_state text
) RETURNS text LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  v_row flows_runs;
BEGIN
  SELECT * INTO v_row FROM flows_runs WHERE run_id = p_run FOR UPDATE;
  IF NOT FOUND THEN
    RETURN 'not_found';
  END IF;
  IF NOT (v_row.status = 'running' AND v_row.owner_host_id = p_host
          AND v_row.owner_pid = p_pid AND v_row.owner_nonce = p_nonce) THEN
    RETURN 'fence_lost';
  END IF;
  IF (p_requirement IS NOT DISTINCT FROM 'absent' AND v_row.cancel_requested_at_ms IS NOT NULL)
     OR (p_requirement IS NOT DISTINCT FROM 'present'
         AND v_row.cancel_requested_at_ms IS NULL) THEN
    -- SqlConsensus.guard decides between the two losses.
    PERFORM 1 FROM flows_consensus_leases
    WHERE run_id = p_run AND owner_host_id = p_host AND owner_pid = p_pid
      AND owner_nonce = p_nonce;
    RETURN CASE WHEN FOUND THEN 'guard_failed' ELSE 'fence_lost' END;
  END IF;
  IF p_status = 'running' THEN
    PERFORM 1 FROM flows_consensus_leases
    WHERE run_id = p_run AND owner_host_id = p_host AND owner_pid = p_pid
      AND owner_nonce = p_nonce;
    IF NOT FOUND THEN
      RETURN 'fence_lost';
    END IF;
    UPDATE flows_runs SET status = 'running', finished_at_ms = NULL WHERE run_id = p_run;
  ELSE
    -- Settling: the guard and the release of the ownership in one statement.
    DELETE FROM flows_consensus_leases
    WHERE run_id = p_run AND owner_host_id = p_host AND owner_pid = p_pid
      AND owner_nonce = p_nonce;
    IF NOT FOUND THEN
      RETURN 'fence_lost';
    END IF;
    UPDATE flows_runs
    SET status = p_status, finished_at_ms = p_finished,
        owner_host_id = NULL, owner_pid = NULL, owner_nonce = NULL, heartbeat_at_ms = NULL,
        claim_host_id = NULL, claim_pid = NULL, claim_nonce = NULL, claimed_at_ms = NULL
    WHERE run_id = p_run;
  END IF;
  IF p_state IS NOT NULL THEN
    INSERT INTO flows_run_state (run_id, state_json) VALUES (p_run, p_state)
    ON CONFLICT (run_id) DO UPDATE SET state_json = excluded.state_json;
  END IF;
  IF p_status <> 'running' THEN
    PERFORM flows_op_fact(p_run, 'released', p_host, p_pid, p_nonce, NULL);
  END IF;
  RETURN 'transitioned';
END
$$;
"""

# Answers one row per id of p_ids (sorted, distinct): 'updated',
# 'fence_lost' or 'not_found'; the renewed rows are written in run id order.
_HEARTBEAT_MANY: Final = """
CREATE FUNCTION flows_op_heartbeat_many(
  p_ids text[], p_host text, p_pid bigint, p_nonce text, p_now bigint
) RETURNS TABLE (run_id text, outcome text)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
  v_id text;
  v_stamp bigint;
BEGIN
  PERFORM 1 FROM flows_runs AS r WHERE r.run_id = ANY(p_ids) ORDER BY r.run_id FOR UPDATE;
  FOR v_id IN SELECT u.id FROM unnest(p_ids) AS u(id) ORDER BY u.id COLLATE "C" LOOP
    run_id := v_id;
    UPDATE flows_consensus_leases AS l
    SET heartbeat_at_ms = GREATEST(COALESCE(l.heartbeat_at_ms, p_now), p_now)
    WHERE l.run_id = v_id AND l.owner_host_id = p_host AND l.owner_pid = p_pid
      AND l.owner_nonce = p_nonce
    RETURNING l.heartbeat_at_ms INTO v_stamp;
    IF FOUND THEN
      UPDATE flows_runs AS r SET heartbeat_at_ms = GREATEST(r.heartbeat_at_ms, v_stamp)
      WHERE r.run_id = v_id AND r.status = 'running' AND r.owner_host_id = p_host
        AND r.owner_pid = p_pid AND r.owner_nonce = p_nonce;
      IF FOUND THEN
        outcome := 'updated';
        RETURN NEXT;
        CONTINUE;
      END IF;
    END IF;
    PERFORM 1 FROM flows_runs AS r WHERE r.run_id = v_id;
    outcome := CASE WHEN FOUND THEN 'fence_lost' ELSE 'not_found' END;
    RETURN NEXT;
  END LOOP;
END
$$;
"""

# The oldest unclaimed run of the two statuses, claimed and activated as
# claim_and_own from its current snapshot would, returned as GET returns a
# row; no row when there is none. A run the strategy refuses (nothing was
# written) is passed over.
_CLAIM_NEXT: Final = """
CREATE FUNCTION flows_op_claim_next(
  p_status_a text, p_status_b text, p_host text, p_pid bigint, p_nonce text, p_now bigint,
  p_cutoff bigint
) RETURNS TABLE (
  run_id text, status text, created_at_ms bigint, started_at_ms bigint,
  finished_at_ms bigint, owner_host_id text, owner_pid bigint, owner_nonce text,
  heartbeat_at_ms bigint, claim_host_id text, claim_pid bigint, claim_nonce text,
  claimed_at_ms bigint, parent_run_id text, cancel_requested_at_ms bigint, lineage_id text,
  round_ordinal bigint, state_json text
) LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
  v_after_created bigint := -1;
  v_after_run text := '';
  v_pick record;
  v_outcome text;
BEGIN
  LOOP
    SELECT r.run_id AS id, r.status AS picked, r.created_at_ms AS created INTO v_pick
    FROM flows_runs AS r
    WHERE r.status IN ('pending', 'suspended') AND r.claim_host_id IS NULL
      AND r.status IN (p_status_a, p_status_b)
      AND (r.created_at_ms, r.run_id) > (v_after_created, v_after_run)
    ORDER BY r.created_at_ms, r.run_id LIMIT 1
    FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
      RETURN;
    END IF;
    v_outcome := flows_op_claim_and_own(
      v_pick.id, v_pick.picked, NULL, NULL, NULL, NULL, p_cutoff,
      p_host, p_pid, p_nonce, p_now, 'claim');
    IF v_outcome = 'activated' THEN
      RETURN QUERY
      SELECT r.run_id::text, r.status, r.created_at_ms, r.started_at_ms, r.finished_at_ms,
             r.owner_host_id::text, r.owner_pid, r.owner_nonce::text, r.heartbeat_at_ms,
             r.claim_host_id::text, r.claim_pid, r.claim_nonce::text, r.claimed_at_ms,
             r.parent_run_id::text, r.cancel_requested_at_ms, r.lineage_id::text,
             r.round_ordinal, s.state_json
      FROM flows_runs AS r LEFT JOIN flows_run_state AS s ON s.run_id = r.run_id
      WHERE r.run_id = v_pick.id;
      RETURN;
    END IF;
    IF v_outcome NOT IN ('already_claimed', 'heartbeat_fresh', 'snapshot_changed') THEN
      PERFORM flows_op_write_invariant(v_pick.id);
    END IF;
    -- The strategy refused this run: look after it.
    v_after_created := v_pick.created;
    v_after_run := v_pick.id;
  END LOOP;
END
$$;
"""

# request_cancel and request_cancel_lineage: the guarded write, then (only
# when it marked nothing) the rows that explain the miss, read afresh.
_CANCELLATION: Final = """
CREATE FUNCTION flows_op_request_cancel(p_run text, p_now bigint)
RETURNS TABLE (marked bigint, requested_at bigint, status text)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
#variable_conflict use_column
BEGIN
  UPDATE flows_runs AS r SET cancel_requested_at_ms = p_now
  WHERE r.run_id = p_run AND r.cancel_requested_at_ms IS NULL
    AND r.status NOT IN ('completed', 'failed', 'cancelled');
  IF FOUND THEN
      marked := 1;
    RETURN NEXT;
    RETURN;
  END IF;
  RETURN QUERY SELECT 0::bigint, r.cancel_requested_at_ms, r.status
  FROM flows_runs AS r WHERE r.run_id = p_run;
END
$$;

CREATE FUNCTION flows_op_request_cancel_lineage(p_run text, p_now bigint)
RETURNS TABLE (marked bigint, requested_at bigint, status text)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
  v_marked bigint;
  v_root text;
BEGIN
  SELECT count(*) INTO v_marked FROM flows_request_cancel_lineage(p_run, p_now);
  IF v_marked > 0 THEN
    marked := v_marked;
    RETURN NEXT;
    RETURN;
  END IF;
  SELECT COALESCE(r.lineage_id, r.run_id) INTO v_root FROM flows_runs AS r
  WHERE r.run_id = p_run;
  RETURN QUERY SELECT 0::bigint, r.cancel_requested_at_ms, r.status
  FROM flows_runs AS r
  WHERE r.lineage_id = v_root
     OR (r.run_id = v_root AND (r.lineage_id IS NULL OR r.lineage_id = v_root))
  ORDER BY COALESCE(r.round_ordinal, 0), r.run_id;
END
$$;
"""

# The revision step at commit in one statement instead of two (the same
# numbering: one revision per row event, in event order, under the source
# row's lock; a missing source still refuses the commit).
_REVISION_STEP: Final = """
CREATE OR REPLACE FUNCTION flows_runs_revision() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  v_changed text;
  v_gone smallint := 0;
BEGIN
  IF TG_OP = 'DELETE' THEN
    v_changed := OLD.run_id;
    v_gone := 1;
  ELSE
    v_changed := NEW.run_id;
  END IF;
  WITH bumped AS (
    UPDATE flows_run_source SET revision = revision + 1 WHERE singleton = 1
    RETURNING revision
  )
  INSERT INTO flows_run_changes (run_id, revision, deleted)
  SELECT v_changed, bumped.revision, v_gone FROM bumped
  ON CONFLICT (run_id) DO UPDATE SET revision = excluded.revision, deleted = excluded.deleted;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'execution source identity is missing'
      USING ERRCODE = 'check_violation', CONSTRAINT = 'flows_run_source_identity';
  END IF;
  RETURN NULL;
END
$$;
"""

# Migration 2007: claim_next in one round trip where the server can prove
# that the client will decode the claimed row. flows_op_claim_next's answer
# is decoded before COMMIT (two round trips), so that a run whose row no
# longer decodes is never claimed. flows_op_claim_next_once returns the same
# row from a statement that commits by itself, but only when every column
# passes a test that implies the client's decoding succeeds (the checks of
# runstore._sql._decode, restated over the returned columns, stricter where
# restating them exactly would cost more); otherwise it raises DECODE_FIRST,
# the claim rolls back with the statement, and the client makes the
# two-round-trip call instead. The database is UTF8 (open refuses any
# other), so no text holds a NUL or a surrogate, and an identifier of at
# most 1 024 bytes is at most 1 024 UTF-16 code units.
#
# flows_state_decodes is the state's test. The client parses state strictly
# (no number that overflows a double) and then bounds its shape (values,
# depth, no surrogate in a string). At most 100 000 bytes and 128
# opening brackets leave the shape nothing to break but a surrogate, which
# only a backslash-u escape can bring. A state with no such escape, no digit
# before an e or E and no run of 200 digits holds no number beyond a double's
# range, and PostgreSQL's json parser accepting it is enough. Any other
# state (hex digests and escaped non-ASCII text are common) is parsed as
# jsonb, which refuses a lone surrogate escape, and its numbers are compared
# with 1e308 exactly.
_CLAIM_NEXT_ONCE: Final = f"""
CREATE FUNCTION flows_state_decodes(p_state text) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE SET search_path FROM CURRENT AS $$
DECLARE
  v_value jsonb;
BEGIN
  IF p_state IS NULL OR octet_length(p_state) NOT BETWEEN 1 AND 100000
     OR octet_length(p_state) - octet_length(translate(p_state, '[{{', '')) > 128 THEN
    RETURN false;
  END IF;
  IF strpos(p_state, chr(92) || 'u') = 0 AND p_state !~ '[0-9][eE]|[0-9]{{200}}' THEN
    RETURN flows_json_valid(p_state);
  END IF;
  BEGIN
    v_value := p_state::jsonb;
  EXCEPTION WHEN data_exception OR program_limit_exceeded THEN
    RETURN false;
  END;
  RETURN NOT jsonb_path_exists(
    v_value, 'lax $.** ? (@.type() == "number" && @.abs() > 1e308)', '{{}}', true);
END
$$;

CREATE FUNCTION flows_op_decode_first() RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'the claimed row must be decoded before it commits'
    USING ERRCODE = '{DECODE_FIRST}';
END
$$;

"""


def _identifier(column: str) -> str:
    return f"octet_length({column}) BETWEEN 1 AND 1024"


def _optional(column: str, test: str) -> str:
    return f"({column} IS NULL OR {test})"


def _integer(column: str) -> str:
    return f"{column} BETWEEN 0 AND {_MAX}"


#: The claimed row's proof, over the run row ``r`` and its state row ``s``:
#: each column as ``decode_run`` reads it.
_PROVEN: Final = "\n          AND ".join(
    [
        _identifier("r.run_id"),
        "r.status IN ('pending', 'running', 'suspended', 'completed', 'failed', 'cancelled')",
        _integer("r.created_at_ms"),
        *(
            _optional(f"r.{column}", _integer(f"r.{column}"))
            for column in (
                "started_at_ms",
                "finished_at_ms",
                "owner_pid",
                "heartbeat_at_ms",
                "claim_pid",
                "claimed_at_ms",
                "cancel_requested_at_ms",
                "round_ordinal",
            )
        ),
        *(
            _optional(f"r.{column}", _identifier(f"r.{column}"))
            for column in (
                "owner_host_id",
                "owner_nonce",
                "claim_host_id",
                "claim_nonce",
                "parent_run_id",
                "lineage_id",
            )
        ),
        "num_nulls(r.owner_host_id, r.owner_pid, r.owner_nonce, r.heartbeat_at_ms) IN (0, 4)",
        "(r.status = 'running') = (r.owner_host_id IS NOT NULL)",
        "num_nulls(r.claim_host_id, r.claim_pid, r.claim_nonce, r.claimed_at_ms) IN (0, 4)",
        "flows_state_decodes(s.state_json)",
    ]
)


def _claim_next_once() -> str:
    """flows_op_claim_next's text with its answer's query proven (see above)."""
    name = "CREATE FUNCTION flows_op_claim_next("
    answer = "      WHERE r.run_id = v_pick.id;\n"
    if _CLAIM_NEXT.count(name) != 1 or _CLAIM_NEXT.count(answer) != 1:
        raise AssertionError("flows_op_claim_next's text changed")
    proven = (
        f"      WHERE r.run_id = v_pick.id\n"
        f"        AND CASE WHEN {_PROVEN}\n"
        "        THEN true ELSE flows_op_decode_first() END;\n"
    )
    once = _CLAIM_NEXT.replace(name, "CREATE FUNCTION flows_op_claim_next_once(")
    return once.replace(answer, proven)


#: Migration 2004's text on PostgreSQL.
FUSED_OPERATIONS: Final = (
    _REVISION_STEP
    + _HELPERS
    + _CLAIM
    + _STEAL
    + _CLAIM_AND_OWN
    + _ACTIVATE
    + _ABANDON_CLAIM
    + _RECOVER_CLAIM
    + _RENEW
    + _TRANSITION_OWNED
    + _HEARTBEAT_MANY
    + _CLAIM_NEXT
    + _CANCELLATION
)

#: Migration 2007's text on PostgreSQL.
CLAIM_NEXT_ONCE: Final = _CLAIM_NEXT_ONCE + _claim_next_once()


# Migration 2011: claim_next_many in one round trip. flows_op_claim_next_many
# is flows_op_claim_next taking up to p_limit runs instead of one: it keeps
# looking after each run it took (or the strategy refused) and returns each
# claimed row as it takes it, oldest first. flows_op_claim_next_many_once is
# it with every answer proven to decode, as flows_op_claim_next_once is
# flows_op_claim_next; one unproven row rolls the whole call back
# (DECODE_FIRST) and the client makes the two-round-trip call, decoding every
# row before COMMIT.
_CLAIM_NEXT_MANY: Final = """
CREATE FUNCTION flows_op_claim_next_many(
  p_limit bigint, p_status_a text, p_status_b text, p_host text, p_pid bigint, p_nonce text,
  p_now bigint, p_cutoff bigint
) RETURNS TABLE (
  run_id text, status text, created_at_ms bigint, started_at_ms bigint,
  finished_at_ms bigint, owner_host_id text, owner_pid bigint, owner_nonce text,
  heartbeat_at_ms bigint, claim_host_id text, claim_pid bigint, claim_nonce text,
  claimed_at_ms bigint, parent_run_id text, cancel_requested_at_ms bigint, lineage_id text,
  round_ordinal bigint, state_json text
) LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
  v_after_created bigint := -1;
  v_after_run text := '';
  v_taken bigint := 0;
  v_pick record;
  v_outcome text;
BEGIN
  WHILE v_taken < p_limit LOOP
    SELECT r.run_id AS id, r.status AS picked, r.created_at_ms AS created INTO v_pick
    FROM flows_runs AS r
    WHERE r.status IN ('pending', 'suspended') AND r.claim_host_id IS NULL
      AND r.status IN (p_status_a, p_status_b)
      AND (r.created_at_ms, r.run_id) > (v_after_created, v_after_run)
    ORDER BY r.created_at_ms, r.run_id LIMIT 1
    FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
      RETURN;
    END IF;
    v_outcome := flows_op_claim_and_own(
      v_pick.id, v_pick.picked, NULL, NULL, NULL, NULL, p_cutoff,
      p_host, p_pid, p_nonce, p_now, 'claim');
    IF v_outcome = 'activated' THEN
      RETURN QUERY
      SELECT r.run_id::text, r.status, r.created_at_ms, r.started_at_ms, r.finished_at_ms,
             r.owner_host_id::text, r.owner_pid, r.owner_nonce::text, r.heartbeat_at_ms,
             r.claim_host_id::text, r.claim_pid, r.claim_nonce::text, r.claimed_at_ms,
             r.parent_run_id::text, r.cancel_requested_at_ms, r.lineage_id::text,
             r.round_ordinal, s.state_json
      FROM flows_runs AS r LEFT JOIN flows_run_state AS s ON s.run_id = r.run_id
      WHERE r.run_id = v_pick.id;
      v_taken := v_taken + 1;
    ELSIF v_outcome NOT IN ('already_claimed', 'heartbeat_fresh', 'snapshot_changed') THEN
      PERFORM flows_op_write_invariant(v_pick.id);
    END IF;
    -- Taken, or refused by the strategy: look after it.
    v_after_created := v_pick.created;
    v_after_run := v_pick.id;
  END LOOP;
END
$$;
"""


def _claim_next_many_once() -> str:
    """flows_op_claim_next_many's text with its answers' query proven."""
    name = "CREATE FUNCTION flows_op_claim_next_many("
    answer = "      WHERE r.run_id = v_pick.id;\n"
    if _CLAIM_NEXT_MANY.count(name) != 1 or _CLAIM_NEXT_MANY.count(answer) != 1:
        raise AssertionError("flows_op_claim_next_many's text changed")
    proven = (
        f"      WHERE r.run_id = v_pick.id\n"
        f"        AND CASE WHEN {_PROVEN}\n"
        "        THEN true ELSE flows_op_decode_first() END;\n"
    )
    once = _CLAIM_NEXT_MANY.replace(name, "CREATE FUNCTION flows_op_claim_next_many_once(")
    return _CLAIM_NEXT_MANY + once.replace(answer, proven)


#: Migration 2011's text on PostgreSQL.
CLAIM_NEXT_MANY: Final = _claim_next_many_once()


# -- Migration 2014: the one-round-trip functions, leaner ------------------------------
#
# The same decisions, answers, row writes, facts and revisions as 2004's
# functions (and 2005's heartbeat_many), with less work on the server per
# call (issue 28; benchmarks/postgres_server_time.py measures both):
#
# - No function pins a search path. Entering a function that does saves the
#   setting, sets it, recomputes the path and restores it on the way out, on
#   every call, and 2004's operations called helpers that each did so again
#   (flows_op_fact alone took 70 to 130 us a call). Each table, type and
#   function of the store is named with its schema instead: the migration
#   writes the schema's name into the text (the ``@s.`` prefix below, which a
#   DO block replaces with the quoted current schema), so a call resolves
#   the store's objects whatever the caller's search path. Built-ins and
#   operators resolve through the caller's path, as in every statement the
#   store sends: its sessions pin the path to the schema, where pg_catalog
#   comes first.
# - The helpers of the hot paths (the fact append, the lease promotion) are
#   statements of the operation itself: no nested call.
# - The change-log entry is appended by the function's own statement, not by
#   the deferred revision trigger at commit: the function marks its
#   run-row writes (``runstore.revisions`` set to ``bulk`` around them, which
#   the trigger's WHEN clause skips, as heartbeat_many's and purge's batches
#   do since 2005), then appends one entry per row write, with the trigger's
#   source guard folded into the INSERT. The entry's sequence value is
#   drawn before the commit instead of at it: writes on one run still draw
#   in the order of their row locks, and the feed's numbering (2010) is
#   unchanged, so its three properties hold as before. Writes that the
#   functions leave to 2004's rarely used helpers (a claim given back, a
#   claim that lost its lease) are not marked, and the trigger logs them.
# - A state write updates the state row (every run has one) instead of an
#   INSERT ... ON CONFLICT DO UPDATE, which checked the row's JSON twice: on
#   the row it proposed and on the row it wrote; each check enters an
#   exception block, a subtransaction.
# - heartbeat renews the lease and mirrors its stamp on the row in one
#   statement, after the row lock (so no lease writer can come between).

#: How a function marks its run-row writes as logged by itself (a plpgsql
#: assignment is evaluated in place; PERFORM would run a query).
_MARK: Final = "v_mark := pg_catalog.set_config('runstore.revisions', 'bulk', true);"
_UNMARK: Final = "v_mark := pg_catalog.set_config('runstore.revisions', '', true);"


def _append(run: str, *, deleted: int = 0, indent: str = "  ") -> str:
    """Statements appending ``run``'s change-log entry (the revision
    trigger's work, with its source guard: a missing source, or a counter at
    2**53 - 1, refuses the write); every 256th entry's writer numbers the log
    if no one else is (as the trigger did)."""
    lines = [
        "INSERT INTO flows_change_log (run_ids, deleted)",
        f"SELECT ARRAY[{run}], {deleted} FROM flows_run_source AS s",
        f"WHERE s.singleton = 1 AND s.revision < {_MAX}",
        "RETURNING seq INTO v_seq;",
        "IF NOT FOUND THEN",
        "  PERFORM flows_op_source_refused();",
        f"ELSIF v_seq % {DRAIN_EVERY} = 0 THEN",
        "  PERFORM flows_number_changes(false);",
        "END IF;",
    ]
    return "".join(f"{indent}{line}\n" for line in lines)


_LEAN_HELPERS: Final = """
-- The refusal of a write whose change-log entry cannot be appended, as the
-- revision trigger refuses it (the constraints it names classify the error).
CREATE OR REPLACE FUNCTION flows_op_source_refused() RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  PERFORM 1 FROM flows_run_source AS s WHERE s.singleton = 1;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'execution source identity is missing'
      USING ERRCODE = 'check_violation', CONSTRAINT = 'flows_run_source_identity';
  END IF;
  RAISE EXCEPTION 'the revision would pass 2**53 - 1'
    USING ERRCODE = 'check_violation', CONSTRAINT = 'flows_run_source_valid';
END
$$;

CREATE OR REPLACE FUNCTION flows_op_loss(p_row flows_runs, p_cutoff bigint) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE
    WHEN p_row.claim_host_id IS NOT NULL THEN 'already_claimed'
    WHEN p_row.status = 'running' AND p_row.heartbeat_at_ms IS NOT NULL
         AND p_row.heartbeat_at_ms >= p_cutoff THEN 'heartbeat_fresh'
    ELSE 'snapshot_changed' END
$$;

CREATE OR REPLACE FUNCTION flows_op_is_snapshot(
  p_row flows_runs, p_status text, p_host text, p_pid bigint, p_nonce text, p_heartbeat bigint
) RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
  SELECT p_row.status = p_status
    AND p_row.owner_host_id IS NOT DISTINCT FROM p_host
    AND p_row.owner_pid IS NOT DISTINCT FROM p_pid
    AND p_row.owner_nonce IS NOT DISTINCT FROM p_nonce
    AND p_row.heartbeat_at_ms IS NOT DISTINCT FROM p_heartbeat
$$;
"""

# One fact, one past the run's last.
_FACT: Final = """INSERT INTO flows_ownership_facts
    (run_id, position, transition, owner_host_id, owner_pid, owner_nonce, granted_at_ms)
  SELECT p_run, COALESCE(MAX(f.position), 0) + 1, {transition}, p_host, p_pid, p_nonce,
         {granted}
  FROM flows_ownership_facts AS f WHERE f.run_id = p_run;"""

_LEAN_CLAIM: Final = f"""
CREATE OR REPLACE FUNCTION flows_op_claim(
  p_run text, p_status text, p_owner_host text, p_owner_pid bigint, p_owner_nonce text,
  p_heartbeat bigint, p_cutoff bigint, p_host text, p_pid bigint, p_nonce text, p_now bigint
) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  v_row flows_runs;
  v_mark text;
  v_seq bigint;
BEGIN
  SELECT * INTO v_row FROM flows_runs WHERE run_id = p_run FOR UPDATE;
  IF NOT FOUND THEN
    RETURN 'not_found';
  END IF;
  IF NOT (v_row.status IN ('pending', 'suspended')
          AND flows_op_is_snapshot(v_row, p_status, p_owner_host, p_owner_pid,
                                   p_owner_nonce, p_heartbeat)
          AND v_row.claim_host_id IS NULL AND v_row.claim_pid IS NULL
          AND v_row.claim_nonce IS NULL AND v_row.claimed_at_ms IS NULL) THEN
    RETURN flows_op_loss(v_row, p_cutoff);
  END IF;
  -- SqlConsensus.claim: granted when there is no lease, or an empty one.
  INSERT INTO flows_consensus_leases AS l
    (run_id, claim_host_id, claim_pid, claim_nonce, claimed_at_ms)
  VALUES (p_run, p_host, p_pid, p_nonce, p_now)
  ON CONFLICT (run_id) DO UPDATE SET
    claim_host_id = excluded.claim_host_id, claim_pid = excluded.claim_pid,
    claim_nonce = excluded.claim_nonce, claimed_at_ms = excluded.claimed_at_ms
  WHERE l.claim_host_id IS NULL AND l.owner_host_id IS NULL;
  IF NOT FOUND THEN
    RETURN flows_op_loss(v_row, p_cutoff);  -- the strategy is authoritative
  END IF;
  {_MARK}
  UPDATE flows_runs
  SET claim_host_id = p_host, claim_pid = p_pid, claim_nonce = p_nonce, claimed_at_ms = p_now
  WHERE run_id = p_run;
  {_UNMARK}
  {_FACT.format(transition="'claimed'", granted="p_now")}
{_append("p_run")}  RETURN 'claimed';
END
$$;
"""

_LEAN_STEAL: Final = f"""
CREATE OR REPLACE FUNCTION flows_op_steal(
  p_run text, p_status text, p_owner_host text, p_owner_pid bigint, p_owner_nonce text,
  p_heartbeat bigint, p_cutoff bigint, p_host text, p_pid bigint, p_nonce text, p_now bigint
) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  v_row flows_runs;
  v_mark text;
  v_seq bigint;
BEGIN
  SELECT * INTO v_row FROM flows_runs WHERE run_id = p_run FOR UPDATE;
  IF NOT FOUND THEN
    RETURN 'not_found';
  END IF;
  IF NOT (flows_op_is_snapshot(v_row, p_status, p_owner_host, p_owner_pid,
                               p_owner_nonce, p_heartbeat)
          AND v_row.claim_host_id IS NULL AND v_row.claim_pid IS NULL
          AND v_row.claim_nonce IS NULL AND v_row.claimed_at_ms IS NULL
          AND v_row.heartbeat_at_ms IS NOT NULL AND v_row.heartbeat_at_ms < p_cutoff) THEN
    RETURN flows_op_loss(v_row, p_cutoff);
  END IF;
  -- SqlConsensus.steal (the evidence checked by the caller): the owner
  -- named, no claim, heartbeat stale.
  UPDATE flows_consensus_leases
  SET claim_host_id = p_host, claim_pid = p_pid, claim_nonce = p_nonce, claimed_at_ms = p_now
  WHERE run_id = p_run AND owner_host_id = p_owner_host AND owner_pid = p_owner_pid
    AND owner_nonce = p_owner_nonce AND claim_host_id IS NULL
    AND heartbeat_at_ms IS NOT NULL AND heartbeat_at_ms < p_cutoff;
  IF NOT FOUND THEN
    RETURN flows_op_loss(v_row, p_cutoff);
  END IF;
  {_MARK}
  UPDATE flows_runs
  SET claim_host_id = p_host, claim_pid = p_pid, claim_nonce = p_nonce, claimed_at_ms = p_now
  WHERE run_id = p_run;
  {_UNMARK}
  {_FACT.format(transition="'stolen'", granted="p_now")}
{_append("p_run")}  RETURN 'claimed';
END
$$;
"""

_LEAN_CLAIM_AND_OWN: Final = f"""
CREATE OR REPLACE FUNCTION flows_op_claim_and_own(
  p_run text, p_status text, p_owner_host text, p_owner_pid bigint, p_owner_nonce text,
  p_heartbeat bigint, p_cutoff bigint, p_host text, p_pid bigint, p_nonce text, p_now bigint,
  p_mode text
) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  v_row flows_runs;
  v_mark text;
  v_seq bigint;
BEGIN
  SELECT * INTO v_row FROM flows_runs WHERE run_id = p_run FOR UPDATE;
  IF NOT FOUND THEN
    RETURN 'not_found';
  END IF;
  IF NOT (v_row.status IN ('pending', 'suspended', 'running')
          AND flows_op_is_snapshot(v_row, p_status, p_owner_host, p_owner_pid,
                                   p_owner_nonce, p_heartbeat)
          AND v_row.claim_host_id IS NULL AND v_row.claim_pid IS NULL
          AND v_row.claim_nonce IS NULL AND v_row.claimed_at_ms IS NULL
          AND (v_row.status <> 'running' OR v_row.heartbeat_at_ms IS NULL
               OR v_row.heartbeat_at_ms < p_cutoff)) THEN
    RETURN flows_op_loss(v_row, p_cutoff);
  END IF;
  -- The grant and the activation as one lease write (as in 2004).
  IF p_mode = 'steal' THEN
    UPDATE flows_consensus_leases
    SET owner_host_id = p_host, owner_pid = p_pid, owner_nonce = p_nonce,
        granted_at_ms = p_now, heartbeat_at_ms = p_now,
        claim_host_id = NULL, claim_pid = NULL, claim_nonce = NULL, claimed_at_ms = NULL
    WHERE run_id = p_run AND owner_host_id = p_owner_host AND owner_pid = p_owner_pid
      AND owner_nonce = p_owner_nonce AND claim_host_id IS NULL
      AND heartbeat_at_ms IS NOT NULL AND heartbeat_at_ms < p_cutoff;
  ELSE
    INSERT INTO flows_consensus_leases AS l
      (run_id, owner_host_id, owner_pid, owner_nonce, granted_at_ms, heartbeat_at_ms)
    VALUES (p_run, p_host, p_pid, p_nonce, p_now, p_now)
    ON CONFLICT (run_id) DO UPDATE SET
      owner_host_id = excluded.owner_host_id, owner_pid = excluded.owner_pid,
      owner_nonce = excluded.owner_nonce, granted_at_ms = excluded.granted_at_ms,
      heartbeat_at_ms = excluded.heartbeat_at_ms,
      claim_host_id = NULL, claim_pid = NULL, claim_nonce = NULL, claimed_at_ms = NULL
    WHERE (l.claim_host_id IS NULL AND l.owner_host_id IS NULL)
       OR (p_mode = 'reown' AND l.owner_host_id = p_host AND l.owner_pid = p_pid
           AND l.owner_nonce = p_nonce);
  END IF;
  IF NOT FOUND THEN
    RETURN flows_op_loss(v_row, p_cutoff);
  END IF;
  IF p_mode = 'reown' THEN
    INSERT INTO flows_ownership_facts
      (run_id, position, transition, owner_host_id, owner_pid, owner_nonce, granted_at_ms)
    SELECT p_run, m.last + v.step, v.transition, p_host, p_pid, p_nonce, v.granted
    FROM (SELECT COALESCE(MAX(f.position), 0) AS last
          FROM flows_ownership_facts AS f WHERE f.run_id = p_run) AS m,
         (VALUES (1, 'released', NULL::bigint), (2, 'claimed', p_now),
                 (3, 'activated', p_now)) AS v (step, transition, granted);
  ELSE
    INSERT INTO flows_ownership_facts
      (run_id, position, transition, owner_host_id, owner_pid, owner_nonce, granted_at_ms)
    SELECT p_run, m.last + v.step, v.transition, p_host, p_pid, p_nonce, p_now
    FROM (SELECT COALESCE(MAX(f.position), 0) AS last
          FROM flows_ownership_facts AS f WHERE f.run_id = p_run) AS m,
         (VALUES (1, CASE WHEN p_mode = 'steal' THEN 'stolen' ELSE 'claimed' END),
                 (2, 'activated')) AS v (step, transition);
  END IF;
  {_MARK}
  UPDATE flows_runs
  SET status = 'running', started_at_ms = COALESCE(started_at_ms, p_now),
      finished_at_ms = NULL,
      owner_host_id = p_host, owner_pid = p_pid, owner_nonce = p_nonce,
      heartbeat_at_ms = p_now
  WHERE run_id = p_run;
  {_UNMARK}
{_append("p_run")}  RETURN 'activated';
END
$$;
"""

_LEAN_ACTIVATE: Final = f"""
CREATE OR REPLACE FUNCTION flows_op_activate(
  p_run text, p_status text, p_owner_host text, p_owner_pid bigint, p_owner_nonce text,
  p_heartbeat bigint, p_host text, p_pid bigint, p_nonce text, p_token bigint,
  p_activated_at bigint
) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  v_row flows_runs;
  v_mark text;
  v_seq bigint;
BEGIN
  SELECT * INTO v_row FROM flows_runs WHERE run_id = p_run FOR UPDATE;
  IF NOT FOUND OR NOT (v_row.claim_host_id IS NOT DISTINCT FROM p_host
                       AND v_row.claim_pid IS NOT DISTINCT FROM p_pid
                       AND v_row.claim_nonce IS NOT DISTINCT FROM p_nonce
                       AND v_row.claimed_at_ms IS NOT DISTINCT FROM p_token) THEN
    RETURN 'claim_lost';  -- a foreign claim is never cleared
  END IF;
  IF NOT flows_op_is_snapshot(v_row, p_status, p_owner_host, p_owner_pid,
                              p_owner_nonce, p_heartbeat) THEN
    -- The claim stands but the snapshot moved: give the claim back.
    PERFORM flows_op_release_claim(p_run, p_host, p_pid, p_nonce, p_token);
    PERFORM flows_op_fact(p_run, 'released', p_host, p_pid, p_nonce, p_token);
    PERFORM flows_op_clear_claim(p_run, p_host, p_pid, p_nonce, p_token);
    RETURN 'snapshot_changed';
  END IF;
  -- SqlConsensus.activate: the claim becomes the owner, renewed now.
  UPDATE flows_consensus_leases
  SET owner_host_id = p_host, owner_pid = p_pid, owner_nonce = p_nonce,
      granted_at_ms = p_token, heartbeat_at_ms = p_activated_at,
      claim_host_id = NULL, claim_pid = NULL, claim_nonce = NULL, claimed_at_ms = NULL
  WHERE run_id = p_run AND claim_host_id = p_host AND claim_pid = p_pid
    AND claim_nonce = p_nonce AND claimed_at_ms = p_token;
  IF NOT FOUND THEN
    -- The strategy no longer holds this claim: the row follows it.
    PERFORM flows_op_clear_claim(p_run, p_host, p_pid, p_nonce, p_token);
    RETURN 'claim_lost';
  END IF;
  {_MARK}
  UPDATE flows_runs
  SET status = 'running', started_at_ms = COALESCE(started_at_ms, p_activated_at),
      finished_at_ms = NULL,
      owner_host_id = p_host, owner_pid = p_pid, owner_nonce = p_nonce,
      heartbeat_at_ms = p_activated_at,
      claim_host_id = NULL, claim_pid = NULL, claim_nonce = NULL, claimed_at_ms = NULL
  WHERE run_id = p_run;
  {_UNMARK}
  {_FACT.format(transition="'activated'", granted="p_token")}
{_append("p_run")}  RETURN 'activated';
END
$$;
"""

_LEAN_RENEW: Final = f"""
CREATE OR REPLACE FUNCTION flows_op_renew(
  p_run text, p_host text, p_pid bigint, p_nonce text, p_now bigint, p_reconfirm boolean
) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  v_exists boolean;
  v_mark text;
  v_seq bigint;
BEGIN
  PERFORM 1 FROM flows_runs WHERE run_id = p_run FOR UPDATE;
  v_exists := FOUND;
  -- The lease renewed (whether or not the row follows, as 2004's did), and
  -- the row mirroring its stamp where this owner holds it.
  {_MARK}
  WITH renewed AS (
    UPDATE flows_consensus_leases AS l
    SET heartbeat_at_ms = GREATEST(COALESCE(l.heartbeat_at_ms, p_now), p_now)
    WHERE l.run_id = p_run AND l.owner_host_id = p_host AND l.owner_pid = p_pid
      AND l.owner_nonce = p_nonce AND (NOT p_reconfirm OR l.claim_host_id IS NULL)
    RETURNING l.heartbeat_at_ms AS stamp
  )
  UPDATE flows_runs AS r SET heartbeat_at_ms = GREATEST(r.heartbeat_at_ms, renewed.stamp)
  FROM renewed
  WHERE r.run_id = p_run AND r.status = 'running' AND r.owner_host_id = p_host
    AND r.owner_pid = p_pid AND r.owner_nonce = p_nonce;
  IF FOUND THEN
    {_UNMARK}
{_append("p_run", indent="    ")}    RETURN 'updated';
  END IF;
  {_UNMARK}
  RETURN CASE WHEN v_exists THEN 'fence_lost' ELSE 'not_found' END;
END
$$;
"""

_LEAN_TRANSITION_OWNED: Final = f"""
CREATE OR REPLACE FUNCTION flows_op_transition_owned(
  p_run text, p_host text, p_pid bigint, p_nonce text, p_requirement text,
  p_status text, p_finished bigint, p_state text
) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  v_row flows_runs;
  v_mark text;
  v_seq bigint;
BEGIN
  SELECT * INTO v_row FROM flows_runs WHERE run_id = p_run FOR UPDATE;
  IF NOT FOUND THEN
    RETURN 'not_found';
  END IF;
  IF NOT (v_row.status = 'running' AND v_row.owner_host_id = p_host
          AND v_row.owner_pid = p_pid AND v_row.owner_nonce = p_nonce) THEN
    RETURN 'fence_lost';
  END IF;
  IF (p_requirement IS NOT DISTINCT FROM 'absent' AND v_row.cancel_requested_at_ms IS NOT NULL)
     OR (p_requirement IS NOT DISTINCT FROM 'present'
         AND v_row.cancel_requested_at_ms IS NULL) THEN
    -- SqlConsensus.guard decides between the two losses.
    PERFORM 1 FROM flows_consensus_leases
    WHERE run_id = p_run AND owner_host_id = p_host AND owner_pid = p_pid
      AND owner_nonce = p_nonce;
    RETURN CASE WHEN FOUND THEN 'guard_failed' ELSE 'fence_lost' END;
  END IF;
  IF p_status = 'running' THEN
    -- The guard (the lease is still this owner's) and the row in one statement.
    {_MARK}
    UPDATE flows_runs SET status = 'running', finished_at_ms = NULL
    WHERE run_id = p_run AND EXISTS (
      SELECT 1 FROM flows_consensus_leases AS l
      WHERE l.run_id = p_run AND l.owner_host_id = p_host AND l.owner_pid = p_pid
        AND l.owner_nonce = p_nonce);
    IF NOT FOUND THEN
      {_UNMARK}
      RETURN 'fence_lost';
    END IF;
    {_UNMARK}
  ELSE
    -- Settling: the guard and the release of the ownership in one statement.
    DELETE FROM flows_consensus_leases
    WHERE run_id = p_run AND owner_host_id = p_host AND owner_pid = p_pid
      AND owner_nonce = p_nonce;
    IF NOT FOUND THEN
      RETURN 'fence_lost';
    END IF;
    {_MARK}
    UPDATE flows_runs
    SET status = p_status, finished_at_ms = p_finished,
        owner_host_id = NULL, owner_pid = NULL, owner_nonce = NULL, heartbeat_at_ms = NULL,
        claim_host_id = NULL, claim_pid = NULL, claim_nonce = NULL, claimed_at_ms = NULL
    WHERE run_id = p_run;
    {_UNMARK}
  END IF;
  IF p_state IS NOT NULL THEN
    UPDATE flows_run_state SET state_json = p_state WHERE run_id = p_run;
    IF NOT FOUND THEN
      INSERT INTO flows_run_state (run_id, state_json) VALUES (p_run, p_state);
    END IF;
  END IF;
  IF p_status <> 'running' THEN
    {_FACT.format(transition="'released'", granted="NULL")}
  END IF;
{_append("p_run")}  RETURN 'transitioned';
END
$$;
"""

_LEAN_REQUEST_CANCEL: Final = f"""
CREATE OR REPLACE FUNCTION flows_op_request_cancel(p_run text, p_now bigint)
RETURNS TABLE (marked bigint, requested_at bigint, status text)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
  v_mark text;
  v_seq bigint;
BEGIN
  {_MARK}
  UPDATE flows_runs AS r SET cancel_requested_at_ms = p_now
  WHERE r.run_id = p_run AND r.cancel_requested_at_ms IS NULL
    AND r.status NOT IN ('completed', 'failed', 'cancelled');
  IF FOUND THEN
    {_UNMARK}
{_append("p_run", indent="    ")}    marked := 1;
    RETURN NEXT;
    RETURN;
  END IF;
  {_UNMARK}
  RETURN QUERY SELECT 0::bigint, r.cancel_requested_at_ms, r.status
  FROM flows_runs AS r WHERE r.run_id = p_run;
END
$$;
"""


def _lean_claim_next(text: str) -> str:
    """A 2004, 2007 or 2011 claim_next function as 2014 writes it: no pinned
    search path (its claim, flows_op_claim_and_own, is 2014's)."""
    pinned = "LANGUAGE plpgsql SET search_path FROM CURRENT AS $$"
    if text.count(pinned) != 1 or text.count("CREATE FUNCTION ") != 1:
        raise AssertionError("a claim_next function's text changed")
    return text.replace(pinned, "LANGUAGE plpgsql AS $$").replace(
        "CREATE FUNCTION ", "CREATE OR REPLACE FUNCTION "
    )


#: Names of the store's objects in function texts (outside quoted literals).
_OBJECT: Final = re.compile(r"\bflows_[a-z_]+\b")


def _qualified(text: str) -> str:
    """``text`` with every store object named ``@s.``-prefixed (outside
    quoted literals), for the DO block to put the schema there."""
    pieces = text.split("'")
    for index in range(0, len(pieces), 2):
        pieces[index] = _OBJECT.sub(r"@s.\g<0>", pieces[index])
    return "'".join(pieces)


def _in_schema(statements: list[str]) -> str:
    """A DO block creating each statement in the current schema."""
    body = "".join(
        "  EXECUTE pg_catalog.replace($statement$"
        f"{_qualified(statement)}$statement$, '@s.', "
        "pg_catalog.format('%I.', pg_catalog.current_schema()));\n"
        for statement in statements
    )
    return f"DO $migration$\nBEGIN\n{body}END\n$migration$;\n"


def _functions(text: str) -> list[str]:
    """The CREATE statements of ``text``, one each."""
    parts = re.split(r"(?m)^(?=CREATE (?:OR REPLACE )?FUNCTION )", text)
    return [part.strip() for part in parts if part.strip().startswith("CREATE")]


def _claim_next_family() -> list[str]:
    texts = [_CLAIM_NEXT, _claim_next_once()]
    many = _claim_next_many_once()
    texts += _functions(many)
    return [_lean_claim_next(_functions(text)[0]) for text in texts]


#: Migration 2014's text on PostgreSQL.
LEAN_OPERATIONS: Final = _in_schema(
    [
        *_functions(_LEAN_HELPERS),
        _LEAN_CLAIM,
        _LEAN_STEAL,
        _LEAN_CLAIM_AND_OWN,
        _LEAN_ACTIVATE,
        _LEAN_RENEW,
        _LEAN_TRANSITION_OWNED,
        _LEAN_REQUEST_CANCEL,
        *_claim_next_family(),
    ]
)
