"""Every SQL statement the store runs, named after the operation that runs it.

The compare-and-swap predicates of each operation live here, in SQL: a
``*_CLASSIFY`` query reads only metadata columns and answers whether the row
admits the operation and, if not, which loss it is; the matching ``*_WRITE``
repeats the predicate in its ``WHERE`` clause, and its change count says
whether it wrote (``RETURNING`` would say the same, but SQLite buffers
returned rows in a temporary table, which costs a third of a small UPDATE).
No write path reads run state.

Parameters are numbered (a number a statement skips is bound and ignored, so
related statements share one parameter tuple). The snapshot fragment always
takes ``?2``-``?6``
(status, owner host, pid, nonce, heartbeat) and the staleness cutoff
(``now_ms - HEARTBEAT_STALE_AFTER_MS``) is computed by the caller, so a
heartbeat is stale exactly when it is ``< cutoff``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Final

_TERMINAL: Final = "('completed', 'failed', 'cancelled')"


def _live(prefix: str) -> str:
    """The row's status is not final. Written as ``<>`` tests, not ``NOT IN``
    (SQLite builds a temporary b-tree for an ``IN`` list of more than two
    constants each time the statement runs); the live-rounds index's
    condition is written the same way, so a query naming it implies it."""
    p = prefix
    return f"{p}status <> 'completed' AND {p}status <> 'failed' AND {p}status <> 'cancelled'"


#: The decoded columns of a run, state included (reads only).
_RUN_COLUMNS: Final = """
  r.run_id, r.status, r.created_at_ms, r.started_at_ms, r.finished_at_ms,
  r.owner_host_id, r.owner_pid, r.owner_nonce, r.heartbeat_at_ms,
  r.claim_host_id, r.claim_pid, r.claim_nonce, r.claimed_at_ms,
  r.parent_run_id, r.cancel_requested_at_ms, r.lineage_id, r.round_ordinal,
  s.state_json
"""
_FROM_RUNS: Final = "FROM flows_runs AS r LEFT JOIN flows_run_state AS s ON s.run_id = r.run_id"

#: The lineage a run id belongs to: its lineage id, or its own id for a root.
_ROOT: Final = "(SELECT COALESCE(lineage_id, run_id) FROM flows_runs WHERE run_id = ?1)"


def _member(prefix: str) -> str:
    """Rows of the lineage containing ``?1``: every round naming the lineage,
    plus the root itself when its own lineage columns are empty or name it.
    Fork ancestry (``parent_run_id``) never joins a lineage."""
    p = prefix
    return (
        f"({p}lineage_id = {_ROOT} OR ({p}run_id = {_ROOT} "
        f"AND ({p}lineage_id IS NULL OR {p}lineage_id = {_ROOT})))"
    )


#: The row still matches the caller's snapshot (``?2``-``?6``), NULL-safe.
_SNAPSHOT: Final = (
    "status = ?2 AND owner_host_id IS ?3 AND owner_pid IS ?4 AND owner_nonce IS ?5 "
    "AND heartbeat_at_ms IS ?6"
)
#: The run's last fact position (0 before its first fact); classify queries
#: return it so the facts they lead to are inserted at known positions.
_LAST_POSITION: Final = (
    "(SELECT COALESCE(MAX(position), 0) FROM flows_ownership_facts WHERE run_id = ?1)"
)
_CLAIM_FREE: Final = (
    "claim_host_id IS NULL AND claim_pid IS NULL AND claim_nonce IS NULL AND claimed_at_ms IS NULL"
)


def _claim_is(first: int) -> str:
    """The row holds exactly the claim in ``?first`` .. ``?first+3``."""
    a, b, c, d = first, first + 1, first + 2, first + 3
    return (
        f"claim_host_id IS ?{a} AND claim_pid IS ?{b} AND claim_nonce IS ?{c} "
        f"AND claimed_at_ms IS ?{d}"
    )


def _loss(cutoff: int) -> str:
    """Why a claim-like operation lost, in upstream's order (the row exists)."""
    return (
        "CASE WHEN claim_host_id IS NOT NULL THEN 'already_claimed' "
        "WHEN status = 'running' AND heartbeat_at_ms IS NOT NULL "
        f"AND heartbeat_at_ms >= ?{cutoff} THEN 'heartbeat_fresh' "
        "ELSE 'snapshot_changed' END"
    )


def _owned_by(first: int) -> str:
    a, b, c = first, first + 1, first + 2
    return (
        f"status = 'running' AND owner_host_id = ?{a} AND owner_pid = ?{b} AND owner_nonce = ?{c}"
    )


_CLEARED_CLAIM: Final = (
    "claim_host_id = NULL, claim_pid = NULL, claim_nonce = NULL, claimed_at_ms = NULL"
)

# -- the run lock ------------------------------------------------------------------

#: Nothing to run: ``BEGIN IMMEDIATE`` already serializes every writer of the
#: file (PostgreSQL locks the run row here; see ``runstore.postgres._queries``).
LOCK_RUN: Final = ""
#: Nor for many runs (``heartbeat_many``).
LOCK_RUNS: Final = ""

# -- create, get, lineage, latest_round ----------------------------------------

CREATE_RUN: Final = """
INSERT INTO flows_runs (run_id, status, created_at_ms, parent_run_id, lineage_id, round_ordinal)
VALUES (?1, 'pending', ?2, ?3, ?4, ?5)
"""
CREATE_STATE: Final = "INSERT INTO flows_run_state (run_id, state_json) VALUES (?1, ?2)"

GET: Final = f"SELECT {_RUN_COLUMNS} {_FROM_RUNS} WHERE r.run_id = ?1"

LINEAGE: Final = (
    f"SELECT {_RUN_COLUMNS} {_FROM_RUNS} WHERE {_member('r.')} "
    "ORDER BY COALESCE(r.round_ordinal, 0), r.run_id"
)

LATEST_ROUND: Final = f"""
SELECT {_RUN_COLUMNS} {_FROM_RUNS}
WHERE r.run_id = COALESCE(
  (SELECT run_id FROM flows_runs WHERE lineage_id = {_ROOT}
   ORDER BY round_ordinal DESC LIMIT 1),
  (SELECT run_id FROM flows_runs WHERE run_id = ?1)
)
"""

RUN_EXISTS: Final = "SELECT 1 FROM flows_runs WHERE run_id = ?1"

# -- cancellation ----------------------------------------------------------------

REQUEST_CANCEL_WRITE: Final = f"""
UPDATE flows_runs SET cancel_requested_at_ms = ?2
WHERE run_id = ?1 AND cancel_requested_at_ms IS NULL AND {_live("")}
"""
REQUEST_CANCEL_MISS: Final = (
    "SELECT cancel_requested_at_ms, status FROM flows_runs WHERE run_id = ?1"
)

# One set-based UPDATE whatever the lineage's length; metadata columns only.
REQUEST_CANCEL_LINEAGE_WRITE: Final = f"""
UPDATE flows_runs SET cancel_requested_at_ms = ?2
WHERE {_member("")} AND cancel_requested_at_ms IS NULL AND {_live("")}
"""
REQUEST_CANCEL_LINEAGE_MISS: Final = (
    f"SELECT cancel_requested_at_ms, status FROM flows_runs WHERE {_member('')} "
    "ORDER BY COALESCE(round_ordinal, 0), run_id"
)

# The first acknowledgement is kept; a repeat still writes (and counts) the row.
ACKNOWLEDGE_CANCEL_WRITE: Final = f"""
UPDATE flows_runs
SET cancel_acknowledgement_json = COALESCE(cancel_acknowledgement_json, ?5)
WHERE run_id = ?1 AND {_owned_by(2)} AND cancel_requested_at_ms IS NOT NULL
"""

# -- claim -------------------------------------------------------------------------

_CLAIM_ADMITS: Final = f"status IN ('pending', 'suspended') AND {_SNAPSHOT} AND {_CLAIM_FREE}"

CLAIM_CLASSIFY: Final = (
    f"SELECT {_CLAIM_ADMITS}, {_loss(7)}, {_LAST_POSITION} FROM flows_runs WHERE run_id = ?1"
)
CLAIM_WRITE: Final = f"""
UPDATE flows_runs
SET claim_host_id = ?8, claim_pid = ?9, claim_nonce = ?10, claimed_at_ms = ?11
WHERE run_id = ?1 AND {_CLAIM_ADMITS}
"""

# -- claim_and_own -------------------------------------------------------------------

# Read-only, outside the write transaction: the loss, and whether the row still
# matches the snapshot (an unchanged stale row asks for evidence).
CLAIM_AND_OWN_PRECHECK: Final = f"SELECT {_loss(7)}, {_SNAPSHOT} FROM flows_runs WHERE run_id = ?1"
_CLAIM_AND_OWN_ADMITS: Final = (
    "(status = 'pending' OR status = 'suspended' OR status = 'running') "
    f"AND {_SNAPSHOT} AND {_CLAIM_FREE} "
    "AND (status <> 'running' OR heartbeat_at_ms IS NULL OR heartbeat_at_ms < ?7)"
)
CLAIM_AND_OWN_CLASSIFY: Final = (
    f"SELECT {_CLAIM_AND_OWN_ADMITS}, {_loss(7)}, {_LAST_POSITION} "
    "FROM flows_runs WHERE run_id = ?1"
)
CLAIM_AND_OWN_WRITE: Final = f"""
UPDATE flows_runs
SET status = 'running', started_at_ms = COALESCE(started_at_ms, ?11), finished_at_ms = NULL,
    owner_host_id = ?8, owner_pid = ?9, owner_nonce = ?10, heartbeat_at_ms = ?11
WHERE run_id = ?1 AND {_CLAIM_AND_OWN_ADMITS}
"""

# -- steal -------------------------------------------------------------------------

_STEAL_ADMITS: Final = (
    f"{_SNAPSHOT} AND {_CLAIM_FREE} AND heartbeat_at_ms IS NOT NULL AND heartbeat_at_ms < ?7"
)
STEAL_CLASSIFY: Final = (
    f"SELECT {_STEAL_ADMITS}, {_loss(7)}, {_LAST_POSITION} FROM flows_runs WHERE run_id = ?1"
)
STEAL_WRITE: Final = f"""
UPDATE flows_runs
SET claim_host_id = ?8, claim_pid = ?9, claim_nonce = ?10, claimed_at_ms = ?11
WHERE run_id = ?1 AND {_STEAL_ADMITS}
"""

# -- activate, abandon_claim, recover_claim ------------------------------------------

ACTIVATE_CLASSIFY: Final = (
    f"SELECT {_claim_is(7)}, {_SNAPSHOT}, {_LAST_POSITION} FROM flows_runs WHERE run_id = ?1"
)
ACTIVATE_WRITE: Final = f"""
UPDATE flows_runs
SET status = 'running', started_at_ms = COALESCE(started_at_ms, ?11), finished_at_ms = NULL,
    owner_host_id = ?7, owner_pid = ?8, owner_nonce = ?9, heartbeat_at_ms = ?11,
    {_CLEARED_CLAIM}
WHERE run_id = ?1 AND {_SNAPSHOT} AND {_claim_is(7)}
"""

# Clears exactly one claim; a foreign claim is never touched.
CLEAR_CLAIM: Final = f"""
UPDATE flows_runs SET {_CLEARED_CLAIM}
WHERE run_id = ?1 AND {_claim_is(2)}
"""

RECOVER_CLAIM_CLASSIFY: Final = (
    f"SELECT {_claim_is(2)}, claimed_at_ms >= ?6, {_LAST_POSITION} "
    "FROM flows_runs WHERE run_id = ?1"
)

# -- heartbeat, reconfirm --------------------------------------------------------------

# The row mirrors the strategy's stamp and never moves backwards.
RENEW_WRITE: Final = f"""
UPDATE flows_runs SET heartbeat_at_ms = MAX(heartbeat_at_ms, ?5)
WHERE run_id = ?1 AND {_owned_by(2)}
"""

# -- transition_owned ---------------------------------------------------------------

# ?5 is the guard requirement: 'absent', 'present' or NULL (no guard).
_GUARD_BLOCKS: Final = (
    "((?5 IS 'absent' AND cancel_requested_at_ms IS NOT NULL) "
    "OR (?5 IS 'present' AND cancel_requested_at_ms IS NULL))"
)
# The row is running already (its WHERE says so) and so has no finish time:
# the write changes nothing but takes its revision. Setting the status again
# would rewrite its entry in the status index.
TRANSITION_RUNNING_WRITE: Final = f"""
UPDATE flows_runs SET finished_at_ms = NULL
WHERE run_id = ?1 AND {_owned_by(2)} AND NOT {_GUARD_BLOCKS}
"""
TRANSITION_SETTLE_WRITE: Final = f"""
UPDATE flows_runs
SET status = ?6, finished_at_ms = ?7,
    owner_host_id = NULL, owner_pid = NULL, owner_nonce = NULL, heartbeat_at_ms = NULL,
    {_CLEARED_CLAIM}
WHERE run_id = ?1 AND {_owned_by(2)} AND NOT {_GUARD_BLOCKS}
"""
TRANSITION_CLASSIFY: Final = (
    f"SELECT {_owned_by(2)}, {_GUARD_BLOCKS} FROM flows_runs WHERE run_id = ?1"
)
STATE_WRITE: Final = """
INSERT INTO flows_run_state (run_id, state_json) VALUES (?1, ?2)
ON CONFLICT (run_id) DO UPDATE SET state_json = excluded.state_json
"""

# -- facts -----------------------------------------------------------------------------

# Positions are dense per run. After a classify query the position is known
# and the insert is plain; otherwise the next one is one past the run's highest.
FACT_AT: Final = """
INSERT INTO flows_ownership_facts
  (run_id, position, transition, owner_host_id, owner_pid, owner_nonce, granted_at_ms)
VALUES (?1, ?7, ?2, ?3, ?4, ?5, ?6)
"""
# A grant and its activation, at ?7 and ?7 + 1.
FACTS_GRANT_ACTIVATED_AT: Final = """
INSERT INTO flows_ownership_facts
  (run_id, position, transition, owner_host_id, owner_pid, owner_nonce, granted_at_ms)
VALUES (?1, ?7, ?2, ?3, ?4, ?5, ?6), (?1, ?7 + 1, 'activated', ?3, ?4, ?5, ?6)
"""
# claim_and_own's claim and activation when the run's last position is not
# known yet: None here, so the store reads it (LAST_FACT_POSITION) and inserts
# both facts with FACTS_GRANT_ACTIVATED_AT. One statement that reads the facts
# while it inserts into them (INSERT ... SELECT, or several VALUES rows with a
# subquery) makes SQLite copy the rows to a temporary table first.
FACTS_CLAIMED_ACTIVATED: Final[str | None] = None
LAST_FACT_POSITION: Final = f"SELECT {_LAST_POSITION}"
FACT_APPEND: Final = f"""
INSERT INTO flows_ownership_facts
  (run_id, position, transition, owner_host_id, owner_pid, owner_nonce, granted_at_ms)
VALUES (?1, {_LAST_POSITION} + 1, ?2, ?3, ?4, ?5, ?6)
"""
FACTS_OF_RUN: Final = """
SELECT run_id, position, transition, owner_host_id, owner_pid, owner_nonce, granted_at_ms
FROM flows_ownership_facts WHERE run_id = ?1 ORDER BY position
"""

# -- revisions ----------------------------------------------------------------------

REVISION: Final = "SELECT revision FROM flows_run_source WHERE singleton = 1"
CHANGES: Final = (
    "SELECT run_id, revision, deleted FROM flows_run_changes WHERE revision > ?1 ORDER BY revision"
)
#: Nothing to number before ``state()``'s snapshot: SQLite numbers each write
#: as it commits (one writer at a time).
NUMBER_CHANGES: Final[str | None] = None

# -- list_runs ---------------------------------------------------------------------
#
# A page is one SELECT (one snapshot) assembled by the store core from these
# pieces: the columns, the table (SQLite may be told which index serves a
# filter), the filters that were given joined by AND, the keyset condition
# after the cursor, and the order. Each filter is written so that the partial
# index it belongs to is implied by its text. The parameters are fixed: ?1
# and ?2 the cursor's (created_at_ms, run_id), ?3 unused (``claimable_at``
# judges nothing), ?4 the stale cutoff, ?5 the claim-stale cutoff, ?6 the
# lineage, ?7 the parent, ?8 the row limit (one more than the page, so the
# store knows whether another page follows). Several statuses become one arm
# per status, merged by ``LIST_UNION``.

#: A listed run without its state (the state column is NULL) and with it.
LIST_COLUMNS: Final = """
  r.run_id, r.status, r.created_at_ms, r.started_at_ms, r.finished_at_ms,
  r.owner_host_id, r.owner_pid, r.owner_nonce, r.heartbeat_at_ms,
  r.claim_host_id, r.claim_pid, r.claim_nonce, r.claimed_at_ms,
  r.parent_run_id, r.cancel_requested_at_ms, r.lineage_id, r.round_ordinal,
  NULL
"""
LIST_COLUMNS_WITH_STATE: Final = _RUN_COLUMNS
LIST_FROM: Final = "FROM flows_runs AS r"
LIST_FROM_WITH_STATE: Final = _FROM_RUNS
#: The table named with the index a claimable listing must use (the planner
#: without statistics would read both statuses of the status index and sort).
LIST_FROM_CLAIMABLE: Final = "FROM flows_runs AS r INDEXED BY flows_runs_claimable_idx"
LIST_FROM_CLAIMABLE_WITH_STATE: Final = (
    "FROM flows_runs AS r INDEXED BY flows_runs_claimable_idx "
    "LEFT JOIN flows_run_state AS s ON s.run_id = r.run_id"
)
#: One status; ``{status}`` is an admitted status name (a literal, so the
#: status index's prefix and the partial indexes are seen to apply).
LIST_STATUS: Final = "r.status = '{status}'"
LIST_CLAIMABLE: Final = "r.status IN ('pending', 'suspended') AND r.claim_host_id IS NULL"
LIST_STALE: Final = "r.status = 'running' AND r.heartbeat_at_ms < ?4"
LIST_CLAIM_STALE: Final = "r.claim_host_id IS NOT NULL AND r.claimed_at_ms < ?5"
_WAITING: Final = "r.cancel_requested_at_ms IS NOT NULL AND r.cancel_acknowledgement_json IS NULL"
LIST_CANCEL_WAITING: Final = f"({_WAITING})"
LIST_CANCEL_NOT_WAITING: Final = f"NOT ({_WAITING})"
LIST_LINEAGE: Final = "(r.lineage_id = ?6 OR (r.run_id = ?6 AND r.lineage_id IS NULL))"
LIST_PARENT: Final = "r.parent_run_id = ?7"
LIST_AFTER: Final = "(r.created_at_ms, r.run_id) > (?1, ?2)"
#: Mentions every parameter (nothing to do on SQLite, which binds and ignores).
LIST_PARAMETERS: Final = "1"
LIST_ORDER: Final = "ORDER BY r.created_at_ms, r.run_id LIMIT ?8"
#: One arm of several statuses (``{arm}``, a SELECT ordered by the status
#: index); the arms are joined by UNION ALL, which SQLite merges in order.
LIST_UNION_ARM: Final = "{arm}"
LIST_UNION_ORDER: Final = "ORDER BY 3, 1 LIMIT ?8"

# -- claim_next ---------------------------------------------------------------------

# The oldest unclaimed run of the statuses ?3 and ?4 (the same status twice for
# one) after the listing key (?1, ?2), by the claimable index.
# The whole row, state included: it is what claim_next returns, once the
# write has made it running.
# A nineteenth column, the run's last fact position, spares claim_next the
# statement that would read it before inserting its two facts.
CLAIM_NEXT_PICK: Final = f"""
SELECT {_RUN_COLUMNS},
  (SELECT COALESCE(MAX(f.position), 0) FROM flows_ownership_facts AS f WHERE f.run_id = r.run_id)
FROM flows_runs AS r INDEXED BY flows_runs_claimable_idx
LEFT JOIN flows_run_state AS s ON s.run_id = r.run_id
WHERE r.status IN ('pending', 'suspended') AND r.claim_host_id IS NULL
  AND r.status IN (?3, ?4) AND (r.created_at_ms, r.run_id) > (?1, ?2)
ORDER BY r.created_at_ms, r.run_id LIMIT 1
"""

# -- heartbeat_many -------------------------------------------------------------------
#
# ``ids_param`` packs run ids for ``IN (SELECT value FROM json_each(?1))``;
# ``stamps_param`` packs (run id, stamp) pairs for RENEW_MANY_WRITE's ?1 and ?2.

# The rows the strategy renewed, each to MAX(old, its stamp), in run id order:
# the pairs arrive sorted and the PK seek follows them, so the revision
# trigger numbers them in that order (tests pin it).
# (``+status``: the status index must not drive the update, or each of its
# running rows would scan the JSON; the ids drive it, one key seek each.)
RENEW_MANY_WRITE: Final = """
UPDATE flows_runs SET heartbeat_at_ms = MAX(flows_runs.heartbeat_at_ms, j.value)
FROM json_each(?1) AS j
WHERE flows_runs.run_id = j.key AND +flows_runs.status = 'running'
  AND owner_host_id = ?3 AND owner_pid = ?4 AND owner_nonce = ?5
"""
# Among ?1, the runs ?2-?4 owns (after RENEW_MANY_WRITE: those it wrote).
OWNED_AMONG: Final = """
SELECT run_id FROM flows_runs
WHERE run_id IN (SELECT value FROM json_each(?1)) AND +status = 'running'
  AND owner_host_id = ?2 AND owner_pid = ?3 AND owner_nonce = ?4
"""
# Among ?1, the runs that exist.
EXISTING_AMONG: Final = (
    "SELECT run_id FROM flows_runs WHERE run_id IN (SELECT value FROM json_each(?1))"
)

# -- purge_settled, compact_changes ------------------------------------------------------

# A candidate's lineage has no live round: no live run names its lineage (the
# live-rounds index holds only those, so the lookup reads none of the
# lineage's settled rounds), and its root is not live. Two NOT EXISTS, each
# one key lookup per candidate; one NOT (EXISTS OR EXISTS) made PostgreSQL
# hash every live run on each call, so both backends write it this way.
_NO_LIVE_ROUND: Final = f"""
  NOT EXISTS (SELECT 1 FROM flows_runs AS m INDEXED BY flows_runs_live_rounds_idx
              WHERE m.lineage_id = COALESCE(r.lineage_id, r.run_id)
                AND {_live("m.")})
  AND NOT EXISTS (SELECT 1 FROM flows_runs AS m
                  WHERE m.run_id = COALESCE(r.lineage_id, r.run_id)
                    AND (m.lineage_id IS NULL OR m.lineage_id = m.run_id)
                    AND {_live("m.")})"""
# Settled runs finished before ?1, oldest first, that no run names as parent
# and whose lineage has no live round (the finished index, in order): each
# candidate costs a few key lookups, so a call reads about as many rows as it
# returns (up to ?2), whatever the store holds.
_PURGEABLE: Final = f"""
FROM flows_runs AS r INDEXED BY flows_runs_finished_idx
WHERE r.finished_at_ms < ?1 AND r.status IN {_TERMINAL}
  AND NOT EXISTS (SELECT 1 FROM flows_runs AS c WHERE c.parent_run_id = r.run_id)
  AND {_NO_LIVE_ROUND}
ORDER BY r.finished_at_ms, r.run_id LIMIT ?2
"""
PURGE_CANDIDATES: Final = f"SELECT r.run_id {_PURGEABLE}"
# purge_candidates: the same runs, as rows without their state (a read).
PURGE_CANDIDATE_ROWS: Final = f"SELECT {LIST_COLUMNS} {_PURGEABLE}"
#: Nothing to serialize: ``BEGIN IMMEDIATE`` already makes purges take turns.
PURGE_SERIALIZE: Final = ""
#: Nothing to re-check: ``BEGIN IMMEDIATE`` keeps every writer out since
#: PURGE_CANDIDATES (PostgreSQL re-reads its locked candidates).
PURGE_RECHECK: Final = ""
# Everything of the runs ?1 (run ids), then the runs in run id order: the
# delete trigger leaves each one's tombstone, numbered in that order.
PURGE_ATTEMPTS: Final = (
    "DELETE FROM flows_attempts WHERE run_id IN (SELECT value FROM json_each(?1))"
)
PURGE_FACTS: Final = (
    "DELETE FROM flows_ownership_facts WHERE run_id IN (SELECT value FROM json_each(?1))"
)
PURGE_STATE: Final = "DELETE FROM flows_run_state WHERE run_id IN (SELECT value FROM json_each(?1))"
PURGE_LEASES: Final = (
    "DELETE FROM flows_consensus_leases WHERE run_id IN (SELECT value FROM json_each(?1))"
)
PURGE_RUNS: Final = "DELETE FROM flows_runs WHERE run_id IN (SELECT value FROM json_each(?1))"

# Up to ?2 tombstones at or below revision ?1, oldest first.
COMPACT_CANDIDATES: Final = """
SELECT run_id, revision FROM flows_run_changes
WHERE deleted = 1 AND revision <= ?1 ORDER BY revision LIMIT ?2
"""
COMPACT_DELETE: Final = (
    "DELETE FROM flows_run_changes WHERE deleted = 1 "
    "AND run_id IN (SELECT value FROM json_each(?1))"
)
# The newest tombstone revision ever compacted (the revision may equal it).
COMPACT_RECORD: Final = (
    "UPDATE flows_run_source SET compacted_through = MAX(compacted_through, ?1) WHERE singleton = 1"
)


def ids_param(run_ids: Sequence[str]) -> str:
    """Run ids as the ``json_each`` parameter of ``*_AMONG`` and ``PURGE_*``."""
    return json.dumps(list(run_ids), ensure_ascii=False, separators=(",", ":"))


def stamps_param(pairs: Sequence[tuple[str, int]]) -> tuple[str, None]:
    """(run id, stamp) pairs, sorted by run id, as RENEW_MANY_WRITE's ?1 (a
    JSON object, iterated in key order) and ?2 (unused here)."""
    return json.dumps(dict(pairs), ensure_ascii=False, separators=(",", ":")), None


# -- whole state and invariants (reads only) ----------------------------------------

ALL_RUNS: Final = f"SELECT {_RUN_COLUMNS} {_FROM_RUNS} ORDER BY r.run_id"
ALL_FACTS: Final = """
SELECT run_id, position, transition, owner_host_id, owner_pid, owner_nonce, granted_at_ms
FROM flows_ownership_facts ORDER BY run_id, position
"""
ALL_ACKNOWLEDGEMENTS: Final = """
SELECT run_id, cancel_acknowledgement_json FROM flows_runs
WHERE cancel_acknowledgement_json IS NOT NULL ORDER BY run_id
"""

INVARIANT_QUERIES: Final[tuple[tuple[str, str], ...]] = (
    (
        "one revision source",
        "SELECT count(*) <> 1 FROM flows_run_source",
    ),
    (
        "the revision is the newest change",
        """SELECT (SELECT revision FROM flows_run_source)
                  <> MAX((SELECT COALESCE(MAX(revision), 0) FROM flows_run_changes),
                         (SELECT compacted_through FROM flows_run_source))""",
    ),
    (
        "every run has a live change entry",
        """SELECT r.run_id FROM flows_runs AS r
           LEFT JOIN flows_run_changes AS c ON c.run_id = r.run_id
           WHERE c.run_id IS NULL OR c.deleted <> 0 LIMIT 1""",
    ),
    (
        "every live change entry has its run and every tombstone has none",
        """SELECT c.run_id FROM flows_run_changes AS c
           WHERE (c.deleted = 0) <> EXISTS (SELECT 1 FROM flows_runs WHERE run_id = c.run_id)
           LIMIT 1""",
    ),
    (
        "every run has its state",
        """SELECT r.run_id FROM flows_runs AS r
           WHERE NOT EXISTS (SELECT 1 FROM flows_run_state WHERE run_id = r.run_id) LIMIT 1""",
    ),
    (
        "run state belongs to a run",
        """SELECT s.run_id FROM flows_run_state AS s
           WHERE NOT EXISTS (SELECT 1 FROM flows_runs WHERE run_id = s.run_id) LIMIT 1""",
    ),
    (
        "fact positions are 1..n without gaps",
        """SELECT run_id FROM flows_ownership_facts GROUP BY run_id
           HAVING MIN(position) <> 1 OR MAX(position) <> count(*) LIMIT 1""",
    ),
    (
        "facts belong to a run",
        """SELECT f.run_id FROM flows_ownership_facts AS f
           WHERE NOT EXISTS (SELECT 1 FROM flows_runs WHERE run_id = f.run_id) LIMIT 1""",
    ),
    (
        "finished_at_ms is set exactly on terminal runs",
        f"""SELECT run_id FROM flows_runs
           WHERE (status IN {_TERMINAL}) <> (finished_at_ms IS NOT NULL) LIMIT 1""",
    ),
)

#: The lease checks ``check_invariants`` runs when the strategy is ``SqlConsensus``.
SQL_LEASE_CHECKS: Final[tuple[tuple[str, str], ...]] = (
    (
        "lease and row agree",
        """SELECT r.run_id FROM flows_runs AS r
           LEFT JOIN flows_consensus_leases AS l ON l.run_id = r.run_id
           WHERE NOT (l.owner_host_id IS r.owner_host_id AND l.owner_pid IS r.owner_pid
                      AND l.owner_nonce IS r.owner_nonce
                      AND l.heartbeat_at_ms IS r.heartbeat_at_ms
                      AND l.claim_host_id IS r.claim_host_id AND l.claim_pid IS r.claim_pid
                      AND l.claim_nonce IS r.claim_nonce
                      AND l.claimed_at_ms IS r.claimed_at_ms)
           LIMIT 1""",
    ),
    (
        "leases belong to a run",
        """SELECT l.run_id FROM flows_consensus_leases AS l
           WHERE NOT EXISTS (SELECT 1 FROM flows_runs WHERE run_id = l.run_id) LIMIT 1""",
    ),
    (
        "empty leases are deleted",
        """SELECT run_id FROM flows_consensus_leases
           WHERE owner_host_id IS NULL AND claim_host_id IS NULL LIMIT 1""",
    ),
    (
        "an owner's lease was granted at its last activation",
        """SELECT l.run_id FROM flows_consensus_leases AS l
           WHERE l.owner_host_id IS NOT NULL AND l.granted_at_ms IS NOT (
             SELECT f.granted_at_ms FROM flows_ownership_facts AS f
             WHERE f.run_id = l.run_id AND f.transition = 'activated'
             ORDER BY f.position DESC LIMIT 1)
           LIMIT 1""",
    ),
)
