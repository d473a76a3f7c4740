"""Hostile input: every argument of every operation, fed values it must refuse.

A refusal is an ``InvalidRunError`` (code ``invalid_run``) for the operation
that was called, raised with no exception chain, carrying no trace of the
refused text (run state and identifiers may hold credentials), and leaving the
store's whole state exactly as it was. The values admitted at each edge are
pinned too, so the limits cannot drift by one in either direction.

The second half tests ``runstore._boundary`` directly at its limits.
"""

from __future__ import annotations

import enum
import json
import math
from collections import namedtuple
from collections.abc import Callable, Iterator
from decimal import Decimal
from fractions import Fraction
from types import SimpleNamespace
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runstore import (
    Activated,
    CancelRequested,
    ClaimChanged,
    Claimed,
    ClaimLost,
    FenceLost,
    HeartbeatFresh,
    InvalidRunError,
    LivenessEvidence,
    LivenessUnconfirmed,
    ManualClock,
    NotFound,
    OwnerId,
    RunNotFoundError,
    RunRow,
    RunSnapshot,
    RunStore,
    RunStoreError,
    Transitioned,
    TransitionGuard,
    Updated,
)
from runstore import _boundary as boundary

MAX_INT = 2**53 - 1
SECRET = "s3cr3t-token"
"""A stand-in credential. It must never surface in a refusal."""

OWNER = OwnerId("host-a", 4102, "nonce-a")
CLAIMANT = OwnerId("host-b", 77, "nonce-b")
THIEF = OwnerId("host-c", 9, "nonce-c")

PENDING = RunSnapshot("pending", None, None)
RUNNING = RunSnapshot("running", OWNER, 0)


# --- foreign look-alikes ------------------------------------------------------


class TextSub(str):
    """A str subclass: admission wants exactly ``str``."""


class IntSub(int):
    """An int subclass: admission wants exactly ``int``."""


class Word(enum.StrEnum):
    SECRET_WORD = SECRET
    PENDING = "pending"
    COMPLETED = "completed"
    LEASE_EXPIRED = "lease-expired"
    ABSENT = "absent"


class Number(enum.IntEnum):
    ONE = 1


@attrs.frozen
class FakeOwner:
    """Same fields as OwnerId, another class."""

    host_id: str
    pid: int
    nonce: str


@attrs.frozen
class FakeSnapshot:
    status: str
    owner: object
    heartbeat_at_ms: object


@attrs.frozen
class FakeEvidence:
    expected_owner: object
    checked_at_ms: object
    kind: object


@attrs.frozen
class FakeGuard:
    cancel_requested: object = None


class OwnerSub(OwnerId):
    pass


class SnapshotSub(RunSnapshot):
    pass


class EvidenceSub(LivenessEvidence):
    pass


class GuardSub(TransitionGuard):
    pass


class RowSub(RunRow):
    pass


OwnerTuple = namedtuple("OwnerTuple", ["host_id", "pid", "nonce"])


# --- hostile values, by kind of argument ---------------------------------------

Hostile = tuple[str, object]

FOREIGN_TYPES: list[Hostile] = [
    ("bool True", True),
    ("bool False", False),
    ("float", 1.0),
    ("nan", math.nan),
    ("inf", math.inf),
    ("complex", 1j),
    ("Decimal", Decimal(1)),
    ("bytes", SECRET.encode()),
    ("bytearray", bytearray(SECRET.encode())),
    ("list", [SECRET]),
    ("tuple", (SECRET,)),
    ("set", {SECRET}),
    ("dict", {"value": SECRET}),
    ("object()", object()),
    ("SimpleNamespace", SimpleNamespace(value=SECRET)),
]


def hostile_identifiers() -> Iterator[Hostile]:
    yield from FOREIGN_TYPES
    yield "int", 7
    yield "str subclass", TextSub(SECRET)
    yield "str enum member", Word.SECRET_WORD
    yield "empty", ""
    yield "NUL alone", "\x00"
    yield "NUL inside", SECRET + "\x00x"
    yield "lone high surrogate", SECRET + "\ud800"
    yield "lone low surrogate", "\udc00" + SECRET
    yield "surrogate pair as two code points", SECRET + "\ud83d\ude00"
    yield "1025 UTF-16 units", SECRET + "x" * (1025 - len(SECRET))
    yield "513 astral characters (1026 units)", "\U0001f600" * 513
    yield "1023 units plus one astral (1025 units)", "x" * 1023 + "\U0001f600"
    yield "a megabyte", SECRET * 100_000


def hostile_integers() -> Iterator[Hostile]:
    yield from FOREIGN_TYPES
    yield "float 1.0", 1.0
    yield "float 0.0", 0.0
    yield "fraction", 0.5
    yield "-inf", -math.inf
    yield "-1", -1
    yield "most negative", -MAX_INT
    yield "2**53 (one past the bound)", 2**53
    yield "2**64", 2**64
    yield "400 digits", 10**400
    yield "numeric str", "1"
    yield "numeric bytes", b"1"
    yield "int subclass", IntSub(1)
    yield "int enum member", Number.ONE
    yield "Fraction", Fraction(1)


def hostile_owners() -> Iterator[Hostile]:
    yield from FOREIGN_TYPES
    yield "int", 1
    yield "str", f"host-a:4102:{SECRET}"
    yield "dict", {"host_id": "host-a", "pid": 4102, "nonce": SECRET}
    yield "tuple", ("host-a", 4102, SECRET)
    yield "namedtuple", OwnerTuple("host-a", 4102, SECRET)
    yield "same attributes, other class", FakeOwner("host-a", 4102, SECRET)
    yield "OwnerId subclass", OwnerSub("host-a", 4102, SECRET)
    yield "a RunSnapshot", PENDING
    for label, bad in hostile_identifiers():
        yield f"host_id {label}", OwnerId(bad, 4102, "nonce-a")  # type: ignore[arg-type]
        yield f"nonce {label}", OwnerId("host-a", 4102, bad)  # type: ignore[arg-type]
    for label, bad in hostile_integers():
        yield f"pid {label}", OwnerId("host-a", bad, SECRET)  # type: ignore[arg-type]
    yield "pid None", OwnerId("host-a", None, SECRET)  # type: ignore[arg-type]
    yield "host_id None", OwnerId(None, 4102, SECRET)  # type: ignore[arg-type]


def hostile_snapshots() -> Iterator[Hostile]:
    yield from FOREIGN_TYPES
    yield "int", 0
    yield "status str", "pending"
    yield "dict", {"status": "pending", "owner": None, "heartbeat_at_ms": None}
    yield "tuple", ("pending", None, None)
    yield "same attributes, other class", FakeSnapshot("pending", None, None)
    yield "RunSnapshot subclass", SnapshotSub("pending", None, None)
    yield "an OwnerId", OWNER
    for status in ["bogus", "PENDING", "", "pending\x00", SECRET]:
        yield f"status {status!r}", RunSnapshot(status, None, None)  # type: ignore[arg-type]
    yield "status str subclass", RunSnapshot(TextSub("pending"), None, None)  # type: ignore[arg-type]
    yield "status enum member", RunSnapshot(Word.PENDING, None, None)  # type: ignore[arg-type]
    yield "status None", RunSnapshot(None, None, None)  # type: ignore[arg-type]
    yield "status int", RunSnapshot(1, None, None)  # type: ignore[arg-type]
    for label, bad in hostile_integers():
        yield f"heartbeat {label}", RunSnapshot("running", OWNER, bad)  # type: ignore[arg-type]
    for label, bad in hostile_owners():
        yield f"owner {label}", RunSnapshot("running", bad, 0)  # type: ignore[arg-type]
    yield "pending with an owner", RunSnapshot("pending", OWNER, None)
    yield "pending with a heartbeat", RunSnapshot("pending", None, 0)
    yield "suspended with owner and heartbeat", RunSnapshot("suspended", OWNER, 0)
    yield "completed with an owner", RunSnapshot("completed", OWNER, None)
    yield "running without owner", RunSnapshot("running", None, 0)
    yield "running without heartbeat", RunSnapshot("running", OWNER, None)
    yield "running with neither", RunSnapshot("running", None, None)
    yield "RunRow with a bogus status", _row(status="bogus")
    yield "RunRow running without owner", _row(status="running", heartbeat_at_ms=0)
    yield (
        "RunRow with a foreign owner",
        _row(status="running", owner=FakeOwner("h", 1, SECRET), heartbeat_at_ms=0),
    )
    yield "RunRow subclass", RowSub(**attrs.asdict(_row(), recurse=False))


def _row(**changes: object) -> RunRow:
    base = RunRow(
        run_id="pending-run",
        status="pending",
        created_at_ms=0,
        started_at_ms=None,
        finished_at_ms=None,
        owner=None,
        heartbeat_at_ms=None,
        claim=None,
        claimed_at_ms=None,
        parent_run_id=None,
        cancel_requested_at_ms=None,
        lineage_id=None,
        round_ordinal=None,
        state_json=json.dumps({"token": SECRET}),
    )
    return attrs.evolve(base, **changes)  # type: ignore[arg-type]


def hostile_evidence() -> Iterator[Hostile]:
    yield from FOREIGN_TYPES
    yield "int", 0
    yield "kind str", "lease-expired"
    yield "dict", {"expected_owner": OWNER, "checked_at_ms": 0, "kind": "lease-expired"}
    yield "same attributes, other class", FakeEvidence(OWNER, 0, "lease-expired")
    yield "LivenessEvidence subclass", EvidenceSub(OWNER, 0, "lease-expired")
    yield "an OwnerId", OWNER
    for label, bad in hostile_owners():
        yield f"expected_owner {label}", LivenessEvidence(bad, 0, "lease-expired")  # type: ignore[arg-type]
    yield "expected_owner None", LivenessEvidence(None, 0, "lease-expired")  # type: ignore[arg-type]
    for label, bad in hostile_integers():
        yield f"checked_at_ms {label}", LivenessEvidence(OWNER, bad, "lease-expired")  # type: ignore[arg-type]
    yield "checked_at_ms None", LivenessEvidence(OWNER, None, "lease-expired")  # type: ignore[arg-type]
    kinds: list[object] = [
        "lease_expired",
        "LEASE-EXPIRED",
        "",
        SECRET,
        "lease-expired\x00",
        None,
        1,
        True,
        TextSub("lease-expired"),
        Word.LEASE_EXPIRED,
        b"lease-expired",
    ]
    for kind in kinds:
        yield f"kind {kind!r}", LivenessEvidence(OWNER, 0, kind)  # type: ignore[arg-type]


def hostile_guards() -> Iterator[Hostile]:
    yield from FOREIGN_TYPES
    yield "int", 0
    yield "str", "absent"
    yield "dict", {"cancel_requested": "absent"}
    yield "same attributes, other class", FakeGuard("absent")
    yield "TransitionGuard subclass", GuardSub("absent")
    requirements: list[object] = [
        "maybe",
        "ABSENT",
        "",
        SECRET,
        True,
        0,
        TextSub("absent"),
        Word.ABSENT,
        b"absent",
        ["absent"],
    ]
    for requirement in requirements:
        yield f"cancel_requested {requirement!r}", TransitionGuard(requirement)  # type: ignore[arg-type]


def hostile_statuses() -> Iterator[Hostile]:
    yield from FOREIGN_TYPES
    yield "int", 1
    yield "pending (a run never goes back)", "pending"
    yield "unknown", "bogus"
    yield "empty", ""
    yield "upper case", "COMPLETED"
    yield "NUL suffix", "completed\x00"
    yield "str subclass", TextSub("completed")
    yield "str enum member", Word.COMPLETED
    yield "bytes", b"completed"


def deep_json(depth: int, leaf: str = "0") -> str:
    """JSON whose innermost value sits at ``depth`` (the root is depth 0)."""
    return "[" * depth + leaf + "]" * depth


def deep_object_json(depth: int, leaf: str = "0") -> str:
    return '{"k":' * depth + leaf + "}" * depth


def wide_json(values: int, first: str = "0") -> str:
    """A JSON array holding ``values`` values in total (the array counts one)."""
    return "[" + ",".join([first] + ["0"] * (values - 2)) + "]"


SECRET_STRING = json.dumps(SECRET)


def hostile_states() -> Iterator[Hostile]:
    yield from FOREIGN_TYPES
    yield "int", 1
    yield "dict", {"token": SECRET}
    yield "str subclass", TextSub(json.dumps({"token": SECRET}))
    yield "str enum member", Word.SECRET_WORD
    yield "empty", ""
    yield "whitespace only", " \n\t"
    yield "not JSON", f"token={SECRET}"
    yield "truncated", '{"token": "' + SECRET + '"'
    yield "single quotes", "{'token': '" + SECRET + "'}"
    yield "trailing comma", '{"token": "' + SECRET + '",}'
    yield "two documents", '{"token": "' + SECRET + '"} {}'
    yield "byte order mark", "\ufeff" + SECRET_STRING
    yield "NaN", '{"token": "' + SECRET + '", "n": NaN}'
    yield "Infinity", "[" + SECRET_STRING + ", Infinity]"
    yield "-Infinity", "[" + SECRET_STRING + ", -Infinity]"
    yield "1e400", "[" + SECRET_STRING + ", 1e400]"
    yield "-1e400", "[" + SECRET_STRING + ", -1e400]"
    yield "integer literal of 400 digits", "[" + SECRET_STRING + ", 1" + "0" * 399 + "]"
    yield "negative integer of 400 digits", "[" + SECRET_STRING + ", -1" + "0" * 399 + "]"
    yield "integer literal of 5000 digits", "[" + SECRET_STRING + ", 1" + "0" * 4999 + "]"
    yield "control character in a string", '{"token": "' + SECRET + '\x01"}'
    yield "raw tab in a string", '{"token": "' + SECRET + '\t"}'
    yield "raw newline in a string", '{"token": "' + SECRET + '\n"}'
    yield "raw NUL in a string", '{"token": "' + SECRET + '\x00"}'
    yield "raw NUL outside strings", '{"token": "' + SECRET + '"}\x00'
    yield "\\ud800 escape", '{"token": "' + SECRET + '\\ud800"}'
    yield "\\udc00 escape", '{"token": "\\udc00' + SECRET + '"}'
    yield "reversed surrogate escapes", '{"token": "' + SECRET + '\\ude00\\ud83d"}'
    yield "\\ud800 escape in a key", '{"\\ud800' + SECRET + '": 1}'
    yield "raw lone surrogate", '{"token": "' + SECRET + '\ud800"}'
    yield "raw lone surrogate in a key", '{"' + SECRET + '\udfff": 1}'
    yield "depth 129", deep_json(129, SECRET_STRING)
    yield "object depth 129", deep_object_json(129, SECRET_STRING)
    yield "depth 100000", deep_json(100_000, SECRET_STRING)
    yield "100 001 values", wide_json(100_001, SECRET_STRING)
    yield "100 002 values", wide_json(100_002, SECRET_STRING)
    nested = "[[" + SECRET_STRING + "," + ",".join(["0"] * 49_999)
    yield "100 001 values over nested arrays", nested + "],[" + ",".join(["0"] * 49_999) + "]]"
    yield (
        "100 001 object members",
        ("{" + ",".join(f'"{SECRET}{i}":0' for i in range(100_001)) + "}"),
    )


# --- admitted edge values -------------------------------------------------------

ADMITTED_IDENTIFIERS: list[Hostile] = [
    ("1 unit", "x"),
    ("1024 units", "x" * 1024),
    ("512 astral characters (1024 units)", "\U0001f600" * 512),
    ("1022 units plus one astral", "x" * 1022 + "\U0001f600"),
    ("U+FFFD", "\ufffd"),
    ("an astral character", "\U0001f600"),
    ("a space", " "),
    ("control characters other than NUL", "\x01\x1f\x7f"),
]

ADMITTED_STATES: list[Hostile] = [
    ("\\u0000 escape", '{"value": "\\u0000"}'),
    ("\\u0000 escape alone", '"\\u0000"'),
    ("escaped surrogate pair", '"\\ud83d\\ude00"'),
    ("raw astral character", '"\U0001f600"'),
    ("U+FFFD", '"\ufffd"'),
    ("surrounding whitespace", ' \n{"a": 1}\t'),
    ("a bare scalar", "0"),
    ("null", "null"),
    ("1e-400 (underflows to zero)", "[1e-400]"),
    ("the largest double", "[1.7976931348623157e308]"),
    ("an integer of 300 digits", "[1" + "0" * 299 + "]"),
    ("depth 128", deep_json(128)),
    ("object depth 128", deep_object_json(128)),
    ("an empty container at depth 128", deep_json(128, "[]")),
    ("100 000 values", wide_json(100_000)),
    (
        "100 000 values over nested arrays",
        ("[[" + ",".join(["0"] * 49_999) + "],[" + ",".join(["0"] * 49_998) + "]]"),
    ),
    ("duplicate keys", '{"a": 1, "a": 2}'),
    ("a credential", json.dumps({"token": SECRET})),
]


# --- the operations -----------------------------------------------------------------


@attrs.frozen
class Param:
    """One argument of one operation."""

    name: str
    field: str
    hostile: Callable[[], Iterator[Hostile]]
    valid: object
    optional: bool = False
    keyword: bool = False
    # Other arguments set while this one is hostile, so it is the only fault.
    alongside: tuple[tuple[str, object], ...] = ()


EVIDENCE_OF_OWNER = LivenessEvidence(OWNER, 0, "lease-expired")
EVIDENCE_OF_CLAIMANT = LivenessEvidence(CLAIMANT, 0, "lease-expired")

# Each operation's arguments, in the order the operation admits them.
OPERATIONS: dict[str, list[Param]] = {
    "create": [
        Param("run_id", "run_id", hostile_identifiers, "fresh-run"),
        Param("parent_run_id", "options", hostile_identifiers, None, optional=True, keyword=True),
        Param(
            "lineage_id",
            "options",
            hostile_identifiers,
            None,
            optional=True,
            keyword=True,
            alongside=(("round_ordinal", 1),),
        ),
        Param(
            "round_ordinal",
            "options",
            hostile_integers,
            None,
            optional=True,
            keyword=True,
            alongside=(("lineage_id", "fresh-lineage"),),
        ),
        Param("state_json", "state_json", hostile_states, '{"a": 1}'),
    ],
    "get": [Param("run_id", "run_id", hostile_identifiers, "pending-run")],
    "lineage": [Param("run_id", "run_id", hostile_identifiers, "round-0")],
    "latest_round": [Param("run_id", "run_id", hostile_identifiers, "round-0")],
    "ownership_facts": [Param("run_id", "run_id", hostile_identifiers, "owned-run")],
    "request_cancel": [
        Param("run_id", "run_id", hostile_identifiers, "pending-run"),
        Param("now_ms", "now_ms", hostile_integers, 0),
    ],
    "request_cancel_lineage": [
        Param("run_id", "run_id", hostile_identifiers, "round-0"),
        Param("now_ms", "now_ms", hostile_integers, 0),
    ],
    "acknowledge_cancel": [
        Param("run_id", "run_id", hostile_identifiers, "owned-run"),
        Param("owner", "owner", hostile_owners, OWNER),
        Param("now_ms", "now_ms", hostile_integers, 0),
    ],
    "claim": [
        Param("run_id", "run_id", hostile_identifiers, "pending-run"),
        Param("expected", "expected", hostile_snapshots, PENDING),
        Param("claimant", "claimant", hostile_owners, CLAIMANT),
        Param("now_ms", "now_ms", hostile_integers, 0),
    ],
    "claim_and_own": [
        Param("run_id", "run_id", hostile_identifiers, "pending-run"),
        Param("expected", "expected", hostile_snapshots, PENDING),
        Param("owner", "owner", hostile_owners, CLAIMANT),
        Param("now_ms", "now_ms", hostile_integers, 0),
        Param("evidence", "evidence", hostile_evidence, None, optional=True),
    ],
    "activate": [
        Param("run_id", "run_id", hostile_identifiers, "claimed-run"),
        Param("claimant", "claimant", hostile_owners, CLAIMANT),
        Param("claimed_at_ms", "claimed_at_ms", hostile_integers, 0),
        Param("expected", "expected", hostile_snapshots, PENDING),
    ],
    "abandon_claim": [
        Param("run_id", "run_id", hostile_identifiers, "claimed-run"),
        Param("claimant", "claimant", hostile_owners, CLAIMANT),
        Param("claimed_at_ms", "claimed_at_ms", hostile_integers, 0),
    ],
    "recover_claim": [
        Param("run_id", "run_id", hostile_identifiers, "claimed-run"),
        Param("stale_claimant", "stale_claimant", hostile_owners, CLAIMANT),
        Param("claimed_at_ms", "claimed_at_ms", hostile_integers, 0),
        Param("observer", "observer", hostile_owners, THIEF),
        Param("now_ms", "now_ms", hostile_integers, 0),
        Param("evidence", "evidence", hostile_evidence, EVIDENCE_OF_CLAIMANT),
    ],
    "heartbeat": [
        Param("run_id", "run_id", hostile_identifiers, "owned-run"),
        Param("owner", "owner", hostile_owners, OWNER),
        Param("now_ms", "now_ms", hostile_integers, 0),
    ],
    "reconfirm": [
        Param("run_id", "run_id", hostile_identifiers, "owned-run"),
        Param("owner", "owner", hostile_owners, OWNER),
        Param("now_ms", "now_ms", hostile_integers, 0),
    ],
    "transition_owned": [
        Param("run_id", "run_id", hostile_identifiers, "owned-run"),
        Param("owner", "owner", hostile_owners, OWNER),
        Param("to_status", "to_status", hostile_statuses, "running"),
        Param("state_json", "state_json", hostile_states, None, optional=True),
        Param("guard", "guard", hostile_guards, None, optional=True),
    ],
    "steal": [
        Param("run_id", "run_id", hostile_identifiers, "owned-run"),
        Param("expected", "expected", hostile_snapshots, RUNNING),
        Param("claimant", "claimant", hostile_owners, THIEF),
        Param("now_ms", "now_ms", hostile_integers, 0),
        Param("evidence", "evidence", hostile_evidence, EVIDENCE_OF_OWNER),
    ],
    "changes": [Param("after_revision", "after_revision", hostile_integers, 0)],
}

# Positional order of each signature (create's options are keyword-only).
SIGNATURES: dict[str, list[str]] = {
    "create": ["run_id", "state_json"],
    "claim_and_own": ["run_id", "expected", "owner", "now_ms", "evidence"],
    "activate": ["run_id", "claimant", "claimed_at_ms", "expected"],
    "transition_owned": ["run_id", "owner", "to_status", "state_json", "guard"],
}

LEASE_OPERATIONS = ["claim", "claim_and_own", "steal", "heartbeat", "reconfirm", "recover_claim"]

PARAM_CASES = [
    pytest.param(operation, param, id=f"{operation}-{param.name}")
    for operation, params in OPERATIONS.items()
    for param in params
]


def call(store: RunStore, operation: str, values: dict[str, object]) -> object:
    """Call ``operation`` positionally (keywords for keyword-only arguments)."""
    params = OPERATIONS[operation]
    order = SIGNATURES.get(operation, [p.name for p in params])
    positional = [values[name] for name in order]
    keywords = {p.name: values[p.name] for p in params if p.keyword}
    return getattr(store, operation)(*positional, **keywords)


def valid_values(operation: str) -> dict[str, object]:
    return {p.name: p.valid for p in OPERATIONS[operation]}


def _strings_in(error: BaseException) -> Iterator[str]:
    """Every piece of text an exception (and anything chained to it) exposes."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield str(current)
        yield repr(current)
        yield repr(current.args)
        for value in vars(current).values():  # e.g. JSONDecodeError.doc holds the document
            yield repr(value)
        current = current.__cause__ or current.__context__


def refusal_problem(
    store: RunStore, operation: str, values: dict[str, object], *, field: str | None = None
) -> str | None:
    """Call the operation and describe what is wrong with how it refused, if anything."""
    before = store.state()
    try:
        result = call(store, operation, values)
    except InvalidRunError as error:
        problems = []
        if error.code != "invalid_run":
            problems.append(f"code {error.code!r}")
        if error.method != operation:
            problems.append(f"method {error.method!r}")
        if error.__cause__ is not None or not error.__suppress_context__:
            problems.append("an exception chain")
        if not isinstance(error.cause, dict):
            problems.append("a cause that is not a dict")
        else:
            named = str(error.cause.get("field"))
            if field is not None and named != field and not named.startswith(field + "."):
                problems.append(f"field {named!r} instead of {field!r}")
        if any(SECRET in text for text in [*_strings_in(error), repr(error.cause)]):
            problems.append("the refused text in the error")
        after = store.state()
        if after != before:
            problems.append("a changed store state")
        return ", ".join(problems) or None
    except Exception as error:  # any other exception is a wrong refusal
        return f"raised {type(error).__name__} instead of InvalidRunError"
    return f"was admitted and answered {result!r}"


# --- fixtures ----------------------------------------------------------------------


@pytest.fixture
def seeded(store: RunStore, clock: ManualClock) -> RunStore:
    """A store with a pending run, an owned run, a claimed run and a lineage round."""
    store.create("pending-run", '{"step": 0}')
    store.create("owned-run", '{"step": 1}')
    assert store.claim_and_own("owned-run", PENDING, OWNER, 0) == Activated()
    store.create("claimed-run", "{}")
    assert store.claim("claimed-run", PENDING, CLAIMANT, 0) == Claimed(0)
    store.create("round-0", "{}", lineage_id="lineage", round_ordinal=0)
    return store


# --- refusals through the store -----------------------------------------------------


@pytest.mark.parametrize(("operation", "param"), PARAM_CASES)
def test_every_hostile_argument_is_refused_without_a_trace(
    seeded: RunStore, operation: str, param: Param
) -> None:
    """Each hostile value of each argument is invalid_run, unchained, secret-free, and
    leaves the whole store state unchanged."""
    problems = []
    count = 0
    for label, value in param.hostile():
        if value is None and param.optional:
            continue
        values = valid_values(operation)
        values.update(param.alongside)
        values[param.name] = value
        count += 1
        problem = refusal_problem(seeded, operation, values, field=param.field)
        if problem is not None:
            problems.append(f"{operation}({param.name}={label}): {problem}")
    assert count > 10
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    ("operation", "param"),
    [case for case in PARAM_CASES if not case.values[1].optional],  # type: ignore[attr-defined]
)
def test_none_is_refused_where_an_argument_is_required(
    seeded: RunStore, operation: str, param: Param
) -> None:
    """None for a required argument is invalid_run, naming that argument."""
    values = valid_values(operation)
    values[param.name] = None
    assert refusal_problem(seeded, operation, values, field=param.field) is None


@pytest.mark.parametrize("operation", list(OPERATIONS))
def test_arguments_are_admitted_in_their_documented_order(seeded: RunStore, operation: str) -> None:
    """With every argument from the k-th on malformed, the refusal names the k-th."""
    params = OPERATIONS[operation]
    for index, param in enumerate(params):
        values = valid_values(operation)
        for later in params[index:]:
            values[later.name] = {"malformed": True}
        problem = refusal_problem(seeded, operation, values, field=param.field)
        assert problem is None, f"{operation} from {param.name}: {problem}"


def test_create_refuses_half_a_lineage(seeded: RunStore) -> None:
    """A lineage id without a round ordinal, or a round without a lineage, is refused."""
    for lineage_id, round_ordinal in [("lineage-x", None), (None, 3)]:
        values = valid_values("create") | {"lineage_id": lineage_id, "round_ordinal": round_ordinal}
        assert refusal_problem(seeded, "create", values, field="options") is None


def test_create_refuses_the_companion_prefix(seeded: RunStore) -> None:
    """Run ids in the store's own companion namespace are refused by create."""
    for run_id in ["flows.companion/x", "flows.companion/run-store/" + "a" * 64]:
        values = valid_values("create") | {"run_id": run_id}
        assert refusal_problem(seeded, "create", values, field="run_id") is None


def test_transition_owned_refuses_pending_but_admits_every_other_status(
    seeded: RunStore,
) -> None:
    """to_status "pending" is refused; running, then suspended, are admitted."""
    values = valid_values("transition_owned") | {"to_status": "pending"}
    assert refusal_problem(seeded, "transition_owned", values, field="to_status") is None
    assert seeded.transition_owned("owned-run", OWNER, "running") == Transitioned()
    assert seeded.transition_owned("owned-run", OWNER, "suspended") == Transitioned()


@pytest.mark.parametrize("operation", LEASE_OPERATIONS)
def test_lease_readings_beyond_the_skew_allowance_are_refused(
    seeded: RunStore, clock: ManualClock, operation: str
) -> None:
    """A lease reading more than 10 000 ms ahead of the store clock is invalid_run,
    with state unchanged; exactly 10 000 ahead is admitted."""
    clock.set(5_000)
    values = valid_values(operation) | {"run_id": "missing-run", "now_ms": 15_001}
    assert refusal_problem(seeded, operation, values, field="now_ms") is None
    values["now_ms"] = 15_000
    # Evidence must be bound to the reading to get past the evidence check.
    if operation == "steal":
        values["evidence"] = LivenessEvidence(OWNER, 15_000, "lease-expired")
    if operation == "recover_claim":
        values["evidence"] = LivenessEvidence(CLAIMANT, 15_000, "lease-expired")
    assert call(seeded, operation, values) == NotFound()


@pytest.mark.parametrize("operation", ["request_cancel", "request_cancel_lineage"])
def test_cancel_requests_take_any_reading_literally(seeded: RunStore, operation: str) -> None:
    """Cancellation readings are request data, not lease readings: no skew bound."""
    assert call(seeded, operation, {"run_id": "missing-run", "now_ms": MAX_INT}) == NotFound()


def test_acknowledge_cancel_takes_any_reading_literally(seeded: RunStore) -> None:
    """acknowledge_cancel admits a reading far ahead of the store clock."""
    assert seeded.acknowledge_cancel("owned-run", OWNER, MAX_INT) is False


# --- admitted edges through the store -------------------------------------------------


@pytest.mark.parametrize(("label", "run_id"), ADMITTED_IDENTIFIERS)
def test_identifiers_at_the_edge_are_admitted_and_round_trip(
    seeded: RunStore, label: str, run_id: str
) -> None:
    """Identifiers within 1 to 1024 UTF-16 units, without NUL or surrogates, round-trip."""
    owner = OwnerId(run_id, 0, run_id)
    seeded.create(run_id, "{}", parent_run_id="pending-run")
    assert seeded.get(run_id).parent_run_id == "pending-run"
    assert seeded.claim_and_own(run_id, PENDING, owner, 0) == Activated()
    row = seeded.get(run_id)
    assert (row.run_id, row.owner) == (run_id, owner)
    child = "child-" + label
    seeded.create(child, "{}", parent_run_id=run_id, lineage_id=run_id, round_ordinal=1)
    assert seeded.get(child).parent_run_id == run_id
    # The run the lineage is named after is its first round.
    assert [r.run_id for r in seeded.lineage(child)] == [run_id, child]
    assert seeded.latest_round(child).run_id == child


@pytest.mark.parametrize(("label", "text"), ADMITTED_STATES)
def test_run_state_at_the_edge_is_admitted_byte_for_byte(
    seeded: RunStore, label: str, text: str
) -> None:
    """Admissible run state is stored exactly as given, by create and by transition_owned."""
    seeded.create("edge-run", text)
    assert seeded.get("edge-run").state_json == text
    assert seeded.transition_owned("owned-run", OWNER, "running", text) == Transitioned()
    assert seeded.get("owned-run").state_json == text


def test_the_largest_safe_integer_is_admitted_everywhere(
    seeded: RunStore, clock: ManualClock
) -> None:
    """2**53 - 1 is admitted as a timestamp, pid, ordinal, token and revision."""
    big = OwnerId("host-a", MAX_INT, "nonce-a")
    evidence_at_max = LivenessEvidence(OWNER, MAX_INT, "lease-expired")
    assert seeded.changes(MAX_INT) == []
    seeded.create("max-round", "{}", lineage_id="max-lineage", round_ordinal=MAX_INT)
    assert seeded.get("max-round").round_ordinal == MAX_INT
    assert seeded.acknowledge_cancel("owned-run", big, MAX_INT) is False
    assert seeded.activate("claimed-run", CLAIMANT, MAX_INT, PENDING) == ClaimLost()
    assert seeded.abandon_claim("claimed-run", CLAIMANT, MAX_INT) == ClaimLost()
    assert (
        seeded.recover_claim("claimed-run", CLAIMANT, MAX_INT, THIEF, 0, EVIDENCE_OF_CLAIMANT)
        == ClaimChanged()
    )
    assert seeded.heartbeat("owned-run", big, 0) == FenceLost()
    assert seeded.steal("owned-run", RUNNING, THIEF, 0, evidence_at_max) == LivenessUnconfirmed()
    assert (
        seeded.claim("owned-run", RunSnapshot("running", OWNER, MAX_INT), THIEF, 0)
        == HeartbeatFresh()
    )
    assert seeded.request_cancel("pending-run", MAX_INT) == CancelRequested(MAX_INT)
    assert seeded.request_cancel_lineage("round-0", MAX_INT) == CancelRequested(MAX_INT)
    # A lease reading may reach the bound once the store clock is near it.
    clock.set(MAX_INT - 5)
    too_far = valid_values("heartbeat") | {"now_ms": 2**53}
    assert refusal_problem(seeded, "heartbeat", too_far, field="now_ms") is None
    assert seeded.heartbeat("owned-run", OWNER, MAX_INT) == Updated()
    assert seeded.get("owned-run").heartbeat_at_ms == MAX_INT


def test_optional_arguments_admit_none_and_empty_records(seeded: RunStore) -> None:
    """evidence=None, state_json=None, guard=None and TransitionGuard() are admitted."""
    assert seeded.claim_and_own("pending-run", PENDING, CLAIMANT, 0, None) == Activated()
    assert seeded.transition_owned("owned-run", OWNER, "running", None, None) == Transitioned()
    assert (
        seeded.transition_owned("owned-run", OWNER, "running", None, TransitionGuard())
        == Transitioned()
    )
    assert seeded.get("owned-run").state_json == '{"step": 1}'


def test_a_run_row_is_admitted_as_a_snapshot(seeded: RunStore) -> None:
    """Wherever a snapshot is expected, the run's RunRow itself is admitted."""
    row = seeded.get("pending-run")
    assert seeded.claim("pending-run", row, CLAIMANT, 0) == Claimed(0)


# --- garbage from Hypothesis ------------------------------------------------------------

HYPOTHESIS_SETTINGS = settings(
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

foreign_values = st.one_of(
    st.booleans(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.complex_numbers(allow_nan=True),
    st.binary(max_size=8),
    st.lists(st.integers(), max_size=3),
    st.tuples(st.text(max_size=3)),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=3),
    st.fractions(),
    st.decimals(allow_nan=True),
    st.builds(object),
    st.builds(FakeOwner, st.text(max_size=3), st.integers(0, 9), st.text(max_size=3)),
)
out_of_range_integers = st.integers().filter(lambda n: n < 0 or n > MAX_INT)
malformed_text = st.one_of(
    st.just(""),
    st.text(max_size=5).map(lambda s: s + "\x00"),
    st.tuples(st.text(max_size=5), st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)).map(
        "".join
    ),
    st.integers(1025, 2000).map(lambda n: "x" * n),
    st.integers(513, 800).map(lambda n: "\U0001f600" * n),
    st.text(max_size=4).map(TextSub),
)
KIND_GARBAGE = {
    hostile_identifiers: st.one_of(foreign_values, st.integers(), malformed_text),
    hostile_integers: st.one_of(foreign_values, out_of_range_integers, st.text(max_size=4)),
    hostile_owners: st.one_of(
        foreign_values,
        st.builds(OwnerId, malformed_text, st.integers(0, 9), st.just("n")),
        st.builds(OwnerId, st.just("h"), out_of_range_integers, st.just("n")),
        st.builds(OwnerId, st.just("h"), st.integers(0, 9), malformed_text),
    ),
    hostile_snapshots: st.one_of(
        foreign_values,
        st.builds(RunSnapshot, st.text(max_size=8), st.none(), st.none()),
        st.builds(RunSnapshot, st.just("running"), st.just(OWNER), out_of_range_integers),
    ),
    hostile_evidence: st.one_of(
        foreign_values,
        st.builds(
            LivenessEvidence, st.just(OWNER), out_of_range_integers, st.just("lease-expired")
        ),
        st.builds(LivenessEvidence, st.just(OWNER), st.just(0), st.text(max_size=12)),
    ),
    hostile_guards: st.one_of(
        foreign_values, st.builds(TransitionGuard, st.text(min_size=1, max_size=8))
    ),
    hostile_statuses: st.one_of(foreign_values, st.text(max_size=10)),
    hostile_states: st.one_of(foreign_values, st.text(max_size=20)),
}


def _admissible_by_accident(param: Param, value: object) -> bool:
    """A few generated values are legitimately admissible; skip those."""
    if param.hostile is hostile_evidence and type(value) is LivenessEvidence:
        return value.kind in {"same-host-pid-dead", "cross-host-unreachable-stale", "lease-expired"}
    if param.hostile is hostile_guards and type(value) is TransitionGuard:
        return value.cancel_requested in {"absent", "present"}
    if param.hostile is hostile_statuses and type(value) is str:
        return value in {"running", "suspended", "completed", "failed", "cancelled"}
    if param.hostile is hostile_snapshots and type(value) is RunSnapshot:
        return value.status in {"pending", "suspended", "completed", "failed", "cancelled"}
    if param.hostile is hostile_states and type(value) is str:
        return oracle_state_admissible(value)
    return False


@HYPOTHESIS_SETTINGS
@given(case=st.sampled_from(PARAM_CASES), data=st.data())
def test_generated_garbage_is_refused_without_a_trace(
    seeded: RunStore, case: Any, data: st.DataObject
) -> None:
    """Any generated value of a foreign type or shape is refused cleanly, for any argument."""
    operation, param = case.values
    value = data.draw(KIND_GARBAGE[param.hostile], label=param.name)
    if _admissible_by_accident(param, value):
        return
    values = valid_values(operation)
    values.update(param.alongside)
    values[param.name] = value
    assert refusal_problem(seeded, operation, values, field=param.field) is None


def oracle_identifier(value: object) -> bool:
    """An independent statement of the identifier rule."""
    if type(value) is not str:
        return False
    units = len(value.encode("utf-16-le", "surrogatepass")) // 2
    return (
        1 <= units <= 1024
        and "\x00" not in value
        and not any(0xD800 <= ord(c) <= 0xDFFF for c in value)
    )


def oracle_state_admissible(text: str) -> bool:
    """An independent statement of the run-state rule."""

    def no_constants(name: str) -> object:
        raise ValueError(name)

    if type(text) is not str or not text:
        return False
    try:
        value = json.loads(text, parse_constant=no_constants)
    except (ValueError, RecursionError):
        return False

    def clean(string: str) -> bool:
        return not any(0xD800 <= ord(c) <= 0xDFFF for c in string)

    values = 0
    members = 0
    pending: list[tuple[object, int]] = [(value, 0)]
    while pending:
        item, depth = pending.pop()
        values += 1
        if depth > 128 or values > 100_000:
            return False
        if isinstance(item, str) and not clean(item):
            return False
        if isinstance(item, int) and not isinstance(item, bool) and abs(item) >= 2**1024 - 2**970:
            return False  # rounds to an infinite double
        if isinstance(item, float) and not math.isfinite(item):
            return False
        if isinstance(item, list | dict):
            members += len(item)
            if members > 100_000:
                return False
        if isinstance(item, list):
            pending.extend((child, depth + 1) for child in item)
        if isinstance(item, dict):
            if not all(clean(key) for key in item):
                return False
            pending.extend((child, depth + 1) for child in item.values())
    return True


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.integers(min_value=-(10**400), max_value=10**400)
    | st.text(alphabet=st.one_of(st.characters(), st.sampled_from('\x00\x1f\ud800\udfff"\\'))),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=4), children, max_size=4)
    ),
    max_leaves=12,
)


@st.composite
def state_texts(draw: st.DrawFn) -> str:
    value = draw(json_values)
    text = json.dumps(value, ensure_ascii=draw(st.booleans()), allow_nan=True)
    if draw(st.booleans()):
        position = draw(st.integers(0, len(text)))
        insert = draw(st.sampled_from(["", ",", "]", "{", '"', "\\", "\x00", "\x01", " ", "NaN"]))
        cut = draw(st.integers(0, 2))
        text = text[:position] + insert + text[position + cut :]
    return text


@HYPOTHESIS_SETTINGS
@given(text=st.one_of(state_texts(), st.text(max_size=30)))
def test_run_state_is_admitted_verbatim_or_refused_cleanly(seeded: RunStore, text: str) -> None:
    """Any text is either stored byte for byte (exactly when the rule admits it) or
    refused as invalid_run with the store unchanged."""
    run_id = f"state-{len(seeded.state().rows)}"
    values = valid_values("create") | {"run_id": run_id, "state_json": text}
    if oracle_state_admissible(text):
        seeded.create(run_id, text)
        assert seeded.get(run_id).state_json == text
    else:
        assert refusal_problem(seeded, "create", values, field="state_json") is None


@HYPOTHESIS_SETTINGS
@given(
    run_id=st.one_of(
        st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=12),
        malformed_text,
    )
)
def test_identifiers_are_admitted_exactly_by_the_rule(seeded: RunStore, run_id: str) -> None:
    """A run id is admitted (get answers not_found_row) exactly when the rule admits it."""
    if oracle_identifier(run_id):
        with pytest.raises(RunNotFoundError) as caught:
            seeded.get(run_id)
        assert caught.value.code == "not_found_row"
    else:
        assert refusal_problem(seeded, "get", {"run_id": run_id}, field="run_id") is None


# --- runstore._boundary at its limits ----------------------------------------------------


@pytest.mark.parametrize(
    ("text", "units"),
    [
        ("", 0),
        ("x", 1),
        ("\ufffd", 1),
        ("\uffff", 1),
        ("\U00010000", 2),
        ("\U0001f600", 2),
        ("\U0010ffff", 2),
        ("a\U0001f600b", 4),
        ("\U0001f600" * 512, 1024),
    ],
)
def test_utf16_length_counts_astral_characters_twice(text: str, units: int) -> None:
    """utf16_length counts code units: an astral character is two."""
    assert boundary.utf16_length(text) == units
    assert units == len(text.encode("utf-16-le")) // 2


@pytest.mark.parametrize(
    ("value", "admitted"),
    [
        ("x" * 1024, True),
        ("x" * 1025, False),
        ("\U0001f600" * 512, True),
        ("\U0001f600" * 513, False),
        ("x" + "\U0001f600" * 511 + "y", True),
        ("x" + "\U0001f600" * 511 + "yz", False),
        ("x" * 1023 + "\U0001f600", False),
        ("x" * 600, True),
        ("\U0001f600" * 300 + "x" * 424, True),
        ("\U0001f600" * 300 + "x" * 425, False),
        ("", False),
        ("\x00", False),
        ("a\x00", False),
        ("\ud800", False),
        (chr(0xDFFF), False),
        ("\ud83d\ude00", False),
        ("\ufffd", True),
        (TextSub("x"), False),
        (Word.PENDING, False),
        (b"x", False),
        (None, False),
    ],
)
def test_is_identifier_at_its_limits(value: object, admitted: bool) -> None:
    """Identifiers hold 1 to 1024 UTF-16 units, no NUL, no surrogate, exact str."""
    assert boundary.is_identifier(value) is admitted
    assert oracle_identifier(value) is admitted


@pytest.mark.parametrize(
    ("value", "admitted"),
    [
        (0, True),
        (MAX_INT, True),
        (2**53, False),
        (-1, False),
        (True, False),
        (False, False),
        (0.0, False),
        (1.0, False),
        (math.nan, False),
        (math.inf, False),
        (IntSub(1), False),
        (Number.ONE, False),
        ("1", False),
        (None, False),
    ],
)
def test_is_timestamp_at_its_limits(value: object, admitted: bool) -> None:
    """Timestamps are exact ints in [0, 2**53 - 1]; bool is not an int."""
    assert boundary.is_timestamp(value) is admitted


def test_json_depth_limit_is_128_from_a_root_at_0() -> None:
    """A value at depth 128 is admitted; one at depth 129 is refused, for text and values."""
    assert boundary.json_text_complaint(deep_json(128)) is None
    assert boundary.json_text_complaint(deep_object_json(128)) is None
    assert "depth" in str(boundary.json_text_complaint(deep_json(129)))
    assert "depth" in str(boundary.json_text_complaint(deep_object_json(129)))
    nested: object = 0
    for _ in range(128):
        nested = [nested]
    assert boundary.json_shape_complaint(nested) is None
    assert "depth" in str(boundary.json_shape_complaint([nested]))
    assert boundary.json_value_complaint(nested) is None
    assert "depth" in str(boundary.json_value_complaint({"k": nested}))


def test_json_value_limit_is_100000_values() -> None:
    """100 000 values (containers included) are admitted; 100 001 are refused."""
    assert boundary.json_shape_complaint([0] * 99_999) is None
    assert "100000 JSON values" in str(boundary.json_shape_complaint([0] * 100_000))
    assert boundary.json_text_complaint(wide_json(100_000)) is None
    assert "100000 JSON values" in str(boundary.json_text_complaint(wide_json(100_001)))
    split = [[0] * 49_999, [0] * 49_998]
    assert boundary.json_shape_complaint(split) is None
    split[1].append(0)
    assert boundary.json_shape_complaint(split) is not None


def test_json_members_limit_is_per_container_and_in_total() -> None:
    """A container of 100 000 members passes the members limit (and then breaks the value
    limit); 100 001 members, in one container or summed over several, break it."""
    assert "values" in str(boundary.json_shape_complaint([0] * 100_000))
    assert "members" in str(boundary.json_shape_complaint([0] * 100_001))
    assert "members" in str(boundary.json_shape_complaint({str(i): 0 for i in range(100_001)}))
    assert "members" in str(boundary.json_shape_complaint({"a": [0] * 60_000, "b": [0] * 50_000}))


@pytest.mark.parametrize(
    "text",
    [
        "NaN",
        "Infinity",
        "-Infinity",
        "[1e400]",
        "[-1e400]",
        "[1" + "0" * 399 + "]",
        "[1" + "0" * 5000 + "]",
        '"\\ud800"',
        '"\\udfff"',
        '{"\\ud800": 1}',
        '"\ud800"',
        '"\x00"',
        '"\x1f"',
        "{",
        "",
        "{} []",
        deep_json(100_000),
    ],
)
def test_json_text_complaint_refuses(text: str) -> None:
    """Non-finite numbers, surrogates, raw control characters and bad JSON are refused."""
    assert boundary.json_text_complaint(text) is not None


@pytest.mark.parametrize(
    "text", ['"\\u0000"', '"\\ud83d\\ude00"', '"\x7f"', "[1e-400]", "-0", "[1" + "0" * 300 + "]"]
)
def test_json_text_complaint_admits(text: str) -> None:
    """A \\u0000 escape, escaped surrogate pairs, DEL and underflowing literals are admitted."""
    assert boundary.json_text_complaint(text) is None


def test_json_value_complaint_refuses_cycles_and_non_finite_values() -> None:
    """Attempt values with cycles, NaN, infinities or huge ints are refused; DAGs are not cycles."""
    cycle: list[object] = []
    cycle.append(cycle)
    shared = [1, 2]
    assert boundary.json_value_complaint(cycle) is not None
    assert boundary.json_value_complaint({"a": shared, "b": shared}) is None
    for bad in [math.nan, math.inf, -math.inf, 10**400, {"k": "\ud800"}, {"\udfff": 0}, {1: 0}]:
        assert boundary.json_value_complaint(bad) is not None, bad


def test_state_cause_describes_without_the_text() -> None:
    """The cause for refused run state has its length and validity, never its text."""
    text = '{"token": "' + SECRET + '", "n": NaN}'
    cause = boundary.state_cause(text, run_id="r")
    assert SECRET not in repr(cause)
    assert cause["state_json_length"] == len(text)


def test_admission_errors_carry_no_chain() -> None:
    """Every admit_* failure is InvalidRunError raised from None."""
    attempts: list[Callable[[], object]] = [
        lambda: boundary.admit_identifier("get", "run_id", SECRET + "\x00"),
        lambda: boundary.admit_timestamp("changes", "after_revision", True),
        lambda: boundary.admit_owner("heartbeat", "owner", FakeOwner("h", 1, SECRET)),
        lambda: boundary.admit_snapshot("claim", FakeSnapshot("pending", None, None)),
        lambda: boundary.admit_evidence("steal", FakeEvidence(OWNER, 0, SECRET)),
        lambda: boundary.admit_guard("transition_owned", {"cancel_requested": SECRET}),
        lambda: boundary.admit_state("create", "[" + SECRET_STRING + ", NaN]", run_id="r"),
        lambda: boundary.admit_state("create", "{" + SECRET, run_id="r"),
        lambda: boundary.admit_to_status("transition_owned", "pending"),
        lambda: boundary.admit_create("r", "{}", None, "lineage", None),
    ]
    for attempt in attempts:
        with pytest.raises(RunStoreError) as caught:
            attempt()
        error = caught.value
        assert isinstance(error, InvalidRunError)
        assert error.__cause__ is None
        assert error.__suppress_context__
        assert not any(SECRET in text for text in _strings_in(error))
