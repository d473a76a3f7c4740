"""The asyncio face of the store (``runstore.aio``): ``AsyncRunStore`` and ``AsyncAttemptStore``.

``runstore.aopen(target)`` opens one. Every operation is the synchronous
store's own (the store ``runstore.open`` gives: one admission, one set of
decisions, one SQL text, the one-round-trip path on PostgreSQL), run on a
thread of its own so that the event loop never waits on the database; a store on a loop's
thread refuses to run at all. How many threads, and how a cancelled call
ends, are said on ``AsyncRunStore`` and on the asyncio page of the docs.

May import: the core modules, the SQL store the backends share and
``runstore.attempts``; never a backend (``runstore.aopen`` opens the
synchronous stores and hands them in).
"""

from ._attempts import AsyncAttemptStore as AsyncAttemptStore
from ._lanes import DEFAULT_CANCEL_GRACE_S as DEFAULT_CANCEL_GRACE_S
from ._store import WRITES as WRITES
from ._store import AsyncRunStore as AsyncRunStore

__all__ = ["DEFAULT_CANCEL_GRACE_S", "WRITES", "AsyncAttemptStore", "AsyncRunStore"]
