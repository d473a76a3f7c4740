"""The opening check (``runstore.stateful._opening``) passes on the shipped
``runstore.open`` and rejects each deliberately broken open with the check
named for it.

A broken open is not a strategy or a ``(clock, path)`` store factory, so it
cannot live in ``tests/zoo``: each test plants one bug with ``monkeypatch``
(undone when the test ends) and runs the machine under its default budget
without shrinking, as ``tests/test_zoo.py`` does.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

import runstore
from runstore import UnsupportedDatabaseError
from runstore.sqlite import _migrations


def test_migrate_false_refuses_an_older_rollback_mode_file_as_it_is(tmp_path: Path) -> None:
    """The refusal comes from the read-only look: the file is not switched
    to WAL (a write to its header) before it is refused. The opening check
    found this (``OpenLeftTrace``)."""
    path = tmp_path / "old.db"
    connection = sqlite3.connect(path, isolation_level=None)
    _migrations.apply(connection, 3)
    connection.close()
    before = path.read_bytes()
    with pytest.raises(UnsupportedDatabaseError) as caught:
        runstore.open(path, migrate=False)
    assert caught.value.cause["stage"] == "needs-migration"
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["old.db"]
