"""Durable step attempts, fenced by the run's owner (``runstore.attempts``).

A run executes steps; each step has numbered attempts, and each attempt has a
state, timestamps, a checkpoint to resume from, an error, an outcome and
metadata. ``AttemptStore(store)`` keeps them in the run store's own database,
and every write (``put``, ``heartbeat``, ``finish``, ``patch``) succeeds only
while the caller owns the run: the run is ``running`` and its owner is exactly
the caller's ``OwnerId``. A displaced owner's late write answers ``FenceLost``
instead of rewriting the winner's attempt.

Operations and their outcomes (lost races are values, never exceptions):

- ``put(attempt, owner)``: ``Inserted | Upserted | ExistingSame | Conflict |
  FenceLost | RunNotFound``;
- ``get(attempt_id)``: the ``Attempt`` or ``None`` (not fenced);
- ``heartbeat(run_id, step_key_digest, attempt, owner, now_ms, checkpoint=ABSENT)``:
  ``Updated | FenceLost | NotFound | StateChanged``;
- ``finish(finish, owner)``: ``Finished | FenceLost | NotFound | StateChanged``;
- ``patch(attempt_id, patch, owner)``: ``Patched | NotFound | FenceLost``.

Misuse and infrastructure failures raise ``AttemptStoreError`` (its own root,
not a ``RunStoreError``). ``runstore.model.ModelAttemptStore`` is the
reference model with the same surface.

May import: the SQL store the backends share and the core modules of
``runstore``; never a backend: each hands in its own queries ("How the code is
laid out" in the docs names each room).
"""

from ._boundary import DEFAULT_MAX_CHECKPOINT_BYTES as DEFAULT_MAX_CHECKPOINT_BYTES
from ._boundary import MAXIMUM_CHECKPOINT_BYTES as MAXIMUM_CHECKPOINT_BYTES
from ._boundary import MAXIMUM_IN_PROGRESS_STATES as MAXIMUM_IN_PROGRESS_STATES
from ._errors import AttemptErrorCode as AttemptErrorCode
from ._errors import AttemptStoreError as AttemptStoreError
from ._outcomes import AttemptHeartbeatOutcome as AttemptHeartbeatOutcome
from ._outcomes import Conflict as Conflict
from ._outcomes import ExistingSame as ExistingSame
from ._outcomes import FenceLost as FenceLost
from ._outcomes import Finished as Finished
from ._outcomes import FinishOutcome as FinishOutcome
from ._outcomes import Inserted as Inserted
from ._outcomes import NotFound as NotFound
from ._outcomes import Patched as Patched
from ._outcomes import PatchOutcome as PatchOutcome
from ._outcomes import PutOutcome as PutOutcome
from ._outcomes import RunNotFound as RunNotFound
from ._outcomes import StateChanged as StateChanged
from ._outcomes import Updated as Updated
from ._outcomes import Upserted as Upserted
from ._store import AttemptStore as AttemptStore
from ._values import ABSENT as ABSENT
from ._values import Absent as Absent
from ._values import Attempt as Attempt
from ._values import AttemptId as AttemptId
from ._values import AttemptOptions as AttemptOptions
from ._values import AttemptPatch as AttemptPatch
from ._values import FinishAttempt as FinishAttempt
from ._values import JsonValue as JsonValue
from ._values import PutMode as PutMode
from ._values import strict_json_equal as strict_json_equal

__all__ = [
    "ABSENT",
    "DEFAULT_MAX_CHECKPOINT_BYTES",
    "MAXIMUM_CHECKPOINT_BYTES",
    "MAXIMUM_IN_PROGRESS_STATES",
    "Absent",
    "Attempt",
    "AttemptErrorCode",
    "AttemptHeartbeatOutcome",
    "AttemptId",
    "AttemptOptions",
    "AttemptPatch",
    "AttemptStore",
    "AttemptStoreError",
    "Conflict",
    "ExistingSame",
    "FenceLost",
    "FinishAttempt",
    "FinishOutcome",
    "Finished",
    "Inserted",
    "JsonValue",
    "NotFound",
    "PatchOutcome",
    "Patched",
    "PutMode",
    "PutOutcome",
    "RunNotFound",
    "StateChanged",
    "Updated",
    "Upserted",
    "strict_json_equal",
]
