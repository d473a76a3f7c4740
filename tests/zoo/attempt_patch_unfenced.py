"""An attempt store whose ``patch`` forgets the run fence in its ``UPDATE``,
so a displaced owner (or anyone) can rewrite an attempt's outcome."""

from runstore.attempts import AttemptStore, NotFound, Patched
from runstore.attempts._boundary import admit_patch
from runstore.attempts._store import _id_params, _json_params, _owner_params

from ._attempts import SQL, capabilities, without

KIND = "attempts"
EXPECTED_CHECK = "UnfencedAttemptWrite"
__all__ = ["capabilities"]

_UNFENCED_PATCH = without(SQL.PATCH, f"AND {SQL._FENCE}")  # the bug


class UnfencedPatch(AttemptStore):
    def patch(self, attempt_id, patch, owner):
        ident, _, who, encoded = admit_patch(attempt_id, patch, owner, self._options)
        params = {**_id_params(ident), **_owner_params(who), **_json_params(encoded)}

        def body(connection):
            if connection.execute(_UNFENCED_PATCH, params).fetchall():
                return Patched()
            return NotFound()

        return self._write("patch", ident.run_id, body)


attempt_store = UnfencedPatch
