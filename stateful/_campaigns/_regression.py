"""Regression files: a failing program, written back as plain API calls.

``write_regression`` turns a ``Failure`` (the log of the shrunk example) into a
self-contained pytest module: it opens the store under test, replays every
step (clock moves, calls, reopens, armed faults, raw edits) through a
``runstore.stateful.Judge``, which re-runs after each step the invariants the
machine ran (``check_state``, ``check_transition``, the attempt invariants),
and asserts each answer and the final state exactly as the reference model
computed them. A program of the attempt machine also builds one
``AttemptStore`` per set of options the machine uses (again after every
reopen), makes its attempt calls and asserts the attempts left at the end. A
strategy program re-checks the lease invariants after every transaction. So
the file fails exactly when the original failure recurs, whether a comparison
or an invariant caught it, and passes once it is fixed: it can live in
``tests/regressions/``. It needs ``pytest`` and ``runstore`` with the
``conformance`` extra (for the judge), not Hypothesis itself.

A failure on the reference model's own history (``ReferenceInvariantViolation``)
is a defect of the suite, not of the store: its file says so, and replays the
program on the reference model alone (``Judge(..., reference=True)``), failing
while the suite defect is there.
"""

from __future__ import annotations

import hashlib
import importlib
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import attrs

from runstore._values import StoreState
from runstore.attempts import ABSENT, Attempt

from .._base._domain import START_MS
from .._base._observe import (
    AttemptPerformed,
    ClockSet,
    Failure,
    Faulted,
    Performed,
    Reopened,
    Transacted,
)
from .._base._steps import Call, Crashed, Raised
from .._checks._faults import FAULT_BUDGET
from .._machines._attempts import CONFIGS, IN_PROGRESS, LARGEST_CAP
from .._machines._consensus import CONSENSUS_RUNS, Refused
from ._summary import summarize

_PUBLIC_MODULES = ("runstore", "runstore.consensus", "runstore.sqlite", "runstore.attempts")
#: The attempt stores of a regression file, by the machine's names for their options.
_ATTEMPTS = "attempts"
#: Where the error an operation raises comes from: run stores, attempt stores.
_RUN_STORE_ERROR = ("runstore", "RunStoreError")
_ATTEMPT_STORE_ERROR = ("runstore.attempts", "AttemptStoreError")


class _Imports:
    """Collects the names a rendered literal needs, by module."""

    def __init__(self) -> None:
        self.names: dict[str, set[str]] = {}

    def need(self, module: str, name: str) -> str:
        self.names.setdefault(module, set()).add(name)
        return name

    def lines(self) -> list[str]:
        out = []
        for module in sorted(self.names):
            names = sorted(self.names[module])
            joined = ", ".join(names)
            line = f"from {module} import {joined}"
            if len(line) > 99:
                inner = "".join(f"    {name},\n" for name in names)
                line = f"from {module} import (\n{inner})"
            out.append(line)
        return out


def _public_home(cls: type) -> str:
    for module_name in _PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        if getattr(module, cls.__name__, None) is cls:
            return module_name
    return cls.__module__


def literal(value: Any, imports: _Imports) -> str:
    """Python source that evaluates to ``value`` (attrs values by constructor)."""
    if value is None or type(value) in (bool, int, float, str):
        return repr(value)
    if value is ABSENT:
        return imports.need("runstore.attempts", "ABSENT")
    if isinstance(value, str):
        # A str subclass (malformed input): rebuild an equivalent subclass.
        return f"type({type(value).__name__!r}, (str,), {{}})({str(value)!r})"
    if isinstance(value, tuple):
        inner = ", ".join(literal(item, imports) for item in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if isinstance(value, list):
        return "[" + ", ".join(literal(item, imports) for item in value) + "]"
    if isinstance(value, dict):
        items = ", ".join(f"{literal(k, imports)}: {literal(v, imports)}" for k, v in value.items())
        return "{" + items + "}"
    if isinstance(value, frozenset):
        return "frozenset({" + ", ".join(literal(item, imports) for item in value) + "})"
    if isinstance(value, Refused):
        return repr(("refused", value.code))
    if attrs.has(type(value)):
        cls = type(value)
        name = imports.need(_public_home(cls), cls.__name__)
        fields = ", ".join(
            f"{field.name}={literal(getattr(value, field.name), imports)}"
            for field in _shown_fields(value)
        )
        return f"{name}({fields})"
    raise TypeError(f"cannot write {type(value).__name__} into a regression file")


def _shown_fields(value: Any) -> list[Any]:
    """The constructor fields of an attrs value to spell out: all but those
    left ``ABSENT`` by default (an attempt's JSON fields that were not given)."""
    return [
        field
        for field in attrs.fields(type(value))
        if field.init and not (field.default is ABSENT and getattr(value, field.name) is ABSENT)
    ]


def pretty(value: Any, imports: _Imports, indent: int = 0, width: int = 96) -> str:
    """``literal`` laid out over several lines when one line would be too wide
    (one element or field per line, with trailing commas)."""
    flat = literal(value, imports)
    if indent + len(flat) <= width:
        return flat
    pad = " " * (indent + 4)
    if isinstance(value, tuple | list) and value:
        items = [pretty(item, imports, indent + 4, width) for item in value]
        inner = "".join(f"{pad}{item},\n" for item in items)
        opening, closing = ("(", ")") if isinstance(value, tuple) else ("[", "]")
        return f"{opening}\n{inner}{' ' * indent}{closing}"
    if attrs.has(type(value)) and not isinstance(value, Refused):
        cls = type(value)
        name = imports.need(_public_home(cls), cls.__name__)
        parts = [
            f"{pad}{field.name}={pretty(getattr(value, field.name), imports, indent + 4, width)},\n"
            for field in _shown_fields(value)
        ]
        return f"{name}(\n{''.join(parts)}{' ' * indent})"
    return flat


def _call_source(target: str, op: Call, imports: _Imports, *head: str) -> str:
    """``judge.call('method', args...)`` (or ``judge.attempt(...)`` with ``head``)."""
    positional = [literal(v, imports) for k, v in op.arguments if k not in op.keywords]
    keywords = [f"{k}={literal(v, imports)}" for k, v in op.arguments if k in op.keywords]
    leading = [repr(item) for item in head] + [repr(op.method)]
    return f"{target}({', '.join(leading + positional + keywords)})"


def _expect(
    source: str, expected: Any, imports: _Imports, error: tuple[str, str] = _RUN_STORE_ERROR
) -> list[str]:
    """The judged call and the reference's answer (a refusal as ``Raised``:
    the judge answers an error's code and method rather than raising it)."""
    del error  # the judge reports both kinds of error as ``Raised``
    if isinstance(expected, Raised):
        name = imports.need("runstore.stateful", "Raised")
        return [f"assert {source} == {name}({expected.code!r}, {expected.method!r})"]
    if isinstance(expected, Crashed):
        return [f"{source}  # the reference failed here: {expected.exception}"]
    if expected is None or type(expected) is bool:
        return [f"assert {source} is {expected!r}"]
    return [f"assert {source} == {literal(expected, imports)}"]


def _store_steps(
    failure: Failure, imports: _Imports, *, faults: bool, reference: bool = False
) -> list[str]:
    """The program's steps. On the reference (a suite defect) reopens are left
    out and a lasting fault, which the machine never applied to the
    reference, is skipped."""
    lines: list[str] = []
    attempts = failure.machine == "attempts"
    for entry in failure.log:
        if isinstance(entry, ClockSet):
            lines.append(f"clock.set({entry.ms})")
        elif isinstance(entry, Reopened):
            if reference:
                continue
            lines.append("store.close()")
            lines.append("store = reopen(clock, path)")
            if attempts:
                lines.append(f"{_ATTEMPTS} = open_attempts(store)")
                lines.append(f"judge.reopened(store, {_ATTEMPTS})")
            else:
                lines.append("judge.reopened(store)")
        elif isinstance(entry, AttemptPerformed):
            if reference and entry.plan is not None and _lasting(entry.expected):
                continue
            lines.extend(_attempt_step(entry, imports, reference=reference))
        elif isinstance(entry, Faulted):
            source = _call_source("judge.call", entry.call, imports)
            if reference:
                if not _lasting(entry.expected):
                    lines.extend(_expect(source, entry.expected, imports))
                continue
            imports.need("runstore.sqlite", "FaultPlan")
            plan = ", ".join(literal(fault, imports) for fault in entry.plan)
            lines.append(f"store._install_faults(FaultPlan({plan}))")
            lines.append("try:")
            lines.extend("    " + line for line in _expect(source, entry.expected, imports))
            lines.append("finally:")
            lines.append("    store._install_faults(None)")
        elif isinstance(entry, Performed):
            if entry.call.method == "raw_write_state":
                run_id, text = entry.call.get("run_id"), entry.call.get("text")
                lines.append(
                    f"assert judge.made('raw_write_state', raw_write_state(store, {run_id!r}, "
                    f"{text!r}), run_id={run_id!r}, text={text!r}) is {entry.expected!r}"
                )
            else:
                source = _call_source("judge.call", entry.call, imports)
                lines.extend(_expect(source, entry.expected, imports))
    return lines


def _lasting(expected: Any) -> bool:
    return isinstance(expected, Raised) and expected.code == "persistence_failed"


def _attempt_step(
    entry: AttemptPerformed, imports: _Imports, *, reference: bool = False
) -> list[str]:
    """An attempt call on the attempt store its options name, under an armed
    fault when there is one."""
    source = _call_source("judge.attempt", entry.call, imports, entry.config)
    expect = _expect(source, entry.expected, imports, _ATTEMPT_STORE_ERROR)
    if entry.plan is None or reference:
        return expect
    imports.need("runstore.sqlite", "FaultPlan")
    plan = ", ".join(literal(fault, imports) for fault in entry.plan)
    return [
        f"store._install_faults(FaultPlan({plan}))",
        "try:",
        *("    " + line for line in expect),
        "finally:",
        "    store._install_faults(None)",
    ]


def _attempt_opener(
    attempt_spec: str | None, imports: _Imports, *, reference: bool = False
) -> tuple[list[str], list[str]]:
    """Module-level lines defining ``open_attempts`` (one ``AttemptStore`` per
    set of options of the machine, by name), and the import lines they need:
    ``AttemptStore`` is ``runstore.attempts``'s, or ``attempt_spec``'s factory
    (the reference's ``ModelAttemptStore`` for a suite defect)."""
    if reference:
        module_imports = ["from runstore.model import ModelAttemptStore as AttemptStore"]
    elif attempt_spec is None:
        module_imports = []
        imports.need("runstore.attempts", "AttemptStore")
    else:
        module, _, attribute = attempt_spec.partition(":")
        alias = "" if attribute == "AttemptStore" else " as AttemptStore"
        module_imports = [f"from {module} import {attribute}{alias}"]
    lines = [
        "def open_attempts(store):",
        '    """The attempt stores over ``store``, one per set of options."""',
        "    return {",
    ]
    for name, config in CONFIGS.items():
        options = ", ".join(f"{k}={literal(v, imports)}" for k, v in config.options().items())
        lines.append(f"        {name!r}: AttemptStore(store, {options}),")
    lines.append("    }")
    return lines, module_imports


def _final_attempts(attempts: tuple[Attempt, ...], imports: _Imports) -> list[str]:
    """The attempt table at the end (each attempt store reads the whole table)."""
    first = next(iter(CONFIGS))
    return [
        f"expected_attempts = {pretty(attempts, imports, 8)}",
        f"assert {_ATTEMPTS}[{first!r}].state() == expected_attempts",
    ]


def _consensus_steps(failure: Failure, imports: _Imports, *, reference: bool = False) -> list[str]:
    lines: list[str] = []
    runs = literal(CONSENSUS_RUNS, imports)
    judge = imports.need("runstore.stateful", "judge_leases")
    lines.append(f"leases = read_leases(host, strategy, {runs})")
    flag = ", reference=True" if reference else ""
    for entry in failure.log:
        if not isinstance(entry, Transacted):
            continue
        calls = ", ".join(
            f"({op.method!r}, {literal(tuple(v for _, v in op.arguments), imports)})"
            for op in entry.calls
        )
        expected = literal(list(entry.expected), imports)
        rollback = ", rollback=True" if entry.rollback else ""
        lines.append(f"calls = [{calls}]")
        lines.append("previous = leases")
        lines.append(f"answers = transact(host, strategy, calls{rollback})")
        # The leases after this transaction, judged by the lease invariants
        # (on the reference's own leases first, as the machine does).
        lines.append(f"leases = read_leases(host, strategy, {runs})")
        lines.append(f"{judge}(previous, leases, calls{flag})")
        lines.append(f"assert answers == {expected}")
        if entry.rollback:
            lines.append("assert leases == previous  # a rolled-back transaction leaves no trace")
    if failure.expected_state is not None:
        by_run = {lease.run_id: lease for lease in failure.expected_state.leases}
        expected_leases = tuple(by_run.get(run_id) for run_id in CONSENSUS_RUNS)
        lines.append(f"assert leases == {literal(expected_leases, imports)}")
    return lines


_STORE_HELPERS = '''
def raw_write_state(store, run_id, text):
    """Edit a run's state behind the store's back (and touch its row)."""
    hook = getattr(store, "raw_write_state", None)
    if callable(hook):
        return bool(hook(run_id, text))

    def body(tx):
        connection = tx.connection
        found = connection.execute(
            "UPDATE flows_run_state SET state_json = ?2 WHERE run_id = ?1", (run_id, text)
        ).rowcount
        if not found:
            return False
        connection.execute("UPDATE flows_runs SET status = status WHERE run_id = ?1", (run_id,))
        return True

    return bool(store._write("raw_write_state", body))
'''

_CONSENSUS_HELPERS = '''
class RollBack(Exception):
    """Rolls a transaction back on purpose."""


def transact(host, strategy, calls, rollback=False):
    """Make strategy ``calls`` in one write transaction of ``host``."""
    answers = []

    def body(tx):
        for method, args in calls:
            try:
                if method == "heartbeat_many" and not hasattr(strategy, method):
                    run_ids, owner, now_ms = args  # the reference renews run by run
                    answers.append({r: strategy.heartbeat(tx, r, owner, now_ms) for r in run_ids})
                else:
                    answers.append(getattr(strategy, method)(tx, *args))
            except ConsensusError as error:
                answers.append(("refused", error.code))
        if rollback:
            raise RollBack

    with contextlib.suppress(RollBack):
        host._write("consensus", body)
    return answers


def read_leases(host, strategy, run_ids):
    return host._write("lease", lambda tx: tuple(strategy.lease(tx, r) for r in run_ids))
'''


def _opener(
    target: str, spec: str | None, kind: str, imports: _Imports
) -> tuple[list[str], list[str]]:
    """Module-level lines defining ``make_strategy`` and/or ``open_store``,
    and the import lines they need. ``kind="reference"`` (a suite defect)
    opens the reference model, and its strategy is ``ModelConsensus``."""
    if kind == "reference":
        imports.need("runstore.model", "ModelRunStore")
        imports.need("runstore.model", "ModelConsensus")
        return [
            "def make_strategy():",
            "    return ModelConsensus()",
            "",
            "",
            "def open_store(clock, path):",
            "    return ModelRunStore(clock=clock)",
        ], []
    if spec is not None and kind == "store":
        module, _, attribute = spec.partition(":")
        return [], [f"from {module} import {attribute} as open_store"]
    if spec is not None:
        module, _, attribute = spec.partition(":")
        strategy_import = [f"from {module} import {attribute} as make_strategy"]
        where = "path"
    elif target == "model" or not target.startswith("sqlite-"):
        imports.need("runstore.model", "ModelRunStore")
        return ["def open_store(clock, path):", "    return ModelRunStore(clock=clock)"], []
    else:
        strategy = "LocalConsensus" if "local" in target else "SqlConsensus"
        imports.need("runstore.consensus", strategy)
        strategy_import = []
        where = "path" if "file" in target else '":memory:"'
    lines = []
    if spec is None:
        lines += ["def make_strategy():", f"    return {strategy}()", "", ""]
    lines += [
        "def open_store(clock, path):",
        f"    return runstore.open({where}, clock=clock, consensus=make_strategy())",
    ]
    return lines, [*strategy_import, "import runstore"]


def render_regression(
    failure: Failure,
    *,
    spec: str | None = None,
    kind: str = "store",
    whole_state: bool = True,
    leases: bool = True,
    faults: bool = False,
    seed: int | None = None,
    attempt_spec: str | None = None,
    stand_in: bool = False,
) -> str:
    """The source of a pytest module that replays ``failure``.

    ``stand_in``: the store is an async one, opened in the file through the
    suite's synchronous stand-in (``blocking_factory``), as the machines did.

    ``attempt_spec`` (``MODULE:FACTORY``) names the attempt store class under
    test, used in place of ``runstore.attempts.AttemptStore``. A suite defect
    (``ReferenceInvariantViolation``) is replayed on the reference alone."""
    reference = is_suite_defect(failure)
    if reference:
        kind, faults, attempt_spec = "reference", False, None
    imports = _Imports()
    imports.need("runstore", "ManualClock")
    opener, module_imports = _opener(failure.target, spec, kind, imports)
    check = failure.check
    helpers: list[str] = []
    if failure.machine == "consensus":
        imports.need("runstore.consensus", "ConsensusError")
        module_imports = sorted({*module_imports, "import runstore", "import contextlib"})
        # The strategy is hosted in memory: keep ``make_strategy``, drop ``open_store``.
        if "def open_store(clock, path):" in opener:
            opener = opener[: opener.index("def open_store(clock, path):")]
        while opener and not opener[-1]:
            opener.pop()
        steps = _consensus_steps(failure, imports, reference=reference)
        body = [
            "strategy = make_strategy()",
            'host = runstore.open(":memory:", clock=ManualClock(0), consensus=strategy)',
            "try:",
            f"    for run_id in {literal(CONSENSUS_RUNS, imports)}:",
            '        host.create(run_id, "{}")',
            *("    " + line for line in steps),
            "finally:",
            "    host.close()",
        ]
        helpers.append(_CONSENSUS_HELPERS)
        signature = "()"
    else:
        steps = _store_steps(failure, imports, faults=faults, reference=reference)
        if failure.expected_state is not None and not reference:
            steps += _final_state(
                failure.expected_state, imports, whole_state=whole_state, leases=leases
            )
        judge = imports.need("runstore.stateful", "Judge")
        options = [f"whole_state={whole_state!r}", f"leases={leases!r}"]
        if reference:
            options.append("reference=True")
        if failure.machine == "attempts":
            attempt_lines, attempt_imports = _attempt_opener(
                attempt_spec, imports, reference=reference
            )
            opener = [*opener, "", "", *attempt_lines] if opener else attempt_lines
            module_imports = [*module_imports, *attempt_imports]
            caps = {name: config.max_checkpoint_bytes for name, config in CONFIGS.items()}
            options += [
                f"attempts={_ATTEMPTS}",
                f"in_progress_states={literal(tuple(sorted(IN_PROGRESS)), imports)}",
                f"caps={literal(caps, imports)}",
                f"largest_cap={LARGEST_CAP}",
            ]
            steps = [
                f"{_ATTEMPTS} = open_attempts(store)",
                f"judge = {judge}(store, {', '.join(options)})",
                *steps,
            ]
            if failure.expected_attempts is not None and not reference:
                steps += _final_attempts(failure.expected_attempts, imports)
        else:
            steps = [f"judge = {judge}(store, {', '.join(options)})", *steps]
        body = [
            f"clock = ManualClock({START_MS})",
            'path = tmp_path / "store.db"',
            "store = reopen(clock, path)",
            "try:",
            *("    " + line for line in steps),
            "finally:",
            "    store.close()",
        ]
        if any("raw_write_state(store" in line for line in steps):
            helpers.append(_STORE_HELPERS)
        if faults:
            imports.need("runstore.sqlite", "RetryPolicy")
            helper = _REOPEN_WITH_RETRIES.format(budget=FAULT_BUDGET)
        else:
            helper = _REOPEN
        if stand_in and not reference:
            imports.need("runstore.stateful._targets._blocking", "blocking_factory")
            helper = helper.replace(
                "store = open_store(clock, path)",
                "store = blocking_factory(open_store)(clock, path)",
            ).replace(
                "return open_store(clock, path)", "return blocking_factory(open_store)(clock, path)"
            )
        helpers.append(helper)
        signature = "(tmp_path)"
    if reference:
        body = [_unasserted(line) for line in body]
    seed_note = "" if seed is None else f" (seed {seed})"
    # The docstring is not raw: backslashes and quotes in values are escaped.
    summary = summarize(failure, title="found", width=88)
    summary = summary.replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
    message = textwrap.indent(summary, "    ")
    uses_pytest = any("pytest." in line for line in body)
    if reference:
        invariant = suite_defect_invariant(failure)
        head = (
            f'"""Suite defect: the reference model broke {invariant}, found by runstore fuzz.\n\n'
            "This is a defect of the conformance suite (its reference model or its\n"
            "invariants), not a failure of the store under test; please report it.\n\n"
            f"Target under test: {failure.target}{seed_note}.\n\n"
            f"The failure as the suite reported it:\n\n{message}\n\n"
            "The program is replayed on the reference model alone; the judge re-checks\n"
            'every invariant after each step, so this file fails while the defect is there.\n"""'
        )
        name = f"test_suite_defect_{_snake(invariant)}"
        doc = f"The reference model keeps {invariant} on this program."
    else:
        head = (
            f'"""Regression: {check}, found by runstore fuzz.\n\n'
            f"Target: {failure.target}{seed_note}.\n\n"
            f"The failure as the suite reported it:\n\n{message}\n\n"
            "Every expected value below was computed by the reference model; after\n"
            "every step the judge re-checks the invariants the suite checked, so the\n"
            'file fails exactly when the original failure recurs.\n"""'
        )
        name = f"test_{_snake(check)}_{_snake(failure.target)}"
        doc = f"The shrunk program gets the reference model's answers ({check})."
    parts = [
        head,
        "\n".join(
            line
            for line in (
                "import pytest" if uses_pytest else "",
                *sorted(set(module_imports)),
                *imports.lines(),
            )
            if line
        ),
    ]
    if opener:
        parts.append("\n".join(opener))
    parts.extend(helper.strip("\n") for helper in helpers)
    test = [
        f"def {name}{signature}:",
        f'    """{doc}"""',
        *(("    " + line) if line else "" for line in body),
    ]
    parts.append("\n".join(test))
    return "\n\n\n".join(parts) + "\n"


def is_suite_defect(failure: Failure) -> bool:
    """Whether ``failure`` is the suite's own: an invariant broken on the
    reference's own history."""
    return failure.check == "ReferenceInvariantViolation"


def suite_defect_invariant(failure: Failure) -> str:
    """The invariant the reference broke (from the error text)."""
    text = failure.error.removeprefix("ReferenceInvariantViolation: ")
    return text.split(" ", 1)[0].rstrip(":") or "an invariant"


def _unasserted(line: str) -> str:
    """A suite defect's file checks invariants only: the judged call is kept,
    the comparison with the reference's answer is dropped."""
    stripped = line.lstrip()
    pad = line[: len(line) - len(stripped)]
    if stripped.startswith("assert judge.") and " == " in stripped:
        return pad + stripped.removeprefix("assert ").rsplit(" == ", 1)[0]
    if stripped.startswith("assert judge.made(") and stripped.endswith((" is True", " is False")):
        return pad + stripped.removeprefix("assert ").rsplit(" is ", 1)[0]
    if stripped.startswith(("assert answers == ", "assert leases ==")):
        return pad + "pass  # answers and leases are not compared: this is the reference"
    return line


_REOPEN = """
def reopen(clock, path):
    return open_store(clock, path)
"""

_REOPEN_WITH_RETRIES = '''
def reopen(clock, path):
    """Open the store; transient faults are replayed at once, {budget} attempts in all."""
    store = open_store(clock, path)
    store._retry_policy = RetryPolicy(
        max_attempts={budget}, budget_ms=60_000, base_delay_ms=0.0, max_delay_ms=0.0
    )
    return store
'''


def _final_state(
    state: StoreState, imports: _Imports, *, whole_state: bool, leases: bool
) -> list[str]:
    if whole_state:
        if not leases:
            state = attrs.evolve(state, leases=())
            imports.need("attrs", "evolve")
            return [
                f"expected = {pretty(state, imports, 8)}",
                "assert evolve(store.state(), leases=()) == expected",
            ]
        return [f"expected = {pretty(state, imports, 8)}", "assert store.state() == expected"]
    lines = []
    for row in state.rows:
        lines.append(f"assert store.get({row.run_id!r}) == {literal(row, imports)}")
    facts: dict[str, list[Any]] = {}
    for fact in state.facts:
        facts.setdefault(fact.run_id, []).append(fact)
    for run_id, stream in facts.items():
        lines.append(f"assert store.ownership_facts({run_id!r}) == {literal(stream, imports)}")
    lines.append(f"assert store.revision() == {state.revision}")
    lines.append(f"assert store.changes(0) == {literal(list(state.changes), imports)}")
    return lines


def _snake(text: str) -> str:
    text = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", text)
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")[:60]


def _ruff(arguments: list[str], source: str) -> str:
    try:
        done = subprocess.run(
            [sys.executable, "-m", "ruff", *arguments, "--stdin-filename", "regression.py", "-"],
            input=source,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return source
    return done.stdout if done.returncode == 0 and done.stdout else source


def _formatted(source: str) -> str:
    """``source`` with sorted imports and ``ruff format`` applied when ruff is
    installed (so the file can join a ruff-checked test suite as it is);
    otherwise unchanged."""
    return _ruff(["format"], _ruff(["check", "--fix-only", "--select", "I"], source))


def write_regression(failure: Failure, out_dir: Path, **options: Any) -> Path:
    """Write the regression module for ``failure`` into ``out_dir``; return its path."""
    source = _formatted(render_regression(failure, **options))
    digest = hashlib.sha256(source.encode()).hexdigest()[:8]
    if is_suite_defect(failure):
        name = f"test_suite_defect_{_snake(suite_defect_invariant(failure))}_{digest}.py"
    else:
        name = f"test_regression_{_snake(failure.target)}_{_snake(failure.check)}_{digest}.py"
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / name
    path.write_text(source, encoding="utf-8")
    return path
