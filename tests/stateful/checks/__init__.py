"""Tests of the checks (``runstore.stateful._checks``): each fires on what it
exists to catch."""
