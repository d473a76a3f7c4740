"""Tests of ``runstore.consensus``: the shipped strategies."""
