"""Tests of ``runstore.sqlite``: the SQLite adapter's files, transactions,
migrations, faults and processes."""
