"""Tests of ``runstore.attempts``: durable step attempts fenced by the owner."""
