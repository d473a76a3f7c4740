"""Fail early, and clearly, when the ``conformance`` extra is not installed."""

import importlib

try:
    for _name in ("hypothesis", "pytest"):
        importlib.import_module(_name)
except ImportError as missing:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "runstore.stateful needs the conformance extra (Hypothesis and pytest): "
        "python -m pip install -e '.[conformance]' in the runstore checkout, or the "
        "runstore wheel installed with [conformance]",
        name=missing.name,
    ) from None
