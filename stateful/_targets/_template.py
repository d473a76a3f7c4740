"""The migrated, empty SQLite database the file targets start from.

A file-backed example starts from a copy of this template, migrated once per
process, not from a fresh migration (``template_database``).

May import: ``runstore``.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
import threading
from pathlib import Path

from runstore._clock import ManualClock

_template_lock = threading.Lock()
_template: Path | None = None


def template_database() -> Path:
    """A migrated, empty database file, made once per process."""
    global _template
    with _template_lock:
        if _template is None or not _template.exists():
            import runstore

            folder = Path(tempfile.mkdtemp(prefix="runstore-template-"))
            atexit.register(shutil.rmtree, folder, True)
            path = folder / "template.db"
            runstore.open(path, clock=ManualClock(0)).close()
            _template = path
        return _template
