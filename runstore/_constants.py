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
HEARTBEAT_STALE_AFTER_MS: Final = 30000
HEARTBEAT_SKEW_ALLOWANCE_MS: Final = 10000
HEARTBEAT_WRITE_TOLERANCE_MS: Final = (
    HEARTBEAT_STALE_AFTER_MS - HEARTBEAT_SKEW_ALLOWANCE_MS - HEARTBEAT_INTERVAL_MS
)

MAXIMUM_RUN_JSON_DEPTH: Final = 128
MAXIMUM_RUN_JSON_NODES: Final = 100000
MAXIMUM_IDENTIFIER_LENGTH: Final = 1024

#: The largest integer a timestamp, pid or ordinal may hold (2**53 - 1): the
#: bound every CHECK constraint in the schema is written against.
MAX_SAFE_INTEGER: Final = 2**53 - 1

#: Run ids with this prefix name the store's own companion fact streams.
COMPANION_PREFIX: Final = "flows.companion/"

#: The most rows one ``list_runs`` page may ask for.
MAXIMUM_PAGE_SIZE: Final = 1000
#: The most run ids one ``heartbeat_many`` call may renew.
MAXIMUM_HEARTBEAT_BATCH: Final = 100_000
#: The most runs (or tombstones) one ``purge_settled`` (``compact_changes``) call removes.
MAXIMUM_PURGE_BATCH: Final = 10_000
