"""``run_conformance`` without ``settings`` runs its own budget: derandomized,
no deadline, no too-slow health check, no example database, sized per
machine, shrinking cut at what is left of five minutes; ``HYPOTHESIS_PROFILE``
(when set) and ``settings=`` replace it; failures are ``AssertionError``
subclasses carrying a one-screen summary."""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.internal.conjecture import engine

from runstore.consensus import SqlConsensus
from runstore.model import ModelRunStore
from runstore.stateful import Capabilities, ConformanceError, conformance_machines, run_conformance
from runstore.stateful._base._profiles import load_profile
from runstore.stateful._campaigns._budget import (
    DEFAULT_BUDGETS,
    MIN_SHRINK_SECONDS,
    chosen_settings,
    machine_kind,
    shrinking_within,
)


@pytest.fixture
def no_profile(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HYPOTHESIS_PROFILE", raising=False)


def test_default_budget_is_deterministic_and_sized_per_machine(no_profile: None) -> None:
    """Each machine gets its kind's examples and steps, derandomized, with no
    deadline, no database and the too-slow health check off."""
    machines = conformance_machines(consensus_factory=SqlConsensus)
    kinds = [machine_kind(machine) for machine in machines]
    assert kinds == ["strategy", "store", "attempts", "opening"]
    for machine, kind in zip(machines, kinds, strict=True):
        chosen, default = chosen_settings(machine, None)
        assert default
        assert chosen.max_examples == DEFAULT_BUDGETS[kind].examples
        assert chosen.stateful_step_count == DEFAULT_BUDGETS[kind].steps
        assert chosen.derandomize
        assert chosen.deadline is None
        assert chosen.database is None
        assert HealthCheck.too_slow in chosen.suppress_health_check
        assert not chosen.report_multiple_bugs
        assert Phase.shrink in chosen.phases


def test_hypothesis_profile_replaces_the_default_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """With ``HYPOTHESIS_PROFILE`` set, every machine runs under that profile."""
    monkeypatch.setenv("HYPOTHESIS_PROFILE", "deep")
    try:
        machine = conformance_machines(consensus_factory=SqlConsensus)[1]
        chosen, default = chosen_settings(machine, None)
        assert not default
        assert chosen.max_examples == settings.get_profile("deep").max_examples
        assert chosen.stateful_step_count == settings.get_profile("deep").stateful_step_count
    finally:
        load_profile("ci")


def test_settings_replace_the_default_budget(no_profile: None) -> None:
    """``settings=`` gives the examples, steps, seed and phases."""
    machine = conformance_machines(consensus_factory=SqlConsensus)[0]
    mine = settings(max_examples=3, stateful_step_count=4, derandomize=True, database=None)
    chosen, default = chosen_settings(machine, mine)
    assert not default
    assert (chosen.max_examples, chosen.stateful_step_count) == (3, 4)
    assert chosen.derandomize
    assert chosen.database is None
    assert chosen.phases == mine.phases


@pytest.mark.parametrize("source", ["settings", "profile"])
def test_no_settings_judge_against_the_clock(source: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever settings a machine runs under (given, with Hypothesis's own
    200 ms deadline, or a profile's), it has no deadline and no too-slow
    health check, and reports its first failure alone: a verdict about the
    store, not about the machine's speed or load."""
    machine = conformance_machines(consensus_factory=SqlConsensus)[0]
    mine: settings | None = None
    if source == "settings":
        mine = settings(
            settings.get_profile("default"),
            max_examples=3,
            deadline=200,
            report_multiple_bugs=True,
            suppress_health_check=[HealthCheck.filter_too_much],
        )
        assert mine.deadline is not None
    else:
        monkeypatch.setenv("HYPOTHESIS_PROFILE", "dev")
    chosen, default = chosen_settings(machine, mine)
    assert not default
    assert chosen.deadline is None
    assert HealthCheck.too_slow in chosen.suppress_health_check
    assert not chosen.report_multiple_bugs
    if mine is not None:
        assert HealthCheck.filter_too_much in chosen.suppress_health_check


def test_a_profile_is_read_not_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    """``HYPOTHESIS_PROFILE`` gives ``run_conformance`` its settings and leaves
    the settings every other test of the process runs under as they were."""
    before = (settings.default.max_examples, settings.default.stateful_step_count)
    monkeypatch.setenv("HYPOTHESIS_PROFILE", "deep")
    machine = conformance_machines(consensus_factory=SqlConsensus)[0]
    chosen, _ = chosen_settings(machine, None)
    deep = settings.get_profile("deep")
    assert (chosen.max_examples, chosen.stateful_step_count) == (
        deep.max_examples,
        deep.stateful_step_count,
    )
    assert (settings.default.max_examples, settings.default.stateful_step_count) == before
    assert before != (deep.max_examples, deep.stateful_step_count)


def test_shrinking_is_cut_whatever_the_settings(no_profile: None) -> None:
    """A run with ``settings=`` runs every machine with Hypothesis's
    shrinking allowance replaced by what is left of the wall budget, as the
    default budget does, and puts Hypothesis's own back afterwards."""
    allowances: list[object] = []

    def store(clock: object, path: object) -> ModelRunStore:
        allowances.append(engine.MAX_SHRINKING_SECONDS)
        return ModelRunStore(clock=clock)

    run_conformance(
        store_factory=store,
        capabilities=Capabilities(reopen=False),
        settings=settings(max_examples=2, stateful_step_count=3, database=None),
    )
    # The first store is built before any machine runs: to see what it is.
    assert isinstance(allowances[0], int)
    assert len(allowances) > 2
    assert not any(isinstance(allowance, int) for allowance in allowances[1:])
    assert isinstance(engine.MAX_SHRINKING_SECONDS, int)


def test_shrinking_is_cut_at_what_is_left_of_the_budget() -> None:
    """Inside the block Hypothesis's shrinking allowance, added to the time
    shrinking starts, ends at the deadline (never under the minimum); it is
    put back afterwards."""
    before = engine.MAX_SHRINKING_SECONDS
    now = time.perf_counter()
    with shrinking_within(time.monotonic() + 100):
        deadline = now + engine.MAX_SHRINKING_SECONDS
        assert 95 <= deadline - now <= 100
    with shrinking_within(time.monotonic() - 50):
        assert (now + engine.MAX_SHRINKING_SECONDS) - now == pytest.approx(MIN_SHRINK_SECONDS)
    assert before == engine.MAX_SHRINKING_SECONDS


class AnswersNothing(ModelRunStore):
    """A store that answers ``None`` to every ``get``."""

    def get(self, run_id):
        super().get(run_id)
        return


def test_a_failure_is_an_assertion_error_with_a_one_screen_summary(no_profile: None) -> None:
    """Under the default budget a broken store fails with the check's own
    ``AssertionError`` subclass; its notes end with the summary naming the
    machine, the check, both sides' values and the program, within 60 lines."""
    with pytest.raises(AssertionError) as caught:
        run_conformance(
            store_factory=lambda clock, path: AnswersNothing(clock=clock),
            capabilities=Capabilities(reopen=False),
        )
    assert type(caught.value).__name__ == "OutcomeMismatch"
    summary = caught.value.__notes__[-1]
    assert summary.startswith("conformance failure: OutcomeMismatch in the run-store machine")
    assert "check that failed: OutcomeMismatch" in summary
    assert "reference answered RunRow(" in summary or "reference answered row(" in summary
    assert "store answered None" in summary
    assert "program (" in summary
    assert len(summary.splitlines()) <= 60
    assert max(len(line) for line in summary.splitlines()) <= 160


class StateFails(ModelRunStore):
    """A store whose ``state()`` raises (outside any operation)."""

    def state(self):
        raise OSError("disk gone")


def test_an_escaping_exception_is_a_conformance_error(no_profile: None) -> None:
    """An exception outside an operation (here ``state()``) ends the run as
    ``ConformanceError``, an ``AssertionError``, raised from the original."""
    with pytest.raises(ConformanceError) as caught:
        run_conformance(
            store_factory=lambda clock, path: StateFails(clock=clock),
            capabilities=Capabilities(reopen=False),
            settings=settings(max_examples=2, stateful_step_count=3, database=None),
        )
    assert isinstance(caught.value, AssertionError)
    assert "disk gone" in str(caught.value)


def test_loading_a_profile_again_carries_nothing_from_the_last_one() -> None:
    """``ci`` after ``deep`` is ``ci``: the profiles are registered over
    Hypothesis's own default, not over whatever profile is loaded (which once
    left ``deep``'s 100 steps in ``ci`` for the rest of a test session)."""
    try:
        load_profile("deep")
        assert settings.default.stateful_step_count == 100
        load_profile("ci")
        plain = settings.get_profile("default")
        assert settings.default.stateful_step_count == plain.stateful_step_count
        assert settings.default.max_examples == 100
    finally:
        load_profile("ci")
