"""Tests of ``runstore.worker``: endings, finding work, stopping, and fleets of real processes."""
