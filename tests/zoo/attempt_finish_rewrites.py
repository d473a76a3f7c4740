"""An attempt store whose ``finish`` forgets the in-progress predicate, so a
second finish rewrites a settled attempt's state and finish time."""

from runstore.attempts import AttemptStore

from ._attempts import IN_PROGRESS, SQL, capabilities, marks, without

KIND = "attempts"
EXPECTED_CHECK = "SettledAttemptChanged"
__all__ = ["capabilities"]


class Rewrites(AttemptStore):
    def __init__(self, store, **options):
        super().__init__(store, **options)
        self._finish = without(SQL.FINISH, IN_PROGRESS).format(in_progress=marks(self))  # the bug


attempt_store = Rewrites
