"""The session and schema machines catch a PostgreSQL store that mishandles a
session the server ended or the schema option, within their default budget,
and pass the store as shipped.

Each bug is planted with ``monkeypatch`` for the one test (the library code
is not changed): the probe of an idle connection never probing (the fast
path then sends its statement on the dead connection), a replay's budget
check that cannot add (a deadlock then ends the write) or a deadlock taken
for a lasting failure, a statement timeout reported as an interrupt, an
``interrupt()`` that cancels nothing, a read's replay check that cannot add
(a read whose session ended while it waited then fails), the schema name's
length check off by one, the URL's ``schema`` parameter ignored, the same
name given as keyword and URL parameter refused. The machine must fail with
the check that names the bug. The bugs are gathered in ``PLANTED``, which
``benchmarks/zoo_detection.py`` also times.
"""

from __future__ import annotations

import inspect
import textwrap
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis.stateful import run_state_machine_as_test

from runstore.stateful import (
    Capabilities,
    SchemaOptionCheck,
    SessionLossCheck,
    conformance_machines,
)
from runstore.stateful._campaigns._budget import default_settings
from runstore.stateful._targets._postgres import postgres_store_factory

from ... import _postgres

postgres = pytest.importorskip("runstore.postgres")
from runstore.postgres import _errors, _open, _tx  # noqa: E402

PATHS = pytest.mark.parametrize("fast_path", [True, False], ids=["one-round-trip", "general"])


def machine_of(kind: type[Any], *, fast_path: bool = True) -> type[Any]:
    _postgres.require_server()
    machines = conformance_machines(
        store_factory=postgres_store_factory(fast_path=fast_path),
        capabilities=Capabilities(reopen=True, postgres_server=True),
    )
    found = [machine for machine in machines if issubclass(machine, kind)]
    assert len(found) == 1
    return found[0]


def run(machine: type[Any]) -> None:
    run_state_machine_as_test(machine, settings=default_settings(machine, shrink=False))


@PATHS
def test_the_shipped_store_passes(fast_path: bool) -> None:
    run(machine_of(SessionLossCheck, fast_path=fast_path))
    run(machine_of(SchemaOptionCheck, fast_path=fast_path))


def test_the_machines_are_off_without_the_flag() -> None:
    machines = conformance_machines(
        store_factory=postgres_store_factory(), capabilities=Capabilities(reopen=True)
    )
    assert not [m for m in machines if issubclass(m, SessionLossCheck | SchemaOptionCheck)]


def mutate_method(
    monkeypatch: pytest.MonkeyPatch, owner: type[Any], name: str, old: str, new: str
) -> None:
    """Replace ``owner.name`` by its own source with ``old`` changed to ``new``."""
    source = textwrap.dedent(inspect.getsource(getattr(owner, name)))
    changed = source.replace(old, new)
    assert changed != source
    namespace = dict(vars(inspect.getmodule(owner)))
    exec(compile(changed, inspect.getfile(owner), "exec"), namespace)
    monkeypatch.setattr(owner, name, namespace[name])


# -- planted bugs the machines must report ---------------------------------------------


def _idle_probe_that_never_probes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_tx, "_probe", lambda connection: None)


def _replay_budget_that_cannot_add(monkeypatch: pytest.MonkeyPatch) -> None:
    """The mutant ``elapsed_ms & delay * 1000``: floats do not take ``&``, so
    any replayed failure raises TypeError."""
    mutate_method(
        monkeypatch,
        _tx.TransactionManager,
        "_verdict",
        "elapsed_ms + delay * 1000 > policy.budget_ms",
        "elapsed_ms & delay * 1000 > policy.budget_ms",
    )


def _deadlock_taken_for_a_lasting_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    transient = _tx.is_transient

    def lasting_deadlock(error: BaseException, *, connection_lost: bool = False) -> bool:
        if _errors.sqlstate(_errors.database_error(error)) == "40P01":
            return False
        return transient(error, connection_lost=connection_lost)

    monkeypatch.setattr(_tx, "is_transient", lasting_deadlock)


def _statement_timeout_reported_as_an_interrupt(monkeypatch: pytest.MonkeyPatch) -> None:
    classify = _tx.classify

    def always_interrupted(method: str, error: BaseException, **_: Any) -> Any:
        return classify(method, error, interrupted=True)

    monkeypatch.setattr(_tx, "classify", always_interrupted)


def _interrupt_that_cancels_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_tx.TransactionManager, "interrupt", lambda self: None)


def _read_replay_check_that_cannot_add(monkeypatch: pytest.MonkeyPatch) -> None:
    """The mutant ``elapsed_ms | delay * 1000`` in the read's replay: a read
    whose session ended while it waited raises TypeError."""
    mutate_method(
        monkeypatch,
        _tx.TransactionManager,
        "read",
        "elapsed_ms + delay * 1000 <= policy.budget_ms",
        "elapsed_ms | delay * 1000 <= policy.budget_ms",
    )


def _length_check_off_by_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_open, "_MAX_IDENTIFIER_BYTES", 64)


def _length_check_refusing_the_longest_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_open, "_MAX_IDENTIFIER_BYTES", 62)


def _ignored_url_schema(monkeypatch: pytest.MonkeyPatch) -> None:
    """The URL's ``schema`` dropped: a store opens on the keyword's schema or
    the default one. Which program shows it first depends on the budget's
    programs: another schema chosen, or a keyword and a different URL
    schema accepted together."""
    split = _open._split_schema

    def ignoring(url: str) -> tuple[str, str | None]:
        return split(url)[0], None

    monkeypatch.setattr(_open, "_split_schema", ignoring)


def _same_name_twice_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """The keyword-and-URL comparison turned round: the same name twice is
    refused, two different names accepted (the keyword's)."""
    source = textwrap.dedent(inspect.getsource(_open.open))
    turned = source.replace("schema != in_url", "schema == in_url")
    assert turned != source
    namespace = dict(vars(_open))
    exec(compile(turned, _open.__file__, "exec"), namespace)
    monkeypatch.setattr(_open, "open", namespace["open"])
    monkeypatch.setattr(postgres, "open", namespace["open"])


def _on(kind: type[Any], *, fast_path: bool = True) -> Callable[[], type[Any]]:
    """What builds the machine of ``kind`` over PostgreSQL (skipped without a
    server), on the one-round-trip path or the general one."""
    return lambda: machine_of(kind, fast_path=fast_path)


def _on_both_paths(
    name: str, plant: Callable[[pytest.MonkeyPatch], None], check: str
) -> dict[str, tuple[Callable[[pytest.MonkeyPatch], None], str, Callable[[], Any]]]:
    """Entries of ``PLANTED`` for a bug in code both paths run, on
    ``SessionLossCheck``: ``NAME-one-round-trip`` and ``NAME-general``."""
    return {
        f"{name}-one-round-trip": (plant, check, _on(SessionLossCheck, fast_path=True)),
        f"{name}-general": (plant, check, _on(SessionLossCheck, fast_path=False)),
    }


#: name -> (plant, the check that must fire (or any of several), what builds
#: the machine it runs on). A bug planted in both paths' code has an entry per path.
PLANTED: dict[
    str,
    tuple[Callable[[pytest.MonkeyPatch], None], str | tuple[str, ...], Callable[[], Any]],
] = {
    "idle_probe_that_never_probes": (
        _idle_probe_that_never_probes,
        "SessionLossMishandled",
        _on(SessionLossCheck),
    ),
    **_on_both_paths(
        "replay_budget_that_cannot_add", _replay_budget_that_cannot_add, "DeadlockNotReplayed"
    ),
    **_on_both_paths(
        "deadlock_taken_for_a_lasting_failure",
        _deadlock_taken_for_a_lasting_failure,
        "DeadlockNotReplayed",
    ),
    **_on_both_paths(
        "read_replay_check_that_cannot_add",
        _read_replay_check_that_cannot_add,
        "ReadLossMishandled",
    ),
    "statement_timeout_reported_as_an_interrupt": (
        _statement_timeout_reported_as_an_interrupt,
        "StatementTimeoutMisreported",
        _on(SessionLossCheck),
    ),
    "interrupt_that_cancels_nothing": (
        _interrupt_that_cancels_nothing,
        "InterruptMisreported",
        _on(SessionLossCheck),
    ),
    "length_check_off_by_one": (
        _length_check_off_by_one,
        "SchemaRefusalMismatch",
        _on(SchemaOptionCheck),
    ),
    "length_check_refusing_the_longest_name": (
        _length_check_refusing_the_longest_name,
        "SchemaRefusalMismatch",
        _on(SchemaOptionCheck),
    ),
    "ignored_url_schema": (
        _ignored_url_schema,
        ("SchemaMisselected", "SchemaRefusalMismatch"),
        _on(SchemaOptionCheck),
    ),
    "same_name_twice_refused": (
        _same_name_twice_refused,
        "SchemaRefusalMismatch",
        _on(SchemaOptionCheck),
    ),
}


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_a_planted_bug_is_caught_by_its_check(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each planted bug fails its machine, under the default budget without
    shrinking, with the check named for it."""
    plant, expected, machine_for = PLANTED[name]
    plant(monkeypatch)
    machine = machine_for()
    with pytest.raises(AssertionError) as caught:
        run(machine)
    allowed = (expected,) if isinstance(expected, str) else expected
    assert type(caught.value).__name__ in allowed, caught.value
