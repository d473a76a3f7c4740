"""Tests of the differential machines (``runstore.stateful._machines``)."""
