"""The differential machines: the reference model and a system under test,
side by side, step by step.

Belongs here: the run-store machine (``_run_store``), the attempt machine
(``_attempts``), the strategy machine (``_consensus``), the authority check
(``_authority``), and what steers them into rare situations and records
what they reached (``_reach``, ``_steering``, ``_tour``).

May import: ``runstore``, ``runstore.model``, ``_base``, ``_targets`` and
``_checks``.
"""
