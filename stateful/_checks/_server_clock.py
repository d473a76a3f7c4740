"""``ServerClockCheck``: a PostgreSQL store's check of its clock against the
database server's, driven on a clock the machine controls.

A store opened with ``check_clock=True`` measures its clock's offset from the
server's ``clock_timestamp()`` when it opens, and again before a lease
operation once 30 000 ms of store-clock time have passed since the last
measurement, when the store clock is behind the time of the last
measurement, and before every lease operation while it is refusing them.
While the last measured offset is more than half the skew allowance
(5 000 ms) either way, every lease operation raises ``persistence_failed``
with ``cause["reason"] == "clock-skew"``, ``cause["offset_ms"]`` (the
measurement) and ``cause["limit_ms"]``; every other operation goes on.
``store.clock_offset_ms`` is the last measurement.

Each example opens a store on a ``ManualClock`` set to the server's clock
plus an offset the program chooses, then moves that clock: to another offset
(forward or back), or forward by 10 000 ms or exactly around 30 000 ms.
After every move a lease operation (``claim``, ``claim_and_own``,
``heartbeat`` or ``reconfirm`` on a run the machine created) must be refused
exactly when the offset the store should have measured by then is past the
limit; ``create``, ``get``, ``list_runs`` and ``revision`` always work and
never measure; after every step ``clock_offset_ms`` must agree with the
offset the store should have measured. The machine knows that offset from
its own reading of the server's clock (``_postgres.server_now_ms``) and the
wall time passed since (``time.monotonic``), so wall time passing moves
nothing but the server's clock; the store clock moves only when a rule moves
it. Offsets and moves are chosen so that an offset the store measures is at
least 2 500 ms from the limit (less the wall time an example takes); one
nearer than ``TOLERANCE_MS`` is not judged, and the store's own report
decides it.

The numbers are the suite's own literals, not the store's constants, so a
store whose constants are wrong is judged by the documented ones.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, Final

from hypothesis import note
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from runstore import ManualClock, OwnerId, RunStoreError

from .._base._programs import programs_independent_of_callers_code
from ._malformed import SKEW_ALLOWANCE_MS

#: The largest offset from the server's clock lease operations accept.
LIMIT_MS: Final = SKEW_ALLOWANCE_MS // 2
#: Store-clock time between measurements.
INTERVAL_MS: Final = 30_000
#: How far a reported offset may be from the one the machine expects (clock
#: readings floored to a millisecond, the server's clock against this host's
#: monotonic clock, a scheduler that parks the process mid-measurement).
TOLERANCE_MS: Final = 1_000

#: Offsets a rule sets the store clock to. Modulo 10 000 they are 0, 2 000,
#: 2 500, 7 500 and 8 000, and every move below is a multiple of 10 000 (or one
#: millisecond less), so any offset a program reaches is at least 2 500 ms
#: from the limit either way.
OFFSETS: Final = (0, 2_500, -2_500, 8_000, -8_000, 30_000, -30_000)
#: Forward moves: within the interval, one millisecond short of it, exactly it.
MOVES: Final = (10_000, INTERVAL_MS - 1, INTERVAL_MS)
#: The lease operations the machine sends (each judged by the clock check).
LEASE_OPERATIONS: Final = ("claim", "claim_and_own", "heartbeat", "reconfirm")
#: Operations the clock check must leave alone.
OTHER_OPERATIONS: Final = ("create", "get", "list_runs", "revision")
#: At most this many runs per program.
MAX_RUNS: Final = 4

OWNER: Final = OwnerId("server-clock-host", 1, "n0")

#: ``(lowest, highest)`` offset a measurement may have found, in ms.
Window = tuple[int, int]


class ServerClockViolation(AssertionError):
    """Base of every server-clock machine failure; the subclass names the check."""


class SkewRefusalMisjudged(ServerClockViolation):
    """A lease operation was refused while the offset the store should have
    measured was within the limit, or allowed while it was past it; or a
    refusal was not ``persistence_failed`` with reason ``clock-skew`` and the
    limit, disagreed with the store's own ``clock_offset_ms``, or changed
    something."""


class ClockOffsetMisreported(ServerClockViolation):
    """``clock_offset_ms``, or a refusal's ``offset_ms`` or ``uncertainty_ms``,
    disagrees with the offset the store should have measured by then (a
    measurement taken when none was due, or none taken when one was, shows
    here too)."""


class NonLeaseOperationRefused(ServerClockViolation):
    """An operation that is not a lease operation raised while the clock check
    was on."""


SERVER_CLOCK_CHECKS: tuple[type[ServerClockViolation], ...] = (
    SkewRefusalMisjudged,
    ClockOffsetMisreported,
    NonLeaseOperationRefused,
)
"""Every server-clock check class, each a ``ServerClockViolation``: catch or list them by class."""


def close_in_folder(store: Any, folder: Path) -> None:
    """Close ``store`` (when there is one), then remove the scratch ``folder``
    an example kept beside it."""
    try:
        if store is not None:
            store.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


class AnchoredClock(ManualClock):
    """A ``ManualClock`` that a rule may also turn back (the store must then
    measure again). Nothing else moves it."""

    def turn_to(self, ms: int) -> int:
        """Move to ``ms``, earlier or later than now; return it."""
        with self._cond:
            return self._move(ms)


class _ServerTime:
    """The server's clock, read once and carried forward by this host's
    monotonic clock (the two do not drift apart within an example)."""

    def __init__(self, read: Callable[[], int]) -> None:
        before = time.monotonic()
        server = read()
        after = time.monotonic()
        self._at = (before + after) / 2
        # The reading is floored, and lies anywhere within the round trip.
        self.error_ms = int((after - before) * 500) + 2
        self._server_ms = server

    def at(self, monotonic: float) -> int:
        return self._server_ms + round((monotonic - self._at) * 1000)


class ServerClockCheck(RuleBasedStateMachine):
    """The server-clock machine; ``server_clock_check_for`` binds a factory.

    It opens a PostgreSQL store with ``check_clock=True`` on a clock set some offset from the
    server's, then moves that clock and makes lease operations: each must be refused
    (``persistence_failed``, reason ``clock-skew``, writing nothing) exactly while the store's
    last measurement put it more than half the skew allowance (5 000 ms) off the server,
    ``clock_offset_ms`` must report what was measured, and other operations are never refused.
    ``operation`` in its rules is one of the lease operations (``claim``, ``claim_and_own``,
    ``heartbeat``, ``reconfirm``, ...), and ``run`` draws one of the runs it created.
    """

    budget_kind: ClassVar[str] = "server-clock"
    """Which default budget ``run_conformance`` gives this machine: ``"server-clock"``."""

    store_factory: ClassVar[Callable[..., Any]]
    """Opens the store under test: ``store_factory(clock, path, check_clock=True)``."""
    server_now_ms: ClassVar[Callable[[], int]]
    """Reads the server's clock, in whole milliseconds."""

    def __init__(self) -> None:
        programs_independent_of_callers_code()
        super().__init__()
        self.store: Any = None
        """The store under test, once ``open_store`` ran."""
        self.folder = Path(tempfile.mkdtemp(prefix="runstore-server-clock-"))
        """The program's folder, removed at teardown."""
        self.server = _ServerTime(type(self).server_now_ms)
        """The server's time, as ``server_now_ms`` reads it, with its reading error."""
        self.clock = AnchoredClock(0)
        """The store clock, set relative to the server's."""
        self.runs: list[str] = []
        """The runs created so far."""
        self.measured: Window = (0, 0)
        """The offsets the store's last measurement may have found (low, high)."""
        self.measured_at = 0
        """The store clock's reading at that measurement (exact: it stood still)."""
        self.refusing = False
        """Whether that measurement was past the limit."""

    # -- what the store should have measured ----------------------------------

    def _window(self, started: float, ended: float) -> Window:
        """The offsets a measurement between ``started`` and ``ended``
        (monotonic) can find, the store clock standing still meanwhile."""
        now = self.clock.now_ms()
        error = self.server.error_ms
        return now - self.server.at(ended) - error, now - self.server.at(started) + error

    @staticmethod
    def _past_limit(window: Window) -> bool | None:
        """Whether every offset in ``window`` is past the limit (True), every
        one within it (False), or neither within the tolerance (None)."""
        low, high = window
        if low - TOLERANCE_MS > LIMIT_MS or high + TOLERANCE_MS < -LIMIT_MS:
            return True
        if low - TOLERANCE_MS > -LIMIT_MS and high + TOLERANCE_MS < LIMIT_MS:
            return False
        return None

    def _due(self) -> bool:
        now = self.clock.now_ms()
        return self.refusing or now < self.measured_at or now - self.measured_at >= INTERVAL_MS

    def _reported(self, what: str) -> int:
        offset = self.store.clock_offset_ms
        low, high = self.measured
        if type(offset) is not int or not low - TOLERANCE_MS <= offset <= high + TOLERANCE_MS:
            raise ClockOffsetMisreported(
                f"{what}: clock_offset_ms is {offset!r}, but the store clock "
                f"({self.clock.now_ms()}) should have been measured {low}..{high} ms "
                f"off the server's (tolerance {TOLERANCE_MS} ms); last measured at "
                f"store time {self.measured_at}"
            )
        return offset

    # -- the program ------------------------------------------------------------

    @initialize(offset=st.sampled_from(OFFSETS))
    def open_store(self, offset: int) -> None:
        """Open the store on a clock ``offset`` ms off the server's (either way) and check what
        it measured."""
        self.clock.turn_to(self.server.at(time.monotonic()) + offset)
        started = time.monotonic()
        self.store = type(self).store_factory(self.clock, self.folder / "store", check_clock=True)
        ended = time.monotonic()
        self.measured = self._window(started, ended)
        self.measured_at = self.clock.now_ms()
        note(f"opened at offset {offset}: measured {self.measured}")
        judged = self._past_limit(self.measured)
        reported = self._reported("after open")
        self.refusing = abs(reported) > LIMIT_MS if judged is None else judged
        self._create()

    def teardown(self) -> None:
        """Close the store and remove its folder."""
        close_in_folder(self.store, self.folder)

    @rule(
        offset=st.sampled_from(OFFSETS), operation=st.sampled_from(LEASE_OPERATIONS), run=st.data()
    )
    def move_to(self, offset: int, operation: str, run: st.DataObject) -> None:
        """Set the store clock ``offset`` ms off the server's (either way), then make the lease
        ``operation`` on a ``run`` drawn from the runs created."""
        self.clock.turn_to(self.server.at(time.monotonic()) + offset)
        self._lease(operation, run.draw(st.sampled_from(self.runs), label="run"))

    @rule(ms=st.sampled_from(MOVES), operation=st.sampled_from(LEASE_OPERATIONS), run=st.data())
    def advance(self, ms: int, operation: str, run: st.DataObject) -> None:
        """Move the store clock forward by ``ms``, then make the lease ``operation`` on a ``run``
        drawn from the runs created."""
        self.clock.advance(ms)
        self._lease(operation, run.draw(st.sampled_from(self.runs), label="run"))

    @rule(operation=st.sampled_from(LEASE_OPERATIONS), run=st.data())
    def lease(self, operation: str, run: st.DataObject) -> None:
        """The lease ``operation`` on a ``run`` drawn from the runs created, with the clock where
        it is."""
        self._lease(operation, run.draw(st.sampled_from(self.runs), label="run"))

    @rule(operation=st.sampled_from(OTHER_OPERATIONS), run=st.data())
    def other(self, operation: str, run: st.DataObject) -> None:
        """``operation`` (``create``, ``get``, ``list_runs`` or ``revision``, on a ``run`` drawn
        from the runs created), which the clock check must not refuse (nor measure for)."""
        run_id = run.draw(st.sampled_from(self.runs), label="run")
        try:
            if operation == "create":
                if len(self.runs) < MAX_RUNS:
                    self._create()
            elif operation == "get":
                self.store.get(run_id)
            elif operation == "list_runs":
                self.store.list_runs()
            else:
                self.store.revision()
        except RunStoreError as error:
            raise NonLeaseOperationRefused(
                f"{operation} raised {error.code} ({error.cause.get('reason')}): {error}"
            ) from error

    @invariant()
    def offset_agrees(self) -> None:
        """After every step: ``clock_offset_ms`` reports what the last measurement could have
        found."""
        if self.store is not None:
            self._reported("after the step")

    # -- the judged lease operation ----------------------------------------------

    def _create(self) -> None:
        run_id = f"r{len(self.runs)}"
        try:
            self.store.create(run_id, "{}")
        except RunStoreError as error:
            raise NonLeaseOperationRefused(f"create raised {error.code}: {error}") from error
        self.runs.append(run_id)

    def _call(self, operation: str, run_id: str) -> object:
        now = self.clock.now_ms()
        if operation in ("claim", "claim_and_own"):
            row = self.store.get(run_id)
            return getattr(self.store, operation)(run_id, row, OWNER, now)
        return getattr(self.store, operation)(run_id, OWNER, now)

    def _lease(self, operation: str, run_id: str) -> None:
        due = self._due()
        revision = self.store.revision()
        started = time.monotonic()
        try:
            outcome = self._call(operation, run_id)
        except RunStoreError as error:
            if error.cause.get("reason") != "clock-skew":
                raise
            refusal: RunStoreError | None = error
        else:
            refusal = None
        ended = time.monotonic()
        if due:
            self.measured = self._window(started, ended)
            self.measured_at = self.clock.now_ms()
        expected = self._past_limit(self.measured) if due else self.refusing
        what = (
            f"{operation}({run_id!r}) at store time {self.clock.now_ms()}, "
            f"measurement {'due' if due else 'not due'}, expected offset {self.measured}"
        )
        note(f"{what}: {'refused' if refusal else outcome!r}")
        if expected is True and refusal is None:
            raise SkewRefusalMisjudged(
                f"{what} was allowed ({outcome!r}), though the offset is past the "
                f"{LIMIT_MS} ms limit"
            )
        if expected is False and refusal is not None:
            raise SkewRefusalMisjudged(
                f"{what} was refused ({refusal.cause!r}), though the offset is within the "
                f"{LIMIT_MS} ms limit"
            )
        reported = self._reported(what)
        if refusal is not None:
            self._judge_refusal(what, refusal, reported, revision)
        elif abs(reported) > LIMIT_MS:
            raise SkewRefusalMisjudged(
                f"{what} was allowed, though the store's own clock_offset_ms ({reported}) "
                f"is past the {LIMIT_MS} ms limit"
            )
        self.refusing = refusal is not None

    def _judge_refusal(
        self, what: str, refusal: RunStoreError, reported: int, revision: int
    ) -> None:
        cause = refusal.cause
        if (
            refusal.code != "persistence_failed"
            or cause.get("limit_ms") != LIMIT_MS
            or cause.get("offset_ms") != reported
            or abs(reported) <= LIMIT_MS
        ):
            raise SkewRefusalMisjudged(
                f"{what}: the refusal is {refusal.code} with {cause!r}; expected "
                f"persistence_failed, limit_ms {LIMIT_MS}, and offset_ms equal to "
                f"clock_offset_ms ({reported}) and past the limit"
            )
        # Half the round trip as the store clock saw it, rounded up: the
        # clock stood still while the store measured.
        if "uncertainty_ms" in cause and cause["uncertainty_ms"] != 0:
            raise ClockOffsetMisreported(
                f"{what}: the refusal's uncertainty_ms is {cause['uncertainty_ms']!r}, but the "
                "store clock did not move while it measured (half a round trip of 0 ms is 0)"
            )
        if self.store.revision() != revision:
            raise SkewRefusalMisjudged(f"{what}: the refused operation moved the revision")


def server_clock_check_for(
    store_factory: Callable[..., Any],
    server_now_ms: Callable[[], int],
    *,
    name: str = "store",
) -> type[ServerClockCheck]:
    """A ``ServerClockCheck`` subclass named ``name`` for one ``store_factory`` (called as
    ``store_factory(clock, path, check_clock=True)``) and ``server_now_ms``, a reader of the
    server's clock in whole milliseconds."""
    namespace: dict[str, Any] = {
        "store_factory": staticmethod(store_factory),
        "server_now_ms": staticmethod(server_now_ms),
    }
    safe = "".join(ch if ch.isalnum() else "_" for ch in name)
    return type(f"ServerClockCheck_{safe}", (ServerClockCheck,), namespace)
