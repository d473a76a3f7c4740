"""A store whose ``get`` builds the row without re-validating it, so state that
was corrupted behind the store's back is handed out instead of refused."""

from runstore import _boundary as admit
from runstore._errors import RunNotFoundError
from runstore.sqlite import SqliteRunStore
from runstore.sqlite import _queries as q
from runstore.sqlite._decode import raw_run

from ._stores import IN_MEMORY, open_as

KIND = "store"
EXPECTED_CHECK = "OutcomeMismatch"
capabilities = IN_MEMORY


class Trusting(SqliteRunStore):
    def get(self, run_id):
        rid = admit.admit_run_id("get", run_id)
        row = self._tm.read("get", lambda c: c.execute(q.GET, (rid,)).fetchone())
        if row is None:
            raise RunNotFoundError("get", rid)
        # The bug: the raw row is trusted; nothing checks the stored state.
        return raw_run(row)


def factory(clock, path):
    return open_as(Trusting, clock)
