"""The explorer against the zoo the machines were built on (``tests.zoo.ZOO``).

Each sequential bug the walk reaches is found at the scope recorded here, as
a shortest program failing the check recorded here (the explorer names the
first check that fails on the shortest program; the machines, drawing longer
programs, may see another first). Those the tiny scope finds take well under
a second each and run by default, as does the lineage scope's forged cursor;
the small scope's are a campaign, as are the deeper lineage ones. The
entries no scope reaches are listed with the reason, and the docs page "What
exhaustive exploration proves" has the table with the times measured.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

import pytest

from runstore.stateful import explore

from ...zoo import ZOO

#: Entry -> (scope, failing check, moves after the setup), found by the default run.
FOUND_TINY: dict[str, tuple[str, str, int]] = {
    "heartbeat_regresses": ("tiny", "LeaseRowDisagreement", 2),
    "missing_skew_check": ("tiny", "AdmissionViolation", 1),
    "lineage_cancel_skips_root": ("tiny", "OutcomeMismatch", 1),
    "settle_forgets_release_fact": ("tiny", "FactReplayMismatch", 2),
    "settle_drops_new_state": ("tiny", "StateNotPreserved", 2),
    "batch_heartbeat_skips_rows": ("tiny", "RevisionMismatch", 2),
    "claim_next_takes_claimed": ("tiny", "UnclaimableTaken", 2),
    "self_check_misreads_claims": ("tiny", "StoreInvariantsFailed", 1),
}

#: Entry -> (scope, failing check, moves after the setup), found by a campaign.
FOUND_SMALL: dict[str, tuple[str, str, int]] = {
    "list_skips_a_run": ("small", "OutcomeMismatch", 1),
    # A batch of one that takes two; a batch of two handed back newest first (0.8 s each).
    "claim_next_many_takes_one_more": ("small", "OutcomeMismatch", 1),
    "claim_next_many_newest_first_answer": ("small", "OutcomeMismatch", 1),
}


#: Entry -> why no scope's walk through a store reaches it. Every strategy entry among them is
#: found at the strategy's own interface (test_explore_strategy.py, FOUND_AT_INTERFACE).
NOT_REACHED: dict[str, str] = {
    "steal_cutoff_inclusive": "a strategy-interface bug the adapter's own row rule masks: "
    "the walk drives strategies through the adapter only",
    "evidence_wrong_host": "a strategy-interface bug the adapter's own evidence rule masks "
    "(the store checks the evidence before it asks the strategy)",
    "release_claim_drops_owner": "a strategy-interface bug (the machines see it as "
    "LeaseMismatch at the strategy's own interface)",
    "local_not_rolled_back": "needs a transaction the strategy sees rolled back "
    "(faults, or the strategy machine's rollbacks): no scope has faults",
    "decode_trusts_corrupt_row": "needs a row corrupted behind the store's back: "
    "no program of the protocol writes one, so no scope can",
    "batch_heartbeat_ignores_nonce": "needs a restarted process (a second incarnation "
    "of one pid): every scope's owners have one incarnation",
    "activation_ignores_grant": "needs the token of an earlier claim by the same owner: "
    "a scope's tokens are the current one and one a millisecond off",
    "guard_always_passes": "the store's own row rule refuses what the open guard lets through "
    "until the row and the lease disagree: four moves (own, go stale, steal, then the old "
    "owner's write) at least; the small scope exhausts clean (284 s at load 8)",
}

#: Entry -> (scope, failing check, moves after the setup), found by a campaign at the medium
#: scope (946 s and 1025 s at load 12 to 4, restoring copies of the source states;
#: with the medium scope's fourth move narrowed, suspend_keeps_claim 674 s at load 16 to 18,
#: ack_repeat_not_written 270 s at load 7).
FOUND_MEDIUM: dict[str, tuple[str, str, int]] = {
    "ack_repeat_not_written": ("medium", "RevisionMismatch", 4),
    "reconfirm_ignores_claim": ("medium", "OutcomeMismatch", 4),
    "suspend_keeps_claim": ("medium", "LeaseRowDisagreement", 4),
}


#: Entry -> (scope, failing check, moves after the setup), found at the lineage scope (a root
#: and its second round; list_runs takes forged cursors). The forged cursor is the first
#: level's (0.3 s, run by default); the purge a campaign.
FOUND_LINEAGE: dict[str, tuple[str, str, int]] = {
    "cursor_decoded_by_hand": ("lineage", "StoreCrashed", 1),
    "purge_ignores_live_round": ("lineage", "SettledPurgeViolation", 3),
}
_LINEAGE_CAMPAIGN = frozenset({"purge_ignores_live_round"})


def _entry(name: str) -> ModuleType:
    return importlib.import_module(f"tests.zoo.{name}")


def _under_test(module: ModuleType) -> dict[str, Any]:
    if module.KIND == "consensus":
        # Through the adapter alone: the walk at the strategy's own interface, which
        # explore makes first, is test_explore_strategy.py's.
        return {"consensus_factory": module.factory, "interface": False}
    return {"store_factory": module.factory, "capabilities": module.capabilities}


def _check_found(name: str, scope: str, check: str, moves: int) -> None:
    result = explore(scope=scope, **_under_test(_entry(name)))
    assert result.failure is not None, result.describe()
    assert result.failure.check == check, result.describe()
    steps = [line for line in result.failure.program.splitlines() if line]
    assert len([s for s in steps if not s.startswith("create(")]) == moves
    assert not result.exhausted
    # Restoring copies of source states (where the store is ours) finds the same shortest
    # program as replaying each source on a fresh store.
    replayed = explore(scope=scope, restore=False, **_under_test(_entry(name)))
    assert replayed.failure is not None, replayed.describe()
    assert (replayed.failure.check, replayed.failure.program) == (
        result.failure.check,
        result.failure.program,
    )
    assert replayed.restores == 0


def test_every_entry_is_accounted_for() -> None:
    """Each entry of the zoo is found at a scope or listed with why no scope reaches it."""
    found = set(FOUND_TINY) | set(FOUND_SMALL) | set(FOUND_MEDIUM) | set(FOUND_LINEAGE)
    accounted = found | set(NOT_REACHED)
    assert not set(ZOO) - accounted, sorted(set(ZOO) - accounted)
    assert not found & set(NOT_REACHED)


@pytest.mark.parametrize("name", sorted(FOUND_TINY))
def test_the_tiny_scope_finds(name: str) -> None:
    """The entry is found in the tiny scope as a shortest program, failing the recorded check."""
    _check_found(name, *FOUND_TINY[name])


@pytest.mark.campaign
@pytest.mark.parametrize("name", sorted(FOUND_SMALL) or ["none"])
def test_the_small_scope_finds(name: str) -> None:
    """The entry is found in the small scope as a shortest program, failing the recorded check."""
    if name == "none":
        pytest.skip("no entry needs the small scope")
    _check_found(name, *FOUND_SMALL[name])


@pytest.mark.campaign
@pytest.mark.deep
@pytest.mark.parametrize("name", sorted(FOUND_MEDIUM))
def test_the_medium_scope_finds(name: str) -> None:
    """The entry is found in the medium scope as a shortest program, failing the recorded
    check (about 16 minutes each on a busy machine)."""
    _check_found(name, *FOUND_MEDIUM[name])


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(name, marks=[pytest.mark.campaign] if name in _LINEAGE_CAMPAIGN else [])
        for name in sorted(FOUND_LINEAGE)
    ],
)
def test_the_lineage_scope_finds(name: str) -> None:
    """The entry is found in the lineage scope as a shortest program, failing the recorded
    check."""
    _check_found(name, *FOUND_LINEAGE[name])
