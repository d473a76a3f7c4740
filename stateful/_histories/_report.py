"""Readable and re-checkable files for a history that is not linearizable.

``write_violation(verdict, directory)`` writes three files for one object's
violation: ``<name>.txt``, the minimal offending sub-history as a table (one
line per operation: who, when, what was asked, what came back, the clock
readings) followed by the search's explanation; ``<name>.jsonl``, the
same operations as a history file that ``load_history`` reads and
``check_history`` checks again; and ``<name>.html``, the same operations as
a timeline (``runstore.stateful._histories._timeline``). Run state is shown
by length and digest only, never as text (it may hold credentials); the
``.jsonl`` file holds it whole (it is needed to replay) and is created 0600.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ._codec import encode
from ._history import Operation
from ._linearize import PartitionVerdict
from ._text import answer_text, result_text
from ._timeline import write_timeline


def _unit(ops: Sequence[Operation]) -> tuple[str, float]:
    """A time unit that keeps the table's numbers readable for this span."""
    ends = [op.returned_ns or op.invoked_ns for op in ops] + [op.invoked_ns for op in ops]
    span = max(ends) - min(ends) if ends else 0
    if span < 10_000:
        return "ns", 1.0
    if span < 10_000_000:
        return "us", 1e3
    return "ms", 1e6


def render_operations(ops: Sequence[Operation]) -> list[str]:
    """A table of ``ops``: times since the first invocation."""
    if not ops:
        return ["  (no operations)"]
    origin = min(op.invoked_ns for op in ops)
    unit, scale = _unit(ops)
    lines = []
    for number, op in enumerate(ops, 1):
        start = (op.invoked_ns - origin) / scale
        end = "   ...   " if op.returned_ns is None else f"{(op.returned_ns - origin) / scale:9.3f}"
        clock = f"  clock {list(op.clock_ms)}" if op.clock_ms else ""
        lines.append(
            f"  {number:>3}. {op.id:<18} [{start:9.3f}, {end}] {unit}  {op.call_text()}\n"
            f"        -> {answer_text(op)}{clock}"
        )
    return lines


def render_violation(verdict: PartitionVerdict) -> str:
    """The readable report of one object's violation."""
    ops = verdict.minimal if verdict.minimal is not None else verdict.history
    number = {op.id: index for index, op in enumerate(ops, 1)}
    lines = [
        f"Not linearizable: object {verdict.key} (runs: {', '.join(verdict.runs) or '-'})",
        "",
        f"No order of these {len(ops)} operations that respects real time is a legal run of",
        "the reference model (runstore.model.ModelRunStore) answering what each answered.",
        (
            f"Shrunk from {len(verdict.history)} operations of this object."
            if verdict.minimal is not None
            else "The whole object, not shrunk."
        ),
        "Times since the first invocation, [invoked, returned]; an operation that returned",
        "before another was invoked must come first.",
        "",
        *render_operations(ops),
    ]
    explanation = verdict.explanation
    if explanation is not None:
        lines += ["", f"The longest legal order found ({len(explanation.order)} of {len(ops)}):"]
        for op, result in explanation.order:
            lines.append(f"  #{number.get(op.id, '?')} {op.method} -> {result_text(result)}")
        if not explanation.order:
            lines.append("  (none: no operation can go first)")
        lines.append("After it, every operation that could go next disagrees with the model:")
        for op, result in explanation.blocked:
            lines.append(
                f"  #{number.get(op.id, '?')} {op.call_text()}\n"
                f"      recorded {answer_text(op)}; the model answers {result_text(result)}"
            )
    return "\n".join(lines) + "\n"


def operation_events(op: Operation) -> list[dict[str, Any]]:
    """The history lines of one operation (as ``HistoryRecorder`` writes them)."""
    events: list[dict[str, Any]] = [
        {
            "e": "invoke",
            "op": op.id,
            "process": op.process,
            "pid": op.pid,
            "thread": op.thread,
            "method": op.method,
            "args": encode(tuple(op.args)),
            "kwargs": encode(dict(op.kwargs)),
            "t": op.invoked_ns,
        }
    ]
    events += [{"e": "clock", "op": op.id, "ms": ms} for ms in op.clock_ms]
    if op.status == "ok":
        events.append({"e": "return", "op": op.id, "t": op.returned_ns, "value": encode(op.value)})
    elif op.status == "error":
        code, kind = op.error, None
        if code is not None and code.startswith("exception:"):
            code, kind = None, op.error.split(":", 1)[1] if op.error else None
        events.append(
            {
                "e": "error",
                "op": op.id,
                "t": op.returned_ns,
                "code": code,
                "type": kind,
                "unknown": op.unknown,
            }
        )
    return events


def write_history(ops: Iterable[Operation], path: str | os.PathLike[str]) -> Path:
    """Write ``ops`` (``Operation`` values) to ``path`` as a history file, mode
    0600, that ``load_history`` reads back; return its ``Path``."""
    target = Path(path)
    descriptor = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        for op in ops:
            for event in operation_events(op):
                handle.write(json.dumps(event, separators=(",", ":")) + "\n")
    return target


def _file_name(key: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", key)[:80] or "object"


def write_violation(verdict: PartitionVerdict, directory: str | os.PathLike[str]) -> list[Path]:
    """Write the readable report, the re-checkable history and the HTML timeline of one
    violation, the ``verdict`` of the partition (or rule) that failed, into ``directory``
    (created if missing); return the three paths: the report's (``.txt``), the history's
    (``.jsonl``) and the timeline's (``.html``, a page that stands alone, with no run state)."""
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    name = f"violation-{_file_name(verdict.key)}"
    text = folder / f"{name}.txt"
    text.write_text(render_violation(verdict), encoding="utf-8")
    ops = verdict.minimal if verdict.minimal is not None else verdict.history
    history = write_history(ops, folder / f"{name}.jsonl")
    return [text, history, write_timeline(verdict, folder / f"{name}.html")]
