"""Hypothesis settings profiles: ``ci``, ``dev`` and ``deep``.

``ci`` is derandomized and bounded, keeps no example database and prints the
reproduction blob, so a CI run is repeatable. ``dev`` is the everyday
randomized profile. ``deep`` is for long hunts. ``load_profile()`` registers
all three and loads the one named by ``HYPOTHESIS_PROFILE`` (default ``ci``).
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

PROFILE_NAMES = ("ci", "dev", "deep")


def register_profiles() -> None:
    """Register ``ci``, ``dev`` and ``deep``, each over Hypothesis's own
    ``default`` profile (a profile registered without a parent inherits the
    one loaded at that moment, so registering again after loading ``deep``
    would carry its 100 steps into ``ci``)."""
    base = settings.get_profile("default")
    settings.register_profile(
        "ci",
        parent=base,
        derandomize=True,
        database=None,
        print_blob=True,
        max_examples=100,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    settings.register_profile(
        "dev",
        parent=base,
        max_examples=200,
        deadline=None,
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow],
    )
    settings.register_profile(
        "deep",
        parent=base,
        max_examples=5000,
        stateful_step_count=100,
        deadline=None,
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow],
    )


def _chosen(name: str | None) -> str:
    chosen = name or os.environ.get("HYPOTHESIS_PROFILE") or "ci"
    if chosen not in PROFILE_NAMES:
        raise ValueError(f"unknown Hypothesis profile {chosen!r}; use one of {PROFILE_NAMES}")
    return chosen


def load_profile(name: str | None = None) -> str:
    """Register the profiles and load ``name`` (or ``$HYPOTHESIS_PROFILE``, or ``ci``)."""
    register_profiles()
    chosen = _chosen(name)
    settings.load_profile(chosen)
    return chosen


def profile_settings(name: str) -> settings:
    """The settings of the profile ``name`` (``ci``, ``dev`` or ``deep``),
    without loading it: what every other Hypothesis test of the process runs
    under stays as it was."""
    register_profiles()
    return settings.get_profile(_chosen(name))
