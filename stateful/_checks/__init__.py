"""The checks the machines apply, and the checks that stand as machines alone.

Belongs here: the fence and attempt invariants as pure functions over
states; the admission table (``_malformed``); raw column edits and the
oversized checkpoint, judged on a copy of a database; the faults for the
fault rule; and the stand-alone checks of opening files, of a PostgreSQL
session and schema option, and of the server clock.

May import: ``runstore``, ``runstore.model``, ``_base`` and ``_targets``.
"""
