"""A Griffe extension for the API reference: runstore's installed layout.

The distribution installs the folders ``model/`` and ``stateful/`` as
``runstore.model`` and ``runstore.stateful`` (``package-dir`` in
pyproject.toml). Griffe reads packages from folders and finds only the
``runstore/`` one, so this extension visits the two other folders as
subpackages of ``runstore`` once it is loaded, with the loader's own settings.
Nothing is imported. mkdocs.yml names this file; it is not a page.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import griffe

ROOT = Path(__file__).resolve().parent.parent
SUBPACKAGES = {"model": ROOT / "model", "stateful": ROOT / "stateful"}


class RunstoreLayout(griffe.Extension):
    """Attach ``model/`` and ``stateful/`` to the loaded ``runstore`` package."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        if pkg.path != "runstore":
            return
        for name, folder in SUBPACKAGES.items():
            if name not in pkg.members:
                pkg.set_member(name, _visit_folder(name, folder, pkg, loader))


def _visit(
    name: str, path: Path, parent: griffe.Module, loader: griffe.GriffeLoader
) -> griffe.Module:
    code = path.read_text(encoding="utf-8")
    loader.lines_collection[path] = code.splitlines(keepends=False)
    return griffe.visit(
        name,
        path,
        code,
        extensions=loader.extensions,
        parent=parent,
        docstring_parser=loader.docstring_parser,
        docstring_options=loader.docstring_options,
        lines_collection=loader.lines_collection,
        modules_collection=loader.modules_collection,
    )


def _visit_folder(
    name: str, folder: Path, parent: griffe.Module, loader: griffe.GriffeLoader
) -> griffe.Module:
    """The package in ``folder``, its modules and subpackages, as ``parent.name``."""
    package = _visit(name, folder / "__init__.py", parent, loader)
    for path in sorted(folder.iterdir()):
        if path.is_dir() and (path / "__init__.py").is_file():
            package.set_member(path.name, _visit_folder(path.name, path, package, loader))
        elif path.suffix == ".py" and path.name != "__init__.py":
            package.set_member(path.stem, _visit(path.stem, path, package, loader))
    loader.expand_exports(package)
    return package
