"""Exhaustive exploration of small scopes (issue 25).

The scopes (finite domains of operations, owners, runs and clock readings),
the canonical form of a reference state, the breadth-first walk over the
reference model that checks every invariant of the suite in every reachable
state, and the replay of the walked graph against a store or a strategy,
comparing each transition's outcome and resulting state with the model's.

May import: the library (``runstore``, its backends, ``runstore.attempts``,
``runstore.model``) and the rooms ``stateful._base``, ``stateful._targets``,
``stateful._checks`` and ``stateful._machines`` (for the comparisons the
machines make); never the histories or the campaigns (the campaign glue,
``explore``, imports this room).
"""
