"""Two workers claiming batches at once never take the same run: real
threads, each with its own store (its own connection) on one database, on
SQLite (a file) and PostgreSQL (both paths). Every run is taken exactly once,
and each batch comes back oldest first."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from runstore import ManualClock, OwnerId

from .. import _postgres

RUNS = 60
WORKERS = 4


def _sqlite(tmp_path: Path) -> tuple[Any, Any]:
    import runstore

    path = tmp_path / "runs.db"
    return (lambda: runstore.open(path, clock=ManualClock(0))), None


def _postgres_store(fast_path: bool) -> Any:
    postgres = pytest.importorskip("runstore.postgres")
    url = _postgres.database_url()
    return lambda: postgres.open(url, clock=ManualClock(0), fast_path=fast_path)


@pytest.mark.parametrize("backend", ["sqlite-file", "postgres", "postgres-general"])
def test_concurrent_batches_never_take_the_same_run(backend: str, tmp_path: Path) -> None:
    if backend == "sqlite-file":
        opener, _ = _sqlite(tmp_path)
    else:
        opener = _postgres_store(fast_path=backend == "postgres")
    with opener() as setup:
        for index in range(RUNS):
            setup.create(f"r{index:03d}", "{}")
    stores = [opener() for _ in range(WORKERS)]
    taken: list[list[list[str]]] = [[] for _ in range(WORKERS)]
    failures: list[BaseException] = []
    start = threading.Barrier(WORKERS)

    def work(index: int) -> None:
        store = stores[index]
        owner = OwnerId(f"host-{index}", index + 1, f"n{index}")
        try:
            start.wait()
            while True:
                batch = store.claim_next_many(owner, 0, 3)
                if not batch:
                    return
                assert all(row.owner == owner for row in batch)
                taken[index].append([row.run_id for row in batch])
        except BaseException as failure:  # reported by the main thread
            failures.append(failure)

    threads = [threading.Thread(target=work, args=(index,)) for index in range(WORKERS)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        assert not any(thread.is_alive() for thread in threads)
        assert failures == []
        everything = [rid for batches in taken for batch in batches for rid in batch]
        assert sorted(everything) == [f"r{index:03d}" for index in range(RUNS)]
        for batches in taken:
            for batch in batches:
                assert batch == sorted(batch)  # created in id order: oldest first
        with opener() as check:
            assert all(row.status == "running" for row in check.list_runs(limit=1000).runs)
            check.check_invariants()
    finally:
        for store in stores:
            store.close()
