"""Reachable cells of the reach tables (``_reach``) that the default budget does
not reach yet: open work, listed so the tables and the reach test say so.

Regenerate with ``python -m runstore.stateful._campaigns._reach_measure``
(it prints this tuple last); a cell the default run now reaches must be
dropped, and a new gap is a regression of the steering or of the reach tour
(``_tour``, which reaches the cells the programs miss).

The default run reaches every reachable cell: the nineteen cells, each a lost
competition or a refusal, that its programs stopped reaching when
``claim_next_many``'s rule joined the run-store machine are reached by the
tour again (``_tour.TOUR``, its lineage step and its refusals).
"""

KNOWN_GAPS: tuple[str, ...] = ()
