"""Campaigns: what runs the machines, the checks and the histories.

Belongs here: ``run_conformance`` and its default budget, the one-screen
summary of a failure, regression files and the judge they replay, ``runstore
fuzz`` and ``runstore replay``, and the driver of ``runstore torture``.

May import: every other room of ``runstore.stateful``; no room imports it
but the package's face.
"""
