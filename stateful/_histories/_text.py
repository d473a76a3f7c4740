"""How recorded values read in a report: run state by its length and digest,
never its text (it may hold credentials), owners as ``host:pid:nonce``.

Used by an operation's own ``call_text`` (``_history``) and by the reports
(``_report``); imports nothing of the suite.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from runstore import LivenessEvidence, OwnerId, RunRow, RunSnapshot

#: Where each method takes run state, so it is shown by digest, not text.
_STATE_ARGUMENT = {"create": 1, "transition_owned": 3}


def state_text(text: object) -> str:
    if type(text) is not str:
        return value_text(text)
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"<state {len(text)} chars #{digest}>"


def _owner(owner: OwnerId | None) -> str:
    if owner is None:
        return "-"
    return f"{owner.host_id}:{owner.pid}:{owner.nonce}"


def value_text(value: Any) -> str:
    if isinstance(value, OwnerId):
        return _owner(value)
    if isinstance(value, RunSnapshot):
        return f"<{value.status} owner={_owner(value.owner)} hb={value.heartbeat_at_ms}>"
    if isinstance(value, RunRow):
        parts = [
            value.run_id,
            value.status,
            f"owner={_owner(value.owner)}",
            f"hb={value.heartbeat_at_ms}",
        ]
        if value.claim is not None:
            parts.append(f"claim={_owner(value.claim)}@{value.claimed_at_ms}")
        if value.cancel_requested_at_ms is not None:
            parts.append(f"cancel@{value.cancel_requested_at_ms}")
        if value.lineage_id is not None:
            parts.append(f"lineage={value.lineage_id}#{value.round_ordinal}")
        parts.append(
            f"created={value.created_at_ms} started={value.started_at_ms} "
            f"finished={value.finished_at_ms}"
        )
        parts.append(state_text(value.state_json))
        return "Row(" + " ".join(parts) + ")"
    if isinstance(value, LivenessEvidence):
        return f"<{value.kind} of {_owner(value.expected_owner)} at {value.checked_at_ms}>"
    if isinstance(value, list):
        return "[" + ", ".join(value_text(item) for item in value) + "]"
    if isinstance(value, tuple):
        return "(" + ", ".join(value_text(item) for item in value) + ")"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {value_text(v)}" for k, v in value.items()) + "}"
    if attrs.has(type(value)):
        fields = ", ".join(
            f"{f.name}={value_text(getattr(value, f.name))}" for f in attrs.fields(type(value))
        )
        return f"{type(value).__name__}({fields})"
    return repr(value)


def call_text(method: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
    """``method(arg, ..., key=value)`` with run state shown by length and digest."""
    state_at = _STATE_ARGUMENT.get(method)
    shown = [
        state_text(arg) if index == state_at else value_text(arg) for index, arg in enumerate(args)
    ]
    shown += [
        f"{key}={state_text(v) if key == 'state_json' else value_text(v)}"
        for key, v in kwargs.items()
        if v is not None
    ]
    return f"{method}({', '.join(shown)})"


def answer_text(op: Any) -> str:
    """What the operation ``op`` (an ``Operation``) answered, as recorded."""
    if op.status == "pending":
        return "(no return: pending, may or may not have taken effect)"
    if op.status == "error":
        suffix = " (unknown outcome)" if op.unknown else ""
        return f"error {op.error}{suffix}"
    return value_text(op.value)


def result_text(result: tuple[str, Any]) -> str:
    """What the model answered (a ``Result``: ``("ok", value)``, ``("error", code)`` or
    ``("unreplayable", why)``)."""
    kind, payload = result
    if kind == "ok":
        return value_text(payload)
    if kind == "error":
        return f"error {payload}"
    return f"(cannot replay: {payload})"
