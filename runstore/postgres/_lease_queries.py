"""``SqlConsensus``'s statements in PostgreSQL, under the SQLite module's names
(``runstore.sqlite._lease_queries``; a test checks both define the same).

Every parameter is cast to its type. The store has locked the run row before
any of these runs, so each run's lease changes are serialized by that lock.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import psycopg

from .._sql._faults import InjectedFault

#: The errors a statement here raises when storage fails (an injected fault
#: included: the fault seam raises it in place of a statement).
DATABASE_ERRORS: Final = (psycopg.Error, InjectedFault)

_OWNER_IS: Final = "owner_host_id = $2::text AND owner_pid = $3::bigint AND owner_nonce = $4::text"
_CLAIM_IS: Final = (
    "claim_host_id = $2::text AND claim_pid = $3::bigint AND claim_nonce = $4::text "
    "AND claimed_at_ms = $5::bigint"
)

CLAIM: Final = """
INSERT INTO flows_consensus_leases AS l
  (run_id, claim_host_id, claim_pid, claim_nonce, claimed_at_ms)
VALUES ($1::text, $2::text, $3::bigint, $4::text, $5::bigint)
ON CONFLICT (run_id) DO UPDATE SET
  claim_host_id = excluded.claim_host_id, claim_pid = excluded.claim_pid,
  claim_nonce = excluded.claim_nonce, claimed_at_ms = excluded.claimed_at_ms
WHERE l.claim_host_id IS NULL AND l.owner_host_id IS NULL
"""
CLAIM_ACTIVATE: Final = """
INSERT INTO flows_consensus_leases AS l
  (run_id, owner_host_id, owner_pid, owner_nonce, granted_at_ms, heartbeat_at_ms)
VALUES ($1::text, $2::text, $3::bigint, $4::text, $5::bigint, $5::bigint)
ON CONFLICT (run_id) DO UPDATE SET
  owner_host_id = excluded.owner_host_id, owner_pid = excluded.owner_pid,
  owner_nonce = excluded.owner_nonce, granted_at_ms = excluded.granted_at_ms,
  heartbeat_at_ms = excluded.heartbeat_at_ms
WHERE l.claim_host_id IS NULL AND l.owner_host_id IS NULL
"""
STEAL: Final = f"""
UPDATE flows_consensus_leases
SET claim_host_id = $5::text, claim_pid = $6::bigint, claim_nonce = $7::text,
    claimed_at_ms = $8::bigint
WHERE run_id = $1::text AND {_OWNER_IS} AND claim_host_id IS NULL
  AND heartbeat_at_ms IS NOT NULL AND heartbeat_at_ms < $9::bigint
"""
ACTIVATE: Final = """
UPDATE flows_consensus_leases
SET owner_host_id = $2::text, owner_pid = $3::bigint, owner_nonce = $4::text,
    granted_at_ms = $5::bigint, heartbeat_at_ms = $6::bigint,
    claim_host_id = NULL, claim_pid = NULL, claim_nonce = NULL, claimed_at_ms = NULL
WHERE run_id = $1::text AND claim_host_id = $2::text AND claim_pid = $3::bigint
  AND claim_nonce = $4::text AND claimed_at_ms = $5::bigint
"""
HEARTBEAT: Final = f"""
UPDATE flows_consensus_leases
SET heartbeat_at_ms = GREATEST(COALESCE(heartbeat_at_ms, $5::bigint), $5::bigint)
WHERE run_id = $1::text AND {_OWNER_IS}
RETURNING heartbeat_at_ms
"""
RECONFIRM: Final = f"""
UPDATE flows_consensus_leases
SET heartbeat_at_ms = GREATEST(COALESCE(heartbeat_at_ms, $5::bigint), $5::bigint)
WHERE run_id = $1::text AND {_OWNER_IS} AND claim_host_id IS NULL
RETURNING heartbeat_at_ms
"""
# PostgreSQL returns rows cheaply: a renewal answers its stamp directly, and
# the *_HELD reads (SQLite's fallback when the change count says nothing
# moved) are never needed; they are here so both backends name the same.
HEARTBEAT_HELD: Final = (
    f"SELECT heartbeat_at_ms FROM flows_consensus_leases WHERE run_id = $1::text AND {_OWNER_IS}"
)
RECONFIRM_HELD: Final = (
    "SELECT heartbeat_at_ms FROM flows_consensus_leases "
    f"WHERE run_id = $1::text AND {_OWNER_IS} AND claim_host_id IS NULL"
)
HEARTBEAT_MANY_HELD: Final = f"""
SELECT run_id, heartbeat_at_ms FROM flows_consensus_leases
WHERE run_id = ANY($1::text[]) AND {_OWNER_IS}
"""
HEARTBEAT_MANY: Final = f"""
UPDATE flows_consensus_leases
SET heartbeat_at_ms = GREATEST(COALESCE(heartbeat_at_ms, $5::bigint), $5::bigint)
WHERE run_id = ANY($1::text[]) AND {_OWNER_IS}
RETURNING run_id, heartbeat_at_ms
"""
RECOVER: Final = f"""
UPDATE flows_consensus_leases
SET claim_host_id = NULL, claim_pid = NULL, claim_nonce = NULL, claimed_at_ms = NULL
WHERE run_id = $1::text AND {_CLAIM_IS} AND claimed_at_ms < $6::bigint
"""
RELEASE_CLAIM: Final = f"""
UPDATE flows_consensus_leases
SET claim_host_id = NULL, claim_pid = NULL, claim_nonce = NULL, claimed_at_ms = NULL
WHERE run_id = $1::text AND {_CLAIM_IS}
RETURNING owner_host_id
"""
RELEASE_OWNERSHIP: Final = (
    f"DELETE FROM flows_consensus_leases WHERE run_id = $1::text AND {_OWNER_IS}"
)
PRUNE: Final = (
    "DELETE FROM flows_consensus_leases "
    "WHERE run_id = $1::text AND owner_host_id IS NULL AND claim_host_id IS NULL"
)
GUARD: Final = f"SELECT 1 FROM flows_consensus_leases WHERE run_id = $1::text AND {_OWNER_IS}"
LEASE: Final = """
SELECT owner_host_id, owner_pid, owner_nonce, granted_at_ms, heartbeat_at_ms,
       claim_host_id, claim_pid, claim_nonce, claimed_at_ms
FROM flows_consensus_leases WHERE run_id = $1::text
"""
ALL_LEASES: Final = """
SELECT run_id, owner_host_id, owner_pid, owner_nonce, granted_at_ms, heartbeat_at_ms,
       claim_host_id, claim_pid, claim_nonce, claimed_at_ms
FROM flows_consensus_leases ORDER BY run_id
"""


def ids_param(run_ids: Sequence[str]) -> list[str]:
    """Run ids as HEARTBEAT_MANY's $1."""
    return list(run_ids)
