"""Collaborators are checked by shape when they are handed over, not at first use.

``runstore.open`` refuses a ``clock`` that is not a ``Clock`` (``time.time``,
a string, a clock whose reading is not a non-negative safe integer of ms) and
a ``consensus`` missing any of the strategy's ten methods, with
``invalid_run`` naming the argument (and, for a strategy, the missing
methods) before it touches any file. ``supervise``/``asupervise`` refuse a
``store`` that lacks what a supervisor calls. Shape is what counts: a wrapper
that delegates through ``__getattr__``, ``NoopRunStore`` and ``NoopConsensus``
pass; a fractional clock reading is floored, not refused.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

import runstore
from runstore import ManualClock, NoopRunStore, OwnerId, RunStoreError
from runstore.consensus import LocalConsensus, NoopConsensus, SqlConsensus
from runstore.consensus._admit import REQUIRED_METHODS, admit_consensus
from runstore.ownership import asupervise, supervise

OWNER = OwnerId("host-a", 1, "n1")
WHERE = ["memory", "file"]


class ReadingClock:
    """A clock that reads whatever it is given (or raises it)."""

    def __init__(self, reading: Any) -> None:
        self.reading = reading

    def now_ms(self) -> Any:
        if isinstance(self.reading, BaseException):
            raise self.reading
        return self.reading

    def sleep_until(self, deadline_ms: int) -> None:
        raise AssertionError("never sleeps")

    async def asleep_until(self, deadline_ms: int) -> None:
        raise AssertionError("never sleeps")


class Delegating:
    """A wrapper that offers everything of its target through ``__getattr__``."""

    def __init__(self, target: Any) -> None:
        self._target = target

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target, name)


def _path(where: str, tmp_path: Path) -> str:
    return ":memory:" if where == "memory" else str(tmp_path / "runs.db")


def _refused(tmp_path: Path, where: str, **arguments: Any) -> RunStoreError:
    with pytest.raises(RunStoreError) as caught:
        runstore.open(_path(where, tmp_path), **arguments)
    error = caught.value
    assert error.code == "invalid_run"
    assert error.method == "open"
    assert error.__cause__ is None
    assert list(tmp_path.iterdir()) == [], "a refused open created files"
    return error


CLOCKS = {
    "time.time": time.time,
    "a string": "clock",
    "an object": object(),
    "the ManualClock class": ManualClock,
    "reads None": ReadingClock(None),
    "reads -1": ReadingClock(-1),
    "reads nanoseconds": ReadingClock(1_767_000_000_000_000_000),  # past 2**53 - 1
    "reads NaN": ReadingClock(float("nan")),
    "reads a string": ReadingClock("10"),
    "reads True": ReadingClock(True),
    "raises": ReadingClock(RuntimeError("the clock broke; secret-7f3a")),
}


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("clock", CLOCKS.values(), ids=list(CLOCKS))
def test_open_refuses_a_clock_that_is_not_a_clock(tmp_path: Path, where: str, clock: Any) -> None:
    """invalid_run naming ``clock``, whose message never quotes the clock's own error."""
    error = _refused(tmp_path, where, clock=clock)
    assert error.cause["field"] == "clock"
    assert "clock" in str(error)
    assert "secret-7f3a" not in str(error) + repr(error)
    assert error.__context__ is None or error.__suppress_context__


@pytest.mark.parametrize("where", WHERE)
def test_a_fractional_clock_is_accepted_and_floored(tmp_path: Path, where: str) -> None:
    """A clock at 10.5 ms opens a store whose first run is stamped 10."""
    with runstore.open(_path(where, tmp_path), clock=ReadingClock(10.5)) as store:
        store.create("r", "{}")
        assert store.get("r").created_at_ms == 10


class Partial:
    """A strategy missing ``guard`` and ``lease``; ``steal`` is not callable."""

    steal = "not a method"

    def __getattr__(self, name: str) -> Any:
        if name in {"guard", "lease", "steal"}:
            raise AttributeError(name)
        return getattr(SqlConsensus(), name)


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize(
    ("consensus", "missing"),
    [
        ("sql", list(REQUIRED_METHODS)),
        (object(), list(REQUIRED_METHODS)),
        (SqlConsensus, list(REQUIRED_METHODS)),  # the class, not a strategy
        (Partial(), ["steal", "guard", "lease"]),
    ],
    ids=["str", "object", "class", "partial"],
)
def test_open_refuses_a_consensus_that_is_not_a_strategy(
    tmp_path: Path, where: str, consensus: Any, missing: list[str]
) -> None:
    """invalid_run naming ``consensus`` and each missing method."""
    error = _refused(tmp_path, where, clock=ManualClock(0), consensus=consensus)
    assert error.cause["field"] == "consensus"
    assert error.cause["missing"] == missing
    assert "consensus" in str(error)
    if consensus is not SqlConsensus:
        for name in missing:
            assert name in str(error)


class Raising:
    """A strategy whose every attribute lookup fails with its own text."""

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(f"no {name} here; secret-7f3a")


def test_an_attribute_that_raises_counts_as_missing() -> None:
    """A lookup that raises is a missing method; its text stays out of the error."""
    with pytest.raises(RunStoreError) as caught:
        admit_consensus("open", Raising())
    assert caught.value.cause["missing"] == list(REQUIRED_METHODS)
    assert "secret-7f3a" not in str(caught.value) + repr(caught.value)
    assert caught.value.__context__ is None


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize(
    "strategy",
    [SqlConsensus, LocalConsensus, NoopConsensus, lambda: Delegating(SqlConsensus())],
    ids=["sql", "local", "noop", "delegating"],
)
def test_strategies_of_the_right_shape_open(tmp_path: Path, where: str, strategy: Any) -> None:
    """Every built-in strategy and a delegating wrapper are accepted."""
    consensus = strategy()
    with runstore.open(_path(where, tmp_path), clock=ManualClock(0), consensus=consensus) as store:
        assert store.consensus is consensus
        store.create("r", "{}")


def test_consensus_none_means_sql_consensus(tmp_path: Path) -> None:
    """The default strategy is SqlConsensus."""
    with runstore.open(tmp_path / "runs.db", clock=ManualClock(0), consensus=None) as store:
        assert type(store.consensus) is SqlConsensus


@pytest.mark.parametrize("store", ["store", object(), None], ids=["'store'", "object", "None"])
def test_supervise_refuses_what_is_not_a_store(store: Any) -> None:
    """Both faces refuse at the call, naming ``store`` and what it lacks."""
    clock = ManualClock(0)
    for face in (supervise, asupervise):
        with pytest.raises(RunStoreError) as caught:
            face(store, "r", OWNER, clock=clock)
        error = caught.value
        assert (error.code, error.method) == ("invalid_run", face.__name__)
        assert error.cause["field"] == "store"
        assert "heartbeat" in error.cause["missing"]
        assert "store" in str(error)


def test_supervise_names_only_the_missing_store_methods() -> None:
    """A double without ``acknowledge_cancel`` is refused for exactly that."""

    class Almost:
        def heartbeat(self, *_args: Any) -> Any: ...
        def reconfirm(self, *_args: Any) -> Any: ...
        def ownership_facts(self, *_args: Any) -> Any: ...

    with pytest.raises(RunStoreError) as caught:
        supervise(Almost(), "r", OWNER, clock=ManualClock(0))
    assert caught.value.cause["missing"] == ["acknowledge_cancel"]


def test_supervise_takes_stores_by_shape() -> None:
    """NoopRunStore, a real store and a delegating wrapper over it are stores."""
    clock = ManualClock(0)
    with runstore.open(":memory:", clock=clock) as real:
        for store in (NoopRunStore(), real, Delegating(real)):
            supervise(store, "r", OWNER, clock=clock)
            asupervise(store, "r", OWNER, clock=clock)
