"""Fail early, and clearly, when the ``conformance`` extra is not installed."""

import importlib

from runstore._version import install_hint

try:
    for _name in ("hypothesis", "pytest"):
        importlib.import_module(_name)
except ImportError as missing:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "runstore.stateful needs the conformance extra (Hypothesis and pytest): "
        + install_hint("conformance"),
        name=missing.name,
    ) from None
