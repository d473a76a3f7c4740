"""Tests of concurrent histories and the linearizability checker
(``runstore.stateful._histories``)."""
