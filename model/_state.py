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
row written (inserted, updated even to the values it already had, or deleted)
raises the revision by one and becomes that run's latest change (a deletion
leaves a tombstone); each fact takes the next position in its run's stream.

Two ordered indexes answer the range reads without sorting per call: ``order``
holds every run's listing key ``(created_at_ms, run_id)`` (immutable once a
run exists, so only inserts and deletes touch it) and ``feed`` maps each
latest revision to its run id (live entry or tombstone). A draft copies an
index only when it first changes it.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import attrs
from sortedcontainers import SortedDict, SortedList

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


ListingKey = tuple[int, str]


@attrs.frozen
class ModelState:
    """Everything a model store holds, at one commit.

    ``changes`` maps each live run id to its latest revision, ``tombstones``
    each deleted (purged) run id to the revision of its deletion; the two never
    share an id. ``compacted_through`` is the newest tombstone revision
    ``compact_changes`` ever dropped (the revision may equal it). ``order``
    and ``feed`` are the ordered indexes (see the module docstring); nobody
    may mutate them once the state is built.
    """

    rows: Mapping[str, RunRow] = attrs.field(factory=_empty)
    leases: Mapping[str, Lease] = attrs.field(factory=_empty)
    facts: Mapping[str, tuple[OwnershipFact, ...]] = attrs.field(factory=_empty)
    acknowledgements: Mapping[str, CancelAcknowledgement] = attrs.field(factory=_empty)
    changes: Mapping[str, int] = attrs.field(factory=_empty)
    revision: int = 0
    tombstones: Mapping[str, int] = attrs.field(factory=_empty)
    compacted_through: int = 0
    order: SortedList[ListingKey] = attrs.field(factory=SortedList, eq=False, repr=False)
    feed: SortedDict[int, str] = attrs.field(factory=SortedDict, eq=False, repr=False)


class Draft:
    """A private, writable copy of a ``ModelState`` for one operation."""

    def __init__(self, base: ModelState, method: str) -> None:
        self._method = method
        self._rows = dict(base.rows)
        self._leases = dict(base.leases)
        self._facts = dict(base.facts)
        self._acknowledgements = dict(base.acknowledgements)
        self._changes = dict(base.changes)
        self._tombstones = dict(base.tombstones)
        self._compacted_through = base.compacted_through
        self._revision = base.revision
        self._order: SortedList[ListingKey] = base.order
        self._feed: SortedDict[int, str] = base.feed
        self._own_order = False
        self._own_feed = False

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

    def _next_revision(self, run_id: str) -> int:
        """Count one row write of ``run_id`` and make it the run's latest change."""
        if self._revision >= MAX_SAFE_INTEGER:
            # The revision column's CHECK refuses to wrap; the write fails whole.
            raise ConstraintError(self._method, {"stage": "revision-overflow"})
        self._revision += 1
        if not self._own_feed:
            self._feed = self._feed.copy()
            self._own_feed = True
        previous = self._changes.pop(run_id, None)
        if previous is None:
            previous = self._tombstones.pop(run_id, None)
        if previous is not None:
            del self._feed[previous]
        self._feed[self._revision] = run_id
        return self._revision

    def _index(self) -> SortedList[ListingKey]:
        if not self._own_order:
            self._order = self._order.copy()
            self._own_order = True
        return self._order

    def write_row(self, row: RunRow) -> None:
        """Insert or update a run row: one more revision, the run's latest change."""
        revision = self._next_revision(row.run_id)
        previous = self._rows.get(row.run_id)
        if previous is None:
            self._index().add((row.created_at_ms, row.run_id))
        elif previous.created_at_ms != row.created_at_ms:
            raise AssertionError("a run's listing key never changes")
        self._rows[row.run_id] = row
        # Re-inserting keeps the mapping in revision order (latest last).
        self._changes[row.run_id] = revision

    def delete_row(self, run_id: str) -> None:
        """Delete a run row with everything hanging off it (facts, lease,
        acknowledgement): one more revision, recorded as the run's tombstone."""
        row = self._rows.pop(run_id)
        revision = self._next_revision(run_id)
        self._tombstones[run_id] = revision
        self._index().remove((row.created_at_ms, run_id))
        self._facts.pop(run_id, None)
        self._leases.pop(run_id, None)
        self._acknowledgements.pop(run_id, None)

    def drop_tombstone(self, run_id: str) -> None:
        """Forget a deleted run's tombstone (no row is written: no revision)."""
        revision = self._tombstones.pop(run_id)
        self._compacted_through = max(self._compacted_through, revision)
        if not self._own_feed:
            self._feed = self._feed.copy()
            self._own_feed = True
        del self._feed[revision]

    @property
    def order(self) -> SortedList[ListingKey]:
        """The listing keys, in order (read only)."""
        return self._order

    @property
    def tombstones(self) -> Mapping[str, int]:
        return MappingProxyType(self._tombstones)

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
            tombstones=MappingProxyType(dict(self._tombstones)),
            compacted_through=self._compacted_through,
            order=self._order,
            feed=self._feed,
        )
