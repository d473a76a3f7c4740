"""An attempt store that checks the checkpoint cap against the number of
characters of the encoded checkpoint instead of its UTF-8 bytes, so a
checkpoint of accented or astral text passes the cap while its bytes exceed it."""

import attrs

from runstore._boundary import canonical_json
from runstore.attempts import ABSENT, MAXIMUM_CHECKPOINT_BYTES, AttemptStore
from runstore.attempts._boundary import invalid

from ._attempts import capabilities

KIND = "attempts"
EXPECTED_CHECK = "AdmissionViolation"
__all__ = ["capabilities"]


class CountsCharacters(AttemptStore):
    def __init__(self, store, **options):
        super().__init__(store, **options)
        self._cap = self._options.max_checkpoint_bytes
        # Admission is left a loose cap; the store checks its own (the bug is there).
        self._options = attrs.evolve(self._options, max_checkpoint_bytes=MAXIMUM_CHECKPOINT_BYTES)

    def _check(self, method, checkpoint):
        if checkpoint is ABSENT:
            return
        try:
            text = canonical_json(checkpoint)
        except (TypeError, ValueError):
            return  # admission refuses it
        if len(text) > self._cap:  # the bug: characters, not UTF-8 bytes
            raise invalid(method, "checkpoint", "exceeds the JSON byte limit") from None

    def put(self, attempt, owner):
        self._check("put", getattr(attempt, "checkpoint", ABSENT))
        return super().put(attempt, owner)

    def heartbeat(self, run_id, step_key_digest, attempt, owner, now_ms, checkpoint=ABSENT):
        self._check("heartbeat", checkpoint)
        return super().heartbeat(run_id, step_key_digest, attempt, owner, now_ms, checkpoint)

    def patch(self, attempt_id, patch, owner):
        self._check("patch", getattr(patch, "checkpoint", ABSENT))
        return super().patch(attempt_id, patch, owner)


attempt_store = CountsCharacters
