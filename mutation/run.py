"""Mutation testing of the stores and strategies, judged by the conformance suite alone.

Cosmic Ray (``pip install -e '.[mutation]'``) enumerates the mutants of the
modules in ``PATHS`` and applies them; this driver samples them (seeded),
judges each with ``mutation/judge.py`` under a fixed budget, and records every
verdict as one line of ``mutation/results.jsonl`` as soon as it is known, so
a run can be stopped at any time and resumed later (on this machine or a new
one: the sample and the verdicts are in the repository).

    python mutation/run.py init --seed 14 --size 320   # pick the sample (once)
    python mutation/run.py run --minutes 9             # judge pending mutants
    python mutation/run.py report                      # score and survivors
    python mutation/run.py show KEY                    # one mutant's diff and verdict
    python mutation/run.py recheck --seed 23 --count 40  # killed ones, again on HEAD

The mutants are made in a copy of the tree (``RUNSTORE_MUTATION_WORK``,
default ``/tmp/runstore-mutation``) extracted from the commit ``init``
recorded, never in the working tree (each ``run`` in a folder of its own
under it, so runs may go side by side). ``run`` judges one mutant at a time,
under ``nice -n 10``. ``recheck`` applies killed mutants again, by the text
of their recorded diff, to a copy of ``HEAD`` (where the line is now, after
code moved) and records those verdicts in ``mutation/recheck.jsonl`` apart.
See ``mutation/README.md``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
STATE = HERE / "state.json"
SAMPLE = HERE / "sample.json"
RESULTS = HERE / "results.jsonl"
TRIAGE = HERE / "triage.json"
REPORT = HERE / "RESULTS.md"
RECHECK = HERE / "recheck.jsonl"
WORK = Path(os.environ.get("RUNSTORE_MUTATION_WORK", "/tmp/runstore-mutation"))

PATHS = (
    "runstore/sqlite",
    "runstore/consensus",
    "runstore/_boundary.py",
    "runstore/attempts",
    "runstore/_sql",
    "runstore/postgres",
)
#: Seconds one mutant may take (a SQLite strategy's default run takes about
#: 140 s on a loaded 2-core machine, a PostgreSQL store's longer).
TIMEOUTS = {"sqlite": 600.0, "postgres": 900.0}


def _git(*arguments: str) -> str:
    return subprocess.run(
        ["git", *arguments], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.strip()


def _extract(commit: str, suite_commit: str, into: Path) -> Path:
    """A fresh copy of the tree at ``commit`` (the suite, ``stateful/`` and
    ``model/``, at ``suite_commit``), importable as ``runstore``."""
    src = into / "src"
    if src.exists():
        shutil.rmtree(src)
    src.mkdir(parents=True)
    for rev, paths in ((commit, ["runstore"]), (suite_commit, ["stateful", "model"])):
        archive = subprocess.run(
            ["git", "archive", rev, *paths], cwd=ROOT, check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
    (src / "runstore" / "model").symlink_to("../model")
    (src / "runstore" / "stateful").symlink_to("../stateful")
    return src


def _key(module: str, operator: str, occurrence: int) -> str:
    return f"{module}:{operator}:{occurrence}"


def cmd_init(args: argparse.Namespace) -> int:
    from cosmic_ray.commands.init import init
    from cosmic_ray.modules import find_modules
    from cosmic_ray.work_db import WorkDB, use_db

    commit = _git("rev-parse", args.commit)
    src = _extract(commit, commit, WORK)
    session = WORK / "session.sqlite"
    session.unlink(missing_ok=True)
    cwd = os.getcwd()
    os.chdir(src)
    try:
        modules = sorted(find_modules([Path(p) for p in PATHS]))
        with use_db(str(session), WorkDB.Mode.create) as db:
            init(modules, db, {})
            items = []
            for item in db.work_items:
                (mutation,) = item.mutations
                items.append(
                    {
                        "key": _key(
                            str(mutation.module_path), mutation.operator_name, mutation.occurrence
                        ),
                        "module": str(mutation.module_path),
                        "operator": mutation.operator_name,
                        "occurrence": mutation.occurrence,
                        "line": mutation.start_pos[0],
                    }
                )
    finally:
        os.chdir(cwd)
    items.sort(key=lambda item: (item["module"], item["operator"], item["occurrence"]))
    chosen = random.Random(args.seed).sample(items, min(args.size, len(items)))
    chosen.sort(key=lambda item: (item["module"], item["line"], item["key"]))
    counts: dict[str, int] = {}
    for item in items:
        counts[item["module"]] = counts.get(item["module"], 0) + 1
    STATE.write_text(
        json.dumps(
            {
                "commit": commit,
                "seed": args.seed,
                "size": len(chosen),
                "population": len(items),
                "paths": list(PATHS),
                "mutants_per_module": counts,
            },
            indent=2,
        )
        + "\n"
    )
    SAMPLE.write_text(
        "[\n" + ",\n".join(json.dumps(item, sort_keys=True) for item in chosen) + "\n]\n"
    )
    print(
        f"{len(items)} mutants in {len(modules)} modules; sampled {len(chosen)} (seed {args.seed})"
    )
    return 0


def _results() -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    if RESULTS.exists():
        for line in RESULTS.read_text().splitlines():
            if line.strip():
                record = json.loads(line)
                out[record["key"]] = record  # a later verdict replaces an earlier one
    return out


def _judge(src: Path, item: dict[str, Any], timeout: float) -> dict[str, Any]:
    from cosmic_ray.mutating import use_mutation
    from cosmic_ray.plugins import get_operator

    operator = get_operator(item["operator"])()
    started = time.monotonic()
    cwd = os.getcwd()
    os.chdir(src)
    try:
        with use_mutation(Path(item["module"]), operator, item["occurrence"]) as (before, after):
            if after is None:
                return {"outcome": "no-mutation", "seconds": 0.0, "diff": ""}
            diff = "".join(
                line
                for line in __import__("difflib").unified_diff(
                    before.splitlines(True), after.splitlines(True), n=0
                )
                if line.startswith(("+", "-")) and not line.startswith(("+++", "---"))
            )
            return {**_judge_copy(src, item["module"], timeout, started), "diff": diff}
    finally:
        os.chdir(cwd)


def _judge_copy(src: Path, module: str, timeout: float, started: float) -> dict[str, Any]:
    """Run ``mutation/judge.py MODULE`` on the (already mutated) copy ``src``
    under ``nice -n 10``: its outcome, the check that killed it, seconds."""
    env = dict(os.environ, PYTHONPATH=str(src), PYTHONDONTWRITEBYTECODE="1")
    env.pop("HYPOTHESIS_PROFILE", None)
    command = ["nice", "-n", "10", sys.executable, str(HERE / "judge.py"), module]
    try:
        done = subprocess.run(
            command,
            cwd=src,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            start_new_session=True,
        )
    except subprocess.TimeoutExpired:
        return {
            "outcome": "timeout",
            "seconds": round(time.monotonic() - started, 1),
            "check": "timeout",
        }
    lines = done.stdout.splitlines()
    verdict = next((line for line in lines if line.startswith("killed by")), "")
    return {
        "outcome": "survived" if done.returncode == 0 else "killed",
        "check": verdict[len("killed by ") :].split(" ")[0] if verdict else "",
        "detail": verdict[:300] or (done.stderr.strip().splitlines() or [""])[-1][:300],
        "seconds": round(time.monotonic() - started, 1),
    }


def cmd_run(args: argparse.Namespace) -> int:
    state = json.loads(STATE.read_text())
    sample = json.loads(SAMPLE.read_text())
    suite = _git("rev-parse", args.suite) if args.suite else state["commit"]
    done = _results()
    if args.rejudge or args.gaps:
        wanted = [i for i in sample if done.get(i["key"], {}).get("outcome") == "survived"]
        if args.gaps:
            triage = json.loads(TRIAGE.read_text()) if TRIAGE.exists() else {}
            equivalent = {k for k, v in triage.items() if v.get("verdict") == "equivalent"}
            wanted = [i for i in wanted if i["key"] not in equivalent]
    else:
        wanted = [i for i in sample if i["key"] not in done]
    if args.key:
        wanted = [i for i in wanted if i["key"] in args.key]
    if args.only:
        wanted = [i for i in wanted if i["module"].startswith(args.only)]
    if args.skip:
        wanted = [i for i in wanted if not i["module"].startswith(args.skip)]
    # A seeded order across modules, so a partial run is a fair sample too.
    random.Random(state["seed"]).shuffle(wanted)
    print(f"{len(wanted)} mutants to judge (suite at {suite[:10]})", flush=True)
    # A copy of its own: several runs (say, one per --key) may go at once.
    own = WORK / f"run-{os.getpid()}"
    try:
        return _run(_extract(state["commit"], suite, own), wanted, suite, args.minutes)
    finally:
        shutil.rmtree(own, ignore_errors=True)


def _run(src: Path, wanted: list[dict[str, Any]], suite: str, minutes: float) -> int:
    deadline = time.monotonic() + minutes * 60
    judged = 0
    for item in wanted:
        if time.monotonic() >= deadline:
            break
        kind = "postgres" if item["module"].startswith("runstore/postgres/") else "sqlite"
        verdict = _judge(src, item, TIMEOUTS[kind])
        record = {
            **item,
            **verdict,
            "suite": suite[:12],
            "judged_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        with RESULTS.open("a") as out:
            out.write(json.dumps(record, sort_keys=True) + "\n")
        judged += 1
        print(
            f"{record['outcome']:>9} {record['seconds']:>6}s {item['key']} "
            f"{record.get('check', '')}",
            flush=True,
        )
    left = len(wanted) - judged
    print(f"judged {judged}; {left} left")
    return 0


#: Lines either side of a mutated line compared when the same line is found
#: in several other modules (the one whose surroundings match best is taken).
CONTEXT_LINES = 8


def _hunk(diff: str) -> tuple[list[str], list[str]]:
    """The lines a recorded mutation removes and the ones it puts in their
    place. Cosmic Ray may rewrite a neighbouring line unchanged or drop the
    blank lines before a removed decorator: those are left out."""
    minus = [line[1:] for line in diff.splitlines() if line.startswith("-")]
    plus = [line[1:] for line in diff.splitlines() if line.startswith("+")]
    while minus and plus and minus[-1] == plus[-1]:
        minus.pop()
        plus.pop()
    while minus and plus and minus[0] == plus[0]:
        minus.pop(0)
        plus.pop(0)
    if not plus:
        while minus and not minus[0].strip():
            minus.pop(0)
        while minus and not minus[-1].strip():
            minus.pop()
    return minus, plus


def _modules(src: Path) -> list[str]:
    """The mutated modules as they are in the copy ``src``."""
    found: set[str] = set()
    for path in PATHS:
        where = src / path
        files = [where] if where.is_file() else sorted(where.rglob("*.py"))
        found.update(str(f.relative_to(src)) for f in files if f.is_file())
    return sorted(found)


def _matches(lines: list[str], block: list[str]) -> list[int]:
    """Where ``block`` starts in ``lines`` (indexes from 0)."""
    n = len(block)
    return [i for i in range(len(lines) - n + 1) if lines[i : i + n] == block]


def _around(lines: list[str], at: int) -> set[str]:
    window = lines[max(0, at - CONTEXT_LINES) : at + CONTEXT_LINES + 1]
    return {line.strip() for line in window if line.strip()}


def _sampled(commit: str, module: str, cache: dict[str, list[str]]) -> list[str]:
    """The lines of ``module`` at ``commit`` (none if it had no such file)."""
    if module not in cache:
        shown = subprocess.run(
            ["git", "show", f"{commit}:{module}"], cwd=ROOT, capture_output=True, text=True
        )
        cache[module] = shown.stdout.splitlines() if shown.returncode == 0 else []
    return cache[module]


def _locate(
    src: Path, item: dict[str, Any], block: list[str], sampled: Callable[[str], list[str]]
) -> tuple[str | None, int | None, str]:
    """Where the recorded mutation applies now: ``(module, index, note)``, or
    ``(None, None, reason)`` when its line is in no mutated module.

    The recorded module first; failing that, another mutated module that has
    more copies of the line than it had at the sampled commit (the line came
    to it). Among several matches, the one whose surroundings share the most
    lines with the recorded line's at the sampled commit, then the nearest to
    the recorded line number (then the same file name, in another module)."""
    module, line = item["module"], int(item["line"])
    context = _around(sampled(module), line - 1)
    here = src / module

    def best(modules: list[str]) -> list[tuple[int, int, bool, str, int]]:
        found = []
        for name in modules:
            lines = (src / name).read_text().splitlines()
            starts = _matches(lines, block)
            if name != module and len(starts) <= len(_matches(sampled(name), block)):
                continue  # it had the line already: not where the code went
            for i in starts:
                score = len(context & _around(lines, i))
                found.append(
                    (-score, abs(i + 1 - line), Path(name).name != Path(module).name, name, i)
                )
        return sorted(found)

    if here.is_file():
        found = best([module])
        if found:
            note = ""
            if len(found) > 1:
                note = f"{len(found)} matches, taken by the lines around it"
            return module, found[0][4], note
    found = best([name for name in _modules(src) if name != module])
    if found:
        _, _, _, other, i = found[0]
        note = f"moved from {module}"
        if len(found) > 1:
            note += "; also at " + ", ".join(f"{f[3]}:{f[4] + 1}" for f in found[1:])
        return other, i, note
    reason = f"{module} is gone" if not here.is_file() else f"{module} no longer has the line"
    changed = _git(
        "log", "--format=%h %s", "-S", "\n".join(block), f"{item['sampled']}..HEAD", "--", module
    ).splitlines()
    if changed:
        commit, _, subject = changed[0].partition(" ")
        reason += f" (it went in {commit}: {subject[:60].rstrip()}...)"
    reason += f", nor has any other module of {', '.join(PATHS)} gained it"
    elsewhere = [
        str(f.relative_to(src))
        for f in sorted((src / "runstore").rglob("*.py"))
        if str(f.relative_to(src)) != module and _matches(f.read_text().splitlines(), block)
    ]
    if elsewhere:
        reason += f" (it is in {', '.join(elsewhere)})"
    return None, None, reason


def cmd_recheck(args: argparse.Namespace) -> int:
    state = json.loads(STATE.read_text())
    done = _results()
    if args.key:
        unknown = [key for key in args.key if key not in done]
        if unknown:
            print(f"no recorded verdict for {', '.join(unknown)}")
            return 2
        order, count, seed = list(args.key), len(args.key), None
    elif args.seed is None:
        print("recheck needs --seed (or --key)")
        return 2
    else:
        killed = sorted(key for key, record in done.items() if record["outcome"] == "killed")
        order, count, seed = list(killed), min(args.count, len(killed)), args.seed
        random.Random(seed).shuffle(order)
    head = _git("rev-parse", "HEAD")
    drawn = f"drawn with seed {seed}, a gone one replaced" if seed is not None else "as given"
    print(
        f"{count} of {len(order)} mutants killed at {state['commit'][:10]} to judge again "
        f"at {head[:10]} ({drawn})",
        flush=True,
    )
    own = WORK / f"recheck-{os.getpid()}"
    try:
        src = _extract(head, head, own)
        return _recheck(src, order, count, done, state["commit"], head, seed, args.minutes)
    finally:
        shutil.rmtree(own, ignore_errors=True)


def _recheck(
    src: Path,
    order: list[str],
    count: int,
    done: dict[str, dict[str, Any]],
    sampled: str,
    head: str,
    seed: int | None,
    minutes: float | None,
) -> int:
    deadline = time.monotonic() + minutes * 60 if minutes else math.inf
    started_all = time.monotonic()
    judged: list[dict[str, Any]] = []
    gone: list[dict[str, Any]] = []
    cache: dict[str, list[str]] = {}
    for key in order:
        if len(judged) >= count or time.monotonic() >= deadline:
            break
        item = {**done[key], "sampled": sampled}
        module = item["module"]
        removed, added = _hunk(item.get("diff", ""))
        base = {
            "key": key,
            "module": module,
            "line": item["line"],
            "operator": item["operator"],
            "occurrence": item["occurrence"],
            "diff": item.get("diff", ""),
            "recorded_check": item.get("check", ""),
            "suite": head[:12],
            "seed": seed,
        }
        if not removed:
            where, at, note = None, None, "the recorded diff removes no line"
        else:
            where, at, note = _locate(
                src, item, removed, lambda name: _sampled(sampled, name, cache)
            )
        if where is None or at is None:
            record = {
                **base,
                "outcome": "gone",
                "reason": note,
                "judged_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
            gone.append(record)
            _append(RECHECK, record)
            print(f"{key}: gone, {note}", flush=True)
            continue
        path = src / where
        original = path.read_text()
        lines = original.splitlines(True)
        ending = lines[at + len(removed) - 1][len(removed[-1]) :] or "\n"
        lines[at : at + len(removed)] = [line + ending for line in added]
        kind = "postgres" if where.startswith("runstore/postgres/") else "sqlite"
        started = time.monotonic()
        try:
            path.write_text("".join(lines))
            verdict = _judge_copy(src, where, TIMEOUTS[kind], started)
        finally:
            path.write_text(original)
        record = {
            **base,
            **verdict,
            "applied": f"{where}:{at + 1}",
            "note": note,
            "judged_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        judged.append(record)
        _append(RECHECK, record)
        print(
            f"{key} at {record['applied']}{f' ({note})' if note else ''}: "
            f"{record['outcome']} {record.get('check', '')} {record['seconds']}s",
            flush=True,
        )
    survivors = [r for r in judged if r["outcome"] == "survived"]
    killed = len(judged) - len(survivors)
    minutes_all = (time.monotonic() - started_all) / 60
    print(
        f"killed {killed} of {len(judged)} (wanted {count}); {len(gone)} gone; "
        f"{minutes_all:.1f} min; verdicts appended to {RECHECK.relative_to(ROOT)}"
    )
    for r in gone:
        print(f"  gone {r['key']}: {r['reason']}")
    for r in survivors:
        diff = " / ".join(line.strip() for line in r["diff"].splitlines())
        print(f"  SURVIVED {r['key']} at {r['applied']}: {diff}")
    return 1 if survivors else 0


def _append(path: Path, record: dict[str, Any]) -> None:
    with path.open("a") as out:
        out.write(json.dumps(record, sort_keys=True) + "\n")


def wilson(killed: int, total: int, z: float = 1.96) -> tuple[float, float]:
    """The 95% Wilson score interval of ``killed / total``."""
    if total == 0:
        return (0.0, 1.0)
    p = killed / total
    centre = p + z * z / (2 * total)
    spread = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total))
    denominator = 1 + z * z / total
    return ((centre - spread) / denominator, (centre + spread) / denominator)


def cmd_report(args: argparse.Namespace) -> int:
    state = json.loads(STATE.read_text())
    sample = json.loads(SAMPLE.read_text())
    done = _results()
    triage: dict[str, dict[str, str]] = json.loads(TRIAGE.read_text()) if TRIAGE.exists() else {}
    judged = [done[i["key"]] for i in sample if i["key"] in done]
    judged = [r for r in judged if r["outcome"] != "no-mutation"]
    killed = [r for r in judged if r["outcome"] in ("killed", "timeout")]
    survivors = [r for r in judged if r["outcome"] == "survived"]
    equivalent = [r for r in survivors if triage.get(r["key"], {}).get("verdict") == "equivalent"]
    gaps = [r for r in survivors if r not in equivalent]
    scored = len(judged) - len(equivalent)
    low, high = wilson(len(killed), scored)
    lines = [
        "# Mutation score (generated by `python mutation/run.py report`)",
        "",
        f"Mutants of `{state['commit'][:12]}` over {', '.join(state['paths'])}: "
        f"{state['population']} in all, a sample of {state['size']} (seed {state['seed']}).",
        "",
        "| judged | killed | survived | equivalent | score (killed / non-equivalent) "
        "| 95% Wilson |",
        "| --- | --- | --- | --- | --- | --- |",
        f"| {len(judged)} of {len(sample)} | {len(killed)} | {len(survivors)} | {len(equivalent)} "
        f"| {len(killed) / scored if scored else 0:.1%} | {low:.1%} to {high:.1%} |",
        "",
        "## By module",
        "",
        "| module | judged | killed | survived | mean seconds |",
        "| --- | --- | --- | --- | --- |",
    ]
    modules = sorted({r["module"] for r in judged})
    for module in modules:
        rs = [r for r in judged if r["module"] == module]
        k = sum(r["outcome"] != "survived" for r in rs)
        mean = sum(float(r["seconds"]) for r in rs) / len(rs)
        lines.append(f"| `{module}` | {len(rs)} | {k} | {len(rs) - k} | {mean:.0f} |")
    lines += ["", "## Survivors", ""]
    for r in sorted(survivors, key=lambda r: (r["module"], r["line"])):
        verdict = triage.get(r["key"], {})
        diff = " / ".join(line.strip() for line in r.get("diff", "").splitlines())[:160]
        lines.append(
            f"- `{r['key']}` (line {r['line']}): `{diff}` — "
            f"**{verdict.get('verdict', 'untriaged')}**: {verdict.get('reason', '')}"
        )
    killers: dict[str, int] = {}
    for r in killed:
        killers[r.get("check") or "?"] = killers.get(r.get("check") or "?", 0) + 1
    lines += ["", "## What killed them", "", "| check | mutants |", "| --- | --- |"]
    lines += [f"| {name} | {n} |" for name, n in sorted(killers.items(), key=lambda kv: -kv[1])]
    total_s = sum(float(r["seconds"]) for r in judged)
    lines += ["", f"Judging took {total_s / 3600:.1f} h of wall time for {len(judged)} mutants."]
    REPORT.write_text("\n".join(lines) + "\n")
    print("\n".join(lines[:12]))
    print(f"({len(gaps)} survivors not marked equivalent; report in {REPORT})")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    record = _results().get(args.key)
    if record is None:
        print(f"no verdict for {args.key}")
        return 1
    print(json.dumps(record, indent=2, sort_keys=True))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    init = commands.add_parser("init", help="enumerate the mutants and pick the sample")
    init.add_argument("--seed", type=int, default=14)
    init.add_argument("--size", type=int, default=320)
    init.add_argument("--commit", default="HEAD")
    run = commands.add_parser("run", help="judge pending mutants until the time is up")
    run.add_argument("--minutes", type=float, default=9.0)
    run.add_argument("--suite", help="take stateful/ and model/ from this commit (default: init's)")
    run.add_argument("--rejudge", action="store_true", help="judge the survivors again")
    run.add_argument(
        "--gaps", action="store_true", help="judge again the survivors not triaged as equivalent"
    )
    run.add_argument("--key", action="append", help="only this mutant (repeatable)")
    run.add_argument("--only", help="only modules under this path")
    run.add_argument("--skip", help="skip modules under this path")
    recheck = commands.add_parser(
        "recheck", help="judge killed mutants again on the current tree (HEAD)"
    )
    recheck.add_argument("--seed", type=int, help="the draw's seed (required unless --key)")
    recheck.add_argument("--count", type=int, default=40)
    recheck.add_argument("--minutes", type=float, help="stop drawing after this long")
    recheck.add_argument(
        "--key", action="append", help="judge this mutant again instead of drawing (repeatable)"
    )
    commands.add_parser("report", help="write mutation/RESULTS.md")
    show = commands.add_parser("show", help="one mutant's verdict")
    show.add_argument("key")
    args = parser.parse_args(argv)
    handler = {
        "init": cmd_init,
        "run": cmd_run,
        "recheck": cmd_recheck,
        "report": cmd_report,
        "show": cmd_show,
    }
    return handler[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
