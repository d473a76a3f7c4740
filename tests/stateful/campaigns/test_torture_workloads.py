"""The torture's workloads: each aims at pairs of operations that can touch the
same run or the same candidate set, and a short run of it does put those
pairs in flight together; the zombie owner is let go at its peer's takeover;
histories of every workload drawn from the model check as linearizable.

The quick tests run in the default suite; a torture run per workload (real
processes, some seconds each) is a campaign (``-m campaign``)."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter

import pytest

from runstore import OwnerId
from runstore.stateful import check_history, load_history
from runstore.stateful._campaigns._torture import TortureConfig, TortureError, run_torture
from runstore.stateful._histories._generate import generate_history
from runstore.stateful._histories._history import Operation
from runstore.stateful._histories._workload import (
    DEFAULT_MIX,
    OVERLAPS,
    TAKEOVERS,
    WORKLOADS,
    Worker,
    ZombieBoard,
    overlapping_pairs,
)

#: The operations the issue names, each of which must be in some pair.
NAMED = {
    "claim_next",
    "purge_settled",
    "heartbeat_many",
    "create",
    "request_cancel_lineage",
    "request_cancel",
    "acknowledge_cancel",
    "steal",
    "claim_and_own",
    "recover_claim",
    "transition_owned",
}


def test_every_pair_is_covered_by_a_workload_that_exists():
    """Each pair names workloads that exist, every workload aims at some
    pair, every operation the issue names is in pairs with each other
    operation over one candidate set, and the default mix runs them all."""
    assert set(DEFAULT_MIX) == set(WORKLOADS)
    for pair, names in OVERLAPS.items():
        assert pair == tuple(sorted(pair))
        assert names, pair
        assert set(names) <= set(WORKLOADS), pair
    aimed = {name for names in OVERLAPS.values() for name in names}
    assert aimed == set(WORKLOADS)
    in_pairs = {method for pair in OVERLAPS for method in pair}
    assert in_pairs >= NAMED
    for a in ("claim_next", "purge_settled"):
        assert (a, a) in OVERLAPS
    for a in ("claim_next", "heartbeat_many", "steal", "claim_and_own"):
        for b in ("transition_owned",):
            assert tuple(sorted((a, b))) in OVERLAPS


def op(
    op_id: str,
    method: str,
    args: tuple,
    start: int,
    end: int | None,
    thread: str = "t",
    process: str = "p",
) -> Operation:
    return Operation(
        id=op_id,
        process=process,
        method=method,
        args=args,
        kwargs={},
        invoked_ns=start,
        returned_ns=end,
        status="ok" if end is not None else "pending",
        thread=thread,
    )


def test_overlapping_pairs_counts_calls_in_flight_together_on_one_run():
    """Intervals that intersect, by different owners, on the same run (or a
    candidate set, or rounds of one lineage) count; one owner's own calls,
    calls on other runs and calls one after the other do not."""
    me, them = OwnerId("a", 1, "x"), OwnerId("b", 2, "y")
    history = [
        op("1", "steal", ("r1", None, them, 0, None), 0, 10, process="p1"),
        op("2", "heartbeat", ("r1", me, 0), 5, 15, process="p2"),
        # Another run: no overlap with the steal.
        op("3", "heartbeat", ("r4", me, 0), 6, 8, process="p3"),
        # One owner's own calls never overlap (same process and thread); another's do.
        op("4", "transition_owned", ("r1", them, "running"), 9, 12, process="p1"),
        # After the steal returned.
        op("5", "steal", ("r1", None, them, 0, None), 20, 30, process="p4"),
        # A candidate set touches every run (steal with claim_next is no pair
        # of OVERLAPS); a pending call never ends.
        op("6", "claim_next", (them, 0), 25, None, process="p5"),
        op("7", "claim_next", (me, 0), 40, 41, process="p6"),
        # Rounds of one lineage: r5 is round 2 of lineage r3.
        op("8", "create", ("r5", "{}"), 50, 60, process="p7"),
        op("9", "request_cancel_lineage", ("r3", 0), 55, 58, process="p8"),
    ]
    found = overlapping_pairs(history)
    assert found == Counter(
        {
            ("heartbeat", "steal"): 1,
            ("heartbeat", "transition_owned"): 1,
            ("claim_next", "claim_next"): 1,
            ("claim_next", "create"): 1,
            ("create", "request_cancel_lineage"): 1,
        }
    )
    # A bug planted in the test itself would show: overlap on another run is not counted.
    shifted = [history[0], op("2", "heartbeat", ("r2", me, 0), 5, 15, process="p2")]
    assert not overlapping_pairs(shifted)


@pytest.mark.parametrize("workload", [*WORKLOADS, "all"])
def test_model_histories_of_every_workload_are_linearizable(workload):
    """Histories drawn from the model (linearizable by construction) with
    each workload, calls left pending among them, check as linearizable: the
    workloads' calls are ones the checker judges right."""
    names = list(WORKLOADS) if workload == "all" else [workload]
    methods: Counter[str] = Counter()
    for seed in range(4):
        history = generate_history(seed, 300, workloads=names, pending=0.02, speed=0.5)
        verdict = check_history(history)
        assert verdict.status == "linearizable", verdict.summary()
        methods.update(o.method for o in history)
    aimed = {m for pair, owners in OVERLAPS.items() for m in pair if set(owners) & set(names)}
    # Every operation the workload aims at is called (list_runs and claim_next
    # where the model offers them, which it does).
    assert aimed <= set(methods) | {"recover_claim", "steal"}, aimed - set(methods)


def test_an_unknown_workload_is_refused():
    """A Worker and a torture refuse a workload that does not exist."""
    with pytest.raises(ValueError, match="unknown workloads"):
        Worker(None, None, OwnerId("h", 1, "n"), random.Random(1), "r", 1, workloads=["nope"])
    with pytest.raises(TortureError, match="--workload takes"):
        run_torture(TortureConfig(db="unused.db", workloads=("nope",), quiet=True))


def test_a_held_owner_is_let_go_by_a_peer_taking_its_run_over(tmp_path):
    """The board lets a held owner go when a peer starts a takeover of its
    run once the run is stale (both then leave at the instant the owner
    named); a takeover of another run does not wake it, nor one before the
    run is stale; with no peer the hold ends at its limit, unwoken."""
    board = ZombieBoard(tmp_path / "board")
    results: dict[str, bool] = {}

    def hold(run_id: str, until_ns: int, stale_ns: int) -> None:
        results[run_id] = board.hold(run_id, until_ns, stale_ns)

    far = time.monotonic_ns() + 60_000_000_000
    holder = threading.Thread(target=hold, args=("r1", far, 0))
    holder.start()
    while board.held() != ["r1"]:
        time.sleep(0.001)
    board.wake("r2")
    assert "r1" not in results
    board.wake("r1")
    holder.join(timeout=30)
    assert results["r1"] is True
    assert board.held() == []

    # Not stale yet: the peer's wake is not heard, and the hold runs out.
    soon = time.monotonic_ns() + 100_000_000
    holder = threading.Thread(target=hold, args=("r3", soon, far))
    holder.start()
    while "r3" not in results:
        board.wake("r3")
        time.sleep(0.002)
    holder.join()
    assert results["r3"] is False
    assert board.held() == []


@pytest.mark.processes
@pytest.mark.slow
def test_the_default_mix_takes_every_workload_in_turn_and_passes(tmp_path):
    """A short torture of the default mix on the shipped SQLite store passes,
    and the aimed operations of each workload are in its history."""
    result = run_torture(
        TortureConfig(
            db=str(tmp_path / "db"),
            out=str(tmp_path / "out"),
            seconds=2.5,
            phase_ms=200.0,
            seed=5,
            quiet=True,
        )
    )
    assert result.status == 0, result.verdict.summary()
    methods = Counter(o.method for o in load_history(sorted(result.history_dir.glob("*.jsonl"))))
    # Present, not a count: how many steps fit in the 2.5 s depends on the
    # machine's load (a CI run under load made 2 purges: purges are rare and
    # wait for a grid instant of their own).
    for method in ("claim_next", "purge_settled", "heartbeat_many", "request_cancel_lineage"):
        assert methods[method] >= 1, methods
    assert result.overlaps


#: A torture run per workload: how long, and how many runs may add up to
#: cover every pair (a pair missing from all of them fails the test). At
#: loads 15 to 20 the zombies workload needed two to four runs of 8 s, the
#: others one or two.
WORKLOAD_SECONDS = 8.0
#: Up to eight runs (64 s of one workload, about a user's 60 s budget); the
#: loop stops as soon as every aimed pair was seen (one to two runs as a rule:
#: the zombies' request_cancel with steal once needed more than four).
WORKLOAD_TRIES = 8


@pytest.mark.campaign
@pytest.mark.processes
@pytest.mark.parametrize("workload", list(WORKLOADS))
def test_a_short_run_of_each_workload_overlaps_its_pairs(tmp_path, workload):
    """A torture of one workload on the shipped SQLite store passes and puts
    every pair it aims at in flight together (summed over up to eight runs
    of eight seconds); the zombies run also shows displaced owners' writes
    refused by the fence during takeovers."""
    aimed = {pair for pair, names in OVERLAPS.items() if workload in names}
    seen: Counter[tuple[str, str]] = Counter()
    fenced = 0
    for attempt in range(WORKLOAD_TRIES):
        result = run_torture(
            TortureConfig(
                db=str(tmp_path / f"db{attempt}"),
                out=str(tmp_path / f"out{attempt}"),
                seconds=WORKLOAD_SECONDS,
                seed=100 + attempt,
                workloads=(workload,),
                quiet=True,
            )
        )
        assert result.status == 0, result.verdict.summary()
        seen.update(result.overlaps)
        operations = load_history(sorted(result.history_dir.glob("*.jsonl")))
        fenced += sum(
            1
            for o in operations
            if o.method in ("heartbeat", "transition_owned")
            and type(o.value).__name__ == "FenceLost"
        )
        if aimed <= set(seen):
            break
    assert aimed <= set(seen), sorted(aimed - set(seen))
    if workload == "zombies":
        assert fenced > 0
        assert any(pair[0] in TAKEOVERS or pair[1] in TAKEOVERS for pair in seen)


def test_the_guide_lists_every_workload_and_every_pair_as_the_code_has_them():
    """The "Workloads" section of the guide has a row per workload and the
    pair table row for row as ``OVERLAPS`` has it."""
    from pathlib import Path

    guide = Path(__file__).resolve().parents[3] / "docs/guides/check-concurrent-histories.md"
    text = guide.read_text()
    section = text[text.index("### Workloads") : text.index("### On PostgreSQL")]
    rows = [line.split("|")[1:-1] for line in section.splitlines() if line.startswith("| `")]
    workloads = {cells[0].strip().strip("`") for cells in rows if len(cells) == 2}
    assert workloads == set(WORKLOADS)
    pairs = {
        (cells[0].strip().strip("`"), cells[1].strip().strip("`")): tuple(
            name.strip() for name in cells[2].split(",")
        )
        for cells in rows
        if len(cells) == 3
    }
    assert pairs == OVERLAPS
