"""Async store factories for ``runstore torture --async --store ...``
(``test_torture_async.py``), each answering ``runstore.aopen``'s store on the
file with one thing planted:

- ``classifies_before_begin``: the SQL store behind it is the zoo's
  ``race_classify_before_begin`` (a claim that reads its predicate outside its
  write transaction), a bug only racing processes show;
- ``unrecorded_clock``: the store reads the owner's inner clock, not the
  recording one it was given, so no reading reaches the history (what an async
  worker would record were the clock not handed each call).
"""

from __future__ import annotations

import runstore

from ...zoo.race_classify_before_begin import ClassifiesBeforeBegin


async def classifies_before_begin(clock, path):
    store = await runstore.aopen(path, clock=clock, durability="normal")
    for sync in store.sync_stores:
        sync.__class__ = ClassifiesBeforeBegin
    return store


async def unrecorded_clock(clock, path):
    # The coordinator opens it too, on a clock of its own that records nothing.
    inner = getattr(clock, "inner", clock)
    return await runstore.aopen(path, clock=inner, durability="normal")
