"""``AttemptStore``'s statements in SQLite (``runstore.postgres._attempt_queries``
has the same names in PostgreSQL; a test checks both define the same).

Named parameters throughout (``:run_id``); ``{in_progress}`` is filled once
per store with one ``IN_PROGRESS_MARK`` per in-progress state (``:s0``,
``:s1``, ...). ``bind`` turns a statement and its parameter mapping into what
``connection.execute`` takes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

#: One in-progress state's placeholder, by parameter name.
IN_PROGRESS_MARK: Final = ":{name}"

_ID = "run_id = :run_id AND step_key_digest = :step_key_digest AND attempt = :attempt"

#: The run fence: the run exists, is running, and the caller owns it.
_FENCE = """EXISTS (
    SELECT 1 FROM flows_runs AS r
    WHERE r.run_id = :run_id AND r.status = 'running'
      AND r.owner_host_id = :host_id AND r.owner_pid = :pid AND r.owner_nonce = :nonce
)"""

_COLUMNS = (
    "run_id, step_key_digest, attempt, state, started_at_ms, finished_at_ms,"
    " heartbeat_at_ms, checkpoint_json, error_json, outcome_json, meta_json"
)

PUT_INSERT: Final = f"""
INSERT INTO flows_attempts ({_COLUMNS})
SELECT :run_id, :step_key_digest, :attempt, :state, :started_at_ms, :finished_at_ms,
       :heartbeat_at_ms, :checkpoint_json, :error_json, :outcome_json, :meta_json
WHERE {_FENCE}
ON CONFLICT (run_id, step_key_digest, attempt) DO NOTHING
RETURNING 1
"""

PUT_UPSERT: Final = f"""
UPDATE flows_attempts
SET state = :state, started_at_ms = :started_at_ms, finished_at_ms = :finished_at_ms,
    heartbeat_at_ms = :heartbeat_at_ms, checkpoint_json = :checkpoint_json,
    error_json = :error_json, outcome_json = :outcome_json, meta_json = :meta_json
WHERE {_ID} AND state IN ({{in_progress}}) AND {_FENCE}
RETURNING 1
"""

# put: why nothing was written.
PUT_CLASSIFY: Final = f"""
SELECT EXISTS (SELECT 1 FROM flows_runs WHERE run_id = :run_id), {_FENCE}
"""

HEARTBEAT: Final = f"""
UPDATE flows_attempts
SET heartbeat_at_ms = MAX(COALESCE(heartbeat_at_ms, :now_ms), :now_ms),
    checkpoint_json = COALESCE(:checkpoint_json, checkpoint_json)
WHERE {_ID} AND state IN ({{in_progress}}) AND {_FENCE}
RETURNING 1
"""

FINISH: Final = f"""
UPDATE flows_attempts
SET state = :state, finished_at_ms = :finished_at_ms,
    error_json = COALESCE(:error_json, error_json),
    outcome_json = COALESCE(:outcome_json, outcome_json),
    meta_json = COALESCE(:meta_json, meta_json)
WHERE {_ID} AND state IN ({{in_progress}}) AND {_FENCE}
RETURNING 1
"""

# No state predicate: settled attempts may be patched.
PATCH: Final = f"""
UPDATE flows_attempts
SET checkpoint_json = COALESCE(:checkpoint_json, checkpoint_json),
    error_json = COALESCE(:error_json, error_json),
    outcome_json = COALESCE(:outcome_json, outcome_json),
    meta_json = COALESCE(:meta_json, meta_json)
WHERE {_ID} AND {_FENCE}
RETURNING 1
"""

# heartbeat / finish / patch: why nothing was written.
CLASSIFY: Final = f"""
SELECT EXISTS (SELECT 1 FROM flows_attempts WHERE {_ID}), {_FENCE}
"""

SELECT_ONE: Final = f"SELECT {_COLUMNS} FROM flows_attempts WHERE {_ID}"
SELECT_ALL: Final = (
    f"SELECT {_COLUMNS} FROM flows_attempts ORDER BY run_id, step_key_digest, attempt"
)
ORPHANS: Final = """
SELECT COUNT(*) FROM flows_attempts AS a
WHERE NOT EXISTS (SELECT 1 FROM flows_runs AS r WHERE r.run_id = a.run_id)
"""


def bind(statement: str, params: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]]:
    """SQLite takes named parameters as they are."""
    return statement, params
