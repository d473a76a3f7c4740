"""Model and adapter stay independent (contract.md, "Independence").

The differential suite only means something if the reference model and the
SQLite adapter can be wrong in different ways, so they must not share decision
logic. This test reads every module's imports (statically, with ``ast``) and
resolves each imported name to the module that defines it, following the
re-exports of ``runstore`` and ``runstore.consensus``:

- a module of ``runstore.model`` may import from ``runstore`` only values,
  outcomes, errors, constants, the clock, input admission, the store protocol
  and the consensus types, besides its own package;
- a module of ``runstore.sqlite``, ``runstore.postgres``, ``runstore._sql``
  (the adapters' shared core) or ``runstore.consensus`` never imports
  ``runstore.model``;
- nothing imports top-level ``model`` or ``stateful`` packages (there are none).

Imports under ``if TYPE_CHECKING:``, attribute access through an imported
package (``runstore.sqlite.open``) and ``importlib.import_module("...")`` with
a literal name all count.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Import name -> folder, as pyproject.toml's package-dir maps them.
PACKAGE_DIRS = {
    "runstore.model": ROOT / "model",
    "runstore.stateful": ROOT / "stateful",
    "runstore": ROOT / "runstore",
}

#: What the model may use from the rest of the distribution: values, outcomes,
#: errors, constants, the clock, input admission and the consensus types, for the
#: run store and likewise for the attempt store. ``_protocol`` holds only the
#: ``RunStore`` interface, no decisions. Never a strategy, the adapter, the
#: attempt store itself or the ownership helpers.
MODEL_MAY_IMPORT = frozenset(
    {
        "runstore._values",
        "runstore._outcomes",
        "runstore._errors",
        "runstore._constants",
        "runstore._clock",
        "runstore._boundary",
        "runstore._protocol",
        "runstore.consensus._types",
        "runstore.attempts._values",
        "runstore.attempts._outcomes",
        "runstore.attempts._errors",
        "runstore.attempts._boundary",
    }
)

Rule = Callable[[str], str | None]


def model_rule(module: str) -> str | None:
    """Why the model may not import ``module``, or None when it may."""
    if module == "runstore.model" or module.startswith("runstore.model."):
        return None
    if module in MODEL_MAY_IMPORT:
        return None
    if module == "runstore" or module.startswith("runstore."):
        return f"the model may not import {module}"
    return None


def adapter_rule(module: str) -> str | None:
    """Why the adapter or a strategy may not import ``module``, or None when it may."""
    if module == "runstore.model" or module.startswith("runstore.model."):
        return f"the adapter and the strategies may not import {module}"
    return None


# -- resolving module names --------------------------------------------------

#: Packages whose names are judged one by one, by the module each comes from:
#: ``from runstore import OwnerId`` is a value, ``from runstore import open`` is
#: the adapter.
REEXPORTING = frozenset({"runstore", "runstore.consensus", "runstore.attempts"})


def module_path(module: str) -> Path | None:
    """The file defining ``module`` in this checkout, or None if there is none."""
    for prefix, folder in PACKAGE_DIRS.items():
        if module == prefix:
            rest: list[str] = []
        elif module.startswith(prefix + "."):
            rest = module[len(prefix) + 1 :].split(".")
        else:
            continue
        base = folder.joinpath(*rest)
        if (base / "__init__.py").is_file():
            return base / "__init__.py"
        if rest and base.with_suffix(".py").is_file():
            return base.with_suffix(".py")
        return None
    return None


def is_package(module: str) -> bool:
    path = module_path(module)
    return path is not None and path.name == "__init__.py"


_REEXPORTS: dict[str, dict[str, str]] = {}


def reexports(package: str) -> dict[str, str]:
    """Name -> defining module, for the top-level names of a package's ``__init__``:
    what it imports (followed to their origin) and what it defines itself."""
    if package in _REEXPORTS:
        return _REEXPORTS[package]
    _REEXPORTS[package] = {}  # a cycle sees an empty map instead of recursing forever
    path = module_path(package)
    if path is None or path.name != "__init__.py":
        return {}
    names: dict[str, str] = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ImportFrom):
            origin = absolute(node.module, node.level, package, package=True)
            for alias in node.names:
                names[alias.asname or alias.name] = resolve_member(origin, alias.name)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names[node.name] = package
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name):
                    names[target.id] = package
    _REEXPORTS[package] = names
    return names


def absolute(module: str | None, level: int, here: str, *, package: bool) -> str:
    """The absolute name of a (possibly relative) ``from`` import written in ``here``."""
    if level == 0:
        return module or ""
    parts = here.split(".") if package else here.split(".")[:-1]
    parts = parts[: len(parts) - (level - 1)]
    return ".".join([*parts, *([module] if module else [])])


def resolve_member(module: str, name: str) -> str:
    """The module that ``from module import name`` really takes ``name`` from."""
    submodule = f"{module}.{name}"
    if module_path(submodule) is not None:
        return submodule
    if not is_package(module):
        return module
    # A name a package neither defines as a submodule nor re-exports is judged
    # as if it were a submodule: ``from runstore import ownership`` before
    # ``ownership.py`` exists still counts as ``runstore.ownership``.
    return reexports(module).get(name, submodule)


def resolve_attribute(module: str, attributes: list[str]) -> str:
    """The module that ``module.a.b.c`` finally reads from."""
    for attribute in attributes:
        submodule = f"{module}.{attribute}"
        if module_path(submodule) is not None:
            module = submodule
            continue
        if not is_package(module):
            return module
        return reexports(module).get(attribute, submodule)
    return module


# -- the checker ---------------------------------------------------------------


def _attribute_chain(node: ast.Attribute) -> tuple[str, list[str]] | None:
    attributes: list[str] = []
    current: ast.expr = node
    while isinstance(current, ast.Attribute):
        attributes.append(current.attr)
        current = current.value
    if isinstance(current, ast.Name):
        return current.id, attributes[::-1]
    return None


def violations(source: str, module: str, filename: str, rule: Rule) -> list[str]:
    """Every import in ``source`` (the text of ``module``) that ``rule`` refuses,
    as ``"<filename>:<line>: <import> -> <reason>"``."""
    tree = ast.parse(source, filename)
    here_is_package = filename.endswith("__init__.py")
    found: list[str] = []
    # Local names bound to a re-exporting package, judged by what is read through them.
    bound: dict[str, str] = {}

    def check(line: int, text: str, target: str) -> None:
        top = target.split(".")[0]
        if top in ("model", "stateful"):
            found.append(f"{filename}:{line}: {text} -> there is no top-level {top} package")
            return
        reason = rule(target)
        if reason is not None:
            found.append(f"{filename}:{line}: {text} -> {reason}")

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                text = f"import {alias.name}" + (f" as {alias.asname}" if alias.asname else "")
                if alias.asname:
                    bound[alias.asname] = alias.name
                else:
                    bound[alias.name.split(".")[0]] = alias.name.split(".")[0]
                if alias.name not in REEXPORTING:
                    check(node.lineno, text, alias.name)
        elif isinstance(node, ast.ImportFrom):
            origin = absolute(node.module, node.level, module, package=here_is_package)
            dots = "." * node.level
            for alias in node.names:
                text = f"from {dots}{node.module or ''} import {alias.name}"
                if alias.name == "*":
                    check(node.lineno, text, origin)
                    continue
                target = resolve_member(origin, alias.name)
                if target in REEXPORTING:
                    bound[alias.asname or alias.name] = target
                    continue
                check(node.lineno, text, target)
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            first = node.args[0] if node.args else None
            if (
                name in ("import_module", "__import__")
                and isinstance(first, ast.Constant)
                and isinstance(first.value, str)
            ):
                check(node.lineno, f"{name}({first.value!r})", first.value)

    # Only whole chains: ``runstore.consensus.Granted``, not its prefix ``runstore.consensus``.
    inner = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or id(node) in inner:
            continue
        chain = _attribute_chain(node)
        if chain is None or chain[0] not in bound:
            continue
        root, attributes = chain
        if any(a.startswith("__") for a in attributes):
            continue
        text = ".".join([root, *attributes])
        target = resolve_attribute(bound[root], attributes)
        if target in REEXPORTING:
            found.append(f"{filename}:{node.lineno}: {text} -> cannot resolve")
            continue
        check(node.lineno, text, target)
    return sorted(set(found))


# -- the scan ------------------------------------------------------------------


def modules_under(prefix: str) -> Iterator[tuple[str, Path]]:
    """(module name, path) of every Python file of package ``prefix``."""
    folder = module_path(prefix)
    assert folder is not None, prefix
    for path in sorted(folder.parent.rglob("*.py")):
        rest = path.relative_to(folder.parent).with_suffix("").parts
        if rest[-1] == "__init__":
            rest = rest[:-1]
        yield ".".join([prefix, *rest]), path


SCANS: list[tuple[str, Rule]] = [
    ("runstore.model", model_rule),
    ("runstore.sqlite", adapter_rule),
    ("runstore.postgres", adapter_rule),
    ("runstore._sql", adapter_rule),
    ("runstore.consensus", adapter_rule),
]


@pytest.mark.parametrize(("package", "rule"), SCANS, ids=[scan[0] for scan in SCANS])
def test_package_respects_independence(package: str, rule: Rule) -> None:
    """No module of the package imports what contract.md's Independence forbids it."""
    found: list[str] = []
    scanned = 0
    for module, path in modules_under(package):
        scanned += 1
        relative = str(path.relative_to(ROOT))
        found += violations(path.read_text(encoding="utf-8"), module, relative, rule)
    assert scanned > 0
    assert not found, "forbidden imports:\n" + "\n".join(found)


PLANTED_IN_MODEL = [
    "from runstore.sqlite import open",
    "from runstore import open",
    "from runstore import SqliteRunStore",
    "from runstore.consensus import LocalConsensus",
    "from runstore.consensus._sql import SqlConsensus",
    "from runstore.consensus import _noop",
    "from ..consensus import _local",
    "from .. import attempts\nattempts.AttemptStore",
    "from .. import ownership",
    "import runstore\nrunstore.ownership.supervise",
    "from runstore.ownership import lease_liveness",
    "from runstore.attempts._store import AttemptStore",
    "import runstore.attempts\nrunstore.attempts._store.AttemptStore",
    "from runstore._noop import NoopRunStore",
    "import runstore.sqlite",
    "import runstore\nrunstore.sqlite.open(':memory:')",
    "import runstore\nx = runstore.open",
    "import runstore.consensus as rc\nrc.LocalConsensus()",
    "from runstore import consensus\nconsensus._sql.SqlConsensus",
    "import importlib\nimportlib.import_module('runstore.sqlite')",
    "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from runstore.sqlite import open",
    "import model",
    "from stateful import machines",
]

ALLOWED_IN_MODEL = [
    "from runstore._values import OwnerId",
    "from runstore import OwnerId, Claimed, RunStoreError, HEARTBEAT_STALE_AFTER_MS",
    "from runstore.consensus import Granted, Transaction, Lease",
    "from runstore.consensus._types import Consensus",
    "from .._boundary import admit_claim",
    "from . import _leases",
    "from ._state import ModelState",
    "import runstore\nrunstore.OwnerId('h', 1, 'n')",
    "import runstore.consensus\nrunstore.consensus.Granted(1)",
    "import attrs\nimport sortedcontainers",
    "from runstore.attempts._values import AttemptId",
]

PLANTED_IN_ADAPTER = [
    "from runstore.model import ModelRunStore",
    "from runstore.model._leases import claim",
    "from ..model import ModelRunStore",
    "from .. import model",
    "from runstore import model",
    "import runstore.model as m",
    "import runstore\nrunstore.model.ModelRunStore",
    "import model",
    "import importlib\nimportlib.import_module('runstore.model')",
]

ALLOWED_IN_ADAPTER = [
    "from .._values import OwnerId",
    "from ..consensus._types import Granted",
    "from ..consensus import LocalConsensus",
    "from . import _queries",
    "import sqlite3",
]


@pytest.mark.parametrize("source", PLANTED_IN_MODEL)
def test_checker_catches_a_forbidden_model_import(source: str) -> None:
    """A planted forbidden import in a model module is reported with file and import."""
    found = violations(source, "runstore.model._planted", "model/_planted.py", model_rule)
    assert found, source
    assert all(line.startswith("model/_planted.py:") for line in found)


@pytest.mark.parametrize("source", ALLOWED_IN_MODEL)
def test_checker_admits_what_the_model_may_import(source: str) -> None:
    """Values, outcomes, errors, constants, admission and consensus types pass."""
    assert violations(source, "runstore.model._planted", "model/_planted.py", model_rule) == []


@pytest.mark.parametrize("source", PLANTED_IN_ADAPTER)
def test_checker_catches_a_model_import_in_the_adapter(source: str) -> None:
    """A planted import of the model in an adapter module is reported with file and import."""
    found = violations(
        source, "runstore.sqlite._planted", "runstore/sqlite/_planted.py", adapter_rule
    )
    assert found, source
    assert all(line.startswith("runstore/sqlite/_planted.py:") for line in found)


@pytest.mark.parametrize("source", ALLOWED_IN_ADAPTER)
def test_checker_admits_what_the_adapter_may_import(source: str) -> None:
    """The adapter's own imports of values, types and strategies pass."""
    found = violations(
        source, "runstore.sqlite._planted", "runstore/sqlite/_planted.py", adapter_rule
    )
    assert found == []


def test_checker_message_names_file_line_and_import() -> None:
    """The report says where the import is and what it reaches."""
    found = violations(
        "import attrs\nfrom runstore import open\n",
        "runstore.model._planted",
        "model/_planted.py",
        model_rule,
    )
    # The adapter's own layout decides how deep ``open`` resolves (the
    # dispatcher, runstore._open, in front of both backends).
    assert len(found) == 1
    assert found[0].startswith(
        "model/_planted.py:2: from runstore import open -> the model may not import runstore._open"
    )
