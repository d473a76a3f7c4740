"""The operator command tests' shared database and command runner
(``tests/cli/test_cli_ops.py``, ``tests/cli/test_cli_ops_listing.py``)."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest

import runstore
from runstore import ManualClock, OwnerId, RunSnapshot
from runstore.attempts import Attempt, AttemptStore
from runstore.cli import main

from .. import _postgres

OWNER = OwnerId("host-a", 4102, "c0ffee")
PENDING = RunSnapshot("pending", None, None)
T0 = 1_700_000_000_000
SECRET = "hunter2-7f3a9c"


@attrs.frozen
class Db:
    """A populated database: its target and a fingerprint of everything in it."""

    backend: str
    target: str
    fingerprint: Callable[[], object]


def populate(store: Any, clock: ManualClock) -> None:
    """``working`` running (attempt with a secret checkpoint, cancellation
    requested), ``queued`` pending with a claim, ``idle`` pending, ``old``
    completed at T0, a lineage of two settled rounds."""
    store.create("working", json.dumps({"password": SECRET}))
    store.create("queued", "{}")
    store.create("idle", "{}")
    store.create("old", "{}")
    store.create("round-1", "{}", lineage_id="L", round_ordinal=1)
    store.create("round-2", "{}", parent_run_id="round-1", lineage_id="L", round_ordinal=2)
    assert store.claim_and_own("working", PENDING, OWNER, T0) == runstore.Activated()
    AttemptStore(store).put(
        Attempt("working", "step-1", 1, "running", T0, checkpoint={"token": SECRET}, meta={}),
        OWNER,
    )
    assert store.request_cancel("working", T0) == runstore.CancelRequested(T0)
    assert type(store.claim("queued", PENDING, OWNER, T0)).__name__ == "Claimed"
    for rid in ("old", "round-1", "round-2"):
        assert store.claim_and_own(rid, PENDING, OWNER, T0) == runstore.Activated()
        assert store.transition_owned(rid, OWNER, "completed") == runstore.Transitioned()


def sqlite_look(path: Path) -> Callable[[], object]:
    def look() -> object:
        return [
            (name, (path.parent / name).read_bytes(), (path.parent / name).stat().st_mode)
            for name in sorted(os.listdir(path.parent))
        ]

    return look


def _postgres_look(url: str) -> Callable[[], object]:
    psycopg = pytest.importorskip("psycopg")

    def look() -> object:
        digest = hashlib.sha256()
        with psycopg.connect(url, autocommit=True) as connection:
            for (table,) in connection.execute(
                "SELECT table_name FROM information_schema.tables "
                "WHERE table_schema = current_schema() ORDER BY table_name"
            ).fetchall():
                rows = connection.execute(
                    f'SELECT t::text FROM "{table}" AS t ORDER BY t::text COLLATE "C"'
                ).fetchall()
                digest.update(repr((table, rows)).encode())
        return digest.hexdigest()

    return look


def make_db(backend: str, tmp_path: Path) -> Db:
    """A populated database on ``backend`` (``sqlite-file`` or ``postgres``)."""
    clock = ManualClock(T0)
    if backend == "sqlite-file":
        folder = tmp_path / "db"
        folder.mkdir()
        path = folder / "runs.db"
        target, look = str(path), sqlite_look(path)
    else:
        pytest.importorskip("runstore.postgres")
        target = _postgres.database_url()
        look = _postgres_look(target)
    with runstore.open(target, clock=clock) as store:
        populate(store, clock)
    return Db(backend, target, look)


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def cli_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any]:
    code, out, err = cli(capsys, *argv, "--json")
    assert err == ""
    return code, json.loads(out)


NOW = str(T0 + 75_000)  # 75 s after the last heartbeat: stale for 45 s
