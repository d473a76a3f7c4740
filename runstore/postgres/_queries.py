"""Every SQL statement the PostgreSQL store runs, under the SQLite module's names.

``runstore.sqlite._queries`` explains what each statement decides; this module
says the same in PostgreSQL (a test checks both define the same names), and
the store core runs whichever its backend provides with the same parameters.
The differences:

- Parameters are ``$1``, ``$2``, ... and every one is cast to its type:
  PostgreSQL must know each parameter's type, and a statement must mention
  every parameter it is given, even one it does not need (SQLite binds and
  ignores a number a statement skips, so related statements there share one
  parameter tuple). ``_unused`` mentions such a parameter harmlessly.
- ``IS NOT DISTINCT FROM`` is SQLite's ``IS``; ``GREATEST`` its scalar ``MAX``.
- ``LOCK_RUN`` runs first in every write of an existing run: the run row
  locked ``FOR UPDATE`` serializes that run's compare-and-swap (SQLite's
  ``BEGIN IMMEDIATE`` serializes the whole file). It is its own statement
  because under READ COMMITTED a statement that waited for a lock still reads
  other tables (the facts, the leases) as of its start: the statements after
  the lock see everything its previous holder committed.
- ``REQUEST_CANCEL_LINEAGE_WRITE`` calls ``flows_request_cancel_lineage``,
  which marks rounds in run id order (see ``_migrations``) and returns one row
  per round marked, so its row count is what the SQLite UPDATE's is.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

_TERMINAL: Final = "('completed', 'failed', 'cancelled')"

_RUN_COLUMNS: Final = """
  r.run_id, r.status, r.created_at_ms, r.started_at_ms, r.finished_at_ms,
  r.owner_host_id, r.owner_pid, r.owner_nonce, r.heartbeat_at_ms,
  r.claim_host_id, r.claim_pid, r.claim_nonce, r.claimed_at_ms,
  r.parent_run_id, r.cancel_requested_at_ms, r.lineage_id, r.round_ordinal,
  s.state_json
"""
_FROM_RUNS: Final = "FROM flows_runs AS r LEFT JOIN flows_run_state AS s ON s.run_id = r.run_id"

_ROOT: Final = "(SELECT COALESCE(lineage_id, run_id) FROM flows_runs WHERE run_id = $1::text)"


def _unused(*parameters: str) -> str:
    """A true condition that mentions parameters a statement shares with its
    sibling but does not use (``"$7::bigint"``), so PostgreSQL learns their
    types. The planner folds it away."""
    return " AND ".join(f"({p} IS NULL OR TRUE)" for p in parameters)


def _member(prefix: str) -> str:
    p = prefix
    return (
        f"({p}lineage_id = {_ROOT} OR ({p}run_id = {_ROOT} "
        f"AND ({p}lineage_id IS NULL OR {p}lineage_id = {_ROOT})))"
    )


_SNAPSHOT: Final = (
    "status = $2::text AND owner_host_id IS NOT DISTINCT FROM $3::text "
    "AND owner_pid IS NOT DISTINCT FROM $4::bigint "
    "AND owner_nonce IS NOT DISTINCT FROM $5::text "
    "AND heartbeat_at_ms IS NOT DISTINCT FROM $6::bigint"
)
_LAST_POSITION: Final = (
    "(SELECT COALESCE(MAX(position), 0) FROM flows_ownership_facts WHERE run_id = $1::text)"
)
_CLAIM_FREE: Final = (
    "claim_host_id IS NULL AND claim_pid IS NULL AND claim_nonce IS NULL AND claimed_at_ms IS NULL"
)


def _claim_is(first: int) -> str:
    a, b, c, d = first, first + 1, first + 2, first + 3
    return (
        f"claim_host_id IS NOT DISTINCT FROM ${a}::text "
        f"AND claim_pid IS NOT DISTINCT FROM ${b}::bigint "
        f"AND claim_nonce IS NOT DISTINCT FROM ${c}::text "
        f"AND claimed_at_ms IS NOT DISTINCT FROM ${d}::bigint"
    )


def _loss(cutoff: int) -> str:
    return (
        "CASE WHEN claim_host_id IS NOT NULL THEN 'already_claimed' "
        "WHEN status = 'running' AND heartbeat_at_ms IS NOT NULL "
        f"AND heartbeat_at_ms >= ${cutoff}::bigint THEN 'heartbeat_fresh' "
        "ELSE 'snapshot_changed' END"
    )


def _owned_by(first: int) -> str:
    a, b, c = first, first + 1, first + 2
    return (
        f"status = 'running' AND owner_host_id = ${a}::text AND owner_pid = ${b}::bigint "
        f"AND owner_nonce = ${c}::text"
    )


_CLEARED_CLAIM: Final = (
    "claim_host_id = NULL, claim_pid = NULL, claim_nonce = NULL, claimed_at_ms = NULL"
)

# -- the run lock ------------------------------------------------------------------

LOCK_RUN: Final = "SELECT 1 FROM flows_runs WHERE run_id = $1::text FOR UPDATE"
#: Many runs' rows (``heartbeat_many``), locked in run id order so two batches
#: over overlapping runs cannot deadlock.
LOCK_RUNS: Final = (
    "SELECT 1 FROM flows_runs WHERE run_id = ANY($1::text[]) ORDER BY run_id FOR UPDATE"
)

# -- create, get, lineage, latest_round ----------------------------------------

# A new round takes a key-share lock on its lineage's root, as a child's
# foreign key does on its parent: lineage_id has no foreign key, and without
# the lock a purge that had judged the root (no live round) could delete it
# after this round committed (found by the torture's lineage workload). A
# purge waits for a root so locked, then keeps it (its recheck sees the
# round); a create that waits for a purge holding the root lands after it,
# when the root is gone (legal: the model asks no root of a round). The CTE
# is referenced, so it runs.
_LOCK_ROOT: Final = (
    "WITH root AS (SELECT 1 AS held FROM flows_runs WHERE run_id = $4::text FOR KEY SHARE)"
)
CREATE_RUN: Final = f"""
{_LOCK_ROOT}
INSERT INTO flows_runs (run_id, status, created_at_ms, parent_run_id, lineage_id, round_ordinal)
SELECT $1::text, 'pending', $2::bigint, $3::text, $4::text, $5::bigint
WHERE (SELECT count(*) FROM root) >= 0
"""
CREATE_STATE: Final = "INSERT INTO flows_run_state (run_id, state_json) VALUES ($1::text, $2::text)"

GET: Final = f"SELECT {_RUN_COLUMNS} {_FROM_RUNS} WHERE r.run_id = $1::text"

LINEAGE: Final = (
    f"SELECT {_RUN_COLUMNS} {_FROM_RUNS} WHERE {_member('r.')} "
    "ORDER BY COALESCE(r.round_ordinal, 0), r.run_id"
)

LATEST_ROUND: Final = f"""
SELECT {_RUN_COLUMNS} {_FROM_RUNS}
WHERE r.run_id = COALESCE(
  (SELECT run_id FROM flows_runs WHERE lineage_id = {_ROOT}
   ORDER BY round_ordinal DESC LIMIT 1),
  (SELECT run_id FROM flows_runs WHERE run_id = $1::text)
)
"""

RUN_EXISTS: Final = "SELECT 1 FROM flows_runs WHERE run_id = $1::text"

# -- cancellation ----------------------------------------------------------------

REQUEST_CANCEL_WRITE: Final = f"""
UPDATE flows_runs SET cancel_requested_at_ms = $2::bigint
WHERE run_id = $1::text AND cancel_requested_at_ms IS NULL AND status NOT IN {_TERMINAL}
"""
REQUEST_CANCEL_MISS: Final = (
    "SELECT cancel_requested_at_ms, status FROM flows_runs WHERE run_id = $1::text"
)

REQUEST_CANCEL_LINEAGE_WRITE: Final = (
    "SELECT * FROM flows_request_cancel_lineage($1::text, $2::bigint)"
)
REQUEST_CANCEL_LINEAGE_MISS: Final = (
    f"SELECT cancel_requested_at_ms, status FROM flows_runs WHERE {_member('')} "
    "ORDER BY COALESCE(round_ordinal, 0), run_id"
)

ACKNOWLEDGE_CANCEL_WRITE: Final = f"""
UPDATE flows_runs
SET cancel_acknowledgement_json = COALESCE(cancel_acknowledgement_json, $5::text)
WHERE run_id = $1::text AND {_owned_by(2)} AND cancel_requested_at_ms IS NOT NULL
"""

# -- claim -------------------------------------------------------------------------

_CLAIM_ADMITS: Final = f"status IN ('pending', 'suspended') AND {_SNAPSHOT} AND {_CLAIM_FREE}"

CLAIM_CLASSIFY: Final = (
    f"SELECT {_CLAIM_ADMITS}, {_loss(7)}, {_LAST_POSITION} FROM flows_runs WHERE run_id = $1::text"
)
CLAIM_WRITE: Final = f"""
UPDATE flows_runs
SET claim_host_id = $8::text, claim_pid = $9::bigint, claim_nonce = $10::text,
    claimed_at_ms = $11::bigint
WHERE run_id = $1::text AND {_CLAIM_ADMITS} AND {_unused("$7::bigint")}
"""

# -- claim_and_own -------------------------------------------------------------------

CLAIM_AND_OWN_PRECHECK: Final = (
    f"SELECT {_loss(7)}, {_SNAPSHOT} FROM flows_runs WHERE run_id = $1::text"
)
_CLAIM_AND_OWN_ADMITS: Final = (
    f"status IN ('pending', 'suspended', 'running') AND {_SNAPSHOT} AND {_CLAIM_FREE} "
    "AND (status <> 'running' OR heartbeat_at_ms IS NULL OR heartbeat_at_ms < $7::bigint)"
)
CLAIM_AND_OWN_CLASSIFY: Final = (
    f"SELECT {_CLAIM_AND_OWN_ADMITS}, {_loss(7)}, {_LAST_POSITION} "
    "FROM flows_runs WHERE run_id = $1::text"
)
CLAIM_AND_OWN_WRITE: Final = f"""
UPDATE flows_runs
SET status = 'running', started_at_ms = COALESCE(started_at_ms, $11::bigint),
    finished_at_ms = NULL,
    owner_host_id = $8::text, owner_pid = $9::bigint, owner_nonce = $10::text,
    heartbeat_at_ms = $11::bigint
WHERE run_id = $1::text AND {_CLAIM_AND_OWN_ADMITS}
"""

# -- steal -------------------------------------------------------------------------

_STEAL_ADMITS: Final = (
    f"{_SNAPSHOT} AND {_CLAIM_FREE} AND heartbeat_at_ms IS NOT NULL "
    "AND heartbeat_at_ms < $7::bigint"
)
STEAL_CLASSIFY: Final = (
    f"SELECT {_STEAL_ADMITS}, {_loss(7)}, {_LAST_POSITION} FROM flows_runs WHERE run_id = $1::text"
)
STEAL_WRITE: Final = f"""
UPDATE flows_runs
SET claim_host_id = $8::text, claim_pid = $9::bigint, claim_nonce = $10::text,
    claimed_at_ms = $11::bigint
WHERE run_id = $1::text AND {_STEAL_ADMITS}
"""

# -- activate, abandon_claim, recover_claim ------------------------------------------

ACTIVATE_CLASSIFY: Final = (
    f"SELECT {_claim_is(7)}, {_SNAPSHOT}, {_LAST_POSITION} FROM flows_runs WHERE run_id = $1::text"
)
ACTIVATE_WRITE: Final = f"""
UPDATE flows_runs
SET status = 'running', started_at_ms = COALESCE(started_at_ms, $11::bigint),
    finished_at_ms = NULL,
    owner_host_id = $7::text, owner_pid = $8::bigint, owner_nonce = $9::text,
    heartbeat_at_ms = $11::bigint,
    {_CLEARED_CLAIM}
WHERE run_id = $1::text AND {_SNAPSHOT} AND {_claim_is(7)}
"""

CLEAR_CLAIM: Final = f"""
UPDATE flows_runs SET {_CLEARED_CLAIM}
WHERE run_id = $1::text AND {_claim_is(2)}
"""

RECOVER_CLAIM_CLASSIFY: Final = (
    f"SELECT {_claim_is(2)}, claimed_at_ms >= $6::bigint, {_LAST_POSITION} "
    "FROM flows_runs WHERE run_id = $1::text"
)

# -- heartbeat, reconfirm --------------------------------------------------------------

RENEW_WRITE: Final = f"""
UPDATE flows_runs SET heartbeat_at_ms = GREATEST(heartbeat_at_ms, $5::bigint)
WHERE run_id = $1::text AND {_owned_by(2)}
"""

# -- transition_owned ---------------------------------------------------------------

_GUARD_BLOCKS: Final = (
    "(($5::text IS NOT DISTINCT FROM 'absent' AND cancel_requested_at_ms IS NOT NULL) "
    "OR ($5::text IS NOT DISTINCT FROM 'present' AND cancel_requested_at_ms IS NULL))"
)
TRANSITION_RUNNING_WRITE: Final = f"""
UPDATE flows_runs SET status = 'running', finished_at_ms = NULL
WHERE run_id = $1::text AND {_owned_by(2)} AND NOT {_GUARD_BLOCKS}
"""
TRANSITION_SETTLE_WRITE: Final = f"""
UPDATE flows_runs
SET status = $6::text, finished_at_ms = $7::bigint,
    owner_host_id = NULL, owner_pid = NULL, owner_nonce = NULL, heartbeat_at_ms = NULL,
    {_CLEARED_CLAIM}
WHERE run_id = $1::text AND {_owned_by(2)} AND NOT {_GUARD_BLOCKS}
"""
TRANSITION_CLASSIFY: Final = (
    f"SELECT {_owned_by(2)}, {_GUARD_BLOCKS} FROM flows_runs WHERE run_id = $1::text"
)
STATE_WRITE: Final = """
INSERT INTO flows_run_state (run_id, state_json) VALUES ($1::text, $2::text)
ON CONFLICT (run_id) DO UPDATE SET state_json = excluded.state_json
"""

# -- facts -----------------------------------------------------------------------------

FACT_AT: Final = """
INSERT INTO flows_ownership_facts
  (run_id, position, transition, owner_host_id, owner_pid, owner_nonce, granted_at_ms)
VALUES ($1::text, $7::bigint, $2::text, $3::text, $4::bigint, $5::text, $6::bigint)
"""
FACTS_GRANT_ACTIVATED_AT: Final = """
INSERT INTO flows_ownership_facts
  (run_id, position, transition, owner_host_id, owner_pid, owner_nonce, granted_at_ms)
VALUES ($1::text, $7::bigint, $2::text, $3::text, $4::bigint, $5::text, $6::bigint),
       ($1::text, $7::bigint + 1, 'activated', $3::text, $4::bigint, $5::text, $6::bigint)
"""
FACTS_CLAIMED_ACTIVATED: Final[str | None] = f"""
INSERT INTO flows_ownership_facts
  (run_id, position, transition, owner_host_id, owner_pid, owner_nonce, granted_at_ms)
SELECT $1::text, m.last + v.n, CASE v.n WHEN 1 THEN $2::text ELSE 'activated' END,
       $3::text, $4::bigint, $5::text, $6::bigint
FROM (SELECT {_LAST_POSITION} AS last) AS m CROSS JOIN (VALUES (1), (2)) AS v(n)
"""
#: The run's last fact position (SQLite reads it before inserting both facts;
#: here FACTS_CLAIMED_ACTIVATED does it in its one statement).
LAST_FACT_POSITION: Final = f"SELECT {_LAST_POSITION}"
FACT_APPEND: Final = f"""
INSERT INTO flows_ownership_facts
  (run_id, position, transition, owner_host_id, owner_pid, owner_nonce, granted_at_ms)
VALUES ($1::text, {_LAST_POSITION} + 1, $2::text, $3::text, $4::bigint, $5::text, $6::bigint)
"""
FACTS_OF_RUN: Final = """
SELECT run_id, position, transition, owner_host_id, owner_pid, owner_nonce, granted_at_ms
FROM flows_ownership_facts WHERE run_id = $1::text ORDER BY position
"""

# -- revisions ----------------------------------------------------------------------

# Both number the change log first (runstore.postgres._change_feed): a read
# that finds entries waiting writes; one that finds none writes nothing. In a
# read-only session they answer the numbered prefix.
REVISION: Final = "SELECT flows_number_changes()"
CHANGES: Final = "SELECT run_id, revision, deleted FROM flows_changes_after($1::bigint)"
#: What ``state()`` runs before its snapshot, so the snapshot sees every
#: write acknowledged before it numbered.
NUMBER_CHANGES: Final[str | None] = REVISION

# -- list_runs ---------------------------------------------------------------------
#
# The pieces of a page's SELECT (``runstore.sqlite._queries`` explains them;
# the parameters are the same: $1, $2 the cursor, $3 unused, $4 the stale
# cutoff, $5 the claim-stale cutoff, $6 the lineage, $7 the parent, $8 the row
# limit). ``LIST_PARAMETERS`` mentions all eight, so any assembly of the
# pieces tells PostgreSQL every parameter's type. PostgreSQL has no index
# hints: its planner picks the partial index a filter's text implies.

LIST_COLUMNS: Final = """
  r.run_id, r.status, r.created_at_ms, r.started_at_ms, r.finished_at_ms,
  r.owner_host_id, r.owner_pid, r.owner_nonce, r.heartbeat_at_ms,
  r.claim_host_id, r.claim_pid, r.claim_nonce, r.claimed_at_ms,
  r.parent_run_id, r.cancel_requested_at_ms, r.lineage_id, r.round_ordinal,
  NULL::text
"""
LIST_COLUMNS_WITH_STATE: Final = _RUN_COLUMNS
LIST_FROM: Final = "FROM flows_runs AS r"
LIST_FROM_WITH_STATE: Final = _FROM_RUNS
LIST_FROM_CLAIMABLE: Final = LIST_FROM
LIST_FROM_CLAIMABLE_WITH_STATE: Final = _FROM_RUNS
LIST_STATUS: Final = "r.status = '{status}'"
LIST_CLAIMABLE: Final = "r.status IN ('pending', 'suspended') AND r.claim_host_id IS NULL"
LIST_STALE: Final = "r.status = 'running' AND r.heartbeat_at_ms < $4::bigint"
LIST_CLAIM_STALE: Final = "r.claim_host_id IS NOT NULL AND r.claimed_at_ms < $5::bigint"
_WAITING: Final = "r.cancel_requested_at_ms IS NOT NULL AND r.cancel_acknowledgement_json IS NULL"
LIST_CANCEL_WAITING: Final = f"({_WAITING})"
LIST_CANCEL_NOT_WAITING: Final = f"NOT ({_WAITING})"
LIST_LINEAGE: Final = "(r.lineage_id = $6::text OR (r.run_id = $6::text AND r.lineage_id IS NULL))"
LIST_PARENT: Final = "r.parent_run_id = $7::text"
LIST_AFTER: Final = "(r.created_at_ms, r.run_id) > ($1::bigint, $2::text)"
LIST_PARAMETERS: Final = _unused(
    "$1::bigint",
    "$2::text",
    "$3::bigint",
    "$4::bigint",
    "$5::bigint",
    "$6::text",
    "$7::text",
    "$8::bigint",
)
#: The page's size is written into the text (``{limit}``, an admitted int),
#: not passed as $8: with LIMIT $8 a generic plan is costed for a tenth of
#: the table, so on a large store the server planned the statement afresh on
#: every call (benchmarks/pg_growth.py: custom plans only at 2 * 10^5 runs,
#: generic ones after five calls at 10^3).
LIST_ORDER: Final = "ORDER BY r.created_at_ms, r.run_id LIMIT {limit}"
#: PostgreSQL 15 appends UNION ALL arms and sorts them all, so each arm is
#: cut to the page first: the sort then handles at most a page per status.
LIST_UNION_ARM: Final = "({arm} ORDER BY r.created_at_ms, r.run_id LIMIT {limit})"
LIST_UNION_ORDER: Final = "ORDER BY 3, 1 LIMIT {limit}"

# -- claim_next ---------------------------------------------------------------------

# As SQLite's, locking the row it picks; rows other workers hold are skipped,
# so concurrent callers take different runs instead of queuing on one.
CLAIM_NEXT_PICK: Final = f"""
SELECT {_RUN_COLUMNS}
FROM flows_runs AS r LEFT JOIN flows_run_state AS s ON s.run_id = r.run_id
WHERE r.status IN ('pending', 'suspended') AND r.claim_host_id IS NULL
  AND r.status IN ($3::text, $4::text)
  AND (r.created_at_ms, r.run_id) > ($1::bigint, $2::text)
ORDER BY r.created_at_ms, r.run_id LIMIT 1
FOR UPDATE OF r SKIP LOCKED
"""

# -- heartbeat_many -------------------------------------------------------------------

# flows_renew_runs writes the rows one by one in run id order (an UPDATE's own
# row order is its plan's) and answers how many it wrote; $1 ids, $2 stamps.
RENEW_MANY_WRITE: Final = (
    "SELECT flows_renew_runs($1::text[], $2::bigint[], $3::text, $4::bigint, $5::text)"
)
OWNED_AMONG: Final = f"""
SELECT run_id FROM flows_runs WHERE run_id = ANY($1::text[]) AND {_owned_by(2)}
"""
EXISTING_AMONG: Final = "SELECT run_id FROM flows_runs WHERE run_id = ANY($1::text[])"

# -- purge_settled, compact_changes ------------------------------------------------------

# As SQLite's (runstore.sqlite._queries): two NOT EXISTS, which the planner
# turns into anti-joins probing an index once per candidate (the lineage's
# through flows_runs_live_rounds_idx, which holds only live rounds). Written
# as one NOT (EXISTS OR EXISTS), it hashed every live run of the table on
# each call, whatever the limit.
_NO_LIVE_ROUND: Final = f"""
  NOT EXISTS (SELECT 1 FROM flows_runs AS m
              WHERE m.lineage_id = COALESCE(r.lineage_id, r.run_id)
                AND m.status NOT IN {_TERMINAL})
  AND NOT EXISTS (SELECT 1 FROM flows_runs AS m
                  WHERE m.run_id = COALESCE(r.lineage_id, r.run_id)
                    AND (m.lineage_id IS NULL OR m.lineage_id = m.run_id)
                    AND m.status NOT IN {_TERMINAL})"""
_NO_CHILD: Final = "NOT EXISTS (SELECT 1 FROM flows_runs AS c WHERE c.parent_run_id = r.run_id)"
_PURGEABLE: Final = f"""
FROM flows_runs AS r
WHERE r.finished_at_ms < $1::bigint AND r.status IN {_TERMINAL}
  AND {_NO_CHILD}
  AND {_NO_LIVE_ROUND}
ORDER BY r.finished_at_ms, r.run_id LIMIT $2::bigint
"""
# Purges of one schema take turns: two at once would each pass over the rows
# the other holds and judge their parents by a snapshot from before the other
# deleted their children, so neither would purge a run that became eligible
# between them (found by the torture: two workers' purges left a lineage root
# neither deleted).
PURGE_SERIALIZE: Final = (
    "SELECT pg_catalog.pg_advisory_xact_lock("
    "pg_catalog.hashtext('runstore-purge:' || pg_catalog.current_schema()))"
)
# Locks what it picks, waiting for a run another transaction holds: a purge
# deletes every eligible run up to its limit, as the model's does. (It used to
# skip a held run, SKIP LOCKED, which no sequential program shows but the
# torture did: a heartbeat_many holding a settled run made a purge leave it
# behind.) A child or a round being created under a run takes a key-share
# lock on it: the purge waits for that create, and PURGE_RECHECK, in a fresh
# snapshot, then keeps the parent or the root. The rows are locked in the
# candidates' order; a heartbeat_many holding two of them in run id order can
# deadlock with it, which the server breaks and the store replays (40P01).
PURGE_CANDIDATES: Final = f"SELECT r.run_id {_PURGEABLE} FOR UPDATE OF r"
# purge_candidates: the same runs, as rows without their state; a read, which
# locks nothing (a read-only session may not).
PURGE_CANDIDATE_ROWS: Final = f"SELECT {LIST_COLUMNS} {_PURGEABLE}"
# The candidates, locked now, that are still purgeable in a fresh snapshot (a
# child committed after PURGE_CANDIDATES's snapshot keeps its parent).
PURGE_RECHECK: Final = f"""
SELECT r.run_id FROM flows_runs AS r
WHERE r.run_id = ANY($1::text[])
  AND {_NO_CHILD}
  AND {_NO_LIVE_ROUND}
"""
PURGE_ATTEMPTS: Final = "DELETE FROM flows_attempts WHERE run_id = ANY($1::text[])"
PURGE_FACTS: Final = "DELETE FROM flows_ownership_facts WHERE run_id = ANY($1::text[])"
PURGE_STATE: Final = "DELETE FROM flows_run_state WHERE run_id = ANY($1::text[])"
PURGE_LEASES: Final = "DELETE FROM flows_consensus_leases WHERE run_id = ANY($1::text[])"
# flows_purge_runs deletes the runs one by one in run id order (the order the
# deferred revision trigger numbers their tombstones) and answers how many.
PURGE_RUNS: Final = "SELECT flows_purge_runs($1::text[])"

# After the counter's lock, as a numberer takes its locks (no deadlock).
COMPACT_CANDIDATES: Final = (
    "SELECT run_id, revision FROM flows_compact_candidates($1::bigint, $2::bigint)"
)
COMPACT_DELETE: Final = (
    "DELETE FROM flows_run_changes WHERE deleted = 1 AND run_id = ANY($1::text[])"
)
COMPACT_RECORD: Final = (
    "UPDATE flows_run_source SET compacted_through = GREATEST(compacted_through, $1::bigint) "
    "WHERE singleton = 1"
)


def ids_param(run_ids: Sequence[str]) -> list[str]:
    """Run ids as the ``text[]`` parameter of ``*_AMONG`` and ``PURGE_*``."""
    return list(run_ids)


def stamps_param(pairs: Sequence[tuple[str, int]]) -> tuple[list[str], list[int]]:
    """(run id, stamp) pairs as RENEW_MANY_WRITE's $1 (ids) and $2 (stamps)."""
    return [rid for rid, _ in pairs], [stamp for _, stamp in pairs]


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

# Each run's newest change entry: its last in the change log, which is still
# to be numbered (runstore.postgres._change_feed), or else its numbered one.
_LOG_NEWEST: Final = """
WITH waiting AS (
  SELECT DISTINCT ON (u.id) u.id AS run_id, l.deleted
  FROM flows_change_log AS l, unnest(l.run_ids) WITH ORDINALITY AS u(id, position)
  ORDER BY u.id, l.seq DESC, u.position DESC
)"""
_NEWEST_ENTRY: Final = (
    _LOG_NEWEST
    + """, newest AS (
  SELECT COALESCE(w.run_id, c.run_id) AS run_id, COALESCE(w.deleted, c.deleted) AS deleted
  FROM waiting AS w FULL JOIN flows_run_changes AS c ON c.run_id = w.run_id
)"""
)

INVARIANT_QUERIES: Final[tuple[tuple[str, str], ...]] = (
    (
        "one revision source",
        "SELECT count(*) <> 1 FROM flows_run_source",
    ),
    (
        "the revision is the newest change",
        """SELECT (SELECT revision FROM flows_run_source)
                  IS DISTINCT FROM GREATEST(
                    (SELECT COALESCE(MAX(revision), 0) FROM flows_run_changes),
                    (SELECT compacted_through FROM flows_run_source))""",
    ),
    (
        "every run has a live change entry",
        # Joined on the tables' own run ids (a join on the full join's
        # COALESCE was planned as a nested loop under LIMIT 1: quadratic).
        f"""{_LOG_NEWEST} SELECT r.run_id FROM flows_runs AS r
           LEFT JOIN waiting AS w ON w.run_id = r.run_id
           LEFT JOIN flows_run_changes AS c ON c.run_id = r.run_id
           WHERE COALESCE(w.deleted, c.deleted) IS DISTINCT FROM 0 LIMIT 1""",
    ),
    (
        "every live change entry has its run and every tombstone has none",
        f"""{_NEWEST_ENTRY} SELECT c.run_id FROM newest AS c
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
           WHERE NOT (l.owner_host_id IS NOT DISTINCT FROM r.owner_host_id
                      AND l.owner_pid IS NOT DISTINCT FROM r.owner_pid
                      AND l.owner_nonce IS NOT DISTINCT FROM r.owner_nonce
                      AND l.heartbeat_at_ms IS NOT DISTINCT FROM r.heartbeat_at_ms
                      AND l.claim_host_id IS NOT DISTINCT FROM r.claim_host_id
                      AND l.claim_pid IS NOT DISTINCT FROM r.claim_pid
                      AND l.claim_nonce IS NOT DISTINCT FROM r.claim_nonce
                      AND l.claimed_at_ms IS NOT DISTINCT FROM r.claimed_at_ms)
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
           WHERE l.owner_host_id IS NOT NULL AND l.granted_at_ms IS DISTINCT FROM (
             SELECT f.granted_at_ms FROM flows_ownership_facts AS f
             WHERE f.run_id = l.run_id AND f.transition = 'activated'
             ORDER BY f.position DESC LIMIT 1)
           LIMIT 1""",
    ),
)
