"""Attempt outcomes: every way an attempt operation ends without a defect.

One frozen class per tag, one union alias per operation. ``Updated``,
``FenceLost`` and ``NotFound`` are the run store's own classes, so a ``match``
on them reads the same whichever store answered.
"""

from __future__ import annotations

from typing import TypeAlias

import attrs

from .._outcomes import FenceLost as FenceLost
from .._outcomes import NotFound as NotFound
from .._outcomes import Updated as Updated


@attrs.frozen
class Inserted:
    """``put`` wrote a new attempt row."""


@attrs.frozen
class Upserted:
    """``put`` (upsert mode) replaced an in-progress attempt."""


@attrs.frozen
class ExistingSame:
    """``put`` found the attempt already stored with exactly these values."""


@attrs.frozen
class Conflict:
    """``put`` found the attempt already stored with different values, and
    left it alone."""


@attrs.frozen
class RunNotFound:
    """``put`` was given an attempt of a run that does not exist."""


@attrs.frozen
class StateChanged:
    """The attempt exists and the caller holds the fence, but the attempt is
    no longer in progress (it was finished, or put in a settled state)."""


@attrs.frozen
class Finished:
    """``finish`` settled the attempt."""


@attrs.frozen
class Patched:
    """``patch`` replaced the given fields (possibly none)."""


PutOutcome: TypeAlias = Inserted | Upserted | ExistingSame | Conflict | FenceLost | RunNotFound
"""What ``put`` answers: ``Inserted``, ``Upserted``, ``ExistingSame``, ``Conflict``, ``FenceLost``
or ``RunNotFound``."""
AttemptHeartbeatOutcome: TypeAlias = Updated | FenceLost | NotFound | StateChanged
"""What an attempt ``heartbeat`` answers: ``Updated``, ``FenceLost``, ``NotFound`` or
``StateChanged``."""
FinishOutcome: TypeAlias = Finished | FenceLost | NotFound | StateChanged
"""What ``finish`` answers: ``Finished``, ``FenceLost``, ``NotFound`` or ``StateChanged``."""
PatchOutcome: TypeAlias = Patched | NotFound | FenceLost
"""What ``patch`` answers: ``Patched``, ``NotFound`` or ``FenceLost``."""
