"""The numbers the lease and admission rules are written against.

Every duration is in milliseconds. The write tolerance is derived rather than
chosen: a peer may take a run the instant its heartbeat is
``HEARTBEAT_STALE_AFTER_MS`` old, and that peer's clock may read up to
``HEARTBEAT_SKEW_ALLOWANCE_MS`` ahead of the owner's, so an owner that kept
working through failed writes for longer than ``stale - skew - interval`` could
still be running when the takeover is admitted. The extra interval is the time
reserved for one last reconfirmation.
"""

from typing import Final

HEARTBEAT_INTERVAL_MS: Final = 1000
"""How often a supervised owner renews its lease: 1 000 ms."""
HEARTBEAT_STALE_AFTER_MS: Final = 30000
"""How old a heartbeat (or a claim) must be before a peer may take the run over with evidence: 30
000 ms."""
HEARTBEAT_SKEW_ALLOWANCE_MS: Final = 10000
"""How far apart two hosts' clocks may be: 10 000 ms. A lease operation whose ``now_ms`` is further
than this ahead of the store clock is refused."""
HEARTBEAT_WRITE_TOLERANCE_MS: Final = (
    HEARTBEAT_STALE_AFTER_MS - HEARTBEAT_SKEW_ALLOWANCE_MS - HEARTBEAT_INTERVAL_MS
)
"""How long a supervised owner keeps working through failed heartbeats before it stops: stale - skew
- interval = 19 000 ms."""

MAXIMUM_RUN_JSON_DEPTH: Final = 128
"""The deepest nesting run state may have: 128 (the root is depth 0)."""
MAXIMUM_RUN_JSON_NODES: Final = 100000
"""The most values run state may hold, and the most members of any one container: 100 000."""
MAXIMUM_IDENTIFIER_LENGTH: Final = 1024
"""The longest identifier (run id, host id, nonce, lineage id): 1 024 UTF-16 code units."""

#: The largest integer a timestamp, pid or ordinal may hold (2**53 - 1): the
#: bound every CHECK constraint in the schema is written against.
MAX_SAFE_INTEGER: Final = 2**53 - 1

#: Run ids with this prefix name the store's own companion fact streams.
COMPANION_PREFIX: Final = "flows.companion/"

#: The most rows one ``list_runs`` page may ask for.
MAXIMUM_PAGE_SIZE: Final = 1000
#: The most run ids one ``heartbeat_many`` call may renew.
MAXIMUM_HEARTBEAT_BATCH: Final = 100_000
#: The most runs one ``claim_next_many`` call claims.
MAXIMUM_CLAIM_BATCH: Final = 1000
#: The most runs (or tombstones) one ``purge_settled`` (``compact_changes``) call removes.
MAXIMUM_PURGE_BATCH: Final = 10_000
