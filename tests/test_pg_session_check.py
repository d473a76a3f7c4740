"""The session and schema machines catch a PostgreSQL store that mishandles a
session the server ended or the schema option, within their default budget,
and pass the store as shipped.

Each bug is planted with ``monkeypatch`` for the one test (the library code
is not changed): the probe of an idle connection never probing (the fast
path then sends its statement on the dead connection), the schema name's
length check off by one, the URL's ``schema`` parameter ignored, the same
name given as keyword and URL parameter refused. The machine must fail with
the check that names the bug.
"""

from __future__ import annotations

import inspect
import textwrap
from typing import Any

import pytest
from hypothesis.stateful import run_state_machine_as_test

from runstore.stateful import (
    Capabilities,
    SchemaMisselected,
    SchemaOptionCheck,
    SchemaRefusalMismatch,
    SessionLossCheck,
    SessionLossMishandled,
    conformance_machines,
)
from runstore.stateful._budget import default_settings
from runstore.stateful._postgres import postgres_store_factory

from . import _postgres

postgres = pytest.importorskip("runstore.postgres")
from runstore.postgres import _open, _tx  # noqa: E402


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


@pytest.mark.parametrize("fast_path", [True, False], ids=["one-round-trip", "general"])
def test_the_shipped_store_passes(fast_path: bool) -> None:
    run(machine_of(SessionLossCheck, fast_path=fast_path))
    run(machine_of(SchemaOptionCheck, fast_path=fast_path))


def test_the_machines_are_off_without_the_flag() -> None:
    machines = conformance_machines(
        store_factory=postgres_store_factory(), capabilities=Capabilities(reopen=True)
    )
    assert not [m for m in machines if issubclass(m, SessionLossCheck | SchemaOptionCheck)]


def test_an_idle_probe_that_never_probes_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_tx, "_probe", lambda connection: None)
    with pytest.raises(SessionLossMishandled):
        run(machine_of(SessionLossCheck, fast_path=True))


def test_a_length_check_off_by_one_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_open, "_MAX_IDENTIFIER_BYTES", 64)
    with pytest.raises(SchemaRefusalMismatch):
        run(machine_of(SchemaOptionCheck))


def test_a_length_check_refusing_the_longest_name_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_open, "_MAX_IDENTIFIER_BYTES", 62)
    with pytest.raises(SchemaRefusalMismatch):
        run(machine_of(SchemaOptionCheck))


def test_an_ignored_url_schema_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The URL's ``schema`` dropped: a store opens on the keyword's schema or
    the default one. Which program shows it first depends on the budget's
    programs: another schema chosen, or a keyword and a different URL
    schema accepted together."""
    split = _open._split_schema

    def ignoring(url: str) -> tuple[str, str | None]:
        return split(url)[0], None

    monkeypatch.setattr(_open, "_split_schema", ignoring)
    with pytest.raises((SchemaMisselected, SchemaRefusalMismatch)):
        run(machine_of(SchemaOptionCheck))


def test_the_same_name_twice_refused_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The keyword-and-URL comparison turned round: the same name twice is
    refused, two different names accepted (the keyword's)."""
    source = textwrap.dedent(inspect.getsource(_open.open))
    turned = source.replace("schema != in_url", "schema == in_url")
    assert turned != source
    namespace = dict(vars(_open))
    exec(compile(turned, _open.__file__, "exec"), namespace)
    monkeypatch.setattr(_open, "open", namespace["open"])
    monkeypatch.setattr(postgres, "open", namespace["open"])
    with pytest.raises(SchemaRefusalMismatch):
        run(machine_of(SchemaOptionCheck))
