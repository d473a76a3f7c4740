"""One screen that says what failed: the machine, the program, the check, both sides.

``summarize(failure)`` renders a ``Failure`` (a machine's log of the failing
example, the last one Hypothesis ran, which is the shrunk one) in at most
about fifty lines: which machine and target, which invariant or comparison
fired, its message (the reference's and the store's values), and the program
as the calls it made with the reference's answers, in a compact notation
(``h1:1:n0`` for an owner, ``snap(running,h1:1:n0,100000)`` for a snapshot).
``run_conformance`` adds it to the failure it raises, and a regression file
written by ``runstore fuzz`` carries it in its docstring.
"""

from __future__ import annotations

import re
import textwrap
from typing import Any

from .._base._observe import (
    AttemptPerformed,
    ClockSet,
    Failure,
    Faulted,
    Performed,
    Reopened,
    Transacted,
)
from .._base._steps import Call

#: The program's steps shown in full; a longer one shows its head and tail.
MAX_STEPS = 36
HEAD_STEPS = 6
LINE_WIDTH = 150
MESSAGE_LINES = 12

_MACHINES = {
    "store": "run-store machine (RunStoreComparison)",
    "consensus": "strategy machine (ConsensusComparison)",
    "attempts": "attempt machine (RunAttemptComparison)",
}

_OWNER = re.compile(r"OwnerId\(host_id='([^']*)', pid=(\d+), nonce='([^']*)'\)")
_SNAPSHOT = re.compile(r"RunSnapshot\(status='(\w+)', owner=([^,()]+), heartbeat_at_ms=(\w+)\)")
_EVIDENCE = re.compile(
    r"LivenessEvidence\(expected_owner=([^,()]+), checked_at_ms=(\d+), kind='([^']+)'\)"
)
_ROW = re.compile(r"RunRow\(run_id='([^']*)', status='(\w+)'[^()]*(?:\([^()]*\)[^()]*)*\)")


def compact(text: str, *, rows: bool = True) -> str:
    """``text`` (reprs of calls and outcomes) with owners, snapshots and
    evidence abbreviated, and rows too unless ``rows`` is false."""
    text = _OWNER.sub(r"\1:\2:\3", text)
    text = _SNAPSHOT.sub(r"snap(\1,\2,\3)", text)
    text = _EVIDENCE.sub(r"evidence(\3 about \1 at \2)", text)
    return _ROW.sub(r"row(\1,\2,...)", text) if rows else text


def _clip(line: str, width: int) -> str:
    return line if len(line) <= width else line[: width - 3] + "..."


def _call(op: Call) -> str:
    return compact(op.describe())


def _answer(value: Any) -> str:
    return compact(repr(value))


def program_lines(failure: Failure, width: int = LINE_WIDTH - 8) -> list[str]:
    """The failing example's steps, one line each, clipped to ``width``."""
    lines = [f"setup: {', '.join(failure.setup)}"] if failure.setup else []
    for entry in failure.log:
        if isinstance(entry, ClockSet):
            lines.append(f"clock -> {entry.ms}")
        elif isinstance(entry, Performed):
            lines.append(f"{_call(entry.call)} -> {_answer(entry.expected)}")
        elif isinstance(entry, Reopened):
            lines.append("store crashed and reopened")
        elif isinstance(entry, Faulted):
            lines.append(
                f"with fault {entry.plan!r}: {_call(entry.call)} -> {_answer(entry.expected)}"
            )
        elif isinstance(entry, Transacted):
            calls = "; ".join(_call(op) for op in entry.calls)
            answers = ", ".join(_answer(value) for value in entry.expected)
            tail = " (rolled back)" if entry.rollback else ""
            lines.append(f"tx[{calls}] -> [{answers}]{tail}")
        elif isinstance(entry, AttemptPerformed):
            lines.append(
                f"attempts[{entry.config}].{_call(entry.call)} -> {_answer(entry.expected)}"
            )
    return [_clip(line, width) for line in lines]


def summarize(
    failure: Failure, *, title: str = "conformance failure", width: int = LINE_WIDTH
) -> str:
    """The one-screen account of ``failure``, no line wider than ``width``."""
    machine = _MACHINES.get(failure.machine, failure.machine)
    check, _, message = failure.error.partition(": ")
    message_lines = [
        wrapped
        for line in message.splitlines()
        if line.strip()
        for wrapped in textwrap.wrap(compact(line, rows=False), width - 2, subsequent_indent="    ")
    ]
    if len(message_lines) > MESSAGE_LINES:
        hidden = len(message_lines) - MESSAGE_LINES
        message_lines = [*message_lines[:MESSAGE_LINES], f"... ({hidden} more lines)"]
    steps = program_lines(failure, width - 8)
    shown = [f"  {number:>3}. {line}" for number, line in enumerate(steps, 1)]
    if len(shown) > MAX_STEPS:
        hidden = len(shown) - MAX_STEPS
        shown = [
            *shown[:HEAD_STEPS],
            f"       ... {hidden} steps ...",
            *shown[-(MAX_STEPS - HEAD_STEPS) :],
        ]
    out = [
        _clip(f"{title}: {failure.check} in the {machine}, target {failure.target}", width),
        f"check that failed: {check or failure.check}",
        *("  " + line for line in message_lines),
        f"program ({len(steps)} steps; answers are the reference's):",
        *shown,
    ]
    return "\n".join(out)
