"""Tests of the ``runstore`` package itself: the protocol's contract on every
store (upstream's ported cases and our decisions beyond them), input
admission, opening, errors, telemetry, and the public surface."""
