"""Install commands that work: runstore is on no package index.

``pip install 'runstore[postgres]'`` finds nothing, so no page, docstring or
message may tell a reader to run it. The docs show ``python -m pip install -e
'.[EXTRA]'`` in the checkout, or a wheel built there; a message that says an
extra is missing names the command for the installation at hand
(``runstore._version.install_hint``).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from runstore import _version

ROOT = Path(__file__).resolve().parents[2]
#: A pip command that installs runstore by name from an index, with or without extras.
FROM_AN_INDEX = re.compile(r"pip install[ \t]+(?:-U[ \t]+)?['\"]?runstore(?:\[|['\"\s]|$)")


def _read_by_users() -> list[Path]:
    """README, the docs pages, and the source of every package and benchmark."""
    files = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    for folder in ("runstore", "model", "stateful", "benchmarks", "mutation"):
        files += sorted((ROOT / folder).rglob("*.py"))
    return files


def test_nothing_tells_a_reader_to_install_runstore_from_an_index() -> None:
    """No page, docstring or message says ``pip install 'runstore[...]'``."""
    found = []
    for path in _read_by_users():
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if FROM_AN_INDEX.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, "\n".join(found)


@pytest.mark.parametrize(
    "line",
    [
        "pip install 'runstore[postgres]'",
        'pip install "runstore[otel]"',
        "$ pip install runstore",
        "python -m pip install -U runstore[conformance]",
    ],
)
def test_the_pattern_catches_an_index_install(line: str) -> None:
    """The check above is not vacuous: each of these lines is caught."""
    assert FROM_AN_INDEX.search(line)


@pytest.mark.parametrize(
    "line",
    [
        "python -m pip install -e '.[postgres]'",
        "python -m pip install 'dist/runstore-0.1.0-py3-none-any.whl[postgres]'",
        "python -m pip install -e '/src/runstore[otel]'",
    ],
)
def test_the_pattern_lets_the_working_commands_through(line: str) -> None:
    """The commands the docs show are not mistaken for an index install."""
    assert not FROM_AN_INDEX.search(line)


def test_the_hint_of_an_editable_install_names_its_checkout() -> None:
    """Installed editable (as the tests are), the hint is ``pip install -e`` of this
    checkout with the extra, quoted for a shell."""
    hint = _version.install_hint("postgres")
    assert hint.startswith("python -m pip install -e ")
    assert f"{ROOT}[postgres]" in hint


def test_the_hint_of_any_other_install_names_the_wheel(monkeypatch: pytest.MonkeyPatch) -> None:
    """Away from a checkout (a wheel in site-packages), the hint names the wheel of
    this version with the extra."""
    monkeypatch.setattr(_version, "_from_source_tree", lambda: None)
    hint = _version.install_hint("otel")
    assert f"runstore-{_version.__version__}-py3-none-any.whl[otel]" in hint
    assert "-e" not in hint.split()


def test_a_postgres_url_without_the_driver_says_how_to_install_it(tmp_path: Path) -> None:
    """``runstore.open`` on a PostgreSQL URL without psycopg is refused with the
    command that installs the extra here (stage ``driver``)."""
    code = (
        "import sys; sys.modules['psycopg'] = None\n"
        "import runstore\n"
        "from runstore._version import install_hint\n"
        "try:\n"
        "    runstore.open('postgresql://app@localhost/jobs')\n"
        "except runstore.UnsupportedDatabaseError as error:\n"
        "    assert error.cause['stage'] == 'driver', error.cause\n"
        "    assert install_hint('postgres') in str(error), str(error)\n"
        "    print('refused')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert (done.returncode, done.stdout) == (0, "refused\n"), done.stderr
