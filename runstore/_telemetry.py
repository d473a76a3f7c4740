"""OpenTelemetry for the SQL stores, the attempt store and the heartbeat supervisors.

When the OpenTelemetry API is importable (the ``otel`` extra), every
operation of a SQL run store and of an ``AttemptStore`` records to the
*global* providers, with no opt-in call, as OpenTelemetry libraries do: the
application decides by configuring an SDK, or not. Without the API this
module imports nothing, and ``instrument`` hands classes back untouched.

What is recorded (``docs/guides/observe.md`` is the reader's account):

- a span per operation, ``RunStore.<method>`` or ``AttemptStore.<method>``,
  with ``runstore.outcome`` (the outcome class in snake case, ``success`` for
  an operation that answers no outcome, ``failure`` or ``interrupt``),
  ``db.system`` (``sqlite`` or ``postgresql``), ``runstore.run_id`` and the
  acting host (``runstore.claimant_host_id``, ``runstore.owner_host_id`` or
  ``runstore.observer_host_id``), and on failure ``runstore.error_code``
  (or ``runstore.error_type`` for an exception that is not a store error).
  Only identifiers that pass admission are recorded; never run state, attempt
  values, other identifiers, messages, URLs;
- upstream's counters ``flows_run_claims{op, outcome}``,
  ``flows_run_heartbeats{outcome}`` and ``flows_run_transitions{outcome, to}``;
- ``runstore_takeovers{op, evidence}``: every takeover a store made (a grant
  that displaced another owner on liveness evidence), by the operation and
  the evidence kind; its span says ``runstore.takeover`` and every span of an
  operation given evidence says ``runstore.evidence`` (the kind, never more);
- ``runstore_supervisor_events{event, supervisor}`` and a span event on the
  span that was current where supervision began.

Cost: while no provider is set (the API installed, no SDK configured) an
operation pays one call through its wrapper and two global reads, the same
ones the API's proxies make (``benchmarks/telemetry_overhead.py``: within 5%
in ``:memory:``). Otherwise a span is started; attributes are built only
when it records, and counter attributes are dictionaries built once per
combination. Nothing caches "no SDK": a provider set later is seen on the
next call.

This module sits below what it observes and imports none of it: a package
whose errors telemetry must tell apart names them here as it defines them
(``ownership`` marks ``LeaseLost`` with ``interrupt_error``, ``attempts``
marks ``AttemptStoreError`` with ``store_error``).
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable
from typing import Any, Final, NamedTuple, TypeVar

from ._boundary import is_identifier
from ._errors import RunStoreError
from ._outcomes import Activated, Claimed
from ._values import EVIDENCE_KINDS, RUN_STATUSES, OwnerId
from ._version import __version__

C = TypeVar("C", bound=type)
E = TypeVar("E", bound=type[BaseException])

#: Whether the OpenTelemetry API could be imported.
AVAILABLE: bool
try:
    from opentelemetry import context as _context
    from opentelemetry import metrics as _metrics
    from opentelemetry import trace as _trace
    from opentelemetry.metrics import _internal as _metrics_internal

    AVAILABLE = True
except ImportError:  # the extra is not installed: nothing is recorded
    AVAILABLE = False

SUCCESS: Final = "success"
FAILURE: Final = "failure"
INTERRUPT: Final = "interrupt"

#: ``flows_run_claims``'s ``op`` for each claim operation.
CLAIM_OPS: Final = {
    "claim": "claim",
    "claim_and_own": "claim_and_own",
    "activate": "activate",
    "abandon_claim": "abandon_claim",
    "recover_claim": "recover_claim",
    "steal": "steal",
    "claim_next": "claim_next",
    "claim_next_many": "claim_next_many",
}


#: ``runstore_takeovers``'s ``op``: the operations that can take a run over
#: from another owner, with the answer that says they did and the parameter
#: naming who took it.
TAKEOVER_OPS: Final = {
    "claim_and_own": (Activated, "owner"),
    "steal": (Claimed, "claimant"),
}
#: The operations whose spans carry ``runstore.evidence``.
_EVIDENCE_OPS: Final = frozenset({"claim_and_own", "steal", "recover_claim"})


class Operation(NamedTuple):
    """How one public method is recorded.

    ``kind``: ``plain`` (outcome ``success``), ``tagged`` (the answer's class
    in snake case), ``claim``, ``heartbeat``, ``transition``, ``claim_next``,
    ``claim_next_many``, ``heartbeat_many`` (tagged, and counted). ``run``: the parameter holding
    the run id, or a function of the bound call for the attempt store.
    ``host``: the parameter holding the acting owner and its attribute name.
    """

    kind: str
    run: str | Callable[[Callable[[str], Any]], object] | None = None
    host: tuple[str, str] | None = None


_CLAIMANT = "runstore.claimant_host_id"
_OWNER = "runstore.owner_host_id"
_OBSERVER = "runstore.observer_host_id"

#: Every public ``RunStore`` operation of the SQL stores (a test holds this
#: to the protocol).
RUN_STORE_OPERATIONS: Final[dict[str, Operation]] = {
    "create": Operation("plain", "run_id"),
    "get": Operation("plain", "run_id"),
    "lineage": Operation("plain", "run_id"),
    "latest_round": Operation("plain", "run_id"),
    "request_cancel": Operation("tagged", "run_id"),
    "request_cancel_lineage": Operation("tagged", "run_id"),
    "acknowledge_cancel": Operation("plain", "run_id", ("owner", _OWNER)),
    "claim": Operation("claim", "run_id", ("claimant", _CLAIMANT)),
    "claim_and_own": Operation("claim", "run_id", ("owner", _OWNER)),
    "activate": Operation("claim", "run_id", ("claimant", _CLAIMANT)),
    "abandon_claim": Operation("claim", "run_id", ("claimant", _CLAIMANT)),
    "recover_claim": Operation("claim", "run_id", ("observer", _OBSERVER)),
    "steal": Operation("claim", "run_id", ("claimant", _CLAIMANT)),
    "heartbeat": Operation("heartbeat", "run_id", ("owner", _OWNER)),
    "reconfirm": Operation("heartbeat", "run_id", ("owner", _OWNER)),
    "transition_owned": Operation("transition", "run_id", ("owner", _OWNER)),
    "list_runs": Operation("plain"),
    "claim_next": Operation("claim_next", None, ("owner", _OWNER)),
    "claim_next_many": Operation("claim_next_many", None, ("owner", _OWNER)),
    "heartbeat_many": Operation("heartbeat_many", None, ("owner", _OWNER)),
    "purge_settled": Operation("plain"),
    "purge_candidates": Operation("plain"),
    "compact_changes": Operation("plain"),
    "ownership_facts": Operation("plain", "run_id"),
    "revision": Operation("plain"),
    "changes": Operation("plain"),
    "state": Operation("plain"),
    "check_invariants": Operation("plain"),
}


def _attempt_run(name: str) -> Callable[[Callable[[str], Any]], object]:
    """The run id inside an ``Attempt``, ``AttemptId`` or ``FinishAttempt``
    argument (``arg`` reads a bound argument by name)."""

    def run_of(arg: Callable[[str], Any]) -> object:
        value = arg(name)
        ident = getattr(value, "id", value)
        return getattr(ident, "run_id", None)

    return run_of


#: Every public ``AttemptStore`` operation: spans only, no counters.
ATTEMPT_STORE_OPERATIONS: Final[dict[str, Operation]] = {
    "put": Operation("tagged", _attempt_run("attempt"), ("owner", _OWNER)),
    "get": Operation("plain", _attempt_run("attempt_id")),
    "heartbeat": Operation("tagged", "run_id", ("owner", _OWNER)),
    "finish": Operation("tagged", _attempt_run("finish"), ("owner", _OWNER)),
    "patch": Operation("tagged", _attempt_run("attempt_id"), ("owner", _OWNER)),
    "state": Operation("plain"),
    "check_invariants": Operation("plain"),
}

#: Errors an observed package named with ``interrupt_error``: they stop the
#: caller rather than report a failure.
_interrupt_errors: tuple[type[BaseException], ...] = ()
#: Errors whose ``code`` is a store error code, recorded as
#: ``runstore.error_code``: ``RunStoreError`` and those named with
#: ``store_error``.
_store_errors: tuple[type[BaseException], ...] = (RunStoreError,)


def interrupt_error(cls: E) -> E:
    """Record an operation that ``cls`` ends as ``interrupt``, not
    ``failure`` (a class decorator, for an error that stops the caller, such
    as the supervisor's injected ``LeaseLost``)."""
    global _interrupt_errors
    _interrupt_errors = (*_interrupt_errors, cls)
    return cls


def store_error(cls: E) -> E:
    """Record the ``code`` of an error of class ``cls`` as
    ``runstore.error_code`` (a class decorator, for an error root of an
    observed store other than ``RunStoreError``, such as
    ``AttemptStoreError``)."""
    global _store_errors
    _store_errors = (*_store_errors, cls)
    return cls


_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_TAGS: dict[type, str] = {}


def tag(value: object) -> str:
    """The outcome attribute of an answer: its class name in snake case
    (``HeartbeatFresh`` is ``heartbeat_fresh``)."""
    kind = type(value)
    found = _TAGS.get(kind)
    if found is None:
        found = _TAGS[kind] = _CAMEL.sub("_", kind.__name__).lower()
    return found


def error_outcome(error: BaseException) -> str:
    """``interrupt`` for an error that stops the caller rather than reports
    a failure: a ``BaseException`` that is not an ``Exception``
    (``KeyboardInterrupt``, ``SystemExit``, a cancelled task), the
    supervisor's injected ``LeaseLost`` (any error named with
    ``interrupt_error``), and a statement aborted by ``store.interrupt()``;
    else ``failure``."""
    if not isinstance(error, Exception):
        return INTERRUPT
    if isinstance(error, _interrupt_errors):
        return INTERRUPT
    if isinstance(error, RunStoreError) and error.code == "persistence_failed":
        cause = error.cause
        if cause.get("reason") == "interrupted" or cause.get("sqlite_error") == "SQLITE_INTERRUPT":
            return INTERRUPT
    return FAILURE


def _statuses(value: object) -> str:
    """``flows_run_transitions``'s ``to``: the requested status, or
    ``invalid`` for a request that is not a status (refused, never echoed)."""
    return value if type(value) is str and value in RUN_STATUSES else "invalid"


def _host(owner: object) -> str | None:
    if isinstance(owner, OwnerId) and is_identifier(owner.host_id):
        return owner.host_id
    return None


def _identifier(value: object) -> str | None:
    return value if is_identifier(value) else None  # type: ignore[return-value]


def _evidence_kind(evidence: object) -> str | None:
    """The kind of a ``LivenessEvidence`` argument, when it is one of the
    closed set (anything else is left out, never echoed)."""
    kind = getattr(evidence, "kind", None)
    return kind if type(kind) is str and kind in EVIDENCE_KINDS else None


def takeover_kind(name: str, result: object, read: Callable[[str], Any]) -> str | None:
    """The evidence kind when this call of ``name`` took its run over from
    another owner, else None. ``read(parameter)`` reads the call's argument.

    A takeover is a grant (``claim_and_own`` answering ``Activated``,
    ``steal`` answering ``Claimed``) of a run whose expected snapshot names
    an owner other than the taker: the answer means the row matched that
    snapshot, so that owner was displaced (the store recorded ``stolen``).
    A first claim, a re-own of one's own stale run and a self-steal displace
    nobody. Read from the call and its answer, so every path that makes the
    decision (SQLite, PostgreSQL's general and one-round-trip paths) is
    judged alike.
    """
    found = TAKEOVER_OPS.get(name)
    if found is None or type(result) is not found[0]:
        return None
    previous = getattr(read("expected"), "owner", None)
    if not isinstance(previous, OwnerId) or previous == read(found[1]):
        return None
    return _evidence_kind(read("evidence"))


if AVAILABLE:
    from opentelemetry.trace import Status, StatusCode

    _tracer = _trace.get_tracer("runstore", __version__)
    _meter = _metrics.get_meter("runstore", __version__)
    _claims = _meter.create_counter(
        "flows_run_claims", description="Ownership claim compare-and-swaps by operation and outcome"
    )
    _heartbeats = _meter.create_counter(
        "flows_run_heartbeats",
        description="Fenced lease renewals (heartbeat, reconfirm) by outcome",
    )
    _transitions = _meter.create_counter(
        "flows_run_transitions", description="Fenced owned transitions by outcome and target status"
    )
    _supervisor_events = _meter.create_counter(
        "runstore_supervisor_events",
        description="Heartbeat supervisor events (reconfirmed, lapsed, fence_lost, ...)",
    )
    _takeovers = _meter.create_counter(
        "runstore_takeovers",
        description="Runs taken over from another owner, by operation and evidence kind",
    )
    _takeover_cache: dict[tuple[str, str], dict[str, str]] = {}
    _ERROR_STATUS = Status(StatusCode.ERROR)
    # While no tracer provider is set, the API's proxy tracer hands out
    # non-recording spans, and while no meter provider is set its proxy
    # counters drop every measurement. Reading the same globals the proxies
    # read skips asking them (a span start alone costs a context lookup); a
    # provider set later, in code or by an OTEL_PYTHON_*_PROVIDER variable, is
    # seen on the next call. Without those globals (another API version)
    # every call asks the tracer and the counters.
    _TRACES_KNOWN: Final = hasattr(_trace, "_TRACER_PROVIDER")
    _METRICS_KNOWN: Final = hasattr(_metrics_internal, "_METER_PROVIDER")
    _start_span = _tracer.start_span
    _set_span_in_context = _trace.set_span_in_context
    _get_current_span = _trace.get_current_span
    _attach = _context.attach
    _detach = _context.detach

    def _cached(cache: dict[Any, dict[str, str]], key: Any, **attributes: str) -> dict[str, str]:
        """The one attribute dictionary for ``key``: counters get the same
        object every time, so nothing is built per call."""
        found = cache.get(key)
        if found is None:
            found = cache[key] = attributes
        return found

    _heartbeat_cache: dict[str, dict[str, str]] = {}

    def _argument_reader(
        fn: Callable[..., Any],
    ) -> Callable[[str, tuple[Any, ...], dict[str, Any]], Any]:
        """``read(name, args, kwargs)``: a parameter's value in a call of
        ``fn`` (without ``self``), or None when it was not passed."""
        names = list(inspect.signature(fn).parameters)[1:]
        positions = {name: index for index, name in enumerate(names)}

        def read(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            index = positions[name]
            if index < len(args):
                return args[index]
            return kwargs.get(name)

        return read

    def _counter_for(
        name: str, kind: str, read: Callable[[str, tuple[Any, ...], dict[str, Any]], Any]
    ) -> Callable[[str, object, tuple[Any, ...], dict[str, Any]], None] | None:
        """``count(outcome, result, args, kwargs)`` for an operation of this
        kind, or None for one that no counter counts."""
        if kind == "claim" or kind == "claim_next":
            op = CLAIM_OPS[name]
            add_claim = _claims.add
            claim_cache: dict[str, dict[str, str]] = {}
            takes_over = _takes_over(name, read)
            add_takeover = _takeovers.add

            def count_claim(
                outcome: str, result: object, args: tuple[Any, ...], kwargs: dict[str, Any]
            ) -> None:
                found = claim_cache.get(outcome)
                if found is None:
                    found = _cached(claim_cache, outcome, op=op, outcome=outcome)
                add_claim(1, found)
                if takes_over and outcome != FAILURE and outcome != INTERRUPT:
                    evidence = takeover_kind(name, result, lambda p: read(p, args, kwargs))
                    if evidence is not None:
                        add_takeover(
                            1,
                            _cached(_takeover_cache, (op, evidence), op=op, evidence=evidence),
                        )

            return count_claim
        if kind == "claim_next_many":
            op = CLAIM_OPS[name]
            add_claim = _claims.add
            many_cache: dict[str, dict[str, str]] = {}

            def count_many(
                outcome: str, result: object, _args: tuple[Any, ...], _kwargs: dict[str, Any]
            ) -> None:
                # One count per run taken (each as claim_next's), or one
                # ``none`` (failure, interrupt) for the call.
                amount = len(result) if outcome == "activated" and type(result) is list else 1
                found = many_cache.get(outcome)
                if found is None:
                    found = _cached(many_cache, outcome, op=op, outcome=outcome)
                add_claim(amount, found)

            return count_many
        add_heartbeats = _heartbeats.add
        if kind == "heartbeat":

            def count_heartbeat(outcome: str, _result: object, _args: Any, _kwargs: Any) -> None:
                found = _heartbeat_cache.get(outcome)
                if found is None:
                    found = _cached(_heartbeat_cache, outcome, outcome=outcome)
                add_heartbeats(1, found)

            return count_heartbeat
        if kind == "transition":
            add_transition = _transitions.add
            transition_cache: dict[tuple[str, str], dict[str, str]] = {}

            def count_transition(
                outcome: str, _result: object, args: tuple[Any, ...], kwargs: dict[str, Any]
            ) -> None:
                to = _statuses(read("to_status", args, kwargs))
                key = (outcome, to)
                found = transition_cache.get(key)
                if found is None:
                    found = _cached(transition_cache, key, outcome=outcome, to=to)
                add_transition(1, found)

            return count_transition
        if kind == "heartbeat_many":

            def count_each(
                outcome: str, result: object, args: tuple[Any, ...], kwargs: dict[str, Any]
            ) -> None:
                # One count per run: each answer is what heartbeat would give.
                if outcome == SUCCESS and type(result) is dict:
                    tally: dict[str, int] = {}
                    for answer in result.values():
                        key = tag(answer)
                        tally[key] = tally.get(key, 0) + 1
                    for key, amount in tally.items():
                        add_heartbeats(amount, _cached(_heartbeat_cache, key, outcome=key))
                    return
                ids = read("run_ids", args, kwargs)
                amount = len(ids) if isinstance(ids, list | tuple) else 1
                if amount:
                    add_heartbeats(amount, _cached(_heartbeat_cache, outcome, outcome=outcome))

            return count_each
        return None

    def _takes_over(name: str, read: Callable[[str, tuple[Any, ...], dict[str, Any]], Any]) -> bool:
        """Whether calls of ``name`` can take a run over (and have the
        parameters that say so)."""
        found = TAKEOVER_OPS.get(name)
        if found is None:
            return False
        try:
            for parameter in ("expected", found[1], "evidence"):
                read(parameter, (), {})
        except KeyError:
            return False
        return True

    def _outcome_for(kind: str) -> Callable[[object], str]:
        """The outcome attribute of an answer of an operation of this kind."""
        if kind == "plain" or kind == "heartbeat_many":
            return lambda _result: SUCCESS
        if kind == "claim_next":
            return lambda result: "none" if result is None else "activated"
        if kind == "claim_next_many":
            return lambda result: "activated" if result else "none"
        return tag

    def _wrap(
        prefix: str,
        name: str,
        fn: Callable[..., Any],
        op: Operation,
        dialect_of: Callable[[Any], object],
    ) -> Callable[..., Any]:
        """``fn`` recorded as ``op`` says; its decisions untouched.
        ``dialect_of(store)`` names the backend (``db.system``)."""
        span_name = f"{prefix}.{name}"
        parameters = inspect.signature(fn).parameters
        read = _argument_reader(fn)
        kind = op.kind
        run, host = op.run, op.host
        if host is not None and host[0] not in parameters:
            raise TypeError(f"{span_name} has no parameter {host[0]!r}")
        if isinstance(run, str) and run not in parameters:
            raise TypeError(f"{span_name} has no parameter {run!r}")
        count = _counter_for(name, kind, read) if prefix == "RunStore" else None
        outcome_of = _outcome_for(kind)
        given_evidence = prefix == "RunStore" and name in _EVIDENCE_OPS and "evidence" in parameters
        takes_over = prefix == "RunStore" and _takes_over(name, read)

        def annotate(
            span: Any,
            store: Any,
            outcome: str,
            result: object,
            args: tuple[Any, ...],
            kwargs: dict[str, Any],
        ) -> None:
            attributes: dict[str, str | int | bool] = {"runstore.outcome": outcome}
            dialect = dialect_of(store)
            if type(dialect) is str:
                attributes["db.system"] = dialect
            run_id: object = None
            if isinstance(run, str):
                run_id = read(run, args, kwargs)
            elif run is not None:
                run_id = run(lambda parameter: read(parameter, args, kwargs))
            elif kind == "claim_next" and result is not None:
                run_id = getattr(result, "run_id", None)
            rid = _identifier(run_id)
            if rid is not None:
                attributes["runstore.run_id"] = rid
            if host is not None:
                host_id = _host(read(host[0], args, kwargs))
                if host_id is not None:
                    attributes[host[1]] = host_id
            if kind == "transition":
                attributes["runstore.to"] = _statuses(read("to_status", args, kwargs))
            elif kind == "heartbeat_many":
                ids = read("run_ids", args, kwargs)
                if isinstance(ids, list | tuple):
                    attributes["runstore.run_count"] = len(ids)
            elif name == "purge_settled" and type(result) is int:
                attributes["runstore.purged"] = result
            elif name == "list_runs" and result is not None:
                runs = getattr(result, "runs", None)
                if isinstance(runs, tuple | list):
                    attributes["runstore.returned"] = len(runs)
            elif name == "purge_candidates" and isinstance(result, list):
                attributes["runstore.returned"] = len(result)
            if given_evidence:
                evidence = _evidence_kind(read("evidence", args, kwargs))
                if evidence is not None:
                    attributes["runstore.evidence"] = evidence
                if takes_over and takeover_kind(name, result, lambda p: read(p, args, kwargs)):
                    attributes["runstore.takeover"] = True
            span.set_attributes(attributes)

        def traced(span: Any, store: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            token = None
            try:
                # Inside the try: an exception injected right here still ends the span.
                token = _attach(_set_span_in_context(span))
                try:
                    result = fn(store, *args, **kwargs)
                except BaseException as error:
                    outcome = error_outcome(error)
                    if count is not None:
                        count(outcome, None, args, kwargs)
                    annotate(span, store, outcome, None, args, kwargs)
                    code = getattr(error, "code", None)
                    if type(code) is str and _is_store_error(error):
                        span.set_attribute("runstore.error_code", code)
                    else:
                        span.set_attribute("runstore.error_type", type(error).__name__)
                    if outcome == FAILURE:
                        # No description: an error's message may quote values.
                        span.set_status(_ERROR_STATUS)
                    raise
                outcome = outcome_of(result)
                if count is not None:
                    count(outcome, result, args, kwargs)
                annotate(span, store, outcome, result, args, kwargs)
                return result
            finally:
                if token is not None:
                    _detach(token)
                span.end()

        if count is None:

            @functools.wraps(fn)
            def operation(store: Any, *args: Any, **kwargs: Any) -> Any:
                if _TRACES_KNOWN and _trace._TRACER_PROVIDER is None:
                    return fn(store, *args, **kwargs)
                span = _start_span(span_name)
                if span.is_recording():
                    return traced(span, store, args, kwargs)
                return fn(store, *args, **kwargs)

            return operation

        counted = count

        @functools.wraps(fn)
        def counted_operation(store: Any, *args: Any, **kwargs: Any) -> Any:
            if not (_TRACES_KNOWN and _trace._TRACER_PROVIDER is None):
                span = _start_span(span_name)
                if span.is_recording():
                    return traced(span, store, args, kwargs)
            if _METRICS_KNOWN and _metrics_internal._METER_PROVIDER is None:
                return fn(store, *args, **kwargs)
            try:
                result = fn(store, *args, **kwargs)
            except BaseException as error:
                counted(error_outcome(error), None, args, kwargs)
                raise
            counted(outcome_of(result), result, args, kwargs)
            return result

        return counted_operation

    def _is_store_error(error: BaseException) -> bool:
        return isinstance(error, _store_errors)

    def quiet() -> bool:
        """Whether an operation would record nothing now: neither a tracer
        nor a meter provider is set (read as the wrappers read it)."""
        return (_TRACES_KNOWN and _trace._TRACER_PROVIDER is None) and (
            _METRICS_KNOWN and _metrics_internal._METER_PROVIDER is None
        )

    #: The recording wrappers made so far (``uninstrumented`` undoes them).
    _wrappers: dict[int, Callable[..., Any]] = {}

    def _instrument(
        cls: C,
        prefix: str,
        operations: dict[str, Operation],
        dialect_of: Callable[[Any], object],
    ) -> C:
        for name, op in operations.items():
            fn = cls.__dict__[name]
            if id(fn) in _wrappers:
                raise TypeError(f"{cls.__name__}.{name} is instrumented twice")
            wrapper = _wrap(prefix, name, fn, op, dialect_of)
            _wrappers[id(wrapper)] = wrapper
            setattr(cls, name, wrapper)
        return cls

    def _run_store_dialect(store: Any) -> object:
        return store.dialect

    def _attempt_store_dialect(store: Any) -> object:
        return store._store.dialect

    def instrument_run_store(cls: C) -> C:
        """Record every ``RunStore`` operation of ``cls`` (applied once, to
        ``SqlRunStore``)."""
        return _instrument(cls, "RunStore", RUN_STORE_OPERATIONS, _run_store_dialect)

    def instrument_attempt_store(cls: C) -> C:
        """Record every ``AttemptStore`` operation (spans only)."""
        return _instrument(cls, "AttemptStore", ATTEMPT_STORE_OPERATIONS, _attempt_store_dialect)

    def current_span() -> object | None:
        """The span current in this thread (recording or not), for a
        supervisor to report its events on."""
        return _get_current_span()

    def supervisor_event(
        event: str,
        supervisor: str,
        span: object | None,
        run_id: str,
        unconfirmed_ms: int | None = None,
    ) -> None:
        """Count a supervisor event and add it to ``span`` (the span current
        where supervision began) when that span is still recording."""
        _supervisor_events.add(
            1, _cached(_event_cache, (event, supervisor), event=event, supervisor=supervisor)
        )
        if span is None or not span.is_recording():  # type: ignore[attr-defined]
            return
        attributes: dict[str, str | int] = {"runstore.supervisor": supervisor}
        rid = _identifier(run_id)
        if rid is not None:
            attributes["runstore.run_id"] = rid
        if unconfirmed_ms is not None:
            attributes["runstore.unconfirmed_ms"] = unconfirmed_ms
        span.add_event(f"runstore.lease.{event}", attributes)  # type: ignore[attr-defined]

    _event_cache: dict[tuple[str, str], dict[str, str]] = {}

    def uninstrumented(cls: C) -> C:
        """A subclass of ``cls`` whose operations are the bare ones (for the
        overhead benchmark's baseline only)."""
        bare = {
            name: fn.__wrapped__
            for klass in reversed(cls.__mro__)
            for name, fn in vars(klass).items()
            if id(fn) in _wrappers
        }
        return type(f"Bare{cls.__name__}", (cls,), bare)  # type: ignore[return-value]

else:

    def instrument_run_store(cls: C) -> C:
        return cls

    def quiet() -> bool:
        return True

    def instrument_attempt_store(cls: C) -> C:
        return cls

    def current_span() -> object | None:
        return None

    def supervisor_event(
        event: str,
        supervisor: str,
        span: object | None,
        run_id: str,
        unconfirmed_ms: int | None = None,
    ) -> None:
        return None

    def uninstrumented(cls: C) -> C:
        return cls
