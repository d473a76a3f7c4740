"""The suite's vocabulary, shared by every other room of ``runstore.stateful``.

Belongs here: operations as data (``_steps``), the small world the machines
play in (``_domain``), ``Capabilities``, the differential views and mismatch
failures (``_compare``), watching a running example (``_observe``), and the
Hypothesis profiles and settings helpers (``_profiles``).

May import: ``runstore``, ``runstore.model`` and Hypothesis; nothing else of
``runstore.stateful``.
"""
