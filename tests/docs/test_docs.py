"""The docs run: every ```python block of README.md and docs/**/*.md is executed.

One test per page. A page's blocks run in order in one fresh namespace, so a
later block may use what an earlier one built, as a reader would. Blocks fenced
as anything else (```text, ```console, ```sql, ...) are prose and are skipped.
Pages added later are picked up at collection time.

Examples run on the real ``runstore.open``: nothing is substituted. A page
marked ``<!-- examples: fresh process -->`` runs in a child interpreter of its
own: its examples set process-wide state (OpenTelemetry's global providers,
which a process sets once) that must not reach the other tests.
"""

from __future__ import annotations

import re
import subprocess
import sys
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

import runstore
from runstore import _errors, _outcomes

from .. import _postgres

ROOT = Path(__file__).resolve().parents[2]
FRESH_PROCESS = "<!-- examples: fresh process -->"
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`\n]*)$")


@attrs.frozen
class Block:
    """One fenced code block: its language word, first line number and source."""

    language: str
    line: int
    source: str


def fenced_blocks(text: str) -> Iterator[Block]:
    """Every fenced block of a Markdown text, in order, with its indentation removed."""
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        indent = len(opening["indent"])
        fence = opening["fence"]
        words = opening["info"].split()
        language = words[0].lower() if words else ""
        body: list[str] = []
        index += 1
        start = index + 1  # 1-based number of the block's first line
        while index < len(lines):
            closing = FENCE.match(lines[index])
            if (
                closing is not None
                and closing["fence"][0] == fence[0]
                and len(closing["fence"]) >= len(fence)
                and not closing["info"].strip()
            ):
                break
            line = lines[index]
            body.append(line[indent:] if line[:indent].strip() == "" else line.lstrip())
            index += 1
        index += 1  # past the closing fence (or the end of an unclosed block)
        yield Block(language, start, "\n".join(body) + "\n")


def python_blocks(text: str) -> list[Block]:
    return [block for block in fenced_blocks(text) if block.language == "python"]


def documentation_pages(root: Path = ROOT) -> list[Path]:
    """README.md, then every Markdown page under docs/, at any depth, sorted."""
    pages = sorted((root / "docs").rglob("*.md"))
    readme = root / "README.md"
    return ([readme] if readme.exists() else []) + pages


def _close_stores(namespace: dict[str, Any]) -> None:
    """Close any store a page left open, so an unfinished example cannot leak one."""
    for value in list(namespace.values()):
        if isinstance(value, runstore.RunStore):
            value.close()


PAGES = [
    pytest.param(page, id=page.relative_to(ROOT).as_posix())
    for page in documentation_pages()
    if python_blocks(page.read_text(encoding="utf-8"))
]


@pytest.mark.parametrize("page", PAGES)
def test_page_examples_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every python block of the page runs, in order, in one namespace. A page
    whose examples read ``DATABASE_URL`` gets a fresh PostgreSQL database there
    (skipped without a server, failed under ``CI=true``)."""
    monkeypatch.chdir(tmp_path)  # an example that writes a file writes it here
    text = page.read_text(encoding="utf-8")
    if "DATABASE_URL" in text:
        monkeypatch.setenv("DATABASE_URL", _postgres.database_url())
    if FRESH_PROCESS in text:
        runner = f"import sys; sys.path.insert(0, {str(ROOT)!r}); "
        runner += "from tests.docs.test_docs import run_page; run_page(sys.argv[1])"
        done = subprocess.run(
            [sys.executable, "-c", runner, str(page)],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-4000:]
        return
    run_page(page)


POSTGRES_PAGES = [
    param for param in PAGES if "DATABASE_URL" in param.values[0].read_text(encoding="utf-8")
]


@pytest.mark.parametrize("page", POSTGRES_PAGES)
def test_postgres_examples_run_twice_on_one_database_and_date_runs_now(
    page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader runs a PostgreSQL page's examples twice against one database, as
    a program runs again: the second run collides with nothing the first left
    (its run ids are new each time), and every run either created is dated by
    the wall clock, not 1970 (a ``ManualClock(0)`` against a real server)."""
    import psycopg

    monkeypatch.chdir(tmp_path)
    url = _postgres.database_url()
    monkeypatch.setenv("DATABASE_URL", url)
    started_ms = runstore.SystemClock().now_ms()
    run_page(page)
    run_page(page)
    with psycopg.connect(url) as connection:
        schemas = [
            name
            for (name,) in connection.execute(
                "SELECT table_schema FROM information_schema.tables"
                " WHERE table_name = 'flows_runs' ORDER BY 1"
            )
        ]
    created = []
    for schema in schemas:
        with runstore.open(url, schema=schema, read_only=True) as store:
            page_of_runs = store.list_runs(limit=1000)
            assert page_of_runs.next is None
            created += [(schema, row.run_id, row.created_at_ms) for row in page_of_runs.runs]
    assert created, "the page's examples created no run"
    too_old = [run for run in created if run[2] < started_ms - 60_000]
    assert not too_old, too_old


def run_page(page: str | Path) -> None:
    """Run a page's python blocks in order in one fresh namespace."""
    page = Path(page)
    namespace: dict[str, Any] = {"__name__": "__docs__"}
    relative = page.relative_to(ROOT).as_posix()
    try:
        for block in python_blocks(page.read_text(encoding="utf-8")):
            # Pad so tracebacks point at the page's own line numbers.
            code = compile("\n" * (block.line - 1) + block.source, relative, "exec")
            exec(code, namespace)
    finally:
        _close_stores(namespace)


def test_the_collector_finds_python_blocks_only() -> None:
    """Only ```python blocks are examples; indented fences are dedented; other
    fences, longer fences and unclosed ones are handled."""
    text = "\n".join(
        [
            "# Title",
            "```python",
            "a = 1",
            "```",
            "```text",
            "not python",
            "```",
            "- item",
            "",
            "  ```python",
            "  b = a + 1",
            "  ```",
            "````markdown",
            "```python",
            "nested = True",
            "```",
            "````",
            "~~~python title='x'",
            "c = b",
            "~~~",
            "```console",
            "$ runstore demo",
            "```",
            "```sql",
            "SELECT 1;",
            "```",
        ]
    )
    blocks = python_blocks(text)
    assert [b.source for b in blocks] == ["a = 1\n", "b = a + 1\n", "c = b\n"]
    assert [b.line for b in blocks] == [3, 11, 19]


def test_pages_are_found_at_any_depth(tmp_path: Path) -> None:
    """New pages (docs/guides/..., deeper folders) are picked up without registration."""
    for name in ["README.md", "docs/index.md", "docs/guides/a.md", "docs/x/y/z.md"]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("```python\npass\n```\n", encoding="utf-8")
    found = [p.relative_to(tmp_path).as_posix() for p in documentation_pages(tmp_path)]
    assert found == ["README.md", "docs/guides/a.md", "docs/index.md", "docs/x/y/z.md"]


OPERATION_OUTCOMES = {
    "claim": runstore.ClaimOutcome,
    "claim_and_own": runstore.ClaimAndOwnOutcome,
    "steal": runstore.StealOutcome,
    "activate": runstore.ActivateOutcome,
    "abandon_claim": runstore.AbandonClaimOutcome,
    "recover_claim": runstore.RecoverClaimOutcome,
    "heartbeat": runstore.HeartbeatOutcome,
    "reconfirm": runstore.HeartbeatOutcome,
    "transition_owned": runstore.TransitionOutcome,
    "request_cancel": runstore.RequestCancelOutcome,
    "request_cancel_lineage": runstore.RequestCancelOutcome,
}


def _table_rows(text: str) -> list[list[str]]:
    return [
        [cell.strip() for cell in line.strip().strip("|").split("|")]
        for line in text.splitlines()
        if line.lstrip().startswith("|")
    ]


def test_troubleshooting_lists_every_outcome_of_every_operation() -> None:
    """docs/troubleshooting.md has a row for each (operation, outcome) pair."""
    rows = _table_rows((ROOT / "docs" / "troubleshooting.md").read_text(encoding="utf-8"))
    missing = []
    for operation, alias in OPERATION_OUTCOMES.items():
        for outcome in typing.get_args(alias):
            name = outcome.__name__
            if not any(
                len(row) > 1
                and f"`{operation}`" in row[0]
                and (f"`{name}`" in row[1] or f"`{name}(" in row[1])
                for row in rows
            ):
                missing.append(f"{operation} -> {name}")
    assert not missing, missing
    documented = {
        name
        for name, value in vars(_outcomes).items()
        if isinstance(value, type) and attrs.has(value) and value.__module__ == _outcomes.__name__
    }
    listed = {o.__name__ for alias in OPERATION_OUTCOMES.values() for o in typing.get_args(alias)}
    assert documented == listed


def test_troubleshooting_lists_every_error_code() -> None:
    """docs/troubleshooting.md has a row for each error code and for opening errors."""
    rows = _table_rows((ROOT / "docs" / "troubleshooting.md").read_text(encoding="utf-8"))
    first_cells = {row[0] for row in rows}
    for code in _errors.ERROR_CODES:
        assert f"`{code}`" in first_cells, code
    assert any("`UnsupportedDatabaseError`" in row[1] for row in rows if len(row) > 1)
