"""Admission of a consensus strategy, by shape.

A strategy is any object whose ten required methods (``_types.Consensus``)
are callable; it need not inherit from anything, so a wrapper that delegates
through ``__getattr__`` is a strategy too. Opening a store checks this once,
so a wrong argument (``consensus="sql"``, a bare object, a class instead of
an instance) is refused at open with ``invalid_run`` naming ``consensus`` and
the missing methods, instead of failing at the first claim with a raw
``AttributeError``. Every adapter's ``open`` uses this one check.
"""

from __future__ import annotations

from typing import Any, Final

from .._errors import InvalidRunError

#: The methods a strategy must offer (``on_open`` is optional).
REQUIRED_METHODS: Final = (
    "claim",
    "steal",
    "activate",
    "heartbeat",
    "reconfirm",
    "recover",
    "release_claim",
    "release_ownership",
    "guard",
    "lease",
)


def missing_methods(value: object, names: tuple[str, ...]) -> list[str]:
    """The names among ``names`` that ``value`` does not offer as callables.

    An attribute whose lookup raises counts as missing (the error itself is
    dropped: a strategy's own text never reaches a message).
    """
    missing: list[str] = []
    for name in names:
        try:
            found = callable(getattr(value, name))
        except Exception:
            found = False
        if not found:
            missing.append(name)
    return missing


def admit_consensus(method: str, consensus: object) -> Any:
    """``consensus`` if it has every required method, else ``invalid_run``.

    The cause names the field (``consensus``) and lists the missing methods;
    the message says the same in words. A class passed where an instance is
    expected is refused too (its methods would need a ``self``).
    """
    if isinstance(consensus, type):
        missing = list(REQUIRED_METHODS)
        detail = "must be a strategy instance, not a class"
    else:
        missing = missing_methods(consensus, REQUIRED_METHODS)
        detail = "must be a consensus strategy (missing or not callable: {})"
        detail = detail.format(", ".join(missing))
    if missing:
        raise InvalidRunError(
            method, {"field": "consensus", "detail": detail, "missing": missing}
        ) from None
    return consensus
