"""Tests of ``runstore.model``, the reference model, and of its independence
from the stores."""
