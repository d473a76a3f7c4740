"""``runstore runs``, ``stats`` and ``purge`` on a SQLite file and on a
PostgreSQL database (they walk ``list_runs``; ``purge`` asks
``purge_candidates`` and calls ``purge_settled``).

``runs`` applies each filter as ``list_runs`` does (status, stale at now,
claim pending, stale claim, cancellation requested, lineage, parent), pages
with ``--limit``/``--after`` and walks every page with ``--all``, in aligned
columns with relative ages or as JSON with the documented fields. ``stats``
counts by status, stale owners, claims and requests at ``--now``. ``purge``
lists, without deleting, exactly the runs ``purge_settled`` then deletes
with ``--yes``, reading about as many runs as its ``--limit``, not the store.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

import runstore
from runstore import ManualClock, OwnerId, RunSnapshot
from runstore._sql import _store as sql_store
from runstore.cli import main

from ._cli import NOW, SECRET, T0, Db, cli, cli_json, make_db


@pytest.fixture(params=["sqlite-file", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Any) -> Db:
    return make_db(request.param, tmp_path)


ROW_FIELDS = {
    "run_id",
    "status",
    "created_at_ms",
    "started_at_ms",
    "finished_at_ms",
    "owner",
    "heartbeat_at_ms",
    "claim",
    "claimed_at_ms",
    "parent_run_id",
    "cancel_requested_at_ms",
    "lineage_id",
    "round_ordinal",
    "stale",
    "claim_stale",
}
#: Every run in listing order: created at the same instant, so by run id.
ALL = ["idle", "old", "queued", "round-1", "round-2", "working"]


def ids(capsys: pytest.CaptureFixture[str], *argv: str) -> list[str]:
    code, document = cli_json(capsys, "runs", *argv)
    assert code == 0
    return [run["run_id"] for run in document["runs"]]


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ((), ALL),
        (("--status", "running"), ["working"]),
        (("--status", "pending,running"), ["idle", "queued", "working"]),
        (("--status", "completed", "--status", "pending"), ALL[:-1]),
        (("--stale", "--now", NOW), ["working"]),
        (("--stale", "--now", str(T0 + 1)), []),
        (("--claim-pending",), ["queued"]),
        (("--claim-stale", "--now", NOW), ["queued"]),
        (("--claim-stale", "--now", str(T0 + 1)), []),
        (("--cancel-requested",), ["working"]),
        (("--lineage", "L"), ["round-1", "round-2"]),
        (("--parent", "round-1"), ["round-2"]),
    ],
)
def test_runs_filters(
    db: Db, capsys: pytest.CaptureFixture[str], flags: tuple[str, ...], expected: list[str]
) -> None:
    assert ids(capsys, db.target, "--all", *flags) == expected


def test_runs_pages(db: Db, capsys: pytest.CaptureFixture[str]) -> None:
    code, first = cli_json(capsys, "runs", db.target, "--limit", "4")
    assert code == 0
    assert [run["run_id"] for run in first["runs"]] == ALL[:4]
    assert first["next"] is not None
    code, rest = cli_json(capsys, "runs", db.target, "--limit", "4", "--after", first["next"])
    assert [run["run_id"] for run in rest["runs"]] == ALL[4:]
    assert rest["next"] is None
    code, out, _ = cli(capsys, "runs", db.target, "--limit", "4")
    assert out.splitlines()[-1] == f"more: --after {first['next']}"


def test_runs_json_has_the_documented_fields(db: Db, capsys: pytest.CaptureFixture[str]) -> None:
    code, document = cli_json(capsys, "runs", db.target, "--now", NOW)
    assert code == 0
    assert set(document) == {"now_ms", "runs", "next"}
    for run in document["runs"]:
        assert set(run) == ROW_FIELDS
    runs = {run["run_id"]: run for run in document["runs"]}
    assert runs["working"]["owner"] == {"host_id": "host-a", "pid": 4102, "nonce": "c0ffee"}
    assert runs["working"]["stale"] is True
    assert runs["queued"]["claim_stale"] is True
    assert runs["queued"]["claim"] == runs["working"]["owner"]


def test_runs_reads_well_in_a_terminal(db: Db, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "runs", db.target, "--now", NOW)
    assert code == 0
    header, *lines = out.splitlines()
    assert header.split() == [
        "RUN",
        "ID",
        "STATUS",
        "OWNER",
        "LEASE",
        "CLAIM",
        "CANCEL",
        "CREATED",
        "LINEAGE",
    ]
    status_column = header.index("STATUS")
    for line in lines:
        assert line[status_column - 2 : status_column] == "  "
        assert line[status_column] != " "
    working = next(line for line in lines if line.startswith("working"))
    assert "stale for 45 s" in working
    assert "75 s ago" in working


def test_stats(db: Db, capsys: pytest.CaptureFixture[str]) -> None:
    code, document = cli_json(capsys, "stats", db.target, "--now", NOW)
    assert code == 0
    assert document["runs"] == 6
    assert document["by_status"]["running"] == 1
    assert document["by_status"]["pending"] == 2
    assert document["by_status"]["completed"] == 3
    assert document["stale_running"] == 1
    assert document["stale_owners"] == [
        {
            "owner": {"host_id": "host-a", "pid": 4102, "nonce": "c0ffee"},
            "runs": 1,
            "oldest_heartbeat_at_ms": T0,
        }
    ]
    assert (document["claims"], document["stale_claims"]) == (1, 1)
    assert document["cancel_requested"] == 1
    assert document["oldest_running_heartbeat"]["run_id"] == "working"
    code, out, _ = cli(capsys, "stats", db.target, "--now", NOW)
    assert "stale for 45 s" in out
    code, fresh = cli_json(capsys, "stats", db.target, "--now", str(T0 + 1))
    assert (fresh["stale_running"], fresh["stale_owners"], fresh["stale_claims"]) == (0, [], 0)


def _ids(store: Any) -> set[str]:
    return {row.run_id for row in store.state().rows}


def test_purge_lists_what_purge_settled_then_deletes(
    db: Db, capsys: pytest.CaptureFixture[str]
) -> None:
    before = db.fingerprint()
    code, dry = cli_json(capsys, "purge", db.target, "--before", str(T0 + 1))
    assert code == 0
    assert dry["dry_run"] is True
    assert dry["purged"] is None
    listed = [run["run_id"] for run in dry["runs"]]
    assert listed == ["old", "round-2"]  # round-1 has a child: it goes next time
    assert db.fingerprint() == before
    with runstore.open(db.target, clock=ManualClock(T0), read_only=True) as store:
        kept = _ids(store)
    code, done = cli_json(capsys, "purge", db.target, "--before", str(T0 + 1), "--yes")
    assert code == 0
    assert done["purged"] == 2
    with runstore.open(db.target, clock=ManualClock(T0), read_only=True) as store:
        assert kept - _ids(store) == set(listed)
    code, again = cli_json(capsys, "purge", db.target, "--before", str(T0 + 1))
    assert [run["run_id"] for run in again["runs"]] == ["round-1"]


def test_purge_limit_and_relative_times(db: Db, capsys: pytest.CaptureFixture[str]) -> None:
    code, dry = cli_json(capsys, "purge", db.target, "--before", str(T0 + 1), "--limit", "1")
    assert [run["run_id"] for run in dry["runs"]] == ["old"]
    assert dry["more"] is True
    code, out, _ = cli(capsys, "purge", db.target, "--before", "1m", "--now", str(T0 + 60_001))
    assert "would be purged" in out
    assert "--yes" in out
    code, dry = cli_json(capsys, "purge", db.target, "--before", "1m", "--now", str(T0 + 60_000))
    assert (dry["before_ms"], dry["runs"]) == (T0, [])
    code, dry = cli_json(capsys, "purge", db.target, "--before", "2100-01-01")
    assert (code, len(dry["runs"])) == (0, 2)


def test_purge_reads_its_limit_not_the_store(
    tmp_path: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``runstore purge --limit 2`` reads 3 runs (one more, to say whether
    more qualify) from a store of 400, dry run and ``--yes`` alike: it asks
    the store's ``purge_candidates``, one query over its index, instead of
    reading every run (which made it quadratic in the store's size). Counted
    as the rows the command decodes, one by one or a page at a time."""
    path = str(tmp_path / "big.db")
    clock = ManualClock(T0)
    owner = OwnerId("host-a", 1, "a1")
    with runstore.open(path, clock=clock, durability="normal") as store:
        for n in range(400):
            store.create(f"r{n:04d}", "{}")
            if n % 2 == 0:
                store.claim_and_own(f"r{n:04d}", RunSnapshot("pending", None, None), owner, T0)
                store.transition_owned(f"r{n:04d}", owner, "completed")
    decoded = 0
    one, page = sql_store.decode_run, sql_store.decode_runs

    def decode_run(*args: Any, **kwargs: Any) -> Any:
        nonlocal decoded
        decoded += 1
        return one(*args, **kwargs)

    def decode_runs(method: str, rows: Any, **kwargs: Any) -> Any:
        nonlocal decoded
        decoded += len(rows)
        return page(method, rows, **kwargs)

    monkeypatch.setattr(sql_store, "decode_run", decode_run)
    monkeypatch.setattr(sql_store, "decode_runs", decode_runs)
    for extra in ((), ("--yes",)):
        decoded = 0
        capsys.readouterr()
        code = main(["purge", path, "--before", str(T0 + 1), "--limit", "2", "--json", *extra])
        document = json.loads(capsys.readouterr().out)
        assert code == 0
        assert [run["run_id"] for run in document["runs"]] == ["r0000", "r0002"]
        assert document["more"] is True
        assert decoded == 3, decoded


def test_listing_output_never_holds_state(db: Db, capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (("runs", db.target, "--all"), ("stats", db.target)):
        code, out, err = cli(capsys, *argv)
        assert SECRET not in out + err
        code, out, err = cli(capsys, *argv, "--json")
        assert code == 0
        assert SECRET not in out + err
        if argv[0] == "runs":
            assert all("state_json" not in run for run in json.loads(out)["runs"])
