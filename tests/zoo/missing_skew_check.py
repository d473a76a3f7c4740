"""A store that judges a caller's lease reading against the caller's own clock
instead of the store clock, so the skew bound never refuses anything: an owner
whose clock runs far ahead renews its lease into the future."""

from runstore.sqlite import SqliteRunStore

from ._stores import IN_MEMORY, open_as

KIND = "store"
EXPECTED_CHECK = "AdmissionViolation"
capabilities = IN_MEMORY


class _Reading:
    """A clock that answers whatever the caller said the time was."""

    def __init__(self, now_ms):
        self._now = now_ms

    def now_ms(self):
        return self._now if type(self._now) is int else 0


class NoSkewCheck(SqliteRunStore):
    def _renew(self, method, run_id, owner, now_ms):
        # The bug: heartbeat and reconfirm admit ``now_ms`` against itself.
        store_clock = self._clock
        self._clock = _Reading(now_ms)
        try:
            return super()._renew(method, run_id, owner, now_ms)
        finally:
            self._clock = store_clock


def factory(clock, path):
    return open_as(NoSkewCheck, clock)
