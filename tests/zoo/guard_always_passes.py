"""A strategy whose ``guard`` never raises: every fenced write is admitted by
the strategy (the store's row check still refuses most of them)."""

from runstore.consensus import SqlConsensus

KIND = "consensus"
EXPECTED_CHECK = "OutcomeMismatch"


class OpenGate(SqlConsensus):
    def guard(self, tx, run_id, owner):
        return None


def factory():
    return OpenGate()
