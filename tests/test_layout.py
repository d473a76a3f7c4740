"""The house keeps its layout (docs/layout.md): no import cycle between
modules, every module in exactly one room, only the room arrows the table in
docs/layout.py allows, no cycle between rooms, a docstring in every package
saying what it may import, a page section for each room, and a picture that
is the code's own.

docs/layout.py reads the source and imports none of it; it is loaded here by
path. The checker is also run on copies of the tree with a rule broken on
purpose, to show that it fails and names what broke."""

from __future__ import annotations

import ast
import importlib.util
import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load_layout() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_docs_layout", ROOT / "docs" / "layout.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


layout = _load_layout()


@pytest.fixture(scope="module")
def graph():
    """The import graph of the working tree."""
    return layout.build(ROOT)


def _joined(problems: list[str]) -> str:
    return "\n".join(problems)


def test_no_module_takes_part_in_an_import_cycle(graph) -> None:
    """No module imports, however indirectly, a module that imports it:
    each cycle is named as a path with the file and line of every import."""
    problems = layout.cycle_problems(graph)
    assert not problems, _joined(problems)


def test_every_module_is_in_exactly_one_room(graph) -> None:
    """Each module of runstore, runstore.model and runstore.stateful belongs to
    one room of the table, and the table names only modules that exist."""
    problems = layout.table_problems(graph) + layout.membership_problems(graph)
    assert not problems, _joined(problems)
    assert len(graph.files) > 100  # the three packages were found


def test_rooms_import_only_the_rooms_they_may(graph) -> None:
    """Every import from one room into another is one the table allows."""
    problems = layout.arrow_problems(graph)
    assert not problems, _joined(problems)


def test_the_rooms_imports_form_no_cycle(graph) -> None:
    """The rooms, joined by the imports the code makes, form no cycle; and
    the table lists each room above every room it may import."""
    problems = layout.room_cycle_problems(graph) + layout.table_problems(graph)
    assert not problems, _joined(problems)


def test_the_committed_picture_is_the_code_s_own(graph) -> None:
    """docs/layout.svg is what docs/layout.py draws from the code today."""
    drawn = layout.draw(graph)
    committed = (ROOT / layout.PICTURE).read_text(encoding="utf-8")
    assert committed == drawn, "docs/layout.svg is stale: run python docs/layout.py"


def test_the_picture_is_self_contained_and_the_same_every_time(graph) -> None:
    """Drawing twice gives the same bytes, and the picture fetches nothing and
    runs nothing: no script, no link out, no web font."""
    drawn = layout.draw(graph)
    assert layout.draw(graph) == drawn
    assert drawn.startswith("<?xml")
    assert drawn.endswith("</svg>\n")
    for forbidden in ("<script", "href", "@import", "@font-face", "<image", "<foreignObject"):
        assert forbidden not in drawn, forbidden
    assert drawn.count("http") == 1  # the SVG namespace, which names and fetches nothing
    for room in layout.ROOMS:
        assert f">{room.name}</text>" in drawn, room.name


def test_every_package_says_what_it_may_import() -> None:
    """Each package's __init__.py, under runstore/, model/ and stateful/, opens
    with a docstring that says what belongs there and what it may import."""
    problems = layout.docstring_problems(ROOT)
    assert not problems, _joined(problems)
    packages = [p for p in layout.find_modules(ROOT).values() if p.name == "__init__.py"]
    assert len(packages) >= 17
    for path in packages:
        docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
        assert docstring, path
        assert len(docstring.split(".")[0]) > 10, path  # a sentence, not a word


def test_the_page_has_a_section_for_each_room_and_no_other() -> None:
    """docs/layout.md shows the picture, and has a section for every room of
    the table, with the room's sentence and the rooms it may import, and none
    for a room the table lacks."""
    page = (ROOT / layout.PAGE).read_text(encoding="utf-8")
    assert "](layout.svg)" in page
    assert "python docs/layout.py" in page
    problems = layout.page_problems(page)
    assert not problems, _joined(problems)
    assert set(layout.page_sections(page)) == {room.name for room in layout.ROOMS}


def test_page_check_names_a_missing_and_an_unknown_room() -> None:
    """A page that lacks a room's section, or has one for a room the table
    lacks, fails the page check with both named."""
    page = (ROOT / layout.PAGE).read_text(encoding="utf-8")
    broken = page.replace("### `ownership`", "### `leases`")
    problems = _joined(layout.page_problems(broken))
    assert "no section for room ownership" in problems
    assert "section leases names no room" in problems


# -- The builder itself ------------------------------------------------------


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def test_every_kind_of_import_is_an_edge(tmp_path: Path) -> None:
    """Imports count at any depth and in any form: relative ones resolved,
    ``from pkg import name`` to the module ``pkg.name`` when there is one and
    to ``pkg`` when ``name`` is not a module, a dotted ``import`` to the module
    it names, and a literal ``importlib.import_module``."""
    _write(
        tmp_path,
        {
            "src/__init__.py": '"""Top."""\nfrom . import a\nfrom .a import thing\n',
            "src/a.py": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n"
                "    from pkg.sub import deep\n"
                "try:\n"
                "    import pkg.b\n"
                "except ImportError:\n"
                "    pass\n"
            ),
            "src/b.py": "def f():\n    from pkg import VALUE\n",
            "src/sub/__init__.py": "from .. import b\nfrom .deep import name\n",
            "src/sub/deep.py": (
                "import importlib\n\n\nclass C:\n"
                "    def m(self):\n        return importlib.import_module('pkg.a')\n"
            ),
        },
    )
    graph = layout.build(tmp_path, (("pkg", "src"),))
    assert set(graph.files) == {"pkg", "pkg.a", "pkg.b", "pkg.sub", "pkg.sub.deep"}
    assert set(graph.edges) == {
        ("pkg", "pkg.a"),  # from . import a; from .a import thing
        ("pkg.a", "pkg.sub.deep"),  # under TYPE_CHECKING
        ("pkg.a", "pkg.b"),  # in a try block
        ("pkg.b", "pkg"),  # in a function; VALUE is no module
        ("pkg.sub", "pkg.b"),
        ("pkg.sub", "pkg.sub.deep"),
        ("pkg.sub.deep", "pkg.a"),  # importlib.import_module('pkg.a'), in a method
    }
    assert [str(s) for s in graph.edges["pkg", "pkg.a"]] == [
        "src/__init__.py:2",
        "src/__init__.py:3",
    ]
    # One tangle of four modules, each on a cycle: the shortest cycle first.
    assert layout.tangles(graph.files, graph.edges) == [
        [["pkg.a", "pkg.sub.deep", "pkg.a"], ["pkg", "pkg.a", "pkg.b", "pkg"]]
    ]


# -- The checker fails when a rule is broken ---------------------------------


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the three source folders (and the page), to break on purpose."""
    for _, folder in layout.SOURCES:
        shutil.copytree(
            ROOT / folder, tmp_path / folder, ignore=shutil.ignore_patterns("__pycache__")
        )
    (tmp_path / "docs").mkdir()
    shutil.copy(ROOT / layout.PAGE, tmp_path / layout.PAGE)
    return tmp_path


def _plant(path: Path, code: str) -> int:
    """Append ``code`` to a module; the line it starts on."""
    text = path.read_text(encoding="utf-8")
    if not text.endswith("\n"):
        text += "\n"
    path.write_text(text + "\n\n" + code, encoding="utf-8")
    return text.count("\n") + 3


def test_a_cycle_closed_inside_a_function_is_found_and_named(tree: Path) -> None:
    """runstore.ownership._core imports runstore._values at its top; an import
    back inside a function of _values closes a cycle, which the checker names
    with both import sites, and the command-line check fails on."""
    values = tree / "runstore" / "_values.py"
    line = _plant(values, "def f():\n    from runstore.ownership import _core\n") + 1
    graph = layout.build(tree)
    assert ("runstore.ownership._core", "runstore._values") in graph.edges
    back = layout.Site("runstore/_values.py", line)
    assert graph.edges["runstore._values", "runstore.ownership._core"] == [back]

    # One message for the tangle, however many cycles it holds (the message
    # is found by the planted import, whatever else the tree holds).
    problems = [p for p in layout.cycle_problems(graph) if "runstore/_values.py" in p]
    assert len(problems) == 1, _joined(layout.cycle_problems(graph))
    lines = problems[0].splitlines()
    assert (
        lines[0] == "import cycle: runstore._values -> runstore.ownership._core -> runstore._values"
    )
    assert (
        lines[1]
        == f"    runstore._values -> runstore.ownership._core at runstore/_values.py:{line}"
    )
    assert lines[2].startswith(
        "    runstore.ownership._core -> runstore._values at runstore/ownership/_core.py:"
    )
    # core may not import ownership either: the same import is a wrong-way arrow.
    assert "room core may not import room ownership" in _joined(layout.arrow_problems(graph))


def test_a_wrong_way_import_under_type_checking_is_found(tree: Path, capsys) -> None:
    """An import only a type checker runs still counts: ownership reaching
    into the SQLite backend under ``if TYPE_CHECKING:`` is an arrow the table
    does not allow, named with its file and line, though it closes no cycle."""
    liveness = tree / "runstore" / "ownership" / "_liveness.py"
    line = _plant(
        liveness,
        "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n"
        "    from runstore.sqlite import SqliteRunStore\n",
    )
    # The command-line check, on the copy: one reading of the tree.
    assert layout.main(["--check", "--root", str(tree)]) == 1
    printed = capsys.readouterr().err
    assert (
        "room ownership may not import room sqlite:\n"
        "    runstore.ownership._liveness -> runstore.sqlite at "
        f"runstore/ownership/_liveness.py:{line + 3}\n"
    ) in printed
    cycles_printed = printed.partition("room ")[0]  # import cycles are printed first
    assert "_liveness.py" not in cycles_printed  # the planted import closes none
    assert "docs/layout.svg is not the picture of the code today" in printed
