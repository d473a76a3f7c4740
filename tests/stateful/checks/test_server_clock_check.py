"""The server-clock machine catches a PostgreSQL store whose clock check is
wrong, within its default budget, and passes the store as shipped.

Each bug is planted with ``monkeypatch`` for the one test (the library code
is not changed): the limit compared the wrong way, the offset's sign
flipped, the interval between measurements never elapsing, a measurement
taken for every forward move, ``clock_offset_ms`` in seconds or missing, a
non-lease operation refused with the lease operations. The machine must
fail with the check that names the bug.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis.stateful import run_state_machine_as_test

from runstore.stateful import (
    Capabilities,
    ClockOffsetMisreported,
    NonLeaseOperationRefused,
    ServerClockCheck,
    ServerClockViolation,
    SkewRefusalMisjudged,
    conformance_machines,
)
from runstore.stateful._campaigns._budget import default_settings
from runstore.stateful._targets._postgres import postgres_store_factory

from ... import _postgres

postgres = pytest.importorskip("runstore.postgres")
from runstore.postgres import _clock_check, _tx  # noqa: E402
from runstore.postgres._store import PostgresRunStore  # noqa: E402


def server_clock_machine() -> type[ServerClockCheck]:
    _postgres.require_server()
    machines = conformance_machines(
        store_factory=postgres_store_factory(),
        capabilities=Capabilities(reopen=True, fault_injection=True, server_clock=True),
    )
    found = [machine for machine in machines if issubclass(machine, ServerClockCheck)]
    assert len(found) == 1
    return found[0]


def refusing_within(self: Any) -> bool:
    return self.offset_ms is not None and abs(self.offset_ms) < self.limit_ms


def measure_flipped(self: Any, connection: Any) -> int:
    before = int(self._clock.now_ms())
    server = connection.execute(_clock_check.SERVER_NOW).fetchone()[0]
    after = int(self._clock.now_ms())
    self.offset_ms = int(server) - (before + after) // 2
    self.uncertainty_ms = (after - before + 1) // 2
    self._measured_at = after
    return self.offset_ms


def due_without_interval(self: Any) -> bool:
    measured = self._measured_at
    if measured is None or self.refusing:
        return True
    return int(self._clock.now_ms()) < measured


def due_on_every_move(self: Any) -> bool:
    measured = self._measured_at
    if measured is None or self.refusing:
        return True
    return int(self._clock.now_ms()) != measured


def offset_in_seconds(self: Any) -> int | None:
    check = self._tm.clock_check
    return None if check is None or check.offset_ms is None else check.offset_ms // 1000


def offset_missing(self: Any) -> int | None:
    return None


BUGS: dict[str, tuple[Callable[[pytest.MonkeyPatch], None], type[ServerClockViolation]]] = {
    "limit-compared-the-wrong-way": (
        lambda m: m.setattr(_clock_check.ClockCheck, "refusing", property(refusing_within)),
        SkewRefusalMisjudged,
    ),
    "offset-sign-flipped": (
        lambda m: m.setattr(_clock_check.ClockCheck, "measure", measure_flipped),
        ClockOffsetMisreported,
    ),
    "interval-never-elapses": (
        lambda m: m.setattr(_clock_check.ClockCheck, "due", due_without_interval),
        SkewRefusalMisjudged,
    ),
    "measured-on-every-move": (
        lambda m: m.setattr(_clock_check.ClockCheck, "due", due_on_every_move),
        SkewRefusalMisjudged,
    ),
    "clock-offset-in-seconds": (
        lambda m: m.setattr(PostgresRunStore, "clock_offset_ms", property(offset_in_seconds)),
        ClockOffsetMisreported,
    ),
    "clock-offset-missing": (
        lambda m: m.setattr(PostgresRunStore, "clock_offset_ms", property(offset_missing)),
        ClockOffsetMisreported,
    ),
    "create-counted-a-lease-operation": (
        lambda m: m.setattr(_tx, "LEASE_METHODS", _clock_check.LEASE_METHODS | {"create"}),
        NonLeaseOperationRefused,
    ),
}


@pytest.mark.parametrize("bug", sorted(BUGS))
def test_a_planted_clock_check_bug_fails_the_machine(
    bug: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under the default budget (shrinking aside) the machine fails with the
    check that names the planted bug."""
    machine = server_clock_machine()
    plant, check = BUGS[bug]
    plant(monkeypatch)
    with pytest.raises(ServerClockViolation) as caught:
        run_state_machine_as_test(machine, settings=default_settings(machine, shrink=False))
    assert type(caught.value) is check, caught.value


def test_the_store_as_shipped_passes() -> None:
    """The PostgreSQL store's clock check passes the machine's default budget."""
    machine = server_clock_machine()
    run_state_machine_as_test(machine, settings=default_settings(machine))


def test_the_machine_runs_only_when_declared() -> None:
    """Without ``server_clock`` no server-clock machine is run."""
    _postgres.require_server()
    machines = conformance_machines(store_factory=postgres_store_factory())
    assert not any(issubclass(machine, ServerClockCheck) for machine in machines)
