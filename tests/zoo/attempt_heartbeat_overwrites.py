"""An attempt store whose heartbeat stores the caller's time instead of the
larger of the old and new stamps, so a late, older heartbeat moves it back."""

from runstore.attempts import AttemptStore

from ._attempts import SQL, capabilities, marks, replaced

KIND = "attempts"
EXPECTED_CHECK = "AttemptHeartbeatRegressed"
__all__ = ["capabilities"]


class Overwrites(AttemptStore):
    def __init__(self, store, **options):
        super().__init__(store, **options)
        self._heartbeat = replaced(
            SQL.HEARTBEAT,
            "MAX(COALESCE(heartbeat_at_ms, :now_ms), :now_ms)",
            ":now_ms",  # the bug
        ).format(in_progress=marks(self))


attempt_store = Overwrites
