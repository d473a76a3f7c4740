"""The raw-corruption rule also breaks a column other than state, on a copy
of a SQLite adapter's file (``stateful/_checks/_edits.py``): reads must refuse the
row with ``decode_failed`` and the store's own ``check_invariants()`` must
flag it. Each test plants one bug for its duration; the default budget
must report it as ``CorruptRowAccepted``. The honest adapter passes these
edits in every conformance run (``tests/stateful/campaigns/test_conformance.py``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis.stateful import run_state_machine_as_test

from runstore._sql import _decode, _invariants, _store
from runstore.consensus import LocalConsensus, SqlConsensus
from runstore.stateful import CorruptRowAccepted, conformance_machines
from runstore.stateful._campaigns._budget import default_settings


def _run_adapter_machine(strategy: Any) -> None:
    machine = conformance_machines(consensus_factory=strategy)[1]
    run_state_machine_as_test(machine, settings=default_settings(machine, shrink=False))


def test_a_decoder_that_checks_only_some_columns_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Decode judges the state and the identifiers, not the timestamps: a
    negative creation time is handed out."""
    schema_ok = _decode._schema_ok

    def lenient(row: Sequence[Any], stateless: bool = False) -> bool:
        return schema_ok((*row[:2], 0, *row[3:]), stateless)

    monkeypatch.setattr(_decode, "_schema_ok", lenient)
    with pytest.raises(CorruptRowAccepted, match="decode_failed"):
        _run_adapter_machine(SqlConsensus)


@pytest.mark.parametrize("strategy", [SqlConsensus, LocalConsensus], ids=lambda s: s.__name__)
def test_a_self_check_that_skips_the_leases_is_caught(
    strategy: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``check_invariants()`` reads the rows but never compares them with the
    strategy's leases: a heartbeat moved behind the store's back passes."""

    def without_leases(tx: Any, q: Any) -> None:
        class Queries:
            INVARIANT_QUERIES = q.INVARIANT_QUERIES
            ALL_RUNS = q.ALL_RUNS
            ALL_FACTS = q.ALL_FACTS
            SQL_LEASE_CHECKS: tuple[Any, ...] = ()

        class NoLeases:  # SqlConsensus's lease checks, which are none here
            connection = tx.connection
            consensus = SqlConsensus()

        check(NoLeases(), Queries)

    check = _invariants.check_store_invariants
    monkeypatch.setattr(_store, "check_store_invariants", without_leases)
    with pytest.raises(CorruptRowAccepted, match="check_invariants"):
        _run_adapter_machine(strategy)
