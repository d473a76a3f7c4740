"""The package version, read once from the installed distribution's metadata.

pyproject.toml is the single place the version is written. An installed copy
(regular or editable) reports it through ``importlib.metadata``; a source tree
imported without being installed falls back to reading the pyproject.toml
beside it, and anything else says ``0+unknown`` rather than guessing.
"""

from __future__ import annotations

import shlex
import tomllib
from importlib import metadata
from pathlib import Path

UNKNOWN_VERSION = "0+unknown"


def _from_source_tree() -> str | None:
    """The version in the pyproject.toml of the checkout this file sits in, if any."""
    pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
    try:
        project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {})
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    version = project.get("version")
    if project.get("name") == "runstore" and isinstance(version, str):
        return version
    return None


def package_version() -> str:
    """The version of the runstore distribution: metadata first, then the source tree."""
    try:
        return metadata.version("runstore")
    except metadata.PackageNotFoundError:
        return _from_source_tree() or UNKNOWN_VERSION


__version__ = package_version()


def install_hint(extra: str) -> str:
    """A command that adds ``extra`` (``"postgres"``, ``"otel"``,
    ``"conformance"``) to this installation, for the message that says it is
    missing. runstore is on no package index, so ``pip install
    'runstore[extra]'`` would find nothing: an editable install gets the
    command for its own checkout, anything else the wheel's."""
    checkout = Path(__file__).resolve().parent.parent
    if _from_source_tree() is not None:
        target = shlex.quote(f"{checkout}[{extra}]")
        return f"python -m pip install -e {target}"
    wheel = f"runstore-{__version__}-py3-none-any.whl[{extra}]"
    return f"python -m pip install '{wheel}' (the wheel built from the runstore checkout)"
