"""Tests of ``runstore.stateful``, one folder per room of the suite."""
