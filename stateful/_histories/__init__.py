"""Concurrent histories: recorded, generated, and judged for linearizability.

Belongs here: recording what concurrent clients saw (``_history``) and its
JSON form (``_codec``), the sequential specification (``_spec``), the
linearizability search (``_linearize``), the rules judged across objects (a
``heartbeat_many`` is atomic, ``claim_next`` takes the oldest: ``_rules``),
the readable report of a history that fails (``_report``) and its HTML
timeline (``_timeline``), histories generated from the model
(``_generate``) and one owner's random workload (``_workload``).

May import: ``runstore``, ``runstore.model`` and ``_base``. Never a runner:
the checker judges a history, whoever recorded it.
"""
