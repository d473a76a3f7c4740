"""Tests of ``runstore.postgres`` on a real server: opening, schema,
migrations, transactions, faults, failover and processes on many hosts."""
