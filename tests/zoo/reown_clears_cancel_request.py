"""A store whose claim_and_own, when an owner re-owns its own stale run (a
release and a fresh grant, a new generation), starts that generation clean
and clears the run's cancellation request with it: a request made during
the old generation is lost, and the run goes on as if nobody had asked.
contract.md: a cancellation request stays on the run until it settles; only
an acknowledgement answers it."""

from runstore.sqlite import SqliteRunStore

from ._stores import IN_MEMORY, open_as

KIND = "store"
EXPECTED_CHECK = "StateMismatch"
capabilities = IN_MEMORY
#: The explorer's zoo: the kind of bug, and the scope and number of moves after its
#: setup at which ``explore`` finds it (tests/stateful/explore/test_explore_zoo.py).
BUG_KIND = "state-lost"
EXPLORE_SCOPE = "medium"
SHORTEST = 4

_FORGET_REQUEST = """
UPDATE flows_runs SET cancel_requested_at_ms = NULL
WHERE run_id = ?1 AND cancel_requested_at_ms IS NOT NULL
"""


class ReownClearsRequest(SqliteRunStore):
    def _claim_and_own_in(self, tx, rid, previous, who, now, proof, params):
        outcome = super()._claim_and_own_in(tx, rid, previous, who, now, proof, params)
        if previous is not None and previous == who and type(outcome).__name__ == "Activated":
            # The bug: the new generation is started clean, request included.
            tx.connection.execute(_FORGET_REQUEST, (rid,))
        return outcome


def factory(clock, path):
    return open_as(ReownClearsRequest, clock)
