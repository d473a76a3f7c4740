"""The backend-neutral SQL store (private).

``SqlRunStore`` makes every decision once: admission, the classify query, the
strategy call, the guarded write, the fact. It runs each backend's named
queries (``runstore.sqlite._queries``, ``runstore.postgres._queries``, the
same names) through that backend's transaction manager; decoding and the
invariant checks are shared too, and so is the migration machinery
(``_migrations``: the step, the recorded history, the refusal of a schema
this version must not open). ``runstore.sqlite`` and ``runstore.postgres``
hold each backend's connection, transactions, migration texts, error mapping
and SQL text, and hand their statements in: the run queries and attempt
statements with the store, the lease statements with each transaction.

May import: ``runstore.consensus`` and the core modules of ``runstore``; never
a backend, whose code it runs only as the backend hands it in.
"""
