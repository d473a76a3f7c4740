"""Tests of ``runstore.ownership``: supervision, liveness and evidence."""
