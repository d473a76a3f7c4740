"""Packaging: every package folder is installed, under the owned namespace."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _configured() -> tuple[set[str], dict[str, str]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    return set(config["packages"]), dict(config["package-dir"])


def test_every_package_folder_is_listed() -> None:
    """A regular install ships every folder that has an __init__.py; a missing
    entry would install fine editable and break everywhere else."""
    listed, dirs = _configured()
    found = set()
    for name, folder in dirs.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            relative = init.parent.relative_to(ROOT / folder)
            found.add(".".join([name, *relative.parts]) if relative.parts else name)
    assert found == listed


def test_folders_map_into_the_runstore_namespace() -> None:
    """model/ and stateful/ install as runstore.model and runstore.stateful."""
    _, dirs = _configured()
    assert dirs == {
        "runstore": "runstore",
        "runstore.model": "model",
        "runstore.stateful": "stateful",
    }
