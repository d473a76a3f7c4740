"""The public surface: names exported, sorted, and nothing private leaking."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import runstore


def test_all_lists_every_public_name_once() -> None:
    """__all__ has no duplicates and names only attributes that exist."""
    assert len(set(runstore.__all__)) == len(runstore.__all__)
    for name in runstore.__all__:
        assert hasattr(runstore, name), name


def test_public_names_are_exported() -> None:
    """Every public attribute of the package is in __all__ (modules aside)."""
    public = {
        name
        for name, value in vars(runstore).items()
        if not name.startswith("_") and not isinstance(value, type(runstore))
    }
    assert public == set(runstore.__all__)


def test_contract_names_exist() -> None:
    """The binding names of contract.md are importable from runstore."""
    for name in [
        "OwnerId",
        "RunSnapshot",
        "RunRow",
        "LivenessEvidence",
        "TransitionGuard",
        "OwnershipFact",
        "RunChange",
        "RunStoreError",
        "RunStore",
        "Clock",
        "SystemClock",
        "ManualClock",
        "NoopRunStore",
        "open",
        "TERMINAL_STATUSES",
        "HEARTBEAT_INTERVAL_MS",
        "HEARTBEAT_STALE_AFTER_MS",
        "HEARTBEAT_SKEW_ALLOWANCE_MS",
        "HEARTBEAT_WRITE_TOLERANCE_MS",
        "MAXIMUM_RUN_JSON_DEPTH",
        "MAXIMUM_RUN_JSON_NODES",
        "MAXIMUM_IDENTIFIER_LENGTH",
        "Claimed",
        "NotFound",
        "AlreadyClaimed",
        "HeartbeatFresh",
        "SnapshotChanged",
        "EvidenceRequired",
        "Activated",
        "ClaimLost",
        "Abandoned",
        "Recovered",
        "ClaimFresh",
        "ClaimChanged",
        "LivenessUnconfirmed",
        "Updated",
        "FenceLost",
        "Transitioned",
        "GuardFailed",
        "CancelRequested",
        "AlreadyRequested",
        "Terminal",
        "ClaimOutcome",
        "StealOutcome",
        "ClaimAndOwnOutcome",
        "ActivateOutcome",
        "AbandonClaimOutcome",
        "RecoverClaimOutcome",
        "HeartbeatOutcome",
        "TransitionOutcome",
        "RequestCancelOutcome",
    ]:
        assert name in runstore.__all__, name
    assert runstore.HEARTBEAT_WRITE_TOLERANCE_MS == 19000


def test_imports_from_repo_root_and_elsewhere(tmp_path: Path) -> None:
    """runstore and runstore.model import from the repo root and from any other
    directory, and the distribution installs no top-level model or stateful."""
    root = Path(__file__).resolve().parents[2]
    imports = "import runstore, runstore.model, runstore.stateful"
    subprocess.run([sys.executable, "-c", imports], cwd=root, check=True)
    # Outside the checkout nothing puts the folders on sys.path, so a top-level
    # name would only resolve if the install had created one.
    elsewhere = (
        f"{imports}; import importlib.util;"
        "assert importlib.util.find_spec('model') is None, 'top-level model installed';"
        "assert importlib.util.find_spec('stateful') is None, 'top-level stateful installed'"
    )
    subprocess.run([sys.executable, "-c", elsewhere], cwd=tmp_path, check=True)
