"""The model store's whole state as one immutable value, and its drafts.

``ModelState`` holds everything a ``ModelRunStore`` knows: run rows, leases,
per-run ownership facts, cancellation acknowledgements, the latest revision of
every run id, and the database revision. Its mappings are read-only views.

An operation never edits a ``ModelState``. It opens a ``Draft`` over the
current state, writes into the draft's private copies, and, if it decides to
commit, freezes the draft into the next ``ModelState``, which the store then
installs in one assignment. Dropping a draft therefore undoes everything it
did, whatever point the operation reached.

The draft also applies the two bookkeeping rules every write obeys: each run
row written (inserted or updated, even to the values it already had) raises
the revision by one and becomes that run's latest change; each fact takes the
next position in its run's stream.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import attrs

from runstore._constants import MAX_SAFE_INTEGER
from runstore._errors import ConstraintError
from runstore._values import (
    CancelAcknowledgement,
    Lease,
    OwnerId,
    OwnershipFact,
    OwnershipTransition,
    RunRow,
)


def _empty() -> Mapping[str, Any]:
    return MappingProxyType({})


@attrs.frozen
class ModelState:
    """Everything a model store holds, at one commit."""

    rows: Mapping[str, RunRow] = attrs.field(factory=_empty)
    leases: Mapping[str, Lease] = attrs.field(factory=_empty)
    facts: Mapping[str, tuple[OwnershipFact, ...]] = attrs.field(factory=_empty)
    acknowledgements: Mapping[str, CancelAcknowledgement] = attrs.field(factory=_empty)
    changes: Mapping[str, int] = attrs.field(factory=_empty)
    revision: int = 0


class Draft:
    """A private, writable copy of a ``ModelState`` for one operation."""

    def __init__(self, base: ModelState, method: str) -> None:
        self._method = method
        self._rows = dict(base.rows)
        self._leases = dict(base.leases)
        self._facts = dict(base.facts)
        self._acknowledgements = dict(base.acknowledgements)
        self._changes = dict(base.changes)
        self._revision = base.revision

    # -- reads ---------------------------------------------------------------

    def row(self, run_id: str) -> RunRow | None:
        return self._rows.get(run_id)

    @property
    def rows(self) -> Mapping[str, RunRow]:
        return MappingProxyType(self._rows)

    def lease(self, run_id: str) -> Lease | None:
        return self._leases.get(run_id)

    def has_acknowledgement(self, run_id: str) -> bool:
        return run_id in self._acknowledgements

    # -- writes --------------------------------------------------------------

    def write_row(self, row: RunRow) -> None:
        """Insert or update a run row: one more revision, the run's latest change."""
        if self._revision >= MAX_SAFE_INTEGER:
            # The revision column's CHECK refuses to wrap; the write fails whole.
            raise ConstraintError(self._method, {"stage": "revision-overflow"})
        self._revision += 1
        self._rows[row.run_id] = row
        # Re-inserting keeps the mapping in revision order (latest last).
        self._changes.pop(row.run_id, None)
        self._changes[row.run_id] = self._revision

    def set_lease(self, run_id: str, lease: Lease | None) -> None:
        if lease is None:
            self._leases.pop(run_id, None)
        else:
            self._leases[run_id] = lease

    def record(
        self,
        run_id: str,
        transition: OwnershipTransition,
        owner: OwnerId,
        granted_at_ms: int | None,
    ) -> None:
        """Append one fact at the next position of the run's stream."""
        stream = self._facts.get(run_id, ())
        fact = OwnershipFact(run_id, transition, owner, granted_at_ms, len(stream) + 1)
        self._facts[run_id] = (*stream, fact)

    def acknowledge(self, acknowledgement: CancelAcknowledgement) -> None:
        """Keep the first acknowledgement of a run; later ones are ignored."""
        self._acknowledgements.setdefault(acknowledgement.run_id, acknowledgement)

    # -- commit --------------------------------------------------------------

    def freeze(self) -> ModelState:
        """The next state: this draft's contents, read-only."""
        return ModelState(
            rows=MappingProxyType(dict(self._rows)),
            leases=MappingProxyType(dict(self._leases)),
            facts=MappingProxyType(dict(self._facts)),
            acknowledgements=MappingProxyType(dict(self._acknowledgements)),
            changes=MappingProxyType(dict(self._changes)),
            revision=self._revision,
        )
