"""Tests of the campaigns (``runstore.stateful._campaigns``): conformance and
its budget, fuzz, regression files, torture, and the zoos that must be caught."""
