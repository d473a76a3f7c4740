"""A store whose purge_settled forgets the lineage condition: a settled round
is deleted while another round of its lineage is still live."""

from runstore.sqlite import SqliteRunStore

from ._queries import queries_with
from ._stores import IN_MEMORY, open_as

KIND = "store"
EXPECTED_CHECK = "SettledPurgeViolation"
capabilities = IN_MEMORY

_WITHOUT_LINEAGE = """
SELECT r.run_id FROM flows_runs AS r INDEXED BY flows_runs_finished_idx
WHERE r.finished_at_ms < ?1 AND r.status IN ('completed', 'failed', 'cancelled')
  AND NOT EXISTS (SELECT 1 FROM flows_runs AS c WHERE c.parent_run_id = r.run_id)
ORDER BY r.finished_at_ms, r.run_id LIMIT ?2
"""


class IgnoresLiveRound(SqliteRunStore):
    _queries = queries_with(PURGE_CANDIDATES=_WITHOUT_LINEAGE)


def factory(clock, path):
    return open_as(IgnoresLiveRound, clock)
