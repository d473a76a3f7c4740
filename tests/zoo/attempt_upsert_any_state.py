"""An attempt store whose upsert forgets the in-progress predicate, so a
repeated ``put`` replaces an attempt that has already settled."""

from runstore.attempts import AttemptStore

from ._attempts import IN_PROGRESS, SQL, capabilities, marks, without

KIND = "attempts"
EXPECTED_CHECK = "SettledAttemptChanged"
__all__ = ["capabilities"]


class UpsertsSettled(AttemptStore):
    def __init__(self, store, **options):
        super().__init__(store, **options)
        self._put_upsert = without(SQL.PUT_UPSERT, IN_PROGRESS).format(in_progress=marks(self))


attempt_store = UpsertsSettled
