"""One version everywhere: pyproject.toml's, as the installed metadata, the
``runstore --version`` script, ``python -m runstore --version`` and
``runstore.__version__`` all report it; a source tree that is not installed
falls back to its own pyproject.toml, and anything else says ``0+unknown``."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

import runstore
from runstore import _version

ROOT = Path(__file__).resolve().parents[2]


def _pyproject_version() -> str:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return str(project["version"])


def _script() -> str:
    """The installed ``runstore`` console script of this interpreter's environment."""
    beside = Path(sys.executable).parent / "runstore"
    found = str(beside) if beside.exists() else shutil.which("runstore")
    assert found, "the runstore console script is not installed"
    return found


def test_the_three_entry_points_agree_with_pyproject(tmp_path: Path) -> None:
    """The script, ``python -m runstore`` and ``__version__`` say pyproject's version."""
    expected = _pyproject_version()
    assert metadata.version("runstore") == expected, (
        "installed metadata is stale: reinstall with pip install -e '.[dev]'"
    )
    assert runstore.__version__ == expected
    for command in ([_script(), "--version"], [sys.executable, "-m", "runstore", "--version"]):
        done = subprocess.run(
            command, cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False
        )
        assert (done.returncode, done.stdout, done.stderr) == (0, f"runstore {expected}\n", "")


def test_python_dash_m_runs_the_command_line(tmp_path: Path) -> None:
    """``python -m runstore`` is the CLI: no command prints usage and exits 2."""
    done = subprocess.run(
        [sys.executable, "-m", "runstore"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.startswith("usage: runstore")


def _version_in_a_bare_interpreter(tree: Path) -> str:
    """Load a copy of ``_version.py`` from ``tree/runstore/`` in an interpreter
    without site-packages, so no installed runstore metadata can be found."""
    package = tree / "runstore"
    package.mkdir(parents=True)
    shutil.copy(_version.__file__, package / "_version.py")
    code = (
        "import importlib.util, sys;"
        f"spec = importlib.util.spec_from_file_location('v', {str(package / '_version.py')!r});"
        "module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module);"
        "print(module.__version__)"
    )
    done = subprocess.run(
        [sys.executable, "-S", "-c", code],
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.strip()


@pytest.mark.parametrize(
    ("pyproject", "expected"),
    [
        ('[project]\nname = "runstore"\nversion = "9.8.7"\n', "9.8.7"),
        ('[project]\nname = "someone-else"\nversion = "9.8.7"\n', "0+unknown"),
        ("not = [toml\n", "0+unknown"),
        (None, "0+unknown"),
    ],
    ids=["own-pyproject", "foreign-pyproject", "broken-pyproject", "no-pyproject"],
)
def test_an_uninstalled_tree_falls_back(
    tmp_path: Path, pyproject: str | None, expected: str
) -> None:
    """Without installed metadata the version comes from the checkout's own
    pyproject.toml, and is ``0+unknown`` when that is missing or not runstore's."""
    if pyproject is not None:
        (tmp_path / "pyproject.toml").write_text(pyproject, encoding="utf-8")
    assert _version_in_a_bare_interpreter(tmp_path) == expected
