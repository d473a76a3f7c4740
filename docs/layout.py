"""How the code is laid out: the rooms of runstore and the imports between them.

The three installed packages (``runstore``, ``runstore.model`` from ``model/``
and ``runstore.stateful`` from ``stateful/``) are split into rooms. ``ROOMS``
below lists them from the bottom up, each with the modules that belong to it,
one sentence of what belongs there, and the rooms it may import. This script
reads the source (it imports none of it), counts every import statement at any
depth (inside functions, under ``if TYPE_CHECKING:``, in ``try``/``except``,
and ``importlib.import_module`` of a literal name), and checks:

- that no module takes part in an import cycle, even one that only a function
  body closes (each cycle is reported as a path with the file and line of
  every import on it);
- that every module belongs to exactly one room, and every room of the table
  names modules that exist;
- that every import from one room into another is one the table allows, and
  that the rooms' imports form no cycle;
- that every package's ``__init__.py`` opens with a docstring that says what
  it may import;
- that ``docs/layout.md`` has one section for each room, with the room's
  sentence and the rooms it may import, and none for a room the table lacks;
- that ``docs/layout.svg``, the picture of the rooms in layers and the arrows
  between them, is the one this script draws from the code today.

Usage (standard library only)::

    python docs/layout.py           # draw docs/layout.svg, print any broken rule
    python docs/layout.py --check   # exit 1 if a rule is broken or the picture is stale

``tests/test_layout.py`` runs the same checks. mkdocs.yml leaves ``*.py`` under
docs/ out of the site; the picture is copied into it.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from collections import defaultdict, deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: Each installed package and its folder in the repository (``package-dir`` in
#: pyproject.toml). Module names are the installed ones.
SOURCES: tuple[tuple[str, str], ...] = (
    ("runstore", "runstore"),
    ("runstore.model", "model"),
    ("runstore.stateful", "stateful"),
)

PICTURE = Path("docs") / "layout.svg"
PAGE = Path("docs") / "layout.md"


@dataclass(frozen=True)
class Room:
    """One room: its modules, what belongs there, and what it may import.

    A module belongs to the room if it is one of ``modules`` or is one of
    ``packages`` or inside one of them.
    """

    name: str
    group: str  # "library", "suite" or "command line": the picture's colours
    belongs: str
    may_import: tuple[str, ...]
    packages: tuple[str, ...] = ()
    modules: tuple[str, ...] = ()


LIBRARY = (
    "core",
    "consensus",
    "_sql",
    "sqlite",
    "postgres",
    "attempts",
    "aio",
    "ownership",
    "model",
    "worker",
    "face",
)

#: The rooms, from the bottom up: a room may import only rooms listed before it.
ROOMS: tuple[Room, ...] = (
    Room(
        "core",
        "library",
        "Values, outcomes, errors, clocks, the numbers of the lease rules, input admission, "
        "the RunStore protocol, the stand-in store, the version and telemetry: the words "
        "every other room speaks.",
        (),
        modules=(
            "runstore._values",
            "runstore._errors",
            "runstore._clock",
            "runstore._constants",
            "runstore._outcomes",
            "runstore._protocol",
            "runstore._boundary",
            "runstore._noop",
            "runstore._version",
            "runstore._telemetry",
        ),
    ),
    Room(
        "consensus",
        "library",
        "The strategies that decide who holds a run (SqlConsensus, LocalConsensus, "
        "NoopConsensus) and the run rows they rebuild their leases from.",
        ("core",),
        packages=("runstore.consensus",),
    ),
    Room(
        "_sql",
        "library",
        "The SQL store both backends share: every decision made once, decoding rows, "
        "the invariant checks, the open modes, the fault seam and the migration machinery.",
        ("consensus", "core"),
        packages=("runstore._sql",),
    ),
    Room(
        "sqlite",
        "library",
        "The SQLite backend: opening a file, its connection and transactions, its "
        "migrations, error mapping and SQL text.",
        ("_sql", "consensus", "core"),
        packages=("runstore.sqlite",),
    ),
    Room(
        "postgres",
        "library",
        "The PostgreSQL backend: its connections, transactions, migrations, error "
        "mapping, clock check and SQL text.",
        ("_sql", "consensus", "core"),
        packages=("runstore.postgres",),
    ),
    Room(
        "attempts",
        "library",
        "Durable step attempts fenced by the run's owner, kept in the run store's own database.",
        ("_sql", "core"),
        packages=("runstore.attempts",),
    ),
    Room(
        "aio",
        "library",
        "The asyncio face of the store: AsyncRunStore and AsyncAttemptStore, each call the "
        "synchronous store's own, run on a thread of its own, with asyncio's cancellation.",
        ("attempts", "_sql", "core"),
        packages=("runstore.aio",),
    ),
    Room(
        "ownership",
        "library",
        "Owning a run for real: keeping one lease or a fleet of them alive, and the "
        "liveness evidence a takeover needs.",
        ("consensus", "core"),
        packages=("runstore.ownership",),
    ),
    Room(
        "model",
        "library",
        "The reference model: the whole store, its strategy and its attempts in memory, "
        "with no I/O and no wall clock.",
        ("core", "consensus", "attempts"),
        packages=("runstore.model",),
    ),
    Room(
        "worker",
        "library",
        "The reference worker: finding claimable and stale runs, taking them over with "
        "evidence, one fleet supervisor for what it holds, and each run's end under the fence.",
        ("ownership", "aio", "attempts", "consensus", "core"),
        packages=("runstore.worker",),
    ),
    Room(
        "face",
        "library",
        "What import runstore gives: the public names, and runstore.open, which hands a "
        "path or a URL to its backend.",
        LIBRARY[:-1],
        modules=("runstore", "runstore._open"),
    ),
    Room(
        "stateful._base",
        "suite",
        "The suite's vocabulary: operations as data, the small world the machines play "
        "in, capabilities, comparing two states, watching an example run, and the "
        "test profiles.",
        LIBRARY,
        packages=("runstore.stateful._base",),
    ),
    Room(
        "stateful._targets",
        "suite",
        "What the suite runs against: the shipped stores and strategies by name, the "
        "factories a third party hands in, and throwaway PostgreSQL servers.",
        (*LIBRARY, "stateful._base"),
        packages=("runstore.stateful._targets",),
    ),
    Room(
        "stateful._checks",
        "suite",
        "The checks the machines apply and the checks that stand alone: the fence and "
        "attempt invariants, admission, raw column edits, faults, opening files, a "
        "PostgreSQL session and the server clock.",
        (*LIBRARY, "stateful._base", "stateful._targets"),
        packages=("runstore.stateful._checks",),
    ),
    Room(
        "stateful._machines",
        "suite",
        "The differential machines (the run store, attempts, a strategy, its authority) "
        "and what steers them into rare situations and records what they reached.",
        (*LIBRARY, "stateful._base", "stateful._targets", "stateful._checks"),
        packages=("runstore.stateful._machines",),
    ),
    Room(
        "stateful._histories",
        "suite",
        "Concurrent histories: recording them, their JSON form, the sequential "
        "specification, the linearizability search and its report, and generated "
        "workloads.",
        (*LIBRARY, "stateful._base"),
        packages=("runstore.stateful._histories",),
    ),
    Room(
        "stateful._explore",
        "suite",
        "Exhaustive exploration of small scopes: the scopes and their domains, canonical "
        "states, the breadth-first walk over the reference model, and applying the "
        "walked graph to a store or a strategy.",
        (*LIBRARY, "stateful._base", "stateful._targets", "stateful._checks", "stateful._machines"),
        packages=("runstore.stateful._explore",),
    ),
    Room(
        "stateful._campaigns",
        "suite",
        "What runs the machines, the checks and the histories: run_conformance and its "
        "budget, fuzz and replay, regression files and their judge, the torture driver "
        "and the summary of a failure.",
        (
            *LIBRARY,
            "stateful._base",
            "stateful._targets",
            "stateful._checks",
            "stateful._machines",
            "stateful._histories",
            "stateful._explore",
        ),
        packages=("runstore.stateful._campaigns",),
    ),
    Room(
        "stateful face",
        "suite",
        "What import runstore.stateful gives: the suite's public names, and the early "
        "check that its extra is installed.",
        (
            *LIBRARY,
            "stateful._base",
            "stateful._targets",
            "stateful._checks",
            "stateful._machines",
            "stateful._histories",
            "stateful._explore",
            "stateful._campaigns",
        ),
        modules=("runstore.stateful", "runstore.stateful._requires"),
    ),
    Room(
        "cli",
        "command line",
        "The command line: runstore and its subcommands, the demo, the operator "
        "commands, and python -m runstore and python -m runstore.stateful.",
        (
            *LIBRARY,
            "stateful._base",
            "stateful._targets",
            "stateful._checks",
            "stateful._machines",
            "stateful._histories",
            "stateful._explore",
            "stateful._campaigns",
            "stateful face",
        ),
        packages=("runstore.cli",),
        modules=("runstore.__main__", "runstore.stateful.__main__"),
    ),
)


# -- The import graph, read from the source ----------------------------------


@dataclass(frozen=True, order=True)
class Site:
    """Where an import is written: a path relative to the tree, and a line."""

    path: str
    line: int

    def __str__(self) -> str:
        return f"{self.path}:{self.line}"


@dataclass
class Graph:
    """Every module (its file, relative to the tree) and every import between
    two of them, with the sites that write it."""

    files: dict[str, str] = field(default_factory=dict)
    edges: dict[tuple[str, str], list[Site]] = field(default_factory=dict)

    def targets(self, module: str) -> list[str]:
        return sorted(b for (a, b) in self.edges if a == module)


def find_modules(root: Path, sources: Sequence[tuple[str, str]] = SOURCES) -> dict[str, Path]:
    """Each module's installed name and its file, for the packages under ``root``."""
    found: dict[str, Path] = {}
    for package, folder in sources:
        base = root / folder
        for path in sorted(base.rglob("*.py")):
            parts = list(path.relative_to(base).with_suffix("").parts)
            if "__pycache__" in parts:
                continue
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([package, *parts])] = path
    return found


def _absolute(module: str, is_package: bool, level: int, name: str | None) -> str:
    """The absolute module named by ``from <dots><name> import ...`` in ``module``."""
    if level == 0:
        return name or ""
    parts = module.split(".") if is_package else module.split(".")[:-1]
    if level - 1 > len(parts):
        return ""
    parts = parts[: len(parts) - (level - 1)]
    return ".".join([*parts, *([name] if name else [])])


def _resolve(name: str, modules: Mapping[str, object]) -> str | None:
    """The module an import of ``name`` runs: ``name`` or its nearest parent
    among ``modules``; None for a module outside the packages."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


_IMPORT_CALLS = frozenset({"import_module", "__import__"})


def _imported_names(
    tree: ast.AST, module: str, is_package: bool, modules: Mapping[str, object]
) -> Iterable[tuple[str, int]]:
    """(target module, line) for every import in a module's syntax tree."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = _resolve(alias.name, modules)
                if target is not None:
                    yield target, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(module, is_package, node.level, node.module)
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                target = submodule if submodule in modules else _resolve(base, modules)
                if target is not None:
                    yield target, node.lineno
        elif isinstance(node, ast.Call) and node.args:
            function = node.func
            called = (
                function.attr
                if isinstance(function, ast.Attribute)
                else function.id
                if isinstance(function, ast.Name)
                else None
            )
            first = node.args[0]
            if (
                called in _IMPORT_CALLS
                and isinstance(first, ast.Constant)
                and isinstance(first.value, str)
                and not first.value.startswith(".")
            ):
                target = _resolve(first.value, modules)
                if target is not None:
                    yield target, node.lineno


def build(root: Path = ROOT, sources: Sequence[tuple[str, str]] = SOURCES) -> Graph:
    """The import graph of the packages in the tree at ``root``, from their source."""
    modules = find_modules(root, sources)
    graph = Graph()
    for module, path in modules.items():
        relative = path.relative_to(root).as_posix()
        graph.files[module] = relative
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=relative)
        for target, line in _imported_names(tree, module, path.name == "__init__.py", modules):
            if target != module:
                graph.edges.setdefault((module, target), []).append(Site(relative, line))
    # One statement naming two things of one module is one import of it.
    graph.edges = {pair: sorted(set(sites)) for pair, sites in sorted(graph.edges.items())}
    return graph


# -- Cycles ------------------------------------------------------------------


def strongly_connected(nodes: Iterable[str], edges: Iterable[tuple[str, str]]) -> list[list[str]]:
    """Tarjan's strongly connected components with more than one node, each
    sorted, in sorted order (iterative: no recursion limit)."""
    successors: dict[str, list[str]] = defaultdict(list)
    for a, b in sorted(set(edges)):
        successors[a].append(b)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(set(nodes)):
        if start in index:
            continue
        work = [(start, 0)]
        while work:
            node, position = work.pop()
            if position == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            following = successors[node]
            if position < len(following):
                work.append((node, position + 1))
                nxt = following[position]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return sorted(found)


def _shortest_cycle(
    start: str, members: set[str], successors: Mapping[str, list[str]]
) -> list[str]:
    """The shortest path start -> ... -> start inside one component."""
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for nxt in successors[node]:
            if nxt not in members:
                continue
            if nxt == start:
                path = [node]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return [*reversed(path), start]
            if nxt not in came_from:
                came_from[nxt] = node
                queue.append(nxt)
    raise AssertionError(f"{start} is on no cycle")  # pragma: no cover - a component has one


def _rotated(path: list[str]) -> tuple[str, ...]:
    """A cycle ``[a, b, ..., a]`` started at its smallest member."""
    body = path[:-1]
    first = body.index(min(body))
    body = body[first:] + body[:first]
    return (*body, body[0])


def tangles(nodes: Iterable[str], edges: Iterable[tuple[str, str]]) -> list[list[list[str]]]:
    """For each set of nodes that reach each other (a strongly connected
    component), concrete cycles ``[a, b, ..., a]`` that put each of them on
    one: the shortest first."""
    edges = sorted(set(edges))
    successors: dict[str, list[str]] = defaultdict(list)
    for a, b in edges:
        successors[a].append(b)
    found = []
    for component in strongly_connected(nodes, edges):
        members = set(component)
        shortest = {_rotated(_shortest_cycle(m, members, successors)) for m in component}
        uncovered = set(component)
        chosen = []
        for path in sorted(shortest, key=lambda p: (len(p), p)):
            if uncovered & set(path):
                chosen.append(list(path))
                uncovered -= set(path)
        found.append(chosen)
    return found


def cycles(nodes: Iterable[str], edges: Iterable[tuple[str, str]]) -> list[list[str]]:
    """Every cycle of ``tangles``, in one list."""
    return [path for tangle in tangles(nodes, edges) for path in tangle]


def _sites(sites: Sequence[Site]) -> str:
    by_file: dict[str, list[str]] = defaultdict(list)
    for site in sites:
        by_file[site.path].append(str(site.line))
    return ", ".join(f"{path}:{','.join(lines)}" for path, lines in by_file.items())


def cycle_problems(graph: Graph) -> list[str]:
    """One message per set of modules that import each other, with cycles
    through all of them, naming the file and line of each import on each."""
    problems = []
    for tangle in tangles(graph.files, graph.edges):
        lines = []
        for path in tangle:
            lines.append(f"import cycle: {' -> '.join(path)}")
            for a, b in pairwise(path):
                lines.append(f"    {a} -> {b} at {_sites(graph.edges[a, b])}")
        problems.append("\n".join(lines))
    return problems


# -- Rooms -------------------------------------------------------------------


def rooms_of(module: str, rooms: Sequence[Room] = ROOMS) -> list[str]:
    """The names of the rooms ``module`` belongs to (exactly one, if all is well)."""
    return [
        room.name
        for room in rooms
        if module in room.modules
        or any(module == p or module.startswith(p + ".") for p in room.packages)
    ]


def table_problems(graph: Graph, rooms: Sequence[Room] = ROOMS) -> list[str]:
    """The table itself: unique names, known rooms listed below each room, and
    every module and package it names present in the tree."""
    problems = []
    seen: list[str] = []
    for room in rooms:
        if room.name in seen:
            problems.append(f"room {room.name} is listed twice")
        for other in room.may_import:
            if other not in seen:
                problems.append(
                    f"room {room.name} may import {other}, which is not a room listed "
                    "before it (ROOMS runs from the bottom up)"
                )
        for name in (*room.modules, *room.packages):
            if name not in graph.files:
                problems.append(f"room {room.name} names {name}, which is not a module")
        seen.append(room.name)
    return problems


def membership_problems(graph: Graph, rooms: Sequence[Room] = ROOMS) -> list[str]:
    """Every module in exactly one room."""
    problems = []
    for module, path in graph.files.items():
        found = rooms_of(module, rooms)
        if not found:
            problems.append(
                f"{module} ({path}) is in no room: add it to a room of ROOMS in docs/layout.py"
            )
        elif len(found) > 1:
            problems.append(f"{module} ({path}) is in more than one room: {', '.join(found)}")
    return problems


def room_edges(graph: Graph, rooms: Sequence[Room] = ROOMS) -> dict[tuple[str, str], list[Site]]:
    """The imports between rooms: (importer, imported) -> every site."""
    found: dict[tuple[str, str], list[Site]] = {}
    for (a, b), sites in graph.edges.items():
        ra, rb = rooms_of(a, rooms), rooms_of(b, rooms)
        if len(ra) == 1 and len(rb) == 1 and ra != rb:
            found.setdefault((ra[0], rb[0]), []).extend(sites)
    for sites in found.values():
        sites.sort()
    return dict(sorted(found.items()))


def arrow_problems(graph: Graph, rooms: Sequence[Room] = ROOMS) -> list[str]:
    """Every import between two rooms that the table does not allow."""
    allowed = {room.name: set(room.may_import) for room in rooms}
    wrong: dict[tuple[str, str], list[str]] = defaultdict(list)
    for (a, b), sites in graph.edges.items():
        ra, rb = rooms_of(a, rooms), rooms_of(b, rooms)
        if len(ra) == 1 and len(rb) == 1 and ra != rb and rb[0] not in allowed[ra[0]]:
            wrong[ra[0], rb[0]].append(f"    {a} -> {b} at {_sites(sites)}")
    return [
        f"room {ra} may not import room {rb}:\n" + "\n".join(lines)
        for (ra, rb), lines in sorted(wrong.items())
    ]


def room_cycle_problems(graph: Graph, rooms: Sequence[Room] = ROOMS) -> list[str]:
    """Cycles in the rooms' imports, with one import for each arrow on them."""
    edges = room_edges(graph, rooms)
    problems = []
    for tangle in tangles([room.name for room in rooms], edges):
        lines = []
        for path in tangle:
            lines.append(f"room cycle: {' -> '.join(path)}")
            for a, b in pairwise(path):
                first = edges[a, b][0]
                many = len(edges[a, b])
                lines.append(
                    f"    {a} -> {b}: {many} import{'s' if many > 1 else ''}, the first at {first}"
                )
        problems.append("\n".join(lines))
    return problems


# -- Docstrings and the page -------------------------------------------------

MAY_IMPORT = re.compile(r"\bMay import\b")


def docstring_problems(
    root: Path = ROOT, sources: Sequence[tuple[str, str]] = SOURCES
) -> list[str]:
    """Every package's ``__init__.py`` opens with a docstring that says what it
    may import (a sentence starting "May import")."""
    problems = []
    for module, path in find_modules(root, sources).items():
        if path.name != "__init__.py":
            continue
        relative = path.relative_to(root).as_posix()
        docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
        if not docstring:
            problems.append(f"{relative} ({module}) opens with no docstring")
        elif not MAY_IMPORT.search(docstring):
            problems.append(
                f"{relative} ({module}): its docstring has no 'May import' sentence "
                "saying what the package may import"
            )
    return problems


_HEADING = re.compile(r"^### `(?P<name>[^`]+)`", re.MULTILINE)
_SECTION_END = re.compile(r"^#{1,3} ", re.MULTILINE)


def page_sections(text: str) -> dict[str, str]:
    """Each ``### `room``` section of the page, by name: its text up to the next heading."""
    sections = {}
    for match in _HEADING.finditer(text):
        rest = text[match.end() :]
        end = _SECTION_END.search(rest)
        sections[match["name"]] = rest[: end.start() if end else len(rest)]
    return sections


def _words(text: str) -> str:
    return " ".join(text.replace("`", "").split())


def page_problems(text: str, rooms: Sequence[Room] = ROOMS) -> list[str]:
    """The page has a section for each room and for no other, each with the
    room's sentence and a "May import" line naming exactly its rooms."""
    sections = page_sections(text)
    names = [room.name for room in rooms]
    problems = [f"{PAGE}: no section for room {n}" for n in names if n not in sections]
    problems += [f"{PAGE}: section {n} names no room of ROOMS" for n in sections if n not in names]
    for room in rooms:
        section = sections.get(room.name)
        if section is None:
            continue
        if _words(room.belongs) not in _words(section):
            problems.append(f"{PAGE}: section {room.name} lacks its sentence: {room.belongs!r}")
        line = re.search(r"May import:(.*?)(?:\n\n|$)", section, re.DOTALL)
        listed = set(re.findall(r"`([^`]+)`", line[1])) if line else None
        if listed != set(room.may_import):
            problems.append(
                f"{PAGE}: section {room.name} should say 'May import:' "
                f"{', '.join(room.may_import) or 'nothing'} (as backquoted room names)"
            )
    return problems


# -- The picture -------------------------------------------------------------

FONT = "font-family='sans-serif'"
COLOURS = {  # group: (fill, stroke)
    "library": ("#e8f0fb", "#41679c"),
    "suite": ("#e9f5e6", "#4a7f45"),
    "command line": ("#f8eedd", "#9a6a22"),
}
ARROW, HEAD, WRONG = "#9a9a9a", "#5c5c5c", "#c62828"
BOX_HEIGHT = 44
LAYER_GAP = 64
MARGIN = 24
NODE_GAP = 28
LANE_GAP = 12
SWEEPS = 12


def _weight(count: int) -> tuple[int, str]:
    """An arrow's stroke width (tenths of a pixel) and what it stands for."""
    if count >= 50:
        return 50, "50 imports or more"
    if count >= 10:
        return 32, "10 to 49 imports"
    if count >= 2:
        return 20, "2 to 9 imports"
    return 12, "1 import"


def _px(tenths: int) -> str:
    whole, rest = divmod(tenths, 10)
    return f"{whole}.{rest}" if rest else str(whole)


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _layers(names: Sequence[str], down: Mapping[str, list[str]]) -> dict[str, int]:
    """Each room's layer: 0 for a room that imports no room, else one above
    the highest room it imports (``down`` only holds arrows to rooms listed
    lower in the table, so this ends even when the code has a room cycle)."""
    layer: dict[str, int] = {}
    for name in names:  # bottom up: every target is placed already
        layer[name] = 1 + max((layer[t] for t in down[name]), default=-1)
    return layer


def _crossings(upper: list[str], lower: list[str], links: set[tuple[str, str]]) -> int:
    pos_u = {n: i for i, n in enumerate(upper)}
    pos_l = {n: i for i, n in enumerate(lower)}
    pairs = sorted((pos_u[a], pos_l[b]) for a, b in links if a in pos_u and b in pos_l)
    return sum(
        1
        for i, (a1, b1) in enumerate(pairs)
        for a2, b2 in pairs[i + 1 :]
        if (a1 < a2 and b1 > b2) or (a1 > a2 and b1 < b2)
    )


def _text(x: int, y: int, text: str) -> str:
    return f"<text x='{x}' y='{y}' {FONT} font-size='12' fill='#1c1c1c'>{_escape(text)}</text>"


def _legend(left: int, top: int) -> tuple[list[str], int]:
    """The legend's elements, three rows from ``top``, and its width."""
    out = []
    widest = 0
    x = left
    for group, (fill, stroke) in COLOURS.items():
        label = {"library": "the library", "suite": "runstore.stateful"}.get(group, group)
        out.append(
            f"<rect x='{x}' y='{top}' width='14' height='14' rx='3' fill='{fill}' "
            f"stroke='{stroke}' stroke-width='1.5'/>" + _text(x + 20, top + 11, label)
        )
        x += 20 + len(label) * 7 + 20
    widest = max(widest, x - left)
    x, y = left, top + 33
    for count in (1, 2, 10, 50):
        tenths, meaning = _weight(count)
        out.append(
            f"<path d='M{x},{y} L{x + 34},{y}' stroke='{ARROW}' stroke-width='{_px(tenths)}'/>"
            + _text(x + 42, y + 4, meaning)
        )
        x += 42 + len(meaning) * 7 + 20
    widest = max(widest, x - left)
    x, y = left, top + 59
    sentence = "An arrow points from a room to a room it imports; a red one is not allowed."
    out.append(
        f"<path d='M{x},{y} L{x + 34},{y}' stroke='{WRONG}' stroke-width='1.2' "
        "stroke-dasharray='6 4'/>" + _text(x + 42, y + 4, sentence)
    )
    widest = max(widest, 42 + len(sentence) * 7)
    return out, widest


def _by_barycentre(
    row: list[str], reference: list[str], neighbours: Mapping[str, list[str]]
) -> list[str]:
    """``row`` ordered by the mean position of each node's neighbours in the
    ``reference`` row (a node with none keeps its place; ties keep their order)."""
    position = {n: i for i, n in enumerate(reference)}

    def key(item: tuple[int, str]) -> tuple[float, int]:
        i, node = item
        near = [position[n] for n in neighbours[node] if n in position]
        return (sum(near) / len(near) if near else float(i), i)

    return [node for _, node in sorted(enumerate(row), key=key)]


def draw(graph: Graph, rooms: Sequence[Room] = ROOMS) -> str:
    """The picture: each room a box, in layers computed from the rooms'
    imports (the top rooms at the top), and an arrow for every pair of rooms
    one imports the other, as thick as its number of imports; an arrow the
    table does not allow is red and dashed. The same code draws the same bytes."""
    names = [room.name for room in rooms]
    order = {name: i for i, name in enumerate(names)}
    by_name = {room.name: room for room in rooms}
    counts = {pair: len(sites) for pair, sites in room_edges(graph, rooms).items()}
    allowed = {room.name: set(room.may_import) for room in rooms}
    members = dict.fromkeys(names, 0)
    for module in graph.files:
        found = rooms_of(module, rooms)
        if len(found) == 1:
            members[found[0]] += 1

    down: dict[str, list[str]] = {name: [] for name in names}
    for a, b in counts:
        if order[b] < order[a]:
            down[a].append(b)
    layer = _layers(names, down)
    height = 1 + max(layer.values(), default=0)

    # Long arrows pass through the layers between their ends in lanes, one
    # lane a layer for all the arrows into the same room: they join its trunk.
    rows: list[list[str]] = [[] for _ in range(height)]
    for name in names:
        rows[layer[name]].append(name)
    links: set[tuple[str, str]] = set()
    chains: dict[tuple[str, str], list[str]] = {}
    for a, b in sorted(counts, key=lambda p: (order[p[0]], order[p[1]])):
        if b not in down[a]:
            continue
        chain = [a]
        for level in range(layer[a] - 1, layer[b], -1):
            lane = f"|{b}|{level}"
            if lane not in rows[level]:
                rows[level].append(lane)
            chain.append(lane)
        chain.append(b)
        chains[a, b] = chain
        links.update(pairwise(chain))
    above: dict[str, list[str]] = defaultdict(list)
    below: dict[str, list[str]] = defaultdict(list)
    for a, b in sorted(links):
        below[a].append(b)
        above[b].append(a)

    # Order each layer by the mean position of its neighbours, sweeping down
    # and up, and keep the order with the fewest crossings.
    def total(layout: list[list[str]]) -> int:
        return sum(_crossings(layout[i + 1], layout[i], links) for i in range(height - 1))

    best = [list(row) for row in rows]
    best_crossings = total(best)
    current = [list(row) for row in rows]
    for sweep in range(SWEEPS):
        levels = range(height - 2, -1, -1) if sweep % 2 == 0 else range(1, height)
        for level in levels:
            reference = current[level + 1] if sweep % 2 == 0 else current[level - 1]
            neighbours = above if sweep % 2 == 0 else below
            current[level] = _by_barycentre(current[level], reference, neighbours)
        crossings = total(current)
        if crossings < best_crossings:
            best, best_crossings = [list(row) for row in current], crossings
    rows = best

    # Widths, then x positions: each node pulled towards its neighbours, in order.
    ports: dict[str, int] = defaultdict(int)
    for a, b in links:
        ports[a] += 1
        ports[b] += 1

    def width(node: str) -> int:
        if node not in by_name:
            return 0
        text = max(len(node) * 8, len(f"{members[node]} modules") * 7)
        return max(text + 28, 10 * ports[node] + 20)

    def gap(left: str, right: str) -> int:
        lane = left not in by_name and right not in by_name
        return (width(left) + width(right)) // 2 + (LANE_GAP if lane else NODE_GAP)

    x: dict[str, float] = {}
    for row in rows:
        at = 0.0
        for i, node in enumerate(row):
            at += gap(row[i - 1], node) if i else 0
            x[node] = at
    for sweep in range(4 * SWEEPS):
        levels = range(height) if sweep % 2 == 0 else range(height - 1, -1, -1)
        for level in levels:
            row = rows[level]
            if not row:
                continue
            wanted = []
            for node in row:
                near = [x[n] for n in (*above[node], *below[node])]
                wanted.append(sum(near) / len(near) if near else x[node])
            left = list(wanted)
            for i in range(1, len(row)):
                left[i] = max(left[i], left[i - 1] + gap(row[i - 1], row[i]))
            right = list(wanted)
            for i in range(len(row) - 2, -1, -1):
                right[i] = min(right[i], right[i + 1] - gap(row[i], row[i + 1]))
            for i, node in enumerate(row):
                x[node] = (left[i] + right[i]) / 2
    lowest = min(x[n] - width(n) / 2 for row in rows for n in row)
    cx = {n: round(x[n] - lowest) + MARGIN for n in x}
    picture_width = max(cx[n] + (width(n) + 1) // 2 for n in cx) + MARGIN
    top = MARGIN + 8

    def y_top(level: int) -> int:
        return top + (height - 1 - level) * (BOX_HEIGHT + LAYER_GAP)

    legend, legend_width = _legend(MARGIN, y_top(0) + BOX_HEIGHT + 36)
    picture_width = max(picture_width, legend_width + 2 * MARGIN)
    picture_height = y_top(0) + BOX_HEIGHT + 36 + 3 * 26 + MARGIN - 10

    # Where each arrow leaves and enters a box: spread along its edge in the
    # order of the arrows' other ends (arrows down one trunk enter together).
    ends: dict[str, set[tuple[int, str]]] = defaultdict(set)
    for chain in chains.values():
        ends[chain[0]].add((cx[chain[1]], chain[1]))
        ends[chain[-1]].add((cx[chain[-2]], chain[-2]))
    port_x: dict[tuple[str, str], int] = {}
    for node, items in ends.items():
        w = width(node)
        for i, (_, other) in enumerate(sorted(items)):
            port_x[node, other] = cx[node] - w // 2 + (w * (i + 1)) // (len(items) + 1)

    out = [
        "<?xml version='1.0' encoding='UTF-8'?>",
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{picture_width}' "
        f"height='{picture_height}' viewBox='0 0 {picture_width} {picture_height}' "
        "role='img' aria-labelledby='title'>",
        "<title id='title'>The rooms of runstore and the imports between them "
        "(drawn by docs/layout.py)</title>",
        "<defs>",
        "<marker id='head' viewBox='0 0 10 10' refX='10' refY='5' markerWidth='9' "
        "markerHeight='9' markerUnits='userSpaceOnUse' orient='auto'>"
        f"<path d='M0,0 L10,5 L0,10 z' fill='{HEAD}'/></marker>",
        "<marker id='wrong' viewBox='0 0 10 10' refX='10' refY='5' markerWidth='10' "
        "markerHeight='10' markerUnits='userSpaceOnUse' orient='auto'>"
        f"<path d='M0,0 L10,5 L0,10 z' fill='{WRONG}'/></marker>",
        "</defs>",
        f"<rect width='{picture_width}' height='{picture_height}' fill='#ffffff'/>",
    ]

    def arrow(a: str, b: str, d: str) -> None:
        count = counts[a, b]
        tenths, meaning = _weight(count)
        is_wrong = b not in allowed[a]
        look = (
            f"stroke='{WRONG}' stroke-dasharray='6 4' marker-end='url(#wrong)'"
            if is_wrong
            else f"stroke='{ARROW}' marker-end='url(#head)'"
        )
        verdict = ", not allowed" if is_wrong else ""
        out.append(
            f"<path d='{d}' fill='none' stroke-width='{_px(tenths)}' {look}>"
            f"<title>{_escape(a)} imports {_escape(b)} ({meaning}{verdict})</title></path>"
        )

    for (a, b), chain in chains.items():
        points = [(port_x[a, chain[1]], y_top(layer[a]) + BOX_HEIGHT)]
        for level, lane in zip(range(layer[a] - 1, layer[b], -1), chain[1:-1], strict=False):
            points += [(cx[lane], y_top(level)), (cx[lane], y_top(level) + BOX_HEIGHT)]
        points.append((port_x[b, chain[-2]], y_top(layer[b])))
        d = [f"M{points[0][0]},{points[0][1]}"]
        for i in range(0, len(points) - 1, 2):
            (x0, y0), (x1, y1) = points[i], points[i + 1]
            middle = (y0 + y1) // 2
            d.append(f"C{x0},{middle} {x1},{middle} {x1},{y1}")
            if i + 2 < len(points):
                d.append(f"L{points[i + 2][0]},{points[i + 2][1]}")
        arrow(a, b, " ".join(d))
    # An arrow up the table (always a broken rule): from the importer's top
    # edge around to the imported room's bottom edge.
    for a, b in sorted(counts, key=lambda p: (order[p[0]], order[p[1]])):
        if b in down[a]:
            continue
        x0, y0 = cx[a] + width(a) // 4, y_top(layer[a])
        x1, y1 = cx[b] - width(b) // 4, y_top(layer[b]) + BOX_HEIGHT
        lift = max(40, (y0 - y1) // 2)
        arrow(a, b, f"M{x0},{y0} C{x0},{y0 - lift} {x1},{y1 + lift} {x1},{y1}")

    for name in names:
        room = by_name[name]
        fill, stroke = COLOURS[room.group]
        w, box_left, y = width(name), cx[name] - width(name) // 2, y_top(layer[name])
        out.append(
            f"<g><title>{_escape(name)}: {_escape(room.belongs)}</title>"
            f"<rect x='{box_left}' y='{y}' width='{w}' height='{BOX_HEIGHT}' rx='6' "
            f"fill='{fill}' stroke='{stroke}' stroke-width='1.5'/>"
            f"<text x='{cx[name]}' y='{y + 19}' text-anchor='middle' {FONT} font-size='14' "
            f"font-weight='bold' fill='#1c1c1c'>{_escape(name)}</text>"
            f"<text x='{cx[name]}' y='{y + 35}' text-anchor='middle' {FONT} font-size='11' "
            f"fill='#444'>{members[name]} module{'s' if members[name] != 1 else ''}</text></g>"
        )

    out += legend
    out.append("</svg>")
    return "\n".join(out) + "\n"


# -- All of it ---------------------------------------------------------------


def problems(graph: Graph, root: Path = ROOT, rooms: Sequence[Room] = ROOMS) -> list[str]:
    """Every broken rule but a stale picture, in the order the rules are listed above."""
    page = root / PAGE
    return [
        *cycle_problems(graph),
        *table_problems(graph, rooms),
        *membership_problems(graph, rooms),
        *arrow_problems(graph, rooms),
        *room_cycle_problems(graph, rooms),
        *docstring_problems(root),
        *(page_problems(page.read_text(encoding="utf-8"), rooms) if page.is_file() else []),
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--check",
        action="store_true",
        help="draw nothing; exit 1 if a rule is broken or docs/layout.svg is stale",
    )
    parser.add_argument("--root", type=Path, default=ROOT, help="the tree to read (default: ours)")
    args = parser.parse_args(argv)
    graph = build(args.root)
    found = problems(graph, args.root)
    picture = args.root / PICTURE
    drawn = draw(graph)
    if args.check:
        if not picture.is_file() or picture.read_text(encoding="utf-8") != drawn:
            found.append(
                f"{PICTURE} is not the picture of the code today: run python docs/layout.py"
            )
    else:
        picture.parent.mkdir(parents=True, exist_ok=True)
        with picture.open("w", encoding="utf-8", newline="\n") as file:
            file.write(drawn)
        print(f"wrote {PICTURE}")
    for problem in found:
        print(problem, file=sys.stderr)
    if found:
        print(f"{len(found)} broken rule(s)", file=sys.stderr)
    return 1 if found and args.check else 0


if __name__ == "__main__":
    raise SystemExit(main())
