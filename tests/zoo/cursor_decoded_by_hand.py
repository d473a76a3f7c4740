"""A store that reads a list_runs cursor itself before handing it on, and
unpacks the decoded key without checking its shape: a forged cursor raises
ValueError out of list_runs instead of RunStoreError (invalid_run)."""

import base64
import json

from runstore.sqlite import SqliteRunStore

from ._stores import IN_MEMORY, open_as

KIND = "store"
EXPECTED_CHECK = "StoreCrashed"
capabilities = IN_MEMORY


class HandDecodedCursor(SqliteRunStore):
    def list_runs(self, **filters):
        after = filters.get("after")
        if isinstance(after, str) and after.startswith("rs1."):
            # The bug: the key is trusted to be [created_at_ms, run_id].
            created_at_ms, run_id = json.loads(base64.urlsafe_b64decode(after[4:]))
            self._last_cursor = (created_at_ms, run_id)
        return super().list_runs(**filters)


def factory(clock, path):
    return open_as(HandDecodedCursor, clock)
