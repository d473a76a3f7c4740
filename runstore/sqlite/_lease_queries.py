"""``SqlConsensus``'s statements in SQLite (``runstore.postgres._lease_queries``
has the same names in PostgreSQL; a test checks both define the same).

Parameters are numbered; each statement's parameters are listed where
``runstore.consensus._sql`` binds them.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Final

#: The errors a statement here raises when storage fails.
DATABASE_ERRORS: Final = (sqlite3.Error,)

_OWNER_IS: Final = "owner_host_id = ?2 AND owner_pid = ?3 AND owner_nonce = ?4"
_CLAIM_IS: Final = (
    "claim_host_id = ?2 AND claim_pid = ?3 AND claim_nonce = ?4 AND claimed_at_ms = ?5"
)

CLAIM: Final = """
INSERT INTO flows_consensus_leases (run_id, claim_host_id, claim_pid, claim_nonce, claimed_at_ms)
VALUES (?1, ?2, ?3, ?4, ?5)
ON CONFLICT (run_id) DO UPDATE SET
  claim_host_id = excluded.claim_host_id, claim_pid = excluded.claim_pid,
  claim_nonce = excluded.claim_nonce, claimed_at_ms = excluded.claimed_at_ms
WHERE claim_host_id IS NULL AND owner_host_id IS NULL
"""
# claim then activate at once (``SqlConsensus.claim_and_activate``): ?2-?4
# take an unowned, unclaimed lease, granted and heartbeated at ?5.
CLAIM_ACTIVATE: Final = """
INSERT INTO flows_consensus_leases
  (run_id, owner_host_id, owner_pid, owner_nonce, granted_at_ms, heartbeat_at_ms)
VALUES (?1, ?2, ?3, ?4, ?5, ?5)
ON CONFLICT (run_id) DO UPDATE SET
  owner_host_id = excluded.owner_host_id, owner_pid = excluded.owner_pid,
  owner_nonce = excluded.owner_nonce, granted_at_ms = excluded.granted_at_ms,
  heartbeat_at_ms = excluded.heartbeat_at_ms
WHERE claim_host_id IS NULL AND owner_host_id IS NULL
"""
STEAL: Final = f"""
UPDATE flows_consensus_leases
SET claim_host_id = ?5, claim_pid = ?6, claim_nonce = ?7, claimed_at_ms = ?8
WHERE run_id = ?1 AND {_OWNER_IS} AND claim_host_id IS NULL
  AND heartbeat_at_ms IS NOT NULL AND heartbeat_at_ms < ?9
"""
ACTIVATE: Final = f"""
UPDATE flows_consensus_leases
SET owner_host_id = ?2, owner_pid = ?3, owner_nonce = ?4, granted_at_ms = ?5,
    heartbeat_at_ms = ?6,
    claim_host_id = NULL, claim_pid = NULL, claim_nonce = NULL, claimed_at_ms = NULL
WHERE run_id = ?1 AND {_CLAIM_IS}
"""
# A renewal moves the heartbeat to ?5 where it is older, and its change count
# says whether it did (RETURNING would say so too, but SQLite buffers returned
# rows in a temporary table, which costs more than the UPDATE). When nothing
# changed, *_HELD reads the stamp of a lease the owner holds whose heartbeat
# is already at or past ?5 (renewed all the same: max(old, now) is old).
_OLDER: Final = "(heartbeat_at_ms IS NULL OR heartbeat_at_ms < ?5)"
HEARTBEAT: Final = f"""
UPDATE flows_consensus_leases SET heartbeat_at_ms = ?5
WHERE run_id = ?1 AND {_OWNER_IS} AND {_OLDER}
"""
HEARTBEAT_HELD: Final = (
    f"SELECT heartbeat_at_ms FROM flows_consensus_leases WHERE run_id = ?1 AND {_OWNER_IS}"
)
RECONFIRM: Final = f"""
UPDATE flows_consensus_leases SET heartbeat_at_ms = ?5
WHERE run_id = ?1 AND {_OWNER_IS} AND claim_host_id IS NULL AND {_OLDER}
"""
RECONFIRM_HELD: Final = (
    "SELECT heartbeat_at_ms FROM flows_consensus_leases "
    f"WHERE run_id = ?1 AND {_OWNER_IS} AND claim_host_id IS NULL"
)
# heartbeat_many: every lease among ?1 (a JSON array of run ids) that ?2-?4
# owns, renewed at once; when the change count falls short of the ids, the
# leases held among them (and their stamps) are read back.
HEARTBEAT_MANY: Final = f"""
UPDATE flows_consensus_leases SET heartbeat_at_ms = ?5
WHERE run_id IN (SELECT value FROM json_each(?1)) AND {_OWNER_IS} AND {_OLDER}
"""
HEARTBEAT_MANY_HELD: Final = f"""
SELECT run_id, heartbeat_at_ms FROM flows_consensus_leases
WHERE run_id IN (SELECT value FROM json_each(?1)) AND {_OWNER_IS}
"""
RECOVER: Final = f"""
UPDATE flows_consensus_leases
SET claim_host_id = NULL, claim_pid = NULL, claim_nonce = NULL, claimed_at_ms = NULL
WHERE run_id = ?1 AND {_CLAIM_IS} AND claimed_at_ms < ?6
"""
RELEASE_CLAIM: Final = f"""
UPDATE flows_consensus_leases
SET claim_host_id = NULL, claim_pid = NULL, claim_nonce = NULL, claimed_at_ms = NULL
WHERE run_id = ?1 AND {_CLAIM_IS}
RETURNING owner_host_id
"""
# Dropping ownership also drops any pending claim, which empties the lease.
RELEASE_OWNERSHIP: Final = f"DELETE FROM flows_consensus_leases WHERE run_id = ?1 AND {_OWNER_IS}"
PRUNE: Final = (
    "DELETE FROM flows_consensus_leases "
    "WHERE run_id = ?1 AND owner_host_id IS NULL AND claim_host_id IS NULL"
)
GUARD: Final = f"SELECT 1 FROM flows_consensus_leases WHERE run_id = ?1 AND {_OWNER_IS}"
LEASE: Final = """
SELECT owner_host_id, owner_pid, owner_nonce, granted_at_ms, heartbeat_at_ms,
       claim_host_id, claim_pid, claim_nonce, claimed_at_ms
FROM flows_consensus_leases WHERE run_id = ?1
"""
ALL_LEASES: Final = """
SELECT run_id, owner_host_id, owner_pid, owner_nonce, granted_at_ms, heartbeat_at_ms,
       claim_host_id, claim_pid, claim_nonce, claimed_at_ms
FROM flows_consensus_leases ORDER BY run_id
"""


def ids_param(run_ids: Sequence[str]) -> str:
    """Run ids as HEARTBEAT_MANY's ?1."""
    return json.dumps(list(run_ids), ensure_ascii=False, separators=(",", ":"))
