"""``check``: is the database sound? (read-only)"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from ... import _open
from ..._errors import RunStoreError
from ._common import FOUND, OK, Result, cannot_open, migration_names, step_json


def check(args: argparse.Namespace) -> Result:
    checks: list[dict[str, Any]] = []

    def record(name: str, ok: bool, detail: str, **extra: Any) -> None:
        checks.append({"name": name, "ok": ok, "detail": detail, **extra})

    try:
        store = _open.open(args.db, read_only=True)
    except RunStoreError as error:
        if error.cause.get("stage") != "needs-migration":
            raise cannot_open(args.db, error) from None
        pending = list(error.cause["pending_migrations"])
        record(
            "schema",
            False,
            f"{len(pending)} migration(s) pending; the other checks need a migrated "
            "schema ('runstore migrate DB')",
            pending=step_json(pending),
        )
        return _check_result(args, checks)
    with store:
        _check_schema(store, record)
        _check_invariants(store, record)
        if store.dialect == "sqlite":
            _check_sqlite(store, record)
        _check_leases(store, record)
    return _check_result(args, checks)


def _check_result(args: argparse.Namespace, checks: list[dict[str, Any]]) -> Result:
    ok = all(check["ok"] for check in checks)
    document = {"ok": ok, "checks": checks}
    width = max(len(check["name"]) for check in checks)
    text = "".join(
        f"{'ok' if check['ok'] else 'FAILED':6}  {check['name'].ljust(width)}  {check['detail']}\n"
        for check in checks
    )
    text += "all checks passed\n" if ok else "some checks FAILED\n"
    return document, text, OK if ok else FOUND


def _check_schema(store: Any, record: Callable[..., None]) -> None:
    names = migration_names()
    rows = store._read(
        "check", lambda c: c.execute("SELECT id, name FROM flows_migrations").fetchall()
    )
    applied = sorted(int(step) for step, _name in rows)
    known = list(names)
    missing = [step for step in known if step not in applied]
    latest = known[-1]
    record(
        "schema",
        not missing,
        f"{len(applied)} of {len(known)} migrations applied, latest {latest} {names[latest]}"
        if not missing
        else f"pending: {', '.join(str(step) for step in missing)}",
        applied=step_json([step for step in known if step in applied]),
    )


def _check_invariants(store: Any, record: Callable[..., None]) -> None:
    from ...attempts import AttemptStore, AttemptStoreError

    for name, check in (
        ("invariants", store.check_invariants),
        ("attempt invariants", AttemptStore(store).check_invariants),
    ):
        try:
            check()
        except AssertionError as broken:
            record(name, False, str(broken))
        except (RunStoreError, AttemptStoreError) as error:
            record(name, False, f"could not be checked: {error.message}")
        else:
            record(name, True, "hold")


def _check_sqlite(store: Any, record: Callable[..., None]) -> None:
    def pragma(text: str) -> list[tuple[Any, ...]]:
        return list(store._read("check", lambda c: c.execute(text).fetchall()))

    try:
        integrity = [str(row[0]) for row in pragma("PRAGMA integrity_check(20)")]
        foreign = pragma("PRAGMA foreign_key_check")
    except RunStoreError as error:
        record("sqlite integrity", False, f"could not be checked: {error.message}")
        return
    fine = integrity == ["ok"]
    record(
        "sqlite integrity",
        fine,
        "ok" if fine else "; ".join(integrity),
        problems=[] if fine else integrity,
    )
    record(
        "sqlite foreign keys",
        not foreign,
        "ok" if not foreign else f"{len(foreign)} row(s) name a missing parent",
        problems=[f"{row[0]} rowid {row[1]} -> {row[2]}" for row in foreign[:20]],
    )


def _check_leases(store: Any, record: Callable[..., None]) -> None:
    """Every row and its lease agree (all of them, not only the first that
    does not, as ``check_invariants`` stops at)."""
    try:
        whole = store.state()
    except RunStoreError as error:
        record("rows and leases agree", False, f"could not be checked: {error.message}")
        return
    leases = {lease.run_id: lease for lease in whole.leases}
    runs = {row.run_id for row in whole.rows}
    disagree: list[str] = []
    for row in whole.rows:
        lease = leases.get(row.run_id)
        if lease is None:
            agree = row.owner is None and row.claim is None
        else:
            agree = (
                lease.owner == row.owner
                and lease.heartbeat_at_ms == row.heartbeat_at_ms
                and lease.claim == row.claim
                and lease.claimed_at_ms == row.claimed_at_ms
            )
        if not agree:
            disagree.append(row.run_id)
    orphans = sorted(set(leases) - runs)
    problems = [f"{rid}: row and lease differ" for rid in disagree] + [
        f"{rid}: lease without a run" for rid in orphans
    ]
    record(
        "rows and leases agree",
        not problems,
        f"{len(whole.rows)} runs, {len(leases)} leases"
        if not problems
        else f"{len(problems)} problem(s): {', '.join(problems[:5])}",
        problems=problems[:100],
    )
