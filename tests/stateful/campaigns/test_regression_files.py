"""A regression file written by ``runstore fuzz`` fails exactly when the
original failure recurs: it re-checks, after every step, the invariants the
machine checked (not only the answers and the final state), so a bug that only
an invariant catches keeps failing its file, and a fixed store passes it.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import runstore
from runstore import ManualClock
from runstore.stateful._campaigns._fuzz import fuzz_target
from runstore.stateful._targets._builtin import store_target

ROOT = Path(__file__).resolve().parents[3]


def fixed_store(clock: ManualClock, path: Path) -> runstore.SqliteRunStore:
    """The shipped in-memory store: the zoo bugs, fixed."""
    return runstore.open(":memory:", clock=clock)


def _pytest(path: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(path)],
        env=env,
        cwd=path.parent,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _found(spec: str, tmp_path: Path) -> Path:
    stream = io.StringIO()
    written = fuzz_target(
        store_target(spec),
        seconds=None,
        examples=200,
        seed_value=1,
        db_dir=tmp_path / "db",
        out_dir=tmp_path / "out",
        stream=stream,
    )
    assert written is not None, stream.getvalue()
    return written


def _without_final_state(source: str) -> str:
    """The file with its final-state comparison taken out, so only the judged
    answers and the re-checked invariants remain."""
    return re.sub(
        r"\n(\s+)expected = StoreState\(.*?\n\1assert store\.state\(\) == expected\n",
        "\n",
        source,
        flags=re.S,
    )


@pytest.mark.parametrize(
    ("bug", "check"),
    [
        ("suspend_keeps_claim", "LeaseRowDisagreement"),
        ("settle_forgets_release_fact", "FactReplayMismatch"),
        ("purge_ignores_live_round", "SettledPurgeViolation"),
        ("claim_next_takes_claimed", "UnclaimableTaken"),
    ],
)
def test_a_zoo_bug_caught_by_an_invariant_fails_its_file_until_fixed(
    bug: str, check: str, tmp_path: Path
):
    """The file of a bug only an invariant names fails on the buggy store with
    that invariant (even with the final-state comparison taken out), and passes
    once its import names a correct store."""
    written = _found(f"tests.zoo.{bug}:factory", tmp_path)
    source = written.read_text()
    assert f"Regression: {check}" in source
    failed = _pytest(written)
    assert failed.returncode == 1, failed.stdout
    assert check in failed.stdout

    trimmed = tmp_path / "trimmed" / written.name
    trimmed.parent.mkdir()
    trimmed.write_text(_without_final_state(source))
    assert "assert store.state() == expected" not in trimmed.read_text()
    still = _pytest(trimmed)
    assert still.returncode == 1, still.stdout
    assert check in still.stdout

    fixed = tmp_path / "fixed" / written.name
    fixed.parent.mkdir()
    broken = f"from tests.zoo.{bug} import factory as open_store"
    assert broken in source
    fixed.write_text(
        source.replace(
            broken,
            "from tests.stateful.campaigns.test_regression_files import fixed_store as open_store",
        )
    )
    passed = _pytest(fixed)
    assert passed.returncode == 0, passed.stdout
