"""The docs build into a site: ``mkdocs build --strict`` succeeds with no
warning, every page of docs/ is in the nav and built, every public package has
a reference page, and each reference page documents every name of its
package's ``__all__`` under its own anchor."""

from __future__ import annotations

import html
import importlib
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.docs.test_docs import python_blocks

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
DIRECTIVE = re.compile(r"^::: (?P<identifier>[\w.]+)[ \t]*$", re.MULTILINE)

pytestmark = pytest.mark.slow  # a full build: several seconds on a loaded machine


def _public_packages() -> set[str]:
    """The installed packages none of whose name parts is private."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    packages = config["tool"]["setuptools"]["packages"]
    return {name for name in packages if not any(p.startswith("_") for p in name.split("."))}


def _directives() -> dict[str, Path]:
    """Each ``::: identifier`` of the reference pages, with its page."""
    found: dict[str, Path] = {}
    for page in sorted((DOCS / "reference").glob("*.md")):
        for match in DIRECTIVE.finditer(page.read_text(encoding="utf-8")):
            found[match["identifier"]] = page
    return found


def _built_page(site: Path, page: Path) -> Path:
    """Where mkdocs (directory URLs) writes a docs/ page."""
    relative = page.relative_to(DOCS).with_suffix("")
    if relative.name == "index":
        return site / relative.parent / "index.html"
    return site / relative / "index.html"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built once with warnings as errors."""
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-d", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    # --quiet leaves warnings and errors only; a strict build may still print
    # one a plugin logs without counting it.
    assert "WARNING" not in done.stderr, done.stderr
    assert "ERROR" not in done.stderr, done.stderr
    return out


def test_every_page_is_built(site: Path) -> None:
    """Each Markdown page of docs/ became an HTML page (the strict build also
    refuses a page left out of the nav, a broken link or a missing anchor)."""
    pages = sorted(DOCS.rglob("*.md"))
    assert pages
    missing = [p.relative_to(DOCS).as_posix() for p in pages if not _built_page(site, p).is_file()]
    assert not missing, missing


def test_every_public_package_has_a_reference_page() -> None:
    """A ``::: package`` directive exists for each public package, and only those."""
    assert set(_directives()) == _public_packages()


def test_reference_pages_document_every_exported_name(site: Path) -> None:
    """Each reference page has an anchor for ``package.name`` for every name
    in the package's ``__all__``, and for a method of a class (a rendered
    member, not only the heading)."""
    missing = []
    for identifier, page in _directives().items():
        built = _built_page(site, page).read_text(encoding="utf-8")
        anchors = set(re.findall(r'\bid="([^"]+)"', built))
        module = importlib.import_module(identifier)
        missing += [
            f"{identifier}.{name}"
            for name in module.__all__
            if f"{identifier}.{name}" not in anchors
        ]
    assert not missing, missing
    runstore_page = _built_page(site, DOCS / "reference" / "runstore.md").read_text("utf-8")
    assert 'id="runstore.RunStore.claim"' in runstore_page
    text = html.unescape(re.sub(r"<[^>]+>", "", runstore_page))
    assert "claim(run_id: str, expected: RunSnapshot | RunRow" in text  # annotated signature
    assert "Reserve the run run_id for claimant while it still matches" in text  # its docstring


def test_reference_pages_hold_no_examples_the_docs_run_skips() -> None:
    """The ``:::`` directives are not code fences: the docs run (tests/docs/test_docs.py)
    finds no block in them, so a reference page that gains a python example
    is run like any other page."""
    for page in (DOCS / "reference").glob("*.md"):
        for block in python_blocks(page.read_text(encoding="utf-8")):
            assert ":::" not in block.source, page
    assert python_blocks("::: runstore\n    options:\n      show_source: false\n") == []


def test_the_docstring_walk_sees_what_the_reference_shows(site: Path) -> None:
    """tests/docs/test_api_docstrings.py walks the entries the reference shows
    without building the site; the built pages have exactly those headings, so
    what that test counts is what a reader sees."""
    from tests.docs import test_api_docstrings as walk

    collection = walk.load_tree(ROOT, "runstore", walk._layout_extension())
    walked = set(walk.reference_entries(collection, walk.reference_identifiers()))
    built = set()
    for page in (DOCS / "reference").glob("*.md"):
        text = _built_page(site, page).read_text(encoding="utf-8")
        built |= set(re.findall(r'<h\d id="([^"]+)" class="doc doc-heading"', text))
    assert walked == built, (sorted(walked - built)[:20], sorted(built - walked)[:20])
