"""``AttemptStore``'s statements in PostgreSQL, under the SQLite module's names
(``runstore.sqlite._attempt_queries``; a test checks both define the same).

They are written with named parameters like SQLite's, each cast to its type
(``:run_id::text``); ``bind`` numbers the names in order of first appearance
(``$1``, ``$2``, ...; a statement's compiled form is cached) and orders the
values to match, so every parameter PostgreSQL is given is one the
statement uses. The store locks the run row (``LOCK_RUN``) before any of
these writes, so the fence cannot change between the check and the commit.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any, Final

IN_PROGRESS_MARK: Final = ":{name}::text"

_ID = (
    "run_id = :run_id::text AND step_key_digest = :step_key_digest::text "
    "AND attempt = :attempt::bigint"
)

_FENCE = """EXISTS (
    SELECT 1 FROM flows_runs AS r
    WHERE r.run_id = :run_id::text AND r.status = 'running'
      AND r.owner_host_id = :host_id::text AND r.owner_pid = :pid::bigint
      AND r.owner_nonce = :nonce::text
)"""

_COLUMNS = (
    "run_id, step_key_digest, attempt, state, started_at_ms, finished_at_ms,"
    " heartbeat_at_ms, checkpoint_json, error_json, outcome_json, meta_json"
)

PUT_INSERT: Final = f"""
INSERT INTO flows_attempts ({_COLUMNS})
SELECT :run_id::text, :step_key_digest::text, :attempt::bigint, :state::text,
       :started_at_ms::bigint, :finished_at_ms::bigint, :heartbeat_at_ms::bigint,
       :checkpoint_json::text, :error_json::text, :outcome_json::text, :meta_json::text
WHERE {_FENCE}
ON CONFLICT (run_id, step_key_digest, attempt) DO NOTHING
RETURNING 1
"""

PUT_UPSERT: Final = f"""
UPDATE flows_attempts
SET state = :state::text, started_at_ms = :started_at_ms::bigint,
    finished_at_ms = :finished_at_ms::bigint, heartbeat_at_ms = :heartbeat_at_ms::bigint,
    checkpoint_json = :checkpoint_json::text, error_json = :error_json::text,
    outcome_json = :outcome_json::text, meta_json = :meta_json::text
WHERE {_ID} AND state IN ({{in_progress}}) AND {_FENCE}
RETURNING 1
"""

PUT_CLASSIFY: Final = f"""
SELECT EXISTS (SELECT 1 FROM flows_runs WHERE run_id = :run_id::text), {_FENCE}
"""

HEARTBEAT: Final = f"""
UPDATE flows_attempts
SET heartbeat_at_ms = GREATEST(COALESCE(heartbeat_at_ms, :now_ms::bigint), :now_ms::bigint),
    checkpoint_json = COALESCE(:checkpoint_json::text, checkpoint_json)
WHERE {_ID} AND state IN ({{in_progress}}) AND {_FENCE}
RETURNING 1
"""

FINISH: Final = f"""
UPDATE flows_attempts
SET state = :state::text, finished_at_ms = :finished_at_ms::bigint,
    error_json = COALESCE(:error_json::text, error_json),
    outcome_json = COALESCE(:outcome_json::text, outcome_json),
    meta_json = COALESCE(:meta_json::text, meta_json)
WHERE {_ID} AND state IN ({{in_progress}}) AND {_FENCE}
RETURNING 1
"""

PATCH: Final = f"""
UPDATE flows_attempts
SET checkpoint_json = COALESCE(:checkpoint_json::text, checkpoint_json),
    error_json = COALESCE(:error_json::text, error_json),
    outcome_json = COALESCE(:outcome_json::text, outcome_json),
    meta_json = COALESCE(:meta_json::text, meta_json)
WHERE {_ID} AND {_FENCE}
RETURNING 1
"""

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

# ``:name`` not preceded by a colon or a word character (so ``::text`` casts
# and the ``:name`` inside them are told apart).
_NAME: Final = re.compile(r"(?<![:\w]):([A-Za-z_][A-Za-z0-9_]*)")


@functools.lru_cache(maxsize=256)
def numbered(statement: str) -> tuple[str, tuple[str, ...]]:
    """``statement`` with ``$n`` for each distinct ``:name``, and the names in order."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in names:
            names.append(name)
        return f"${names.index(name) + 1}"

    return _NAME.sub(number, statement), tuple(names)


def bind(statement: str, params: Mapping[str, Any]) -> tuple[str, tuple[Any, ...]]:
    """The numbered statement and its values in parameter order."""
    text, names = numbered(statement)
    return text, tuple(params[name] for name in names)
