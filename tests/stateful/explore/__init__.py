"""Tests of exhaustive exploration (``runstore.stateful._explore`` and ``explore``)."""
