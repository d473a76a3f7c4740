"""Programs that depend on the system under test alone.

Every machine calls ``programs_independent_of_callers_code`` first in its
``__init__``, so that a derandomized run draws the same programs whatever
else the process has imported.
"""

from __future__ import annotations


def _no_constant(*_args: object, **_kwargs: object) -> None:
    return None


def programs_independent_of_callers_code() -> None:
    """Keep the current example's programs independent of what else the
    process has imported. Called first by every machine's ``__init__``
    (before the example draws anything).

    Hypothesis mixes literals it finds in the source of every local module
    loaded (``int`` and ``str`` constants of the caller's code, of this
    suite, of a test run's other test modules) into the choices it
    generates. A derandomized run then changes its programs whenever any of
    those modules changes or another one is imported, so a verdict would
    depend on code that has nothing to do with the store under test
    (importing one more module of the suite lost 27 reach cells and let
    planted bugs escape). The current example's provider is told to draw no such
    constants; outside a Hypothesis example, or with a provider that has no
    such hook, nothing changes."""
    try:
        from hypothesis.control import current_build_context

        provider = current_build_context().data.provider
    except Exception:  # not inside an example
        return
    if callable(getattr(type(provider), "_maybe_draw_constant", None)):
        provider._maybe_draw_constant = _no_constant  # type: ignore[attr-defined]
