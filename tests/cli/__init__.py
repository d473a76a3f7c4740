"""Tests of ``runstore.cli``: the operator commands and the demo."""
