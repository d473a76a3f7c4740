"""What the suite runs against: the shipped stores and strategies by name.

Belongs here: the built-in targets and the factory types a third party hands
in (``_builtin``; the async ones ``_aio``, and the migrated template file
the file targets copy, ``_template``), the synchronous stand-in the machines
drive an async store through (``_blocking``), probing what a factory builds
(``_probe``), and the throwaway PostgreSQL servers the suite and the tests
start (``_postgres``, ``_pgserver``).

May import: ``runstore``, ``runstore.model`` and ``_base``.
"""
