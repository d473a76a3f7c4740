"""A store whose list_runs page hands out the cursor of the row it read ahead
(to learn whether another page follows) instead of the page's last row, so
every following page starts one run too late: that run is never listed."""

from runstore import _boundary as admit
from runstore._values import RunPage
from runstore.sqlite import SqliteRunStore

from ._stores import IN_MEMORY, open_as

KIND = "store"
EXPECTED_CHECK = "OutcomeMismatch"
capabilities = IN_MEMORY


class SkipsARun(SqliteRunStore):
    def list_runs(self, *, limit=100, **filters):
        page = super().list_runs(limit=limit, **filters)
        if page.next is None:
            return page
        # The bug: the cursor names the look-ahead row, not the last one shown.
        ahead = super().list_runs(limit=1, **{**filters, "after": page.next}).runs[0]
        return RunPage(page.runs, admit.encode_cursor(ahead.created_at_ms, ahead.run_id))


def factory(clock, path):
    return open_as(SkipsARun, clock)
