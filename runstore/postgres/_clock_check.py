"""How far the store clock is from the database server's, and the refusal
of lease operations when it is too far.

On SQLite every process shares one host's clock. On PostgreSQL the owners
of a run live on several hosts, and the lease rules hold only while their
clocks agree to within ``HEARTBEAT_SKEW_ALLOWANCE_MS``: a peer whose clock
runs ahead takes a run over early, an owner whose clock runs behind keeps
writing after it was replaced. The server's ``clock_timestamp()`` is a
reference every host can read, so each store measures its own clock
against it, and two stores that are each within half the allowance of the
server are within the allowance of each other.

A measurement reads the store clock, the server's clock, and the store
clock again; the offset is the store's reading at the midpoint minus the
server's (positive: the store clock runs ahead), and half the round trip
bounds its error. The store measures when it opens and again before a
lease operation once ``INTERVAL_MS`` of store-clock time has passed (or the
store clock moved backwards), and before every lease operation while it is
refusing them. While the last offset is more than
``LIMIT_MS`` (half the skew allowance) either way, every lease operation
(``claim``, ``claim_and_own``, ``activate``, ``steal``, ``recover_claim``,
``heartbeat``, ``reconfirm``, and the batch operations that claim or renew)
raises ``persistence_failed`` with ``cause["reason"] == "clock-skew"``,
``cause["offset_ms"]`` and ``cause["limit_ms"]``, naming the offset in its
message; other operations (reads, ``create``, ``transition_owned``,
cancellation) go on. The supervisor treats the refusal as a failed write, so
an owner on a host whose clock drifted lets its lease lapse instead of
working on under a lease its peers judge differently.

Only a wall clock can be compared with the server's: the check is on by
default for ``SystemClock`` and off for every other clock (a ``ManualClock``
in a test starts at zero); ``check_clock=True`` turns it on for a wall clock
of one's own, ``check_clock=False`` off.
"""

from __future__ import annotations

from typing import Any, Final

from .._clock import Clock
from .._constants import HEARTBEAT_SKEW_ALLOWANCE_MS
from .._errors import PersistenceFailedError

#: The largest offset from the server's clock lease operations accept.
LIMIT_MS: Final = HEARTBEAT_SKEW_ALLOWANCE_MS // 2
#: Store-clock time between measurements.
INTERVAL_MS: Final = 30_000

#: The operations that judge a lease by the caller's clock.
LEASE_METHODS: Final = frozenset(
    {
        "claim",
        "claim_and_own",
        "activate",
        "steal",
        "recover_claim",
        "heartbeat",
        "reconfirm",
        "heartbeat_many",
        "claim_next",
        "claim_next_many",
    }
)

SERVER_NOW: Final = "SELECT floor(extract(epoch FROM pg_catalog.clock_timestamp()) * 1000)::bigint"


class ClockCheck:
    """The last measured offset of one store's clock, and the rule above."""

    def __init__(self, clock: Clock, *, limit_ms: int = LIMIT_MS) -> None:
        self._clock = clock
        self.limit_ms = limit_ms
        #: The last measured offset (store minus server), or None before the first.
        self.offset_ms: int | None = None
        #: Half the round trip of the last measurement: the offset's error bound.
        self.uncertainty_ms: int | None = None
        self._measured_at: int | None = None

    def measure(self, connection: Any) -> int:
        """Measure the offset on ``connection`` (outside a transaction)."""
        before = int(self._clock.now_ms())
        server = connection.execute(SERVER_NOW).fetchone()[0]
        after = int(self._clock.now_ms())
        self.offset_ms = (before + after) // 2 - int(server)
        self.uncertainty_ms = (after - before + 1) // 2
        self._measured_at = after
        return self.offset_ms

    @property
    def refusing(self) -> bool:
        """Whether the last measurement was beyond the limit."""
        return self.offset_ms is not None and abs(self.offset_ms) > self.limit_ms

    def due(self) -> bool:
        measured = self._measured_at
        if measured is None or self.refusing:
            return True  # while refusing, every lease operation looks again
        now = int(self._clock.now_ms())
        return now < measured or now - measured >= INTERVAL_MS

    def verify(self, method: str, connection: Any) -> None:
        """Measure if due, then refuse ``method`` if the offset is too large."""
        if self.due():
            self.measure(connection)
        if self.refusing:
            assert self.offset_ms is not None
            raise skew_refusal(method, self.offset_ms, self.limit_ms, self.uncertainty_ms)


def skew_refusal(
    method: str, offset_ms: int, limit_ms: int, uncertainty_ms: int | None
) -> PersistenceFailedError:
    way = "ahead of" if offset_ms > 0 else "behind"
    return PersistenceFailedError(
        method,
        f"the store clock is {abs(offset_ms)} ms {way} the database server's clock "
        f"(clock_timestamp()); lease operations need it within {limit_ms} ms, half the "
        f"{HEARTBEAT_SKEW_ALLOWANCE_MS} ms skew allowance: synchronize this host's clock",
        {
            "category": "persistence_failed",
            "reason": "clock-skew",
            "offset_ms": offset_ms,
            "limit_ms": limit_ms,
            "uncertainty_ms": uncertainty_ms,
        },
    )
